// binder.go owns the contract between this package and whoever owns CUDA
// contexts (backends/cuda): cuFile calls run inside Bind.

package gds

// ContextBinder runs fn on a locked OS thread with the device's CUDA
// context current (the primary context retained). Bind must allow
// concurrent calls from several goroutines and may run them in parallel;
// ParallelBatch relies on that. The error fn returns is passed through.
type ContextBinder interface {
	Bind(fn func() error) error
}

// BindFunc adapts a function to ContextBinder.
type BindFunc func(fn func() error) error

// Bind calls f(fn).
func (f BindFunc) Bind(fn func() error) error { return f(fn) }
