package shmem_test

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/goshmem/goshmem/shmem"
)

// members returns the job's numbers of the PEs of team, in team order,
// through TeamTranslatePE.
func members(team *shmem.Team) []int {
	var pes []int
	for i := 0; i < team.NPEs(); i++ {
		pes = append(pes, shmem.TeamTranslatePE(team, i, shmem.TeamWorld))
	}
	return pes
}

// sharedModel is the TeamShared of PE me in the transport variant of the
// test: every PE over shared memory; alone over TCP; in the mixed variant
// the even PEs share memory and every odd PE (TCP only) is alone.
func sharedModel(me, n int) []int {
	switch variant() {
	case "sm":
		return pes(0, 1, n)
	case "mixed":
		if me%2 == 0 {
			return pes(0, 2, (n+1)/2)
		}
	}
	return []int{me}
}

// pes returns start, start+stride, ... (size numbers).
func pes(start, stride, size int) []int {
	s := make([]int, size)
	for i := range s {
		s[i] = start + i*stride
	}
	return s
}

// checkTeamRoundTrip checks that team works: its MyPE matches the model,
// every PE puts its job number into its slot on every PE of the team
// through a context of the team (team-relative PE numbers), Sync separates
// the rounds, and every PE then finds the model's members in its slots.
func checkTeamRoundTrip(t *testing.T, what string, team *shmem.Team, want []int, buf []int64) {
	t.Helper()
	me := shmem.MyPE()
	if diff := cmp.Diff(want, members(team)); diff != "" {
		t.Fatalf("%s: members (-want +got):\n%s", what, diff)
	}
	if got := team.MyPE(); got < 0 || want[got] != me {
		t.Fatalf("%s: MyPE = %d, members %v, this PE %d", what, got, want, me)
	}
	ctx, err := team.CreateCtx(0)
	if err != nil {
		t.Fatalf("%s: CreateCtx: %v", what, err)
	}
	if ctx.Team() != team {
		t.Errorf("%s: Ctx.Team() is not the team", what)
	}
	for i := range buf {
		buf[i] = -1
	}
	team.Sync()
	for pe := 0; pe < team.NPEs(); pe++ {
		shmem.CtxP(ctx, &buf[team.MyPE()], int64(me), pe)
	}
	ctx.Quiet()
	team.Sync()
	got := make([]int, team.NPEs())
	for i := range got {
		got[i] = int(buf[i])
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("%s: slots after puts on the team's context (-want +got):\n%s", what, diff)
	}
	team.Sync() // every PE has read before the next round writes
	ctx.Destroy()
}

func TestTeamPredefined(t *testing.T) {
	job(t, func(t *testing.T, me, n int) {
		w := shmem.TeamWorld
		if w.MyPE() != me || w.NPEs() != n {
			t.Errorf("TeamWorld: MyPE %d NPEs %d, want %d %d", w.MyPE(), w.NPEs(), me, n)
		}
		if shmem.CtxDefault.Team() != w {
			t.Error("CtxDefault.Team() is not TeamWorld")
		}
		buf := calloc[int64](t, n)
		checkTeamRoundTrip(t, "TeamWorld", w, pes(0, 1, n), buf)
		want := sharedModel(me, n)
		sh := shmem.TeamShared
		if diff := cmp.Diff(want, members(sh)); diff != "" {
			t.Fatalf("TeamShared members (-want +got):\n%s", diff)
		}
		for i := 0; i < sh.NPEs(); i++ {
			if shmem.Ptr(&buf[0], shmem.TeamTranslatePE(sh, i, w)) == nil {
				t.Errorf("Ptr to PE %d of TeamShared is nil", i)
			}
		}
		// TeamShared's collectives involve only its PEs: in the mixed
		// variant the evens and each odd PE sync separately.
		checkTeamRoundTrip(t, "TeamShared", sh, want, buf)
		checkPanic(t, "Destroy TeamWorld", w.Destroy, "TeamWorld cannot be destroyed")
		checkPanic(t, "Destroy TeamShared", sh.Destroy, "TeamShared cannot be destroyed")
		shmem.BarrierAll()
		shmem.Free(buf)
	})
}

