//go:build linux && !noiouring

package main

import (
	"github.com/orbitefs/orbitefs/backends/iouring"
	"github.com/orbitefs/orbitefs/config"
	"github.com/orbitefs/orbitefs/engine"
)

// transports returns the data paths built into this binary.
func transports(cfg config.Engine) []engine.Backend {
	return append([]engine.Backend{iouring.New(cfg.IOUring)}, gpuBackends(cfg)...)
}
