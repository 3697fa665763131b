// Package peer moves bytes between the memory regions of orbitefs
// engines on different hosts, over TCP with our own versioned protocol
// (package wire).
//
// A server exports a daemon's registered host memory regions that were
// registered with an export permission; a client (Dial) authenticates
// with the shared key, lists the exported regions and READs and WRITEs
// them. One control connection per peer carries the hello, descriptors
// and keep-alive; data travels on lanes (one for tcp, several for
// hp_tcp), and requests of StripeMin bytes or more are cut into slices
// of at least MinSlice bytes, each its own request with its own ack.
//
// A WRITE's remote effect is never guessed (Effect): none when nothing
// was posted or the server refused before touching the region, applied
// when acknowledged (the server acks after the bytes are in the region's
// memory), unknown for anything between; an unknown WRITE is never
// replayed, and the lane it ran on is never used again.
//
// A Conn that failed (the peer restarted with a new epoch, its control
// connection died) is never used again; a Remote (OpenRemote, a region
// as the engine's segments reach it) dials the peer again on its next
// request. Timeouts bound stalls, not frames (progress.go): a slow link
// that keeps moving never fails a transfer.
package peer
