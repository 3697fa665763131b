// ctltxn.go owns the one-file transaction forms of the control-plane
// workload: the same round trip as RunCtlMount (a 4 KiB read into the
// client's own 4 KiB of the region, terminal status read back, batch
// freed) through /ctl/batches/txn, either opening the file for each round
// trip (open, write, read, close: "txn") or keeping one descriptor per
// client and running every round trip on it (write, read: "txn-reuse";
// the next write frees the previous batch, close frees the last).
//
// Invariants:
//   - A round trip counts only when the read returned a status whose
//     state is "completed"; anything else ends the run.
//   - Each client closes its descriptor before it returns, so every batch
//     is freed.

package bench

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"
)

// statusCompleted is how the status JSON of a completed batch names its
// state (control.RenderStatus, indented).
var statusCompleted = []byte(`"state": "completed"`)

// txnTrip writes doc to f and reads the terminal status into buf.
func txnTrip(f *os.File, doc, buf []byte) error {
	if _, err := f.Write(doc); err != nil {
		return fmt.Errorf("write %s: %w", f.Name(), err)
	}
	n, err := f.Read(buf)
	if err != nil {
		return fmt.Errorf("read %s: %w", f.Name(), err)
	}
	if !bytes.Contains(buf[:n], statusCompleted) {
		return fmt.Errorf("%s: status %q, want state completed", f.Name(), buf[:n])
	}
	return nil
}

func txnDoc(mem, seg string, c int) []byte {
	return fmt.Appendf(nil, `{"op":"read","target":%q,"requests":[{"memory":%q,"offset":%d,"target_offset":0,"length":4096}]}`, seg, mem, c*4096)
}

// RunCtlTxn runs round trips through dir/ctl/batches/txn, opening it
// for each one, with the arguments of RunCtlMount.
func RunCtlTxn(ctx context.Context, dir, mem, seg string, clients int, runtime time.Duration) (CtlResult, error) {
	path := filepath.Join(dir, "ctl", "batches", "txn")
	docs, bufs := make([][]byte, clients), make([][]byte, clients)
	for c := range clients {
		docs[c], bufs[c] = txnDoc(mem, seg, c), make([]byte, 64<<10)
	}
	return runClients(ctx, "txn", clients, runtime, func(c int) error {
		f, err := os.OpenFile(path, os.O_RDWR, 0)
		if err != nil {
			return err
		}
		err = txnTrip(f, docs[c], bufs[c])
		if cerr := f.Close(); cerr != nil && err == nil {
			err = fmt.Errorf("close %s: %w", path, cerr)
		}
		return err
	})
}

// RunCtlTxnReuse runs round trips through one open descriptor of
// dir/ctl/batches/txn per client.
func RunCtlTxnReuse(ctx context.Context, dir, mem, seg string, clients int, runtime time.Duration) (CtlResult, error) {
	path := filepath.Join(dir, "ctl", "batches", "txn")
	files := make([]*os.File, clients)
	defer func() {
		for _, f := range files {
			if f != nil {
				f.Close()
			}
		}
	}()
	docs, bufs := make([][]byte, clients), make([][]byte, clients)
	for c := range clients {
		f, err := os.OpenFile(path, os.O_RDWR, 0)
		if err != nil {
			return CtlResult{Via: "txn-reuse", Clients: clients}, err
		}
		files[c], docs[c], bufs[c] = f, txnDoc(mem, seg, c), make([]byte, 64<<10)
	}
	res, err := runClients(ctx, "txn-reuse", clients, runtime, func(c int) error {
		return txnTrip(files[c], docs[c], bufs[c])
	})
	for c, f := range files {
		files[c] = nil
		if cerr := f.Close(); cerr != nil && err == nil {
			err = fmt.Errorf("close %s: %w", path, cerr)
		}
	}
	return res, err
}
