// Command workqueue shares a queue of tasks among the PEs: a counter on PE
// 0 holds the next task, and each PE takes tasks with AtomicFetchInc until
// none is left, so faster PEs take more. A task computes the number of
// Collatz steps of its number; the PE stores the result into the results
// array on PE 0 with P and counts the task with AtomicInc. Each PE also
// adds its tally to a shared log under a distributed lock (SetLock,
// ClearLock). PE 0 then checks that every task was done exactly once with
// the right result, and that the tallies add up, and prints the result;
// the job exits non-zero otherwise.
//
//	go run ./launcher/cmd/goshmem-run -np 4 ./examples/workqueue -tasks 2000
package main

import (
	"flag"
	"fmt"
	"log"
	"os"

	"github.com/goshmem/goshmem/shmem"
)

func main() {
	tasks := flag.Int("tasks", 2000, "tasks in the queue")
	flag.Parse()
	if err := shmem.Init(); err != nil {
		log.Fatal(err)
	}
	defer shmem.Finalize()
	me, n := shmem.MyPE(), shmem.NPEs()

	// On PE 0: the next task, each task's result and how often it was done,
	// and the log: the number of tallies added and their sum.
	next, err := shmem.Calloc[int64](1)
	check(err)
	results, err := shmem.Calloc[int64](*tasks)
	check(err)
	done, err := shmem.Calloc[int64](*tasks)
	check(err)
	tally, err := shmem.Calloc[int64](2)
	check(err)
	lock, err := shmem.Calloc[int64](1)
	check(err)

	mine := int64(0)
	for {
		t := shmem.AtomicFetchInc(&next[0], 0)
		if t >= int64(*tasks) {
			break
		}
		shmem.P(&results[t], collatz(t+1), 0)
		shmem.AtomicInc(&done[t], 0)
		mine++
	}
	// Add this PE's tally to the log: a read-modify-write of two words that
	// the lock makes atomic as a whole (ClearLock completes the puts).
	shmem.SetLock(&lock[0])
	var entry [2]int64
	shmem.Get(entry[:], tally, 0)
	entry[0]++
	entry[1] += mine
	shmem.Put(tally, entry[:], 0)
	shmem.ClearLock(&lock[0])
	shmem.BarrierAll()

	ok := true
	if me == 0 {
		for t := 0; t < *tasks; t++ {
			if done[t] != 1 || results[t] != collatz(int64(t+1)) {
				ok = false
				fmt.Printf("workqueue: task %d done %d times, result %d, want once with %d\n", t, done[t], results[t], collatz(int64(t+1)))
			}
		}
		if tally[0] != int64(n) || tally[1] != int64(*tasks) {
			ok = false
			fmt.Printf("workqueue: the log has %d tallies adding up to %d, want %d adding up to %d\n", tally[0], tally[1], n, *tasks)
		}
		verdict := "every task done once with the right result"
		if !ok {
			verdict = "WRONG"
		}
		fmt.Printf("workqueue: %d tasks on %d PEs: %s\n", *tasks, n, verdict)
	}
	shmem.BarrierAll()
	if !ok {
		shmem.Finalize()
		os.Exit(1)
	}
}

// collatz returns the number of steps from x to 1 of the Collatz map.
func collatz(x int64) int64 {
	var steps int64
	for x != 1 {
		if x%2 == 0 {
			x /= 2
		} else {
			x = 3*x + 1
		}
		steps++
	}
	return steps
}

func check(err error) {
	if err != nil {
		log.Fatal(err)
	}
}
