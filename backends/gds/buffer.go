// buffer.go owns cuFile buffer registration. A registration failure is
// returned wrapping ErrBufferRegistration and changes nothing, so the
// caller can count it and move the region to another transport.

package gds

import "fmt"

// RegisterBuffer registers n bytes of device memory at devPtr with cuFile.
func (d *Driver) RegisterBuffer(devPtr uintptr, n int64) error {
	if devPtr == 0 || n <= 0 {
		return fmt.Errorf("%w: buffer %#x of %d bytes", ErrInvalid, devPtr, n)
	}
	err := d.bind(func() error {
		return statusError("cuFileBufRegister", d.lib.bufRegister(devPtr, uint64(n), 0), ErrBufferRegistration)
	})
	if err != nil {
		return fmt.Errorf("%w: buffer %#x (%d bytes): %w", ErrBufferRegistration, devPtr, n, err)
	}
	return nil
}

// DeregisterBuffer undoes RegisterBuffer for devPtr.
func (d *Driver) DeregisterBuffer(devPtr uintptr) error {
	err := d.bind(func() error {
		return statusError("cuFileBufDeregister", d.lib.bufDeregister(devPtr), ErrBufferRegistration)
	})
	if err != nil {
		return fmt.Errorf("%w: deregister buffer %#x: %w", ErrBufferRegistration, devPtr, err)
	}
	return nil
}