// stridedCases are the valid splits of a parent of n PEs that the tests
// make: the whole parent, the evens, the odds, one PE, the last PEs.
func stridedCases(n int) [][3]int {
	// OpenSHMEM 1.6: a negative stride counts down from start, numbering
	// the PEs in reverse; a stride of 0 takes size 1.
	c := [][3]int{{0, 1, n}, {0, 2, (n + 1) / 2}, {n - 1, 1, 1}, {0, n, 1},
		{n - 1, -1, n}, {n - 1, -2, (n + 1) / 2}, {0, 0, 1}, {n - 1, 0, 1}}
	if n > 1 {
		c = append(c, [3]int{1, 2, n / 2}, [3]int{1, 1, n - 1})
	}
	if n > 2 {
		c = append(c, [3]int{0, n - 1, 2})
	}
	return c
}

func TestTeamSplitStrided(t *testing.T) {
	job(t, func(t *testing.T, me, n int) {
		buf := calloc[int64](t, n)
		for _, c := range stridedCases(n) {
			start, stride, size := c[0], c[1], c[2]
			what := fmt.Sprintf("TeamSplitStrided(TeamWorld, %d, %d, %d)", start, stride, size)
			team, err := shmem.TeamSplitStrided(shmem.TeamWorld, start, stride, size, shmem.TeamConfig{NumContexts: 2}, shmem.TeamNumContexts)
			if err != nil {
				t.Fatalf("%s: %v", what, err)
			}
			want := pes(start, stride, size)
			in := false
			for _, pe := range want {
				in = in || pe == me
			}
			if !in {
				if team != nil {
					t.Fatalf("%s gave a team to PE %d, outside it", what, me)
				}
				if team.MyPE() != -1 || team.NPEs() != -1 || shmem.TeamTranslatePE(shmem.TeamWorld, me, team) != -1 {
					t.Errorf("%s: the nil team does not answer -1", what)
				}
				continue
			}
			if team == nil {
				t.Fatalf("%s gave no team to PE %d", what, me)
			}
			if cfg, err := team.GetConfig(shmem.TeamNumContexts); err != nil || cfg.NumContexts != 2 {
				t.Errorf("%s: GetConfig = %+v, %v, want NumContexts 2", what, cfg, err)
			}
			checkTeamRoundTrip(t, what, team, want, buf)
			// A split of the split: every PE of team but its first.
			if team.NPEs() > 1 {
				sub, err := shmem.TeamSplitStrided(team, 1, 1, team.NPEs()-1, shmem.TeamConfig{}, 0)
				if err != nil {
					t.Fatalf("split of %s: %v", what, err)
				}
				if team.MyPE() == 0 {
					if sub != nil {
						t.Fatalf("split of %s gave a team to its PE 0", what)
					}
				} else {
					checkTeamRoundTrip(t, "split of "+what, sub, want[1:], buf)
					if got := shmem.TeamTranslatePE(sub, sub.MyPE(), team); got != team.MyPE() {
						t.Errorf("split of %s: TeamTranslatePE to the parent = %d, want %d", what, got, team.MyPE())
					}
					sub.Destroy()
				}
			}
			team.Destroy()
			if team.MyPE() != -1 {
				t.Errorf("%s: MyPE after Destroy = %d", what, team.MyPE())
			}
			team.Destroy() // twice does nothing
		}
		shmem.BarrierAll()
		shmem.Free(buf)
	})
}

