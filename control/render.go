// render.go owns the JSON the mount's read-only files return: task,
// batch status, memory info and segment info. Each is built by one pure
// function from engine snapshots, so tests need no mount.
//
// Invariants:
//   - "error" fields are null when there is no error, else the full text.
//   - Field names are stable (contract v1); new fields may be added, none
//     renamed or removed.

package control

import (
	"encoding/json"

	"github.com/orbitefs/orbitefs/engine"
)

// TaskJSON is /ctl/batches/<N>/tasks/<i>.
type TaskJSON struct {
	Index            int     `json:"index"`
	State            string  `json:"state"`
	Length           uint64  `json:"length"`
	TransferredBytes uint64  `json:"transferred_bytes"`
	Transport        string  `json:"transport"`
	PhysicalOwner    int     `json:"physical_owner"`
	Error            *string `json:"error"`
	RemoteEffect     string  `json:"remote_effect"`
	// FailoverCount is how many times the task moved to its next
	// transport after a failed attempt (transport is the current one).
	FailoverCount int `json:"failover_count"`
}

// RenderTask converts an engine task snapshot.
func RenderTask(t engine.TaskStatus) TaskJSON {
	return TaskJSON{
		Index: t.Index, State: t.State.String(), Length: t.Length, TransferredBytes: t.Transferred,
		Transport: t.Transport.String(), PhysicalOwner: t.PhysicalOwner, Error: errText(t.Err),
		RemoteEffect: t.RemoteEffect.String(), FailoverCount: t.FailoverCount,
	}
}

// TaskSummary counts a batch's tasks per state.
type TaskSummary struct {
	Total     int `json:"total"`
	Pending   int `json:"pending"`
	Running   int `json:"running"`
	Completed int `json:"completed"`
	Failed    int `json:"failed"`
	Cancelled int `json:"cancelled"`
}

// SubmissionJSON is one group in a batch's status.
type SubmissionJSON struct {
	Index int    `json:"index"`
	Op    string `json:"op"`
	// Target is the segment name the submission used; URI its file.
	Target string           `json:"target"`
	URI    string           `json:"uri"`
	Tasks  engine.TaskRange `json:"tasks"`
	Done   bool             `json:"done"`
	// CompletedRequests is the fully successful prefix; CompletedBytes
	// its bytes.
	CompletedRequests int    `json:"completed_requests"`
	CompletedBytes    uint64 `json:"completed_bytes"`
	// RequestIndex is the first unsuccessful request (relative to the
	// submission), or -1; AffectedRequests the span from it through the
	// last request handed to the kernel.
	RequestIndex     int     `json:"request_index"`
	AffectedRequests int     `json:"affected_requests"`
	LocallyDrained   bool    `json:"locally_drained"`
	Error            *string `json:"error"`
	// RemoteEffect is what a WRITE submission may have done to its file:
	// none, applied (confirmed bytes only) or unknown.
	RemoteEffect string `json:"remote_effect"`
	// Notify is each destination's notification outcome, when the
	// submission carried one.
	Notify []NotifyJSON `json:"notify,omitempty"`
}

// StatusJSON is /ctl/batches/<N>/status.
type StatusJSON struct {
	ID          uint64           `json:"id"`
	State       string           `json:"state"`
	Sealed      bool             `json:"sealed"`
	Capacity    int              `json:"capacity"`
	Tasks       TaskSummary      `json:"tasks"`
	Submissions []SubmissionJSON `json:"submissions"`
}

// BatchSnapshot is what RenderStatus needs from a batch.
type BatchSnapshot struct {
	ID       uint64
	State    engine.State
	Sealed   bool
	Capacity int
	Tasks    []engine.TaskStatus
	Reports  []engine.Report
	// Targets maps a submission's first task index to the segment name it
	// named; Notify to its notification's outcomes.
	Targets map[int]string
	Notify  map[int][]NotifyJSON
}

// RenderStatus builds the status document.
func RenderStatus(b BatchSnapshot) StatusJSON {
	st := StatusJSON{ID: b.ID, State: b.State.String(), Sealed: b.Sealed, Capacity: b.Capacity,
		Submissions: make([]SubmissionJSON, 0, len(b.Reports))}
	st.Tasks.Total = len(b.Tasks)
	for _, t := range b.Tasks {
		switch t.State {
		case engine.TaskPending:
			st.Tasks.Pending++
		case engine.TaskRunning:
			st.Tasks.Running++
		case engine.TaskCompleted:
			st.Tasks.Completed++
		case engine.TaskFailed:
			st.Tasks.Failed++
		case engine.TaskCancelled:
			st.Tasks.Cancelled++
		}
	}
	for i, r := range b.Reports {
		st.Submissions = append(st.Submissions, SubmissionJSON{
			Index: i, Op: r.Op.String(), Target: b.Targets[r.Tasks.First], URI: r.Target, Tasks: r.Tasks,
			Done: r.Done, CompletedRequests: r.CompletedRequests, CompletedBytes: r.CompletedBytes,
			RequestIndex: r.RequestIndex, AffectedRequests: r.AffectedRequests,
			LocallyDrained: r.LocallyDrained, Error: errText(r.Err), RemoteEffect: r.RemoteEffect.String(),
			Notify: b.Notify[r.Tasks.First],
		})
	}
	return st
}

