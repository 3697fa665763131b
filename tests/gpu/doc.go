// Package gpu is the GPU qualification suite: the engine over the real
// backends (io_uring, CUDA through purego, cuFile) moving bytes between
// real files and H200 memory, every result checked against the file.
//
// The tests skip (saying why) where there is no GPU, so CI keeps them
// compiling and honest; ORBITEFS_REQUIRE=gpu turns the skip into a
// failure, which is how gate.sh runs them on the GPU machine.
//
// gate.sh builds this package's test binary with the daemon and the
// backends' test binaries here (CGO_ENABLED=0), then runs all of them on
// the GPU machine in one call, including the mount driven from the shell
// and the throughput table against torch and numpy peers
// (docs/qualification.md records each run).
package gpu
