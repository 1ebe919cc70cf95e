package shmem_test

import (
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/goshmem/goshmem/shmem"
)

// The randomized soak: every PE issues random puts, gets, atomics and
// puts with signal to random PEs and offsets, and after each barrier every
// PE checks what it wrote against its model. The data each PE writes lives
// in a region of its own on every PE (so a model of it is exact); the
// accumulators are hit by the atomics of every PE at once (checked against
// the sum of every PE's contributions). It runs over shared memory, tcp
// and mixed.
//
// GOSHMEM_SOAK (a Go duration) runs each job that long instead of a few
// epochs; GOSHMEM_SOAK_SEED fixes the random seed (PE 0's seed is printed,
// and every PE derives its own from it).

const (
	soakRegion   = 4096 // int64 elements each PE owns on every PE
	soakWords    = 8    // swap, compare-swap and fetch words each PE owns on every PE
	soakAccs     = 16   // accumulators every PE adds to
	soakSigData  = 64   // elements of the put-with-signal payload each PE owns
	soakOps      = 300  // operations per epoch and PE
	soakEpochs   = 6    // epochs of the short run
	soakBigSizes = 8    // one put in soakBigSizes is up to the whole region
)

// soakOpNames name the operations, in the order of soakCounts.
var soakOpNames = []string{"put", "put_nbi", "get", "get_nbi", "add", "fetch_add", "swap", "cswap", "fetch", "put_signal", "iput"}

func TestSoak(t *testing.T) {
	var d time.Duration
	if v := os.Getenv("GOSHMEM_SOAK"); v != "" {
		var err error
		if d, err = time.ParseDuration(v); err != nil {
			t.Fatalf("GOSHMEM_SOAK=%q: %v", v, err)
		}
	}
	timeout := time.Duration(0)
	if d > 0 {
		timeout = d + 2*time.Minute
	}
	// The counts of PE 0's summary, in the test's log.
	report := func(t *testing.T, output string) {
		for _, line := range strings.Split(output, "\n") {
			if i := strings.Index(line, "soak "); i >= 0 && strings.Contains(line, "operations:") {
				t.Log(line[i:])
			}
		}
	}
	jobWith(t, jobOptions{nps: []int{2, 3, 4}, quick: []int{3}, timeout: timeout, check: report}, func(t *testing.T, me, n int) {
		soak(t, me, n, d)
	})
}

// soakModel is what one PE wrote into its regions on every PE.
type soakModel struct {
	data    [][]int64 // [target][soakRegion]
	words   [][]int64 // [target][soakWords]
	sigs    []uint64  // signals added on each target
	sigData [][]int64 // [target][soakSigData]
	contrib []int64   // [target*soakAccs+k]: what this PE added to acc[k] of target
}

