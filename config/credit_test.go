package config

import (
	"strings"
	"testing"
)

// TestReceiverCreditValidation: every [peer.receiver_credit] refusal
// names its key and the value; the defaults load off.
func TestReceiverCreditValidation(t *testing.T) {
	d, err := Parse("")
	if err != nil || d.Peer.ReceiverCredit.Enabled || d.Peer.ReceiverCredit.MaxSessions != 128 ||
		d.Peer.ReceiverCredit.MaxBytes != 64<<20 || d.Peer.ReceiverCredit.MaxRequests != 1024 ||
		d.Peer.ReceiverCredit.BytesPerSender != 1<<20 || d.Peer.ReceiverCredit.RequestsPerSender != 16 {
		t.Fatalf("defaults: %+v %v", d.Peer.ReceiverCredit, err)
	}
	for _, tc := range []struct{ text, want string }{
		{"[peer.receiver_credit]\nenabled = true\n", "peer.receiver_credit.enabled is true but peer.listen is empty"},
		{"[peer.receiver_credit]\nmax_sessions = 0\n", "peer.receiver_credit.max_sessions (0) must be in [1, 4096]"},
		{"[peer.receiver_credit]\nbytes_per_sender = \"128MiB\"\n", "peer.receiver_credit.bytes_per_sender (128MiB) must be in [1, peer.receiver_credit.max_bytes (64MiB)]"},
		{"[peer.receiver_credit]\nrequests_per_sender = 2000\n", "peer.receiver_credit.requests_per_sender (2000) must be in [1, peer.receiver_credit.max_requests (1024)]"},
		{"[peer.receiver_credit]\nmax_staging_slots = 8\nstaging_slots_per_sender = 9\n", "peer.receiver_credit.staging_slots_per_sender (9) must be in [0, peer.receiver_credit.max_staging_slots (8)]"},
		{"[peer.receiver_credit]\nmax_staging_slots = 8\nstaging_slots_per_sender = 4\n", "staging_slots_per_sender (4) and consumer_slots_per_sender (0) must both be 0 (off) or both positive"},
		{"[peer.receiver_credit]\nmax_window = 1\n", "max_window"},
	} {
		_, err := Parse(tc.text)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: %v, want %q", tc.text, err, tc.want)
		}
	}
}
