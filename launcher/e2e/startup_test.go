package e2e_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// startupStats are the figures of one job of the hello mode.
type startupStats struct {
	wall    time.Duration
	initMax float64 // ms, the slowest PE's time from process start to init returning
	initAvg float64 // ms
	rssAvg  float64 // MB, mean peak RSS per PE
}

// parseStats reads the "stats PE init_ms rss_kb" lines of np PEs.
func parseStats(out string, np int) (startupStats, error) {
	var s startupStats
	n := 0
	for _, l := range strings.Split(out, "\n") {
		f := strings.Fields(l)
		if len(f) != 4 || f[0] != "stats" {
			continue
		}
		init, err1 := strconv.ParseFloat(f[2], 64)
		rss, err2 := strconv.ParseFloat(f[3], 64)
		if err1 != nil || err2 != nil {
			return s, fmt.Errorf("malformed line %q", l)
		}
		n++
		s.initMax = max(s.initMax, init)
		s.initAvg += init
		s.rssAvg += rss / 1024
	}
	if n != np {
		return s, fmt.Errorf("%d stats lines, want %d", n, np)
	}
	s.initAvg /= float64(n)
	s.rssAvg /= float64(n)
	return s, nil
}

// benchJob runs the command b.N times and reports its figures. okExit
// accepts the exit status.
func benchJob(b *testing.B, np int, okExit func(int) bool, env []string, argv ...string) {
	var sum startupStats
	for range b.N {
		ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
		cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
		cmd.Env = append(os.Environ(), env...)
		var out, errOut strings.Builder
		cmd.Stdout, cmd.Stderr = &out, &errOut
		start := time.Now()
		cmd.Run()
		wall := time.Since(start)
		cancel()
		if cmd.ProcessState == nil || !okExit(cmd.ProcessState.ExitCode()) {
			b.Fatalf("%q: %v\n%s\n%s", argv, cmd.ProcessState, out.String(), errOut.String())
		}
		s, err := parseStats(out.String(), np)
		if err != nil {
			b.Fatalf("%q: %v\n%s\n%s", argv, err, out.String(), errOut.String())
		}
		sum.wall += wall
		sum.initMax += s.initMax
		sum.initAvg += s.initAvg
		sum.rssAvg += s.rssAvg
	}
	n := float64(b.N)
	b.ReportMetric(float64(sum.wall.Milliseconds())/n, "wall-ms")
	b.ReportMetric(sum.initMax/n, "init-max-ms")
	b.ReportMetric(sum.initAvg/n, "init-mean-ms")
	b.ReportMetric(sum.rssAvg/n, "rss-MB/PE")
	b.ReportMetric(0, "ns/op")
}

var (
	oshmemOnce sync.Once
	oshmemBin  string
	oshmemErr  string
)

// oshmemHello builds testdata/oshmem_hello.c with oshcc, once; it returns
// the binary, or why it cannot.
func oshmemHello() (string, string) {
	oshmemOnce.Do(func() {
		for _, c := range []string{"oshcc", "oshrun"} {
			if _, err := exec.LookPath(c); err != nil {
				oshmemErr = c + " is not installed (Debian's openmpi-bin and libopenmpi-dev have it)"
				return
			}
		}
		dir, err := os.MkdirTemp("", "oshmem-hello-")
		if err != nil {
			oshmemErr = err.Error()
			return
		}
		bin := filepath.Join(dir, "oshmem_hello")
		if out, err := exec.Command("oshcc", "-O2", "-o", bin, "testdata/oshmem_hello.c").CombinedOutput(); err != nil {
			oshmemErr = fmt.Sprintf("oshcc: %v: %s", err, out)
			return
		}
		oshmemBin = bin
	})
	return oshmemBin, oshmemErr
}

// BenchmarkStartup measures job start-up: goshmem-run -np N with the hello
// mode of testdata/pe (init, one atomic per PE, barrier, finalize), and,
// side by side, oshrun -np N with the same steps in C (OSHMEM over UCX, the
// reference of ANCHORS.md). It reports the job's wall time, the time from
// process start to init returning (slowest PE, and mean), and the mean peak
// RSS per PE. Run it with -benchtime=Nx (each iteration is a whole job):
//
//	go test -run '^$' -bench Startup -benchtime 3x ./launcher/e2e
func BenchmarkStartup(b *testing.B) {
	needBinaries(b)
	for _, np := range []int{2, 8, 16, 32, 64} {
		b.Run(fmt.Sprintf("np=%d/goshmem", np), func(b *testing.B) {
			benchJob(b, np, func(c int) bool { return c == 0 }, nil, goshmemRun, "-np", strconv.Itoa(np), peProgram, "hello")
		})
		b.Run(fmt.Sprintf("np=%d/oshmem", np), func(b *testing.B) {
			bin, why := oshmemHello()
			if bin == "" {
				b.Skipf("skipping the OSHMEM side: %s", why)
			}
			// Debian's OSHMEM crashes in shmem_finalize, after the stats
			// (ANCHORS.md): any exit status goes.
			benchJob(b, np, func(int) bool { return true }, nil,
				"oshrun", "--allow-run-as-root", "--oversubscribe", "-np", strconv.Itoa(np), bin)
		})
	}
}
