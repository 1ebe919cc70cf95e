package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"regexp"
	"strconv"
	"strings"
)

// Column names, as the OSU programs print them in their table headers.
const (
	colSize       = "Size"
	colOperation  = "Operation"
	colLatency    = "Latency (us)"
	colAvgLatency = "Avg Latency(us)"
	colMinLatency = "Min Latency(us)"
	colMaxLatency = "Max Latency(us)"
	colIterations = "Iterations"
	colBandwidth  = "Bandwidth (MB/s)"
	colRate       = "Messages/s"
	colMOps       = "Million ops/s"
)

// Metrics: what a report's main column measures.
const (
	metricLatency   = "latency"   // microseconds, lower is better
	metricBandwidth = "bandwidth" // MB/s (10^6 bytes per second), higher is better
	metricRate      = "rate"      // messages per second, higher is better
)

// Report is the result of one benchmark run: the document -json prints and
// compare reads (compare also builds one from an OSU text table).
type Report struct {
	// Test is the sub-command ("put", "atomics", ...); Title the OSU
	// title ("OSU OpenSHMEM Put Test").
	Test  string `json:"test"`
	Title string `json:"title"`
	// Impl names the OpenSHMEM implementation measured.
	Impl string `json:"impl,omitempty"`
	// Metric is the quantity of the main column: latency, bandwidth or rate.
	Metric string `json:"metric"`
	// Columns are the table's columns, in the OSU program's words.
	Columns []string `json:"columns"`
	// NPEs is the number of PEs of the job.
	NPEs int `json:"npes,omitempty"`
	// Options are the settings of the run.
	Options *Options `json:"options,omitempty"`
	// Transport describes how the PEs reached each other.
	Transport *Transport `json:"transport,omitempty"`
	// Rows are the table's rows.
	Rows []Row `json:"rows"`
}

// Transport describes the communication path of a run.
type Transport struct {
	// UCXTLS is the value of UCX_TLS in the PEs' environment; empty means
	// the default (every transport: shared memory between PEs of a node).
	UCXTLS string `json:"ucx_tls"`
	// SharedPEs is the size of TeamShared on PE 0: the PEs whose heaps it
	// loads and stores directly (1 when everything goes through the network).
	SharedPEs int `json:"shared_pes"`
	// Host, GoVersion and GOMAXPROCS describe where PE 0 ran.
	Host       string `json:"host,omitempty"`
	GoVersion  string `json:"go_version,omitempty"`
	GOMAXPROCS int    `json:"gomaxprocs,omitempty"`
}

// Row is one line of a table. A field that does not apply is zero (and left
// out of the JSON).
type Row struct {
	// Size is the message size in bytes (0 for tables without sizes).
	Size int `json:"size,omitempty"`
	// Op names the operation of a row of the atomics table.
	Op string `json:"op,omitempty"`
	// Latency is in microseconds; for collectives and the barrier it is the
	// average over the PEs, with MinLatency and MaxLatency beside it.
	Latency    float64 `json:"latency_us,omitempty"`
	MinLatency float64 `json:"min_latency_us,omitempty"`
	MaxLatency float64 `json:"max_latency_us,omitempty"`
	// Bandwidth is in MB/s (10^6 bytes per second).
	Bandwidth float64 `json:"bandwidth_mbs,omitempty"`
	// Rate is in messages per second (put_mr), MOps in millions of
	// operations per second (atomics), both summed over the sending PEs.
	Rate float64 `json:"messages_per_s,omitempty"`
	MOps float64 `json:"million_ops_per_s,omitempty"`
	// Iterations is the number of timed iterations.
	Iterations int `json:"iterations,omitempty"`
}

// value returns the row's figure for a metric.
func (r *Row) value(metric string) float64 {
	switch metric {
	case metricBandwidth:
		return r.Bandwidth
	case metricRate:
		if r.Rate == 0 && r.MOps != 0 {
			return r.MOps * 1e6
		}
		return r.Rate
	}
	return r.Latency
}

// key identifies a row within its table: its operation or its size.
func (r *Row) key() string {
	if r.Op != "" {
		return r.Op
	}
	return strconv.Itoa(r.Size)
}

