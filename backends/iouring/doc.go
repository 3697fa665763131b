// Package iouring is the io_uring file executor behind engine.FileTransport.
//
// A Transport owns a pool of rings. A batch worker acquires one ring,
// keeps it while its batch has work, and releases it when idle, so rings
// are reused rather than built per request. Each ring lazily registers the
// engine's anonymous regions as fixed buffers and segment fds as fixed
// files in sparse tables, replacing the least recently added entry when a
// table is full; in-flight ops keep their old registration alive (the
// kernel refcounts resource nodes), so replacement is always safe.
//
// All unsafe code and raw syscalls of the executor live in this package.
// Building with the tag noiouring leaves it (and giouring) out of the
// binary; the engine then reports io_uring unavailable.
//
// giouring reaches syscall.mmap through linkname, so every build needs
// -ldflags=-checklinkname=0 (the Makefile sets it).
package iouring
