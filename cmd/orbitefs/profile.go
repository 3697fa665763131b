// profile.go owns the profiles the bench commands write on request: a
// CPU profile (--cpuprofile, go tool pprof) and an execution trace
// (--trace, go tool trace).

package main

import (
	"fmt"
	"os"
	"runtime/pprof"
	"runtime/trace"
)

// startProfiles starts a CPU profile written to cpuFile and an execution
// trace written to traceFile (an empty name starts neither) and returns
// the function that stops them and closes their files. On an error
// nothing is left running; the error names the flag.
func startProfiles(cpuFile, traceFile string) (stop func(), err error) {
	var stops []func()
	stop = func() {
		for i := len(stops) - 1; i >= 0; i-- {
			stops[i]()
		}
	}
	start := func(flag, name string, begin func(*os.File) error, end func()) error {
		if name == "" {
			return nil
		}
		f, err := os.Create(name)
		if err != nil {
			return fmt.Errorf("--%s: %w", flag, err)
		}
		if err := begin(f); err != nil {
			f.Close()
			return fmt.Errorf("--%s: %w", flag, err)
		}
		stops = append(stops, func() { end(); f.Close() })
		return nil
	}
	if err := start("cpuprofile", cpuFile, func(f *os.File) error { return pprof.StartCPUProfile(f) }, pprof.StopCPUProfile); err != nil {
		return nil, err
	}
	if err := start("trace", traceFile, func(f *os.File) error { return trace.Start(f) }, trace.Stop); err != nil {
		stop()
		return nil, err
	}
	return stop, nil
}
