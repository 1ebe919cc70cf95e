package launcher

import (
	"fmt"
	"strings"
	"syscall"
)

// stallReport asks every running PE that joined the job to report where
// it waits (see Options.StallReports), through the agent that runs it.
func (j *job) stallReport() {
	j.opts.Logf("stall report requested; PEs report where they wait:")
	var notJoined []int
	byAgent := map[int][]int{}
	for r := range j.pes {
		switch p := &j.pes[r]; {
		case p.ended:
		case !j.seed.Joined(r):
			notJoined = append(notJoined, r)
		default:
			byAgent[p.agent] = append(byAgent[p.agent], r)
		}
	}
	if len(notJoined) > 0 {
		j.opts.Logf("not asking PE %s: not in the job yet (before Init)", rankList(notJoined))
	}
	for id, ranks := range byAgent {
		j.seed.RequestStallReport(id, ranks)
	}
}

// rankList formats ranks as "1, 4, 7", the first 16 of them.
func rankList(ranks []int) string {
	var b strings.Builder
	for i, r := range ranks {
		if i == 16 {
			fmt.Fprintf(&b, " and %d more", len(ranks)-i)
			break
		}
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprint(&b, r)
	}
	return b.String()
}

// stallReport sends SIGUSR2 to the PEs of the given ranks that still run,
// to their process alone (what the PE started would die of it), and tags
// the output from now on: the reports must say whose they are.
func (g *group) stallReport(ranks []int) {
	g.tagFromNow()
	for _, r := range ranks {
		if p := g.pes[r]; p != nil && !p.exited {
			p.cmd.Process.Signal(syscall.SIGUSR2) // an error: it ended meanwhile
		}
	}
}
