// cpu.go owns the process CPU and allocation accounting around a
// measured interval.

package bench

import (
	"runtime/metrics"
	"time"

	"golang.org/x/sys/unix"
)

// cpuSpan is user and system CPU time of the whole process.
type cpuSpan struct{ user, sys time.Duration }

func cpuNow() cpuSpan {
	var ru unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_SELF, &ru); err != nil {
		return cpuSpan{}
	}
	return cpuSpan{user: time.Duration(ru.Utime.Nano()), sys: time.Duration(ru.Stime.Nano())}
}

func (c cpuSpan) sub(o cpuSpan) cpuSpan { return cpuSpan{user: c.user - o.user, sys: c.sys - o.sys} }

// allocsNow is the cumulative count of heap allocations, read without
// stopping the world.
func allocsNow() uint64 {
	s := []metrics.Sample{{Name: "/gc/heap/allocs:objects"}}
	metrics.Read(s)
	if s[0].Value.Kind() != metrics.KindUint64 {
		return 0
	}
	return s[0].Value.Uint64()
}
