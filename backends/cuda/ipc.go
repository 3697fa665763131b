// ipc.go owns CUDA IPC: exporting a device allocation as a 64-byte handle
// another process can open, opening such a handle, and the hex text form
// the mount accepts (cuda_ipc_handle).
//
// cuIpcOpenMemHandle takes the 64-byte CUipcMemHandle by value. Under the
// System V x86-64 ABI a struct over 16 bytes is passed in memory: its
// bytes go to the stack while the following integer argument (Flags)
// still takes the next register. So the call passes pdptr and Flags as
// the first two integer arguments, four unused registers, then the
// handle's eight words, which the trampoline pushes onto the stack in
// order.

package cuda

import (
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"unsafe"
)

// IPCHandleSize is sizeof(CUipcMemHandle).
const IPCHandleSize = 64

const ipcLazyEnablePeerAccess = 0x1 // CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS

// IPCHandle is an exported device allocation.
type IPCHandle [IPCHandleSize]byte

// String is the handle as 128 lowercase hex digits.
func (h IPCHandle) String() string { return hex.EncodeToString(h[:]) }

// ParseIPCHandle decodes the hex form (128 digits, any case).
func ParseIPCHandle(s string) (IPCHandle, error) {
	var h IPCHandle
	if len(s) != 2*IPCHandleSize {
		return h, fmt.Errorf("%w: cuda ipc handle %q has %d hex digits, want %d", ErrInvalid, truncate(s), len(s), 2*IPCHandleSize)
	}
	if _, err := hex.Decode(h[:], []byte(s)); err != nil {
		return IPCHandle{}, fmt.Errorf("%w: cuda ipc handle %q: %v", ErrInvalid, truncate(s), err)
	}
	return h, nil
}

func truncate(s string) string {
	if len(s) > 140 {
		return s[:140] + "..."
	}
	return s
}

// IPCHandle exports p, the base of an allocation from Alloc.
func (d *Device) IPCHandle(p DevicePtr) (IPCHandle, error) {
	var h IPCHandle
	err := d.do(func() error {
		if r := d.drv.call(d.drv.fn.ipcGetMemHandle, uintptr(unsafe.Pointer(&h[0])), uintptr(p)); r != Success {
			return d.drv.errorf(r, "cuIpcGetMemHandle(%#x on %s)", uint64(p), d)
		}
		return nil
	})
	return h, err
}

// OpenIPC maps another process's allocation into this device's context,
// enabling peer access lazily if it lives on another device. Close it
// with CloseIPC. A handle cannot be opened by the process that made it.
func (d *Device) OpenIPC(h IPCHandle) (DevicePtr, error) {
	var w [IPCHandleSize / 8]uintptr
	for i := range w {
		w[i] = uintptr(binary.LittleEndian.Uint64(h[8*i:]))
	}
	var p DevicePtr
	err := d.do(func() error {
		r := d.drv.call(d.drv.fn.ipcOpenMemHandle, uintptr(unsafe.Pointer(&p)), ipcLazyEnablePeerAccess,
			0, 0, 0, 0, w[0], w[1], w[2], w[3], w[4], w[5], w[6], w[7])
		if r != Success {
			return d.drv.errorf(r, "cuIpcOpenMemHandle(%s on %s)", h.String()[:16]+"...", d)
		}
		return nil
	})
	if err != nil {
		return 0, err
	}
	d.drv.live.IPCOpens.Add(1)
	return p, nil
}

// CloseIPC unmaps an address from OpenIPC.
func (d *Device) CloseIPC(p DevicePtr) error {
	err := d.do(func() error {
		if r := d.drv.call(d.drv.fn.ipcCloseMemHandle, uintptr(p)); r != Success {
			return d.drv.errorf(r, "cuIpcCloseMemHandle(%#x on %s)", uint64(p), d)
		}
		return nil
	})
	if err == nil {
		d.drv.live.IPCOpens.Add(-1)
	}
	return err
}
