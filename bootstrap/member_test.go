package bootstrap

import (
	"bytes"
	"errors"
	"os"
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
