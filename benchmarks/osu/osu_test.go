package main

import (
	"bytes"
	"encoding/xml"
	"errors"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

func TestParseOptions(t *testing.T) {
	for _, tt := range []struct {
		name string
		args []string
		want func(o *Options) // adjusts pt2ptDefaults into the expected options
	}{
		{"defaults", nil, func(*Options) {}},
		{"range", []string{"-min", "8", "-max", "4096"}, func(o *Options) { o.Min, o.Max = 8, 4096 }},
		{"iters for all sizes", []string{"-iters", "7", "-warmup", "2"},
			func(o *Options) { o.Iters, o.ItersLarge, o.Warmup, o.WarmupLarge = 7, 7, 2, 2 }},
		{"iters-large kept", []string{"-iters", "7", "-iters-large", "3"},
			func(o *Options) { o.Iters, o.ItersLarge = 7, 3 }},
		{"positional global", []string{"-max", "64", "global"}, func(o *Options) { o.Max, o.Memory = 64, "global" }},
		{"flags after global", []string{"global", "-max", "64"}, func(o *Options) { o.Max, o.Memory = 64, "global" }},
		{"-global", []string{"-global"}, func(o *Options) { o.Memory = "global" }},
		{"-mem heap", []string{"-mem", "heap"}, func(*Options) {}},
		{"full json", []string{"-f", "-json", "-precision", "4"}, func(o *Options) { o.Full, o.JSON, o.Precision = true, true, 4 }},
		{"no settling", []string{"-settle", "0"}, func(o *Options) { o.Settle = 0 }},
		{"settle longer", []string{"-settle", "1s"}, func(o *Options) { o.Settle = time.Second }},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parseOptions("put", tt.args, pt2ptDefaults, io.Discard, io.Discard)
			if err != nil {
				t.Fatalf("parseOptions(%q): %v", tt.args, err)
			}
			want := pt2ptDefaults
			tt.want(&want)
			if diff := cmp.Diff(&want, got); diff != "" {
				t.Errorf("parseOptions(%q) (-want +got):\n%s", tt.args, diff)
			}
		})
	}
}

func TestParseOptionsErrors(t *testing.T) {
	for _, tt := range []struct {
		args []string
		msg  string
	}{
		{[]string{"-min", "64", "-max", "8"}, "bad size range"},
		{[]string{"-min", "0"}, "-min 0"},
		{[]string{"-max", "2147483648"}, "-max 2147483648"},
		{[]string{"-iters", "0"}, "-iters 0"},
		{[]string{"-warmup", "-1"}, "-warmup -1"},
		{[]string{"-window", "0"}, "-window 0"},
		{[]string{"-mem", "stack"}, `-mem "stack"`},
		{[]string{"-heap", "global"}, "give the memory kind once"},
		{[]string{"everywhere"}, `unexpected argument "everywhere"`},
		{[]string{"-nosuchflag"}, "not defined"},
		{[]string{"-max", "lots"}, "invalid value"},
	} {
		_, err := parseOptions("put", tt.args, pt2ptDefaults, io.Discard, io.Discard)
		if err == nil || !errors.Is(err, errUsage) || !strings.Contains(err.Error(), tt.msg) {
			t.Errorf("parseOptions(%q) = %v, want a usage error containing %q", tt.args, err, tt.msg)
		}
	}
}

func TestSizesAndLoops(t *testing.T) {
	o := pt2ptDefaults
	o.Min, o.Max = 3, 100
	if got, want := o.sizes(), []int{3, 6, 12, 24, 48, 96}; !cmp.Equal(got, want) {
		t.Errorf("sizes of 3..100 = %v, want %v", got, want)
	}
	if i, w := o.loops(8192); i != 10000 || w != 1000 {
		t.Errorf("loops(8192) = %d, %d; want the small-message 10000, 1000", i, w)
	}
	if i, w := o.loops(8193); i != 100 || w != 10 {
		t.Errorf("loops(8193) = %d, %d; want the large-message 100, 10", i, w)
	}
}

