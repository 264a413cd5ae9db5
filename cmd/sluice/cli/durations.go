package cli

import (
	"flag"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// parseDuration parses a Go duration such as 500ms, 30s, 5m or 2h, with an
// error that says what to type instead of "parse error".
func parseDuration(s string) (time.Duration, error) {
	d, err := time.ParseDuration(s)
	if err == nil {
		return d, nil
	}
	if _, nerr := strconv.ParseFloat(strings.TrimSpace(s), 64); nerr == nil {
		return 0, fmt.Errorf("%q has no unit: use a unit, e.g. %ss (ms, s, m and h are known)", s, strings.TrimSpace(s))
	}
	return 0, fmt.Errorf("%q is not a duration: use a number with a unit, such as 500ms, 30s, 5m or 2h", s)
}

// friendlyDuration wraps a duration flag so that a bad value says what to
// type (see parseDuration) and the value is shown as entered ("2m", not
// "2m0s").
type friendlyDuration struct{ inner flag.Value }

func (f friendlyDuration) Set(s string) error {
	if _, err := parseDuration(s); err != nil {
		return err
	}
	return f.inner.Set(s)
}

func (f friendlyDuration) String() string {
	if f.inner == nil {
		return ""
	}
	if g, ok := f.inner.(flag.Getter); ok {
		if d, ok := g.Get().(time.Duration); ok {
			return formatDuration(d)
		}
	}
	return f.inner.String()
}

func (f friendlyDuration) Get() any { return f.inner.(flag.Getter).Get() }

// explainDurations wraps every duration flag of fs in friendlyDuration.
func explainDurations(fs *flag.FlagSet) {
	fs.VisitAll(func(f *flag.Flag) {
		if g, ok := f.Value.(flag.Getter); ok {
			if _, ok := g.Get().(time.Duration); ok {
				f.Value = friendlyDuration{inner: f.Value}
				f.DefValue = f.Value.String()
			}
		}
	})
}

// formatDuration renders d the way durations are typed: "2m", "1h30m",
// "1.5s", "250ms" (time.Duration.String without its trailing zero units).
func formatDuration(d time.Duration) string {
	s := d.String()
	if d == 0 {
		return "0s"
	}
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

// intervalUnits are the units of PostgreSQL's interval output (style
// postgres) and of the interval strings sluice stores, as durations.
var intervalUnits = map[string]time.Duration{
	"microsecond": time.Microsecond, "millisecond": time.Millisecond, "second": time.Second, "sec": time.Second,
	"minute": time.Minute, "min": time.Minute, "hour": time.Hour, "day": 24 * time.Hour,
}

// formatInterval renders a PostgreSQL interval text (such as "60 seconds",
// "1 day 02:00:00" or "00:00:30") as a duration the way it is typed ("1m",
// "26h", "30s"); text it cannot read (months, years) is returned as it is.
func formatInterval(text string) string {
	var total time.Duration
	fields := strings.Fields(text)
	for i := 0; i < len(fields); i++ {
		f := fields[i]
		if strings.Contains(f, ":") {
			d, ok := clockDuration(f)
			if !ok {
				return text
			}
			total += d
			continue
		}
		n, err := strconv.ParseFloat(f, 64)
		if err != nil || i+1 >= len(fields) {
			return text
		}
		unit, ok := intervalUnits[strings.TrimSuffix(fields[i+1], "s")]
		if !ok {
			return text
		}
		total += time.Duration(n * float64(unit))
		i++
	}
	if len(fields) == 0 {
		return text
	}
	return formatDuration(total)
}

// clockDuration reads [-]HH:MM[:SS[.ffffff]].
func clockDuration(s string) (time.Duration, bool) {
	neg := strings.HasPrefix(s, "-")
	parts := strings.Split(strings.TrimPrefix(s, "-"), ":")
	if len(parts) < 2 || len(parts) > 3 {
		return 0, false
	}
	var d time.Duration
	for i, unit := range []time.Duration{time.Hour, time.Minute, time.Second}[:len(parts)] {
		n, err := strconv.ParseFloat(parts[i], 64)
		if err != nil {
			return 0, false
		}
		d += time.Duration(n * float64(unit))
	}
	if neg {
		d = -d
	}
	return d, true
}
