// ino.go owns inode numbering: fixed numbers for the static files, and
// numbers derived from a control object's sequence number for object
// directories and their files.
//
// Invariants:
//   - Static numbers are below 64; object numbers are seq<<22 | slot with
//     seq >= 1, so the two ranges never meet, and both stay below go-fuse's
//     first automatic number (2^63).
//   - A slot is below 2^22: fixed slots below 16, task i at 16+i
//     (engine.max_batch_requests is at most 2^20).

package fusefs

const (
	inoRoot uint64 = 1 + iota
	inoReadme
	inoVersion
	inoStats
	inoMetrics
	inoError
	inoMemory
	inoRegister
	inoSegments
	inoOpen
	inoCtl
	inoBatches
	inoClone
	inoEngineCtl
	inoQoS // qos.go
	inoQoSContracts
	inoQoSUsage
	inoQoSResolve
	inoTxn     // txn.go
	inoCluster // cluster.go
	inoClusterStatus
	inoClusterPeers
	inoPeers // peers.go
	inoNotifications
	inoCredit // credit.go
	inoCreditStatus
	inoCreditIssuer
	inoCreditCmd0 // one per control.CreditCommands, in order
)

const (
	slotDir uint64 = iota
	slotInfo
	slotData
	slotRefresh
	slotSubmit
	slotCtl
	slotState
	slotStatus
	slotWait
	slotError
	slotTasks
	slotTask0 uint64 = 16
)

func objIno(seq, slot uint64) uint64 { return seq<<22 | slot }

func taskIno(seq uint64, i int) uint64 { return objIno(seq, slotTask0+uint64(i)) }
