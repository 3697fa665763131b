// Package tests holds orbitefs's end-to-end suite: the real daemon, built
// from ./cmd/orbitefs and started as a separate process, serves its mount
// in a temporary directory, and the tests drive it with shell commands
// (bash, cat, echo, dd, ls, rmdir, jq, cmp) exactly as a user would.
//
// Run it as root on a machine with /dev/fuse (the daemon mounts directly,
// without fusermount); it takes about 30 s:
//
//	go test -ldflags=-checklinkname=0 -race ./tests/
//
// Layout:
//   - harness_test.go: building the daemon once per test binary, starting
//     it on a temporary mountpoint (optionally with a config file), the
//     sh/ok/start helpers (bash with M, T, S, BIN exported), and a cleanup
//     that never leaves a mount behind: SIGTERM and a bounded wait, then
//     an abort through /sys/fs/fuse/connections/<dev>/abort (mounting
//     fusectl if needed), SIGKILL and a lazy unmount. It reports a daemon
//     that ignores SIGTERM, exits non-zero on it or leaves its mount, and
//     prints the daemon's log when a test failed.
//   - objects_test.go: shell helpers that create and remove regions,
//     segments and batches through the mount.
//   - contract_test.go: the mount contract (docs/mount.md, "orbitefs mount
//     reference (contract v1)") as a map from name to func(t, *mount), in the style
//     of go-fuse's posixtest, run as subtests of TestContract against one
//     daemon with the embedded default configuration.
//   - badinput_test.go: every rejected write, table driven (TestContract/
//     BadInput): the errno text bash prints, the message in the batch's
//     error file or /error and the daemon log, and "nothing changed".
//   - inflight_test.go: TestInFlight, behaviour while a long batch runs
//     (interruptible wait, independent batches, EBUSY on free and rmdir,
//     the segment close timeout, cancel, a short read at EOF), against one
//     daemon whose config makes a batch last minutes unless cancelled.
//   - batchlife_test.go: deferred free (engine.enable_progress_worker:
//     rmdir of a busy batch returns, the ID disappears once drained) and
//     /ctl/engine (close_requester, close), each on its own daemon.
//   - memseg_test.go: memory segments (mem://), merged adjacent requests
//     sharing physical_owner, and cancelling a physical owner through an
//     alias while its submission is fenced behind a long one.
//   - lifecycle_test.go: tests that stop, break or configure a daemon of
//     their own (SIGTERM/SIGINT, an outside umount, stale and live mounts,
//     config files, the daemon's own mount as a target, the harness's
//     last-resort abort).
//
// Environment: ORBITEFS_BIN uses a prebuilt daemon instead of building
// one; ORBITEFS_E2E_RACE=1 builds the daemon with -race (a race report in
// its log fails the test that owns the daemon).
package tests
