// tree.go owns the layout of contract v1: which children each directory
// has and which node shows each file. control/reference.md documents the
// same layout; tree_test.go walks a live mount against it.

package fusefs

import (
	"context"
	"strconv"

	"github.com/hanwen/go-fuse/v2/fs"

	"github.com/orbitefs/orbitefs/control"
	"github.com/orbitefs/orbitefs/engine"
)

// staticFile is a readFile over a Service method that cannot fail.
func (f *fsys) staticFile(render func() []byte) func() fs.InodeEmbedder {
	return func() fs.InodeEmbedder {
		return newReadFile(f, who{}, f.svc.Started(), func(context.Context) ([]byte, error) { return render(), nil })
	}
}

func (f *fsys) staticDir(kids children) func() fs.InodeEmbedder {
	return func() fs.InodeEmbedder { return &dir{f: f, t: f.svc.Started(), kids: kids} } // the mount's
}

// fixedKids is a directory with a fixed list of entries.
type fixedKids []child

func (k fixedKids) list() []child { return k }

func (k fixedKids) find(name string) (child, bool) {
	for _, c := range k {
		if c.name == name {
			return c, true
		}
	}
	return child{}, false
}

// newRoot builds the root directory node.
func newRoot(f *fsys) *dir {
	svc := f.svc
	ctl := fixedKids{
		{name: "batches", ino: inoBatches, dir: true, node: f.staticDir(batchesKids{f})},
		{name: "engine", ino: inoEngineCtl, node: func() fs.InodeEmbedder {
			// The daemon's user's alone (and root's), even with allow_other.
			return newCmdFile(f, f.owner(0, 0, false), svc.Started(), func(c *engine.Caller, p []byte) error { return svc.EngineCtl(c, string(p)) })
		}},
	}
	root := fixedKids{
		{name: "README", ino: inoReadme, node: f.staticFile(svc.Readme)},
		{name: "version", ino: inoVersion, node: f.staticFile(svc.Version)},
		{name: "stats", ino: inoStats, node: f.staticFile(svc.Stats)},
		{name: "metrics", ino: inoMetrics, node: f.staticFile(svc.Metrics)},
		{name: "error", ino: inoError, node: func() fs.InodeEmbedder {
			// Each caller reads its own view (control.Service.LastError).
			return newReadFile(f, who{}, svc.Started(), func(ctx context.Context) ([]byte, error) { return svc.LastError(f.caller(ctx)), nil })
		}},
		{name: "memory", ino: inoMemory, dir: true, node: f.staticDir(memoryKids{f})},
		{name: "segments", ino: inoSegments, dir: true, node: f.staticDir(segmentsKids{f})},
		{name: "ctl", ino: inoCtl, dir: true, node: f.staticDir(ctl)},
		f.qosDir(),   // qos.go
		f.peersDir(), // peers.go
	}
	if svc.ClusterEnabled() {
		root = append(root, f.clusterDir()) // cluster.go
	}
	return &dir{f: f, t: svc.Started(), kids: root}
}

// memoryKids is /memory: register plus one directory per registration.
type memoryKids struct{ f *fsys }

func (k memoryKids) register() child {
	f := k.f
	return child{name: "register", ino: inoRegister, node: func() fs.InodeEmbedder {
		d := newDocFile(f, who{}, f.svc.Started(), f.svc.RegisterWriter)
		d.opensFiles = true // shm
		return d
	}}
}

func (k memoryKids) memDir(m *control.Memory) child {
	f := k.f
	return child{name: m.Name, ino: objIno(m.Seq(), slotDir), dir: true, node: func() fs.InodeEmbedder {
		return &dir{f: f, o: f.owner(m.Owner()), t: m.Created(), kids: memKids{f, m}}
	}}
}

func (k memoryKids) list() []child {
	out := []child{k.register()}
	for _, m := range k.f.svc.Memories() {
		out = append(out, k.memDir(m))
	}
	return out
}

func (k memoryKids) find(name string) (child, bool) {
	if name == "register" {
		return k.register(), true
	}
	if m := k.f.svc.Memory(name); m != nil {
		return k.memDir(m), true
	}
	return child{}, false
}

func (k memoryKids) remove(c *engine.Caller, name string) error { return k.f.svc.Unregister(c, name) }

