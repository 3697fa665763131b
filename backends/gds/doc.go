// Package gds is the GPUDirect Storage backend: cuFile (libcufile.so.0)
// called through purego, so one static binary (CGO_ENABLED=0) runs with or
// without a GPU and never links NVIDIA code at build time.
//
// # Lifetimes
//
// Open loads the library lazily (the first Open, never at import) and
// performs one process-wide cuFileDriverOpen shared by every Driver. Each
// Driver is one reference; the last Close calls cuFileDriverClose_v2. The
// library stays mapped for the life of the process (cuFile keeps threads
// and does not support being unloaded). After fork the child does not reuse
// the parent's driver: the first Open in a new PID loads a fresh state, and
// handles, buffers and batches made by the parent answer ErrForked.
//
// A Handle is one cuFile registration of one O_DIRECT fd; the caller keeps
// the fd open until Handle.Close. RegisterBuffer registers device memory
// once; failures are returned typed so a caller can count them and use
// another transport for that region. Release handles, buffers and batches
// before closing the Driver they came from: through a closed Driver they
// answer ErrClosed and the cuFile object stays registered.
//
// A Batch is one cuFileBatchIOSetUp handle (Driver.NewBatch);
// ParallelBatch has the same interface and runs slices as synchronous
// cuFileRead/Write calls on N goroutines, each with the device's context
// bound (for libraries whose batch API is missing or refuses the driver's
// mode). Split cuts requests into slices of at most MaxSlice (16 MiB).
//
// # Contexts
//
// cuFile needs a CUDA context current on the calling OS thread for every
// register and I/O call. The package never creates contexts: the caller
// supplies a ContextBinder (backends/cuda provides one) and every cuFile
// call that needs a context runs inside Binder.Bind.
//
// # Modes
//
// Driver.Mode reports the compatibility policy read with
// cuFileGetParameterBool (allow_compat_mode, force_compat_mode), falling
// back to the driver properties' control flags where the library lacks the
// parameter API: "compat-forced" (every I/O goes through the POSIX
// fallback), "compat-permitted" (native when nvidia-fs can, else the
// fallback), "native" (compatibility off and nvidia-fs loaded), or
// "disabled" (compatibility off and no nvidia-fs: no cuFile I/O can
// succeed).
//
// # What the H200 showed (2026-12-01, driver 580.159.04, CUDA 13.0)
//
// The driver runs in compatibility mode (no nvidia-fs; allow_compat_mode
// true), read with cuFileGetParameterBool: Mode "compat-permitted",
// max_direct_io_size 16 MiB, max_batch_io_size 128. The native batch API
// works in that mode. cuFileHandleRegister accepted a buffered (non
// O_DIRECT) fd there, so RegisterFile's own O_DIRECT check is what refuses
// it; on tmpfs cuFile answered CU_FILE_HANDLE_NOT_REGISTERED (5027) after
// failing to read udev data for device 0:27, the same code it gives on
// ext4 while /run/udev/data/b<maj>:<min> is missing (tests/gpu/udev.sh
// writes that entry on the gate machine; the engine never does).
//
// # Errors
//
// Every failure wraps a sentinel (ErrUnavailable, ErrNotDirect,
// ErrIneligible, ErrClosed, ErrForked, ErrBufferRegistration) and, where
// cuFile answered, an *Error naming the function, the CUfileOpError code
// and name, the CUDA result and the errno.
package gds
