//go:build linux && !noiouring

package engine_test

import (
	"github.com/orbitefs/orbitefs/backends/iouring"
	"github.com/orbitefs/orbitefs/config"
	"github.com/orbitefs/orbitefs/engine"
)

const haveIOUring = true

func realTransports(cfg config.Engine) []engine.Transport {
	return []engine.Transport{iouring.New(cfg.IOUring)}
}
