// Command pe is the PE program of the end-to-end tests of goshmem-run: a
// shmem program that, after Init, does what its first argument says.
//
//	hello       init, one atomic per PE on PE 0, barrier, finalize; prints
//	            "hello PE of N on HOST" and, before finalize, "stats PE
//	            init_ms rss_kb" (time from process start to Init returning,
//	            and the peak resident set size)
//	ring        passes a token around every PE with puts; PE 0 checks it
//	exit3       PE $FAIL_PE exits with status 3 after Init
//	panic       PE $FAIL_PE panics (status 2)
//	kill9       PE $FAIL_PE kills itself with SIGKILL
//	nofinalize  PE $FAIL_PE exits with status 0 without Finalize
//	kill9-traffic
//	            every PE puts to and gets from every other PE without end;
//	            PE $FAIL_PE kills itself with SIGKILL after 100 rounds
//	stop        PE $FAIL_PE stops itself (SIGSTOP): alive but silent
//	compute     PE $FAIL_PE (every PE when $COMPUTE_ALL is set) computes
//	            for $COMPUTE (a Go duration) without calling the library,
//	            then every PE meets in a barrier and finalizes
//	block       prints "ready PE pid PID" and waits to be ended
//	await       prints "ready PE pid PID", waits for the file $AWAIT_FILE
//	            to exist, then meets the others in a barrier and finalizes
//	late        prints "ready PE pid PID"; PE $FAIL_PE then waits for the
//	            file $AWAIT_FILE to exist, outside the library, while the
//	            others wait for it in a barrier; then they finalize
//	listeners   prints "listener ADDR" for each listening or bound socket
//	            of this process, then finalizes
//	segments    prints "segment PE NAME MODE STATE" for each named /dev/shm
//	            segment this process maps (STATE: "named" while its file is
//	            in /dev/shm, else "unlinked"), then finalizes
//	reach       prints "reach PE OTHER direct" for each PE whose heap this PE
//	            maps (shared memory), "reach PE OTHER remote" for the others
//	            (reached through the network), after a put to each
//	globalexit  (no shmem) joins the job's bootstrap; PE $FAIL_PE asks for
//	            a global exit with status 7
//	shmem-globalexit
//	            the same through shmem.GlobalExit, after shmem.Init
//
// The other PEs wait in a barrier that the failing PE never reaches, so the
// launcher must end them.
package main

import (
	"bufio"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/goshmem/goshmem/bootstrap"
	"github.com/goshmem/goshmem/shmem"
)

var start = time.Now()

