package main

import (
	"bytes"
	"encoding/xml"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// runCompare is the compare sub-command: it reads two results and prints
// them side by side, and with -svg plots them.
func runCompare(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("osu compare", flag.ContinueOnError)
	fs.SetOutput(stderr)
	nameA := fs.String("a", "", "name of the first result (default: its implementation or file name)")
	nameB := fs.String("b", "", "name of the second result")
	svg := fs.String("svg", "", "write a plot of both results to this SVG file")
	metric := fs.String("metric", "", "figure to compare: latency, bandwidth or rate (default: the first result's)")
	prec := fs.Int("precision", 3, "decimals in the table")
	usage := func(w io.Writer) {
		fmt.Fprintf(w, "usage: osu compare [flags] A B\n\nA and B are -json documents or OSU text tables, or comma-separated lists\nof runs of one test, whose rows are their medians; all must be results\nof one test.\n\nflags:\n")
		fs.SetOutput(w)
		fs.PrintDefaults()
		fs.SetOutput(stderr)
	}
	fs.Usage = func() {} // printed below: on stdout for -help
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			usage(stdout)
			return 0
		}
		usage(stderr)
		return 2
	}
	if fs.NArg() != 2 {
		fmt.Fprintf(stderr, "osu compare: want two results, A and B, got %d arguments\n", fs.NArg())
		usage(stderr)
		return 2
	}
	if *prec < 0 || *prec > 9 {
		fmt.Fprintf(stderr, "osu compare: -precision %d: want 0 to 9\n", *prec)
		return 2
	}
	var reps [2]*Report
	for i, arg := range fs.Args() {
		var runs []*Report
		paths := strings.Split(arg, ",")
		for j, path := range paths {
			r, err := readReport(path)
			if err == nil && j > 0 {
				err = sameTest(runs[0], r, paths[0], path)
			}
			if err != nil {
				fmt.Fprintf(stderr, "osu compare: %v\n", err)
				return 1
			}
			runs = append(runs, r)
		}
		reps[i] = medianReport(runs)
	}
	if err := sameTest(reps[0], reps[1], fs.Arg(0), fs.Arg(1)); err != nil {
		fmt.Fprintf(stderr, "osu compare: %v\n", err)
		return 1
	}
	names := [2]string{*nameA, *nameB}
	for i := range names {
		if names[i] == "" {
			names[i] = defaultName(reps[i], strings.Split(fs.Arg(i), ",")[0])
		}
	}
	if names[0] == names[1] {
		names[0], names[1] = names[0]+" (A)", names[1]+" (B)"
	}
	m := *metric
	if m == "" {
		m = reps[0].Metric
	}
	switch m {
	case metricLatency, metricBandwidth, metricRate:
	default:
		fmt.Fprintf(stderr, "osu compare: -metric %q: want latency, bandwidth or rate\n", m)
		return 2
	}
	cmp := compareReports(reps[0], reps[1], m)
	if len(cmp.rows) == 0 {
		fmt.Fprintf(stderr, "osu compare: the results have no rows in common (sizes or operations)\n")
		return 1
	}
	if err := writeComparison(stdout, cmp, names, *prec); err != nil {
		fmt.Fprintf(stderr, "osu compare: %v\n", err)
		return 1
	}
	if *svg != "" {
		var buf bytes.Buffer
		writeSVG(&buf, cmp, names)
		if err := os.WriteFile(*svg, buf.Bytes(), 0o644); err != nil {
			fmt.Fprintf(stderr, "osu compare: %v\n", err)
			return 1
		}
	}
	return 0
}

// sameTest returns an error unless a (read from pathA) and b (from pathB)
// are results of one test, which alone can be compared: the same
// sub-command when both are known (an OSU table without a title is not),
// and the same metric. The "name microseconds" lines of oshm_ref are a
// reference for any test whose rows are operations.
func sameTest(a, b *Report, pathA, pathB string) error {
	if a.Test != "" && b.Test != "" && a.Test != b.Test && a.Test != refTest && b.Test != refTest {
		return fmt.Errorf("%s is a result of the %s test (%s), %s of the %s test (%s): compare results of one test",
			pathA, a.Test, a.Title, pathB, b.Test, b.Title)
	}
	if a.Metric != b.Metric {
		return fmt.Errorf("%s measures %s, %s measures %s: compare results of one test", pathA, a.Metric, pathB, b.Metric)
	}
	return nil
}

