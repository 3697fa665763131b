// ipc_test.go checks CUDA IPC across two processes: the parent exports an
// allocation, a re-executed copy of this test binary opens the handle and
// writes a pattern, and the parent reads the pattern back.

package cuda

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"testing"
)

// envIPCChild carries the hex handle to the child process.
const envIPCChild = "ORBITEFS_CUDA_IPC_CHILD"

const ipcSize = 1 << 20

func ipcPattern() []byte {
	p := make([]byte, ipcSize)
	for i := range p {
		p[i] = byte(i*131 + 7)
	}
	return p
}

// ipcChild runs in the child: open the handle, write the pattern, close.
func ipcChild(hexHandle string) error {
	h, err := ParseIPCHandle(hexHandle)
	if err != nil {
		return err
	}
	drv, err := Open(Options{})
	if err != nil {
		return err
	}
	dev, err := drv.Device(0)
	if err != nil {
		return err
	}
	defer dev.Close()
	p, err := dev.OpenIPC(h)
	if err != nil {
		return err
	}
	if err := dev.CopyHtoD(p, ipcPattern()); err != nil {
		return err
	}
	if err := dev.Synchronize(); err != nil {
		return err
	}
	if err := dev.CloseIPC(p); err != nil {
		return err
	}
	if n := drv.Live().IPCOpens.Load(); n != 0 {
		return fmt.Errorf("%d ipc opens left", n)
	}
	return nil
}

func TestIPCAcrossProcesses(t *testing.T) {
	dev := gpu(t)
	p, err := dev.Alloc(ipcSize)
	must(t, err)
	defer func() { must(t, dev.Free(p)) }()
	must(t, dev.Memset(p, 0, ipcSize))
	h, err := dev.IPCHandle(p)
	must(t, err)

	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), envIPCChild+"="+h.String())
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("child: %v\n%s", err, out)
	}
	got := make([]byte, ipcSize)
	must(t, dev.CopyDtoH(got, p))
	if !bytes.Equal(got, ipcPattern()) {
		t.Fatalf("parent does not see the child's pattern (first bytes %x)", got[:16])
	}

}
