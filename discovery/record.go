// record.go owns what one engine publishes about itself: the versioned
// JSON record stored under its key, and the key layout.
//
// Invariants:
//   - A record is validated before it is written and after it is read;
//     nothing invalid reaches etcd from us, and nothing invalid read from
//     etcd reaches a view.
//   - The key of an engine is Prefix + "engines/" + Name; the record's
//     Name always equals the key's last element.
//   - Version changes only on an incompatible change; a reader skips a
//     record of another version (and says so) instead of guessing, and
//     ignores fields it does not know, so additions need no new version.

package discovery

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"strconv"
	"strings"
	"unicode"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/orbitefs/orbitefs/engine"
)

// RecordVersion is the record format this package writes and reads.
const RecordVersion = 1

// The bounds of a record.
const (
	MaxNameLen  = 255  // an engine's or a region's name, in bytes
	MaxRegions  = 4096 // regions in one record
	enginesPath = "engines/"
)

// Epoch identifies one incarnation of an engine: a new, random value at
// every start (the peer server's epoch). A name seen with a new epoch is
// a restarted engine; everything learned from the old epoch is stale.
// It is written as 16 hex digits, as the logs print it.
type Epoch uint64

func (e Epoch) String() string { return fmt.Sprintf("%016x", uint64(e)) }

// MarshalText writes 16 hex digits.
func (e Epoch) MarshalText() ([]byte, error) { return []byte(e.String()), nil }

// UnmarshalText reads 1 to 16 hex digits.
func (e *Epoch) UnmarshalText(b []byte) error {
	if len(b) == 0 || len(b) > 16 {
		return fmt.Errorf("epoch %q: want 1 to 16 hex digits", b)
	}
	v, err := strconv.ParseUint(string(b), 16, 64)
	if err != nil {
		return fmt.Errorf("epoch %q: want hex digits", b)
	}
	*e = Epoch(v)
	return nil
}

// Record is what an engine publishes: who it is (name and epoch), where
// peers reach it, and the regions it exports.
type Record struct {
	Version int      `json:"v"`
	Name    string   `json:"name"`
	Epoch   Epoch    `json:"epoch"`
	Addr    string   `json:"addr"` // host:port of its peer listener
	Regions []Region `json:"regions"`
}

// Region describes one exported memory region.
type Region struct {
	Name       string `json:"name"`
	Bytes      uint64 `json:"bytes"`
	Location   string `json:"location"`   // cpu, pinned or cuda:N
	Permission string `json:"permission"` // read, write or read_write
}

// invalid is a bad record or configuration: KindInvalid, named.
func invalid(op, name, format string, args ...any) error {
	return &engine.Error{Op: op, Name: name, Kind: engine.KindInvalid, Err: fmt.Errorf(format, args...)}
}

// Validate checks a record as it will be written (Version 0 is taken as
// RecordVersion); the error names the first bad field and its value.
func (r *Record) Validate() error {
	if r.Version != 0 && r.Version != RecordVersion {
		return invalid("record", r.Name, "version %d: this engine reads version %d", r.Version, RecordVersion)
	}
	if err := checkName("name", r.Name); err != nil {
		return invalid("record", r.Name, "%v", err)
	}
	if r.Epoch == 0 {
		return invalid("record", r.Name, "epoch 0: an engine's epoch is never 0")
	}
	host, port, err := net.SplitHostPort(r.Addr)
	if err != nil || host == "" {
		return invalid("record", r.Name, "addr %q: want host:port that peers can dial, such as 10.0.0.7:7070", r.Addr)
	}
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
		return invalid("record", r.Name, "addr %q: port %q is not a number in [1, 65535]", r.Addr, port)
	}
	if len(r.Regions) > MaxRegions {
		return invalid("record", r.Name, "%d regions: at most %d", len(r.Regions), MaxRegions)
	}
	seen := make(map[string]bool, len(r.Regions))
	for i, g := range r.Regions {
		if err := g.validate(); err != nil {
			return invalid("record", r.Name, "regions[%d]: %v", i, err)
		}
		if seen[g.Name] {
			return invalid("record", r.Name, "regions[%d]: name %q appears twice", i, g.Name)
		}
		seen[g.Name] = true
	}
	return nil
}