// memKids is /memory/<name>: info and data.
type memKids struct {
	f *fsys
	m *control.Memory
}

func (k memKids) list() []child {
	f, m := k.f, k.m
	o := f.owner(m.Owner())
	return []child{
		{name: "info", ino: objIno(m.Seq(), slotInfo), node: func() fs.InodeEmbedder {
			return newReadFile(f, o, m.Created(), func(context.Context) ([]byte, error) { return f.svc.MemoryInfo(m) })
		}},
		{name: "data", ino: objIno(m.Seq(), slotData), node: func() fs.InodeEmbedder { return &dataFile{f: f, m: m} }},
	}
}

func (k memKids) find(name string) (child, bool) {
	if k.f.svc.Memory(k.m.Name) != k.m {
		return child{}, false
	}
	return fixedKids(k.list()).find(name)
}

// segmentsKids is /segments: open plus one directory per segment.
type segmentsKids struct{ f *fsys }

func (k segmentsKids) open() child {
	f := k.f
	return child{name: "open", ino: inoOpen, node: func() fs.InodeEmbedder {
		d := newDocFile(f, who{}, f.svc.Started(), f.svc.OpenWriter)
		d.opensFiles = true
		return d
	}}
}

func (k segmentsKids) segDir(g *control.Segment) child {
	f := k.f
	return child{name: g.Name, ino: objIno(g.Seq(), slotDir), dir: true, node: func() fs.InodeEmbedder {
		return &dir{f: f, o: f.owner(g.Owner()), t: g.Created(), kids: segKids{f, g}}
	}}
}

func (k segmentsKids) list() []child {
	out := []child{k.open()}
	for _, g := range k.f.svc.Segments() {
		out = append(out, k.segDir(g))
	}
	return out
}

func (k segmentsKids) find(name string) (child, bool) {
	if name == "open" {
		return k.open(), true
	}
	if g := k.f.svc.Segment(name); g != nil {
		return k.segDir(g), true
	}
	return child{}, false
}

func (k segmentsKids) remove(c *engine.Caller, name string) error {
	return k.f.svc.CloseSegment(c, name)
}

// segKids is /segments/<name>: info and refresh.
type segKids struct {
	f *fsys
	g *control.Segment
}

func (k segKids) list() []child {
	f, g := k.f, k.g
	o := f.owner(g.Owner())
	return []child{
		{name: "info", ino: objIno(g.Seq(), slotInfo), node: func() fs.InodeEmbedder {
			return newReadFile(f, o, g.Created(), func(context.Context) ([]byte, error) { return f.svc.SegmentInfo(g) })
		}},
		{name: "refresh", ino: objIno(g.Seq(), slotRefresh), node: func() fs.InodeEmbedder {
			return newCmdFile(f, o, g.Created(), func(*engine.Caller, []byte) error { return f.svc.RefreshSegment(g) })
		}},
	}
}

func (k segKids) find(name string) (child, bool) {
	if k.f.svc.Segment(k.g.Name) != k.g {
		return child{}, false
	}
	return fixedKids(k.list()).find(name)
}

// batchesKids is /ctl/batches: clone, txn (txn.go) and one directory
// per batch.
type batchesKids struct{ f *fsys }

func (k batchesKids) clone() child {
	f := k.f
	return child{name: "clone", ino: inoClone, node: func() fs.InodeEmbedder {
		return newReadFile(f, who{}, f.svc.Started(), func(ctx context.Context) ([]byte, error) {
			bt, err := f.svc.Clone(f.caller(ctx))
			if err != nil {
				return nil, err
			}
			return []byte(strconv.FormatUint(bt.ID, 10) + "\n"), nil
		})
	}}
}

func (k batchesKids) txn() child {
	f := k.f
	return child{name: "txn", ino: inoTxn, node: func() fs.InodeEmbedder {
		return &txnFile{writableNode: writableNode{ctlNode{f: f, t: f.svc.Started(), mode: modeData}}}
	}}
}

func (k batchesKids) batchDir(bt *control.Batch) child {
	f := k.f
	return child{name: strconv.FormatUint(bt.ID, 10), ino: objIno(bt.Seq(), slotDir), dir: true, node: func() fs.InodeEmbedder {
		return &dir{f: f, o: f.owner(bt.Owner()), t: bt.Created(), kids: batchKids{f, bt}}
	}}
}

