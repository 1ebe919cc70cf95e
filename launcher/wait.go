package launcher

import (
	"cmp"
	"context"
	"fmt"
	"strconv"
	"syscall"
	"time"

	"github.com/goshmem/goshmem/bootstrap"
	"github.com/goshmem/goshmem/bootstrap/cluster"
)

// wait handles PE exits, reports, failures, unit exits and cancellation
// until every PE ended and every unit exited.
func (j *job) wait(ctx context.Context) {
	reports := j.seed.Reports()
	done := ctx.Done()
	var ticker *time.Ticker
	var tick <-chan time.Time
	defer func() {
		if ticker != nil {
			ticker.Stop()
		}
	}()
	// watch: a launcher that is stopped (SIGSTOP, Ctrl-Z) longer than the
	// failure timeout finds its job ended by the PEs and agents that took
	// it for gone (checkStopped).
	watch := time.NewTicker(j.failureTimeout / 8)
	defer watch.Stop()
	for j.unitsUp > 0 {
		if len(j.idle) > 0 && ticker == nil {
			ticker = time.NewTicker(100 * time.Millisecond)
			tick = ticker.C
		}
		select {
		case r, ok := <-reports:
			if !ok {
				reports = nil
				break
			}
			j.report(r)
		case u := <-j.unitEnd:
			j.unitExited(u, reports)
		case <-tick:
			j.checkIdle()
		case <-watch.C:
			j.checkStopped()
		case <-done:
			done = nil
			if !j.ending {
				j.opts.Logf("interrupted: terminating %d running PE(s)", j.running)
				j.terminate("the launcher was interrupted")
			}
		case <-j.opts.StallReports:
			j.stallReport()
		case <-j.unitTerm:
			j.unitTerm = nil
			j.signalUnits(syscall.SIGTERM)
			j.unitKill = time.After(j.opts.KillGrace)
		case <-j.unitKill:
			j.unitKill = nil
			j.signalUnits(syscall.SIGKILL)
		}
	}
	j.concludeBlame()
}

// concludeBlame names the job after the first consequence when, every PE
// having ended, the PE it lost did not fail by itself (the connection
// between them did).
func (j *job) concludeBlame() {
	if j.first == nil && j.consequence != nil {
		j.name(j.consequence)
	}
}

// report handles a report the seed passed on.
func (j *job) report(r cluster.Report) {
	switch r.Kind {
	case cluster.ReportExit:
		if r.Rank < 0 || r.Rank >= len(j.pes) || j.pes[r.Rank].agent != r.Agent {
			j.opts.Logf("ignoring a report of agent %d on PE %d, which it did not start", r.Agent, r.Rank)
			return
		}
		end := peEnd{rank: r.Rank, host: r.Host, end: r.End, code: r.Code}
		if r.EndedByAgent {
			end.endedBy = cmp.Or(r.Why, "its agent ended it")
		}
		j.ended(end)
	case cluster.ReportGlobalExit:
		if j.ending {
			return
		}
		j.fail(&JobError{Rank: r.Rank, Host: r.Host, How: "called global exit with status " + strconv.Itoa(r.Code), Code: r.Code})
	case cluster.ReportAbandoned:
		// Its own end, finalized, was fine; that of the job is not.
		j.fail(&JobError{Rank: r.Rank, Host: r.Host, How: r.End.String(), Code: r.Code})
	case cluster.ReportAgentLeft:
		// Every PE of an agent is reported before it leaves.
		var lost []int
		for rank := range j.pes {
			if p := &j.pes[rank]; p.agent == r.Agent && !p.ended {
				lost = append(lost, rank)
			}
		}
		if len(lost) > 0 {
			j.lose(lost, j.lostError(lost[0], r.Host, "was lost: "+r.End.String(), 1))
		}
		if len(lost) > 0 && len(j.opts.Spawner) == 0 && r.Agent >= 0 && r.Agent < len(j.units) {
			// It did not leave, it died or hangs: it cannot be told to end
			// its PEs, which die with it (or, behind a remote shell, when
			// the shell's connection closes).
			if u := j.units[r.Agent]; !u.ended {
				j.opts.Logf("%s stopped answering: killing it", u.name)
				u.signal(syscall.SIGKILL)
			}
		}
	}
}

// peEnd is how a PE ended, as the launcher's group or the PE's agent saw it.
type peEnd struct {
	rank int
	host string
	end  bootstrap.EndCause
	code int
	// endedBy says why the launcher or the PE's agent had told the PE to
	// end while it still ran; empty when they had not. Such an end is a
	// consequence, not a failure of the PE's own.
	endedBy string
}

