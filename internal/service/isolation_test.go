package service

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/leasewal/leasewal/internal/store"
	"github.com/leasewal/leasewal/state"
	"github.com/leasewal/leasewal/wal"
)

// flakyFS fails some of the WAL's writes and fsyncs, never two in a row, so
// that the rollback after a failure (a truncate and an fsync) goes through.
type flakyFS struct {
	store.OS
	mu       sync.Mutex
	rng      *rand.Rand
	lastBad  bool
	syncs    int
	failures int
}

func (f *flakyFS) WAL(s wal.Storage) wal.Storage { return flakyStorage{Storage: s, fs: f} }

// fail says whether the next write or fsync fails, one time in every.
func (f *flakyFS) fail(every int) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	bad := !f.lastBad && f.rng.IntN(every) == 0
	f.lastBad = bad
	if bad {
		f.failures++
	}
	return bad
}

type flakyStorage struct {
	wal.Storage
	fs *flakyFS
}

func (s flakyStorage) WriteAt(p []byte, off int64) (int, error) {
	if s.fs.fail(40) {
		return 0, errors.New("injected: ENOSPC")
	}
	return s.Storage.WriteAt(p, off)
}

func (s flakyStorage) Sync() error {
	s.fs.mu.Lock()
	s.fs.syncs++
	s.fs.mu.Unlock()
	if s.fs.fail(8) {
		return errors.New("injected: EIO")
	}
	return s.Storage.Sync()
}

// The kinds of request the stress test sends: innocent submits, and three
// that must fail alone (a record the gate refuses for its actor, one it
// refuses for text that is not UTF-8, and one the gate passes but the state
// refuses, which stops its batch: the requests after it are decided again).
const (
	innocent = iota
	hugeActor
	notUTF8
	diverging
)

func stressRequest(kind int, payload string) func(tx *store.Tx) error {
	return func(tx *store.Tx) error {
		d, err := tx.State.DecideSubmit(state.Submit{Payload: payload, Window: state.Duration(time.Hour), Policy: state.RetryPolicy{MaxAttempts: 1}}, tx.Now)
		if err != nil {
			return err
		}
		switch kind {
		case hugeActor:
			tx.Actor = strings.Repeat("a", 600_000)
		case notUTF8:
			d.Records[0].Payload += "\xff"
		case diverging:
			d.Records = append(d.Records, state.Record{Type: state.LeaseGranted, TaskID: "T999999999", LeaseID: "L999999999", WorkerID: "W", Attempt: 1, Expiry: tx.Now + 1000})
		}
		return tx.Commit(d.Records)
	}
}

// TestABatchsRequestsStandAlone: many clients at once, a few sending
// requests that must fail, beside writes and fsyncs that fail now and then,
// pipelined and serial. Every request answered OK is in the WAL exactly
// once; none answered with an error is in it (but for an outcome the error
// says is unknown); a request that must fail fails with the refusal of its
// own record; an innocent request fails only with the failed write or fsync
// of its own batch; and the WAL verifies.
func TestABatchsRequestsStandAlone(t *testing.T) {
	rounds := 2
	if os.Getenv("LEASEWAL_SOAK") != "" {
		rounds = 8
	}
	for round := range rounds {
		for _, pipelined := range []bool{true, false} {
			t.Run(fmt.Sprintf("round%d-pipelined=%v", round, pipelined), func(t *testing.T) {
				stressOnce(t, uint64(round), pipelined)
			})
		}
	}
}

func stressOnce(t *testing.T, seed uint64, pipelined bool) {
	path := filepath.Join(t.TempDir(), "q.wal")
	fsys := &flakyFS{rng: rand.New(rand.NewPCG(seed, 7))}
	h := store.Open(store.Options{Path: path, LockTimeout: time.Minute, FS: fsys, Resident: true})
	defer h.Close()
	var back Backend = NewWALBackend(h, "http://test")
	if !pipelined {
		back = Serial{back}
	}
	b := NewBatcher(back, 64, nil)
	const clients, each = 12, 40
	type answer struct {
		kind    int
		payload string
		err     error
	}
	answers := make(chan answer, clients*each)
	var wg sync.WaitGroup
	for c := range clients {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(seed, uint64(c)))
			for i := range each {
				kind := innocent
				if c%4 == 3 { // a quarter of the clients send bad requests now and then
					kind = rng.IntN(4)
				}
				payload := fmt.Sprintf("c%d-%d-kind%d", c, i, kind)
				_, err := b.Run(context.Background(), stressRequest(kind, payload))
				answers <- answer{kind, payload, err}
			}
		})
	}
	wg.Wait()
	b.Stop()
	close(answers)

	inWAL := map[string]int{}
	check := store.Open(store.Options{Path: path, LockTimeout: time.Second, Verifier: state.NewVerifier(),
		OnRecord: func(r state.Record, _ *store.Tx) error {
			if r.Type == state.TaskCreated {
				inWAL[r.Payload]++
			}
			return nil
		}})
	defer check.Close()
	if err := check.Read(func(*store.Tx) error { return nil }); err != nil {
		t.Fatalf("the WAL does not verify: %v", err)
	}
	var ok, failedIO, refused int
	for a := range answers {
		var appendErr *store.AppendError
		var refusal *store.RefusedRecordError
		unknown := errors.As(a.err, &appendErr) && !appendErr.RolledBack
		switch {
		case a.err == nil && a.kind != innocent:
			t.Errorf("%s was answered OK", a.payload)
		case a.err == nil:
			ok++
			if inWAL[a.payload] != 1 {
				t.Errorf("%s, answered OK, is in the WAL %d times", a.payload, inWAL[a.payload])
			}
		case unknown:
			if inWAL[a.payload] > 1 {
				t.Errorf("%s, of unknown outcome, is in the WAL %d times", a.payload, inWAL[a.payload])
			}
		case inWAL[a.payload] != 0:
			t.Errorf("%s, answered %v, is in the WAL", a.payload, a.err)
		case appendErr != nil:
			failedIO++
		case a.kind != innocent && errors.As(a.err, &refusal):
			refused++
		default:
			t.Errorf("%s (kind %d) was answered %v", a.payload, a.kind, a.err)
		}
	}
	t.Logf("%d OK, %d failed with their batch's write or fsync, %d refused alone; %d failures injected in %d fsyncs", ok, failedIO, refused, fsys.failures, fsys.syncs)
	if ok == 0 || refused == 0 {
		t.Fatalf("nothing was answered OK (%d) or refused (%d): the test proves nothing", ok, refused)
	}
}
