package main

import (
	"bytes"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/goshmem/goshmem/ucp"
)

// TestServeTaggedNotedDuringClose forces, over tcp in this process, the
// interleaving that lost messages under load: the server serves a
// client's goodbye, whose Close waits for the endpoint's flush and so
// progresses the worker, while the rendezvous message of another client
// is all there, its receive's completion waiting only for that progress.
// The receive's callback notes the message during serveTagged: the server
// must still echo it (it was dropped, and its client waited for ever).
func TestServeTaggedNotedDuringClose(t *testing.T) {
	t.Setenv("UCX_TLS", "tcp")
	k, v, _ := strings.Cut(testKey(), "=")
	t.Setenv(k, v)
	ctx, err := ucp.Init(new(ucp.Params).SetFeatures(ucp.FeatureTag|ucp.FeatureAM|ucp.FeatureStream), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ctx.Cleanup()
	s, err := newServer(ctx, netip.MustParseAddrPort("127.0.0.1:0"))
	if err != nil {
		t.Fatal(err)
	}
	defer s.destroy()
	// drive progresses ws until done, acting on what it saw.
	drive := func(what string, done func() bool, ws ...*ucp.Worker) {
		t.Helper()
		for deadline := time.Now().Add(time.Minute); !done(); {
			if time.Now().After(deadline) {
				t.Fatalf("%s: not in a minute", what)
			}
			for _, w := range ws {
				w.Progress()
			}
		}
	}
	// Clients a (saying goodbye) and b (sending a rendezvous message).
	var cw [2]*ucp.Worker
	var ep [2]*ucp.Endpoint
	for i := range cw {
		cw[i], err = ctx.NewWorker(new(ucp.WorkerParams).SetClientID(uint64(i + 1)))
		if err != nil {
			t.Fatal(err)
		}
		defer cw[i].Destroy()
		ep[i], err = cw[i].NewEndpoint(new(ucp.EPParams).SetSockAddr(s.l.Query().SockAddr).
			SetFlags(ucp.EPParamsFlagClientServer | ucp.EPParamsFlagSendClientID).
			SetErrMode(ucp.ErrHandlingModePeer))
		if err != nil {
			t.Fatal(err)
		}
		r, err := ep[i].EPFlushNBX(nil)
		if err != nil {
			t.Fatal(err)
		}
		if r != nil {
			drive("connect", func() bool { s.accept(); return r.IsCompleted() }, s.w, cw[i])
			if err := r.Status(); err != nil {
				t.Fatal(err)
			}
			r.Free()
		}
	}
	// a runs a round first: the echo, which the server puts into a's
	// buffer, leaves the Close of a's endpoint waiting for a's word that
	// the put landed, progressing the server's worker.
	a := &client{w: cw[0], ep: ep[0], id: 1}
	msg := bytes.Repeat([]byte{7}, 1<<16) // rendezvous over tcp
	got := make([]byte, len(msg))
	ar, err := a.w.TagRecvNBX(got, a.tag(0)|replyBit, ^uint64(0), nil)
	if err != nil {
		t.Fatal(err)
	}
	as, err := a.ep.TagSendNBX(msg, a.tag(0), nil)
	if err != nil {
		t.Fatal(err)
	}
	drive("a's round", func() bool {
		s.serve()
		return ar.IsCompleted() && as.IsCompleted()
	}, s.w, a.w)
	for _, r := range []*ucp.Request{ar, as} {
		if err := r.Status(); err != nil {
			t.Fatal(err)
		}
		r.Free()
	}
	c := &client{w: cw[1], ep: ep[1], id: 2}
	msg = bytes.Repeat([]byte{9}, len(msg))
	got = make([]byte, len(msg))
	rr, err := c.w.TagRecvNBX(got, c.tag(0)|replyBit, ^uint64(0), nil)
	if err != nil {
		t.Fatal(err)
	}
	sr, err := c.ep.TagSendNBX(msg, c.tag(0), nil)
	if err != nil {
		t.Fatal(err)
	}
	br, err := a.ep.TagSendNBX(nil, a.tag(bye), nil)
	if err != nil {
		t.Fatal(err)
	}
	// The server takes the goodbye and b's message (its receive asks b
	// for the data), and acts on nothing yet.
	taken := false
	drive("the goodbye and the message", func() bool {
		taken = taken || s.w.TagProbeNB(c.tag(0), ^uint64(0), false, nil) != nil
		s.recvTagged()
		return taken && len(s.tagged) == 1
	}, s.w, cw[0], cw[1])
	if br != nil {
		drive("the goodbye's send", br.IsCompleted, cw[0])
		br.Free()
	}
	// b puts the data and says so; its flush, which the server answers
	// without its progress, has the last of it out.
	drive("b's send", sr.IsCompleted, cw[1])
	if err := sr.Status(); err != nil {
		t.Fatal(err)
	}
	sr.Free()
	fr, err := c.ep.EPFlushNBX(nil)
	if err != nil {
		t.Fatal(err)
	}
	if fr != nil {
		drive("b's flush", fr.IsCompleted, cw[1])
		fr.Free()
	}
	s.serveTagged()
	drive("b's echo", func() bool {
		s.serve()
		return rr.IsCompleted()
	}, s.w, cw[1])
	if err := rr.Status(); err != nil {
		t.Fatal(err)
	}
	rr.Free()
	if !bytes.Equal(got, msg) {
		t.Errorf("the echo differs")
	}
	if s.done != 1 {
		t.Errorf("%d goodbyes served, want 1", s.done)
	}
}