// column returns the row's value for a column name, and whether it is an
// integer column.
func (r *Row) column(c string) (float64, bool) {
	switch c {
	case colSize:
		return float64(r.Size), true
	case colIterations:
		return float64(r.Iterations), true
	case colLatency, colAvgLatency:
		return r.Latency, false
	case colMinLatency:
		return r.MinLatency, false
	case colMaxLatency:
		return r.MaxLatency, false
	case colBandwidth:
		return r.Bandwidth, false
	case colRate:
		return r.Rate, false
	case colMOps:
		return r.MOps, false
	}
	return 0, false
}

// setColumn stores the value of column c into the row.
func (r *Row) setColumn(c string, v float64) {
	switch c {
	case colSize:
		r.Size = int(v)
	case colIterations:
		r.Iterations = int(v)
	case colLatency, colAvgLatency:
		r.Latency = v
	case colMinLatency:
		r.MinLatency = v
	case colMaxLatency:
		r.MaxLatency = v
	case colBandwidth:
		r.Bandwidth = v
	case colRate:
		r.Rate = v
	case colMOps:
		r.MOps = v
	}
}

// Field widths of the OSU tables.
const (
	fieldWidth = 20 // FIELD_WIDTH
	sizeWidth  = 10 // "# Size" and the size column
	opWidth    = 20 // "# Operation" and the operation column
	iterWidth  = 12 // "Iterations"
	avgWidth   = 17 // the value of a table without sizes ("# Avg Latency(us)")
)

// writeText prints the report as the OSU program prints its table: the
// title line, the header and one line per row, with prec decimals.
func writeText(w io.Writer, r *Report, prec int) error {
	var b bytes.Buffer
	fmt.Fprintf(&b, "# %s\n", r.Title)
	for i, c := range r.Columns {
		switch {
		case i == 0 && c == colSize:
			fmt.Fprintf(&b, "%-*s", sizeWidth, "# Size")
		case i == 0 && c == colOperation:
			fmt.Fprintf(&b, "%-*s", opWidth, "# Operation")
		case i == 0:
			fmt.Fprintf(&b, "# %s", c)
		case c == colIterations:
			fmt.Fprintf(&b, "%*s", iterWidth, c)
		default:
			fmt.Fprintf(&b, "%*s", fieldWidth, c)
		}
	}
	b.WriteByte('\n')
	for _, row := range r.Rows {
		for i, c := range r.Columns {
			v, isInt := row.column(c)
			switch {
			case i == 0 && c == colSize:
				fmt.Fprintf(&b, "%-*d", sizeWidth, row.Size)
			case i == 0 && c == colOperation:
				fmt.Fprintf(&b, "%-*s", opWidth, row.Op)
			case i == 0:
				fmt.Fprintf(&b, "%*.*f", avgWidth, prec, v)
			case c == colIterations:
				fmt.Fprintf(&b, "%*d", iterWidth, int(v))
			case isInt:
				fmt.Fprintf(&b, "%*d", fieldWidth, int(v))
			default:
				fmt.Fprintf(&b, "%*.*f", fieldWidth, prec, v)
			}
		}
		b.WriteByte('\n')
	}
	_, err := w.Write(b.Bytes())
	return err
}

// writeJSON prints the report as one indented JSON document.
func writeJSON(w io.Writer, r *Report) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

// metricOf returns the metric of a table with these columns.
func metricOf(cols []string) string {
	for _, c := range cols {
		switch c {
		case colBandwidth:
			return metricBandwidth
		case colRate:
			return metricRate
		}
	}
	return metricLatency
}

var (
	peTag       = regexp.MustCompile(`^\[pe \d+\] `)
	columnSplit = regexp.MustCompile(`\s{2,}`)
	nameValue   = regexp.MustCompile(`^([A-Za-z_][A-Za-z0-9_]*)\s+([-+0-9.eE]+)$`)
	titleTests  = []struct{ word, test string }{
		{"Put_nbi", "put_nb"}, {"Get_nbi", "get_nb"}, {"Put Message Rate", "put_mr"},
		{"Put Bandwidth", "put_bw"}, {"Get Bandwidth", "get_bw"}, {"Atomic", "atomics"},
		{"Barrier", "barrier"}, {"Broadcast", "broadcast"}, {"FCollect", "fcollect"},
		{"Collect", "collect"}, {"Reduce", "reduce"}, {"Alltoall", "alltoall"},
		{"Put", "put"}, {"Get", "get"},
	}
)

