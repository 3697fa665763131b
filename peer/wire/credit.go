// credit.go owns the metadata of the receiver credit frames: a sender's
// connect (its QoS class), its completed totals (sync and close), and
// the receiver's cumulative grants.
//
// Invariants:
//   - Like every message, decoding consumes the metadata exactly.

package wire

// CreditConnect asks the receiver to reserve the sender's window. The
// sender's name and epoch come from the session, where it proved them.
type CreditConnect struct {
	QoSClass uint8
}

// CreditDone is a sender's completed_total: the bytes and requests of
// its owners that completed successfully, since it connected.
type CreditDone struct {
	Bytes, Requests uint64
}

// CreditGrant is the receiver's cumulative grant: window + completed.
type CreditGrant struct {
	Bytes, Requests, StagingSlots, ConsumerSlots uint64
}

func (m *CreditConnect) Marshal() []byte { return []byte{m.QoSClass} }

func (m *CreditConnect) Unmarshal(b []byte) error {
	d := dec{b: b}
	m.QoSClass = d.u8("credit qos class")
	return d.done("credit connect")
}

func (m *CreditDone) Marshal() []byte {
	var e enc
	e.u64(m.Bytes)
	e.u64(m.Requests)
	return e.b
}

func (m *CreditDone) Unmarshal(b []byte) error {
	d := dec{b: b}
	m.Bytes = d.u64("credit done bytes")
	m.Requests = d.u64("credit done requests")
	return d.done("credit done")
}

func (m *CreditGrant) Marshal() []byte {
	var e enc
	e.u64(m.Bytes)
	e.u64(m.Requests)
	e.u64(m.StagingSlots)
	e.u64(m.ConsumerSlots)
	return e.b
}

func (m *CreditGrant) Unmarshal(b []byte) error {
	d := dec{b: b}
	m.Bytes = d.u64("credit grant bytes")
	m.Requests = d.u64("credit grant requests")
	m.StagingSlots = d.u64("credit grant staging slots")
	m.ConsumerSlots = d.u64("credit grant consumer slots")
	return d.done("credit grant")
}
