// credit.go owns [peer.receiver_credit]: the receiver's credit issuer,
// the windows this engine grants the engines that send to it. The
// sender's side is engine.max_receiver_credit_sessions.
//
// Invariants:
//   - Off unless enabled; when on, each per-sender window fits the
//     aggregate bound it is carved from, so a first sender always fits.
//   - Staging and consumer slots are both off (0) or both bounded the
//     same way: a per-sender window never exceeds its aggregate.

package config

// ReceiverCredit configures the receiver's credit issuer.
type ReceiverCredit struct {
	// Enabled turns the issuer on: senders may connect and get a window.
	Enabled bool `toml:"enabled"`
	// MaxSessions bounds the senders connected at once.
	MaxSessions int `toml:"max_sessions"`
	// MaxBytes and MaxRequests bound the sum of every sender's window.
	MaxBytes    Size `toml:"max_bytes"`
	MaxRequests int  `toml:"max_requests"`
	// BytesPerSender and RequestsPerSender are one sender's window.
	BytesPerSender    Size `toml:"bytes_per_sender"`
	RequestsPerSender int  `toml:"requests_per_sender"`
	// Remote Pin staging slots and consumer sessions: 0 disables them.
	MaxStagingSlots        int `toml:"max_staging_slots"`
	MaxConsumerSlots       int `toml:"max_consumer_slots"`
	StagingSlotsPerSender  int `toml:"staging_slots_per_sender"`
	ConsumerSlotsPerSender int `toml:"consumer_slots_per_sender"`
}

// The bounds of [peer.receiver_credit].
const (
	MaxCreditSessionsCeiling = 4096
	MaxCreditRequestsCeiling = 1 << 24
	MaxCreditSlotsCeiling    = 1 << 16
	MaxCreditBytesCeiling    = 1 << 40
)

func (c *ReceiverCredit) validate(p *problems) {
	const pre = "peer.receiver_credit."
	p.between(pre+"max_sessions", c.MaxSessions, 1, MaxCreditSessionsCeiling)
	if c.MaxBytes < 1 || c.MaxBytes > MaxCreditBytesCeiling {
		p.addf("%smax_bytes (%s) must be in [1, 1TiB]", pre, c.MaxBytes)
	}
	p.between(pre+"max_requests", c.MaxRequests, 1, MaxCreditRequestsCeiling)
	if c.BytesPerSender < 1 || c.BytesPerSender > c.MaxBytes {
		p.addf("%sbytes_per_sender (%s) must be in [1, %smax_bytes (%s)]", pre, c.BytesPerSender, pre, c.MaxBytes)
	}
	if c.RequestsPerSender < 1 || c.RequestsPerSender > c.MaxRequests {
		p.addf("%srequests_per_sender (%d) must be in [1, %smax_requests (%d)]", pre, c.RequestsPerSender, pre, c.MaxRequests)
	}
	p.between(pre+"max_staging_slots", c.MaxStagingSlots, 0, MaxCreditSlotsCeiling)
	p.between(pre+"max_consumer_slots", c.MaxConsumerSlots, 0, MaxCreditSlotsCeiling)
	if c.StagingSlotsPerSender < 0 || c.StagingSlotsPerSender > c.MaxStagingSlots {
		p.addf("%sstaging_slots_per_sender (%d) must be in [0, %smax_staging_slots (%d)]", pre, c.StagingSlotsPerSender, pre, c.MaxStagingSlots)
	}
	if c.ConsumerSlotsPerSender < 0 || c.ConsumerSlotsPerSender > c.MaxConsumerSlots {
		p.addf("%sconsumer_slots_per_sender (%d) must be in [0, %smax_consumer_slots (%d)]", pre, c.ConsumerSlotsPerSender, pre, c.MaxConsumerSlots)
	}
	if (c.StagingSlotsPerSender == 0) != (c.ConsumerSlotsPerSender == 0) {
		p.addf("%sstaging_slots_per_sender (%d) and consumer_slots_per_sender (%d) must both be 0 (off) or both positive: a remote Pin session takes one consumer slot and its staging slots together", pre, c.StagingSlotsPerSender, c.ConsumerSlotsPerSender)
	}
}
