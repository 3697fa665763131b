// Package tests holds orbitefs's end-to-end suite: the real daemon, built
// from ./cmd/orbitefs and started as a separate process, serves its mount
// in a temporary directory, and the tests drive it with shell commands
// (bash, cat, echo, dd, ls, rmdir, jq) exactly as a user would.
//
// Run it as root on a machine with /dev/fuse (the daemon mounts directly,
// without fusermount):
//
//	go test -ldflags=-checklinkname=0 -race ./tests/
//
// Layout:
//   - harness_test.go: building the daemon once per test binary, starting
//     it on a temporary mountpoint (optionally with a config file), the
//     sh helper, and a cleanup that never leaves a mount behind (SIGTERM,
//     then lazy unmount and an abort through the fusectl connection).
//   - contract_test.go: the mount contract (design.md, "The mount") as a
//     map from name to func(t, *mount), run as subtests against one
//     daemon with the embedded default configuration.
//   - badinput_test.go: every rejected write, table driven: errno text,
//     the batch's error file, and "nothing changed".
//   - inflight_test.go: behaviour while a long batch runs (interruptible
//     wait, independent batches, EBUSY on free and rmdir), against one
//     daemon whose config makes a batch last long enough to observe.
//   - lifecycle_test.go: tests that stop or break a daemon (SIGTERM while
//     a batch is in flight, a stale mount, config files, the harness's own
//     last-resort abort).
//
// Environment: ORBITEFS_BIN uses a prebuilt daemon instead of building
// one; ORBITEFS_E2E_RACE=1 builds the daemon with -race (its race reports
// then fail the test that owns the daemon).
package tests
