// ipccopy.go owns what the engine's CUDA IPC executor needs from the
// driver beyond ipc.go: device-to-device copies queued on a stream
// (cuMemcpyDtoDAsync), and an engine allocation's export handle.
//
// With unified addressing a mapping opened by cuIpcOpenMemHandle lives in
// the opening device's context, so one DtoD copy on that device's stream
// moves bytes between local memory and the mapping, also when the
// exporter's memory sits on another device (peer access was enabled
// lazily at open).

package cuda

import "fmt"

// DtoDAsync queues a copy of n bytes from src to dst, both device
// addresses valid in s's context.
func (s *Stream) DtoDAsync(dst, src DevicePtr, n int) error {
	if n == 0 {
		return nil
	}
	if n < 0 {
		return fmt.Errorf("%w: device copy of %d bytes on %s", ErrInvalid, n, s.dev)
	}
	if err := s.check("DtoDAsync"); err != nil {
		return err
	}
	d := s.dev
	if err := d.bind(); err != nil {
		return err
	}
	defer d.unbind()
	if r := d.drv.call(d.drv.fn.memcpyDtoDAsync, uintptr(dst), uintptr(src), uintptr(n), s.h); r != Success {
		return d.drv.errorf(r, "cuMemcpyDtoDAsync(%#x <- %#x, %d bytes on %s)", uint64(dst), uint64(src), n, d)
	}
	return nil
}

// DtoD queues a device-to-device copy (engine.DeviceCopier).
func (s *stream) DtoD(dst, src, n uint64) error {
	return s.s.DtoDAsync(DevicePtr(dst), DevicePtr(src), int(n))
}

// IPCHandle exports the allocation for another process on this host
// (engine.IPCExporter). An imported mapping cannot be exported again.
func (m *deviceMemory) IPCHandle() ([]byte, error) {
	if m.ipc {
		return nil, fmt.Errorf("%w: %#x on %s is an imported CUDA IPC mapping; only its owner exports it", ErrInvalid, uint64(m.p), m.d)
	}
	h, err := m.d.IPCHandle(m.p)
	if err != nil {
		return nil, err
	}
	return h[:], nil
}