func soak(t *testing.T, me, n int, d time.Duration) {
	data := calloc[int64](t, n*soakRegion)
	words := calloc[int64](t, n*soakWords)
	accs := calloc[int64](t, soakAccs)
	sigs := calloc[uint64](t, n)
	sigData := calloc[int64](t, n*soakSigData)
	contrib := calloc[int64](t, n*soakAccs)
	total := calloc[int64](t, n*soakAccs)
	ring := calloc[uint64](t, 1) // the left neighbour's epoch signal
	ringData := calloc[int64](t, soakSigData)
	counts := calloc[int64](t, len(soakOpNames))
	sums := calloc[int64](t, len(soakOpNames))

	// PE 0 picks the seed and broadcasts it, with the number of epochs for
	// a timed run (every PE must run the same number).
	seed := calloc[int64](t, 2)
	if me == 0 {
		seed[0] = time.Now().UnixNano()
		if v := os.Getenv("GOSHMEM_SOAK_SEED"); v != "" {
			seed[0], _ = strconv.ParseInt(v, 10, 64)
		}
	}
	if err := shmem.Broadcast(shmem.TeamWorld, seed[:1], seed[:1], 0); err != nil {
		t.Fatal(err)
	}
	if me == 0 {
		t.Logf("soak seed %d (GOSHMEM_SOAK_SEED reproduces it)", seed[0])
	}
	rng := rand.New(rand.NewPCG(uint64(seed[0]), uint64(me)))

	m := soakModel{sigs: make([]uint64, n), contrib: make([]int64, n*soakAccs)}
	for pe := 0; pe < n; pe++ {
		m.data = append(m.data, make([]int64, soakRegion))
		m.words = append(m.words, make([]int64, soakWords))
		m.sigData = append(m.sigData, make([]int64, soakSigData))
	}
	var nbiSrc [][]int64 // sources of non-blocking puts, kept until the epoch's barrier
	var nbiGets []func() // checks of non-blocking gets, run after the barrier

	start := time.Now()
	for epoch := 1; ; epoch++ {
		// A timed run goes on while PE 0 says so.
		if d > 0 {
			seed[1] = 0
			if me == 0 && time.Since(start) < d {
				seed[1] = 1
			}
			if err := shmem.Broadcast(shmem.TeamWorld, seed[1:2], seed[1:2], 0); err != nil {
				t.Fatal(err)
			}
			if seed[1] == 0 {
				break
			}
		} else if epoch > soakEpochs {
			break
		}
		dirty := make([]bool, n)   // puts to the PE not yet known complete
		reading := make([]bool, n) // non-blocking gets from the PE not yet complete
		for i := 0; i < soakOps; i++ {
			pe := rng.IntN(n)
			op := rng.IntN(len(soakOpNames))
			counts[op]++
			if name := soakOpNames[op]; reading[pe] && name != "get" && name != "get_nbi" {
				// A store is ordered after a non-blocking get of the same
				// PE only once the get is complete.
				shmem.Quiet()
				clear(dirty)
				clear(reading)
			}
			switch soakOpNames[op] {
			case "put", "put_nbi":
				l := 1 + rng.IntN(64)
				if rng.IntN(soakBigSizes) == 0 {
					l = 1 + rng.IntN(soakRegion)
				}
				off := rng.IntN(soakRegion - l + 1)
				src := make([]int64, l)
				for j := range src {
					src[j] = int64(rng.Uint64())
				}
				dst := data[me*soakRegion+off : me*soakRegion+off+l]
				if op == 0 {
					shmem.Put(dst, src, pe)
				} else {
					shmem.PutNBI(dst, src, pe)
					nbiSrc = append(nbiSrc, src)
				}
				copy(m.data[pe][off:], src)
				dirty[pe] = true
			case "get", "get_nbi":
				if dirty[pe] {
					// A get is ordered after this PE's puts to the same
					// PE only once they are complete.
					shmem.Quiet()
					clear(dirty)
				}
				l := 1 + rng.IntN(soakRegion)
				off := rng.IntN(soakRegion - l + 1)
				dst := make([]int64, l)
				src := data[me*soakRegion+off : me*soakRegion+off+l]
				want := append([]int64(nil), m.data[pe][off:off+l]...)
				what := fmt.Sprintf("epoch %d op %d: %s of %d elements at %d from PE %d", epoch, i, soakOpNames[op], l, off, pe)
				if op == 2 {
					shmem.Get(dst, src, pe)
					if diff := sliceDiff(want, dst); diff != "" {
						t.Fatalf("%s: %s", what, diff)
					}
				} else {
					shmem.GetNBI(dst, src, pe)
					reading[pe] = true
					nbiGets = append(nbiGets, func() {
						if diff := sliceDiff(want, dst); diff != "" {
							t.Errorf("%s: %s", what, diff)
						}
					})
				}
			case "add", "fetch_add":
				k := rng.IntN(soakAccs)
				v := int64(1 + rng.IntN(1000))
				if op == 4 {
					shmem.AtomicAdd(&accs[k], v, pe)
				} else if old := shmem.AtomicFetchAdd(&accs[k], v, pe); old < 0 {
					t.Fatalf("epoch %d op %d: fetch-add on PE %d fetched %d from an accumulator that only grows", epoch, i, pe, old)
				}
				m.contrib[pe*soakAccs+k] += v
				dirty[pe] = true
			case "swap", "cswap", "fetch":
				j := rng.IntN(soakWords)
				w := &words[me*soakWords+j]
				want := m.words[pe][j]
				v := int64(rng.Uint64())
				var got int64
				switch op {
				case 6:
					got = shmem.AtomicSwap(w, v, pe)
					m.words[pe][j] = v
				case 7:
					cond := want
					if rng.IntN(2) == 0 {
						cond = want + 1 // fails
					} else {
						m.words[pe][j] = v
					}
					got = shmem.AtomicCompareSwap(w, cond, v, pe)
				default:
					got = shmem.AtomicFetch(w, pe)
				}
				if got != want {
					t.Fatalf("epoch %d op %d: %s of word %d on PE %d fetched %#x, want %#x", epoch, i, soakOpNames[op], j, pe, got, want)
				}
			case "put_signal":
				l := 1 + rng.IntN(soakSigData)
				src := make([]int64, l)
				for j := range src {
					src[j] = int64(rng.Uint64())
				}
				shmem.PutSignal(sigData[me*soakSigData:me*soakSigData+l], src, &sigs[me], 1, shmem.SignalAdd, pe)
				copy(m.sigData[pe], src)
				m.sigs[pe]++
				dirty[pe] = true
			case "iput":
				// Every other element of a stretch of the region.
				l := 1 + rng.IntN(32)
				off := rng.IntN(soakRegion - 2*l + 1)
				src := make([]int64, l)
				for j := range src {
					src[j] = int64(rng.Uint64())
					m.data[pe][off+2*j] = src[j]
				}
				shmem.IPut(data[me*soakRegion+off:], src, 2, 1, l, pe)
				dirty[pe] = true
			}
		}
		// The ring: a put with a signal set to the epoch, which the right
		// neighbour waits for and then finds the data of.
		right := (me + 1) % n
		payload := make([]int64, soakSigData)
		for j := range payload {
			payload[j] = int64(epoch*1_000_000 + me*1000 + j)
		}
		shmem.PutSignal(ringData, payload, &ring[0], uint64(epoch), shmem.SignalSet, right)
		shmem.SignalWaitUntil(&ring[0], shmem.CmpGE, uint64(epoch))
		left := (me - 1 + n) % n
		for j, v := range ringData {
			if want := int64(epoch*1_000_000 + left*1000 + j); v != want {
				t.Fatalf("epoch %d: ring data[%d] from PE %d is %d after its signal, want %d", epoch, j, left, v, want)
			}
		}

		shmem.BarrierAll()
		nbiSrc = nbiSrc[:0]
		for _, check := range nbiGets {
			check()
		}
		nbiGets = nbiGets[:0]
		// Every PE reads back its regions on every PE.
		for pe := 0; pe < n; pe++ {
			got := make([]int64, soakRegion)
			shmem.Get(got, data[me*soakRegion:(me+1)*soakRegion], pe)
			if diff := sliceDiff(m.data[pe], got); diff != "" {
				t.Fatalf("epoch %d: region on PE %d: %s", epoch, pe, diff)
			}
			gw := make([]int64, soakWords)
			shmem.Get(gw, words[me*soakWords:(me+1)*soakWords], pe)
			if diff := sliceDiff(m.words[pe], gw); diff != "" {
				t.Fatalf("epoch %d: swap words on PE %d: %s", epoch, pe, diff)
			}
			if got := shmem.G(&sigs[me], pe); got != m.sigs[pe] {
				t.Fatalf("epoch %d: signal word on PE %d is %d after %d signal adds", epoch, pe, got, m.sigs[pe])
			}
			gs := make([]int64, soakSigData)
			shmem.Get(gs, sigData[me*soakSigData:(me+1)*soakSigData], pe)
			if diff := sliceDiff(m.sigData[pe], gs); diff != "" {
				t.Fatalf("epoch %d: put-with-signal data on PE %d: %s", epoch, pe, diff)
			}
		}
		// The accumulators: the sum of every PE's contributions.
		copy(contrib, m.contrib)
		if err := shmem.SumReduce(shmem.TeamWorld, total, contrib); err != nil {
			t.Fatal(err)
		}
		for k := range accs {
			if want := total[me*soakAccs+k]; accs[k] != want {
				t.Fatalf("epoch %d: accumulator %d is %d, want %d (the sum of the PEs' adds)", epoch, k, accs[k], want)
			}
		}
		shmem.BarrierAll() // every PE has read before the next epoch writes
	}
	if err := shmem.SumReduce(shmem.TeamWorld, sums, counts); err != nil {
		t.Fatal(err)
	}
	if me == 0 {
		var all int64
		line := ""
		for i, name := range soakOpNames {
			all += sums[i]
			line += fmt.Sprintf(" %s %d", name, sums[i])
		}
		t.Logf("soak %s, %d PEs, %v: %d operations:%s", variant(), n, time.Since(start).Round(time.Second), all, line)
	}
	shmem.BarrierAll()
	for _, s := range [][]int64{data, words, accs, sigData, contrib, total, ringData, counts, sums, seed} {
		shmem.Free(s)
	}
	shmem.Free(sigs)
	shmem.Free(ring)
}
