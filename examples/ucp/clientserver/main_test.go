package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/goshmem/goshmem/internal/nstest"
	"github.com/goshmem/goshmem/internal/petest"
	"github.com/goshmem/goshmem/launcher"
)

// TestClientServer runs a server and four clients at once over loopback,
// over shared memory and over tcp (with a key they share), and with the
// server on another host (namespaces, see nstest) over tcp: every client
// runs its tag, am and stream rounds on lanes of that transport, the
// server serves all of them and exits, and nothing stays in /dev/shm.
func TestClientServer(t *testing.T) {
	bin, cleanup, err := launcher.BuildProgram(".")
	if err != nil {
		t.Fatalf("build: %v", err)
	}
	defer cleanup()
	k := make([]byte, 32)
	rand.Read(k)
	key := "GOSHMEM_KEY=" + base64.StdEncoding.EncodeToString(k)
	const clients = 4
	for _, tt := range []struct {
		name, tls, lane string
		otherHost       bool
	}{
		{"sm", "sm", "posix", false},
		{"tcp", "tcp", "tcp", false},
		{"other host", "sm,tcp", "tcp", true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			env := append(os.Environ(), "UCX_TLS="+tt.tls, key)
			args := []string{"-listen", "127.0.0.1:0", "-clients", fmt.Sprint(clients)}
			server := exec.CommandContext(ctx, bin, args...)
			if tt.otherHost {
				h := nstest.New(t)
				args[1] = netip.AddrPortFrom(h.IP, 0).String()
				server = h.CommandContext(ctx, bin, args...)
			}
			server.Env = env
			var serr bytes.Buffer
			server.Stderr = &serr
			out, err := server.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			if err := server.Start(); err != nil {
				t.Fatal(err)
			}
			sc := bufio.NewScanner(out)
			var addr string
			if sc.Scan() {
				addr, _ = strings.CutPrefix(sc.Text(), "listening on ")
			}
			if addr == "" {
				server.Wait()
				t.Fatalf("the server did not say where it listens: %s", serr.String())
			}
			var sout strings.Builder
			sdone := make(chan struct{})
			go func() {
				for sc.Scan() {
					sout.WriteString(sc.Text() + "\n")
				}
				close(sdone)
			}()
			type run struct {
				out []byte
				err error
			}
			runs := make(chan run, clients)
			for id := 1; id <= clients; id++ {
				go func() {
					c := exec.CommandContext(ctx, bin, "-connect", addr, "-id", fmt.Sprint(id), "-iters", "20")
					c.Env = env
					out, err := c.CombinedOutput()
					runs <- run{out, err}
				}()
			}
			for range clients {
				r := <-runs
				if r.err != nil {
					t.Errorf("client: %v\n%s", r.err, r.out)
					continue
				}
				o := string(r.out)
				for _, want := range []string{"20 tag rounds of 1024 bytes ok", "20 am rounds of 1024 bytes ok", "20 stream rounds of 1024 bytes ok", "lanes am:" + tt.lane + "/"} {
					if !strings.Contains(o, want) {
						t.Errorf("client output lacks %q:\n%s", want, o)
					}
				}
			}
			<-sdone
			if err := server.Wait(); err != nil {
				t.Fatalf("server: %v\n%s%s", err, sout.String(), serr.String())
			}
			if !strings.Contains(sout.String(), fmt.Sprintf("served %d clients", clients)) {
				t.Errorf("server output:\n%s", sout.String())
			}
			if left := petest.ShmLeftovers(); len(left) > 0 {
				t.Errorf("left %v in /dev/shm", left)
			}
		})
	}
}
