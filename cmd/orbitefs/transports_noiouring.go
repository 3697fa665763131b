//go:build !linux || noiouring

package main

import (
	"github.com/orbitefs/orbitefs/config"
	"github.com/orbitefs/orbitefs/engine"
)

// transports returns the data paths built into this binary: none in a
// build without io_uring, so file READ/WRITE report unavailable.
func transports(cfg config.Engine) []engine.Backend { return gpuBackends(cfg) }
