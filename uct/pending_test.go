package uct

import (
	"testing"

	"github.com/goshmem/goshmem/ucs"
)

func TestPendingQueue(t *testing.T) {
	var q PendingQueue
	var order []string
	room := map[*PendingGroup]bool{}
	a, b := &PendingGroup{}, &PendingGroup{}
	a.Room = func() bool { return room[a] }
	req := func(name string, results ...ucs.Status) *PendingReq {
		return &PendingReq{Func: func(*PendingReq) ucs.Status {
			st := results[0]
			if len(results) > 1 {
				results = results[1:]
			}
			if st != ucs.ErrNoResource {
				order = append(order, name)
			}
			return st
		}}
	}
	q.Add(a, req("a1", ucs.OK))
	q.Add(b, req("b1", ucs.ErrNoResource, ucs.OK))
	q.Add(a, req("a2", ucs.OK))
	q.Add(b, req("b2", ucs.OK))
	if q.Len() != 4 {
		t.Fatalf("Len = %d", q.Len())
	}
	// a has no room; b's first request finds no resources.
	if n := q.Dispatch(); n != 0 || len(order) != 0 {
		t.Fatalf("first dispatch posted %d: %v", n, order)
	}
	room[a] = true
	if n := q.Dispatch(); n != 4 || q.Len() != 0 {
		t.Fatalf("second dispatch posted %d, %d left", n, q.Len())
	}
	want := []string{"a1", "a2", "b1", "b2"}
	for i := range want {
		if order[i] != want[i] {
			t.Fatalf("order %v, want %v", order, want)
		}
	}
	q.Add(a, req("x", ucs.OK))
	q.Add(a, req("y", ucs.OK))
	if got := q.Purge(a); len(got) != 2 || q.Len() != 0 {
		t.Fatalf("Purge returned %d, %d left", len(got), q.Len())
	}
	if n := q.Dispatch(); n != 0 {
		t.Fatalf("dispatch after purge posted %d", n)
	}
}
