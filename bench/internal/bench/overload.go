package bench

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"time"
)

// overloadConsumers is how many consumers the overloaded drains run, against
// the last --consumers value (default 8) of the uncontended one.
const overloadConsumers = 32

// overloadCondition is one way of loading the machine during a drain.
type overloadCondition struct {
	name      string
	consumers int
	hog       bool
}

// overload drains the preload with more consumers than cores, and with a CPU
// hog spinning on every core, for sluice and SKIP LOCKED: each system's
// msg/s next to its own uncontended drain, so that a collapse shows as a
// ratio well below 1 (DESIGN.md: a lock holder that is descheduled must not
// stop the others).
func (r *runner) overload(ctx context.Context) (*Result, error) {
	systems, err := r.systems("sluice", "skiplocked")
	if err != nil {
		return nil, err
	}
	defer r.cleanupAll(ctx, systems...)
	base, d, n := last(r.o.Consumers, 8), r.dur(10*time.Second), r.o.Preload
	conditions := []overloadCondition{
		{fmt.Sprintf("%d consumers", base), base, false},
		{fmt.Sprintf("%d consumers", overloadConsumers), overloadConsumers, false},
		{fmt.Sprintf("%d consumers + CPU hog", base), base, true},
		{fmt.Sprintf("%d consumers + CPU hog", overloadConsumers), overloadConsumers, true},
	}
	cols := []string{"workload"}
	for _, s := range systems {
		cols = append(cols, s.name()+" msg/s", s.name()+" / own uncontended")
	}
	if len(systems) > 1 {
		cols = append(cols, systems[0].name()+" / "+systems[1].name())
	}
	t := Table{Title: fmt.Sprintf("overload: drain of %d preloaded messages, msg/s and ratio to the same system with %d consumers on an idle machine", n, base),
		Columns: cols}
	var series []Series
	for _, b := range list(r.o.Batches, []int{1, 100}) {
		own := make([]float64, len(systems))
		for _, c := range conditions {
			row := []string{fmt.Sprintf("%s x batch %d", c.name, b)}
			var rates []float64
			for i, s := range systems {
				stop := func() {}
				if c.hog {
					stop = cpuHog(runtime.NumCPU())
				}
				res, err := r.drainCell(ctx, s, c.consumers, b, n, d)
				stop()
				if err != nil {
					return nil, err
				}
				rate := float64(res.count) / res.elapsed.Seconds()
				if own[i] == 0 {
					own[i] = rate
				}
				rates = append(rates, rate)
				row = append(row, fmtRate(rate), fmtRatio(rate, own[i]))
				series = append(series, Series{Name: fmt.Sprintf("%s %s b=%d", s.name(), c.name, b), Points: res.rates})
			}
			if len(rates) > 1 {
				row = append(row, fmtRatio(rates[0], rates[1]))
			}
			t.Rows = append(t.Rows, row)
		}
	}
	return &Result{
		Params: map[string]any{"consumers": []int{base, overloadConsumers}, "batches": list(r.o.Batches, []int{1, 100}),
			"preload": n, "max_duration_s": d.Seconds(), "hog_goroutines": runtime.NumCPU()},
		Tables: []Table{t},
		Charts: []Chart{{File: "overload-throughput.svg", Title: "overload: drain throughput over time", XLabel: "seconds", YLabel: "messages/s", Series: series}},
		Notes: []string{
			fmt.Sprintf("The CPU hog is %d goroutines of the benchmark process spinning without pause for the whole cell (one per CPU), so that the database's backends and the consumers compete for the cores.", runtime.NumCPU()),
			"Each system's first row (its uncontended drain) is the base of its ratios; the last column compares the systems in the same conditions.",
		},
	}, nil
}

// cpuHog keeps n goroutines busy until the returned function is called.
func cpuHog(n int) (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			x := 0
			for {
				select {
				case <-done:
					return
				default:
				}
				for i := range 100000 {
					x += i
				}
			}
		}()
	}
	return func() {
		close(done)
		wg.Wait()
	}
}
