package launcher

import "syscall"

// stallReport asks every running PE to report where it waits (see
// Options.StallReports), through the agent that runs it: the agent asks
// those that joined the job (a PE before Init is not asked).
func (j *job) stallReport() {
	j.opts.Logf("stall report requested; PEs report where they wait:")
	byAgent := map[int][]int{}
	for r := range j.pes {
		if p := &j.pes[r]; !p.ended {
			byAgent[p.agent] = append(byAgent[p.agent], r)
		}
	}
	for id, ranks := range byAgent {
		j.seed.RequestStallReport(id, ranks)
	}
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