func (g *Region) validate() error {
	if err := checkName("name", g.Name); err != nil {
		return err
	}
	if g.Bytes == 0 {
		return fmt.Errorf("%q: bytes 0: a region has at least one byte", g.Name)
	}
	if !validLocation(g.Location) {
		return fmt.Errorf("%q: location %q: want cpu, pinned or cuda:N", g.Name, g.Location)
	}
	switch g.Permission {
	case "read", "write", "read_write":
	default:
		return fmt.Errorf("%q: permission %q: want read, write or read_write", g.Name, g.Permission)
	}
	return nil
}

func validLocation(s string) bool {
	switch s {
	case "cpu", "pinned":
		return true
	}
	n, ok := strings.CutPrefix(s, "cuda:")
	if !ok || n == "" || len(n) > 4 {
		return false
	}
	for _, c := range n {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// checkName accepts what can be a key's last element and a URI host
// part: printable, no '/', no space, at most MaxNameLen bytes.
func checkName(field, s string) error {
	if s == "" {
		return fmt.Errorf("%s is empty", field)
	}
	if len(s) > MaxNameLen {
		return fmt.Errorf("%s %.32q...: %d bytes, at most %d", field, s, len(s), MaxNameLen)
	}
	for _, c := range s {
		if c == '/' || unicode.IsSpace(c) || !unicode.IsPrint(c) {
			return fmt.Errorf("%s %q: %q is not allowed (printable, no '/', no space)", field, s, c)
		}
	}
	return nil
}

// encode validates r and returns its stored form (with Version set).
func (r Record) encode() ([]byte, error) {
	if err := r.Validate(); err != nil {
		return nil, err
	}
	r.Version = RecordVersion
	r.Regions = append([]Region(nil), r.Regions...)
	if r.Regions == nil {
		r.Regions = []Region{}
	}
	return json.Marshal(r)
}

// decodeRecord parses and validates a stored record found under key
// name (the key's last element).
func decodeRecord(name string, b []byte) (Record, error) {
	var r Record
	if err := json.Unmarshal(b, &r); err != nil {
		return Record{}, invalid("record", name, "not a record: %v", err)
	}
	if r.Version != RecordVersion {
		return Record{}, invalid("record", name, "version %d: this engine reads version %d", r.Version, RecordVersion)
	}
	if r.Name != name {
		return Record{}, invalid("record", name, "name %q under the key of %q", r.Name, name)
	}
	if err := r.Validate(); err != nil {
		return Record{}, err
	}
	return r, nil
}

// clone returns a copy sharing nothing mutable with r.
func (r Record) clone() Record {
	r.Regions = append([]Region(nil), r.Regions...)
	return r
}

// equal reports whether two records publish the same thing.
func (r Record) equal(o Record) bool {
	if r.Name != o.Name || r.Epoch != o.Epoch || r.Addr != o.Addr || len(r.Regions) != len(o.Regions) {
		return false
	}
	for i := range r.Regions {
		if r.Regions[i] != o.Regions[i] {
			return false
		}
	}
	return true
}

// checkPrefix accepts an etcd key prefix that begins and ends with '/'.
func checkPrefix(p string) error {
	if len(p) < 2 || p[0] != '/' || p[len(p)-1] != '/' {
		return invalid("discovery", "", "prefix %q: want a key prefix that begins and ends with '/', such as /orbitefs/", p)
	}
	return nil
}

// enginesKey is the prefix every engine's key shares.
func enginesKey(prefix string) string { return prefix + enginesPath }

// engineKey is the key of the engine named name.
func engineKey(prefix, name string) string { return enginesKey(prefix) + name }

// Lookup reads the live record of name under prefix from etcd (one Get),
// for a client that resolves a name once instead of keeping a view. ok
// is false when no engine holds the name; a record that does not decode
// is an error naming the key.
func Lookup(ctx context.Context, cli *clientv3.Client, prefix, name string) (_ Record, ok bool, _ error) {
	if err := checkPrefix(prefix); err != nil {
		return Record{}, false, err
	}
	if err := checkName("name", name); err != nil {
		return Record{}, false, invalid("lookup", name, "%v", err)
	}
	key := engineKey(prefix, name)
	resp, err := cli.Get(ctx, key)
	if err != nil {
		return Record{}, false, &engine.Error{Op: "lookup", Name: name, Kind: engine.KindUnavailable, Err: fmt.Errorf("get %s: %w", key, err)}
	}
	if len(resp.Kvs) == 0 {
		return Record{}, false, nil
	}
	rec, err := decodeRecord(name, resp.Kvs[0].Value)
	if err != nil {
		return Record{}, false, fmt.Errorf("%s: %w", key, err)
	}
	return rec, true, nil
}
