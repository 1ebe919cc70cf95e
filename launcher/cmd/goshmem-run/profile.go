package main

import (
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"html"
	"io"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"text/tabwriter"

	"github.com/goshmem/goshmem/shmem/profile"
)

// The files goshmem-run writes into the -profile directory after the job,
// from the PEs' communication summaries.
const (
	commTableFile  = "comm.txt"
	commMatrixFile = "comm-matrix.svg"
)

// envProfile is the PE environment variable of -profile.
const envProfile = "GOSHMEM_PROFILE"

// commProfile is the communication of a job, from its PEs' summaries.
type commProfile struct {
	npes    int
	have    []bool // the PEs whose summary was read
	bytes   [][]uint64
	ops     [][]uint64
	perCall []routineTotal // by bytes, then ops, then name
}

// routineTotal is what one routine moved over the whole job, and for a
// collective (or a barrier, an allocation, ...: routines whose calls the
// PEs count) its calls, over every PE.
type routineTotal struct {
	routine           string
	calls, ops, bytes uint64
}

// readCommProfile reads the summaries pe-N.comm.json of dir, for PEs 0 to
// np-1 (np 0: as many as the summaries say). It is an error when there is
// none; a missing or unreadable one leaves its PE out, and is returned in
// problems.
func readCommProfile(dir string, np int) (p *commProfile, problems []string, err error) {
	if np == 0 {
		// The job's size is in every summary.
		names, _ := filepath.Glob(filepath.Join(dir, "pe-*.comm.json"))
		for _, name := range names {
			if s, err := readSummaryFile(name); err == nil {
				np = s.NPEs
				break
			}
		}
	}
	found := 0
	totals := map[string]*routineTotal{}
	p = &commProfile{npes: np, have: make([]bool, np), bytes: square(np), ops: square(np)}
	for pe := range np {
		s, err := readSummary(dir, pe)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			problems = append(problems, fmt.Sprintf("PE %d wrote no summary (it did not reach its last Finalize, or ran on another host)", pe))
			continue
		case err != nil:
			problems = append(problems, err.Error())
			continue
		case s.PE != pe || s.NPEs != np:
			problems = append(problems, fmt.Sprintf("%s: the summary of PE %d of %d, in a job of %d PEs", profile.SummaryFile(pe), s.PE, s.NPEs, np))
			continue
		}
		found++
		p.have[pe] = true
		for _, r := range s.Routines {
			t := totals[r.Routine]
			if t == nil {
				t = &routineTotal{routine: r.Routine}
				totals[r.Routine] = t
			}
			t.calls += r.Calls
			for _, c := range r.Targets {
				if c.PE < 0 || c.PE >= np {
					problems = append(problems, fmt.Sprintf("%s: %s to PE %d, not a PE of the job", profile.SummaryFile(pe), r.Routine, c.PE))
					continue
				}
				p.bytes[pe][c.PE] += c.Bytes
				p.ops[pe][c.PE] += c.Ops
				t.ops += c.Ops
				t.bytes += c.Bytes
			}
		}
	}
	if found == 0 {
		return nil, problems, fmt.Errorf("no PE wrote a communication summary in %s (a PE writes it at its last Finalize)", dir)
	}
	for _, t := range totals {
		p.perCall = append(p.perCall, *t)
	}
	slices.SortFunc(p.perCall, func(a, b routineTotal) int {
		return cmp.Or(cmp.Compare(b.bytes, a.bytes), cmp.Compare(b.ops, a.ops), cmp.Compare(b.calls, a.calls), cmp.Compare(a.routine, b.routine))
	})
	return p, problems, nil
}

func readSummary(dir string, pe int) (*profile.Summary, error) {
	return readSummaryFile(filepath.Join(dir, profile.SummaryFile(pe)))
}

func readSummaryFile(name string) (*profile.Summary, error) {
	b, err := os.ReadFile(name)
	if err != nil {
		return nil, err
	}
	var s profile.Summary
	if err := json.Unmarshal(b, &s); err != nil {
		return nil, fmt.Errorf("%s: %w", filepath.Base(name), err)
	}
	return &s, nil
}

// profileFiles matches the files of a profile in its directory, which
// goshmem-run removes before a job so that none of an earlier job's is
// taken for this one's.
var profileFiles = regexp.MustCompile(`^(pe-[0-9]+\.(cpu\.pprof|comm\.json)|` + regexp.QuoteMeta(commTableFile) + `|` + regexp.QuoteMeta(commMatrixFile) + `)$`)

