package e2e_test

import (
	"cmp"
	"context"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// EnvScale runs TestScaleModel when set: it takes minutes (jobs of up to
// 256 PEs, each several times), so a plain go test leaves it out.
// EnvScaleOut names the folder its table (scale.md) and plot (startup.svg)
// go to (default: a temporary folder, named in the log); EnvScaleReps is
// how many jobs of each shape it runs (default 3; medians are reported).
// EnvScaleCases, as "hosts:PEs,..." (16:256 for 256 PEs on 16 hosts),
// runs only those shapes, and not the single-host runs beside oshrun: to
// look at one shape again.
const (
	EnvScale      = "GOSHMEM_SCALE"
	EnvScaleOut   = "GOSHMEM_SCALE_OUT"
	EnvScaleReps  = "GOSHMEM_SCALE_REPS"
	EnvScaleCases = "GOSHMEM_SCALE_CASES"
)

// scaleFailureTimeout is the failure timeout of the scale model's jobs:
// with 256 PEs and their agents on two cores, a process can wait longer
// than the default 5 s for a core, and be declared dead.
const scaleFailureTimeout = "30s"

// scaleCase is a job shape of the scale model: np PEs spread evenly over
// hosts namespaced hosts.
type scaleCase struct{ hosts, np int }

// scaleRun is what one job of a case measured.
type scaleRun struct {
	wall     time.Duration
	initMax  float64 // ms, the slowest PE's time from process start to init returning
	rssPE    float64 // MB, mean peak RSS per PE
	msgsHost float64 // bootstrap messages sent and received over the network, per host (agent)
	byteHost float64 // their bytes, per host
	local    float64 // frames between an agent and its PEs, per host
	table    float64 // bytes of the address table each host publishes
}

// TestScaleModel measures start-up across 1 to 16 hosts made of
// namespaces (all on this machine's cores), from 16 to 256 PEs: wall time,
// the slowest PE's init, memory per PE, and the bootstrap traffic per host
// (GOSHMEM_STATS). It fits the model of scale.md and predicts a job of
// 10,000 PEs on 1,000 hosts; it also plots start-up time against N for
// goshmem-run and, where oshcc is installed, oshrun. It runs only with
// GOSHMEM_SCALE=1.
func TestScaleModel(t *testing.T) {
	if os.Getenv(EnvScale) == "" {
		t.Skipf("the scale model runs only with %s=1 (minutes of jobs of up to 256 PEs)", EnvScale)
	}
	needBinaries(t)
	c := newNSCluster(t, 16)
	reps := 3
	if n, err := strconv.Atoi(os.Getenv(EnvScaleReps)); err == nil && n > 0 {
		reps = n
	}
	var cases []scaleCase
	for _, h := range []int{1, 4, 16} {
		for _, np := range []int{16, 64, 128, 256} {
			cases = append(cases, scaleCase{h, np})
		}
	}
	only := os.Getenv(EnvScaleCases)
	if only != "" {
		cases = nil
		for _, f := range strings.Split(only, ",") {
			h, np, _ := strings.Cut(f, ":")
			hosts, err1 := strconv.Atoi(h)
			n, err2 := strconv.Atoi(np)
			if err1 != nil || err2 != nil || hosts < 1 || hosts > 16 || n < hosts {
				t.Fatalf("%s=%q: want hosts:PEs,... with 1 to 16 hosts", EnvScaleCases, only)
			}
			cases = append(cases, scaleCase{hosts, n})
		}
	}
	results := map[scaleCase][]scaleRun{}
	for rep := range reps {
		for _, sc := range cases { // interleaved: a slow minute touches every case
			r, err := scaleJob(c, sc)
			if err != nil { // reported; the other shapes still make the model
				t.Errorf("%d PEs on %d hosts: %v", sc.np, sc.hosts, err)
				continue
			}
			results[sc] = append(results[sc], r)
			t.Logf("rep %d: %d PEs on %d hosts: %v", rep, sc.np, sc.hosts, r.wall.Round(time.Millisecond))
		}
	}
	// oshrun beside goshmem-run on one host, for the plot.
	single := map[string][][2]float64{}
	singleNPs := []int{2, 16, 64, 128, 256}
	if only != "" {
		singleNPs = nil
	}
	for _, np := range singleNPs {
		var g, o []float64
		for range reps {
			r := run(t, nil, "-np", strconv.Itoa(np), "-failure-timeout", scaleFailureTimeout, peProgram, "hello")
			if r.code != 0 {
				t.Fatalf("goshmem-run -np %d: %v", np, r)
			}
			g = append(g, r.took.Seconds())
			if bin, _ := oshmemHello(); bin != "" && np <= 64 {
				start := time.Now()
				runOSHMEM(bin, np)
				o = append(o, time.Since(start).Seconds())
			}
		}
		single["goshmem-run"] = append(single["goshmem-run"], [2]float64{float64(np), median(g)})
		if len(o) > 0 {
			single["oshrun"] = append(single["oshrun"], [2]float64{float64(np), median(o)})
		}
	}
	cases = slices.DeleteFunc(cases, func(sc scaleCase) bool { return len(results[sc]) == 0 })
	report := scaleReport(cases, results, single)
	dir := cmp.Or(os.Getenv(EnvScaleOut), t.TempDir())
	files := map[string]string{"scale.md": report}
	if len(single) > 0 {
		files["startup.svg"] = startupSVG(single)
	}
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("scale model in %s:\n%s", dir, report)
}

// runOSHMEM runs the OSHMEM hello on np PEs; any exit status goes (Debian's
// OSHMEM crashes in shmem_finalize, ANCHORS.md).
func runOSHMEM(bin string, np int) {
	ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
	defer cancel()
	exec.CommandContext(ctx, "oshrun", "--allow-run-as-root", "--oversubscribe", "-np", strconv.Itoa(np), bin).Run()
}

// scaleJob runs the hello mode over sc and reads its figures.
func scaleJob(c *nsCluster, sc scaleCase) (scaleRun, error) {
	slots := make([]int, sc.hosts)
	for i := range slots {
		slots[i] = sc.np / sc.hosts
		if i < sc.np%sc.hosts {
			slots[i]++
		}
	}
	r := run(c.t, []string{"GOSHMEM_STATS=1"}, "-hosts", c.hostList(slots...), "-rsh", c.rsh, "-bind", c.seedIP,
		"-failure-timeout", scaleFailureTimeout, peProgram, "hello")
	if r.code != 0 {
		return scaleRun{}, fmt.Errorf("%v", r)
	}
	s, err := parseStats(r.stdout, sc.np)
	if err != nil {
		return scaleRun{}, err
	}
	out := scaleRun{wall: r.took, initMax: s.initMax, rssPE: s.rssAvg}
	agents := 0
	for _, l := range strings.Split(r.stderr, "\n") {
		_, l, ok := strings.Cut(l, "bootstrap-stats ") // after the agent's prefix
		if !ok {
			continue
		}
		v := map[string]float64{}
		for _, f := range strings.Fields(l) {
			k, x, _ := strings.Cut(f, "=")
			v[k], _ = strconv.ParseFloat(x, 64)
		}
		agents++
		out.msgsHost += v["msgs_sent"] + v["msgs_received"] + v["packets_sent"] + v["packets_received"]
		out.byteHost += v["bytes_sent"] + v["bytes_received"] + v["packet_bytes_sent"] + v["packet_bytes_received"] +
			v["stream_bytes_sent"] + v["stream_bytes_received"]
		out.local += v["local_frames"]
		out.table += v["table_bytes"]
	}
	if agents != sc.hosts {
		return scaleRun{}, fmt.Errorf("%d bootstrap-stats lines, want one per host (%d)", agents, sc.hosts)
	}
	n := float64(agents)
	out.msgsHost, out.byteHost, out.local, out.table = out.msgsHost/n, out.byteHost/n, out.local/n, out.table/n
	return out, nil
}

func median(x []float64) float64 {
	s := slices.Clone(x)
	slices.Sort(s)
	return s[len(s)/2]
}

// fitLine fits y = a + b*x by least squares.
func fitLine(xs, ys []float64) (a, b float64) {
	n := float64(len(xs))
	var sx, sy, sxx, sxy float64
	for i := range xs {
		sx, sy, sxx, sxy = sx+xs[i], sy+ys[i], sxx+xs[i]*xs[i], sxy+xs[i]*ys[i]
	}
	b = (n*sxy - sx*sy) / (n*sxx - sx*sx)
	return (sy - b*sx) / n, b
}

// fitPlane fits y = a + b*x1 + c*x2 by least squares (the normal
// equations, solved by Cramer's rule); it returns zeros when the points do
// not determine a plane.
func fitPlane(x1, x2, ys []float64) (a, b, c float64) {
	var n, s1, s2, s11, s12, s22, sy, s1y, s2y float64
	for i := range ys {
		n++
		s1, s2, sy = s1+x1[i], s2+x2[i], sy+ys[i]
		s11, s12, s22 = s11+x1[i]*x1[i], s12+x1[i]*x2[i], s22+x2[i]*x2[i]
		s1y, s2y = s1y+x1[i]*ys[i], s2y+x2[i]*ys[i]
	}
	det3 := func(m [3][3]float64) float64 {
		return m[0][0]*(m[1][1]*m[2][2]-m[1][2]*m[2][1]) - m[0][1]*(m[1][0]*m[2][2]-m[1][2]*m[2][0]) + m[0][2]*(m[1][0]*m[2][1]-m[1][1]*m[2][0])
	}
	m := [3][3]float64{{n, s1, s2}, {s1, s11, s12}, {s2, s12, s22}}
	d := det3(m)
	if d == 0 {
		return 0, 0, 0
	}
	rhs := [3]float64{sy, s1y, s2y}
	var out [3]float64
	for k := range 3 {
		mk := m
		for r := range 3 {
			mk[r][k] = rhs[r]
		}
		out[k] = det3(mk) / d
	}
	return out[0], out[1], out[2]
}

// scaleReport writes the measured table, the fits and the prediction for
// 10,000 PEs on 1,000 hosts, as Markdown.
func scaleReport(cases []scaleCase, results map[scaleCase][]scaleRun, single map[string][][2]float64) string {
	med := func(sc scaleCase, f func(scaleRun) float64) float64 {
		var x []float64
		for _, r := range results[sc] {
			x = append(x, f(r))
		}
		return median(x)
	}
	wall := func(r scaleRun) float64 { return r.wall.Seconds() }
	var b strings.Builder
	fmt.Fprintf(&b, "| hosts | PEs | PEs/host | wall s | slowest init ms | RSS MB/PE | bootstrap msgs/host | bootstrap bytes/host | agent-PE frames/host | table bytes/host |\n")
	fmt.Fprintf(&b, "|---|---|---|---|---|---|---|---|---|---|\n")
	for _, sc := range cases {
		fmt.Fprintf(&b, "| %d | %d | %d | %.2f | %.0f | %.1f | %.0f | %.0f | %.0f | %.0f |\n", sc.hosts, sc.np, sc.np/sc.hosts,
			med(sc, wall), med(sc, func(r scaleRun) float64 { return r.initMax }), med(sc, func(r scaleRun) float64 { return r.rssPE }),
			med(sc, func(r scaleRun) float64 { return r.msgsHost }), med(sc, func(r scaleRun) float64 { return r.byteHost }),
			med(sc, func(r scaleRun) float64 { return r.local }), med(sc, func(r scaleRun) float64 { return r.table }))
	}
	// Fits. Time: every namespaced host shares this machine's cores, so a
	// job's wall time is its total work over them: t = t0 + tPE*N on one
	// host; the hosts add their agents and the tree (tHost per host at
	// fixed N). Traffic per host: bytes = b0 + bN*N (the table's entries),
	// messages = m0 + mH*log2(hosts) (the tree's depth).
	var xs, ys []float64
	for _, sc := range cases {
		if sc.hosts == 1 {
			xs, ys = append(xs, float64(sc.np)), append(ys, med(sc, wall))
		}
	}
	t0, tPE := fitLine(xs, ys)
	var hx, hy []float64
	for _, sc := range cases {
		if sc.hosts > 1 {
			hx = append(hx, float64(sc.hosts-1))
			hy = append(hy, med(sc, wall)-(t0+tPE*float64(sc.np)))
		}
	}
	_, tHost := fitLine(append(hx, 0), append(hy, 0))
	var bx, by, mx, my, rp, rx, ry []float64
	for _, sc := range cases {
		if sc.hosts > 1 { // one host exchanges nothing over the network
			bx, by = append(bx, float64(sc.np)), append(by, med(sc, func(r scaleRun) float64 { return r.byteHost }))
		}
		mx, my = append(mx, math.Log2(float64(sc.hosts))), append(my, med(sc, func(r scaleRun) float64 { return r.msgsHost }))
		rp, rx, ry = append(rp, float64(sc.np/sc.hosts)), append(rx, float64(sc.np)), append(ry, med(sc, func(r scaleRun) float64 { return r.rssPE }))
	}
	b0, bN := fitLine(bx, by)
	m0, mH := fitLine(mx, my)
	// Memory per PE: what a PE keeps of each PE of its host (it decodes
	// their addresses at Init) and of each PE of the job.
	r0, rP, rN := fitPlane(rp, rx, ry)
	fmt.Fprintf(&b, "\nFits (least squares over the medians above):\n\n")
	fmt.Fprintf(&b, "- one host: wall = %.3f s + %.2f ms x N (the work of a PE, on this machine's cores)\n", t0, tPE*1000)
	fmt.Fprintf(&b, "- more hosts, at equal N: %+.1f ms per added host (agents and the tree, on the same cores)\n", tHost*1000)
	fmt.Fprintf(&b, "- bootstrap bytes per host (more than one host) = %.0f + %.1f x N\n", b0, bN)
	fmt.Fprintf(&b, "- bootstrap messages per host = %.0f + %.1f x log2(hosts)\n", m0, mH)
	fmt.Fprintf(&b, "- peak RSS per PE = %.2f MB + %.2f KB x PEs of its host + %.2f KB x N\n", r0, rP*1024, rN*1024)
	const n, hosts = 10000, 1000
	perHost := t0 + tPE*float64(n/hosts)
	depth := math.Ceil(math.Log(hosts) / math.Log(4)) // the agents' tree has fanout 4
	fmt.Fprintf(&b, "\nPrediction for %d PEs on %d hosts (%d PEs per host, each host on cores of its own):\n\n", n, hosts, n/hosts)
	fmt.Fprintf(&b, "- the PEs of a host start as a %d-PE job on one host does here: %.2f s\n", n/hosts, perHost)
	fmt.Fprintf(&b, "- the tree of agents is %.0f levels deep; each collective crosses it twice\n", depth)
	fmt.Fprintf(&b, "- bootstrap traffic per host: %.1f MB in %.0f messages\n", (b0+bN*n)/1e6, m0+mH*math.Log2(hosts))
	fmt.Fprintf(&b, "- peak RSS per PE: %.1f MB\n", r0+rP*float64(n/hosts)+rN*n)
	if len(single["oshrun"]) > 0 {
		fmt.Fprintf(&b, "\nOne host, goshmem-run against oshrun (medians, s):\n\n| N | goshmem-run | oshrun |\n|---|---|---|\n")
		for i, p := range single["goshmem-run"] {
			o := "-"
			if i < len(single["oshrun"]) {
				o = fmt.Sprintf("%.2f", single["oshrun"][i][1])
			}
			fmt.Fprintf(&b, "| %.0f | %.2f | %s |\n", p[0], p[1], o)
		}
	}
	return b.String()
}

// startupSVG plots start-up time against N, one line per launcher.
func startupSVG(lines map[string][][2]float64) string {
	const w, h, pad = 640, 400, 60
	var xmax, ymax float64
	for _, pts := range lines {
		for _, p := range pts {
			xmax, ymax = max(xmax, p[0]), max(ymax, p[1])
		}
	}
	ymax = math.Ceil(ymax)
	x := func(v float64) float64 { return pad + v/xmax*(w-2*pad) }
	y := func(v float64) float64 { return h - pad - v/ymax*(h-2*pad) }
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" font-size="12">`+"\n", w, h)
	fmt.Fprintf(&b, `<rect width="%d" height="%d" fill="white"/>`+"\n", w, h)
	fmt.Fprintf(&b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="black"/><line x1="%d" y1="%d" x2="%d" y2="%d" stroke="black"/>`+"\n",
		pad, h-pad, w-pad, h-pad, pad, pad, pad, h-pad)
	for i := 0; i <= 4; i++ {
		v := ymax * float64(i) / 4
		fmt.Fprintf(&b, `<text x="%d" y="%.0f" text-anchor="end">%.1f s</text>`+"\n", pad-6, y(v)+4, v)
		v = xmax * float64(i) / 4
		fmt.Fprintf(&b, `<text x="%.0f" y="%d" text-anchor="middle">%.0f</text>`+"\n", x(v), h-pad+18, v)
	}
	fmt.Fprintf(&b, `<text x="%d" y="%d" text-anchor="middle">PEs on one host (N)</text>`+"\n", w/2, h-16)
	fmt.Fprintf(&b, `<text x="%d" y="%d" text-anchor="middle">start-up time of a hello job (median)</text>`+"\n", w/2, 24)
	colors := map[string]string{"goshmem-run": "#1f77b4", "oshrun": "#d62728"}
	names := slices.Sorted(func(yield func(string) bool) {
		for k := range lines {
			if !yield(k) {
				return
			}
		}
	})
	for i, name := range names {
		var pts []string
		for _, p := range lines[name] {
			pts = append(pts, fmt.Sprintf("%.1f,%.1f", x(p[0]), y(p[1])))
			fmt.Fprintf(&b, `<circle cx="%.1f" cy="%.1f" r="3" fill="%s"/>`+"\n", x(p[0]), y(p[1]), colors[name])
		}
		fmt.Fprintf(&b, `<polyline fill="none" stroke="%s" stroke-width="2" points="%s"/>`+"\n", colors[name], strings.Join(pts, " "))
		fmt.Fprintf(&b, `<text x="%d" y="%d" fill="%s">%s</text>`+"\n", pad+10, pad+16*(i+1), colors[name], name)
	}
	b.WriteString("</svg>\n")
	return b.String()
}

// TestFits: the scale model's least-squares fits recover the line and the
// plane that made exact points, and fitPlane gives zeros for points that
// do not determine a plane.
func TestFits(t *testing.T) {
	xs, ys := []float64{1, 2, 4, 8}, []float64{}
	for _, x := range xs {
		ys = append(ys, 3+0.5*x)
	}
	if a, b := fitLine(xs, ys); math.Abs(a-3) > 1e-9 || math.Abs(b-0.5) > 1e-9 {
		t.Errorf("fitLine: %v + %v x, want 3 + 0.5 x", a, b)
	}
	for _, tt := range []struct {
		x1, x2  []float64
		a, b, c float64
	}{
		{[]float64{16, 64, 4, 16, 1, 16}, []float64{16, 64, 16, 64, 16, 256}, 7.5, 0.002, 0.003},
		{[]float64{1, 2, 3}, []float64{2, 4, 6}, 0, 0, 0}, // x2 = 2 x1: no plane
	} {
		var y []float64
		for i := range tt.x1 {
			y = append(y, 7.5+0.002*tt.x1[i]+0.003*tt.x2[i])
		}
		a, b, c := fitPlane(tt.x1, tt.x2, y)
		if math.Abs(a-tt.a) > 1e-6 || math.Abs(b-tt.b) > 1e-9 || math.Abs(c-tt.c) > 1e-9 {
			t.Errorf("fitPlane(%v, %v): %v, %v, %v; want %v, %v, %v", tt.x1, tt.x2, a, b, c, tt.a, tt.b, tt.c)
		}
	}
}
