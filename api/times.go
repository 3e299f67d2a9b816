package api

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/leasewal/leasewal/internal/limits"
)

// UsageError is bad input found before anything is decided: a flag or a
// field, a time, a duration, a file argument. Exit 2.
type UsageError struct{ Msg string }

func (e *UsageError) Error() string { return e.Msg }

// Usage is a UsageError with a formatted message.
func Usage(format string, args ...any) error {
	return &UsageError{Msg: fmt.Sprintf(format, args...)}
}

// ParseTimeFlag reads a time flag: RFC 3339, unix milliseconds, or +DURATION
// (after the last record, or after the wall clock on an empty WAL). Every
// answer lies in the years 0001 to 9999.
func ParseTimeFlag(flag, text string, lastAt, wall int64) (int64, error) {
	if rest, ok := strings.CutPrefix(text, "+"); ok {
		d, err := ParseSpan(rest)
		if err != nil || d < 0 {
			return 0, Usage("%s %q: after '+' give a duration such as 30s, 1m30s or 2d", flag, text)
		}
		base := lastAt
		if base == 0 {
			base = wall
		}
		return inRange(flag, text, base+d.Milliseconds())
	}
	if ms, err := strconv.ParseInt(text, 10, 64); err == nil {
		switch {
		case ms < 0:
			return 0, Usage("%s %q: unix milliseconds must not be negative", flag, text)
		case ms < 1e11:
			return 0, Usage("%s %q looks like unix seconds, not milliseconds: append 000 or use RFC 3339 (2026-01-01T00:00:30Z)", flag, text)
		}
		return inRange(flag, text, ms)
	}
	if text != "" && strings.TrimLeft(text, "0123456789") == "" { // all digits, too many for an int64
		return 0, Usage("%s %q is past the year 9999; give a time between 0001 and 9999", flag, text)
	}
	t, err := time.Parse(time.RFC3339Nano, text)
	if err != nil {
		return 0, Usage("%s %q is not a time: use RFC 3339 (2026-01-01T00:00:30Z), unix milliseconds, or +DURATION", flag, text)
	}
	return inRange(flag, text, t.UnixMilli())
}

func inRange(flag, text string, ms int64) (int64, error) {
	if ms < limits.MinTime || ms > limits.MaxTime {
		return 0, Usage("%s %q is outside the years 0001 to 9999", flag, text)
	}
	return ms, nil
}

// ParseDuration reads a duration flag, with the flag's name in the error.
func ParseDuration(flag, text string) (time.Duration, error) {
	d, err := ParseSpan(strings.TrimSpace(text))
	if err != nil {
		return 0, Usage("--%s %q is not a duration: use such as 30s, 5m, 1h30m, 5d or 2w (at most 2562047h)", flag, text)
	}
	return d, nil
}

// dayUnits finds the units Go's durations lack but ages print: days and
// weeks (neither letter is part of a Go unit).
var dayUnits = regexp.MustCompile(`([0-9]*\.?[0-9]+)([dw])`)

// ParseSpan is time.ParseDuration that also reads d (24h) and w (7d), so
// that what an output prints as an age (4d3h) can be given back as a flag.
func ParseSpan(text string) (time.Duration, error) {
	if !strings.ContainsAny(text, "dw") { // most spans (every command's --lock-timeout): no regexp to run
		return time.ParseDuration(text)
	}
	var bad error
	goSyntax := dayUnits.ReplaceAllStringFunc(text, func(m string) string {
		parts := dayUnits.FindStringSubmatch(m)
		n, err := strconv.ParseFloat(parts[1], 64)
		if err != nil {
			bad = err
		}
		if parts[2] == "w" {
			n *= 7
		}
		return strconv.FormatFloat(n*24, 'f', -1, 64) + "h"
	})
	if bad != nil {
		return 0, bad
	}
	return time.ParseDuration(goSyntax)
}

// Age renders a span of time for a person: 850ms, 42s, 3m12s, 2h5m, 4d3h.
func Age(ms int64) string {
	if ms < 0 {
		return "-" + Age(-ms)
	}
	d := time.Duration(ms) * time.Millisecond
	switch {
	case d < time.Second:
		return fmt.Sprintf("%dms", ms)
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d.Seconds()))
	case d < time.Hour:
		return trimZero(fmt.Sprintf("%dm%ds", int(d.Minutes()), int(d.Seconds())%60))
	case d < 48*time.Hour:
		return trimZero(fmt.Sprintf("%dh%dm", int(d.Hours()), int(d.Minutes())%60))
	}
	return trimZero(fmt.Sprintf("%dd%dh", int(d.Hours())/24, int(d.Hours())%24))
}

// trimZero drops a trailing zero unit: 3m0s is 3m.
func trimZero(s string) string {
	for _, unit := range []string{"0s", "0m", "0h"} {
		if strings.HasSuffix(s, unit) && len(s) > len(unit) && (s[len(s)-len(unit)-1] < '0' || s[len(s)-len(unit)-1] > '9') {
			return s[:len(s)-len(unit)]
		}
	}
	return s
}

// Plural is one or many as n asks.
func Plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}
