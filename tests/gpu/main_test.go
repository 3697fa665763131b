package gpu

import (
	"bytes"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/orbitefs/orbitefs/backends/cuda"
)

// TestMain runs the IPC exporter when started as TestIPCImport's child.
func TestMain(m *testing.M) {
	if os.Getenv("ORBITEFS_IPC_CHILD") != "" {
		if err := ipcChild(os.Getenv("ORBITEFS_IPC_HANDLE"), os.Getenv("ORBITEFS_IPC_DONE"), os.Getenv("ORBITEFS_IPC_WANT")); err != nil {
			fmt.Fprintln(os.Stderr, "ipc child:", err)
			os.Exit(3)
		}
		os.Exit(0)
	}
	if os.Getenv("ORBITEFS_IDLE_CHILD") != "" {
		if err := idleChild(os.Getenv("ORBITEFS_IDLE_FILE")); err != nil {
			fmt.Fprintln(os.Stderr, "idle child:", err)
			os.Exit(3)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// ipcChild allocates 1 MiB, publishes its IPC handle, waits until the
// parent filled it, and checks the bytes.
func ipcChild(handleFile, done, want string) error {
	drv, err := cuda.Open(cuda.Options{})
	if err != nil {
		return err
	}
	dev, err := drv.Device(0)
	if err != nil {
		return err
	}
	p, err := dev.Alloc(1 << 20)
	if err != nil {
		return err
	}
	defer dev.Free(p)
	h, err := dev.IPCHandle(p)
	if err != nil {
		return err
	}
	if err := os.WriteFile(handleFile+".tmp", []byte(h.String()), 0o600); err != nil {
		return err
	}
	os.Rename(handleFile+".tmp", handleFile)
	for end := time.Now().Add(2 * time.Minute); ; {
		if _, err := os.Stat(done); err == nil {
			break
		}
		if time.Now().After(end) {
			return fmt.Errorf("parent never finished")
		}
		time.Sleep(10 * time.Millisecond)
	}
	got := make([]byte, 1<<20)
	if err := dev.CopyDtoH(got, p); err != nil {
		return err
	}
	w, err := os.ReadFile(want)
	if err != nil {
		return err
	}
	if !bytes.Equal(got, w) {
		return fmt.Errorf("the imported region's bytes differ on the exporter's side")
	}
	return nil
}

func startChild(t *testing.T, exe, handleFile, done, want string) *exec.Cmd {
	t.Helper()
	c := exec.Command(exe, "-test.run=^$")
	c.Env = append(os.Environ(), "ORBITEFS_IPC_CHILD=1", "ORBITEFS_IPC_HANDLE="+handleFile, "ORBITEFS_IPC_DONE="+done, "ORBITEFS_IPC_WANT="+want)
	c.Stderr = os.Stderr
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Process.Kill() })
	return c
}

// waitFile waits for another process to publish path (a rename, so it
// appears whole).
func waitFile(t *testing.T, path string) []byte {
	t.Helper()
	for end := time.Now().Add(time.Minute); time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
		if b, err := os.ReadFile(path); err == nil {
			return b
		}
	}
	t.Fatalf("%s never appeared", path)
	return nil
}

func mustHex(t *testing.T, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(s)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