func TestTeamSplit2D(t *testing.T) {
	job(t, func(t *testing.T, me, n int) {
		buf := calloc[int64](t, n)
		for _, xrange := range []int{1, 2, 3, n + 2} {
			what := fmt.Sprintf("TeamSplit2D(TeamWorld, %d)", xrange)
			x, y, err := shmem.TeamSplit2D(shmem.TeamWorld, xrange, shmem.TeamConfig{NumContexts: 1}, shmem.TeamNumContexts, shmem.TeamConfig{}, 0)
			if err != nil {
				t.Fatalf("%s: %v", what, err)
			}
			xr := min(xrange, n)
			row, col := me/xr, me%xr
			wantX := pes(row*xr, 1, min(xr, n-row*xr))
			wantY := pes(col, xr, (n-col+xr-1)/xr)
			checkTeamRoundTrip(t, what+" x-axis team", x, wantX, buf)
			checkTeamRoundTrip(t, what+" y-axis team", y, wantY, buf)
			if x.MyPE() != col || y.MyPE() != row {
				t.Errorf("%s: x.MyPE %d y.MyPE %d, want column %d row %d", what, x.MyPE(), y.MyPE(), col, row)
			}
			if c, _ := x.GetConfig(shmem.TeamNumContexts); c.NumContexts != 1 {
				t.Errorf("%s: x-axis NumContexts = %d, want 1", what, c.NumContexts)
			}
			if c, _ := y.GetConfig(shmem.TeamNumContexts); c.NumContexts != 0 {
				t.Errorf("%s: y-axis NumContexts = %d, want the default 0", what, c.NumContexts)
			}
			x.Destroy()
			y.Destroy()
		}
		shmem.BarrierAll()
		shmem.Free(buf)
	})
}

// TestTeamSyncBackToBack: many Syncs in a row on a team, with a round of
// puts before each (completed with Quiet, which Sync does not do): after
// each Sync every PE of the team sees every other's put of that round.
func TestTeamSyncBackToBack(t *testing.T) {
	job(t, func(t *testing.T, me, n int) {
		// The odd PEs when there are any, else everyone.
		start, size := 1, n/2
		if n == 1 {
			start, size = 0, 1
		}
		team, err := shmem.TeamSplitStrided(shmem.TeamWorld, start, 2, size, shmem.TeamConfig{}, 0)
		if err != nil {
			t.Fatal(err)
		}
		x := calloc[int64](t, n)
		if team != nil {
			tn, tme := team.NPEs(), team.MyPE()
			for round := int64(1); round <= 200; round++ {
				for pe := 0; pe < tn; pe++ {
					shmem.P(&x[tme], round, shmem.TeamTranslatePE(team, pe, shmem.TeamWorld))
				}
				shmem.Quiet()
				team.Sync()
				for pe := 0; pe < tn; pe++ {
					if x[pe] != round {
						t.Fatalf("round %d: slot of team PE %d = %d after Sync", round, pe, x[pe])
					}
				}
				team.Sync()
			}
			team.Destroy()
		}
		// The PEs outside the team were not held up by it; everyone meets here.
		shmem.BarrierAll()
		shmem.Free(x)
	})
}