// MemoryInfo is /memory/<name>/info.
type MemoryInfo struct {
	Name        string `json:"name"`
	Location    string `json:"location"`
	BaseAddress uint64 `json:"base_address"`
	Bytes       uint64 `json:"bytes"`
	Shm         string `json:"shm,omitempty"`
	Export      string `json:"export"`
	// CUDAIPCMappings are the peers' CUDA IPC mappings of a cuda:N
	// export, by peer session; rmdir is EBUSY while any is held.
	CUDAIPCMappings map[string]int `json:"cuda_ipc_mappings,omitempty"`
}

// SegmentInfoJSON is /segments/<name>/info: the engine's info plus the
// name and the permission as a word.
type SegmentInfoJSON struct {
	Name string `json:"name"`
	engine.SegmentInfo
	Permission string `json:"permission"`
}

// MemSegmentInfoJSON is /segments/<name>/info of a memory segment.
type MemSegmentInfoJSON struct {
	Name       string `json:"name"`
	URI        string `json:"uri"`
	Memory     string `json:"memory"`
	Location   string `json:"location"`
	Size       uint64 `json:"size"`
	Users      int    `json:"users"`
	Draining   bool   `json:"draining"`
	Permission string `json:"permission"`
}

// RenderMemSegmentInfo combines names with the engine's info.
func RenderMemSegmentInfo(name, memory string, info engine.MemSegmentInfo) MemSegmentInfoJSON {
	return MemSegmentInfoJSON{Name: name, URI: info.URI, Memory: memory, Location: string(info.Location), Size: info.Size,
		Users: info.Users, Draining: info.Draining, Permission: info.Permission.String()}
}

// RemoteSegmentInfoJSON is /segments/<name>/info of a peer's region.
type RemoteSegmentInfoJSON struct {
	Name       string `json:"name"`
	URI        string `json:"uri"`
	Address    string `json:"address"`
	Peer       string `json:"peer"`
	Epoch      uint64 `json:"epoch"`
	Region     string `json:"region"`
	Size       uint64 `json:"size"`
	Export     string `json:"export"`
	Lanes      int    `json:"lanes"`
	UnitBytes  uint64 `json:"unit_bytes"`
	Users      int    `json:"users"`
	Draining   bool   `json:"draining"`
	Permission string `json:"permission"`
	// CUDAIPC is present when the peer shares this host and exported the
	// region's CUDA IPC handle: device requests copy on the GPU.
	CUDAIPC *RemoteIPCJSON `json:"cuda_ipc,omitempty"`
}

// RemoteIPCJSON is a remote segment's CUDA IPC export: the exporter's
// device, and the mappings this engine holds open (one per local device
// that used it).
type RemoteIPCJSON struct {
	Device   int `json:"device"`
	Mappings int `json:"mappings"`
}

// RenderRemoteSegmentInfo combines a name with the engine's info.
func RenderRemoteSegmentInfo(name string, info engine.RemoteSegmentInfo) RemoteSegmentInfoJSON {
	r := info.Remote
	export := "none"
	if r.Export != 0 {
		export = r.Export.String()
	}
	out := RemoteSegmentInfoJSON{Name: name, URI: info.URI, Address: r.Address, Peer: r.Peer, Epoch: r.Epoch,
		Region: r.Region, Size: r.Size, Export: export, Lanes: r.Lanes, UnitBytes: r.Unit,
		Users: info.Users, Draining: info.Draining, Permission: info.Permission.String()}
	if r.IPC != nil {
		out.CUDAIPC = &RemoteIPCJSON{Device: r.IPC.Device, Mappings: info.IPCMappings}
	}
	return out
}

// RenderSegmentInfo combines a name with the engine's info.
func RenderSegmentInfo(name string, info engine.SegmentInfo) SegmentInfoJSON {
	return SegmentInfoJSON{Name: name, SegmentInfo: info, Permission: info.Permission.String()}
}

func errText(err error) *string {
	if err == nil {
		return nil
	}
	s := err.Error()
	return &s
}

// marshal renders v as indented JSON with a final newline, the form every
// JSON file on the mount has: json.MarshalIndent's bytes, indented by
// indentCompact (indent.go) instead of json's second, slower pass.
func marshal(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		// Every rendered type is plain data; this cannot happen.
		panic(err)
	}
	out := indentCompact(make([]byte, 0, 2*len(b)+1), b)
	return append(out, '\n')
}
