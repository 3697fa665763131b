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

// FreeList returns the groups of the batch's free list not yet handed
// out, in order (part by part), each as GroupIdentities does. Call it while no
// submission or Free of the batch runs.
func (b *Batch) FreeList() []any {
	var out []any
	for k := range b.freeNext {
		lo, hi := b.freePart(k)
		for i := lo + int(b.freeNext[k].Load()); i < hi; i++ {
			out = append(out, b.free[i])
		}
	}
	return out
}

// HoldGroupTaken runs f, with the group as an opaque identity, on every
// submission that takes a group from its batch's free list, right after
// it took it. Set before the engine is used concurrently.
func (e *Engine) HoldGroupTaken(f func(g any)) {
	e.groupTaken = func(g *group) { f(g) }
}