func TestTeamInvalidSplits(t *testing.T) {
	job(t, func(t *testing.T, me, n int) {
		w := shmem.TeamWorld
		for _, c := range []struct {
			name                string
			start, stride, size int
			config              shmem.TeamConfig
			mask                shmem.TeamConfigMask
			want                string
		}{
			{"size 0", 0, 1, 0, shmem.TeamConfig{}, 0, "size 0 (valid: 1.."},
			{"start -1", -1, 1, 1, shmem.TeamConfig{}, 0, "start -1 (valid: 0.."},
			{"start n", n, 1, 1, shmem.TeamConfig{}, 0, fmt.Sprintf("start %d (valid: 0..%d", n, n-1)},
			{"stride 0", 0, 0, 2, shmem.TeamConfig{}, 0, "stride 0 with size 2"},
			{"past the end", 0, 1, n + 1, shmem.TeamConfig{}, 0, fmt.Sprintf("reach PE %d of a parent team of %d PEs", n, n)},
			{"wraps below 0", 0, -1, 2, shmem.TeamConfig{}, 0, "reach PE -1 of the parent team"},
			// Arguments that differ among the PEs: an error on every PE,
			// never a hang (needs two PEs).
			{"start differs", me % 2, 1, 1, shmem.TeamConfig{}, 0, "every PE of the parent team must pass the same ones"},
			{"bad config on one PE", 0, 1, n, shmem.TeamConfig{NumContexts: -me}, shmem.TeamNumContexts, "passed an invalid team configuration"},
			{"unknown mask", 0, 1, n, shmem.TeamConfig{}, 1 << 5, "passed an invalid team configuration"},
		} {
			if n == 1 && (c.name == "start differs" || c.name == "bad config on one PE") {
				continue // one PE agrees with itself
			}
			team, err := shmem.TeamSplitStrided(w, c.start, c.stride, c.size, c.config, c.mask)
			if err == nil || team != nil {
				t.Errorf("%s: TeamSplitStrided = %v, %v, want an error", c.name, team, err)
				continue
			}
			if !strings.Contains(err.Error(), c.want) {
				t.Errorf("%s: error %q does not say %q", c.name, err, c.want)
			}
			if !errors.Is(err, shmem.ErrInvalidArgument) {
				t.Errorf("%s: error %q does not wrap ErrInvalidArgument", c.name, err)
			}
		}
		for _, xrange := range []int{0, -3} {
			if x, y, err := shmem.TeamSplit2D(w, xrange, shmem.TeamConfig{}, 0, shmem.TeamConfig{}, 0); err == nil || x != nil || y != nil {
				t.Errorf("TeamSplit2D(xrange %d) = %v, %v, %v, want an error", xrange, x, y, err)
			}
		}
		if n > 1 {
			_, _, err := shmem.TeamSplit2D(w, 1+me%2, shmem.TeamConfig{}, 0, shmem.TeamConfig{}, 0)
			if err == nil || !strings.Contains(err.Error(), "must pass the same") {
				t.Errorf("TeamSplit2D with xrange differing among PEs: %v", err)
			}
		}
		// After the errors the team works, and so does a valid split.
		team, err := shmem.TeamSplitStrided(w, 0, 1, n, shmem.TeamConfig{}, 0)
		if err != nil {
			t.Fatalf("valid split after invalid ones: %v", err)
		}
		buf := calloc[int64](t, n)
		checkTeamRoundTrip(t, "split after invalid ones", team, pes(0, 1, n), buf)
		team.Destroy()
		// Nil and destroyed teams.
		// (The error policy: the invalid team gives errors, a destroyed
		// one panics.)
		if _, err := (*shmem.Team)(nil).CreateCtx(0); !errors.Is(err, shmem.ErrInvalidTeam) {
			t.Errorf("CreateCtx of a nil team: %v, want ErrInvalidTeam", err)
		}
		checkPanic(t, "CreateCtx of a destroyed team", func() { team.CreateCtx(0) }, "was destroyed")
		if _, err := w.CreateCtx(1 << 8); !errors.Is(err, shmem.ErrInvalidArgument) || !strings.Contains(err.Error(), "unknown options") {
			t.Errorf("CreateCtx with unknown options: %v", err)
		}
		if _, err := (*shmem.Team)(nil).GetConfig(shmem.TeamNumContexts); !errors.Is(err, shmem.ErrInvalidTeam) {
			t.Errorf("GetConfig of a nil team: %v, want ErrInvalidTeam", err)
		}
		if _, err := w.GetConfig(1 << 5); !errors.Is(err, shmem.ErrInvalidArgument) {
			t.Errorf("GetConfig with unknown mask bits: %v, want ErrInvalidArgument", err)
		}
		checkPanic(t, "GetConfig of a destroyed team", func() { team.GetConfig(shmem.TeamNumContexts) }, "was destroyed")
		checkPanic(t, "Sync of nil", (*shmem.Team)(nil).Sync, "nil team")
		checkPanic(t, "Sync of a destroyed team", team.Sync, "was destroyed")
		// Splitting SHMEM_TEAM_INVALID (nil) creates nothing: nil teams and
		// the specification's nonzero return (ErrInvalidTeam), no panic,
		// and no communication (PE 0 alone calls them).
		if me == 0 {
			if team, err := shmem.TeamSplitStrided(nil, 0, 1, 1, shmem.TeamConfig{}, 0); team != nil || !errors.Is(err, shmem.ErrInvalidTeam) {
				t.Errorf("TeamSplitStrided(nil) = %v, %v, want nil, ErrInvalidTeam", team, err)
			}
			if x, y, err := shmem.TeamSplit2D(nil, 2, shmem.TeamConfig{}, 0, shmem.TeamConfig{}, 0); x != nil || y != nil || !errors.Is(err, shmem.ErrInvalidTeam) {
				t.Errorf("TeamSplit2D(nil) = %v, %v, %v, want nil, nil, ErrInvalidTeam", x, y, err)
			}
		}
		checkPanic(t, "split of a destroyed team", func() { shmem.TeamSplitStrided(team, 0, 1, 1, shmem.TeamConfig{}, 0) }, "was destroyed")
		shmem.BarrierAll()
		shmem.Free(buf)
	})
}

