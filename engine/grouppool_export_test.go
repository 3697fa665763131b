package engine

// GroupIdentities returns the batch's groups, each as an opaque value
// that compares equal only to the same group object (group reuse).
func (b *Batch) GroupIdentities() []any {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := make([]any, len(b.mu.groups))
	for i, g := range b.mu.groups {
		out[i] = g
	}
	return out
}
