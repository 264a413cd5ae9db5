package bench

import (
	"bytes"
	"encoding/json"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
)

// wellFormed parses an XML document to its end.
func wellFormed(t *testing.T, doc []byte) {
	t.Helper()
	d := xml.NewDecoder(bytes.NewReader(doc))
	root := ""
	for {
		tok, err := d.Token()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("not well-formed XML: %v\n%s", err, doc)
		}
		if se, ok := tok.(xml.StartElement); ok && root == "" {
			root = se.Name.Local
		}
	}
	if root != "svg" {
		t.Fatalf("root element %q, want svg", root)
	}
}

func TestChartSVG(t *testing.T) {
	charts := []Chart{
		{Title: `throughput <p=16> & "b"`, XLabel: "seconds", YLabel: "msg/s", Series: []Series{
			{Name: "a<b", Points: []Point{{1, 100}, {2, 25000}, {3, math.NaN()}}},
			{Name: "c&d", Points: []Point{{1, 5}}},
		}},
		{Title: "cdf", LogX: true, Series: []Series{{Name: "e2e", Points: CDFPoints([]float64{0.2, 0.5, 3, 40, 900}, 10)}}},
		{Title: "empty"},
		{Title: "flat", Series: []Series{{Name: "zero", Points: []Point{{0, 0}, {0, 0}}}}},
		{Title: "latency", LogY: true, Series: []Series{{Name: "p50", Points: []Point{{15, 2.5}, {30, 28000}, {45, 0}, {60, math.NaN()}}}}},
		{Title: "latency, none above 0", LogY: true, Series: []Series{{Name: "p50", Points: []Point{{15, 0}}}}},
	}
	for _, c := range charts {
		var b bytes.Buffer
		if err := c.WriteSVG(&b); err != nil {
			t.Fatal(err)
		}
		wellFormed(t, b.Bytes())
		if strings.Contains(b.String(), "NaN") || strings.Contains(b.String(), "Inf") {
			t.Errorf("chart %q has NaN or Inf coordinates:\n%s", c.Title, b.String())
		}
	}
}

func TestReportRoundTripAndSave(t *testing.T) {
	rep := &Report{
		Command: "sluice bench send --duration 1s", Started: time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC), PayloadBytes: 100,
		Env: Env{CPUs: 2, CPUModel: "x", MemoryGiB: 23.5, PGVersion: "PostgreSQL 18.3", Settings: map[string]string{"fsync": "on"}},
		Results: []Result{{
			Scenario: "send", Started: time.Date(2025, 1, 2, 3, 4, 6, 0, time.UTC), Elapsed: time.Second,
			Params: map[string]any{"duration_s": 1.0},
			Tables: []Table{{Title: "t", Columns: []string{"a", "b"}, Rows: [][]string{{"1", "2"}}}},
			Charts: []Chart{{File: "send-throughput.svg", Title: "x", Series: []Series{{Name: "s", Points: []Point{{1, 2}}}}}},
			Notes:  []string{"n"},
		}},
	}
	b, err := json.Marshal(rep)
	if err != nil {
		t.Fatal(err)
	}
	var back Report
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(rep, &back) {
		t.Fatalf("round trip changed the report:\n%+v\n%+v", rep, &back)
	}
	dir, err := rep.Save(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"results.json", "results.md", "send-throughput.svg"} {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			t.Error(err)
		}
	}
	md, _ := os.ReadFile(filepath.Join(dir, "results.md"))
	if !strings.Contains(string(md), "| a | b |") || !strings.Contains(string(md), "sluice bench send --duration 1s") {
		t.Errorf("results.md:\n%s", md)
	}
}

func TestSummarizeXmin(t *testing.T) {
	nan := math.NaN()
	ivs := []xminInterval{
		{until: 15 * time.Second, rate: 2900, p50: 4, p99: 20},
		{until: 30 * time.Second, rate: 2800, p50: 5, p99: 90},
		{until: 45 * time.Second, rate: 600, p50: 28000, p99: 40000},
		{until: 60 * time.Second, rate: 0, p50: nan, p99: nan},
		{until: 75 * time.Second, rate: 3400, p50: 9000, p99: 30000},
	}
	s := summarizeXmin(ivs)
	if s.first != 2900 || s.last != 3400 || s.low.until != 60*time.Second || s.highP50.until != 45*time.Second || s.highP99.until != 45*time.Second {
		t.Errorf("summary %+v: want first 2900, last 3400, lowest at 1m0s, highest p50 and p99 at 45s", s)
	}
	row := s.worstRow("sluice")
	want := []string{"sluice", "2900", "0.00", "1m0s", "0.00", "1.17", "4.00", "28000", "45s", "7000.00", "20.0", "40000", "45s", "2000.00"}
	if !reflect.DeepEqual(row, want) {
		t.Errorf("worst row %q, want %q", row, want)
	}
	p50, p99 := s.latencySeries()
	if len(p50) != 4 || len(p99) != 4 || p50[2].X != 45 || p50[2].Y != 28000 {
		t.Errorf("latency series %v %v: want 4 points each, NaN left out", p50, p99)
	}
	if row := summarizeXmin(nil).worstRow("none"); row[3] != "-" || row[4] != "-" || row[9] != "-" {
		t.Errorf("no interval: row %q, want dashes", row)
	}
}

// TestXminRunsPutTheControlAfterEachHeldRun checks the order and names of
// the xmin scenario's runs with and without --xmin-control.
func TestXminRunsPutTheControlAfterEachHeldRun(t *testing.T) {
	a, b := &sluiceSystem{}, &tableSystem{table: "skiplocked"}
	var got []string
	for _, run := range xminRuns([]system{a, b}, true) {
		got = append(got, fmt.Sprintf("%s/%v", run.name, run.hold))
	}
	want := []string{"sluice/true", "sluice (no xid held)/false", "SKIP LOCKED/true", "SKIP LOCKED (no xid held)/false"}
	if !slices.Equal(got, want) {
		t.Errorf("runs with control %q, want %q", got, want)
	}
	if runs := xminRuns([]system{a, b}, false); len(runs) != 2 || !runs[0].hold || !runs[1].hold {
		t.Errorf("runs without control %+v, want the two held runs", runs)
	}
}