// TestTeamExhaustion: splits until no team slot is left fail on every PE
// alike, and destroying teams makes room again.
func TestTeamExhaustion(t *testing.T) {
	job(t, func(t *testing.T, me, n int) {
		var teams []*shmem.Team
		for {
			team, err := shmem.TeamSplitStrided(shmem.TeamWorld, 0, 1, n, shmem.TeamConfig{}, 0)
			if err != nil {
				if !strings.Contains(err.Error(), "no team slot is free") {
					t.Fatalf("after %d teams: %v", len(teams), err)
				}
				break
			}
			teams = append(teams, team)
			if len(teams) > shmem.MaxTeams {
				t.Fatalf("%d teams created, more than MaxTeams %d", len(teams), shmem.MaxTeams)
			}
		}
		if len(teams) != shmem.MaxTeams-2 {
			t.Errorf("%d teams fit beside TeamWorld and TeamShared, want %d", len(teams), shmem.MaxTeams-2)
		}
		for _, team := range teams[1:] {
			team.Destroy()
		}
		buf := calloc[int64](t, n)
		checkTeamRoundTrip(t, "the first team, after the others were destroyed", teams[0], pes(0, 1, n), buf)
		again, err := shmem.TeamSplitStrided(teams[0], 0, 1, n, shmem.TeamConfig{}, 0)
		if err != nil {
			t.Fatalf("split after destroying teams: %v", err)
		}
		checkTeamRoundTrip(t, "a team in a reused slot", again, pes(0, 1, n), buf)
		again.Destroy()
		teams[0].Destroy()
		shmem.BarrierAll()
		shmem.Free(buf)
	})
}

func TestTeamTranslatePE(t *testing.T) {
	job(t, func(t *testing.T, me, n int) {
		w := shmem.TeamWorld
		evens, err := shmem.TeamSplitStrided(w, 0, 2, (n+1)/2, shmem.TeamConfig{}, 0)
		if err != nil {
			t.Fatal(err)
		}
		x, y, err := shmem.TeamSplit2D(w, 2, shmem.TeamConfig{}, 0, shmem.TeamConfig{}, 0)
		if err != nil {
			t.Fatal(err)
		}
		// Every PE of the job to each team, against the model.
		row, col := me/2, me%2
		gotEvens, gotX, gotY := make([]int, n+2), make([]int, n+2), make([]int, n+2)
		wantEvens, wantX, wantY := make([]int, n+2), make([]int, n+2), make([]int, n+2)
		for pe := -1; pe <= n; pe++ {
			i := pe + 1
			gotEvens[i] = shmem.TeamTranslatePE(w, pe, evens)
			gotX[i] = shmem.TeamTranslatePE(w, pe, x)
			gotY[i] = shmem.TeamTranslatePE(w, pe, y)
			wantEvens[i], wantX[i], wantY[i] = -1, -1, -1
			if pe < 0 || pe >= n {
				continue
			}
			if me%2 == 0 && pe%2 == 0 {
				wantEvens[i] = pe / 2
			}
			if pe/2 == row {
				wantX[i] = pe % 2
			}
			if pe%2 == col {
				wantY[i] = pe / 2
			}
		}
		for _, c := range []struct {
			name      string
			want, got []int
		}{{"evens", wantEvens, gotEvens}, {"x-axis", wantX, gotX}, {"y-axis", wantY, gotY}} {
			if diff := cmp.Diff(c.want, c.got); diff != "" {
				t.Errorf("TeamTranslatePE(TeamWorld, -1..%d, %s) (-want +got):\n%s", n, c.name, diff)
			}
		}
		// Between split teams: a row to a column meets at this PE only.
		for i := 0; i < x.NPEs(); i++ {
			want := -1
			if i == x.MyPE() {
				want = y.MyPE()
			}
			if got := shmem.TeamTranslatePE(x, i, y); got != want {
				t.Errorf("TeamTranslatePE(x, %d, y) = %d, want %d", i, got, want)
			}
		}
		if got := shmem.TeamTranslatePE(nil, 0, w); got != -1 {
			t.Errorf("TeamTranslatePE from nil = %d", got)
		}
		if got := shmem.TeamTranslatePE(w, 0, nil); got != -1 {
			t.Errorf("TeamTranslatePE to nil = %d", got)
		}
		evens.Destroy()
		if got := shmem.TeamTranslatePE(w, 0, evens); got != -1 {
			t.Errorf("TeamTranslatePE to a destroyed team = %d", got)
		}
		x.Destroy()
		y.Destroy()
		shmem.BarrierAll()
	})
}

