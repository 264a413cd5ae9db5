package bench

import (
	"bufio"
	"encoding/xml"
	"fmt"
	"io"
	"math"
	"strings"
)

// Point is one point of a series.
type Point struct {
	X float64 `json:"x"`
	Y float64 `json:"y"`
}

// Series is a named line of a chart.
type Series struct {
	Name   string  `json:"name"`
	Points []Point `json:"points"`
}

// Chart is a line chart: throughput over time, a latency CDF (LogX), or
// latencies over time (LogY).
type Chart struct {
	File  string `json:"file"` // file name in the results directory
	Title string `json:"title"`
	// Subtitle, if set, is a line under the title (a ratio worth reading
	// off the chart).
	Subtitle string   `json:"subtitle,omitempty"`
	XLabel   string   `json:"x_label"`
	YLabel   string   `json:"y_label"`
	LogX     bool     `json:"log_x,omitempty"`
	LogY     bool     `json:"log_y,omitempty"` // Y values at or below 0 are left out
	Series   []Series `json:"series"`
}

// palette colours the series in turn.
var palette = [...]string{"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"}

// esc escapes text for XML character data and attribute values.
func esc(s string) string {
	var b strings.Builder
	_ = xml.EscapeText(&b, []byte(s))
	return b.String()
}

// niceTicks returns about n round tick values covering [lo, hi].
func niceTicks(lo, hi float64, n int) []float64 {
	if !(hi > lo) {
		return []float64{lo}
	}
	raw := (hi - lo) / float64(n)
	mag := math.Pow(10, math.Floor(math.Log10(raw)))
	step := mag
	for _, m := range []float64{1, 2, 5, 10} {
		if m*mag >= raw {
			step = m * mag
			break
		}
	}
	var ticks []float64
	for v := math.Ceil(lo/step) * step; v <= hi+step*1e-9; v += step {
		ticks = append(ticks, v)
	}
	return ticks
}

// fmtTick formats an axis value compactly.
func fmtTick(v float64) string {
	switch a := math.Abs(v); {
	case a >= 1e6:
		return fmt.Sprintf("%gM", math.Round(v/1e5)/10)
	case a >= 1e3:
		return fmt.Sprintf("%gk", math.Round(v/1e2)/10)
	default:
		return fmt.Sprintf("%g", math.Round(v*1000)/1000)
	}
}

