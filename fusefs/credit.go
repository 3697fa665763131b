// credit.go owns /peers/credit: receiver credits. One command file per
// operation (activate, update, deactivate, connect, disconnect), each
// taking one JSON document per write (errno from the write, the text in
// /error), and two status files: status (this engine's bindings as a
// sender) and issuer (its issuer as a receiver).
//
// Invariants:
//   - The command files are the daemon's user's alone (and root's), even
//     with allow_other: a binding governs the daemon's peer traffic. The
//     status files are everyone's, like /stats: counts and addresses only.

package fusefs

import (
	"github.com/hanwen/go-fuse/v2/fs"

	"github.com/orbitefs/orbitefs/control"
	"github.com/orbitefs/orbitefs/engine"
)

func (f *fsys) creditDir() child {
	kids := fixedKids{
		{name: "status", ino: inoCreditStatus, node: f.staticFile(f.svc.CreditStatus)},
		{name: "issuer", ino: inoCreditIssuer, node: f.staticFile(f.svc.CreditIssuerStatus)},
	}
	for i, verb := range control.CreditCommands {
		kids = append(kids, child{name: verb, ino: inoCreditCmd0 + uint64(i), node: func() fs.InodeEmbedder {
			return newDocFile(f, f.owner(0, 0, false), f.svc.Started(), func(c *engine.Caller) *control.DocWriter {
				return f.svc.CreditWriter(c, verb)
			})
		}})
	}
	return child{name: "credit", ino: inoCredit, dir: true, node: f.staticDir(kids)}
}
