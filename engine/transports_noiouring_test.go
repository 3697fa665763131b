//go:build !linux || noiouring

package engine_test

import (
	"github.com/orbitefs/orbitefs/config"
	"github.com/orbitefs/orbitefs/engine"
)

const haveIOUring = false

func realTransports(config.Engine) []engine.Transport { return nil }
