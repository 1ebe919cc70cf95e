package admit

import (
	"fmt"
	"net/netip"
	"slices"
	"sync"
	"testing"
)

// TestGate admits connections from a few sources and checks which one each
// displaces: the oldest of its own source beyond PerSource, the oldest of
// the heaviest source beyond Total, and none while both hold.
func TestGate(t *testing.T) {
	type conn struct {
		from string
		name string
	}
	for _, tt := range []struct {
		name  string
		lim   Limits
		conns []conn
		done  []string // taken out (authenticated) before the last admission
		want  []string // the displaced, in order
		left  int
	}{
		{name: "under the limits", lim: Limits{PerSource: 2, Total: 4},
			conns: []conn{{"10.0.0.1", "a1"}, {"10.0.0.1", "a2"}, {"10.0.0.2", "b1"}}, left: 3},
		{name: "per source: the oldest of that source goes", lim: Limits{PerSource: 2, Total: 10},
			conns: []conn{{"10.0.0.1", "a1"}, {"10.0.0.2", "b1"}, {"10.0.0.1", "a2"}, {"10.0.0.1", "a3"}, {"10.0.0.1", "a4"}},
			want:  []string{"a1", "a2"}, left: 3},
		{name: "total: the heaviest source's oldest goes, not an older light one", lim: Limits{PerSource: 3, Total: 4},
			conns: []conn{{"10.0.0.9", "real"}, {"10.0.0.1", "a1"}, {"10.0.0.1", "a2"}, {"10.0.0.1", "a3"}, {"10.0.0.2", "b1"}, {"10.0.0.2", "b2"}},
			want:  []string{"a1", "a2"}, left: 4},
		{name: "total, sources of equal weight: the oldest goes", lim: Limits{PerSource: 5, Total: 2},
			conns: []conn{{"10.0.0.1", "a1"}, {"10.0.0.2", "b1"}, {"10.0.0.3", "c1"}},
			want:  []string{"a1"}, left: 2},
		{name: "authenticated ones free their slot", lim: Limits{PerSource: 2, Total: 2},
			conns: []conn{{"10.0.0.1", "a1"}, {"10.0.0.1", "a2"}, {"10.0.0.1", "a3"}},
			done:  []string{"a1"}, left: 2},
		{name: "IPv6: one /64 is one source", lim: Limits{PerSource: 1, Total: 10},
			conns: []conn{{"fd00::1", "x"}, {"fd00::2", "y"}, {"fd00:0:0:1::1", "z"}},
			want:  []string{"x"}, left: 2},
		{name: "an IPv4-mapped address is its IPv4 address", lim: Limits{PerSource: 1, Total: 10},
			conns: []conn{{"10.0.0.1", "v4"}, {"::ffff:10.0.0.1", "mapped"}},
			want:  []string{"v4"}, left: 1},
	} {
		t.Run(tt.name, func(t *testing.T) {
			g := New[string](tt.lim)
			tickets := map[string]*Ticket[string]{}
			var got []string
			for i, c := range tt.conns {
				if i == len(tt.conns)-1 {
					for _, d := range tt.done {
						if tickets[d].Done() {
							t.Errorf("%s: Done reports it displaced", d)
						}
					}
				}
				tk, out, ousted := g.Admit(netip.MustParseAddr(c.from), c.name)
				tickets[c.name] = tk
				if ousted {
					got = append(got, out)
				}
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("displaced %v, want %v", got, tt.want)
			}
			var left []string
			for _, c := range tt.conns {
				if !slices.Contains(tt.want, c.name) && !slices.Contains(tt.done, c.name) {
					left = append(left, c.name)
				}
			}
			if v := g.Values(); g.Len() != tt.left || !slices.Equal(v, left) {
				t.Errorf("%d left in the gate (%v), want %d (%v)", g.Len(), v, tt.left, left)
			}
			for name, tk := range tickets {
				if ousted := tk.Done(); ousted != slices.Contains(tt.want, name) {
					t.Errorf("%s: Done reports displaced=%v", name, ousted)
				}
				if again := tk.Done(); again != slices.Contains(tt.want, name) {
					t.Errorf("%s: a second Done reports displaced=%v", name, again)
				}
			}
			if g.Len() != 0 {
				t.Errorf("%d left after every Done", g.Len())
			}
		})
	}
}

// TestGateConcurrent admits and takes out connections from many goroutines
// at once: the limits hold at every admission and the gate ends empty.
func TestGateConcurrent(t *testing.T) {
	lim := Limits{PerSource: 3, Total: 8}
	g := New[int](lim)
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			from := netip.MustParseAddr(fmt.Sprintf("10.0.0.%d", w%3+1))
			for i := range 1000 {
				tk, _, _ := g.Admit(from, i)
				if n := g.Len(); n > lim.Total {
					t.Errorf("%d in the gate, limit %d", n, lim.Total)
				}
				tk.Done()
			}
		}()
	}
	wg.Wait()
	if g.Len() != 0 {
		t.Errorf("%d left", g.Len())
	}
}