// prepareProfileDir creates dir, and removes the files of an earlier
// profile from it.
func prepareProfileDir(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, e := range entries {
		if e.Type().IsRegular() && profileFiles.MatchString(e.Name()) {
			if err := os.Remove(filepath.Join(dir, e.Name())); err != nil {
				return err
			}
		}
	}
	return nil
}

func square(n int) [][]uint64 {
	m := make([][]uint64, n)
	for i := range m {
		m[i] = make([]uint64, n)
	}
	return m
}

// writeTable writes the text summary: the routines over the whole job,
// then the matrix of bytes from each PE (row) to each PE (column), with
// the totals each PE sent and was the target of.
func (p *commProfile) writeTable(w io.Writer, problems []string) error {
	var b bytes.Buffer
	fmt.Fprintf(&b, "goshmem communication profile: %d PEs\n", p.npes)
	for _, pr := range problems {
		fmt.Fprintf(&b, "note: %s\n", pr)
	}
	fmt.Fprintf(&b, "\nRoutines, over every PE (calls: of collectives, barriers and allocations; bytes: sent by puts and atomics, read by gets, delivered by collectives):\n")
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "routine\tcalls\toperations\tbytes\t\n")
	for _, t := range p.perCall {
		calls := "-" // one-sided routines count their operations only
		if t.calls > 0 {
			calls = strconv.FormatUint(t.calls, 10)
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t\n", t.routine, calls, t.ops, t.bytes)
	}
	tw.Flush()
	fmt.Fprintf(&b, "\nBytes of the operations PE (row) initiated on PE (column):\n")
	tw = tabwriter.NewWriter(&b, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "PE\t")
	for j := range p.npes {
		fmt.Fprintf(tw, "%d\t", j)
	}
	fmt.Fprintf(tw, "total\t\n")
	col := make([]uint64, p.npes)
	for i := range p.npes {
		fmt.Fprintf(tw, "%d\t", i)
		var row uint64
		for j := range p.npes {
			if !p.have[i] {
				fmt.Fprintf(tw, "?\t")
				continue
			}
			fmt.Fprintf(tw, "%d\t", p.bytes[i][j])
			row += p.bytes[i][j]
			col[j] += p.bytes[i][j]
		}
		if p.have[i] {
			fmt.Fprintf(tw, "%d\t\n", row)
		} else {
			fmt.Fprintf(tw, "?\t\n")
		}
	}
	fmt.Fprintf(tw, "total\t")
	for j := range p.npes {
		fmt.Fprintf(tw, "%d\t", col[j])
	}
	fmt.Fprintf(tw, "\t\n")
	tw.Flush()
	_, err := w.Write(b.Bytes())
	return err
}

