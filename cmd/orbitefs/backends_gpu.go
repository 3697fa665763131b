package main

import (
	"github.com/orbitefs/orbitefs/config"
	"github.com/orbitefs/orbitefs/engine"
)

// gpuBackends returns the GPU backends built into this binary. They load
// libcuda and libcufile only when the engine first needs them.
func gpuBackends(config.Engine) []engine.Backend { return nil }
