package cluster

import (
	"bytes"
	"testing"
	"time"
)

// TestQuietLog: a line repeated with other numbers is dropped within the
// interval and passed again after it; other lines pass.
func TestQuietLog(t *testing.T) {
	var out bytes.Buffer
	q := newQuietLog(&out, 30*time.Second)
	at := time.Unix(0, 0)
	q.now = func() time.Time { return at }
	write := func(s string) {
		if _, err := q.Write([]byte(s)); err != nil {
			t.Fatal(err)
		}
	}
	write("2026-01-01T00:00:00.000Z [ERROR] raft: failed to heartbeat to: peer=127.0.0.1:7521 backoff time=10ms\n")
	write("2026-01-01T00:00:00.100Z [ERROR] raft: failed to heartbeat to: peer=127.0.0.1:7521 backoff time=20ms\n")
	write("2026-01-01T00:00:00.200Z [WARN]  raft: heartbeat timeout reached, starting election\n")
	at = at.Add(31 * time.Second)
	write("2026-01-01T00:00:31.000Z [ERROR] raft: failed to heartbeat to: peer=127.0.0.1:7521 backoff time=40ms\n")
	want := "2026-01-01T00:00:00.000Z [ERROR] raft: failed to heartbeat to: peer=127.0.0.1:7521 backoff time=10ms\n" +
		"2026-01-01T00:00:00.200Z [WARN]  raft: heartbeat timeout reached, starting election\n" +
		"2026-01-01T00:00:31.000Z [ERROR] raft: failed to heartbeat to: peer=127.0.0.1:7521 backoff time=40ms\n"
	if out.String() != want {
		t.Fatalf("got\n%s\nwant\n%s", out.String(), want)
	}
}
