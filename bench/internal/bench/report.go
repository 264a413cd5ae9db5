package bench

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// Env describes where a run happened.
type Env struct {
	CPUs      int               `json:"cpus"`
	CPUModel  string            `json:"cpu_model"`
	MemoryGiB float64           `json:"memory_gib"`
	GoVersion string            `json:"go_version"`
	Server    string            `json:"server"`
	PGVersion string            `json:"pg_version"`
	Settings  map[string]string `json:"settings"`
}

// pgSettings are the server settings a report states.
var pgSettings = []string{"synchronous_commit", "fsync", "shared_buffers", "wal_level", "max_connections", "full_page_writes"}

// probeEnv reads the hardware from /proc and the server's version and
// settings.
func probeEnv(ctx context.Context, pool *pgxpool.Pool, server string) (Env, error) {
	e := Env{CPUs: runtime.NumCPU(), GoVersion: runtime.Version(), Server: server, Settings: map[string]string{}}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
				e.CPUModel = strings.TrimSpace(v)
				break
			}
		}
	}
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if f := strings.Fields(line); len(f) >= 2 && f[0] == "MemTotal:" {
				kb, _ := strconv.ParseFloat(f[1], 64)
				e.MemoryGiB = float64(int(kb/1024/1024*10+0.5)) / 10
			}
		}
	}
	if err := pool.QueryRow(ctx, "SELECT version()").Scan(&e.PGVersion); err != nil {
		return e, fmt.Errorf("reading the server version: %w", err)
	}
	for _, s := range pgSettings {
		var v string
		if err := pool.QueryRow(ctx, "SELECT current_setting($1)", s).Scan(&v); err != nil {
			return e, fmt.Errorf("reading setting %s: %w", s, err)
		}
		e.Settings[s] = v
	}
	return e, nil
}

// Table is a result table.
type Table struct {
	Title   string     `json:"title"`
	Columns []string   `json:"columns"`
	Rows    [][]string `json:"rows"`
}

// Markdown writes t as a Markdown table.
func (t *Table) Markdown(w io.Writer) {
	if t.Title != "" {
		fmt.Fprintf(w, "**%s**\n\n", t.Title)
	}
	fmt.Fprintf(w, "| %s |\n", strings.Join(t.Columns, " | "))
	seps := make([]string, len(t.Columns))
	for i := range seps {
		seps[i] = "---"
		if i > 0 {
			seps[i] = "--:"
		}
	}
	fmt.Fprintf(w, "|%s|\n", strings.Join(seps, "|"))
	for _, r := range t.Rows {
		fmt.Fprintf(w, "| %s |\n", strings.Join(r, " | "))
	}
	fmt.Fprintln(w)
}

// Result is what one scenario measured.
type Result struct {
	Scenario string        `json:"scenario"`
	Started  time.Time     `json:"started"`
	Elapsed  time.Duration `json:"elapsed_ns"`
	Params   any           `json:"params"`
	Tables   []Table       `json:"tables"`
	Charts   []Chart       `json:"charts"`
	Notes    []string      `json:"notes,omitempty"`
	// Queues are the options of the scenario's sluice queues, read back
	// from sluice.list_queues() once they were made.
	Queues []QueueRecord `json:"queues,omitempty"`
}

// Report is a whole run: results.json holds it.
type Report struct {
	Command      string    `json:"command"`
	Started      time.Time `json:"started"`
	Env          Env       `json:"env"`
	PayloadBytes int       `json:"payload_bytes"`
	LeaseSeconds int       `json:"lease_seconds"`
	Lanes        int       `json:"lanes,omitempty"` // --lanes (0: the engine's default)
	Slots        int       `json:"slots,omitempty"` // --slots (0: the engine's default)
	Results      []Result  `json:"results"`
}

