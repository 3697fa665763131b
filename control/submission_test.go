package control

import (
	"strings"
	"testing"

	"github.com/orbitefs/orbitefs/config"
	"github.com/orbitefs/orbitefs/engine"
)

func TestParseSubmission(t *testing.T) {
	ok := func(t *testing.T, s *Submission) {}
	for _, c := range []struct {
		name  string
		doc   string
		kind  engine.Kind // 0: must parse
		msg   string
		check func(t *testing.T, s *Submission)
	}{
		{name: "walkthrough", doc: `{"op":"read","target":"cache","requests":[{"memory":"buf","offset":0,"target_offset":0,"length":1048576}]}`,
			check: func(t *testing.T, s *Submission) {
				r := s.Requests[0]
				if s.EngineOp() != engine.OpRead || s.Target != "cache" || *r.Memory != "buf" || *r.Length != 1<<20 || *r.Offset != 0 {
					t.Errorf("parsed %+v", s)
				}
			}},
		{name: "sizes as strings", doc: `{"op":"write","target":"c","timeout":"250ms","requests":[{"memory":"b","offset":"4KiB","target_offset":"1MiB","length":"64KiB"}]}`,
			check: func(t *testing.T, s *Submission) {
				r := s.Requests[0]
				if s.EngineOp() != engine.OpWrite || *r.Offset != 4096 || r.TargetOffset != 1<<20 || *r.Length != 64<<10 || s.Timeout.D().Milliseconds() != 250 {
					t.Errorf("parsed %+v", s)
				}
			}},
		{name: "raw address int", doc: `{"op":"read","target":"c","requests":[{"address":139872394444800,"length":4096,"transport":"io_uring"}]}`,
			check: func(t *testing.T, s *Submission) {
				if *s.Requests[0].Address != 139872394444800 || s.Requests[0].Transport != "io_uring" {
					t.Errorf("parsed %+v", s.Requests[0])
				}
			}},
		{name: "raw address hex", doc: `{"op":"read","target":"c","requests":[{"address":"0x7f3a00001000","length":1}]}`,
			check: func(t *testing.T, s *Submission) {
				if *s.Requests[0].Address != 0x7f3a00001000 {
					t.Errorf("parsed %#x", *s.Requests[0].Address)
				}
			}},
		{name: "vector", doc: `{"op":"read","target":"c","requests":[{"target_offset":0,"elements":[{"memory":"b","offset":0,"length":4096},{"padding":512},{"address":4096,"length":8}]}]}`,
			check: func(t *testing.T, s *Submission) {
				if n := len(s.Requests[0].Elements); n != 3 || *s.Requests[0].Elements[1].Padding != 512 {
					t.Errorf("parsed %+v", s.Requests[0])
				}
			}},
		{name: "unspec transport", doc: `{"op":"read","target":"c","requests":[{"memory":"b","length":1,"transport":"unspec"}]}`, check: ok},
		{name: "gds parses", doc: `{"op":"read","target":"c","requests":[{"memory":"b","length":1,"transport":"gds"}]}`, check: ok},

		{name: "empty", doc: ``, kind: engine.KindInvalid, msg: "empty document"},
		{name: "not json", doc: `read cache`, kind: engine.KindInvalid, msg: "want a JSON object"},
		{name: "array", doc: `[]`, kind: engine.KindInvalid, msg: "want a JSON object"},
		{name: "syntax", doc: `{"op":"read",}`, kind: engine.KindInvalid, msg: "invalid JSON at byte"},
		{name: "truncated", doc: `{"op":"read"`, kind: engine.KindInvalid, msg: "incomplete JSON"},
		{name: "unknown field", doc: `{"op":"read","target":"c","requests":[{"memory":"b","length":1}],"colour":1}`, kind: engine.KindInvalid, msg: `unknown field "colour"`},
		{name: "unknown request field", doc: `{"op":"read","target":"c","requests":[{"memory":"b","length":1,"len":2}]}`, kind: engine.KindInvalid, msg: `unknown field "len"`},
		{name: "trailing data", doc: `{"op":"read","target":"c","requests":[{"memory":"b","length":1}]} {}`, kind: engine.KindInvalid, msg: "trailing data"},
		{name: "duplicate key", doc: `{"op":"read","op":"write","target":"c","requests":[{"memory":"b","length":1}]}`, kind: engine.KindInvalid, msg: `duplicate key "op"`},
		{name: "duplicate nested key", doc: `{"op":"read","target":"c","requests":[{"memory":"b","length":1,"length":2}]}`, kind: engine.KindInvalid, msg: `duplicate key "length" in /requests/0`},
		{name: "key differing in case", doc: `{"op":"read","OP":"write","target":"c","requests":[{"memory":"b","length":1}]}`, kind: engine.KindInvalid, msg: `unknown field "OP"`},
		{name: "only a case-different key", doc: `{"Op":"read","target":"c","requests":[{"memory":"b","length":1}]}`, kind: engine.KindInvalid, msg: `unknown field "Op"`},
		{name: "nested key differing in case", doc: `{"op":"read","target":"c","requests":[{"Memory":"b","length":1}]}`, kind: engine.KindInvalid, msg: `unknown field "Memory" in /requests/0`},
		{name: "invalid UTF-8", doc: "{\"op\":\"read\",\"target\":\"c\xff\",\"requests\":[{\"memory\":\"b\",\"length\":1}]}", kind: engine.KindInvalid, msg: "invalid UTF-8"},
		{name: "wrong type", doc: `{"op":1,"target":"c","requests":[]}`, kind: engine.KindInvalid, msg: "op: JSON number cannot be a string"},
		{name: "bad size", doc: `{"op":"read","target":"c","requests":[{"memory":"b","length":"1MB!"}]}`, kind: engine.KindInvalid, msg: `size "1MB!"`},
		{name: "negative size", doc: `{"op":"read","target":"c","requests":[{"memory":"b","length":-1}]}`, kind: engine.KindInvalid, msg: "size -1"},
		{name: "bad duration", doc: `{"op":"read","target":"c","timeout":"soon","requests":[{"memory":"b","length":1}]}`, kind: engine.KindInvalid, msg: `duration "soon"`},
		{name: "bad address", doc: `{"op":"read","target":"c","requests":[{"address":"0xzz","length":1}]}`, kind: engine.KindInvalid, msg: `address "0xzz"`},
		{name: "missing op", doc: `{"target":"c","requests":[{"memory":"b","length":1}]}`, kind: engine.KindInvalid, msg: "op is missing"},
		{name: "bad op", doc: `{"op":"copy","target":"c","requests":[{"memory":"b","length":1}]}`, kind: engine.KindInvalid, msg: `op "copy"`},
		{name: "missing target", doc: `{"op":"read","requests":[{"memory":"b","length":1}]}`, kind: engine.KindInvalid, msg: "target is missing"},
		{name: "bad target", doc: `{"op":"read","target":"a/b","requests":[{"memory":"b","length":1}]}`, kind: engine.KindInvalid, msg: "contains '/'"},
		{name: "no requests", doc: `{"op":"read","target":"c","requests":[]}`, kind: engine.KindInvalid, msg: "requests is empty"},
		{name: "no local memory", doc: `{"op":"read","target":"c","requests":[{"length":1}]}`, kind: engine.KindInvalid, msg: "requests[0]: local memory is missing"},
		{name: "memory and address", doc: `{"op":"read","target":"c","requests":[{"memory":"b","address":1,"length":1}]}`, kind: engine.KindInvalid, msg: "not both"},
		{name: "offset with address", doc: `{"op":"read","target":"c","requests":[{"address":4096,"offset":1,"length":1}]}`, kind: engine.KindInvalid, msg: "offset goes with memory"},
		{name: "missing length", doc: `{"op":"read","target":"c","requests":[{"memory":"b"}]}`, kind: engine.KindInvalid, msg: "length is missing"},
		{name: "zero length", doc: `{"op":"read","target":"c","requests":[{"memory":"b","length":0}]}`, kind: engine.KindInvalid, msg: "length is 0"},
		{name: "bad memory name", doc: `{"op":"read","target":"c","requests":[{"memory":"","length":1}]}`, kind: engine.KindInvalid, msg: "name is empty"},
		{name: "bad transport", doc: `{"op":"read","target":"c","requests":[{"memory":"b","length":1,"transport":"rdma"}]}`, kind: engine.KindInvalid, msg: `transport "rdma"`},
		{name: "vector with scalar fields", doc: `{"op":"read","target":"c","requests":[{"memory":"b","length":1,"elements":[{"padding":1}]}]}`, kind: engine.KindInvalid, msg: "inside its elements"},
		{name: "padding with memory", doc: `{"op":"read","target":"c","requests":[{"elements":[{"padding":1,"memory":"b"}]}]}`, kind: engine.KindInvalid, msg: "elements[0]: a padding element"},
		{name: "zero padding", doc: `{"op":"read","target":"c","requests":[{"elements":[{"memory":"b","length":1},{"padding":0}]}]}`, kind: engine.KindInvalid, msg: "elements[1]: padding is 0"},
		{name: "element without length", doc: `{"op":"read","target":"c","requests":[{"elements":[{"memory":"b"}]}]}`, kind: engine.KindInvalid, msg: "elements[0]: length is missing"},
		{name: "second request bad", doc: `{"op":"read","target":"c","requests":[{"memory":"b","length":1},{"memory":"b"}]}`, kind: engine.KindInvalid, msg: "requests[1]: length is missing"},
		{name: "too large", doc: `{"op":"read","target":"c","requests":[{"memory":"b","length":1}]}` + strings.Repeat(" ", 200), kind: engine.KindTooLarge, msg: "exceeds mount.max_document_bytes (128)"},
	} {
		t.Run(c.name, func(t *testing.T) {
			s, err := ParseSubmission([]byte(c.doc), 128+10000*boolInt(c.kind != engine.KindTooLarge))
			if c.kind == 0 {
				if err != nil {
					t.Fatalf("ParseSubmission: %v", err)
				}
				c.check(t, s)
				return
			}
			if err == nil {
				t.Fatalf("ParseSubmission succeeded: %+v", s)
			}
			if s != nil {
				t.Errorf("a partial result came back with the error")
			}
			if engine.KindOf(err) != c.kind || !strings.Contains(err.Error(), c.msg) {
				t.Errorf("error %q (kind %v), want kind %v containing %q", err, engine.KindOf(err), c.kind, c.msg)
			}
		})
	}
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

func TestParseMemorySpec(t *testing.T) {
	for _, c := range []struct {
		doc  string
		kind engine.Kind
		msg  string
		want MemorySpec
	}{
		{doc: `{"name":"buf","location":"cpu","bytes":"1MiB"}`, want: MemorySpec{Name: "buf", Location: "cpu", Bytes: 1 << 20}},
		{doc: `{"name":"s","location":"cpu","bytes":4096,"shm":"/dev/shm/kv"}`, want: MemorySpec{Name: "s", Location: "cpu", Bytes: 4096, Shm: "/dev/shm/kv"}},
		{doc: `{"name":"p","location":"pinned","bytes":1}`, want: MemorySpec{Name: "p", Location: "pinned", Bytes: 1}},
		{doc: `{"name":"g","location":"cuda:0","bytes":1}`, want: MemorySpec{Name: "g", Location: "cuda:0", Bytes: 1}},
		{doc: `{"name":"g","location":"cuda:01","bytes":1}`, kind: engine.KindInvalid, msg: "cuda:N"},
		{doc: `{"name":"g","location":"cuda:0","bytes":1,"cuda_ipc_handle":"abc"}`, kind: engine.KindInvalid, msg: "128 hex digits"},
		{doc: `{"name":"g","location":"cuda:x","bytes":1}`, kind: engine.KindInvalid, msg: `location "cuda:x"`},
		{doc: `{"name":"g","location":"gpu","bytes":1}`, kind: engine.KindInvalid, msg: `location "gpu"`},
		{doc: `{"name":"g","bytes":1}`, kind: engine.KindInvalid, msg: "location is missing"},
		{doc: `{"name":"g","location":"cpu"}`, kind: engine.KindInvalid, msg: "bytes is missing or 0"},
		{doc: `{"name":"g","location":"cpu","bytes":"lots"}`, kind: engine.KindInvalid, msg: `size "lots"`},
		{doc: `{"location":"cpu","bytes":1}`, kind: engine.KindInvalid, msg: "name is empty"},
		{doc: `{"name":"open","location":"cpu","bytes":1}`, kind: engine.KindInvalid, msg: "reserved"},
		{doc: `{"name":"s","location":"cpu","bytes":1,"shm":"kv"}`, kind: engine.KindInvalid, msg: "absolute path"},
		{doc: `{"name":"s","location":"cpu","bytes":1,"cuda_ipc_handle":"ab"}`, kind: engine.KindInvalid, msg: "cuda_ipc_handle needs"},
		{doc: `{"name":"s","location":"cpu","bytes":1,"size":2}`, kind: engine.KindInvalid, msg: `unknown field "size"`},
		{doc: `{"name":"s","name":"t","location":"cpu","bytes":1}`, kind: engine.KindInvalid, msg: `duplicate key "name"`},
		{doc: `{"name":"s","location":"cpu","Bytes":1}`, kind: engine.KindInvalid, msg: `unknown field "Bytes"`},
		{doc: `{"name":"a\u0085b","location":"cpu","bytes":1}`, kind: engine.KindInvalid, msg: "control character U+0085"},
		{doc: `{"name":"a\u2028b","location":"cpu","bytes":1}`, kind: engine.KindInvalid, msg: "U+2028"},
		{doc: `{"name":"x","location":"pinned","bytes":1,"export":"read_write"}`, want: MemorySpec{Name: "x", Location: "pinned", Bytes: 1, Export: "read_write"}},
		{doc: `{"name":"x","location":"cpu","bytes":1,"export":"read"}`, want: MemorySpec{Name: "x", Location: "cpu", Bytes: 1, Export: "read"}},
		{doc: `{"name":"x","location":"cpu","bytes":1,"export":"rw"}`, kind: engine.KindInvalid, msg: `export "rw": want "none", "read", "write" or "read_write"`},
		{doc: `{"name":"x","location":"cuda:0","bytes":1,"export":"write"}`, want: MemorySpec{Name: "x", Location: "cuda:0", Bytes: 1, Export: "write"}},
		{doc: `{"name":"x","location":"cuda:0","bytes":1,"export":"none"}`, want: MemorySpec{Name: "x", Location: "cuda:0", Bytes: 1, Export: "none"}},
	} {
		m, err := ParseMemorySpec([]byte(c.doc), 1<<20)
		if c.kind == 0 {
			if err != nil || *m != c.want {
				t.Errorf("%s: %+v, %v", c.doc, m, err)
			}
			continue
		}
		if err == nil || engine.KindOf(err) != c.kind || !strings.Contains(err.Error(), c.msg) {
			t.Errorf("%s: error %v (kind %v), want %v %q", c.doc, err, engine.KindOf(err), c.kind, c.msg)
		}
	}
}

func TestParseSegmentSpec(t *testing.T) {
	for _, c := range []struct {
		doc  string
		perm engine.Permission
		msg  string
	}{
		{doc: `{"name":"c","uri":"file:///tmp/c.bin","permission":"read"}`, perm: engine.PermRead},
		{doc: `{"name":"c","uri":"file:///tmp/c.bin","permission":"write"}`, perm: engine.PermWrite},
		{doc: `{"name":"c","uri":"file:///tmp/c.bin","permission":"read_write"}`, perm: engine.PermReadWrite},
		{doc: `{"name":"c","uri":"file:///tmp/c.bin","permission":"rw"}`, msg: `permission "rw"`},
		{doc: `{"name":"c","uri":"file:///tmp/c.bin"}`, msg: "permission is missing"},
		{doc: `{"name":"c","uri":"/tmp/c.bin","permission":"read"}`, msg: "want file:///absolute/path"},
		{doc: `{"name":"c","permission":"read"}`, msg: "uri is missing"},
		{doc: `{"name":"..","uri":"file:///tmp/c.bin","permission":"read"}`, msg: `name ".."`},
		{doc: `{"name":"c","uri":"file:///tmp/c.bin","permission":"read","direct":true}`, msg: `unknown field "direct"`},
	} {
		s, perm, err := ParseSegmentSpec([]byte(c.doc), 1<<20)
		if c.msg == "" {
			if err != nil || perm != c.perm || s.Name != "c" {
				t.Errorf("%s: %+v %v %v", c.doc, s, perm, err)
			}
			continue
		}
		if err == nil || engine.KindOf(err) != engine.KindInvalid || !strings.Contains(err.Error(), c.msg) {
			t.Errorf("%s: error %v, want invalid %q", c.doc, err, c.msg)
		}
	}
}

func TestParseTransport(t *testing.T) {
	for in, want := range map[string]engine.TransportKind{"": engine.TransportUnspec, "unspec": engine.TransportUnspec,
		"io_uring": engine.TransportIOUring, "gds": engine.TransportGDS} {
		if got, err := ParseTransport(in); err != nil || got != want {
			t.Errorf("ParseTransport(%q) = %v, %v", in, got, err)
		}
	}
	if _, err := ParseTransport("IO_URING"); err == nil {
		t.Error("transport names are case-sensitive")
	}
	_ = config.Size(0)
}
