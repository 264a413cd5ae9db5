package bench

import (
	"math"
	"testing"
)

func TestPercentile(t *testing.T) {
	sorted := []float64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}
	for _, c := range []struct{ p, want float64 }{
		{0, 1}, {0.1, 1}, {0.5, 5}, {0.95, 10}, {0.99, 10}, {1, 10}, {0.11, 2},
	} {
		if got := Percentile(sorted, c.p); got != c.want {
			t.Errorf("Percentile(1..10, %v) = %v, want %v", c.p, got, c.want)
		}
	}
	if got := Percentile([]float64{7}, 0.99); got != 7 {
		t.Errorf("Percentile of one value = %v, want 7", got)
	}
	if got := Percentile(nil, 0.5); !math.IsNaN(got) {
		t.Errorf("Percentile of nothing = %v, want NaN", got)
	}
}

func TestMedianAndSummarize(t *testing.T) {
	if got := Median([]float64{5, 1, 3}); got != 3 {
		t.Errorf("Median(5,1,3) = %v", got)
	}
	if got := Median([]float64{4, 1, 3, 2}); got != 2.5 {
		t.Errorf("Median(4,1,3,2) = %v", got)
	}
	var sorted []float64
	for i := 1; i <= 1000; i++ {
		sorted = append(sorted, float64(i))
	}
	l := Summarize(sorted)
	if l != (Latency{Count: 1000, P50: 500, P95: 950, P99: 990, Max: 1000}) {
		t.Errorf("Summarize(1..1000) = %+v", l)
	}
	pts := CDFPoints(sorted, 10)
	if len(pts) != 11 || pts[0] != (Point{1, 0}) || pts[10] != (Point{1000, 1}) || pts[5] != (Point{500, 0.5}) {
		t.Errorf("CDFPoints = %v", pts)
	}
}

func TestRecorderWindow(t *testing.T) {
	var r recorder
	r.add(3, 1)
	w, next := r.window(0)
	if len(w) != 2 || w[0] != 1 || next != 2 {
		t.Fatalf("window(0) = %v, %d", w, next)
	}
	r.add(2)
	if w, next = r.window(next); len(w) != 1 || w[0] != 2 || next != 3 {
		t.Fatalf("window(2) = %v, %d", w, next)
	}
}
