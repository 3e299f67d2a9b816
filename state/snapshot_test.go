package state

import (
	"errors"
	"math/rand/v2"
	"reflect"
	"testing"

	"github.com/leasewal/leasewal/internal/refmodel"
)

// TestSnapshotPlusTailEqualsReplay: for random histories of tasks and work
// leases, a snapshot taken after any record, loaded, and followed by the rest
// of the records gives exactly the state of a full replay.
func TestSnapshotPlusTailEqualsReplay(t *testing.T) {
	histories := 500
	if testing.Short() {
		histories = 100
	}
	for seed := range histories {
		recs := randomRecords(t, uint64(seed))
		full := New()
		for _, r := range recs {
			if err := full.Apply(r); err != nil {
				t.Fatal(err)
			}
		}
		cut := rand.New(rand.NewPCG(uint64(seed), 1)).IntN(len(recs) + 1)
		prefix := New()
		for _, r := range recs[:cut] {
			prefix.Apply(r)
		}
		loaded, err := LoadSnapshot(snap(prefix))
		if err != nil {
			t.Fatalf("seed %d: %v", seed, err)
		}
		if !reflect.DeepEqual(keyed(loaded), prefix) {
			t.Fatalf("seed %d: the loaded snapshot differs from the state it was taken of\n%s\n%s", seed, snapshot(loaded), snapshot(prefix))
		}
		for _, r := range recs[cut:] {
			if err := loaded.Apply(r); err != nil {
				t.Fatalf("seed %d: the tail after a snapshot was refused: %v", seed, err)
			}
		}
		if !reflect.DeepEqual(keyed(loaded), full) {
			t.Fatalf("seed %d: snapshot at %d + tail differs from full replay", seed, cut)
		}
	}
}

// randomRecords is a random history of 80 task and work-lease commands.
func randomRecords(t *testing.T, seed uint64) []Record { return randomHistory(t, seed, 80) }

// randomHistory is a random history of steps task and work-lease commands.
func randomHistory(t *testing.T, seed uint64, steps int) []Record {
	rng := rand.New(rand.NewPCG(seed, 0x5a))
	s, model := New(), refmodel.New()
	var recs []Record
	now := t0
	apply := func(rs ...Record) {
		for _, r := range rs {
			r.Seq, r.At = s.LastSeq()+1, now
			if err := s.Apply(r); err != nil {
				t.Fatal(err)
			}
			recs = append(recs, r)
		}
	}
	for range steps {
		now += rng.Int64N(15_000)
		switch dom, _ := s.Domain("A"); {
		case dom != nil && dom.Lease != nil && rng.IntN(3) == 0:
			d, _ := s.DecideWorkFail("A", dom.Lease.Token, rng.IntN(2))
			apply(*d.Record)
		case rng.IntN(4) == 0:
			if d, err := s.DecideAcquire([]string{"A", "B"}[rng.IntN(2)], int64(rng.IntN(5))); err == nil && d.Record != nil {
				apply(*d.Record)
			}
		default:
			c := randomCall(rng, model, now)
			c.model(model, now)
			if d, err := c.decide(s, now); err == nil {
				apply(d.Records...)
			}
		}
	}
	return recs
}

func TestLoadSnapshotRefusesGarbage(t *testing.T) {
	s := New()
	for _, r := range randomRecords(t, 3) {
		s.Apply(r)
	}
	good := snap(s)
	for cut := 0; cut < len(good); cut++ {
		if _, err := LoadSnapshot(good[:cut]); !errors.Is(err, ErrSnapshot) {
			t.Fatalf("a snapshot cut at %d of %d loaded: %v", cut, len(good), err)
		}
	}
	if _, err := LoadSnapshot(append(good, 0)); !errors.Is(err, ErrSnapshot) {
		t.Fatal("trailing bytes accepted")
	}
}
