package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/jackc/pgx/v5/pgxpool"
)

// A report states the options its sluice queues actually had, read back
// from sluice.list_queues() once each queue was made (the engine's
// defaults filled in), not the options the code meant to set: a scenario
// that fell back to another queue setup, or an option the engine reads
// differently, shows in the report instead of behind a footnote.

// QueueRecord is the options of some of a scenario's sluice queues, as
// sluice.list_queues() gave them after the queues were made.
type QueueRecord struct {
	// System is the system whose queues they are (sluice, pgmq-compat).
	System string `json:"system"`
	// Queues are the queues that had these options, in the order made.
	Queues []string `json:"queues"`
	// Options are the queue's options, defaults filled in.
	Options map[string]any `json:"options"`
}

// queueLog collects the QueueRecords of the scenario that runs; safe for
// concurrent use.
type queueLog struct {
	mu      sync.Mutex
	records []QueueRecord
	keys    []string // the canonical options of each record
}

// add records that queue of system had options (canonical JSON text).
func (l *queueLog) add(system, queue, options string) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	for i, rec := range l.records {
		if rec.System == system && l.keys[i] == options {
			if !slices.Contains(rec.Queues, queue) {
				l.records[i].Queues = append(l.records[i].Queues, queue)
			}
			return nil
		}
	}
	var m map[string]any
	dec := json.NewDecoder(strings.NewReader(options))
	dec.UseNumber() // 1048576, not 1.048576e+06
	if err := dec.Decode(&m); err != nil {
		return fmt.Errorf("reading the options of queue %s: %w", queue, err)
	}
	l.records = append(l.records, QueueRecord{System: system, Queues: []string{queue}, Options: m})
	l.keys = append(l.keys, options)
	return nil
}

// snapshot returns a copy of the records.
func (l *queueLog) snapshot() []QueueRecord {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.records)
}

// take returns the records and starts afresh.
func (l *queueLog) take() []QueueRecord {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := l.records
	l.records, l.keys = nil, nil
	return out
}

// recordQueues reads the options of queues back from sluice.list_queues()
// on db and records them as system's.
func (r *runner) recordQueues(ctx context.Context, db *pgxpool.Pool, system string, queues ...string) error {
	rows, err := db.Query(ctx, `SELECT queue, options::text FROM sluice.list_queues() WHERE queue = ANY($1)`, queues)
	if err != nil {
		return fmt.Errorf("%s: reading back the options of queues %s: %w", system, strings.Join(queues, ", "), err)
	}
	defer rows.Close()
	found := map[string]string{}
	for rows.Next() {
		var q, opts string
		if err := rows.Scan(&q, &opts); err != nil {
			return fmt.Errorf("%s: reading back queue options: %w", system, err)
		}
		found[q] = opts
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("%s: reading back queue options: %w", system, err)
	}
	for _, q := range queues {
		opts, ok := found[q]
		if !ok {
			return fmt.Errorf("%s: queue %s is not in sluice.list_queues() after it was made", system, q)
		}
		if err := r.queues.add(system, q, opts); err != nil {
			return err
		}
	}
	return nil
}

// sluiceQueued is implemented by a system whose benchmark queue is a sluice
// queue (sluice, pgmq-compat): its name, in the system's database.
type sluiceQueued interface {
	sluiceQueue() string
}

func (*sluiceSystem) sluiceQueue() string     { return benchQueue }
func (*pgmqCompatSystem) sluiceQueue() string { return benchQueue }

// setupSystem makes s's benchmark queue afresh and records its options as
// the engine has them.
func (r *runner) setupSystem(ctx context.Context, s system) error {
	pool := r.poolOf(s)
	if err := s.setup(ctx, pool); err != nil {
		return err
	}
	if q, ok := s.(sluiceQueued); ok {
		return r.recordQueues(ctx, pool, s.name(), q.sluiceQueue())
	}
	return nil
}

// queueOptionsNote states the options of recs for a report.
func queueOptionsNote(recs []QueueRecord) string {
	var parts []string
	for _, rec := range recs {
		parts = append(parts, fmt.Sprintf("%s, %s: %s", rec.System, queueNames(rec.Queues), fmtOptions(rec.Options)))
	}
	return "Queue options, read back from sluice.list_queues() once each queue was made (the engine's defaults filled in): " + strings.Join(parts, "; ") + "."
}

// queueNames names queues, the first and the last of more than three.
func queueNames(qs []string) string {
	switch {
	case len(qs) == 1:
		return "queue " + qs[0]
	case len(qs) <= 3:
		return "queues " + strings.Join(qs, ", ")
	default:
		return fmt.Sprintf("%d queues %s … %s", len(qs), qs[0], qs[len(qs)-1])
	}
}

// fmtOptions renders queue options as "name value" pairs, by name.
func fmtOptions(m map[string]any) string {
	names := make([]string, 0, len(m))
	for k := range m {
		names = append(names, k)
	}
	slices.Sort(names)
	parts := make([]string, len(names))
	for i, k := range names {
		parts[i] = fmt.Sprintf("%s %v", k, m[k])
	}
	return strings.Join(parts, ", ")
}

// reclaimOptions reports whether options keep nothing after completion
// (retention 0) and rotate every reclaimRotation, as the xmin scenario's
// queues must, so that their size shows what reclaim leaves.
func reclaimOptions(m map[string]any) bool {
	return m["retention"] == "0 seconds" && m["rotate_interval"] == reclaimRotation
}
