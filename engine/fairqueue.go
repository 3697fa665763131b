// fairqueue.go owns the queue an engine-wide executor takes its units
// from: the jobs of every batch, handed out one unit at a time,
// round-robin across batches, so one large load and many small groups
// all progress (a 4 GiB load does not starve 63 small batches, nor they
// it).
//
// Invariants:
//   - Within one batch, jobs are served in the order they were queued
//     (the batch worker dispatched them in FIFO order); across batches,
//     each take moves on to the next batch with a unit ready.
//   - A job leaves the queue once every unit has been handed out; a job
//     whose next units wait for a producer event (offRing.take returns
//     -1 before it is exhausted) stays, and take skips it.
//   - The queue takes no other lock: its owner guards it.

package engine

// fairQueue is jobs by batch. Not safe for concurrent use.
type fairQueue struct {
	batches []*batchJobs // round-robin order
	at      int          // next batch to serve
}

type batchJobs struct {
	b    *Batch
	jobs []*offRing
}

// push queues job x behind the batch's earlier jobs.
func (q *fairQueue) push(x *offRing) {
	b := x.g.b
	for _, bj := range q.batches {
		if bj.b == b {
			bj.jobs = append(bj.jobs, x)
			return
		}
	}
	q.batches = append(q.batches, &batchJobs{b: b, jobs: []*offRing{x}})
}

// take hands out one unit, serving the batches in turn: (nil, -1) when no
// job has a unit ready.
func (q *fairQueue) take() (*offRing, int) {
	for tries := len(q.batches); tries > 0 && len(q.batches) > 0; tries-- {
		if q.at >= len(q.batches) {
			q.at = 0
		}
		bj := q.batches[q.at]
		for j := 0; j < len(bj.jobs); {
			x := bj.jobs[j]
			k := x.take()
			if x.exhausted() {
				bj.jobs = append(bj.jobs[:j], bj.jobs[j+1:]...)
			} else {
				j++
			}
			if k >= 0 {
				q.advance(bj)
				return x, k
			}
		}
		q.advance(bj)
	}
	return nil, -1
}

// advance moves the turn past bj, dropping it when it has no job left.
func (q *fairQueue) advance(bj *batchJobs) {
	if len(bj.jobs) > 0 {
		q.at++
		return
	}
	q.batches = append(q.batches[:q.at], q.batches[q.at+1:]...)
}

// holds reports whether job x is queued.
func (q *fairQueue) holds(x *offRing) bool {
	for _, bj := range q.batches {
		for _, y := range bj.jobs {
			if y == x {
				return true
			}
		}
	}
	return false
}

// empty reports whether no job is queued.
func (q *fairQueue) empty() bool { return len(q.batches) == 0 }

// drain removes and returns every queued job.
func (q *fairQueue) drain() []*offRing {
	var out []*offRing
	for _, bj := range q.batches {
		out = append(out, bj.jobs...)
	}
	q.batches, q.at = nil, 0
	return out
}