// WriteSVG draws c as a standalone SVG document.
func (c *Chart) WriteSVG(w io.Writer) error {
	const (
		width, height          = 760.0, 420.0
		left, right, top, bott = 70.0, 200.0, 40.0, 50.0
	)
	pw, ph := width-left-right, height-top-bott
	tx := func(x float64) float64 {
		if c.LogX {
			return math.Log10(math.Max(x, 1e-3))
		}
		return x
	}
	skip := func(p Point) bool { return math.IsNaN(p.X) || math.IsNaN(p.Y) || (c.LogY && p.Y <= 0) }
	xmin, xmax, ymax := math.Inf(1), math.Inf(-1), 0.0
	ylo, yhi := math.Inf(1), math.Inf(-1) // decades of a LogY chart
	for _, s := range c.Series {
		for _, p := range s.Points {
			if skip(p) {
				continue
			}
			xmin, xmax = math.Min(xmin, tx(p.X)), math.Max(xmax, tx(p.X))
			ymax = math.Max(ymax, p.Y)
			if c.LogY {
				ylo, yhi = math.Min(ylo, math.Floor(math.Log10(p.Y))), math.Max(yhi, math.Ceil(math.Log10(p.Y)))
			}
		}
	}
	if math.IsInf(ylo, 0) {
		ylo, yhi = 0, 1
	}
	if yhi <= ylo {
		yhi = ylo + 1
	}
	if math.IsInf(xmin, 0) {
		xmin, xmax = 0, 1
	}
	if xmax <= xmin {
		xmax = xmin + 1
	}
	if c.LogX {
		xmin, xmax = math.Floor(xmin), math.Ceil(xmax)
	} else if xmin > 0 {
		xmin = 0
	}
	if ymax <= 0 {
		ymax = 1
	}
	ymax *= 1.05
	px := func(x float64) float64 { return left + (tx(x)-xmin)/(xmax-xmin)*pw }
	py := func(y float64) float64 { return top + ph - y/ymax*ph }
	yticks := niceTicks(0, ymax, 5)
	if c.LogY {
		py = func(y float64) float64 { return top + ph - (math.Log10(y)-ylo)/(yhi-ylo)*ph }
		yticks = nil
		for e := ylo; e <= yhi; e++ {
			yticks = append(yticks, math.Pow(10, e))
		}
	}

	b := bufio.NewWriter(w)
	fmt.Fprintf(b, `<?xml version="1.0" encoding="UTF-8"?>`+"\n")
	fmt.Fprintf(b, `<svg xmlns="http://www.w3.org/2000/svg" width="%g" height="%g" viewBox="0 0 %g %g" font-family="sans-serif" font-size="12">`+"\n", width, height, width, height)
	fmt.Fprintf(b, `<rect x="0" y="0" width="%g" height="%g" fill="white"/>`+"\n", width, height)
	fmt.Fprintf(b, `<text x="%g" y="22" font-size="15" text-anchor="middle">%s</text>`+"\n", left+pw/2, esc(c.Title))
	if c.Subtitle != "" {
		fmt.Fprintf(b, `<text x="%g" y="35" font-size="11" text-anchor="middle">%s</text>`+"\n", left+pw/2, esc(c.Subtitle))
	}
	// Grid and axes.
	for _, v := range yticks {
		y := py(v)
		fmt.Fprintf(b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#ddd"/>`+"\n", left, y, left+pw, y)
		fmt.Fprintf(b, `<text x="%.1f" y="%.1f" text-anchor="end">%s</text>`+"\n", left-6, y+4, esc(fmtTick(v)))
	}
	var xticks []float64
	if c.LogX {
		for e := xmin; e <= xmax; e++ {
			xticks = append(xticks, math.Pow(10, e))
		}
	} else {
		xticks = niceTicks(xmin, xmax, 8)
	}
	for _, v := range xticks {
		x := px(v)
		fmt.Fprintf(b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#eee"/>`+"\n", x, top, x, top+ph)
		fmt.Fprintf(b, `<text x="%.1f" y="%.1f" text-anchor="middle">%s</text>`+"\n", x, top+ph+16, esc(fmtTick(v)))
	}
	fmt.Fprintf(b, `<rect x="%g" y="%g" width="%g" height="%g" fill="none" stroke="#333"/>`+"\n", left, top, pw, ph)
	fmt.Fprintf(b, `<text x="%g" y="%g" text-anchor="middle">%s</text>`+"\n", left+pw/2, height-10, esc(c.XLabel))
	fmt.Fprintf(b, `<text x="16" y="%g" text-anchor="middle" transform="rotate(-90 16 %g)">%s</text>`+"\n", top+ph/2, top+ph/2, esc(c.YLabel))
	// Lines and legend.
	for i, s := range c.Series {
		colour := palette[i%len(palette)]
		var pts strings.Builder
		for _, p := range s.Points {
			if skip(p) {
				continue
			}
			fmt.Fprintf(&pts, "%.1f,%.1f ", px(p.X), py(p.Y))
		}
		fmt.Fprintf(b, `<polyline fill="none" stroke="%s" stroke-width="1.5" points="%s"/>`+"\n", colour, strings.TrimSpace(pts.String()))
		ly := top + 10 + float64(i)*16
		fmt.Fprintf(b, `<line x1="%g" y1="%g" x2="%g" y2="%g" stroke="%s" stroke-width="3"/>`+"\n", left+pw+10, ly, left+pw+28, ly, colour)
		fmt.Fprintf(b, `<text x="%g" y="%g">%s</text>`+"\n", left+pw+32, ly+4, esc(s.Name))
	}
	fmt.Fprintln(b, `</svg>`)
	return b.Flush()
}