func main() {
	mode := "hello"
	if len(os.Args) > 1 {
		mode = os.Args[1]
	}
	failPE, _ := strconv.Atoi(os.Getenv("FAIL_PE"))
	if mode == "globalexit" {
		globalExit(failPE)
		return
	}
	if err := shmem.Init(); err != nil {
		log.Fatal(err)
	}
	if mode == "shmem-globalexit" {
		if shmem.MyPE() == failPE {
			shmem.GlobalExit(7)
		}
		shmem.BarrierAll() // never completes
		select {}
	}
	initTime := time.Since(start)
	me, n := shmem.MyPE(), shmem.NPEs()
	host, _ := os.Hostname()
	switch mode {
	case "hello":
		fmt.Printf("hello %d of %d on %s\n", me, n, host)
		count, err := shmem.Calloc[int64](1)
		if err != nil {
			log.Fatal(err)
		}
		shmem.AtomicInc(&count[0], 0)
		shmem.BarrierAll()
		if me == 0 && count[0] != int64(n) {
			log.Fatalf("PE 0 counted %d arrivals, want %d", count[0], n)
		}
		shmem.Free(count)
		// Before Finalize, as the OSHMEM side of the benchmark does.
		fmt.Printf("stats %d %.1f %d\n", me, float64(initTime.Microseconds())/1000, peakRSS())
	case "barriers":
		// Every round, each PE puts the round's number into its slot on
		// every PE, and after the barrier finds every slot at that
		// round: a barrier that let a PE through early, or before the
		// others' puts were complete, shows as a stale slot.
		const rounds = 200
		slots, err := shmem.Calloc[int64](n)
		if err != nil {
			log.Fatal(err)
		}
		for r := int64(1); r <= rounds; r++ {
			for pe := range n {
				shmem.P(&slots[me], r, pe)
			}
			shmem.BarrierAll()
			for pe, v := range slots {
				if v != r {
					log.Fatalf("round %d: PE %d's slot is %d after the barrier", r, pe, v)
				}
			}
			shmem.BarrierAll() // nobody writes round r+1 before all have read
		}
		shmem.Free(slots)
		fmt.Printf("barriers %d passed %d rounds\n", me, rounds)
	case "ring":
		token, err := shmem.Calloc[int64](1)
		if err != nil {
			log.Fatal(err)
		}
		if me == 0 {
			shmem.P(&token[0], 1, 1%n)
		}
		if me != 0 || n == 1 {
			shmem.WaitUntil(&token[0], shmem.CmpGE, 1)
			if me != 0 {
				shmem.P(&token[0], token[0]+1, (me+1)%n)
			}
		}
		if me == 0 && n > 1 {
			shmem.WaitUntil(&token[0], shmem.CmpGE, int64(n))
			fmt.Printf("token back at PE 0 after %d hops\n", token[0])
		}
		shmem.BarrierAll()
	case "stop":
		if me == failPE {
			syscall.Kill(os.Getpid(), syscall.SIGSTOP)
			select {}
		}
		shmem.BarrierAll() // never completes
	case "compute":
		if me == failPE || os.Getenv("COMPUTE_ALL") != "" {
			d, err := time.ParseDuration(os.Getenv("COMPUTE"))
			if err != nil {
				log.Fatalf("COMPUTE: %v", err)
			}
			fmt.Printf("computed %d\n", compute(d))
		}
		shmem.BarrierAll()
	case "exit3", "panic", "kill9", "nofinalize":
		if me == failPE {
			switch mode {
			case "exit3":
				os.Exit(3)
			case "panic":
				panic("the test asked for it")
			case "kill9":
				syscall.Kill(os.Getpid(), syscall.SIGKILL)
				select {}
			case "nofinalize":
				os.Exit(0)
			}
		}
		shmem.BarrierAll() // never completes
	case "kill9-traffic":
		buf, err := shmem.Calloc[int64](512)
		if err != nil {
			log.Fatal(err)
		}
		shmem.BarrierAll()
		src := make([]int64, len(buf))
		for round := 0; ; round++ {
			if me == failPE && round == 100 {
				syscall.Kill(os.Getpid(), syscall.SIGKILL)
				select {}
			}
			for pe := range n {
				if pe != me {
					shmem.Put(buf, src, pe)
					shmem.Get(src[:8], buf[:8], pe)
				}
			}
		}
	case "block":
		fmt.Printf("ready %d pid %d\n", me, os.Getpid())
		select {}
	case "await":
		fmt.Printf("ready %d pid %d\n", me, os.Getpid())
		awaitFile()
		shmem.BarrierAll()
	case "late":
		fmt.Printf("ready %d pid %d\n", me, os.Getpid())
		if me == failPE {
			awaitFile()
		}
		shmem.BarrierAll()
	case "listeners":
		shmem.BarrierAll()
		for _, a := range listeners() {
			fmt.Printf("listener %d %s\n", me, a)
		}
	case "reach":
		x, err := shmem.Calloc[int64](n)
		if err != nil {
			log.Fatal(err)
		}
		for pe := range n {
			how := "remote"
			if shmem.Ptr(&x[0], pe) != nil {
				how = "direct"
			}
			shmem.P(&x[me], int64(me+1), pe)
			fmt.Printf("reach %d %d %s\n", me, pe, how)
		}
		shmem.BarrierAll()
		for pe := range n {
			if x[pe] != int64(pe+1) {
				log.Fatalf("PE %d: word of PE %d is %d, want %d", me, pe, x[pe], pe+1)
			}
		}
	case "segments":
		shmem.BarrierAll()
		for _, seg := range mappedSegments() {
			fmt.Printf("segment %d %s\n", me, seg)
		}
		shmem.BarrierAll()
	default:
		log.Fatalf("unknown mode %q", mode)
	}
	shmem.Finalize()
}

