package state

import (
	"bytes"
	"encoding/base64"
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/leasewal/leasewal/internal/refmodel"
)

// fakeWAL stands for the file a store reads records from: each record's
// frame at an offset of its own, as the store sets Record.Frame, and a
// payload read back from it as the store reads one (a TaskCreated's, or the
// data of base parts from one on).
type fakeWAL struct {
	at     map[int64]int // frame → index in frames
	frames []Record
}

func newFakeWAL() *fakeWAL { return &fakeWAL{at: map[int64]int{}} }

func (w *fakeWAL) add(r Record) Record {
	r.Frame = int64(17 + 100*len(w.frames))
	w.at[r.Frame] = len(w.frames)
	w.frames = append(w.frames, r)
	return r
}

func (w *fakeWAL) read(ref *PayloadRef) (string, error) {
	i, ok := w.at[ref.Frame]
	if !ok {
		return "", fmt.Errorf("no frame at %d", ref.Frame)
	}
	if ref.Skip < 0 {
		return w.frames[i].Payload, nil
	}
	var data []byte
	for ; i < len(w.frames) && int64(len(data)) < ref.Skip+int64(ref.Size); i++ {
		chunk, err := base64.StdEncoding.DecodeString(w.frames[i].Data)
		if err != nil || w.frames[i].Type != BasePart {
			return "", fmt.Errorf("frame %d is not a base part", w.frames[i].Frame)
		}
		data = append(data, chunk...)
	}
	if int64(len(data)) < ref.Skip+int64(ref.Size) {
		return "", errors.New("the base ends first")
	}
	return string(data[ref.Skip : ref.Skip+int64(ref.Size)]), nil
}

// textOf is a payload's text, read back from w when the state does not hold it.
func (w *fakeWAL) textOf(t *testing.T, p Payload) string {
	t.Helper()
	if p.Ref() == nil {
		return p.text
	}
	text, err := w.read(p.Ref())
	if err == nil {
		err = p.Ref().Check(text)
	}
	if err != nil {
		t.Fatal(err)
	}
	return text
}

// TestPayloadsReadFromTheWALDecideAlike: a state that holds no payload (each
// one, read from the WAL, is held as where it is there) decides every call
// of random histories as a state holding them all does, once the payloads
// its decisions name are read back (a lease's, a requeue's TaskCreated);
// requests repeated with another payload of the same length are told
// apart; its base is byte for byte the other's, its tasks as an index
// keeps them hold the references, and a base loaded from parts holds each
// payload as the place in the parts that reads back its text.
func TestPayloadsReadFromTheWALDecideAlike(t *testing.T) {
	histories := 300
	if testing.Short() {
		histories = 60
	}
	refs, resolved := 0, 0
	for seed := range uint64(histories) {
		rng := rand.New(rand.NewPCG(seed, 0xfa1))
		held, refd, model, w := New(), New(), refmodel.New(), newFakeWAL()
		refd.inline = 0
		asked := map[string]Submit{} // by request id
		now := t0
		for step := range 60 {
			now += rng.Int64N(15_000)
			c := randomCall(rng, model, now)
			if prev, ok := asked[c.submit.RequestID]; ok && c.op == "submit" && rng.IntN(2) == 0 {
				c.submit = prev // a repeat, or the same but for a payload of the same length
				c.submit.Payload = "p" + strconv.Itoa(rng.IntN(2))
			} else if c.op == "submit" && c.submit.RequestID != "" {
				asked[c.submit.RequestID] = c.submit
			}
			c.model(model, now)
			dh, eh := c.decide(held, now)
			dr, er := c.decide(refd, now)
			if fmt.Sprint(eh) != fmt.Sprint(er) {
				t.Fatalf("seed %d step %d %s: refused with %v, the state holding the payloads with %v", seed, step, c, er, eh)
			}
			if text := w.textOf(t, dr.Payload); text != dh.Payload.text {
				t.Fatalf("seed %d step %d %s: the payload answered reads back as %q, want %q", seed, step, c, text, dh.Payload.text)
			}
			if dr.Payload.Ref() != nil {
				resolved++
			}
			dr.Payload = dh.Payload
			for i := range dr.Records {
				if ref := dr.Records[i].PayloadAt; ref != nil {
					if _, err := EncodeRecord(dr.Records[i]); err == nil {
						t.Fatalf("seed %d step %d: a record whose payload was not read encodes", seed, step)
					}
					dr.Records[i].Payload, dr.Records[i].PayloadAt = w.textOf(t, Payload{ref: ref}), nil
					resolved++
				}
			}
			if !reflect.DeepEqual(dr, dh) {
				t.Fatalf("seed %d step %d %s:\n decided %+v\n want    %+v", seed, step, c, dr, dh)
			}
			for _, r := range dh.Records {
				r.Seq, r.At = held.LastSeq()+1, now
				if err := held.Apply(r); err != nil {
					t.Fatal(err)
				}
				if err := refd.Apply(w.add(r)); err != nil {
					t.Fatal(err)
				}
			}
		}
		for _, task := range allTasks(refd) {
			want, _ := held.Task(task.ID)
			if !task.Payload.Is("") {
				refs++
				if task.Payload.Ref() == nil {
					t.Fatalf("seed %d: %s holds its payload", seed, task.ID)
				}
			}
			if got := w.textOf(t, task.Payload); got != want.Payload.text {
				t.Fatalf("seed %d: %s reads back %q, want %q", seed, task.ID, got, want.Payload.text)
			}
		}
		if held.LastSeq() == 0 {
			continue
		}
		wantBase := baseBytes(t, held, nil)
		if got := baseBytes(t, refd, w.read); !bytes.Equal(got, wantBase) {
			t.Fatalf("seed %d: the base of the state holding no payload differs", seed)
		}
		if refs > 0 {
			if _, err := refd.WriteBase(&bytes.Buffer{}, MinTime, nil); !errors.Is(err, ErrPayloadNotHeld) {
				t.Fatalf("seed %d: a base written without the WAL to read from: %v", seed, err)
			}
		}
		checkIndexKeepsReferences(t, seed, refd)
		checkBaseLoadsReferences(t, seed, held, refd, w)
	}
	if refs == 0 || resolved == 0 {
		t.Fatalf("%d payloads held as references, %d read back for a decision: the test reaches nothing", refs, resolved)
	}
	t.Logf("%d payloads held as references, %d read back for decisions", refs, resolved)
}