// ended judges the end of a PE. The job is named after its first cause: a
// PE that failed by itself, not one that ended because it learned that
// another PE failed (cluster.Seed.Lost) nor one that its agent ended,
// whatever order their ends arrive in.
func (j *job) ended(e peEnd) {
	if e.rank < 0 || e.rank >= len(j.pes) || j.pes[e.rank].ended {
		return
	}
	j.pes[e.rank].ended = true
	j.running--
	switch {
	case e.endedBy != "" && j.ending && j.blameOpen && e.rank == j.lostPeer && e.end.Kind == bootstrap.EndExited && e.code != 0:
		// The PE another PE lost exited with a failure of its own after
		// the launcher told it to end (which kills, by a signal): it had
		// failed by itself, and left the job, before its end arrived (a
		// PE that reports a collective mismatch leaves, then prints the
		// panic and exits; its peer may see the loss first).
		j.fail(&JobError{Rank: e.rank, Host: e.host, How: e.end.String(), Code: e.code})
		return
	case e.endedBy != "" && j.ending:
		return // the launcher is ending it
	case e.endedBy != "":
		// Its agent ended it without being told to: it lost the launcher,
		// or was itself told to end (a signal).
		j.fail(&JobError{Rank: e.rank, Host: e.host, How: e.end.String() + ", ended by its agent: " + e.endedBy, Code: max(e.code, 1)})
		return
	case (j.ending || j.first != nil) && !j.blameOpen:
		return // the launcher is ending it (or naming the job's end: name)
	}
	if e.code == 0 {
		noFinalize := &JobError{Rank: e.rank, Host: e.host, How: "exited without finalize (status 0) while other PEs still run", Code: 1}
		switch {
		case j.seed.Finalized(e.rank):
		case j.blameOpen && e.rank == j.lostPeer:
			// The PE that another PE lost left early: its end, reported
			// after the loss, is the cause though the job is ending.
			j.fail(noFinalize)
		case j.ending, j.running == 0:
		case j.seed.Joined(e.rank) || j.anyJoined():
			j.fail(noFinalize)
		default:
			// Not a goshmem program, or one that has not initialized yet.
			j.idle = append(j.idle, e.rank)
		}
		return
	}
	if peer, why, ok := j.seed.Lost(e.rank); ok && !e.end.KilledBySignal() && !e.end.Stalled() && (j.blameOpen || !j.pes[peer].ended) {
		// It ended because PE peer failed, or so it says: end the job now,
		// and name peer when its own failure turns up. A PE that a signal
		// killed (one its agent did not send: endedBy is empty), or that its
		// agent killed for stalling, did not end because it learned of a
		// loss; the seed may have counted it as told of one while it was
		// dying or stalled.
		if j.consequence == nil {
			j.consequence = &JobError{Rank: e.rank, Host: e.host,
				How: fmt.Sprintf("%v after it lost PE %d (%s)", e.end, peer, why), Code: e.code}
			j.lostPeer = peer
		}
		if !j.ending {
			j.blameOpen = true
			j.terminate(j.consequence.Error())
		}
		return
	}
	j.fail(&JobError{Rank: e.rank, Host: e.host, How: e.end.String(), Code: e.code})
}

// lose records the PEs of ranks, whose ends will never be reported (none
// has ended yet), as ended, and then, unless the job is ending, fails it
// with e, the end of the first: the count of running PEs that the failure
// logs leaves them all out.
func (j *job) lose(ranks []int, e *JobError) {
	for _, rank := range ranks {
		j.pes[rank].ended = true
		j.running--
	}
	if !j.ending {
		j.fail(e)
	}
}

// lostError names the failure of the PE rank, whose end will never be
// reported (how says why): the PE, or, when strangers sent the bootstrap's
// nodes in this process traffic that did not authenticate (they flooded
// their ports, and may have kept the reports out, or the PE's agent out of
// reach), the flood.
func (j *job) lostError(rank int, host, how string, code int) *JobError {
	if s := j.strangers(); s.Any() {
		return &JobError{Rank: -1, Host: j.host, Code: code,
			How: fmt.Sprintf("was flooded by strangers: the launcher's bootstrap nodes dropped %v; meanwhile PE %d on host %s %s", s, rank, host, how)}
	}
	return &JobError{Rank: rank, Host: host, How: how, Code: code}
}

// strangers returns what the bootstrap's nodes in this process, the seed
// and the launcher's agent, dropped of the traffic that did not
// authenticate with the job key.
func (j *job) strangers() cluster.Strangers {
	s := j.seed.Strangers()
	if a := j.localAgent.Load(); a != nil {
		s = s.Plus(a.Strangers())
	}
	return s
}

// unitExited handles the exit of a unit: its PEs that were not reported
// are lost.
func (j *job) unitExited(e unitExit, reports <-chan cluster.Report) {
	e.u.ended = true
	j.unitsUp--
	// Reports of the unit's agents reached the seed before the agents
	// exited, so before the unit did: handle them first.
	j.handlePending(reports)
	how, code := "ended with status "+strconv.Itoa(e.code), e.code
	if e.u.cmd != nil {
		var end bootstrap.EndCause
		end, code = describe(peExit{state: e.state, err: e.err})
		how = end.String()
	}
	if w := e.u.threads; w != nil && w.hit {
		how += ": it could not create a thread, " + w.hint()
	}
	var missing []int
	for rank := range j.pes {
		if !j.pes[rank].ended && (e.u.ranks == nil || contains(e.u.ranks, rank)) {
			missing = append(missing, rank)
		}
	}
	if len(missing) == 0 {
		if code != 0 && !j.ending {
			j.opts.Logf("%s %s", e.u.name, how)
		}
		return
	}
	j.lose(missing, j.lostError(missing[0], e.u.host, fmt.Sprintf("never reported how it ended: %s %s", e.u.name, how), max(code, 1)))
}