// TestTeamCtx: the PE numbers of a team context are team numbers; a PE
// outside the team panics with the team's range; destroying the team
// destroys its contexts.
func TestTeamCtx(t *testing.T) {
	job(t, func(t *testing.T, me, n int) {
		// The PEs from 1 (or PE 0 alone), numbered from 0 in the team.
		start := min(1, n-1)
		team, err := shmem.TeamSplitStrided(shmem.TeamWorld, start, 1, n-start, shmem.TeamConfig{}, 0)
		if err != nil {
			t.Fatal(err)
		}
		x := calloc[int64](t, 2)
		if team != nil {
			tn, tme := team.NPEs(), team.MyPE()
			ctx, err := team.CreateCtx(shmem.CtxPrivate)
			if err != nil {
				t.Fatal(err)
			}
			to := (tme + 1) % tn
			shmem.CtxAtomicAdd(ctx, &x[0], int64(me+1), to)
			shmem.CtxP(ctx, &x[1], int64(100+me), to)
			ctx.Quiet()
			team.Sync()
			from := shmem.TeamTranslatePE(team, (tme-1+tn)%tn, shmem.TeamWorld)
			if x[0] != int64(from+1) || x[1] != int64(100+from) {
				t.Errorf("after puts from team PE %d (PE %d): %v, want [%d %d]", (tme-1+tn)%tn, from, x, from+1, 100+from)
			}
			if got := shmem.CtxAtomicFetch(ctx, &x[0], tme); got != x[0] {
				t.Errorf("CtxAtomicFetch to this PE's team number = %d, want %d", got, x[0])
			}
			checkPanic(t, "CtxP to team PE n", func() { shmem.CtxP(ctx, &x[1], 0, tn) },
				fmt.Sprintf("PE %d is not a PE of the context's team, team (%d, 1, %d) of TeamWorld (valid: 0..%d)", tn, start, n-start, tn-1))
			team.Sync()
			team.Destroy()
			checkPanic(t, "ctx after its team was destroyed", func() { ctx.Quiet() }, "the context was destroyed")
		}
		shmem.BarrierAll()
		shmem.Free(x)
	})
}

