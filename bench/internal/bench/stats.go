package bench

import (
	"math"
	"slices"
	"sync"
)

// Percentile returns the p-th quantile (0 <= p <= 1) of sorted values by the
// nearest-rank method: the smallest value with at least p of the values at
// or below it. It returns NaN for no values.
func Percentile(sorted []float64, p float64) float64 {
	n := len(sorted)
	if n == 0 {
		return math.NaN()
	}
	if p <= 0 {
		return sorted[0]
	}
	rank := int(math.Ceil(p * float64(n)))
	if rank > n {
		rank = n
	}
	return sorted[rank-1]
}

// Median returns the median of values (which it does not modify), NaN for
// none.
func Median(values []float64) float64 {
	s := slices.Clone(values)
	slices.Sort(s)
	n := len(s)
	switch {
	case n == 0:
		return math.NaN()
	case n%2 == 1:
		return s[n/2]
	default:
		return (s[n/2-1] + s[n/2]) / 2
	}
}

// Latency summarizes a latency sample, in milliseconds.
type Latency struct {
	Count int     `json:"count"`
	P50   float64 `json:"p50_ms"`
	P95   float64 `json:"p95_ms"`
	P99   float64 `json:"p99_ms"`
	Max   float64 `json:"max_ms"`
}

// Summarize returns the percentiles of sorted latencies in milliseconds.
func Summarize(sorted []float64) Latency {
	if len(sorted) == 0 {
		return Latency{}
	}
	return Latency{
		Count: len(sorted),
		P50:   Percentile(sorted, 0.50),
		P95:   Percentile(sorted, 0.95),
		P99:   Percentile(sorted, 0.99),
		Max:   sorted[len(sorted)-1],
	}
}

// CDFPoints returns at most n+1 points (value, fraction) of the empirical
// distribution of sorted values: enough to draw it without keeping every
// sample.
func CDFPoints(sorted []float64, n int) []Point {
	if len(sorted) == 0 || n < 1 {
		return nil
	}
	pts := make([]Point, 0, n+1)
	for i := 0; i <= n; i++ {
		q := float64(i) / float64(n)
		pts = append(pts, Point{X: Percentile(sorted, q), Y: q})
	}
	return pts
}

// recorder collects latency samples (milliseconds) from many goroutines.
type recorder struct {
	mu      sync.Mutex
	samples []float64
	warm    int // the samples before it came in while connections warmed up (markWarm), -1 before
}

// newRecorder returns an empty recorder whose warm-up is not marked.
func newRecorder() *recorder { return &recorder{warm: -1} }

// markWarm notes that the samples so far came in while the connections
// were new: their first calls on a queue compile and plan its functions.
func (r *recorder) markWarm() {
	r.mu.Lock()
	r.warm = len(r.samples)
	r.mu.Unlock()
}

// sortedWarm returns a sorted copy of the samples after markWarm's, and
// false when markWarm was not called (a run shorter than the warm-up).
func (r *recorder) sortedWarm() ([]float64, bool) {
	r.mu.Lock()
	from := r.warm
	r.mu.Unlock()
	if from < 0 {
		return nil, false
	}
	s, _ := r.window(from)
	return s, true
}

func (r *recorder) add(ms ...float64) {
	r.mu.Lock()
	r.samples = append(r.samples, ms...)
	r.mu.Unlock()
}

// sorted returns a sorted copy of every sample.
func (r *recorder) sorted() []float64 {
	r.mu.Lock()
	s := slices.Clone(r.samples)
	r.mu.Unlock()
	slices.Sort(s)
	return s
}

// window returns a sorted copy of the samples from index from on, and the
// index to pass next time.
func (r *recorder) window(from int) ([]float64, int) {
	r.mu.Lock()
	s := slices.Clone(r.samples[min(from, len(r.samples)):])
	n := len(r.samples)
	r.mu.Unlock()
	slices.Sort(s)
	return s, n
}
