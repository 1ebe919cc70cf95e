package uct

import (
	"sync"
	"testing"

	"github.com/goshmem/goshmem/ucs"
)

// TestCompletionStatus checks that a completion keeps the first error it is
// given, whoever gives it (Invoke or SetError, one goroutine or several),
// and calls Func once, when the count reaches zero.
func TestCompletionStatus(t *testing.T) {
	tests := []struct {
		name     string
		setError []ucs.Status // before the invocations
		invoke   []ucs.Status
		parallel bool
		want     ucs.Status
	}{
		{name: "all ok", invoke: []ucs.Status{ucs.OK, ucs.OK}, want: ucs.OK},
		{name: "in progress is no error", invoke: []ucs.Status{ucs.InProgress}, want: ucs.OK},
		{name: "first error wins", invoke: []ucs.Status{ucs.OK, ucs.ErrIOError, ucs.ErrTimedOut, ucs.OK}, want: ucs.ErrIOError},
		{name: "set error first", setError: []ucs.Status{ucs.OK, ucs.ErrCanceled, ucs.ErrIOError}, invoke: []ucs.Status{ucs.ErrTimedOut}, want: ucs.ErrCanceled},
		{name: "racing errors", invoke: []ucs.Status{ucs.ErrIOError, ucs.ErrIOError, ucs.OK, ucs.ErrIOError, ucs.OK, ucs.ErrIOError}, parallel: true, want: ucs.ErrIOError},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			calls := 0
			var seen ucs.Status
			c := Completion{Func: func(c *Completion) { calls++; seen = c.Status() }, Count: int32(len(tc.invoke))}
			for _, st := range tc.setError {
				c.SetError(st)
			}
			var wg sync.WaitGroup
			for _, st := range tc.invoke {
				if tc.parallel {
					wg.Go(func() { c.Invoke(st) })
				} else {
					c.Invoke(st)
				}
			}
			wg.Wait()
			if calls != 1 || seen != tc.want || c.Status() != tc.want {
				t.Errorf("Func called %d times with %v, Status() = %v; want once with %v", calls, seen, c.Status(), tc.want)
			}
		})
	}
}

// TestCompletionArg checks that Func finds its operation through Arg.
func TestCompletionArg(t *testing.T) {
	type op struct {
		comp Completion
		done bool
	}
	o := &op{}
	o.comp = Completion{Func: func(c *Completion) { c.Arg.(*op).done = true }, Arg: o, Count: 1}
	o.comp.Invoke(ucs.OK)
	if !o.done {
		t.Error("Func did not reach its op through Arg")
	}
}