// TestTeamSplitConcurrentParents: with ThreadMultiple, two goroutines of
// every PE split two different parent teams at once (the specification
// allows it; only splits of the same parent must not overlap), reduce on
// the new teams and destroy them, round after round. Two concurrent splits
// must never hand out the same team slot: teams sharing synchronization
// words give wrong sums or hang.
func TestTeamSplitConcurrentParents(t *testing.T) {
	const goroutines, rounds = 2, 60
	threadJob(t, shmem.ThreadMultiple, []int{2, 3}, func(t *testing.T, me, n int) {
		parents := make([]*shmem.Team, goroutines)
		srcs := make([][]int64, goroutines)
		dsts := make([][]int64, goroutines)
		for g := range parents {
			p, err := shmem.TeamSplitStrided(shmem.TeamWorld, 0, 1, n, shmem.TeamConfig{}, 0)
			if err != nil {
				t.Fatalf("parent %d: %v", g, err)
			}
			parents[g] = p
			srcs[g], dsts[g] = calloc[int64](t, 4), calloc[int64](t, 4)
		}
		var wg sync.WaitGroup
		errs := make(chan error, goroutines)
		for g := range parents {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for r := 0; r < rounds; r++ {
					team, err := shmem.TeamSplitStrided(parents[g], 0, 1, n, shmem.TeamConfig{}, 0)
					if err != nil {
						errs <- fmt.Errorf("goroutine %d, round %d: split: %w", g, r, err)
						return
					}
					for i := range srcs[g] {
						srcs[g][i] = int64(1000*g + 10*r + me + i)
					}
					if err := shmem.SumReduce(team, dsts[g], srcs[g]); err != nil {
						errs <- fmt.Errorf("goroutine %d, round %d: SumReduce: %w", g, r, err)
						return
					}
					for i, got := range dsts[g] {
						if want := int64(n*(1000*g+10*r+i) + n*(n-1)/2); got != want {
							errs <- fmt.Errorf("goroutine %d, round %d: sum[%d] = %d, want %d (two teams share synchronization words?)", g, r, i, got, want)
							return
						}
					}
					team.Destroy()
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Error(err)
		}
		for g := range parents {
			parents[g].Destroy()
		}
		shmem.BarrierAll()
		for g := range parents {
			shmem.Free(srcs[g])
			shmem.Free(dsts[g])
		}
	})
}

// TestTeamPtr: TeamPtr (OpenSHMEM 1.6) numbers PEs by the team: for
// TeamWorld it is Ptr; for a team in reverse order its PE i is the job's
// PE n-1-i; for the invalid (nil) team it is nil.
func TestTeamPtr(t *testing.T) {
	job(t, func(t *testing.T, me, n int) {
		x := calloc[int64](t, 1)
		x[0] = int64(100 + me)
		shmem.BarrierAll()
		for pe := 0; pe < n; pe++ {
			if got, want := shmem.TeamPtr(shmem.TeamWorld, &x[0], pe), shmem.Ptr(&x[0], pe); got != want {
				t.Errorf("TeamPtr(TeamWorld, PE %d) = %p, Ptr = %p", pe, got, want)
			}
		}
		if p := shmem.TeamPtr[int64](nil, &x[0], 0); p != nil {
			t.Errorf("TeamPtr(nil team) = %p, want nil", p)
		}
		rev, err := shmem.TeamSplitStrided(shmem.TeamWorld, n-1, -1, n, shmem.TeamConfig{}, 0)
		if err != nil {
			t.Fatal(err)
		}
		if got := rev.MyPE(); got != n-1-me {
			t.Errorf("MyPE in the reversed team = %d, want %d", got, n-1-me)
		}
		for i := 0; i < n; i++ {
			p := shmem.TeamPtr(rev, &x[0], i)
			if p != shmem.Ptr(&x[0], n-1-i) {
				t.Errorf("TeamPtr(reversed, %d) = %p, Ptr(PE %d) = %p", i, p, n-1-i, shmem.Ptr(&x[0], n-1-i))
			}
			if p != nil && *p != int64(100+n-1-i) {
				t.Errorf("load through TeamPtr(reversed, %d) = %d, want %d", i, *p, 100+n-1-i)
			}
		}
		checkPanic(t, "TeamPtr outside the team", func() { shmem.TeamPtr(rev, &x[0], n) }, "is not a PE of")
		rev.Destroy()
		shmem.BarrierAll()
		shmem.Free(x)
	})
}
