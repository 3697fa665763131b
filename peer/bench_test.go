package peer

import (
	"context"
	"fmt"
	"testing"

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
