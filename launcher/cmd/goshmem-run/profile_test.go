package main

import (
	"bytes"
	"encoding/json"
	"encoding/xml"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/goshmem/goshmem/shmem/profile"
)

// writeSummaries writes the summaries into dir as the PEs do.
func writeSummaries(t *testing.T, dir string, sums ...profile.Summary) {
	t.Helper()
	for _, s := range sums {
		b, err := json.Marshal(s)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, profile.SummaryFile(s.PE)), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func TestCommProfile(t *testing.T) {
	dir := t.TempDir()
	writeSummaries(t, dir,
		profile.Summary{PE: 0, NPEs: 3, Routines: []profile.RoutineComm{
			{Routine: "Put", Targets: []profile.PEComm{{PE: 1, Ops: 2, Bytes: 1000}, {PE: 2, Ops: 1, Bytes: 8}}},
			{Routine: "AtomicFetchAdd", Targets: []profile.PEComm{{PE: 0, Ops: 5, Bytes: 40}}},
			{Routine: "BarrierAll", Calls: 2},
		}},
		profile.Summary{PE: 1, NPEs: 3, Routines: []profile.RoutineComm{
			{Routine: "Get", Targets: []profile.PEComm{{PE: 0, Ops: 4, Bytes: 4096}}},
			{Routine: "BarrierAll", Calls: 3, Targets: []profile.PEComm{}},         // calls, no data
			{Routine: "Put", Targets: []profile.PEComm{{PE: 9, Ops: 1, Bytes: 1}}}, // not a PE: noted, left out
		}})
	// PE 2 wrote none.
	for _, np := range []int{3, 0} { // 0: the size comes from the summaries
		p, problems, err := readCommProfile(dir, np)
		if err != nil {
			t.Fatal(err)
		}
		if p.npes != 3 || !p.have[0] || !p.have[1] || p.have[2] {
			t.Fatalf("np %d: %d PEs, summaries %v; want 3, PEs 0 and 1", np, p.npes, p.have)
		}
		if p.bytes[0][1] != 1000 || p.ops[0][1] != 2 || p.bytes[1][0] != 4096 || p.bytes[0][0] != 40 || p.bytes[0][2] != 8 {
			t.Errorf("bytes %v, ops %v", p.bytes, p.ops)
		}
		want := []routineTotal{{"Get", 0, 4, 4096}, {"Put", 0, 3, 1008}, {"AtomicFetchAdd", 0, 5, 40}, {"BarrierAll", 5, 0, 0}}
		if len(p.perCall) != len(want) {
			t.Fatalf("routines %+v, want %+v", p.perCall, want)
		}
		for i := range want {
			if p.perCall[i] != want[i] {
				t.Errorf("routine %d: %+v, want %+v", i, p.perCall[i], want[i])
			}
		}
		joined := strings.Join(problems, "\n")
		for _, w := range []string{"PE 2 wrote no summary", "Put to PE 9, not a PE of the job"} {
			if !strings.Contains(joined, w) {
				t.Errorf("problems %q lack %q", problems, w)
			}
		}

		var table bytes.Buffer
		if err := p.writeTable(&table, problems); err != nil {
			t.Fatal(err)
		}
		for _, w := range []string{"goshmem communication profile: 3 PEs\n", "note: PE 2 wrote no summary"} {
			if !strings.Contains(table.String(), w) {
				t.Errorf("table lacks %q:\n%s", w, table.String())
			}
		}
		// The rows, as their words: the routines, then the matrix.
		for _, w := range []string{"routine calls operations bytes", "Get - 4 4096", "Put - 3 1008", "BarrierAll 5 0 0", "PE 0 1 2 total", "0 40 1000 8 1048", "1 4096 0 0 4096", "2 ? ? ? ?", "total 4136 1000 8"} {
			if !hasRow(table.String(), w) {
				t.Errorf("table lacks the row %q:\n%s", w, table.String())
			}
		}

		var svg bytes.Buffer
		if err := p.writeSVG(&svg); err != nil {
			t.Fatal(err)
		}
		checkXML(t, svg.Bytes())
		for _, w := range []string{"PE 0 to PE 1: 1000 bytes, 2 operations", "PE 2: no summary", "4.0 KiB", `fill="#ffffff"`} {
			if !strings.Contains(svg.String(), w) {
				t.Errorf("SVG lacks %q", w)
			}
		}
	}
}

// hasRow reports whether a line of table has the words of row.
func hasRow(table, row string) bool {
	want := strings.Fields(row)
	for _, line := range strings.Split(table, "\n") {
		if slices.Equal(strings.Fields(line), want) {
			return true
		}
	}
	return false
}

// checkXML fails t unless b is well-formed XML.
func checkXML(t *testing.T, b []byte) {
	t.Helper()
	d := xml.NewDecoder(bytes.NewReader(b))
	for {
		_, err := d.Token()
		if err == io.EOF {
			return
		}
		if err != nil {
			t.Fatalf("not well-formed XML: %v", err)
		}
	}
}

func TestCommProfileNone(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, profile.SummaryFile(0)), []byte("{not json"), 0o644)
	for _, np := range []int{2, 0} {
		if _, _, err := readCommProfile(dir, np); err == nil || !strings.Contains(err.Error(), "no PE wrote a communication summary") {
			t.Errorf("np %d: error %v, want that no PE wrote a summary", np, err)
		}
	}
	_, problems, _ := readCommProfile(dir, 2)
	if len(problems) == 0 || !strings.Contains(problems[0], profile.SummaryFile(0)) {
		t.Errorf("problems %q do not name the malformed summary", problems)
	}
}

func TestHeat(t *testing.T) {
	for _, tt := range []struct {
		v, max uint64
		want   string
	}{
		{0, 100, "#ffffff"},
		{1, 100, "#fff7bc"},
		{100, 100, "#99000d"},
		{10, 100, "#fe9929"},
		{5, 5, "#99000d"},
		{1, 1, "#99000d"},
	} {
		if got := heat(tt.v, tt.max); got != tt.want {
			t.Errorf("heat(%d, %d) = %s, want %s", tt.v, tt.max, got, tt.want)
		}
	}
}

func TestPrepareProfileDir(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "prof")
	if err := prepareProfileDir(dir); err != nil {
		t.Fatal(err)
	}
	stale := []string{"pe-7.comm.json", "pe-12.cpu.pprof", commTableFile, commMatrixFile}
	kept := []string{"notes.txt", "pe-x.comm.json", "pe-1.comm.json.bak"}
	for _, f := range append(append([]string{}, stale...), kept...) {
		os.WriteFile(filepath.Join(dir, f), nil, 0o644)
	}
	if err := prepareProfileDir(dir); err != nil {
		t.Fatal(err)
	}
	for _, f := range stale {
		if _, err := os.Stat(filepath.Join(dir, f)); err == nil {
			t.Errorf("%s of an earlier profile is still there", f)
		}
	}
	for _, f := range kept {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			t.Errorf("%s, not a profile file, was removed: %v", f, err)
		}
	}
}
