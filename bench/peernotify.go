// peernotify.go owns the notification workload of `orbitefs bench peer
// --op notify`: Count numbered messages sent by Concurrency senders over
// one Conn, drained by a receiver that counts every message it gets, so
// each acknowledged one is checked to arrive exactly once.

package bench

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/orbitefs/orbitefs/peer"
)

// Receive takes the next notification at the receiver.
type Receive func(ctx context.Context) (peer.Notification, error)

// RunPeerNotify sends o.Count notifications on c and drains them with
// recv. A busy answer (inbox full: definitely not delivered) is sent
// again after a pause; every other outcome is final.
func RunPeerNotify(ctx context.Context, c *peer.Conn, recv Receive, o PeerOptions) (PeerResult, error) {
	if err := o.Validate(); err != nil {
		return PeerResult{}, err
	}
	const prefix = "bench-notify/"
	seen := make([]uint8, o.Count)
	var received, dups atomic.Uint64
	rctx, stopRecv := context.WithCancel(ctx)
	recvDone := make(chan error, 1)
	go func() {
		for {
			n, err := recv(rctx)
			if err != nil {
				recvDone <- err
				return
			}
			i, err := strconv.Atoi(strings.TrimPrefix(n.Message, prefix))
			if err != nil || i < 0 || i >= o.Count {
				recvDone <- fmt.Errorf("received a notification not of this run: %q", n.Message)
				return
			}
			if seen[i]++; seen[i] > 1 {
				dups.Add(1)
			}
			received.Add(1)
		}
	}()
	var (
		next                              atomic.Int64
		delivered, busy, unknown, notSent atomic.Uint64
		outcome                           = make([]peer.Delivery, o.Count)
		mu                                sync.Mutex
		hist                              Histogram
		firstErr                          error
		wg                                sync.WaitGroup
	)
	cpu0, srv0 := cpuNow(), procCPU(o.ServerPID)
	t0 := time.Now()
	for range o.Concurrency {
		wg.Go(func() {
			var h Histogram
			defer func() {
				mu.Lock()
				hist.Merge(&h)
				mu.Unlock()
			}()
			for {
				i := int(next.Add(1) - 1)
				if i >= o.Count || ctx.Err() != nil {
					return
				}
				msg := prefix + strconv.Itoa(i)
				for {
					t := time.Now()
					d, err := c.Notify(ctx, "bench", msg)
					outcome[i] = d
					switch d {
					case peer.Delivered:
						h.Record(time.Since(t))
						delivered.Add(1)
					case peer.Busy:
						busy.Add(1)
						time.Sleep(100 * time.Microsecond)
						continue
					case peer.Unknown:
						unknown.Add(1)
					default:
						notSent.Add(1)
					}
					if err != nil {
						mu.Lock()
						if firstErr == nil {
							firstErr = err
						}
						mu.Unlock()
					}
					break
				}
			}
		})
	}
	wg.Wait()
	secs := time.Since(t0).Seconds()
	// Let the receiver drain what was acknowledged (it is in the inbox).
	for deadline := time.Now().Add(5 * time.Second); received.Load() < delivered.Load() && time.Now().Before(deadline); {
		time.Sleep(time.Millisecond)
	}
	time.Sleep(50 * time.Millisecond) // a duplicate would arrive about now
	stopRecv()
	if err := <-recvDone; !errors.Is(err, context.Canceled) {
		return PeerResult{}, err
	}
	cpu1, srv1 := cpuNow(), procCPU(o.ServerPID)
	n := &NotifyResult{Delivered: delivered.Load(), Busy: busy.Load(), Unknown: unknown.Load(), NotSent: notSent.Load(),
		Received: received.Load(), Duplicates: dups.Load()}
	for i, d := range outcome {
		if d == peer.Delivered && seen[i] == 0 {
			n.Missing++
		}
		if d == peer.NotSent && seen[i] > 0 {
			n.Duplicates++ // arrived though the sender was told it never would
		}
	}
	r := PeerResult{Op: "notify", Concurrency: o.Concurrency, Seconds: secs, Ops: n.Delivered, Notify: n,
		OpsPerSec: float64(n.Delivered) / secs, ServerCPUSeconds: -1}
	r.P50Us, r.P99Us = us(hist.Quantile(0.5)), us(hist.Quantile(0.99))
	r.P999Us, r.MaxUs = us(hist.Quantile(0.999)), us(hist.Max())
	cpu := cpu1.sub(cpu0)
	r.ClientCPUSeconds = (cpu.user + cpu.sys).Seconds()
	if srv0 >= 0 && srv1 >= 0 {
		r.ServerCPUSeconds = srv1 - srv0
	}
	if n.Duplicates > 0 || n.Missing > 0 {
		return r, fmt.Errorf("%d duplicates and %d missing of %d delivered notifications", n.Duplicates, n.Missing, n.Delivered)
	}
	if firstErr != nil {
		return r, fmt.Errorf("%d unknown and %d not sent, the first: %w", n.Unknown, n.NotSent, firstErr)
	}
	return r, nil
}