// writeSVG draws the matrix of bytes from each PE (row) to each PE
// (column) as a heatmap: a cell's color grows with the logarithm of its
// bytes, white for none, gray for a PE without a summary; each cell's
// tooltip gives its bytes and operations.
func (p *commProfile) writeSVG(w io.Writer) error {
	n := p.npes
	cell := min(48, max(4, 640/max(n, 1)))
	const left, top, right, bottom = 70, 70, 140, 40
	side := cell * n
	width, height := max(left+side+right, 480), top+max(side, 100)+bottom+20
	var maxBytes uint64
	for i := range n {
		for j := range n {
			maxBytes = max(maxBytes, p.bytes[i][j])
		}
	}
	step := (n + 31) / 32 // label every step-th PE
	var b bytes.Buffer
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="11">`+"\n",
		width, height, width, height)
	fmt.Fprintf(&b, `<rect width="%d" height="%d" fill="white"/>`+"\n", width, height)
	fmt.Fprintf(&b, `<text x="%d" y="18" font-size="14">Bytes from PE (row) to PE (column), %d PEs</text>`+"\n", left, n)
	fmt.Fprintf(&b, `<text x="%d" y="%d" text-anchor="middle">target PE</text>`+"\n", left+side/2, top-30)
	fmt.Fprintf(&b, `<text x="16" y="%d" text-anchor="middle" transform="rotate(-90 16 %d)">initiating PE</text>`+"\n", top+side/2, top+side/2)
	for i := 0; i < n; i += step {
		c := i*cell + cell/2
		fmt.Fprintf(&b, `<text x="%d" y="%d" text-anchor="middle">%d</text>`+"\n", left+c, top-8, i)
		fmt.Fprintf(&b, `<text x="%d" y="%d" text-anchor="end" dominant-baseline="middle">%d</text>`+"\n", left-6, top+c, i)
	}
	for i := range n {
		for j := range n {
			x, y := left+j*cell, top+i*cell
			fill, tip := "#d0d0d0", fmt.Sprintf("PE %d: no summary", i)
			if p.have[i] {
				fill = heat(p.bytes[i][j], maxBytes)
				tip = fmt.Sprintf("PE %d to PE %d: %d bytes, %d operations", i, j, p.bytes[i][j], p.ops[i][j])
			}
			fmt.Fprintf(&b, `<rect x="%d" y="%d" width="%d" height="%d" fill="%s"><title>%s</title></rect>`+"\n",
				x, y, cell, cell, fill, html.EscapeString(tip))
		}
	}
	fmt.Fprintf(&b, `<rect x="%d" y="%d" width="%d" height="%d" fill="none" stroke="#808080"/>`+"\n", left, top, side, side)
	// The legend: the scale from 1 byte to the largest cell.
	lx, lh := left+side+30, max(side, 100)
	const steps = 20
	for k := range steps {
		v := math.Pow(float64(max(maxBytes, 1)), float64(steps-1-k)/float64(steps-1))
		fmt.Fprintf(&b, `<rect x="%d" y="%d" width="16" height="%d" fill="%s"/>`+"\n", lx, top+k*lh/steps, lh/steps+1, heat(uint64(v), maxBytes))
	}
	fmt.Fprintf(&b, `<text x="%d" y="%d" dominant-baseline="middle">%s</text>`+"\n", lx+22, top+4, html.EscapeString(sizeString(maxBytes)))
	fmt.Fprintf(&b, `<text x="%d" y="%d" dominant-baseline="middle">1 B</text>`+"\n", lx+22, top+lh-4)
	fmt.Fprintf(&b, `<rect x="%d" y="%d" width="16" height="10" fill="white" stroke="#808080"/><text x="%d" y="%d" dominant-baseline="middle">none</text>`+"\n",
		lx, top+lh+10, lx+22, top+lh+15)
	fmt.Fprintf(&b, "</svg>\n")
	_, err := w.Write(b.Bytes())
	return err
}

// heat is the color of v bytes on a logarithmic scale up to maxV: from a
// pale yellow for one byte to a dark red for maxV; white for none.
func heat(v, maxV uint64) string {
	if v == 0 {
		return "#ffffff"
	}
	f := 1.0
	if maxV > 1 {
		f = math.Log(float64(v)) / math.Log(float64(maxV))
	}
	f = min(max(f, 0), 1)
	// pale yellow (255, 247, 188) to orange (254, 153, 41) to dark red
	// (153, 0, 13).
	from, mid, to := [3]float64{255, 247, 188}, [3]float64{254, 153, 41}, [3]float64{153, 0, 13}
	var c [3]float64
	for k := range c {
		if f < 0.5 {
			c[k] = from[k] + (mid[k]-from[k])*f*2
		} else {
			c[k] = mid[k] + (to[k]-mid[k])*(f-0.5)*2
		}
	}
	return fmt.Sprintf("#%02x%02x%02x", int(c[0]+0.5), int(c[1]+0.5), int(c[2]+0.5))
}

// sizeString formats a byte count with a binary unit: "512 B", "1.5 KiB".
func sizeString(n uint64) string {
	if n < 1024 {
		return strconv.FormatUint(n, 10) + " B"
	}
	v, units := float64(n), []string{"KiB", "MiB", "GiB", "TiB", "PiB"}
	u := -1
	for v >= 1024 && u < len(units)-1 {
		v /= 1024
		u++
	}
	return strconv.FormatFloat(v, 'f', 1, 64) + " " + units[u]
}

// writeProfile writes the table and the heatmap of the job's communication
// into dir, and says on stderr what the directory holds.
func writeProfile(dir string, np int, stderr io.Writer) {
	p, problems, err := readCommProfile(dir, np)
	if err != nil {
		fmt.Fprintf(stderr, "goshmem-run: -profile: %v\n", err)
		return
	}
	for _, f := range []struct {
		name  string
		write func(io.Writer) error
	}{
		{commTableFile, func(w io.Writer) error { return p.writeTable(w, problems) }},
		{commMatrixFile, p.writeSVG},
	} {
		var b bytes.Buffer
		err := f.write(&b)
		if err == nil {
			err = os.WriteFile(filepath.Join(dir, f.name), b.Bytes(), 0o644)
		}
		if err != nil {
			fmt.Fprintf(stderr, "goshmem-run: -profile: %v\n", err)
			return
		}
	}
	fmt.Fprintf(stderr, "goshmem-run: profile of %d PEs in %s: %s (communication per routine and PE to PE), %s (heatmap), pe-N.cpu.pprof (go tool pprof)\n",
		p.npes, dir, commTableFile, commMatrixFile)
	for _, pr := range problems {
		fmt.Fprintf(stderr, "goshmem-run: -profile: %s\n", pr)
	}
}
