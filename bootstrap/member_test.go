package bootstrap

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"os"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/goshmem/goshmem/ucs"

	"github.com/goshmem/goshmem/bootstrap/internal/wire"
)

func TestSingleton(t *testing.T) {
	for _, v := range contractVars {
		if _, ok := os.LookupEnv(v); ok {
			t.Skipf("skipping: %s is set in the test environment", v)
		}
	}
	m, err := JoinFromOS()
	if err != nil {
		t.Fatalf("JoinFromOS without launcher: %v", err)
	}
	if m.Rank() != 0 || m.Size() != 1 || m.LocalRank() != 0 || m.LocalSize() != 1 {
		t.Errorf("singleton: rank %d size %d local %d/%d, want 0 1 0/1", m.Rank(), m.Size(), m.LocalRank(), m.LocalSize())
	}
	blob := []byte("hello")
	got, err := m.Allgather(blob)
	if err != nil || len(got) != 1 || !bytes.Equal(got[0], blob) {
		t.Errorf("singleton Allgather = %q, %v; want [%q]", got, err, blob)
	}
	tab, err := m.Exchange(blob)
	if err != nil || tab.Len() != 1 || tab.Nodes() != 1 || !bytes.Equal(tab.Blob(0), blob) {
		t.Errorf("singleton Exchange = %v, %v", tab, err)
	}
	if err := m.Barrier(); err != nil {
		t.Errorf("singleton Barrier: %v", err)
	}
	m.OnFailure(func(f Failure) { t.Errorf("singleton failure: %v", f) })
	if err := m.Close(); err != nil {
		t.Errorf("singleton Close: %v", err)
	}
	if err := m.Barrier(); !errors.Is(err, ErrClosed) {
		t.Errorf("singleton Barrier after Close: got %v, want ErrClosed", err)
	}
}

func TestJoinBadEnv(t *testing.T) {
	key, err := NewKey()
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		env  Env
	}{
		{"size 0", Env{Size: 0, LocalSize: 1}},
		{"rank out of range", Env{Rank: 2, Size: 2, LocalSize: 1, Seed: "127.0.0.1:1", Key: key, JobID: "j", AgentFD: 3}},
		{"no seed for 2", Env{Size: 2, LocalSize: 1, Key: key, JobID: "j"}},
		{"short key", Env{Size: 2, LocalSize: 1, Seed: "127.0.0.1:1", Key: key[:5], JobID: "j", AgentFD: 3}},
		{"bad job id", Env{Size: 2, LocalSize: 1, Seed: "127.0.0.1:1", Key: key, JobID: "a b", AgentFD: 3}},
		{"local rank", Env{Size: 2, LocalRank: 1, LocalSize: 1, Seed: "127.0.0.1:1", Key: key, JobID: "j", AgentFD: 3}},
		{"agent channel", Env{Size: 2, LocalSize: 1, Seed: "127.0.0.1:1", Key: key, JobID: "j", AgentFD: -1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := Join(tt.env); !errors.Is(err, ucs.ErrInvalidParam) {
				t.Errorf("Join(%+v): got %v, want ucs.ErrInvalidParam", tt.env, err)
			}
		})
	}
	// A descriptor that is not a unix socket, and one that is nobody's.
	devNull, err := os.Open(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	fd, _ := unix.Dup(int(devNull.Fd()))
	devNull.Close()
	for _, fd := range []int{fd, 1000} {
		env := Env{Size: 2, LocalSize: 1, Seed: "127.0.0.1:1", Key: key, JobID: "j", AgentFD: fd}
		if _, err := Join(env); !errors.Is(err, ucs.ErrUnreachable) {
			t.Errorf("Join through descriptor %d: got %v, want ucs.ErrUnreachable", fd, err)
		}
	}
}

// FuzzMemberHandle feeds a member arbitrary frames from "its agent".
func FuzzMemberHandle(f *testing.F) {
	for _, m := range wire.SampleMessages() {
		f.Add(wire.AppendMessage(nil, m))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		msg, err := wire.DecodeMessage(b)
		if err != nil {
			return // the channel's reader drops it before handle
		}
		agent, pe, err := wire.NewLocalPair()
		if err != nil {
			t.Fatal(err)
		}
		defer agent.Close()
		conn, err := wire.FileConn(pe)
		pe.Close()
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		m := newMember(Env{JobID: "job-1", Rank: 1, Size: 4, LocalRank: 1, LocalSize: 4}, wire.DiscardLogger())
		m.conn, m.seq, m.reply = conn, 7, make(chan reply, 1)
		m.handle(msg, -1)
		m.handle(msg, -1) // twice: a repeated reply or ack must not block or panic
		for _, f := range m.failures {
			if f.Rank < -1 || f.Rank >= m.env.Size {
				t.Fatalf("recorded a failure of rank %d in a job of %d", f.Rank, m.env.Size)
			}
		}
	})
}

// TestJoinOtherVersion: a PE whose agent (goshmem-run) was built from
// another goshmem fails to join with an error that names both versions
// and says what to do: an agent of a later version answers the hello
// with a welcome of its own version, whose layout every version keeps; an
// older one, which cannot read the hello, closes the channel.
func TestJoinOtherVersion(t *testing.T) {
	key, err := NewKey()
	if err != nil {
		t.Fatal(err)
	}
	v, build := wire.Speaks()
	tests := []struct {
		name   string
		answer func(agent *os.File) // after reading the hello
		want   []string
	}{
		{"later agent", func(agent *os.File) {
			b := wire.AppendMessage(make([]byte, 4), &wire.Message{Kind: wire.KindWelcome, JobID: "j", Rank: -1, Build: "v9.9.9-fake"})
			binary.BigEndian.PutUint32(b, uint32(len(b)-4))
			b[4] = 9 // the version
			agent.Write(b)
		}, []string{"the launcher (goshmem-run) on host ", "is built from another goshmem version than the program: the program speaks version " +
			strconv.Itoa(v) + " (goshmem " + build + ") of the bootstrap's messages, goshmem-run version 9 (goshmem v9.9.9-fake): " + wire.AdviceRebuild}},
		{"older agent", func(*os.File) {}, []string{"before it welcomed this PE: if goshmem-run is built from a goshmem older than the program's", wire.AdviceRebuild}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
			if err != nil {
				t.Fatal(err)
			}
			agent := os.NewFile(uintptr(fds[0]), "fake agent")
			go func() {
				defer agent.Close()
				var head [4]byte
				if _, err := io.ReadFull(agent, head[:]); err != nil {
					t.Errorf("reading the hello: %v", err)
					return
				}
				body := make([]byte, binary.BigEndian.Uint32(head[:]))
				if _, err := io.ReadFull(agent, body); err != nil {
					t.Errorf("reading the hello: %v", err)
					return
				}
				if m, err := wire.DecodeMessage(body); err != nil || m.Kind != wire.KindHello || m.Build != build {
					t.Errorf("the PE's first frame: %+v, %v; want a hello that says %q", m, err, build)
				}
				tt.answer(agent)
			}()
			_, err = Join(Env{Size: 2, LocalSize: 1, Seed: "127.0.0.1:1", Key: key, JobID: "j", AgentFD: fds[1]})
			if err == nil {
				t.Fatal("Join succeeded")
			}
			for _, want := range tt.want {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("Join: %v\nlacks %q", err, want)
				}
			}
		})
	}
}
