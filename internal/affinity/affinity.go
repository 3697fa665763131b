// Package affinity gives a goroutine a cheap, stable hint of who it is,
// for spreading shared counters so that one goroutine keeps writing one
// cache line (engine/counter.go). The engine may not import unsafe
// (internal/lint); this package holds the one use it needs.
//
// Invariants: Hint takes no lock, allocates nothing and reads no shared
// memory; its result is only a hint (a goroutine whose stack moves, as
// when it grows, gets another one).
package affinity

import "unsafe"

// Hint returns a hash of the calling goroutine's stack address: the same
// for every call from one call site of one goroutine while its stack
// stays where it is, and spread over all 64 bits for goroutines whose
// stacks lie a few KiB apart (the runtime's smallest stacks are 2 KiB).
func Hint() uint64 {
	var here byte // on the caller's stack: only its address is used
	return Mix(uintptr(unsafe.Pointer(&here)))
}

// Mix is Hint's hash of an address (a Fibonacci hash of it in 16-byte
// units); the top bits are the best spread.
func Mix(addr uintptr) uint64 { return uint64(addr>>4) * 0x9E3779B97F4A7C15 }