// baseBytes is the snapshot a base of s holds, every payload's text in it.
func baseBytes(t *testing.T, s *State, read func(*PayloadRef) (string, error)) []byte {
	t.Helper()
	var tasks bytes.Buffer
	snap, err := s.WriteBase(&tasks, MinTime, read)
	if err != nil {
		t.Fatal(err)
	}
	return slices.Concat(snap.Head, tasks.Bytes(), snap.Tail)
}

// checkIndexKeepsReferences: s's tasks written into a source as an index
// keeps them (EncodeTask) load with every payload as s holds it.
func checkIndexKeepsReferences(t *testing.T, seed uint64, s *State) {
	t.Helper()
	want := map[string]Payload{}
	for _, task := range allTasks(s) {
		want[task.ID] = task.Payload
	}
	src := newMemSource()
	head := s.Head()
	src.write(s)
	loaded, err := LoadHead(head, src)
	if err != nil {
		t.Fatalf("seed %d: %v", seed, err)
	}
	for _, task := range allTasks(loaded) {
		if !reflect.DeepEqual(task.Payload, want[task.ID]) {
			t.Fatalf("seed %d: %s's payload loads from the caches as %+v, want %+v", seed, task.ID, task.Payload, want[task.ID])
		}
	}
}

// checkBaseLoadsReferences: the base of refd, read from a WAL of its own by
// a state that holds no payload, holds each as where its text is in the
// base's parts.
func checkBaseLoadsReferences(t *testing.T, seed uint64, held, refd *State, w *fakeWAL) {
	t.Helper()
	var tasks bytes.Buffer
	snap, err := refd.WriteBase(&tasks, MinTime, w.read)
	if err != nil {
		t.Fatal(err)
	}
	compacted, loaded := newFakeWAL(), New()
	loaded.inline = 0
	err = snap.Records(refd.LastAt(), HistoryKept, strings.Repeat("0", 64), 7, &tasks, func(r Record) error {
		return loaded.Apply(compacted.add(r))
	})
	if err != nil {
		t.Fatalf("seed %d: %v", seed, err)
	}
	for _, task := range allTasks(loaded) {
		want, _ := held.Task(task.ID)
		if !want.Payload.Is("") && task.Payload.Ref() == nil {
			t.Fatalf("seed %d: %s, loaded from a base, holds its payload", seed, task.ID)
		}
		if got := compacted.textOf(t, task.Payload); got != want.Payload.text {
			t.Fatalf("seed %d: %s, loaded from a base, reads back %q, want %q", seed, task.ID, got, want.Payload.text)
		}
	}
}

// TestABaseRefersToPayloadsAcrossParts: payloads that run from one base part
// into the next read back from the parts.
func TestABaseRefersToPayloadsAcrossParts(t *testing.T) {
	recs := randomHistory(t, 1, 400)
	for i := range recs {
		if recs[i].Type == TaskCreated && recs[i].Schedule == "" {
			recs[i].Payload = strings.Repeat(recs[i].TaskID, 9_000/len(recs[i].TaskID)) + recs[i].Payload
		}
	}
	held := New()
	replay(t, held, recs)
	var tasks bytes.Buffer
	snap, err := held.WriteBase(&tasks, MinTime, nil)
	if err != nil {
		t.Fatal(err)
	}
	w, loaded := newFakeWAL(), New()
	if err := snap.Records(held.LastAt(), HistoryKept, strings.Repeat("0", 64), 7, &tasks, func(r Record) error {
		return loaded.Apply(w.add(r))
	}); err != nil {
		t.Fatal(err)
	}
	across := 0
	for _, task := range allTasks(loaded) {
		want, _ := held.Task(task.ID)
		ref := task.Payload.Ref()
		if len(want.Payload.text) <= InlinePayloadBytes {
			if ref != nil {
				t.Fatalf("%s holds its payload of %d bytes as a reference", task.ID, len(want.Payload.text))
			}
			continue
		}
		if ref == nil {
			t.Fatalf("%s holds its payload of %d bytes", task.ID, len(want.Payload.text))
		}
		if ref.Skip+int64(ref.Size) > MaxBasePart {
			across++
		}
		if got := w.textOf(t, task.Payload); got != want.Payload.text {
			t.Fatalf("%s reads back %d bytes, not its payload", task.ID, len(got))
		}
	}
	if across == 0 {
		t.Fatal("no payload runs into the next part: the test reaches nothing")
	}
	t.Logf("%d payloads run into the next part", across)
}
