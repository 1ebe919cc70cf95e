// Command wordcount counts words over the PEs with a distributed map
// (dist.Map over package rpc): every PE reads its share of a generated
// text (words drawn from a generator seeded with its PE number) and adds
// one per word to the word's count at the PE that owns the word; the
// updates travel aggregated, many to a message. PE 0 then checks each
// count against the counts it computes itself from the same generators,
// and prints the most frequent words; the job exits non-zero if a count is
// wrong.
//
//	go run ./launcher/cmd/goshmem-run -np 4 ./examples/wordcount -words 100000
package main

import (
	"flag"
	"fmt"
	"log"
	"math/rand/v2"
	"os"
	"sort"

	"github.com/goshmem/goshmem/dist"
	"github.com/goshmem/goshmem/rpc"
	"github.com/goshmem/goshmem/shmem"
)

var vocabulary = []string{"the", "of", "and", "to", "in", "a", "is", "that", "for", "it", "as", "was", "with", "be", "by", "on", "not", "he", "this", "are"}

// text returns PE pe's words.
func text(pe, n int) []string {
	r := rand.New(rand.NewPCG(uint64(pe), 7))
	out := make([]string, n)
	for i := range out {
		// Zipf-like: low indices more often.
		out[i] = vocabulary[int(float64(len(vocabulary))*r.Float64()*r.Float64())]
	}
	return out
}

func main() {
	words := flag.Int("words", 100000, "words each PE reads")
	flag.Parse()
	if err := shmem.Init(); err != nil {
		log.Fatal(err)
	}
	defer shmem.Finalize()
	if err := rpc.Start(rpc.Options{}); err != nil {
		log.Fatal(err)
	}
	me, n := shmem.MyPE(), shmem.NPEs()
	counts, err := dist.NewMap[string, int64](func(old int64, _ bool, v int64) int64 { return old + v })
	if err != nil {
		log.Fatal(err)
	}
	for _, w := range text(me, *words) {
		if err := counts.Update(w, 1); err != nil {
			log.Fatal(err)
		}
	}
	if err := rpc.Barrier(); err != nil { // every update applied
		log.Fatal(err)
	}
	bad := 0
	if me == 0 {
		want := map[string]int64{}
		for pe := range n {
			for _, w := range text(pe, *words) {
				want[w]++
			}
		}
		type wc struct {
			w string
			c int64
		}
		var all []wc
		for _, w := range vocabulary {
			f, err := counts.Get(w).Wait()
			if err != nil {
				log.Fatal(err)
			}
			if f.Value != want[w] {
				fmt.Printf("%q: %d, want %d\n", w, f.Value, want[w])
				bad++
			}
			all = append(all, wc{w, f.Value})
		}
		sort.Slice(all, func(i, j int) bool { return all[i].c > all[j].c })
		fmt.Printf("%d words on %d PEs; the most frequent:", n**words, n)
		for _, x := range all[:5] {
			fmt.Printf(" %s=%d", x.w, x.c)
		}
		fmt.Println()
	}
	rpc.Stop()
	if bad > 0 {
		shmem.Finalize()
		os.Exit(1)
	}
}
