package main

import (
	"github.com/orbitefs/orbitefs/backends/cuda"
	"github.com/orbitefs/orbitefs/backends/gds"
	"github.com/orbitefs/orbitefs/config"
	"github.com/orbitefs/orbitefs/engine"
)

// gpuBackends returns the GPU backends built into this binary. They load
// libcuda and libcufile only when the engine first needs them, so the
// same binary runs on machines without a GPU (GPU requests are then
// EOPNOTSUPP, saying why).
func gpuBackends(cfg config.Engine) []engine.Backend {
	c := cuda.NewBackend(cuda.Options{Logger: cfg.Logger})
	return []engine.Backend{c, gds.NewBackend(c.Bind)}
}