// medianReport merges runs of one test: the first run's rows, each figure
// replaced by its median over the runs that have a row of the same key (on
// a noisy machine one run's figure can be off by several times).
func medianReport(runs []*Report) *Report {
	if len(runs) == 1 {
		return runs[0]
	}
	m := *runs[0]
	m.Rows = slices.Clone(m.Rows)
	for i := range m.Rows {
		row := &m.Rows[i]
		var same []Row
		for _, r := range runs {
			for _, o := range r.Rows {
				if o.key() == row.key() {
					same = append(same, o)
					break
				}
			}
		}
		for _, f := range []func(*Row) *float64{
			func(r *Row) *float64 { return &r.Latency },
			func(r *Row) *float64 { return &r.MinLatency },
			func(r *Row) *float64 { return &r.MaxLatency },
			func(r *Row) *float64 { return &r.Bandwidth },
			func(r *Row) *float64 { return &r.Rate },
			func(r *Row) *float64 { return &r.MOps },
		} {
			v := make([]float64, len(same))
			for j := range same {
				v[j] = *f(&same[j])
			}
			*f(row) = median(v)
		}
	}
	return &m
}

// median returns the median of v (the mean of the middle two for an even
// count), sorting v.
func median(v []float64) float64 {
	slices.Sort(v)
	n := len(v)
	if n%2 == 1 {
		return v[n/2]
	}
	return (v[n/2-1] + v[n/2]) / 2
}

// defaultName names a result: its implementation's first word, or its
// file name.
func defaultName(r *Report, path string) string {
	if f := strings.Fields(r.Impl); len(f) > 0 {
		return f[0]
	}
	return strings.TrimSuffix(filepath.Base(path), filepath.Ext(path))
}

// comparison is two results matched row by row.
type comparison struct {
	title  string
	metric string
	bySize bool // rows keyed by message size (else by operation)
	rows   []cmpRow
}

// cmpRow is one key of a comparison; a value is NaN where its result has
// no such row.
type cmpRow struct {
	key  string
	size int
	a, b float64
}

// ratio returns a/b, or NaN.
func (r *cmpRow) ratio() float64 {
	if math.IsNaN(r.a) || math.IsNaN(r.b) || r.b == 0 {
		return math.NaN()
	}
	return r.a / r.b
}

// compareReports matches the rows of a and b: by size, or by operation.
// An operation of b that a lacks matches by its last word ("fadd" of
// "shmem_longlong_fadd") when that is unambiguous, so that OSU's C type
// names and this program's Go ones line up. The rows follow a's order,
// then b's rows that a lacks.
func compareReports(a, b *Report, metric string) *comparison {
	c := &comparison{title: a.Title, metric: metric, bySize: len(a.Rows) > 0 && a.Rows[0].Op == ""}
	if c.title == "" {
		c.title = b.Title
	}
	index := map[string]int{}
	add := func(key string, size int) int {
		if i, ok := index[key]; ok {
			return i
		}
		index[key] = len(c.rows)
		c.rows = append(c.rows, cmpRow{key: key, size: size, a: math.NaN(), b: math.NaN()})
		return len(c.rows) - 1
	}
	suffix := map[string][]string{}
	for _, r := range a.Rows {
		if c.bySize != (r.Op == "") {
			continue
		}
		c.rows[add(r.key(), r.Size)].a = r.value(metric)
		if r.Op != "" {
			s := opSuffix(r.Op)
			suffix[s] = append(suffix[s], r.Op)
		}
	}
	for _, r := range b.Rows {
		if c.bySize != (r.Op == "") {
			continue
		}
		key := r.key()
		if _, ok := index[key]; !ok && r.Op != "" {
			if m := suffix[opSuffix(r.Op)]; len(m) == 1 {
				key = m[0]
			}
		}
		i := add(key, r.Size)
		if math.IsNaN(c.rows[i].b) {
			c.rows[i].b = r.value(metric)
		}
	}
	if c.bySize {
		slices.SortStableFunc(c.rows, func(x, y cmpRow) int { return x.size - y.size })
	}
	return c
}

// opSuffix is the last word of an operation name.
func opSuffix(op string) string {
	return op[strings.LastIndex(op, "_")+1:]
}

