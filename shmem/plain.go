package shmem

import (
	"fmt"
	"reflect"
	"sync"
	"sync/atomic"
)

// Plain is the set of types of Put, Get, P and G and their forms: any
// type, but one whose values hold Go pointers (pointers, slices, maps,
// strings, interfaces, channels, functions, or structs and arrays of them)
// makes the routines panic, since its bits mean nothing on another PE and
// the garbage collector does not see the symmetric heap. Structs and
// arrays of numbers travel as their bytes, padding included. The standard
// RMA types (RMA) cost no check; other types are checked once each.
type Plain = any

// checkPlain panics when T holds Go pointers (see Plain). The standard
// types take one type switch; others are looked up in plainTypes after
// their first check.
func checkPlain[T any](routine string) {
	var z T
	switch any(z).(type) {
	case int, int8, int16, int32, int64, uint, uint8, uint16, uint32, uint64, uintptr,
		float32, float64, complex64, complex128:
		return
	}
	checkPlainSlow[T](routine)
}

// plainTypes caches the types checkPlainSlow checked: copy on write, as
// they are few and read on every call.
var plainTypes struct {
	mu sync.Mutex
	m  atomic.Pointer[map[reflect.Type]bool]
}

//go:noinline
func checkPlainSlow[T any](routine string) {
	t := reflect.TypeFor[T]()
	switch t.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr,
		reflect.Float32, reflect.Float64, reflect.Complex64, reflect.Complex128, reflect.Bool:
		return
	}
	if m := plainTypes.m.Load(); m != nil {
		if ok, found := (*m)[t]; found {
			if !ok {
				panic(pointersMessage(routine, t))
			}
			return
		}
	}
	ok := !hasPointers(t)
	plainTypes.mu.Lock()
	old := plainTypes.m.Load()
	m := make(map[reflect.Type]bool)
	if old != nil {
		for k, v := range *old {
			m[k] = v
		}
	}
	m[t] = ok
	plainTypes.m.Store(&m)
	plainTypes.mu.Unlock()
	if !ok {
		panic(pointersMessage(routine, t))
	}
}

func pointersMessage(routine string, t reflect.Type) string {
	return fmt.Sprintf("shmem.%s[%v]: the type holds Go pointers (pointer, slice, map, string, interface, channel or func), which mean nothing on another PE", routine, t)
}
