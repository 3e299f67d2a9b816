package server

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/leasewal/leasewal/api"
)

// StatusWait is how long GET /v1/status?after=N waits for a record past N
// unless the request says (wait=…): under the idle timeouts of the proxies
// a server may sit behind.
const StatusWait = 25 * time.Second

// feed tells the requests waiting in GET /v1/status?after= that the WAL may
// have changed: a channel closed at each change, then replaced. The
// server's own records are told by Changed once durable; what other
// processes write (local commands, a raft node's apply) by one watch of
// the WAL, started at the first wait and ended with the server.
type feed struct {
	once sync.Once
	mu   sync.Mutex
	next chan struct{}
}

// Changed wakes the requests waiting for a record: the server's own
// records are durable (service.Options.Committed).
func (s *Server) Changed() {
	s.feed.mu.Lock()
	defer s.feed.mu.Unlock()
	if s.feed.next != nil {
		close(s.feed.next)
		s.feed.next = make(chan struct{})
	}
}

// nextChange is a channel closed at the WAL's next change. The first call
// starts the watch (Options.Changes); a watch that cannot start leaves the
// waits to the server's own records and their time.
func (s *Server) nextChange() <-chan struct{} {
	s.feed.once.Do(func() {
		s.feed.mu.Lock()
		s.feed.next = make(chan struct{})
		s.feed.mu.Unlock()
		if s.o.Changes == nil {
			return
		}
		ctx, cancel := context.WithCancel(context.Background())
		changes, err := s.o.Changes(ctx)
		if err != nil {
			cancel()
			if s.o.Log != nil {
				fmt.Fprintf(s.o.Log, "leasewal: GET /v1/status?after= hears of this server's own writes only: %v\n", err)
			}
			return
		}
		go func() { // ends with the server: StopWaits closes stopping
			defer cancel()
			for {
				select {
				case <-s.stopping:
					return
				case <-changes:
					s.Changed()
				}
			}
		}()
	})
	s.feed.mu.Lock()
	defer s.feed.mu.Unlock()
	return s.feed.next
}

// statusOf answers GET /v1/status; with after=N, once the last seq is past
// N, or when wait (StatusWait unless given, at most WaitCap) has run out:
// a client learns of the next record without asking again and again.
func (s *Server) statusOf(w http.ResponseWriter, r *http.Request) {
	after, wait, err := statusWait(r)
	if err != nil {
		Error(w, http.StatusBadRequest, api.ExitUsage, "Usage", err.Error())
		return
	}
	timeout := time.NewTimer(wait)
	defer timeout.Stop()
	for {
		var changed <-chan struct{}
		if after >= 0 {
			changed = s.nextChange() // taken before the status is read: a change after it closes it
		}
		v, err := s.status()
		if err != nil {
			Error(w, http.StatusInternalServerError, api.ExitInternal, "Internal", err.Error())
			return
		}
		if after < 0 || v.LastSeq > after {
			w.Header().Set("Content-Type", "application/json")
			writeJSON(w, v)
			return
		}
		select {
		case <-changed:
			continue
		case <-r.Context().Done():
			return
		case <-timeout.C:
		case <-s.stopping:
		}
		after = -1 // time is up: the status as it stands
	}
}

// statusWait reads GET /v1/status's after and wait; after is -1 when not
// given (answer at once).
func statusWait(r *http.Request) (after int64, wait time.Duration, err error) {
	q := r.URL.Query()
	after, wait = -1, StatusWait
	if text := q.Get("after"); text != "" {
		if after, err = strconv.ParseInt(text, 10, 64); err != nil || after < 0 {
			return 0, 0, fmt.Errorf("after=%q is not a seq: give the last seq you have (0 or more)", text)
		}
	}
	if text := q.Get("wait"); text != "" {
		if wait, err = api.ParseSpan(text); err != nil || wait < 0 || wait > WaitCap {
			return 0, 0, fmt.Errorf("wait=%s: give a duration of 0 to %s", text, WaitCap)
		}
	}
	return after, wait, nil
}
