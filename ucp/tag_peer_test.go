package ucp

import (
	"bytes"
	"errors"
	"strconv"
	"testing"

	"github.com/goshmem/goshmem/ucs"
)

// TestTagPeerFailure kills a peer process in the middle of a rendezvous
// (and of a sync send), over shared memory (the keepalive finds the peer
// gone), tcp (the connection breaks) and a mix (the peer has tcp only): the
// request that waits for the peer completes with the error, the endpoint's
// error handler runs once, and nothing hangs. As sender, this process
// waits for the peer's acknowledgement; as receiver, for the data the peer
// pushes (scheme am) or puts (put_zcopy), or that it gets from the peer
// (get_zcopy, over tcp).
func TestTagPeerFailure(t *testing.T) {
	variants := []struct {
		name      string
		parentTLS string
		peerTLS   string
		want      ucs.Status
	}{
		{"sm", "sm,self", "sm,self", ucs.ErrEndpointTimeout},
		{"tcp", "tcp,self", "tcp,self", ucs.ErrConnectionReset},
		{"mixed", "all", "tcp,self", ucs.ErrConnectionReset},
	}
	const n = 1 << 20
	cases := []struct {
		name   string
		scheme string
		tcp    bool // only where the peer is reached over tcp
		recv   bool // this process receives the peer's message
	}{
		{"rndv-send", "auto", false, false},
		{"sync-send", "auto", false, false},
		{"rndv-recv-am", "am", false, true},
		{"rndv-recv-put", "put_zcopy", false, true},
		{"rndv-recv-get", "get_zcopy", true, true},
	}
	for _, v := range variants {
		t.Run(v.name, func(t *testing.T) {
			for _, tc := range cases {
				t.Run(tc.name, func(t *testing.T) {
					if tc.tcp && v.want != ucs.ErrConnectionReset {
						t.Skip("over shared memory a get completes on issue: nothing waits for the peer")
					}
					t.Setenv("UCX_KEEPALIVE_INTERVAL", "5ms")
					t.Setenv("GOSHMEM_KEY", testJobKey)
					t.Setenv("UCX_TLS", v.parentTLS)
					t.Setenv("UCX_RNDV_SCHEME", tc.scheme)
					var env []string
					if tc.recv {
						env = append(env, peerTagSendEnv+"="+strconv.Itoa(n))
					}
					p := startPeer(t, append(env, "UCX_TLS="+v.peerTLS))
					c, err := Init(new(Params).SetFeatures(FeatureTag|FeatureRMA), nil)
					if err != nil {
						t.Fatal(err)
					}
					t.Cleanup(c.Cleanup)
					w := newWorker(t, c)
					var rec errRecorder
					ep, err := w.NewEndpoint(new(EPParams).SetAddress(p.addr).SetErrMode(ErrHandlingModePeer).
						SetErrHandler(rec.handler).SetUserData("peer"))
					if err != nil {
						t.Fatal(err)
					}
					defer ep.Close(CloseModeForce)
					p.connect(t, w)
					var req *Request
					if tc.recv {
						// The peer's message has come (its RTS): stop the
						// peer, then take it.
						progressUntil(t, w, "the peer's message", func() bool { return w.TagProbeNB(peerTag, tagMaskFull, false, nil) != nil })
						p.stop(t)
						req, err = w.TagRecvNBX(make([]byte, n), peerTag, tagMaskFull, nil)
					} else {
						p.stop(t)
						if tc.name == "sync-send" {
							req, err = ep.TagSendSyncNBX([]byte("sync"), 1, nil)
						} else {
							req, err = ep.TagSendNBX(make([]byte, n), 1, nil)
						}
					}
					if err != nil || req == nil {
						t.Fatalf("%s with a stopped peer: %v, %v; want a request", tc.name, req, err)
					}
					for range 100 {
						w.Progress()
					}
					if req.IsCompleted() {
						t.Fatalf("%s completed while the peer was stopped: %v (%s)", tc.name, req.Status(), req.Query().DebugString)
					}
					proto := req.Query().DebugString
					p.kill(t)
					progressUntil(t, w, tc.name+" after the peer was killed", req.IsCompleted)
					if err := req.Status(); !errors.Is(err, v.want) {
						t.Errorf("%s (%s) when the peer died: %v, want %v", tc.name, proto, err, v.want)
					}
					req.Free()
					progressUntil(t, w, "the error handler", func() bool { return rec.calls.Load() > 0 })
					for range 100 {
						w.Progress()
					}
					if k := rec.calls.Load(); k != 1 {
						t.Errorf("error handler called %d times, want once", k)
					}
					if _, err := ep.TagSendNBX([]byte("late"), 2, nil); !errors.Is(err, v.want) {
						t.Errorf("send on the failed endpoint: %v, want %v", err, v.want)
					}
				})
			}
		})
	}
}

// TestTagFromPeerProcess receives a rendezvous message from another
// process over each path, from memory the peer mapped: through the
// mapping (shared memory) or a put by the peer into the receive's buffer
// (tcp, where a get would be a request the peer answers).
func TestTagFromPeerProcess(t *testing.T) {
	const n = 1 << 20
	for _, v := range []struct{ name, tls, want string }{
		{"sm", "sm,self", protoTagRecvRkeyPtr},
		{"tcp", "tcp,self", protoTagRecvPut},
	} {
		t.Run(v.name, func(t *testing.T) {
			t.Setenv("GOSHMEM_KEY", testJobKey)
			t.Setenv("UCX_TLS", v.tls)
			p := startPeer(t, []string{peerTagSendEnv + "=" + strconv.Itoa(n), "UCX_TLS=" + v.tls})
			c, err := Init(new(Params).SetFeatures(FeatureTag|FeatureRMA), nil)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(c.Cleanup)
			w := newWorker(t, c)
			p.connect(t, w) // the peer's endpoint back, and its message

			buf := make([]byte, n)
			req, err := w.TagRecvNBX(buf, peerTag, tagMaskFull, new(RequestParam).SetOpAttrFlags(OpAttrFlagNoImmCmpl))
			if err != nil {
				t.Fatal(err)
			}
			progressUntil(t, w, "the peer's message", req.IsCompleted)
			if err := req.Status(); err != nil {
				t.Fatal(err)
			}
			if got := req.Query().DebugString; !bytes.HasPrefix([]byte(got), []byte(v.want)) {
				t.Errorf("receive took %s, want %s", got, v.want)
			}
			req.Free()
			// The peer's segment is zero: what came is n zero bytes.
			if !bytes.Equal(buf, make([]byte, n)) {
				t.Error("data differs")
			}
		})
	}
}
