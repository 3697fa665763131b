// load_test.go checks loading and the error forms without a GPU: a missing
// library, a library that is not a driver, the override variable, and the
// error text.

package cuda

import (
	"errors"
	"os"
	"strings"
	"testing"
)

func TestOpenMissingLibraryIsUnavailable(t *testing.T) {
	_, err := Open(Options{Library: "/nonexistent/dir/libcuda.so.1"})
	if !errors.Is(err, ErrUnavailable) {
		t.Fatalf("Open = %v, want ErrUnavailable", err)
	}
	for _, want := range []string{LibraryName, "/nonexistent/dir/libcuda.so.1"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not name %q", err, want)
		}
	}
}

func TestOpenOverrideFromEnvironment(t *testing.T) {
	t.Setenv(EnvLibrary, "/nonexistent/override/libcuda.so.1")
	_, err := Open(Options{})
	if !errors.Is(err, ErrUnavailable) {
		t.Fatalf("Open = %v, want ErrUnavailable", err)
	}
	for _, want := range []string{EnvLibrary, "/nonexistent/override/libcuda.so.1"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not name %q", err, want)
		}
	}
}

func TestOpenLibraryWithoutDriverSymbols(t *testing.T) {
	const libc = "/lib/x86_64-linux-gnu/libc.so.6"
	if _, err := os.Stat(libc); err != nil {
		t.Skipf("no %s to stand in for a non-driver library: %v", libc, err)
	}
	_, err := Open(Options{Library: libc})
	if !errors.Is(err, ErrUnavailable) {
		t.Fatalf("Open(libc) = %v, want ErrUnavailable", err)
	}
	if !strings.Contains(err.Error(), "missing symbols cuInit") {
		t.Errorf("error %q does not name the missing symbols", err)
	}
}

// TestOpenSearchNamesPlaces runs where there is no driver (CI): the error
// names the library and every fallback directory.
func TestOpenSearchNamesPlaces(t *testing.T) {
	t.Setenv(EnvLibrary, "")
	drv, err := Open(Options{})
	if err == nil {
		t.Skipf("a driver is installed here (%s, version %d)", drv.Path(), drv.Version())
	}
	if os.Getenv(envRequire) == "gpu" {
		t.Fatalf("%s=gpu but Open failed: %v", envRequire, err)
	}
	if !errors.Is(err, ErrUnavailable) {
		t.Fatalf("Open = %v, want ErrUnavailable", err)
	}
	for _, want := range append([]string{LibraryName}, fallbackDirs...) {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not name %q", err, want)
		}
	}
}

func TestErrorText(t *testing.T) {
	var err error = &Error{Op: "cuMemAlloc(1073741824 bytes)", Code: ErrorOutOfMemory, Name: "CUDA_ERROR_OUT_OF_MEMORY"}
	if got, want := err.Error(), "cuMemAlloc(1073741824 bytes): CUDA_ERROR_OUT_OF_MEMORY (2)"; got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}
	if !errors.Is(err, ErrorOutOfMemory) || errors.Is(err, ErrorInvalidValue) {
		t.Errorf("errors.Is does not match on the code")
	}
	// Without the driver's name, the fallback table names the result.
	err = &Error{Op: "cuEventQuery(cuda:0)", Code: 700}
	if got, want := err.Error(), "cuEventQuery(cuda:0): CUDA_ERROR_ILLEGAL_ADDRESS (700)"; got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}
	if got, want := Result(12345).Error(), "CUresult(12345) (12345)"; got != want {
		t.Errorf("unknown Result = %q, want %q", got, want)
	}
}

func TestIPCHandleHex(t *testing.T) {
	var h IPCHandle
	for i := range h {
		h[i] = byte(i*7 + 3)
	}
	s := h.String()
	if len(s) != 128 {
		t.Fatalf("hex form has %d digits", len(s))
	}
	got, err := ParseIPCHandle(strings.ToUpper(s))
	if err != nil || got != h {
		t.Fatalf("ParseIPCHandle(String()) = %x, %v", got, err)
	}
	for _, bad := range []string{"", "abc", s[:126], s + "00", s[:127] + "g"} {
		if _, err := ParseIPCHandle(bad); !errors.Is(err, ErrInvalid) {
			t.Errorf("ParseIPCHandle(%q) = %v, want ErrInvalid", bad, err)
		}
	}
	if _, err := ParseIPCHandle("abc"); !strings.Contains(err.Error(), "has 3 hex digits, want 128") {
		t.Errorf("error %q does not name the length", err)
	}
}
