// split.go owns cutting one request into batch slices of at most MaxSlice
// bytes, in file order, with consecutive cookies.

package gds

// Split cuts size bytes at fileOff/devOff into slices of at most max bytes
// (MaxSlice when max <= 0 or larger). Cookies run from cookie0 upward in
// file order, so a receipt's cookie names its slice.
func Split(op Op, h *Handle, devPtr uintptr, devOff, fileOff int64, size int64, max int, cookie0 uint64) []IO {
	if max <= 0 || max > MaxSlice {
		max = MaxSlice
	}
	if size <= 0 {
		return nil
	}
	out := make([]IO, 0, (size+int64(max)-1)/int64(max))
	for done := int64(0); done < size; {
		n := min(int64(max), size-done)
		out = append(out, IO{Op: op, Handle: h, DevPtr: devPtr, DevOff: devOff + done, FileOff: fileOff + done,
			Size: int(n), Cookie: cookie0 + uint64(len(out))})
		done += n
	}
	return out
}
