// Package control is the orbitefs control protocol: the JSON documents
// written to the mount (memory/register, segments/open, submit), the ctl
// commands, the JSON and text the mount's files return, the errno table,
// and Service, the stateful control plane over one engine that fusefs
// calls for every file operation. It does no file I/O of its own.
//
// # A transfer, as the mount sees it
//
//	echo '{"name":"buf","location":"cpu","bytes":"1MiB"}' > memory/register      Service.Register
//	echo '{"name":"cache","uri":"file:///tmp/c.bin","permission":"read"}' > segments/open   Service.OpenSegment
//	N=$(cat ctl/batches/clone)                                                  Service.Clone
//	echo '{"op":"read","target":"cache","requests":[...]}' > ctl/batches/$N/submit   Service.Submit
//	echo seal > ctl/batches/$N/ctl                                              Service.Ctl
//	cat ctl/batches/$N/wait                                                     Service.Wait
//
// or, as one transaction on one descriptor (txn.go):
//
//	exec 3<>ctl/batches/txn                                                     Service.NewTxn
//	echo '{"op":"read","target":"cache","requests":[...]}' >&3                  Txn.Write
//	cat <&3                                                                     Txn.Read
//	exec 3<&-                                                                   Txn.Close
//
// A submission document is one group: its requests become consecutive
// tasks of the batch (request i is task first+i). Submissions are parsed
// into a Submission (a spec: pure data, checked by Validate), then
// resolved against the memory and segment tables into engine requests in
// one step (Service.resolve), then handed to the engine, which validates
// ranges and admits the group whole or not at all.
//
// # Errors
//
// Every error is an *engine.Error ("OP NAME: KIND: DETAIL"); control's
// own failures use the engine's kinds, so one table (errno.go) gives the
// errno for both. The text of each failure is kept where a shell user
// finds it (the batch's error file or the mount-wide /error) and logged
// once, by Service.fail.
//
// # Objects and lifetimes
//
// Memory, Segment and Batch values are the Service's named handles on
// engine objects. Each carries a sequence number unique for the
// Service's life (fusefs derives inode numbers from it), so a handle
// opened on a removed object never reaches a new object of the same name.
// Objects are created by the creator files and removed by rmdir (or the
// free command); a batch that never accepted a submission is also freed
// after mount.idle_batch_timeout without a write to it (idle.go), and a transaction's batch
// when its descriptor moves on to the next one or closes (txn.go).
// Shutdown refuses new work,
// drains, wakes waiters and closes the engine.
//
// # Documents
//
// Every JSON document is decoded by decodeStrict (strict.go): exact-case
// keys, no duplicates, no unknown keys. Each open handle of a document
// file is a DocWriter (docwriter.go): sequential writes from offset 0 and
// a sticky first error. A document is checked as it arrives by a
// resumable scanner (jsonscan.go), each byte once however it is chunked,
// and unfinished documents draw on one mount-wide budget of buffered
// bytes (budget.go). Error texts quote a short prefix of what a client
// sent, never all of it (quote.go).
//
// # Locking
//
// Service.mu guards the name tables and the mount-wide last error;
// Batch.mu guards a batch's error text, target names and idle-reclaim
// state; Txn.mu one transaction descriptor's state. Order: Txn.mu, then
// Service.mu, then Batch.mu. Neither is held across an engine call that
// can block, so waits and transfers on different batches never serialize
// behind each other.
package control
