// netblock_test.go owns the addresses of the networks the tests make
// (veth pairs, switches): each takes a block of 198.18.0.0/15 that no
// other live test network holds, in this process or in another one (go
// test runs packages, and repeats of this one, side by side).
//
// Why: two networks with the same block leave the root namespace two
// routes to it, and a daemon dialing its peer there reaches the other
// test's peer, which answers: a misdirected WRITE completes "applied"
// into the wrong daemon. Blocks drawn at random without this collided
// about once in a few hundred runs of the suite.
//
// Invariants:
//   - A block is chosen and its root-side address added while holding an
//     exclusive flock on one lock file, so two claims never interleave.
//   - A block overlapping any address the root namespace holds in
//     198.18.0.0/15 is never chosen: every test network keeps one
//     root-side address for its whole life (its veth's), and a network
//     whose veth is gone has given its block back.
//   - 198.18.253.0/24 to 198.18.255.0/24 are left to the bench scripts'
//     fixed pairs.

package tests

import (
	"encoding/binary"
	"errors"
	mrand "math/rand/v2"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
)

var (
	testNets  = netip.MustParsePrefix("198.18.0.0/15")
	benchNets = netip.MustParsePrefix("198.18.252.0/22") // 252 to 255: the bench scripts' (and a spare /24)
)

// netLock is the claim lock's path: one for the whole machine, whatever
// TMPDIR each test process has (the tests that make networks run as
// root, and /run is root's).
const netLock = "/run/orbitefs-test-nets.lock"

// claimBlock picks a free block of 198.18.0.0/15 with prefix length
// bits and runs add with it (add puts the block's root-side address on
// a link); both under the claim lock, so the address is in place before
// anyone else looks.
func claimBlock(t *testing.T, bits int, add func(netip.Prefix)) netip.Prefix {
	t.Helper()
	f, err := os.OpenFile(netLock, os.O_CREATE|os.O_RDWR, 0o600)
	if errors.Is(err, os.ErrNotExist) { // no /run: the temporary directory, shared by processes of one TMPDIR
		f, err = os.OpenFile(filepath.Join(os.TempDir(), filepath.Base(netLock)), os.O_CREATE|os.O_RDWR, 0o600)
	}
	if err != nil {
		t.Fatalf("test network lock: %v", err)
	}
	defer f.Close()
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		t.Fatalf("test network lock: %v", err)
	}
	defer syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
	p, ok := pickBlock(heldNets(t), bits, mrand.Uint32())
	if !ok {
		t.Fatalf("no free /%d in %s outside %s", bits, testNets, benchNets)
	}
	add(p)
	return p
}

// pickBlock returns the first block of prefix length bits, from the
// start'th on (wrapping), that overlaps neither held nor the bench
// scripts' blocks; ok false when every one does.
func pickBlock(held []netip.Prefix, bits int, start uint32) (netip.Prefix, bool) {
	n := uint32(1) << (bits - testNets.Bits()) // blocks in 198.18.0.0/15
	base := binary.BigEndian.Uint32(testNets.Addr().AsSlice())
	for i := uint32(0); i < n; i++ {
		var a [4]byte
		binary.BigEndian.PutUint32(a[:], base+((start+i)%n)<<(32-bits))
		p := netip.PrefixFrom(netip.AddrFrom4(a), bits)
		if !p.Overlaps(benchNets) && !slices.ContainsFunc(held, p.Overlaps) {
			return p, true
		}
	}
	return netip.Prefix{}, false
}

// heldNets lists the prefixes of the root namespace's addresses in
// 198.18.0.0/15.
func heldNets(t *testing.T) []netip.Prefix {
	t.Helper()
	out, err := exec.Command("ip", "-4", "-o", "addr", "show").CombinedOutput()
	if err != nil {
		t.Fatalf("ip -4 -o addr show: %v\n%s", err, out)
	}
	var held []netip.Prefix
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line)
		for i := 0; i+1 < len(f); i++ {
			if f[i] != "inet" {
				continue
			}
			if p, err := netip.ParsePrefix(f[i+1]); err == nil && p.Overlaps(testNets) {
				held = append(held, p.Masked())
			}
		}
	}
	return held
}

// hostAt is the address n of block p (1 is its first host).
func hostAt(p netip.Prefix, n int) string {
	a := p.Addr().As4()
	binary.BigEndian.PutUint32(a[:], binary.BigEndian.Uint32(a[:])+uint32(n))
	return netip.AddrFrom4(a).String()
}

// TestPickBlock: a block is never one the root namespace holds, nor
// inside one, nor around one, nor in the bench scripts' blocks; the one
// free block is found wherever the search starts.
func TestPickBlock(t *testing.T) {
	all24 := func(except string) []netip.Prefix {
		var out []netip.Prefix
		for i := 0; i < 512; i++ {
			p := netip.PrefixFrom(netip.AddrFrom4([4]byte{198, byte(18 + i/256), byte(i % 256), 0}), 24)
			if p.String() != except {
				out = append(out, p)
			}
		}
		return out
	}
	for _, c := range []struct {
		name  string
		held  []netip.Prefix
		bits  int
		start uint32
		want  string // "" : none free
	}{
		{"one /24 free, searched from 0", all24("198.19.77.0/24"), 30, 0, "198.19.77.0/30"},
		{"one /24 free, searched from past it", all24("198.19.77.0/24"), 29, 1 << 20, "198.19.77.0/29"},
		{"a held /30 keeps its /29 out", []netip.Prefix{netip.MustParsePrefix("198.18.0.4/30")}, 29, 0, "198.18.0.8/29"},
		{"a held /29 keeps its /30s out", []netip.Prefix{netip.MustParsePrefix("198.18.0.0/29")}, 30, 0, "198.18.0.8/30"},
		{"the bench blocks are skipped", nil, 24, 252, "198.19.0.0/24"},
		{"all held", all24(""), 30, 12345, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			p, ok := pickBlock(c.held, c.bits, c.start)
			got := ""
			if ok {
				got = p.String()
			}
			if got != c.want {
				t.Fatalf("pickBlock: %q, want %q", got, c.want)
			}
		})
	}
}
