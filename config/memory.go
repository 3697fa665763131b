// memory.go owns the bound on registered host memory: the machine's
// MemTotal and the automatic default derived from it.
//
// Invariants:
//   - RegisteredLimit never returns 0: an unreadable MemTotal falls back
//     to AutoRegisteredFallback, so the bound is always finite.
//   - An explicit max_registered_bytes never exceeds MemTotal (Validate):
//     registration populates every page, so more than the machine has is
//     an OOM kill waiting to happen, never a useful setting.

package config

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"
)

const (
	// AutoRegisteredCap is the hard cap on the automatic default of
	// max_registered_bytes, however large the machine.
	AutoRegisteredCap = 1 << 40
	// AutoRegisteredFallback is the automatic default when MemTotal
	// cannot be read.
	AutoRegisteredFallback = 4 << 30
)

// MemTotal reads the machine's total memory from /proc/meminfo.
func MemTotal() (uint64, error) {
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		rest, ok := strings.CutPrefix(sc.Text(), "MemTotal:")
		if !ok {
			continue
		}
		kb, err := strconv.ParseUint(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
		if err != nil {
			return 0, fmt.Errorf("/proc/meminfo: MemTotal %q: %w", rest, err)
		}
		return kb << 10, nil
	}
	if err := sc.Err(); err != nil {
		return 0, err
	}
	return 0, fmt.Errorf("/proc/meminfo: no MemTotal line")
}

// AutoRegistered is the automatic max_registered_bytes for a machine with
// memTotal bytes (0: unknown): half of it, at most AutoRegisteredCap.
// Half leaves the rest to the page cache the transfers go through, the
// clients and the kernel.
func AutoRegistered(memTotal uint64) uint64 {
	if memTotal == 0 {
		return AutoRegisteredFallback
	}
	return min(memTotal/2, AutoRegisteredCap)
}

// RegisteredLimit is the effective bound on registered host memory:
// max_registered_bytes, or AutoRegistered of this machine when it is 0.
func (c *Engine) RegisteredLimit() uint64 {
	if c.MaxRegisteredBytes != 0 {
		return uint64(c.MaxRegisteredBytes)
	}
	mt, _ := MemTotal()
	return AutoRegistered(mt)
}

// MappedLimit is the effective bound on tmpfs file pages mapped for DMA:
// max_mapped_bytes, or AutoRegistered of this machine when it is 0.
func (c *Engine) MappedLimit() uint64 {
	if c.MaxMappedBytes != 0 {
		return uint64(c.MaxMappedBytes)
	}
	mt, _ := MemTotal()
	return AutoRegistered(mt)
}