func globalExit(failPE int) {
	m, err := bootstrap.JoinFromOS()
	if err != nil {
		log.Fatal(err)
	}
	if m.Rank() == failPE {
		if err := m.GlobalExit(7); err != nil {
			log.Fatal(err)
		}
		os.Exit(7)
	}
	m.Barrier() // never completes
	select {}
}

// compute keeps a CPU busy for d, calling nothing but the clock now and
// then, and returns what it computed.
func compute(d time.Duration) uint64 {
	end := time.Now().Add(d)
	x := uint64(1)
	for time.Now().Before(end) {
		for range 1 << 20 {
			x = x*6364136223846793005 + 1442695040888963407
		}
	}
	return x
}

// mappedSegments describes the named /dev/shm segments of goshmem this
// process maps: "NAME MODE STATE", the mode read through
// /proc/self/map_files (which needs privileges: "?" without them).
func mappedSegments() []string {
	b, err := os.ReadFile("/proc/self/maps")
	if err != nil {
		log.Fatal(err)
	}
	seen := map[string]bool{}
	var out []string
	for _, l := range strings.Split(string(b), "\n") {
		f := strings.Fields(l)
		if len(f) < 6 || !strings.HasPrefix(f[5], "/dev/shm/goshmem-") || seen[f[5]] {
			continue
		}
		seen[f[5]] = true
		mode := "?"
		if fi, err := os.Stat("/proc/self/map_files/" + f[0]); err == nil {
			mode = fi.Mode().Perm().String()
		}
		state := "named"
		if _, err := os.Stat(f[5]); err != nil {
			state = "unlinked"
		}
		out = append(out, filepath.Base(f[5])+" "+mode+" "+state)
	}
	return out
}

// peakRSS returns VmHWM, in KiB.
func peakRSS() int {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return -1
	}
	defer f.Close()
	for s := bufio.NewScanner(f); s.Scan(); {
		if v, ok := strings.CutPrefix(s.Text(), "VmHWM:"); ok {
			kb, _ := strconv.Atoi(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")))
			return kb
		}
	}
	return -1
}

// listeners returns the local addresses of this process's listening TCP
// sockets and bound UDP sockets.
func listeners() []string {
	inodes := map[string]bool{}
	fds, _ := os.ReadDir("/proc/self/fd")
	for _, fd := range fds {
		l, err := os.Readlink("/proc/self/fd/" + fd.Name())
		if err == nil && strings.HasPrefix(l, "socket:[") {
			inodes[strings.TrimSuffix(strings.TrimPrefix(l, "socket:["), "]")] = true
		}
	}
	var out []string
	for _, proto := range []string{"tcp", "tcp6", "udp", "udp6"} {
		f, err := os.Open("/proc/self/net/" + proto)
		if err != nil {
			continue
		}
		s := bufio.NewScanner(f)
		s.Scan() // header
		for s.Scan() {
			fields := strings.Fields(s.Text())
			if len(fields) < 10 || !inodes[fields[9]] {
				continue
			}
			if strings.HasPrefix(proto, "tcp") && fields[3] != "0A" { // LISTEN
				continue
			}
			out = append(out, proto+" "+hexAddr(fields[1]))
		}
		f.Close()
	}
	return out
}

// hexAddr decodes a /proc/net address such as 0100007F:1F90.
func hexAddr(s string) string {
	ip, port, _ := strings.Cut(s, ":")
	p, _ := strconv.ParseUint(port, 16, 16)
	if len(ip) == 8 {
		v, _ := strconv.ParseUint(ip, 16, 32)
		return fmt.Sprintf("%d.%d.%d.%d:%d", byte(v), byte(v>>8), byte(v>>16), byte(v>>24), p)
	}
	return ip + ":" + strconv.FormatUint(p, 10)
}

// awaitFile waits for the file $AWAIT_FILE to exist.
func awaitFile() {
	for {
		if _, err := os.Stat(os.Getenv("AWAIT_FILE")); err == nil {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
}