// refTest is the Test of the "name microseconds" lines of oshm_ref.
const refTest = "oshm_ref"

// testOfTitle guesses the sub-command of an OSU title.
func testOfTitle(title string) string {
	for _, t := range titleTests {
		if strings.Contains(title, " "+t.word+" ") {
			return t.test
		}
	}
	return ""
}

// parseText reads an OSU table (the output of an osu_oshm_* program or of
// this program without -json): an optional "# OSU ..." title, a header
// line ("# Size  Latency (us)", "# Operation  Million ops/s  Latency (us)",
// "# Avg Latency(us) ...") and data lines up to the next header. Lines of
// other output (launcher messages, crash reports) are skipped, as is a
// "[pe N] " prefix. It also reads the "name microseconds" lines of
// shared/bench/oshm_ref.c and benchmarks/oshmref, as an operation-keyed
// latency table.
func parseText(rd io.Reader) (*Report, error) {
	r := &Report{}
	var simple []Row
	sc := bufio.NewScanner(rd)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	inTable := false
	for sc.Scan() {
		line := strings.TrimSpace(peTag.ReplaceAllString(sc.Text(), ""))
		if line == "" {
			continue
		}
		if strings.HasPrefix(line, "#") {
			body := strings.TrimSpace(strings.TrimPrefix(line, "#"))
			if strings.HasPrefix(body, "OSU ") {
				if inTable {
					break // a second table: keep the first
				}
				r.Title = body
				continue
			}
			cols := columnSplit.Split(body, -1)
			if !isHeader(cols) {
				continue
			}
			if inTable {
				break
			}
			r.Columns, inTable = cols, true
			continue
		}
		if !inTable {
			if m := nameValue.FindStringSubmatch(line); m != nil {
				if v, err := strconv.ParseFloat(m[2], 64); err == nil {
					simple = append(simple, Row{Op: m[1], Latency: v})
				}
			}
			continue
		}
		if row, ok := parseRow(r.Columns, strings.Fields(line)); ok {
			r.Rows = append(r.Rows, row)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("reading table: %w", err)
	}
	if !inTable {
		if len(simple) == 0 {
			return nil, errors.New("no OSU table (no \"# Size ...\" or \"# Operation ...\" header) and no \"name value\" lines")
		}
		r.Title, r.Test, r.Metric = "name microseconds", refTest, metricLatency
		r.Columns = []string{colOperation, colLatency}
		r.Rows = simple
		return r, nil
	}
	if len(r.Rows) == 0 {
		return nil, fmt.Errorf("the table %q has no rows", strings.Join(r.Columns, " | "))
	}
	r.Metric = metricOf(r.Columns)
	r.Test = testOfTitle(r.Title)
	return r, nil
}

// isHeader reports whether the columns of a "#" line are a table header.
func isHeader(cols []string) bool {
	if len(cols) < 1 {
		return false
	}
	switch cols[0] {
	case colSize, colOperation:
		return len(cols) >= 2
	case colAvgLatency:
		return true
	}
	return false
}

// parseRow parses the fields of a data line of a table with columns cols.
func parseRow(cols, f []string) (Row, bool) {
	var row Row
	if len(f) != len(cols) {
		return row, false
	}
	for i, c := range cols {
		if c == colOperation {
			row.Op = f[i]
			continue
		}
		v, err := strconv.ParseFloat(f[i], 64)
		if err != nil {
			return row, false
		}
		row.setColumn(c, v)
	}
	return row, true
}

// readReport reads a report from a file: a JSON document of -json, or an
// OSU text table.
func readReport(path string) (*Report, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read report: %w", err)
	}
	if t := bytes.TrimSpace(data); len(t) > 0 && t[0] == '{' {
		var r Report
		if err := json.Unmarshal(t, &r); err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		if len(r.Rows) == 0 {
			return nil, fmt.Errorf("%s: the report has no rows", path)
		}
		if r.Metric == "" {
			r.Metric = metricOf(r.Columns)
		}
		return &r, nil
	}
	r, err := parseText(bytes.NewReader(data))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return r, nil
}
