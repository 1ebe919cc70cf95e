package shmem_test

import (
	"fmt"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/goshmem/goshmem/shmem"
)

// particle is a struct of numbers, padding included, that Put, Get, P and
// G carry as their bytes.
type particle struct {
	X, Y, Z float64
	ID      int32
	Kind    uint8
	_       [3]byte
	Cell    [2]int16
}

// celsius is a named numeric type.
type celsius float64

func mkParticle(pe, i int) particle {
	return particle{X: float64(pe), Y: float64(i), Z: float64(pe*i) + 0.5, ID: int32(pe*1000 + i), Kind: uint8(i), Cell: [2]int16{int16(-pe), int16(i)}}
}

// TestStructRMA: Put, Get, P and G (and their context forms) take any
// pointer-free type: structs, arrays and named numeric types, checked once
// per type; a type with Go pointers panics.
func TestStructRMA(t *testing.T) {
	job(t, func(t *testing.T, me, n int) {
		const per = 5
		to, from := (me+1)%n, (me-1+n)%n
		ps := calloc[particle](t, n*per)
		one := calloc[particle](t, n)
		temps := calloc[celsius](t, n)
		grid := calloc[[3]int16](t, n)
		src := make([]particle, per)
		for i := range src {
			src[i] = mkParticle(me, i)
		}
		shmem.Put(ps[me*per:(me+1)*per], src, to)
		shmem.P(&one[me], mkParticle(me, 99), to)
		shmem.CtxP(shmem.CtxDefault, &temps[me], celsius(me)+0.25, to)
		shmem.PutNBI(grid[me:me+1], [][3]int16{{int16(me), 7, -1}}, to)
		shmem.BarrierAll()
		want := make([]particle, per)
		for i := range want {
			want[i] = mkParticle(from, i)
		}
		if diff := cmp.Diff(want, ps[from*per:(from+1)*per]); diff != "" {
			t.Errorf("particles put by PE %d (-want +got):\n%s", from, diff)
		}
		if one[from] != mkParticle(from, 99) || temps[from] != celsius(from)+0.25 || grid[from] != [3]int16{int16(from), 7, -1} {
			t.Errorf("from PE %d: P gave %+v, %v, PutNBI %v", from, one[from], temps[from], grid[from])
		}
		// Get and G back from the next PE what this PE put there.
		got := make([]particle, per)
		shmem.Get(got, ps[me*per:(me+1)*per], to)
		if diff := cmp.Diff(src, got); diff != "" {
			t.Errorf("Get from PE %d (-want +got):\n%s", to, diff)
		}
		if g := shmem.G(&one[me], to); g != mkParticle(me, 99) {
			t.Errorf("G of a particle from PE %d: %+v", to, g)
		}
		if g := shmem.CtxG(shmem.CtxDefault, &temps[me], to); g != celsius(me)+0.25 {
			t.Errorf("G of a celsius from PE %d: %v", to, g)
		}
		type withPointer struct {
			A int
			S string
		}
		checkPanic(t, "Put of a type with pointers", func() { shmem.Put(make([]withPointer, 1), make([]withPointer, 1), 0) }, "holds Go pointers")
		checkPanic(t, "G of a type with pointers", func() { shmem.G(new(withPointer), 0) }, fmt.Sprintf("shmem.G[%T]", withPointer{}))
		shmem.BarrierAll()
		shmem.Free(grid)
		shmem.Free(temps)
		shmem.Free(one)
		shmem.Free(ps)
	})
}

// TestFloatAtomicAdd: AtomicAdd, AtomicFetchAdd and AtomicFetchAddNBI on
// float32 and float64 (goshmem's extension of the extended AMO types) are
// atomic: every PE adds to counters on every PE at once, and the sums
// come out exact (the values are sums of small binary fractions).
func TestFloatAtomicAdd(t *testing.T) {
	job(t, func(t *testing.T, me, n int) {
		const rounds = 50
		f64 := calloc[float64](t, 1)
		f32 := calloc[float32](t, 1)
		named := calloc[celsius](t, 1)
		var fetched float64
		for r := 0; r < rounds; r++ {
			for pe := 0; pe < n; pe++ {
				shmem.AtomicAdd(&f64[0], 0.25, pe)
				if old := shmem.AtomicFetchAdd(&f32[0], 0.5, pe); old < 0 {
					t.Fatalf("fetch-add of float32 returned %v", old)
				}
				shmem.AtomicFetchAddNBI(&fetched, &f64[0], 0.125, pe)
				shmem.AtomicAdd(&named[0], celsius(1), pe)
			}
		}
		shmem.BarrierAll()
		if want := float64(n*rounds) * (0.25 + 0.125); f64[0] != want {
			t.Errorf("float64 counter %v, want %v", f64[0], want)
		}
		if want := float32(n*rounds) * 0.5; f32[0] != want {
			t.Errorf("float32 counter %v, want %v", f32[0], want)
		}
		if want := celsius(n * rounds); named[0] != want {
			t.Errorf("celsius counter %v, want %v", named[0], want)
		}
		shmem.BarrierAll()
		shmem.Free(named)
		shmem.Free(f32)
		shmem.Free(f64)
	})
}