// header writes the Markdown header of a report.
func (r *Report) header(w io.Writer) {
	e := r.Env
	fmt.Fprintf(w, "# sluice benchmark results, %s\n\n", r.Started.UTC().Format("2006-01-02 15:04 UTC"))
	fmt.Fprintf(w, "- command: `%s`\n", r.Command)
	fmt.Fprintf(w, "- hardware: %d CPUs (%s), %.1f GiB memory\n", e.CPUs, e.CPUModel, e.MemoryGiB)
	fmt.Fprintf(w, "- server: %s (%s)\n", e.PGVersion, e.Server)
	var s []string
	for _, k := range pgSettings {
		s = append(s, fmt.Sprintf("%s=%s", k, e.Settings[k]))
	}
	fmt.Fprintf(w, "- settings: %s\n", strings.Join(s, ", "))
	fmt.Fprintf(w, "- payload: ~%d-byte JSON body per message; client: %s on the same machine\n", r.PayloadBytes, e.GoVersion)
	if r.LeaseSeconds > 0 {
		fmt.Fprintf(w, "- lease: %d s (sluice's queue lease, PGMQ's visibility timeout)\n", r.LeaseSeconds)
	}
	if r.Lanes > 0 {
		fmt.Fprintf(w, "- lanes: %d (sluice's queues; the engine's default is 8)\n", r.Lanes)
	}
	if r.Slots > 0 {
		fmt.Fprintf(w, "- slots: %d (sluice's queues; the engine's default is 2)\n", r.Slots)
	}
	fmt.Fprintln(w)
}

// WriteMarkdown writes the whole report as Markdown, charts linked.
func (r *Report) WriteMarkdown(w io.Writer) {
	r.header(w)
	for _, res := range r.Results {
		fmt.Fprintf(w, "## %s\n\n", res.Scenario)
		for _, t := range res.Tables {
			t.Markdown(w)
		}
		for _, n := range res.Notes {
			fmt.Fprintf(w, "- %s\n", n)
		}
		if len(res.Notes) > 0 {
			fmt.Fprintln(w)
		}
		for _, c := range res.Charts {
			fmt.Fprintf(w, "![%s](%s)\n", c.Title, c.File)
		}
		fmt.Fprintln(w)
	}
}

// Save writes results.json, results.md and the charts into a new directory
// under parent named after the start time, and returns its path.
func (r *Report) Save(parent string) (string, error) {
	dir := filepath.Join(parent, r.Started.UTC().Format("20060102-150405"))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("creating the results directory: %w", err)
	}
	write := func(name string, fn func(w io.Writer) error) error {
		f, err := os.Create(filepath.Join(dir, name))
		if err != nil {
			return fmt.Errorf("writing results: %w", err)
		}
		bw := bufio.NewWriter(f)
		err = fn(bw)
		if err == nil {
			err = bw.Flush()
		}
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return fmt.Errorf("writing %s: %w", name, err)
		}
		return nil
	}
	err := write("results.json", func(w io.Writer) error {
		enc := json.NewEncoder(w)
		enc.SetIndent("", " ")
		return enc.Encode(r)
	})
	if err != nil {
		return dir, err
	}
	if err := write("results.md", func(w io.Writer) error { r.WriteMarkdown(w); return nil }); err != nil {
		return dir, err
	}
	for _, res := range r.Results {
		for _, c := range res.Charts {
			if err := write(c.File, c.WriteSVG); err != nil {
				return dir, err
			}
		}
	}
	return dir, nil
}

// fmtRate formats messages per second.
func fmtRate(v float64) string {
	switch {
	case v >= 100:
		return fmt.Sprintf("%.0f", v)
	case v >= 10:
		return fmt.Sprintf("%.1f", v)
	default:
		return fmt.Sprintf("%.2f", v)
	}
}

// fmtMS formats milliseconds.
func fmtMS(v float64) string {
	switch {
	case v != v: // NaN
		return "-"
	case v >= 1000:
		return fmt.Sprintf("%.0f", v)
	case v >= 10:
		return fmt.Sprintf("%.1f", v)
	default:
		return fmt.Sprintf("%.2f", v)
	}
}

// fmtRatio formats a ratio a/b.
func fmtRatio(a, b float64) string {
	if !(b > 0) || math.IsNaN(a) {
		return "-"
	}
	return fmt.Sprintf("%.2f", a/b)
}
