package service

import (
	"strings"
	"testing"
	"time"
)

// TestWaitCap: a server's service waits at most WaitCap in one request
// (the client asks again until its own wait runs out), a wait shorter than
// the cap lasts as asked, and 0 looks once (wait --timeout 0 through a
// server once waited five minutes); a local wait lasts as asked, and no
// wait given is for ever.
func TestWaitCap(t *testing.T) {
	capped := New(Options{WaitCap: 5 * time.Minute})
	for asked, want := range map[string]time.Duration{"0s": 0, "1h": 5 * time.Minute, "1s": time.Second, "": 5 * time.Minute} {
		if got, forever, err := capped.waitFor("timeout", asked); err != nil || got != want || forever {
			t.Errorf("a server's wait of %q lasts %s (for ever: %v, %v), want %s", asked, got, forever, err, want)
		}
	}
	local := New(Options{})
	if got, forever, err := local.waitFor("timeout", "1h"); err != nil || got != time.Hour || forever {
		t.Errorf("a local wait of 1h lasts %s (for ever: %v, %v)", got, forever, err)
	}
	if _, forever, _ := local.waitFor("timeout", ""); !forever {
		t.Errorf("a local wait with no timeout is not for ever")
	}
	if _, _, err := local.waitFor("timeout", "-1s"); err == nil || !strings.Contains(err.Error(), "give a duration of 0 or more") {
		t.Errorf("a negative wait: %v; want a refusal that says what to give", err)
	}
}
