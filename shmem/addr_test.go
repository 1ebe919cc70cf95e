package shmem_test

import "unsafe"

func addrOf[T any](s []T) uintptr { return uintptr(unsafe.Pointer(unsafe.SliceData(s))) }
