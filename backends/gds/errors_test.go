// errors_test.go tests the mapping of cuFile statuses and returns to
// typed errors.

package gds

import (
	"errors"
	"strings"
	"syscall"
	"testing"
)

func TestStatusError(t *testing.T) {
	if err := statusError("f", 0, ErrIO); err != nil {
		t.Fatalf("success mapped to %v", err)
	}
	raw := uint64(uint32(OpCUDADriverError)) | uint64(700)<<32
	err := statusError("cuFileBufRegister", raw, ErrBufferRegistration)
	var ce *Error
	if !errors.As(err, &ce) || ce.CUResult != 700 || !errors.Is(err, OpCUDADriverError) || !errors.Is(err, ErrBufferRegistration) {
		t.Fatalf("got %v (%+v)", err, ce)
	}
	for _, want := range []string{"cuFileBufRegister", "CU_FILE_CUDA_DRIVER_ERROR", "5011", "CUresult 700"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("%q lacks %q", err, want)
		}
	}
	if err := statusError("cuFileHandleRegister", uint64(OpDIONotSet), ErrIneligible); !errors.Is(err, ErrNotDirect) {
		t.Errorf("CU_FILE_DIO_NOT_SET = %v, want ErrNotDirect", err)
	}
	if err := statusError("cuFileHandleRegister", uint64(OpHandleNotRegistered), ErrIneligible); !errors.Is(err, ErrIneligible) || !strings.Contains(err.Error(), "CU_FILE_HANDLE_NOT_REGISTERED (5027)") {
		t.Errorf("5027 = %v, want ErrIneligible naming CU_FILE_HANDLE_NOT_REGISTERED (5027)", err)
	}
}

func TestIOError(t *testing.T) {
	err := ioError("cuFileRead", -1, syscall.EIO)
	if !errors.Is(err, ErrIO) || !errors.Is(err, syscall.EIO) {
		t.Fatalf("-1+EIO = %v", err)
	}
	err = ioError("cuFileRead", -int64(OpDIONotSet), 0)
	if !errors.Is(err, ErrNotDirect) || !errors.Is(err, OpDIONotSet) {
		t.Fatalf("-5020 = %v", err)
	}
	if got := OpError(5999).Name(); got != "CUfileOpError(5999)" {
		t.Fatalf("unknown code named %q", got)
	}
}

func TestReceipt(t *testing.T) {
	if _, term := receipt(ioEvent{cookie: 3, status: statusPending}); term {
		t.Fatal("pending is terminal")
	}
	r, term := receipt(ioEvent{cookie: 3, status: statusComplete, ret: 4096})
	if !term || r.N != 4096 || r.Err != nil || r.Cookie != 3 {
		t.Fatalf("complete = %+v", r)
	}
	r, _ = receipt(ioEvent{cookie: 4, status: statusCanceled})
	if !errors.Is(r.Err, ErrCanceled) {
		t.Fatalf("canceled = %+v", r)
	}
	neg := -int64(opBase + 44)
	r, _ = receipt(ioEvent{cookie: 5, status: statusFailed, ret: uint64(neg)})
	if !errors.Is(r.Err, ErrIO) || !strings.Contains(r.Err.Error(), "CU_FILE_IO_ERROR") {
		t.Fatalf("failed = %v", r.Err)
	}
}
