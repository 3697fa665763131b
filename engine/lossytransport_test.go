// lossytransport_test.go wraps a real file transport so that a test can
// make it lose completions: while lose is set, the real ring runs every
// op, but Reap swallows their CQEs, as a kernel that never answered
// would look to the engine. The ring's uncertain outcome in the executor
// contract (execcontract_test.go) uses it.

package engine_test

import (
	"sync/atomic"
	"time"

	"github.com/orbitefs/orbitefs/engine"
)

type lossyTransport struct {
	engine.FileTransport
	lose atomic.Bool
}

func (t *lossyTransport) Acquire() (engine.Queue, error) {
	q, err := t.FileTransport.Acquire()
	if q == nil {
		return q, err
	}
	return &lossyQueue{Queue: q, t: t}, err
}

func (t *lossyTransport) TryAcquire() (engine.Queue, error) {
	q, err := t.FileTransport.TryAcquire()
	if q == nil {
		return q, err
	}
	return &lossyQueue{Queue: q, t: t}, err
}

type lossyQueue struct {
	engine.Queue
	t *lossyTransport
}

func (q *lossyQueue) Reap(wait time.Duration, fn func(engine.Completion)) (int, error) {
	if !q.t.lose.Load() {
		return q.Queue.Reap(wait, fn)
	}
	_, err := q.Queue.Reap(wait, func(engine.Completion) {})
	return 0, err
}
