module github.com/orbitefs/orbitefs

go 1.26.8

require (
	github.com/BurntSushi/toml v1.6.0
	github.com/ebitengine/purego v0.11.3
	github.com/go-json-experiment/json v1.27.2
	github.com/hanwen/go-fuse/v2 v2.12.1
	github.com/pawelgaczynski/giouring v0.0.0-20230826085535-69588b89acb9
	golang.org/x/sys v0.50.0
)
