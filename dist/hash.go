package dist

import (
	"fmt"
	"reflect"
	"unsafe"
)

// keyHasher hashes keys the same on every PE: a key without pointers by
// its memory, a string by its bytes, others by their printed form.
type keyHasher[K comparable] struct {
	kind int
	size uintptr
}

func newKeyHasher[K comparable]() keyHasher[K] {
	t := reflect.TypeFor[K]()
	switch {
	case t.Kind() == reflect.String:
		return keyHasher[K]{kind: 1}
	case isPlain(t):
		return keyHasher[K]{kind: 0, size: t.Size()}
	}
	return keyHasher[K]{kind: 2}
}

func isPlain(t reflect.Type) bool {
	switch t.Kind() {
	case reflect.Bool, reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		return true
	case reflect.Array:
		return isPlain(t.Elem())
	}
	return false // floats (-0, NaN), structs (padding) hash by their printed form
}

func (h keyHasher[K]) hash(k *K) uint64 {
	switch h.kind {
	case 0:
		if h.size == 8 {
			return mix(*(*uint64)(unsafe.Pointer(k)))
		}
		return hashBytes(unsafe.Slice((*byte)(unsafe.Pointer(k)), h.size))
	case 1:
		s := *(*string)(unsafe.Pointer(k))
		return hashBytes(unsafe.Slice(unsafe.StringData(s), len(s)))
	}
	return hashBytes(fmt.Append(nil, *k))
}

// mix is a 64-bit finalizer (splitmix64's), so that consecutive integer
// keys spread over the PEs.
func mix(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	return x ^ (x >> 31)
}
