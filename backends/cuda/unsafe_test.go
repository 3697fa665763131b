// unsafe_test.go holds the tests' one pointer conversion.

package cuda

import "unsafe"

func unsafeAddr(b []byte) unsafe.Pointer { return unsafe.Pointer(&b[0]) }