// metricLabel is the axis and column label of a metric.
func metricLabel(m string) string {
	switch m {
	case metricBandwidth:
		return "Bandwidth (MB/s)"
	case metricRate:
		return "Messages/s"
	}
	return "Latency (us)"
}

// writeComparison prints the side-by-side table.
func writeComparison(w io.Writer, c *comparison, names [2]string, prec int) error {
	var b bytes.Buffer
	fmt.Fprintf(&b, "# %s: %s vs %s, %s\n", c.title, names[0], names[1], metricLabel(c.metric))
	first, width := "# Size", sizeWidth
	if !c.bySize {
		first, width = "# Operation", opWidth
	}
	fmt.Fprintf(&b, "%-*s%*s%*s%*s\n", width, first, fieldWidth, names[0], fieldWidth, names[1], iterWidth, "A/B")
	num := func(v float64, wd, p int) string {
		if math.IsNaN(v) {
			return fmt.Sprintf("%*s", wd, "-")
		}
		return fmt.Sprintf("%*.*f", wd, p, v)
	}
	for _, r := range c.rows {
		fmt.Fprintf(&b, "%-*s%s%s%s\n", width, r.key, num(r.a, fieldWidth, prec), num(r.b, fieldWidth, prec), num(r.ratio(), iterWidth, 2))
	}
	_, err := w.Write(b.Bytes())
	return err
}

// SVG geometry.
const (
	svgW, svgH                     = 760, 480
	plotL, plotR, plotT, plotB     = 90, 730, 50, 400
	legendX, legendY, legendLineLn = 110, 70, 28
)

var svgColors = [2]string{"#1f77b4", "#d62728"}

