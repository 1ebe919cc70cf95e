package tcp

import (
	"errors"
	"math/rand/v2"
	"sync"
	"testing"
	"time"
)

// simNet is a model of the network between ifaces, for connection
// matching: a dial runs the server's hello decision, and the server
// records the handshake done a little after the client saw the
// challenge, as with real connections.
type simNet struct {
	jitter bool
	wg     sync.WaitGroup
}

// pause sleeps a random while (often not at all), to vary the interleaving.
func (n *simNet) pause() {
	if !n.jitter {
		return
	}
	switch rand.IntN(4) {
	case 0:
		time.Sleep(time.Duration(rand.IntN(200)) * time.Microsecond)
	case 1:
		for range rand.IntN(10) {
			time.Sleep(0)
		}
	}
}

// dialer returns the dial function of the iface from for connections to
// the iface to.
func (n *simNet) dialer(from, to *connMatch) func(c *matchConn, oneWay bool) error {
	return func(c *matchConn, oneWay bool) error {
		n.pause()
		verdict, mine, in := to.hello(from.self, c.id, oneWay)
		if verdict == hsUseMine {
			return &useMineError{connID: mine}
		}
		if in != nil {
			n.wg.Add(1)
			go func() {
				defer n.wg.Done()
				n.pause()
				to.handshakeDone(in, true)
			}()
		}
		return nil
	}
}

// sameConn reports whether the connections two ifaces chose are one.
func sameConn(a, b *matchConn) bool {
	return a.id == b.id && a.dialed != b.dialed
}

// TestConnMatchSimultaneous has two ifaces connect to each other at once,
// many rounds with random interleavings and both orders of their ids:
// each must end up on one connection, which one of them dialed and the
// other took, without waiting for a timeout.
func TestConnMatchSimultaneous(t *testing.T) {
	rounds := 2000
	if testing.Short() {
		rounds = 200
	}
	for _, tt := range []struct {
		name   string
		jitter bool
	}{{"no jitter", false}, {"jitter", true}} {
		t.Run(tt.name, func(t *testing.T) {
			for r := range rounds {
				n := &simNet{jitter: tt.jitter}
				x, p := newConnMatch(randomID()), newConnMatch(randomID())
				deadline := time.Now().Add(time.Minute)
				var cx, cp *matchConn
				var ex, ep error
				var wg sync.WaitGroup
				wg.Add(2)
				go func() { defer wg.Done(); n.pause(); cx, ex = x.connect(p.self, deadline, n.dialer(x, p)) }()
				go func() { defer wg.Done(); n.pause(); cp, ep = p.connect(x.self, deadline, n.dialer(p, x)) }()
				wg.Wait()
				n.wg.Wait()
				if ex != nil || ep != nil {
					t.Fatalf("round %d: connect: %v, %v", r, ex, ep)
				}
				if !sameConn(cx, cp) {
					t.Fatalf("round %d: two connections: %+v and %+v", r, cx, cp)
				}
				if time.Until(deadline) < 50*time.Second {
					t.Fatalf("round %d: took %v: someone waited for a timeout", r, time.Minute-time.Until(deadline))
				}
			}
		})
	}
}