// TestRunUsageErrors runs the program's entry point in this process with
// command lines that fail before Init.
func TestRunUsageErrors(t *testing.T) {
	for _, tt := range []struct {
		args []string
		code int
		msg  string
	}{
		{nil, 2, "usage: goshmem-run"},
		{[]string{"pingpong"}, 2, `unknown test "pingpong"`},
		{[]string{"put", "-min", "4096", "-max", "1024"}, 2, "bad size range: -min 4096 is larger than -max 1024"},
		{[]string{"atomics", "-iters", "-3"}, 2, "-iters -3"},
		{[]string{"compare", "only-one.json"}, 2, "want two results"},
		{[]string{"compare", "testdata/put_a.json", "testdata/missing.json"}, 1, "missing.json"},
		{[]string{"compare", "-metric", "speed", "testdata/put_a.json", "testdata/put_b.json"}, 2, `-metric "speed"`},
	} {
		var out, errb bytes.Buffer
		code := run(tt.args, &out, &errb)
		if code != tt.code || !strings.Contains(errb.String(), tt.msg) {
			t.Errorf("run(%q) = %d, stderr %q; want %d and %q", tt.args, code, errb.String(), tt.code, tt.msg)
		}
	}
}

// sampleReports are reports of every table layout, with values that print
// exactly at 2 decimals.
func sampleReports() []*Report {
	return []*Report{
		{Test: "put", Title: "OSU OpenSHMEM Put Test", Metric: metricLatency, Columns: []string{colSize, colLatency},
			Rows: []Row{{Size: 1, Latency: 0.25}, {Size: 2, Latency: 1.5}, {Size: 1048576, Latency: 34.75}}},
		{Test: "put_bw", Title: "OSU OpenSHMEM Put Bandwidth Test", Metric: metricBandwidth, Columns: []string{colSize, colBandwidth},
			Rows: []Row{{Size: 8, Bandwidth: 512.5}, {Size: 16, Bandwidth: 1024.25}}},
		{Test: "put_mr", Title: "OSU OpenSHMEM Put Message Rate Test", Metric: metricRate, Columns: []string{colSize, colRate},
			Rows: []Row{{Size: 1, Rate: 83000000}, {Size: 2, Rate: 81000000.5}}},
		{Test: "atomics", Title: "OSU OpenSHMEM Atomic Operation Rate Test", Metric: metricLatency,
			Columns: []string{colOperation, colMOps, colLatency},
			Rows:    []Row{{Op: "shmem_int64_fadd", MOps: 10.5, Latency: 0.1}, {Op: "shmem_int64_set", MOps: 80.25, Latency: 0.01}}},
		{Test: "barrier", Title: "OSU OpenSHMEM Barrier Latency Test", Metric: metricLatency,
			Columns: []string{colAvgLatency, colMinLatency, colMaxLatency, colIterations},
			Rows:    []Row{{Latency: 0.5, MinLatency: 0.25, MaxLatency: 0.75, Iterations: 1000}}},
		{Test: "broadcast", Title: "OSU OpenSHMEM Broadcast Latency Test", Metric: metricLatency, Columns: []string{colSize, colAvgLatency},
			Rows: []Row{{Size: 4, Latency: 0.5}, {Size: 8, Latency: 0.75}}},
		{Test: "fcollect", Title: "OSU OpenSHMEM FCollect Latency Test", Metric: metricLatency,
			Columns: []string{colSize, colAvgLatency, colMinLatency, colMaxLatency, colIterations},
			Rows:    []Row{{Size: 4, Latency: 0.5, MinLatency: 0.25, MaxLatency: 1, Iterations: 100}}},
	}
}

// TestTextRoundTrip prints every layout as a table and parses it back.
func TestTextRoundTrip(t *testing.T) {
	for _, want := range sampleReports() {
		var b bytes.Buffer
		if err := writeText(&b, want, 2); err != nil {
			t.Fatal(err)
		}
		got, err := parseText(strings.NewReader("[pe 0] noise before the table\n" + b.String()))
		if err != nil {
			t.Errorf("%s: parse: %v; table:\n%s", want.Test, err, b.String())
			continue
		}
		if diff := cmp.Diff(want, got, cmpopts.EquateApprox(0, 0.005)); diff != "" {
			t.Errorf("%s: table parsed back differs (-want +got):\n%s\ntable:\n%s", want.Test, diff, b.String())
		}
	}
}

func TestTextHeaderFormat(t *testing.T) {
	var b bytes.Buffer
	if err := writeText(&b, sampleReports()[0], 2); err != nil {
		t.Fatal(err)
	}
	want := "# OSU OpenSHMEM Put Test\n" +
		"# Size            Latency (us)\n" +
		"1                         0.25\n" +
		"2                         1.50\n" +
		"1048576                  34.75\n"
	if b.String() != want {
		t.Errorf("table:\n%s\nwant (OSU's %%-10s%%20s layout):\n%s", b.String(), want)
	}
}

func TestParseTextErrors(t *testing.T) {
	for _, in := range []string{
		"",
		"hello world and more\n",
		"# OSU OpenSHMEM Put Test\n# Size  Latency (us)\n",
	} {
		if r, err := parseText(strings.NewReader(in)); err == nil {
			t.Errorf("parseText(%q) = %+v, want an error", in, r)
		}
	}
}

