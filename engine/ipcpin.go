// ipcpin.go owns the exporter's record of its regions' CUDA IPC
// mappings: a peer on this host that opened a region's handle copies
// into its device memory directly, so the region must not be freed
// while any peer holds a mapping. The peer server records each mapping
// a client announces (HoldIPC) before the client's first copy, and
// returns it when the client closes the mapping or its session ends
// (ReleaseIPC).
//
// Invariants:
//   - Hold and Unregister are ordered by the region's lock: a hold is
//     granted only to a registered region, and Unregister fails with
//     ErrBusy while any hold is outstanding, naming the holders.
//   - Counts never go below zero: a release without its hold is a
//     no-op (a holder's record is dropped at 0).

package engine

import (
	"fmt"
	"sort"
	"strings"
)

// HoldIPC records one CUDA IPC mapping of the region by holder (a peer
// and its session, as the peer server names it). KindNotFound once the
// region is unregistered: its handle names nothing any more.
func (r *Region) HoldIPC(holder string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.mu.closed {
		return errorf(KindNotFound, "ipc map", r.name(), "the region was unregistered")
	}
	if r.mu.ipc == nil {
		r.mu.ipc = map[string]int{}
	}
	r.mu.ipc[holder]++
	return nil
}

// ReleaseIPC returns n of holder's mappings (all of them when n <= 0).
func (r *Region) ReleaseIPC(holder string, n int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	have := r.mu.ipc[holder]
	if n <= 0 || n >= have {
		delete(r.mu.ipc, holder)
		return
	}
	r.mu.ipc[holder] = have - n
}

// IPCMappings is how many CUDA IPC mappings peers hold of the region,
// by holder.
func (r *Region) IPCMappings() map[string]int {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make(map[string]int, len(r.mu.ipc))
	for h, n := range r.mu.ipc {
		out[h] = n
	}
	return out
}

// ipcBusyLocked is Unregister's refusal while peers map the region.
// REQUIRES: r.mu.
func (r *Region) ipcBusyLocked() error {
	holders := make([]string, 0, len(r.mu.ipc))
	total := 0
	for h, n := range r.mu.ipc {
		holders = append(holders, fmt.Sprintf("%s holds %d", h, n))
		total += n
	}
	sort.Strings(holders)
	return errorf(KindBusy, "unregister", r.name(),
		"peers map its device memory through CUDA IPC and may copy into it (%d mapping(s): %s): close their segments first",
		total, strings.Join(holders, ", "))
}