// TestConnMatch checks the cases one after the other: a connection the
// peer dialed is taken rather than dialing; one that authenticates is
// waited for; one taken by another EP is not taken again; a connection
// the peer pointed at that was taken meanwhile, or that never comes, ends
// in a one-way dial of the EP's own (at once, or after half the time
// left); a one-way hello is never recorded.
func TestConnMatch(t *testing.T) {
	lo, hi := uint64(100), uint64(200)
	tests := []struct {
		name string
		run  func(t *testing.T, n *simNet, x, p *connMatch)
	}{
		{"take the peer's", func(t *testing.T, n *simNet, x, p *connMatch) {
			cp, err := p.connect(x.self, time.Now().Add(time.Minute), n.dialer(p, x))
			n.wg.Wait()
			if err != nil || !cp.dialed {
				t.Fatalf("p: %+v, %v", cp, err)
			}
			cx, err := x.connect(p.self, time.Now().Add(time.Minute), func(*matchConn, bool) error {
				t.Error("x dialed although p's connection was there")
				return nil
			})
			if err != nil || !sameConn(cx, cp) {
				t.Fatalf("x: %+v, %v; p: %+v", cx, err, cp)
			}
		}},
		{"wait while it authenticates", func(t *testing.T, n *simNet, x, p *connMatch) {
			_, _, in := x.hello(p.self, 77, false)
			go func() { time.Sleep(20 * time.Millisecond); x.handshakeDone(in, true) }()
			cx, err := x.connect(p.self, time.Now().Add(time.Minute), func(*matchConn, bool) error {
				t.Error("x dialed although p's connection authenticated")
				return nil
			})
			if err != nil || cx != in || cx.state != matchClaimed {
				t.Fatalf("x: %+v, %v", cx, err)
			}
		}},
		{"not taken twice", func(t *testing.T, n *simNet, x, p *connMatch) {
			_, _, in := x.hello(p.self, 77, false)
			x.handshakeDone(in, true)
			c1, _ := x.connect(p.self, time.Now().Add(time.Minute), n.dialer(x, p))
			c2, _ := x.connect(p.self, time.Now().Add(time.Minute), n.dialer(x, p))
			if c1 != in || c2 == in || !c2.dialed {
				t.Fatalf("first %+v, second %+v", c1, c2)
			}
		}},
		{"failed handshake is forgotten", func(t *testing.T, n *simNet, x, p *connMatch) {
			_, _, in := x.hello(p.self, 77, false)
			go func() { time.Sleep(10 * time.Millisecond); x.handshakeDone(in, false) }()
			cx, err := x.connect(p.self, time.Now().Add(time.Minute), n.dialer(x, p))
			if err != nil || !cx.dialed {
				t.Fatalf("x: %+v, %v", cx, err)
			}
		}},
		{"pointed at one taken", func(t *testing.T, n *simNet, x, p *connMatch) {
			// x (lower id) dialed p; an EP of p took it; a second EP of
			// p dials, and x points it at the connection taken.
			cx, _ := x.connect(p.self, time.Now().Add(time.Minute), n.dialer(x, p))
			n.wg.Wait()
			cp1, _ := p.connect(x.self, time.Now().Add(time.Minute), n.dialer(p, x))
			if !sameConn(cx, cp1) {
				t.Fatalf("first EPs: %+v, %+v", cx, cp1)
			}
			start := time.Now()
			var oneWay bool
			cp2, err := p.connect(x.self, start.Add(time.Minute), func(c *matchConn, ow bool) error {
				oneWay = ow
				return n.dialer(p, x)(c, ow)
			})
			if err != nil || !cp2.dialed || !oneWay || time.Since(start) > 10*time.Second {
				t.Fatalf("second EP of p: %+v, %v, one-way %v, after %v", cp2, err, oneWay, time.Since(start))
			}
		}},
		{"pointed at one that never comes", func(t *testing.T, n *simNet, x, p *connMatch) {
			start := time.Now()
			calls := 0
			cp, err := p.connect(x.self, start.Add(200*time.Millisecond), func(c *matchConn, ow bool) error {
				calls++
				if !ow {
					return &useMineError{connID: 5}
				}
				return nil
			})
			d := time.Since(start)
			if err != nil || !cp.dialed || !cp.oneWay || calls != 2 || d < 90*time.Millisecond || d > 190*time.Millisecond {
				t.Fatalf("p: %+v, %v after %d dials and %v", cp, err, calls, d)
			}
		}},
		{"one-way hello", func(t *testing.T, n *simNet, x, p *connMatch) {
			if v, _, in := x.hello(p.self, 77, true); v != hsAccept || in != nil {
				t.Fatalf("one-way hello: verdict %d, record %+v", v, in)
			}
			// And a one-way dial is never pointed at.
			c, _, _ := x.claimOrDial(p.self, 0, true)
			if v, _, _ := x.hello(p.self, 78, false); v != hsAccept || !c.promised {
				t.Fatalf("hello with a one-way dial of the server: verdict %d", v)
			}
		}},
		{"forget", func(t *testing.T, n *simNet, x, p *connMatch) {
			_, _, in := x.hello(p.self, 77, false)
			x.handshakeDone(in, true)
			x.forget(in)
			cx, err := x.connect(p.self, time.Now().Add(time.Minute), n.dialer(x, p))
			if err != nil || cx == in || !cx.dialed {
				t.Fatalf("x: %+v, %v", cx, err)
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			n := &simNet{}
			x, p := newConnMatch(lo), newConnMatch(hi)
			tt.run(t, n, x, p)
			n.wg.Wait()
		})
	}
}

// TestConnMatchDialError checks that a dial's own failure is returned and
// forgotten.
func TestConnMatchDialError(t *testing.T) {
	x := newConnMatch(1)
	boom := errors.New("boom")
	if _, err := x.connect(2, time.Now().Add(time.Minute), func(*matchConn, bool) error { return boom }); err != boom {
		t.Fatalf("connect: %v, want %v", err, boom)
	}
	if len(x.peers) != 0 {
		t.Errorf("the failed dial is still recorded: %+v", x.peers)
	}
}