// compareFiles runs compare on two files and returns its table and the
// SVG it wrote.
func compareFiles(t *testing.T, a, b string, extra ...string) (table string, svg []byte) {
	t.Helper()
	svgPath := filepath.Join(t.TempDir(), "plot.svg")
	args := append(append([]string{"compare", "-svg", svgPath}, extra...), a, b)
	var out, errb bytes.Buffer
	if code := run(args, &out, &errb); code != 0 {
		t.Fatalf("run(%q) = %d; stderr:\n%s", args, code, errb.String())
	}
	svg, err := os.ReadFile(svgPath)
	if err != nil {
		t.Fatal(err)
	}
	return out.String(), svg
}

// tableRows parses the data lines of a compare table into key -> fields.
func tableRows(t *testing.T, table string) map[string][]string {
	t.Helper()
	rows := map[string][]string{}
	for _, line := range strings.Split(strings.TrimSpace(table), "\n") {
		if strings.HasPrefix(line, "#") {
			continue
		}
		f := strings.Fields(line)
		if len(f) != 4 {
			t.Fatalf("compare row %q: want 4 fields (key, A, B, A/B)", line)
		}
		rows[f[0]] = f[1:]
	}
	return rows
}

// checkSVG checks that svg is well-formed XML with an svg root, exactly
// two polylines of points, a legend naming both results and axis labels.
func checkSVG(t *testing.T, svg []byte, names ...string) {
	t.Helper()
	dec := xml.NewDecoder(bytes.NewReader(svg))
	var root string
	polylines, points := 0, []int{}
	var texts []string
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("SVG is not well-formed XML: %v\n%s", err, svg)
		}
		switch el := tok.(type) {
		case xml.StartElement:
			if root == "" {
				root = el.Name.Local
			}
			if el.Name.Local == "polyline" {
				polylines++
				for _, a := range el.Attr {
					if a.Name.Local == "points" {
						points = append(points, len(strings.Fields(a.Value)))
					}
				}
			}
		case xml.CharData:
			if s := strings.TrimSpace(string(el)); s != "" {
				texts = append(texts, s)
			}
		}
	}
	if root != "svg" {
		t.Errorf("SVG root element is %q, want svg", root)
	}
	if polylines != 2 {
		t.Errorf("SVG has %d polylines, want 2", polylines)
	}
	for i, n := range points {
		if n < 2 {
			t.Errorf("polyline %d has %d points, want at least 2", i, n)
		}
	}
	all := strings.Join(texts, "\n")
	for _, want := range append(names, "Latency (us)") {
		if !strings.Contains(all, want) {
			t.Errorf("SVG texts lack %q; texts:\n%s", want, all)
		}
	}
}

func TestCompareJSON(t *testing.T) {
	table, svg := compareFiles(t, "testdata/put_a.json", "testdata/put_b.json")
	rows := tableRows(t, table)
	want := map[string][]string{
		"1":    {"0.020", "0.010", "2.00"},
		"2":    {"0.020", "0.040", "0.50"},
		"4":    {"0.030", "0.030", "1.00"},
		"8":    {"0.040", "0.080", "0.50"},
		"16":   {"0.040", "-", "-"},
		"32":   {"-", "0.050", "-"},
		"1024": {"0.500", "0.250", "2.00"},
	}
	if diff := cmp.Diff(want, rows); diff != "" {
		t.Errorf("compare rows (-want +got):\n%s\ntable:\n%s", diff, table)
	}
	if !strings.Contains(table, "goshmem") || !strings.Contains(table, "OSHMEM") {
		t.Errorf("compare table does not name both results:\n%s", table)
	}
	checkSVG(t, svg, "goshmem", "OSHMEM", "Message size")
}

func TestCompareOSUText(t *testing.T) {
	table, svg := compareFiles(t, "testdata/put_a.json", "testdata/osu_put.txt", "-a", "Go", "-b", "C")
	rows := tableRows(t, table)
	if len(rows) != 11 { // 1..1024 of the text table, which has every size of the JSON one
		t.Errorf("compare has %d rows, want the 11 sizes of the OSU table; table:\n%s", len(rows), table)
	}
	if got := rows["8"]; !cmp.Equal(got, []string{"0.040", "0.030", "1.33"}) {
		t.Errorf("row 8 = %q, want 0.040 0.030 1.33", got)
	}
	if got := rows["1024"]; !cmp.Equal(got, []string{"0.500", "0.200", "2.50"}) {
		t.Errorf("row 1024 = %q, want 0.500 0.200 2.50", got)
	}
	checkSVG(t, svg, "Go", "C")
}