func (k batchesKids) list() []child {
	out := []child{k.clone(), k.txn()}
	for _, bt := range k.f.svc.Batches() {
		out = append(out, k.batchDir(bt))
	}
	return out
}

func (k batchesKids) find(name string) (child, bool) {
	switch name {
	case "clone":
		return k.clone(), true
	case "txn":
		return k.txn(), true
	}
	if id, ok := parseIndex(name); ok {
		if bt := k.f.svc.Batch(uint64(id)); bt != nil {
			return k.batchDir(bt), true
		}
	}
	return child{}, false
}

func (k batchesKids) remove(c *engine.Caller, name string) error {
	id, _ := parseIndex(name) // find succeeded
	return k.f.svc.FreeBatch(c, uint64(id))
}

// parseIndex accepts only the canonical decimal form ("7", not "07").
func parseIndex(name string) (int, bool) {
	i, err := strconv.Atoi(name)
	if err != nil || i < 0 || strconv.Itoa(i) != name {
		return 0, false
	}
	return i, true
}

// batchKids is /ctl/batches/<N>.
type batchKids struct {
	f  *fsys
	bt *control.Batch
}

func (k batchKids) list() []child {
	f, bt := k.f, k.bt
	svc, seq, t := f.svc, bt.Seq(), bt.Created()
	o := f.owner(bt.Owner())
	read := func(render func(context.Context) ([]byte, error)) func() fs.InodeEmbedder {
		return func() fs.InodeEmbedder { return newReadFile(f, o, t, render) }
	}
	return []child{
		{name: "submit", ino: objIno(seq, slotSubmit), node: func() fs.InodeEmbedder {
			return newDocFile(f, o, t, func(c *engine.Caller) *control.DocWriter { return svc.SubmitWriter(c, bt) })
		}},
		{name: "ctl", ino: objIno(seq, slotCtl), node: func() fs.InodeEmbedder {
			return newCmdFile(f, o, t, func(c *engine.Caller, p []byte) error { return svc.Ctl(c, bt, string(p)) })
		}},
		{name: "state", ino: objIno(seq, slotState), node: read(func(context.Context) ([]byte, error) { return svc.State(bt) })},
		{name: "status", ino: objIno(seq, slotStatus), node: read(func(context.Context) ([]byte, error) { return svc.Status(bt) })},
		{name: "wait", ino: objIno(seq, slotWait), node: func() fs.InodeEmbedder {
			return &waitFile{ctlNode: ctlNode{f: f, o: o, t: bt.Created(), mode: modeRead}, bt: bt}
		}},
		{name: "error", ino: objIno(seq, slotError), node: read(func(context.Context) ([]byte, error) { return bt.Error(), nil })},
		{name: "tasks", ino: objIno(seq, slotTasks), dir: true, node: func() fs.InodeEmbedder {
			return &dir{f: f, o: o, t: t, kids: tasksKids{f, bt}}
		}},
	}
}

func (k batchKids) find(name string) (child, bool) {
	if k.f.svc.Batch(k.bt.ID) != k.bt {
		return child{}, false
	}
	return fixedKids(k.list()).find(name)
}

// tasksKids is /ctl/batches/<N>/tasks: one file per task.
type tasksKids struct {
	f  *fsys
	bt *control.Batch
}

func (k tasksKids) task(i int) child {
	f, bt := k.f, k.bt
	return child{name: strconv.Itoa(i), ino: taskIno(bt.Seq(), i), node: func() fs.InodeEmbedder {
		return newReadFile(f, f.owner(bt.Owner()), bt.Created(), func(context.Context) ([]byte, error) { return f.svc.Task(bt, i) })
	}}
}

func (k tasksKids) list() []child {
	n := k.f.svc.TaskCount(k.bt)
	out := make([]child, n)
	for i := range out {
		out[i] = k.task(i)
	}
	return out
}

func (k tasksKids) find(name string) (child, bool) {
	i, ok := parseIndex(name)
	if !ok || i >= k.f.svc.TaskCount(k.bt) {
		return child{}, false
	}
	return k.task(i), true
}
