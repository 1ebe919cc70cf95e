package e2e_test

import (
	"bytes"
	"encoding/json"
	"encoding/xml"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/goshmem/goshmem/shmem"
)

// TestProfile runs 3 PEs of the hello mode (one AtomicInc on PE 0 each)
// with goshmem-run -profile: each PE writes its CPU profile and its
// communication summary, and goshmem-run the job's table and heatmap, in
// which the atomics are in column 0.
func TestProfile(t *testing.T) {
	const np = 3
	dir := filepath.Join(t.TempDir(), "prof")
	r := run(t, nil, "-np", fmt.Sprint(np), "-profile", dir, peProgram, "hello")
	if r.code != 0 {
		t.Fatalf("goshmem-run -profile: %v", r)
	}
	if want := "goshmem-run: profile of 3 PEs in " + dir + ": comm.txt"; !strings.Contains(r.stderr, want) {
		t.Errorf("stderr lacks %q:\n%s", want, r.stderr)
	}
	for pe := range np {
		b, err := os.ReadFile(filepath.Join(dir, shmem.CPUProfileFile(pe)))
		if err != nil || !bytes.HasPrefix(b, []byte{0x1f, 0x8b}) { // pprof's are gzipped
			t.Errorf("PE %d: CPU profile: %v, %d bytes, not gzipped", pe, err, len(b))
		}
		b, err = os.ReadFile(filepath.Join(dir, shmem.CommSummaryFile(pe)))
		if err != nil {
			t.Fatal(err)
		}
		var s shmem.CommSummary
		if err := json.Unmarshal(b, &s); err != nil {
			t.Fatalf("%s: %v", shmem.CommSummaryFile(pe), err)
		}
		i := slices.IndexFunc(s.Routines, func(r shmem.RoutineComm) bool { return r.Routine == "AtomicInc" })
		if s.PE != pe || s.NPEs != np || i < 0 || !slices.Equal(s.Routines[i].Targets, []shmem.PEComm{{PE: 0, Ops: 1, Bytes: 8}}) {
			t.Errorf("PE %d: summary %s; want PE %d of %d, one AtomicInc of 8 bytes on PE 0", pe, b, pe, np)
		}
	}
	table, err := os.ReadFile(filepath.Join(dir, "comm.txt"))
	if err != nil {
		t.Fatal(err)
	}
	// The atomics' row over the job, and the matrix's header.
	rows := regexp.MustCompile(`(?m)^ *AtomicInc +- +3 +24 *$`)
	header := regexp.MustCompile(`(?m)^ *PE +0 +1 +2 +total *$`)
	if !rows.Match(table) || !header.Match(table) {
		t.Errorf("comm.txt lacks the AtomicInc total or the matrix:\n%s", table)
	}
	svg, err := os.ReadFile(filepath.Join(dir, "comm-matrix.svg"))
	if err != nil {
		t.Fatal(err)
	}
	cells := svgTitles(t, svg)
	for pe := range np {
		if !slices.ContainsFunc(cells, func(c string) bool { return strings.HasPrefix(c, fmt.Sprintf("PE %d to PE 0: ", pe)) }) {
			t.Errorf("the heatmap has no cell from PE %d to PE 0; cells %q", pe, cells)
		}
	}
	if len(cells) != np*np {
		t.Errorf("the heatmap has %d cells, want %d", len(cells), np*np)
	}
	noLeftovers(t)
}

// svgTitles parses an SVG document, failing t unless it is well-formed,
// and returns the text of its title elements (the heatmap's tooltips).
func svgTitles(t *testing.T, svg []byte) []string {
	t.Helper()
	var titles []string
	d := xml.NewDecoder(bytes.NewReader(svg))
	inTitle := false
	for {
		tok, err := d.Token()
		if err == io.EOF {
			return titles
		}
		if err != nil {
			t.Fatalf("comm-matrix.svg is not well-formed XML: %v", err)
		}
		switch tok := tok.(type) {
		case xml.StartElement:
			inTitle = tok.Name.Local == "title"
		case xml.CharData:
			if inTitle {
				titles = append(titles, string(tok))
			}
		case xml.EndElement:
			inTitle = false
		}
	}
}
