// Package discovery lets orbitefs engines find each other through etcd.
//
// An engine registers (Register) its record: its name, its epoch (new at
// every start), the address of its peer listener and the regions it
// exports. The record lives under Prefix + "engines/" + name, attached to
// a lease the Registrar keeps alive; a killed engine's key is deleted by
// etcd when the lease expires, within the lease TTL. The key is created
// only if absent, so two live engines never share a name: the second
// gets an error wrapping a *HeldError that names the holder's epoch and
// address; WaitFree waits until such a name is free (a restarted engine
// waiting out its previous incarnation's lease). If the lease ends while
// the engine lives (it expired during a partition, etcd restarted), the
// Registrar registers again by itself.
//
// A Watcher keeps a view of every record under the prefix (a Get, then a
// Watch from the next revision; a new Get when the watch breaks, such as
// after a compaction) and tells subscribers who Joined, Left, Updated its
// regions or Restarted with a new epoch. A subscriber that caches a
// peer's region descriptors drops those of an epoch once told it Left or
// Restarted.
//
// Lifetimes: the caller owns the *clientv3.Client and closes it after
// the Registrars and Watchers using it. Register and NewWatcher do their
// first round trip before returning and fail if it fails; afterwards
// they retry by themselves, with backoff, until Close.
package discovery
