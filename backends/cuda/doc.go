// Package cuda is the CUDA driver API as orbitefs uses it: device and
// portable pinned host memory, synchronous and stream-ordered copies,
// events, CUDA IPC, and a pool of pinned staging chunks. It has no engine
// import; the engine wraps these types in its own memory and transport
// abstractions.
//
// # Loading
//
// libcuda.so.1 is loaded at run time with purego (no cgo), so one
// CGO_ENABLED=0 binary runs with or without a GPU. Nothing is loaded
// until Open. Open tries ORBITEFS_LIBCUDA (or Options.Library) alone when
// set, otherwise the dynamic loader's path, then /usr/lib/x86_64-linux-gnu,
// /usr/lib64 and /usr/local/cuda/compat; it resolves every symbol (the
// _v2 names where cuda.h maps to them) and runs cuInit(0). Any failure
// there returns an error matching ErrUnavailable naming the library and
// each place tried. The library is never unloaded. Repeated Open calls
// are cheap and share the process's library handle and primary contexts;
// one Driver per process is the intended use.
//
// Linking: purego imports dlopen from libdl.so.2, so a CGO_ENABLED=0
// binary that imports this package is dynamically linked (it needs the
// system's ld-linux and libc at run time) although it has no cgo.
//
// # Threads and contexts
//
// A CUDA context is current per OS thread, and goroutines migrate between
// threads at any call. A driver call from a goroutine whose thread has no
// (or another device's) context fails with CUDA_ERROR_INVALID_CONTEXT, or
// worse, acts on the wrong device. So every method that calls the driver
// does, around its driver calls:
//
//	runtime.LockOSThread()
//	cuCtxSetCurrent(device's primary context)
//	... driver calls ...
//	runtime.UnlockOSThread()
//
// Locking pins the goroutine to the thread for the sequence, so the
// context set is the context used; LockOSThread counts, so the binding
// nests when a bound method calls another. The context is set on every
// entry rather than cached per thread because the package cannot see
// which thread it runs on or what other code (cuFile, another device) made
// current there since; cuCtxSetCurrent is a thread-local store in the
// driver. The result: every method is correct from any goroutine, and
// callers never lock threads themselves (TestConcurrentGoroutines copies
// from 32 unlocked goroutines; TestBindingMakesContextCurrent shows the
// CUDA_ERROR_INVALID_CONTEXT an unbound call gets).
//
// Measured on an NVIDIA H200 (driver 580.159.04, CUDA 13.0) on
// 2026-12-01 with BenchmarkBind: a bare driver call through purego costs
// 145 ns, LockOSThread+UnlockOSThread 4.6 ns, bind+unbind (the lock plus
// one cuCtxSetCurrent) 203 ns, and a whole bound method (Event.Query on a
// completed event) 724 ns. Against a 4 MiB pinned copy (about 80 us at
// 53 GB/s) the binding is 0.25%. Event.Query from 16 goroutines at once
// took 1218 ns per call: the driver serializes, so poll events from one
// goroutine. Pinned host-to-device throughput there (BenchmarkPinnedHtoD,
// 1 GiB): 48.5 GB/s in synchronous 4 MiB copies, 53.4 GB/s in 4 MiB
// async copies on one stream, 55.4 GB/s as one 1 GiB async copy.
//
// Devices use their primary context (cuDevicePrimaryCtxRetain), the same
// one the runtime API and frameworks such as torch use, so pointers from
// those libraries in this process are valid here. Device.Close releases
// it; allocations must be freed first.
//
// # Lifetimes
//
//   - DevicePtr from Alloc lives until Free; from OpenIPC until CloseIPC.
//   - HostBuffer.Bytes and Chunk.Bytes are views of C memory: valid until
//     Free (or the pool's Close). The garbage collector does not track
//     them.
//   - Async copies read or write host memory after they return. That
//     memory must be pinned (HostBuffer, Chunk, or HostRegister'd) and
//     left alone until an Event recorded after the copy reports done, or
//     the Stream is synchronized.
//   - Every CUresult is checked. A failure is an *Error naming the driver
//     function, its arguments and the result by its driver name, e.g.
//     "cuMemAlloc(1073741824 bytes on cuda:0): CUDA_ERROR_OUT_OF_MEMORY
//     (2)"; errors.Is(err, cuda.ErrorOutOfMemory) matches it.
//
// Driver.Live counts live allocations, registrations, streams, events and
// opened IPC handles; the tests require each to return to zero.
package cuda