func TestCompareAtomicsByOperation(t *testing.T) {
	// Names of this program (shmem_int64_*) against OSU's: the last word
	// matches when it is unambiguous, here for the reference lines.
	a := &Report{Title: "atomics", Metric: metricLatency, Rows: []Row{
		{Op: "shmem_int64_fadd", Latency: 0.2}, {Op: "shmem_int64_add", Latency: 0.06}, {Op: "shmem_int64_set", Latency: 0.01}}}
	b, err := readReport("testdata/oshm_ref.txt")
	if err != nil {
		t.Fatal(err)
	}
	c := compareReports(a, b, metricLatency)
	got := map[string]float64{}
	for _, r := range c.rows {
		got[r.key] = r.ratio()
	}
	for key, want := range map[string]float64{"shmem_int64_fadd": 0.2 / 0.021, "shmem_int64_add": 0.06 / 0.018} {
		if math.Abs(got[key]-want) > 1e-9 {
			t.Errorf("ratio of %s = %v, want %v (rows %+v)", key, got[key], want, c.rows)
		}
	}
	if r := got["shmem_int64_set"]; !math.IsNaN(r) {
		t.Errorf("ratio of shmem_int64_set = %v, want none (no set in the reference)", r)
	}
	if _, ok := got["put8"]; !ok {
		t.Errorf("the reference's put8 row is missing from the comparison: %+v", c.rows)
	}
	// OSU's atomics table: int and longlong rows share a last word, so
	// they are kept apart rather than guessed.
	osu, err := readReport("testdata/osu_atomics.txt")
	if err != nil {
		t.Fatal(err)
	}
	if len(osu.Rows) != 8 || osu.Rows[1].Op != "shmem_longlong_fadd" || osu.Rows[1].MOps != 9.98 || osu.Rows[1].Latency != 0.10 {
		t.Errorf("OSU atomics table parsed as %+v", osu.Rows)
	}
	var out bytes.Buffer
	if err := writeComparison(&out, compareReports(osu, a, metricLatency), [2]string{"C", "Go"}, 2); err != nil {
		t.Fatal(err)
	}
	if rows := tableRows(t, out.String()); len(rows) != 11 {
		t.Errorf("want the 8 OSU rows and 3 Go rows apart, got %d:\n%s", len(rows), out.String())
	}
	var svg bytes.Buffer
	writeSVG(&svg, compareReports(osu, a, metricLatency), [2]string{"C", "Go"})
	if err := xml.Unmarshal(svg.Bytes(), new(struct{})); err != nil {
		t.Errorf("operation SVG is not well-formed: %v", err)
	}
}

func TestFormatSize(t *testing.T) {
	for n, want := range map[int]string{1: "1", 512: "512", 1536: "1536", 4096: "4K", 1 << 20: "1M", 3 << 30: "3G"} {
		if got := formatSize(n); got != want {
			t.Errorf("formatSize(%d) = %q, want %q", n, got, want)
		}
	}
	if got := niceStep(0.7); got != 1 {
		t.Errorf("niceStep(0.7) = %v, want 1", got)
	}
	if got := niceStep(23); got != 50 {
		t.Errorf("niceStep(23) = %v, want 50", got)
	}
}

func TestMedianReport(t *testing.T) {
	run := func(lat ...float64) *Report {
		r := &Report{Title: "put", Metric: metricLatency}
		for i, v := range lat {
			if v > 0 {
				r.Rows = append(r.Rows, Row{Size: 1 << i, Latency: v, Bandwidth: 10 * v})
			}
		}
		return r
	}
	for _, tt := range []struct {
		name string
		runs []*Report
		want []Row
	}{
		{"one run as it is", []*Report{run(1, 2)}, []Row{{Size: 1, Latency: 1, Bandwidth: 10}, {Size: 2, Latency: 2, Bandwidth: 20}}},
		{"odd count, outlier ignored", []*Report{run(1, 9), run(50, 8), run(2, 7)},
			[]Row{{Size: 1, Latency: 2, Bandwidth: 20}, {Size: 2, Latency: 8, Bandwidth: 80}}},
		{"even count, middle two", []*Report{run(1, 2), run(3, 4)}, []Row{{Size: 1, Latency: 2, Bandwidth: 20}, {Size: 2, Latency: 3, Bandwidth: 30}}},
		{"row missing in a run", []*Report{run(1, 4), run(3), run(5, 6)}, []Row{{Size: 1, Latency: 3, Bandwidth: 30}, {Size: 2, Latency: 5, Bandwidth: 50}}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if diff := cmp.Diff(tt.want, medianReport(tt.runs).Rows); diff != "" {
				t.Errorf("median rows (-want +got):\n%s", diff)
			}
		})
	}
}

