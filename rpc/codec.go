package rpc

import (
	"bytes"
	"encoding/gob"
	"fmt"
	"reflect"
	"unsafe"
)

// How arguments and results travel.
//
// A type without pointers (numbers, booleans, arrays and structs of them)
// travels as its memory, and so does a slice of such elements (its
// elements' memory, the length given by the message): nothing is encoded,
// and nothing is allocated on the sender's side. Every other type
// (strings, maps, pointers, structs that hold them) travels through
// encoding/gob, the one codec of this package: exported fields only, and
// the rules of gob (an interface value needs gob.Register). Raw values
// assume the PEs share their byte order and layout, which the PEs of one
// job (one program) do.

type codecKind uint8

const (
	rawValue codecKind = iota // the value's memory
	rawSlice                  // a slice's elements' memory
	gobValue                  // encoding/gob
)

// codec encodes and decodes values of T.
type codec[T any] struct {
	kind codecKind
	size int // of T (rawValue) or of its element (rawSlice)
}

func newCodec[T any]() codec[T] {
	t := reflect.TypeFor[T]()
	switch {
	case pointerFree(t):
		return codec[T]{kind: rawValue, size: int(t.Size())}
	case t.Kind() == reflect.Slice && pointerFree(t.Elem()):
		return codec[T]{kind: rawSlice, size: int(t.Elem().Size())}
	default:
		return codec[T]{kind: gobValue}
	}
}

// pointerFree reports whether values of t hold no pointers, so that their
// memory is their value on every PE.
func pointerFree(t reflect.Type) bool {
	switch t.Kind() {
	case reflect.Bool, reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr,
		reflect.Float32, reflect.Float64, reflect.Complex64, reflect.Complex128:
		return true
	case reflect.Array:
		return pointerFree(t.Elem())
	case reflect.Struct:
		for i := range t.NumField() {
			if !pointerFree(t.Field(i).Type) {
				return false
			}
		}
		return true
	}
	return false
}

// appendTo appends the encoding of *v to b.
func (c codec[T]) appendTo(b []byte, v *T) ([]byte, error) {
	switch c.kind {
	case rawValue:
		return append(b, unsafe.Slice((*byte)(unsafe.Pointer(v)), c.size)...), nil
	case rawSlice:
		// T is a slice type: read its header.
		s := *(*[]byte)(unsafe.Pointer(v))
		if len(s) == 0 {
			return b, nil
		}
		return append(b, unsafe.Slice(unsafe.SliceData(s), len(s)*c.size)...), nil
	}
	return gobAppend(b, *v)
}

// gobAppend appends the gob encoding of v to b. It takes v by value, in a
// function of its own: a pointer handed to gob escapes, and would make
// every caller's argument, raw ones included, allocated on the heap.
func gobAppend(b []byte, v any) ([]byte, error) {
	w := sliceWriter{b}
	if err := gob.NewEncoder(&w).Encode(v); err != nil {
		return b, fmt.Errorf("rpc: encode %T: %w", v, err)
	}
	return w.b, nil
}

// decode sets *v from its encoding b, which it does not keep.
func (c codec[T]) decode(b []byte, v *T) error {
	switch c.kind {
	case rawValue:
		if len(b) != c.size {
			return fmt.Errorf("rpc: decode %T: %d bytes for %d: %w", *v, len(b), c.size, ErrCodec)
		}
		copy(unsafe.Slice((*byte)(unsafe.Pointer(v)), c.size), b)
		return nil
	case rawSlice:
		if c.size == 0 || len(b)%c.size != 0 {
			return fmt.Errorf("rpc: decode %T: %d bytes, not a multiple of %d: %w", *v, len(b), c.size, ErrCodec)
		}
		n := len(b) / c.size
		if n == 0 {
			var zero T
			*v = zero
			return nil
		}
		// The elements hold no pointers: memory of words (aligned as
		// any element needs: no Go type asks more than 8) is theirs,
		// allocated once.
		w := make([]uint64, (len(b)+7)/8)
		copy(unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(w))), len(b)), b)
		*(*sliceHeader)(unsafe.Pointer(v)) = sliceHeader{unsafe.Pointer(unsafe.SliceData(w)), n, n}
		return nil
	}
	// Decode into a variable of this branch only, so that v does not
	// escape (see gobAppend).
	p := new(T)
	if err := gob.NewDecoder(bytes.NewReader(b)).Decode(p); err != nil {
		return fmt.Errorf("rpc: decode %T: %w: %w", *p, ErrCodec, err)
	}
	*v = *p
	return nil
}

// sliceHeader is the memory of a slice value.
type sliceHeader struct {
	data     unsafe.Pointer
	len, cap int
}

// sliceWriter is an io.Writer that appends to a slice.
type sliceWriter struct{ b []byte }

func (w *sliceWriter) Write(p []byte) (int, error) {
	w.b = append(w.b, p...)
	return len(p), nil
}
