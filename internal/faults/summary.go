package faults

import (
	"fmt"
	"strings"
	"sync"
	"time"
)

// SummaryRow is one line of the summary table.
type SummaryRow struct {
	Scenario     string
	Faults       string
	Committed    int
	Lost         int
	DupInLease   int
	Order        int // per-key order violations
	Redeliveries int
	Other        int // other violations (failed send delivered, delivery after ack, ...)
	Duration     time.Duration
}

var (
	summaryMu   sync.Mutex
	summaryRows []SummaryRow
)

func recordSummary(r SummaryRow) {
	summaryMu.Lock()
	defer summaryMu.Unlock()
	summaryRows = append(summaryRows, r)
}

// Summary returns the rows recorded by the scenarios run so far.
func Summary() []SummaryRow {
	summaryMu.Lock()
	defer summaryMu.Unlock()
	return append([]SummaryRow(nil), summaryRows...)
}

// FormatSummary renders rows as a Markdown table.
func FormatSummary(rows []SummaryRow) string {
	var b strings.Builder
	b.WriteString("| scenario | faults injected | committed | losses | dup. within a valid lease | order violations | redeliveries | other violations | time |\n")
	b.WriteString("|---|---|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, r := range rows {
		fmt.Fprintf(&b, "| %s | %s | %d | %d | %d | %d | %d | %d | %s |\n",
			r.Scenario, r.Faults, r.Committed, r.Lost, r.DupInLease, r.Order, r.Redeliveries, r.Other, r.Duration)
	}
	return b.String()
}