func TestCompareMedianOfRuns(t *testing.T) {
	// put_a.json twice and put_b.json once: the median of each row is
	// put_a's.
	table, _ := compareFiles(t, "testdata/put_a.json,testdata/put_b.json,testdata/put_a.json", "testdata/put_b.json")
	rows := tableRows(t, table)
	if got := rows["2"]; !cmp.Equal(got, []string{"0.020", "0.040", "0.50"}) {
		t.Errorf("row 2 = %q, want the median 0.020 against 0.040\n%s", got, table)
	}
}

// TestCompareRefusesDifferentTests: osu compare compares results of one
// test only, and says which tests it was given; -help is on stdout.
func TestCompareRefusesDifferentTests(t *testing.T) {
	dir := t.TempDir()
	write := func(name, text string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	getText := write("osu_get.txt", "# OSU OpenSHMEM Get Test v5.8\n# Size  Latency (us)\n1  0.03\n8  0.04\n")
	bwText := write("osu_put_bw.txt", "# OSU OpenSHMEM Put Bandwidth Test v5.8\n# Size  Bandwidth (MB/s)\n1  10.0\n8  80.0\n")
	untitled := write("untitled.txt", "# Size  Latency (us)\n1  0.03\n8  0.04\n")
	for _, tt := range []struct {
		name, a, b string
		code       int
		stderr     string // the start of the error, or "" for none
	}{
		{"put and get", "testdata/put_a.json", getText, 1,
			"osu compare: testdata/put_a.json is a result of the put test (OSU OpenSHMEM Put Test), " + getText + " of the get test (OSU OpenSHMEM Get Test v5.8): compare results of one test\n"},
		{"latency and bandwidth of put", "testdata/osu_put.txt", bwText, 1,
			"osu compare: testdata/osu_put.txt is a result of the put test (OSU OpenSHMEM Put Test v5.8), " + bwText + " of the put_bw test"},
		{"runs of different tests", "testdata/put_a.json," + getText, "testdata/put_b.json", 1,
			"osu compare: testdata/put_a.json is a result of the put test"},
		{"untitled table of another metric", untitled, bwText, 1,
			"osu compare: " + untitled + " measures latency, " + bwText + " measures bandwidth: compare results of one test\n"},
		{"one test", "testdata/put_a.json", "testdata/osu_put.txt", 0, ""},
		{"untitled table of the same metric", "testdata/put_a.json", untitled, 0, ""},
		{"a reference of operations", "testdata/osu_atomics.txt", "testdata/oshm_ref.txt", 0, ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var out, errb bytes.Buffer
			code := run([]string{"compare", tt.a, tt.b}, &out, &errb)
			if code != tt.code || !strings.HasPrefix(errb.String(), tt.stderr) || (tt.stderr == "") != (errb.Len() == 0) {
				t.Errorf("osu compare %s %s = %d, stderr %q; want %d, stderr starting %q", tt.a, tt.b, code, errb.String(), tt.code, tt.stderr)
			}
			if (code == 0) != (out.Len() > 0) {
				t.Errorf("osu compare = %d with stdout %q", code, out.String())
			}
		})
	}
}

// TestHelpOnStdout: -help prints the usage on stdout with status 0, for
// osu and each sub-command; a bad flag prints it on stderr with status 2.
func TestHelpOnStdout(t *testing.T) {
	for _, tt := range []struct {
		args  []string
		code  int
		usage string
		onOut bool
	}{
		{[]string{"-help"}, 0, "usage: goshmem-run -np N osu TEST", true},
		{[]string{"put", "-help"}, 0, "usage: osu put ", true},
		{[]string{"compare", "--help"}, 0, "usage: osu compare ", true},
		{[]string{"put", "-bogus"}, 2, "usage: osu put ", false},
		{[]string{"compare", "-bogus"}, 2, "usage: osu compare ", false},
	} {
		var out, errb bytes.Buffer
		code := run(tt.args, &out, &errb)
		where, other := &errb, &out
		if tt.onOut {
			where, other = &out, &errb
		}
		if code != tt.code || !strings.Contains(where.String(), tt.usage) || strings.Contains(other.String(), "usage:") {
			t.Errorf("osu %q = %d, stdout %q, stderr %q; want %d and the usage on stdout=%v", tt.args, code, out.String(), errb.String(), tt.code, tt.onOut)
		}
	}
}
