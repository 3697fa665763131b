package control

// credit_test.go: the credit commands' documents, refused with their
// reason before the engine sees them; peer://NAME resolved through the
// cluster view (address, and the member's epoch when none is given);
// only privileged callers.

import (
	"strings"
	"testing"
	"time"

	"github.com/orbitefs/orbitefs/backends/iouring"
	"github.com/orbitefs/orbitefs/config"
	"github.com/orbitefs/orbitefs/engine"
)

type oneMember struct{ p ClusterPeer }

func (c oneMember) ClusterPeers() []ClusterPeer { return []ClusterPeer{c.p} }
func (c oneMember) ClusterStats() ClusterStats  { return ClusterStats{} }

func TestCreditCommands(t *testing.T) {
	cfg := config.DefaultEngine()
	cfg.MaxReceiverCreditSessions = 2
	e, err := engine.New(cfg, iouring.New(cfg.IOUring))
	if err != nil {
		t.Fatal(err)
	}
	s := New(e, Options{Version: "test", DefaultBatchCapacity: 8, MaxDocumentBytes: 4096, CloseTimeout: time.Second,
		Cluster: oneMember{ClusterPeer{Name: "beta", Epoch: "00000000000000ff", Addr: "10.0.0.6:7070"}}})
	t.Cleanup(func() { s.Shutdown(time.Second) })
	root := &engine.Caller{}
	for _, tc := range []struct{ verb, doc, want string }{
		{"activate", `{"peer":"10.0.0.6","epoch":1}`, `peer "10.0.0.6": want the HOST:PORT`},
		{"activate", `{"peer":"10.0.0.6:7070"}`, "activate needs epoch"},
		{"connect", `{"peer":"10.0.0.6:7070","epoch":1}`, "connect takes no epoch"},
		{"update", `{"peer":"10.0.0.6:7070","epoch":1,"totals":[{"resource":"data_bytes","total":1}]}`, "update needs sequence"},
		{"update", `{"peer":"10.0.0.6:7070","epoch":1,"sequence":1,"totals":[{"resource":"bytes","total":1}]}`, `totals[0]: resource "bytes": want one of`},
		{"update", `{"peer":"10.0.0.6:7070","epoch":1,"sequence":1,"totals":[{"resource":"data_bytes"}]}`, "totals[0]: total is missing"},
		{"deactivate", `{"peer":"10.0.0.6:7070","epoch":1,"sequence":1}`, "deactivate takes no sequence"},
		{"disconnect", `{"peer":"10.0.0.6:7070","timeout":"soon"}`, `timeout "soon" is not a positive duration`},
		{"activate", `{"peer":"peer://gamma"}`, `no live member of that name`},
		{"activate", `{"peer":"10.0.0.6:7070","epoch":1,"extra":1}`, "extra"},
	} {
		err := s.Credit(root, tc.verb, []byte(tc.doc))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s %s: %v, want %q", tc.verb, tc.doc, err, tc.want)
		}
	}
	if st := e.ReceiverCreditStats(); st.Sessions != 0 {
		t.Fatalf("refused documents bound something: %+v", st)
	}
	// peer://NAME: the member's address and epoch.
	if err := s.Credit(root, "activate", []byte(`{"peer":"peer://beta"}`)); err != nil {
		t.Fatal(err)
	}
	if b := e.ReceiverCreditStats().Bindings; len(b) != 1 || b[0].Peer != "10.0.0.6:7070" || b[0].Epoch != 0xff {
		t.Fatalf("bindings: %+v", b)
	}
	if err := s.Credit(root, "update", []byte(`{"peer":"peer://beta","sequence":1,"totals":[{"resource":"data_bytes","total":4096}]}`)); err != nil {
		t.Fatal(err)
	}
	err = s.Credit(&engine.Caller{UID: 4242, GID: 4242}, "deactivate", []byte(`{"peer":"peer://beta"}`))
	if engine.KindOf(err) != engine.KindPermission {
		t.Fatalf("an unprivileged deactivate: %v", err)
	}
	if err := s.Credit(root, "deactivate", []byte(`{"peer":"10.0.0.6:7070","epoch":255}`)); err != nil {
		t.Fatal(err)
	}
	err = s.Credit(root, "connect", []byte(`{"peer":"10.0.0.6:7070"}`))
	if engine.KindOf(err) != engine.KindUnavailable || !strings.Contains(string(s.LastError(root)), "peers are not configured") {
		t.Fatalf("connect without a dialer: %v / %s", err, s.LastError(root))
	}
}

// FuzzParseCredit: the credit documents' parser never panics, and a
// document it accepts names a peer and, for the commands that need one,
// an epoch (or a cluster member that supplies it).
func FuzzParseCredit(f *testing.F) {
	for _, seed := range []string{
		`{"peer":"10.0.0.6:7070","epoch":1}`,
		`{"peer":"10.0.0.6:7070","epoch":1,"sequence":2,"freshness_ttl_ms":5,"totals":[{"resource":"data_bytes","total":1}]}`,
		`{"peer":"peer://beta","timeout":"3s","qos_class":2}`,
		`{"peer":"[::1]:1","epoch":18446744073709551615}`,
		`{"peer":"x","epoch":-1}`,
		`{"peer":`,
		``,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		for _, verb := range CreditCommands {
			d, _, err := parseCredit(verb, data, 4096)
			if err != nil {
				continue
			}
			if d.Peer == "" {
				t.Fatalf("%s accepted %q without a peer", verb, data)
			}
			if creditKeys[verb].epoch && d.Epoch == nil && !strings.HasPrefix(d.Peer, memberPrefix) {
				t.Fatalf("%s accepted %q without an epoch", verb, data)
			}
			if verb == CreditUpdate && (d.Sequence == nil || len(d.Totals) == 0) {
				t.Fatalf("update accepted %q without a sequence or totals", data)
			}
		}
	})
}
