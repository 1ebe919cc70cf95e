package main

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/goshmem/goshmem/internal/petest"
	"github.com/goshmem/goshmem/launcher"
)

// TestTagHello runs a server and a client over shared memory and over tcp:
// both exit 0, the client prints a line per size (eager sizes received
// eagerly, the largest by rendezvous), and nothing stays in /dev/shm.
func TestTagHello(t *testing.T) {
	bin, cleanup, err := launcher.BuildProgram(".")
	if err != nil {
		t.Fatalf("build: %v", err)
	}
	defer cleanup()
	for _, tls := range []string{"sm,self", "tcp,self"} {
		t.Run(tls, func(t *testing.T) {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			addr := ln.Addr().String()
			ln.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			env := append(os.Environ(), "UCX_TLS="+tls)
			var sout, cout bytes.Buffer
			server := exec.CommandContext(ctx, bin, "-listen", addr)
			server.Env, server.Stdout, server.Stderr = env, &sout, &sout
			if err := server.Start(); err != nil {
				t.Fatal(err)
			}
			client := exec.CommandContext(ctx, bin, "-connect", addr, "-max", "1048576")
			client.Env, client.Stdout, client.Stderr = env, &cout, &cout
			cerr := client.Run()
			serr := server.Wait()
			if cerr != nil || serr != nil {
				t.Fatalf("client: %v\n%s\nserver: %v\n%s", cerr, cout.String(), serr, sout.String())
			}
			out := cout.String()
			for size := 1; size <= 1<<20; size *= 2 {
				if !strings.Contains(out, fmt.Sprintf("%8d bytes: round trip", size)) {
					t.Errorf("no line for %d bytes:\n%s", size, out)
				}
			}
			if !strings.Contains(out, "1048576 bytes: round trip") || !strings.Contains(out[strings.Index(out, "1048576 bytes"):], "tag/recv/rndv/") {
				t.Errorf("1 MiB was not received by rendezvous:\n%s", out)
			}
			if !strings.Contains(sout.String(), "echoed 21 messages") {
				t.Errorf("server output:\n%s", sout.String())
			}
			if left := petest.ShmLeftovers(); len(left) > 0 {
				t.Errorf("left %v in /dev/shm", left)
			}
		})
	}
}
