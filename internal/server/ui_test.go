package server

import (
	"testing"
	"time"
)

// TestUISessionsEnd: a session opens the page until uiSessionLife has
// passed, and a server keeps at most maxUISessions, dropping the oldest.
func TestUISessionsEnd(t *testing.T) {
	var u uiSessions
	now := time.Unix(1767225600, 0)
	id, err := u.open(now)
	if err != nil {
		t.Fatal(err)
	}
	if !u.valid(id, now.Add(uiSessionLife-time.Millisecond)) || u.valid(id, now.Add(uiSessionLife)) || u.valid("other", now) {
		t.Fatal("a session is valid outside its life, or another id is")
	}
	for i := range maxUISessions + 10 {
		if _, err := u.open(now.Add(time.Duration(i) * time.Millisecond)); err != nil {
			t.Fatal(err)
		}
	}
	if len(u.expires) != maxUISessions || u.valid(id, now) {
		t.Fatalf("%d sessions kept, the oldest still valid: %v", len(u.expires), u.valid(id, now))
	}
}