// handlePending handles the reports that wait on reports (nil: none, the
// channel is closed), without waiting for more.
func (j *job) handlePending(reports <-chan cluster.Report) {
	for reports != nil {
		select {
		case r, ok := <-reports:
			if !ok {
				return
			}
			j.report(r)
		default:
			return
		}
	}
}

func contains(s []int, v int) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

// checkIdle fails the job when PEs joined after others left unfinalized.
func (j *job) checkIdle() {
	if j.ending || len(j.idle) == 0 || !j.anyJoined() {
		return
	}
	r := j.idle[0]
	how := "exited before joining the job (status 0) while other PEs joined it"
	if j.seed.Joined(r) { // the seed learned of its join late
		how = "exited without finalize (status 0) while other PEs still run"
	}
	j.fail(&JobError{Rank: r, Host: j.host, How: how, Code: 1})
}

func (j *job) anyJoined() bool { return j.seed.AnyJoined() }

// checkStopped ends the job, naming the launcher, when the launcher did not
// run for longer than the failure timeout (it was starved of CPU), or for
// over half of it and was stopped (it got SIGCONT since): the agents and
// PEs that took it for gone are ending the job, and what they report is a
// consequence.
func (j *job) checkStopped() {
	now := time.Now()
	gap := now.Sub(j.alive)
	j.alive = now
	if j.ending || j.failureTimeout <= 0 || gap <= j.failureTimeout/2 {
		select {
		case <-j.continued: // a stop too short to matter
		default:
		}
		return
	}
	stopped := false
	select {
	case <-j.continued:
		stopped = true
	case <-time.After(50 * time.Millisecond): // SIGCONT reaches the channel a little after the process resumes
	}
	if stopped || gap > j.failureTimeout {
		j.fail(&JobError{Rank: -1, Host: j.host, Code: 1, How: fmt.Sprintf("(goshmem-run) did not run for %v, "+
			"longer than half the failure timeout of %v (it was stopped, or starved of CPU): the agents and PEs took it for gone",
			gap.Round(time.Millisecond), j.failureTimeout)})
	}
}

// fail records the failure that ends the job and terminates the others.
// Once the job is being ended, only the cause a consequence waits for
// (blameOpen) is recorded. A launcher that was stopped names itself (see
// checkStopped).
func (j *job) fail(e *JobError) {
	if j.first != nil || (j.ending && !j.blameOpen) {
		return
	}
	if j.checkStopped(); j.first != nil {
		return
	}
	j.name(e)
	j.terminate(e.Error())
}

// name records e as what the job is named after, and says so. The count
// of running PEs it logs leaves out those whose ends the seed passed on
// with the failure's and that wait to be handled: the PEs that an agent
// could not start, reported together (cluster.Agent.Post); the seed
// passes on the ends of one report under its lock, which the handling of
// the failure's end took since (Seed.Lost, Seed.Finalized), so they are
// all there.
func (j *job) name(e *JobError) {
	j.blameOpen = false
	j.first = e
	j.handlePending(j.seed.Reports())
	switch {
	case e.Code == 0:
		j.opts.Logf("%v: ending the job", e)
	case j.running > 0:
		j.opts.Logf("%v; terminating the %d running PE(s)", e, j.running)
	default:
		j.opts.Logf("%v", e)
	}
}

// terminate ends every PE: SIGTERM to the launcher's own, the order to
// terminate to the agents, and, when units are still there after the
// agents had time to end their PEs, SIGTERM and then SIGKILL to them.
func (j *job) terminate(reason string) {
	if j.ending {
		return
	}
	j.ending = true
	j.seed.Terminate(reason)
	if j.unitsUp > 0 {
		j.unitTerm = time.After(2*j.opts.KillGrace + time.Second)
	}
}

// signalUnits signals every unit still running.
func (j *job) signalUnits(sig syscall.Signal) {
	for _, u := range j.units {
		if !u.ended {
			j.opts.Logf("%s did not end after its PEs were told to: sending it %v", u.name, sig)
			u.signal(sig)
		}
	}
}

// signal signals the process group of the unit; the agent in the
// launcher's process is cancelled instead (it ends its PEs).
func (u *unit) signal(sig syscall.Signal) {
	if u.cmd == nil {
		u.cancel()
		return
	}
	if err := syscall.Kill(-u.cmd.Process.Pid, sig); err != nil {
		u.cmd.Process.Signal(sig)
	}
}