// writeSVG draws the comparison: the metric against the message size on a
// log2 axis (or against the operations, evenly spaced), one polyline per
// result with a marker per point, a log10 value axis when the values span
// more than a factor of 20 (linear otherwise), grid, axis labels and a
// legend. It uses nothing but the standard library.
func writeSVG(w *bytes.Buffer, c *comparison, names [2]string) {
	esc := func(s string) string {
		var b bytes.Buffer
		_ = xml.EscapeText(&b, []byte(s))
		return b.String()
	}
	// x positions.
	xs := make([]float64, len(c.rows))
	var xlo, xhi float64
	for i, r := range c.rows {
		if c.bySize && r.size > 0 {
			xs[i] = math.Log2(float64(r.size))
		} else {
			xs[i] = float64(i)
		}
		if i == 0 || xs[i] < xlo {
			xlo = xs[i]
		}
		if i == 0 || xs[i] > xhi {
			xhi = xs[i]
		}
	}
	if xhi == xlo {
		xlo, xhi = xlo-1, xhi+1
	}
	// y range.
	ylo, yhi := math.Inf(1), math.Inf(-1)
	for _, r := range c.rows {
		for _, v := range []float64{r.a, r.b} {
			if !math.IsNaN(v) && v > 0 {
				ylo, yhi = min(ylo, v), max(yhi, v)
			}
		}
	}
	if math.IsInf(ylo, 1) {
		ylo, yhi = 0.1, 1
	}
	logY := yhi/ylo > 20
	var ymap func(v float64) float64
	var yticks []float64
	if logY {
		lo, hi := math.Floor(math.Log10(ylo)), math.Ceil(math.Log10(yhi))
		if hi == lo {
			hi++
		}
		ymap = func(v float64) float64 {
			return plotB - (math.Log10(v)-lo)/(hi-lo)*(plotB-plotT)
		}
		for e := lo; e <= hi; e++ {
			yticks = append(yticks, math.Pow(10, e))
		}
	} else {
		step := niceStep(yhi / 5)
		top := math.Ceil(yhi/step) * step
		ymap = func(v float64) float64 { return plotB - v/top*(plotB-plotT) }
		for v := 0.0; v <= top+step/2; v += step {
			yticks = append(yticks, v)
		}
	}
	xmap := func(x float64) float64 { return plotL + 20 + (x-xlo)/(xhi-xlo)*(plotR-plotL-40) }

	fmt.Fprintf(w, `<?xml version="1.0" encoding="UTF-8"?>`+"\n")
	fmt.Fprintf(w, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="12">`+"\n", svgW, svgH, svgW, svgH)
	fmt.Fprintf(w, `<rect x="0" y="0" width="%d" height="%d" fill="white"/>`+"\n", svgW, svgH)
	fmt.Fprintf(w, `<text x="%d" y="28" text-anchor="middle" font-size="15">%s</text>`+"\n", (plotL+plotR)/2, esc(c.title))
	// grid and y ticks
	for _, v := range yticks {
		if logY && v <= 0 {
			continue
		}
		y := ymap(v)
		fmt.Fprintf(w, `<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="#dddddd"/>`+"\n", plotL, y, plotR, y)
		fmt.Fprintf(w, `<text x="%d" y="%.1f" text-anchor="end">%s</text>`+"\n", plotL-6, y+4, esc(formatTick(v)))
	}
	// x ticks
	for i, r := range c.rows {
		x := xmap(xs[i])
		label := r.key
		if c.bySize {
			label = formatSize(r.size)
		}
		fmt.Fprintf(w, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#333333"/>`+"\n", x, plotB, x, plotB+5)
		fmt.Fprintf(w, `<text x="%.1f" y="%d" text-anchor="end" transform="rotate(-45 %.1f %d)">%s</text>`+"\n", x, plotB+18, x, plotB+18, esc(label))
	}
	// axes
	fmt.Fprintf(w, `<path d="M%d %d V%d H%d" fill="none" stroke="#333333"/>`+"\n", plotL, plotT, plotB, plotR)
	xlabel := "Message size (bytes, log2 scale)"
	if !c.bySize {
		xlabel = "Operation"
	}
	fmt.Fprintf(w, `<text x="%d" y="%d" text-anchor="middle">%s</text>`+"\n", (plotL+plotR)/2, svgH-12, esc(xlabel))
	ylabel := metricLabel(c.metric)
	if logY {
		ylabel += ", log scale"
	}
	fmt.Fprintf(w, `<text x="22" y="%d" text-anchor="middle" transform="rotate(-90 22 %d)">%s</text>`+"\n", (plotT+plotB)/2, (plotT+plotB)/2, esc(ylabel))
	// the two lines
	for k := range 2 {
		var pts []string
		var marks bytes.Buffer
		for i, r := range c.rows {
			v := r.a
			if k == 1 {
				v = r.b
			}
			if math.IsNaN(v) || (logY && v <= 0) {
				continue
			}
			x, y := xmap(xs[i]), ymap(v)
			pts = append(pts, fmt.Sprintf("%.1f,%.1f", x, y))
			fmt.Fprintf(&marks, `<circle cx="%.1f" cy="%.1f" r="3" fill="%s"/>`+"\n", x, y, svgColors[k])
		}
		fmt.Fprintf(w, `<polyline fill="none" stroke="%s" stroke-width="2" points="%s"/>`+"\n", svgColors[k], strings.Join(pts, " "))
		w.Write(marks.Bytes())
	}
	// legend
	fmt.Fprintf(w, `<rect x="%d" y="%d" width="220" height="46" fill="white" stroke="#999999"/>`+"\n", legendX-10, legendY-16)
	for k := range 2 {
		y := legendY + 18*k
		fmt.Fprintf(w, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="%s" stroke-width="2"/>`+"\n", legendX, y-4, legendX+legendLineLn, y-4, svgColors[k])
		fmt.Fprintf(w, `<text x="%d" y="%d">%s</text>`+"\n", legendX+legendLineLn+8, y, esc(names[k]))
	}
	fmt.Fprintf(w, "</svg>\n")
}

// niceStep rounds a tick step up to 1, 2 or 5 times a power of ten.
func niceStep(v float64) float64 {
	if v <= 0 {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 2, 5, 10} {
		if m*p >= v {
			return m * p
		}
	}
	return 10 * p
}

// formatTick prints an axis value compactly.
func formatTick(v float64) string {
	return strconv.FormatFloat(v, 'g', 4, 64)
}

// formatSize prints a size in bytes as 1, 512, 4K, 1M.
func formatSize(n int) string {
	switch {
	case n >= 1<<30 && n%(1<<30) == 0:
		return fmt.Sprintf("%dG", n>>30)
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%dM", n>>20)
	case n >= 1<<10 && n%(1<<10) == 0:
		return fmt.Sprintf("%dK", n>>10)
	}
	return strconv.Itoa(n)
}
