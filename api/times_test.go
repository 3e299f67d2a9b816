package api

import (
	"testing"
	"time"
)

// TestParseSpanReadsDaysAndWeeks: d and w are 24h and 7d, alone or beside
// Go's units; a span without them is Go's duration as it is, errors
// included.
func TestParseSpanReadsDaysAndWeeks(t *testing.T) {
	for text, want := range map[string]time.Duration{
		"10s": 10 * time.Second, "1.5h": 90 * time.Minute, "4d3h": 99 * time.Hour, "2w": 14 * 24 * time.Hour,
		"1d": 24 * time.Hour, "0.5d": 12 * time.Hour, "1w1d1h1m": (8*24+1)*time.Hour + time.Minute, "-1d": -24 * time.Hour, "0": 0,
	} {
		if got, err := ParseSpan(text); err != nil || got != want {
			t.Errorf("ParseSpan(%q) = %v, %v; want %v", text, got, err, want)
		}
	}
	for _, text := range []string{"", "abc", "3x", "10", "1.5", "d", "w", "1dd", "--1s", "1s1"} {
		if got, err := ParseSpan(text); err == nil {
			t.Errorf("ParseSpan(%q) = %v, want an error", text, got)
		}
	}
}
