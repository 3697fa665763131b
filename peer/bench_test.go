package peer

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/orbitefs/orbitefs/config"
	"github.com/orbitefs/orbitefs/engine"
	"github.com/orbitefs/orbitefs/peer/wire"
)

// BenchmarkLoopback moves 1 GiB per op over loopback, as 4 requests of
// 256 MiB, WRITE and READ, on 1 lane (tcp) and 4 lanes (hp_tcp).
func BenchmarkLoopback(b *testing.B) {
	const region, total = 256 << 20, 1 << 30
	var exp memExports
	exp.add(1, "kv", region, wire.PermReadWrite)
	s, _ := startServer(b, &exp, "127.0.0.1:0", testKey)
	buf := pattern(region, 1)
	for _, op := range []string{"write", "read"} {
		for _, lanes := range []int{1, 4} {
			b.Run(fmt.Sprintf("%s/lanes=%d", op, lanes), func(b *testing.B) {
				c := dial(b, addrOf(s), testKey, lanes)
				b.SetBytes(total)
				for b.Loop() {
					for range total / region {
						var err error
						if op == "write" {
							err = c.Write(context.Background(), "kv", 0, buf)
						} else {
							err = c.Read(context.Background(), "kv", 0, buf)
						}
						if err != nil {
							b.Fatal(err)
						}
					}
				}
			})
		}
	}
}

// BenchmarkSmallWrite is the 4 KiB WRITE round trip over loopback,
// alone and beside a stream of 64 MiB WRITEs on the same Conn (4 lanes),
// with its p50 and p99. The regions are engine regions of cpu memory,
// received in place as in the daemon, and the stream writes another
// one, so what is measured is the transport alone.
func BenchmarkSmallWrite(b *testing.B) {
	e, err := engine.New(config.DefaultEngine())
	if err != nil {
		b.Fatal(err)
	}
	defer e.Close(5 * time.Second)
	var exp engineExports
	for i, n := range []uint64{1 << 20, 64 << 20} {
		r, err := e.RegisterMemory(n)
		if err != nil {
			b.Fatal(err)
		}
		exp = append(exp, Export{Descriptor: wire.Descriptor{ID: uint64(i + 1), Name: []string{"kv", "stream"}[i],
			Location: "cpu", Bytes: n, Perm: wire.PermReadWrite}, Mem: r})
	}
	for _, stream := range []bool{false, true} {
		b.Run(fmt.Sprintf("stream=%v", stream), func(b *testing.B) {
			// One process: its server and client share one bulk gate.
			gate := NewGate(DefaultGateLinger)
			s := NewServer(ServerConfig{Name: "srv", Key: testKey, IOTimeout: 10 * time.Second, MaxSlice: DefaultMaxSlice, Gate: gate}, exp)
			if err := s.Listen("127.0.0.1:0"); err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			c, err := Dial(context.Background(), addrOf(s), Config{Name: "cli", Key: testKey, Lanes: 4, IOTimeout: 10 * time.Second, Gate: gate})
			if err != nil {
				b.Fatal(err)
			}
			defer c.Close()
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan struct{})
			go func() {
				defer close(done)
				big := make([]byte, 64<<20)
				for stream && ctx.Err() == nil {
					c.Write(ctx, "stream", 0, big)
				}
			}()
			small := pattern(4096, 3)
			lat := make([]time.Duration, 0, 1<<16)
			for b.Loop() {
				t := time.Now()
				if err := c.Write(context.Background(), "kv", 0, small); err != nil {
					b.Fatal(err)
				}
				lat = append(lat, time.Since(t))
			}
			cancel()
			<-done
			slices.Sort(lat)
			b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-us")
			b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-us")
		})
	}
}

// engineExports exports engine regions, by id.
type engineExports []Export

func (x engineExports) Exports() []Export { return x }

func (x engineExports) Export(id uint64) (Export, bool) {
	for _, e := range x {
		if e.ID == id {
			return e, true
		}
	}
	return Export{}, false
}
