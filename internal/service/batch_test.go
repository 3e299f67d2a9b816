package service

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasewal/leasewal/internal/gatedfs"
	"github.com/leasewal/leasewal/internal/store"
	"github.com/leasewal/leasewal/internal/testwait"
	"github.com/leasewal/leasewal/state"
)

// fakeBackend runs a batch's functions in order, as a WAL would, and
// counts the batches; it blocks each batch until release is closed.
type fakeBackend struct {
	entered chan struct{} // a batch reached Commit
	mu      sync.Mutex
	batches [][]int
	release chan struct{}
	fail    error
}

func (b *fakeBackend) Commit(fns []func(*store.Tx) error) ([]error, [][]state.Record, error) {
	b.entered <- struct{}{}
	<-b.release
	errs, committed := make([]error, len(fns)), make([][]state.Record, len(fns))
	var sizes []int
	for i, fn := range fns {
		errs[i] = fn(nil)
		sizes = append(sizes, i)
	}
	b.mu.Lock()
	b.batches = append(b.batches, sizes)
	b.mu.Unlock()
	return errs, committed, b.fail
}

func (b *fakeBackend) Status() (Status, error) { return Status{Role: "single"}, nil }

// TestBatcher: requests that queue while a batch is under way are decided
// together in the next one, in arrival order; a request whose client has
// gone is not decided; a batch's write error voids every answer of it; once
// stopped, a request is refused with ErrStopping and nothing is decided.
func TestBatcher(t *testing.T) {
	back := &fakeBackend{entered: make(chan struct{}, 16), release: make(chan struct{})}
	b := NewBatcher(back, 64, nil)
	var mu sync.Mutex
	var order []int
	decide := func(i int) func(*store.Tx) error {
		return func(*store.Tx) error {
			mu.Lock()
			order = append(order, i)
			mu.Unlock()
			return nil
		}
	}
	first := make(chan error, 1)
	go func() { _, err := b.Run(context.Background(), decide(0)); first <- err }()
	<-back.entered // the first batch is taken, and held in Commit
	gone, cancel := context.WithCancel(context.Background())
	cancel()
	results := make(chan error, 4)
	for i := 1; i <= 3; i++ {
		ctx := context.Background()
		if i == 2 {
			ctx = gone
		}
		go func() { _, err := b.Run(ctx, decide(i)); results <- err }()
		testwait.Until(t, "the request to queue before the next: in arrival order", func() bool { return b.Received() == int64(i+1) },
			func() string { return fmt.Sprint(b.Received(), " received") })
	}
	close(back.release)
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	var goneErrs int
	for range 3 {
		if err := <-results; errors.Is(err, ErrClientGone) {
			goneErrs++
		} else if err != nil {
			t.Fatal(err)
		}
	}
	if goneErrs != 1 || len(order) != 3 || order[0] != 0 || order[1] != 1 || order[2] != 3 {
		t.Fatalf("decided %v, %d gone; want 0, 1, 3 and one gone", order, goneErrs)
	}
	if len(back.batches) != 2 || len(back.batches[1]) != 3 {
		t.Fatalf("batches %v; want the first alone, then the three queued behind it together", back.batches)
	}
	back.fail = errors.New("injected: the write failed")
	if _, err := b.Run(context.Background(), decide(4)); !errors.Is(err, back.fail) {
		t.Fatalf("a failed write answered %v", err)
	}
	b.Stop()
	b.Stop() // a second stop is harmless
	if _, err := b.Run(context.Background(), decide(5)); !errors.Is(err, ErrStopping) || len(order) != 4 {
		t.Fatalf("after Stop: %v, decided %v", err, order)
	}
}

// TestPipelinedBatcher: on a WAL, a full batch (batches of one here) with
// a request left behind it has its fsync run by the pipe's syncer, and the
// batcher decides the next batch while it runs; when that fsync fails, its
// request and every request decided after it on what it wrote (a read
// among them) are answered with the failure, rolled back, and none is
// decided again: the WAL is cut back, and the next request decides on it
// as it is.
func TestPipelinedBatcher(t *testing.T) {
	path := filepath.Join(t.TempDir(), "q.wal")
	submit := func(decided chan<- string) func(tx *store.Tx) error {
		return submitNoting(func(id string) { decided <- id })
	}
	plain := store.Open(store.Options{Path: path, LockTimeout: time.Second})
	if err := plain.Write(submit(make(chan string, 1))); err != nil { // T1: the WAL exists
		t.Fatal(err)
	}
	plain.Close()
	fsys := gatedfs.New()
	h := store.Open(store.Options{Path: path, LockTimeout: time.Second, FS: fsys, Resident: true})
	defer h.Close()
	b := NewBatcher(NewWALBackend(h, "http://test"), 1, nil)
	defer b.Stop()
	// A request the batcher is busy with while the first two queue behind it.
	held, busy := make(chan struct{}), make(chan error, 1)
	go func() {
		_, err := b.Run(context.Background(), func(tx *store.Tx) error { <-held; return nil })
		busy <- err
	}()
	testwait.Until(t, "the batcher to take the first request", func() bool { return b.Received() == 1 }, nil)
	firstDecided, secondDecided := make(chan string, 4), make(chan string, 4)
	first, second := make(chan error, 1), make(chan []state.Record, 1)
	go func() { _, err := b.Run(context.Background(), submit(firstDecided)); first <- err }()
	testwait.Until(t, "the first to wait", func() bool { return b.Received() == 2 }, nil)
	var secondErr error
	go func() {
		recs, err := b.Run(context.Background(), submit(secondDecided))
		secondErr = err
		second <- recs
	}()
	testwait.Until(t, "the second to wait behind it", func() bool { return b.Received() == 3 }, nil)
	close(held) // it writes nothing; its answer may wait for the first's fsync, which the syncer may run for both
	if id := <-firstDecided; id != "T2" {
		t.Fatalf("the first request created %s", id)
	}
	<-fsys.Syncing // the first batch's fsync runs on the syncer, held
	var id string
	select {
	case id = <-secondDecided:
	case <-time.After(testwait.HangGuard):
		fsys.Gated.Store(false)
		go func() { fsys.Gate <- nil }()
		t.Fatalf("hang guard: the second request was not decided in %s while the first batch's fsync was held", testwait.HangGuard)
	}
	if id != "T3" {
		t.Fatalf("the second request, decided while the first's fsync runs, created %s; want T3", id)
	}
	// A read decided now sees both, and is answered only once they are durable.
	seen, read := make(chan int64, 2), make(chan error, 1)
	go func() {
		_, err := b.Run(context.Background(), func(tx *store.Tx) error { seen <- tx.State.LastSeq(); return nil })
		read <- err
	}()
	if last := <-seen; last != 3 {
		t.Fatalf("a read decided during the held fsync saw %d records; want 3", last)
	}
	select {
	case err := <-read:
		t.Fatalf("a read was answered (%v) before the records it saw were durable", err)
	default:
	}
	fsys.Gated.Store(false)
	fsys.Gate <- errors.New("injected: EIO")
	var failed *store.AppendError
	if err := <-first; !errors.As(err, &failed) || !failed.RolledBack {
		t.Fatalf("the request whose fsync failed: %v", err)
	}
	if recs := <-second; !errors.As(secondErr, &failed) || !failed.RolledBack || len(recs) != 0 {
		t.Fatalf("the request decided after it: %v %+v; want the failure, rolled back", secondErr, recs)
	}
	if err := <-read; !errors.As(err, &failed) {
		t.Fatalf("the read that saw both: %v; want the failure", err)
	}
	select {
	case id := <-secondDecided:
		t.Fatalf("the request was decided again (%s)", id)
	default:
	}
	<-busy // answered by now, with nothing or with the failed fsync that covered it
	again := make(chan string, 1)
	if _, err := b.Run(context.Background(), submit(again)); err != nil || <-again != "T2" {
		t.Fatalf("a request after the failure: %v; want T2, decided on the WAL cut back", err)
	}
	// Nothing in flight, nothing waiting: the pipe has let the WAL go, and
	// a local writer gets its turn while the batcher runs.
	local := store.Open(store.Options{Path: path, LockTimeout: time.Minute})
	defer local.Close()
	if err := local.Write(submit(make(chan string, 1))); err != nil {
		t.Fatalf("a local writer beside an idle server: %v", err)
	}
	b.Stop()
	if last, err := lastSeq(path); err != nil || last != 3 {
		t.Fatalf("the WAL: %v, %d records; want the first, the one decided again and the local one", err, last)
	}
}

// lastSeq is the last record's seq of the WAL at path, verified.
func lastSeq(path string) (int64, error) {
	check := store.Open(store.Options{Path: path, LockTimeout: time.Second, Verifier: state.NewVerifier()})
	defer check.Close()
	var last int64
	err := check.Read(func(tx *store.Tx) error { last = tx.State.LastSeq(); return nil })
	return last, err
}

// TestWhatComesDuringABatchAlone: a batch written when nothing else waits
// is fsynced by the batcher itself; the requests that come meanwhile are
// not decided until it returns, and then make one batch.
func TestWhatComesDuringABatchAlone(t *testing.T) {
	path := filepath.Join(t.TempDir(), "q.wal")
	var decided atomic.Int32
	submit := submitNoting(func(string) { decided.Add(1) })
	plain := store.Open(store.Options{Path: path, LockTimeout: time.Second})
	if err := plain.Write(submit); err != nil { // the WAL exists
		t.Fatal(err)
	}
	plain.Close()
	decided.Store(0)
	fsys := gatedfs.New()
	h := store.Open(store.Options{Path: path, LockTimeout: time.Second, FS: fsys, Resident: true})
	defer h.Close()
	var mu sync.Mutex
	var sizes []int
	b := NewBatcher(NewWALBackend(h, "http://test"), 64, func(size int, _ time.Duration) { mu.Lock(); sizes = append(sizes, size); mu.Unlock() })
	defer b.Stop()
	answered := make(chan error, 4)
	go func() { _, err := b.Run(context.Background(), submit); answered <- err }()
	<-fsys.Syncing // the first batch's fsync, held: nothing waited when it was written
	for range 3 {
		go func() { _, err := b.Run(context.Background(), submit); answered <- err }()
	}
	testwait.Until(t, "three requests to wait", func() bool { return b.Received() == 4 }, nil)
	n := decided.Load()
	fsys.Gated.Store(false)
	fsys.Gate <- nil
	if n != 1 {
		t.Fatalf("%d requests decided while the first batch's fsync ran on the batcher, want only the first", n)
	}
	for range 4 {
		if err := <-answered; err != nil {
			t.Fatal(err)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(sizes) != 2 || sizes[0] != 1 || sizes[1] != 3 {
		t.Fatalf("batches of %v, want the first alone and then the three that came during its fsync together", sizes)
	}
}

// TestALoneRequestIsDecidedWhereItCame: once a pipe is open, a request
// that finds nothing in flight and nothing waiting is decided, written and
// fsynced on its own goroutine; the requests that come during its fsync
// wait for it and then make one batch, decided by the batcher. When that
// fsync fails, the request is answered with the failure, rolled back, and
// the next one is decided on the WAL cut back.
func TestALoneRequestIsDecidedWhereItCame(t *testing.T) {
	path := filepath.Join(t.TempDir(), "q.wal")
	var decided atomic.Int32
	submit := func(where chan<- string) func(tx *store.Tx) error {
		return submitNoting(func(string) { decided.Add(1); where <- goroutine() })
	}
	plain := store.Open(store.Options{Path: path, LockTimeout: time.Second})
	if err := plain.Write(submit(make(chan string, 1))); err != nil { // the WAL exists
		t.Fatal(err)
	}
	plain.Close()
	fsys := gatedfs.New()
	h := store.Open(store.Options{Path: path, LockTimeout: time.Second, FS: fsys, Resident: true})
	defer h.Close()
	var mu sync.Mutex
	var sizes []int
	b := newBatcher(NewWALBackend(h, "http://test"), 64, func(size int, _ time.Duration) { mu.Lock(); sizes = append(sizes, size); mu.Unlock() }, time.Hour)
	defer b.Stop()
	// run sends a submit from a goroutine of its own, and tells where it
	// was sent from, where it was decided, and its answer.
	type sent struct {
		from, decidedOn string
		err             chan error
	}
	run := func() *sent {
		s, from, where := &sent{err: make(chan error, 1)}, make(chan string, 1), make(chan string, 1)
		go func() {
			from <- goroutine()
			_, err := b.Run(context.Background(), submit(where))
			s.decidedOn = <-where
			s.err <- err
		}()
		s.from = <-from
		return s
	}
	answer := func(s *sent) error {
		select {
		case err := <-s.err:
			return err
		case <-time.After(testwait.HangGuard):
			t.Fatalf("hang guard: a request sent from goroutine %s was not answered in %s", s.from, testwait.HangGuard)
			return nil
		}
	}
	lingers := func() {
		testwait.Until(t, "the pipe to linger, idle", b.lingering.Load, nil)
	}

	first := run() // no pipe yet: the batcher opens one
	<-fsys.Syncing
	fsys.Gate <- nil
	if err := answer(first); err != nil || first.decidedOn == first.from {
		t.Fatalf("the first request: %v, decided on its own goroutine (%v); want the batcher's", err, first.decidedOn == first.from)
	}
	lingers()
	lone := run() // nothing in flight, nothing waiting
	<-fsys.Syncing
	var during []*sent
	for range 3 {
		during = append(during, run())
	}
	testwait.Until(t, "three requests to wait", func() bool { return b.Received() == 5 }, nil)
	n := decided.Load()
	fsys.Gated.Store(false)
	fsys.Gate <- nil
	if n != 3 {
		t.Fatalf("%d requests decided by the end of the lone request's fsync; want the plain one, the first and the lone one", n)
	}
	if err := answer(lone); err != nil || lone.decidedOn != lone.from {
		t.Fatalf("the lone request: %v, decided on its own goroutine %v; want true", err, lone.decidedOn == lone.from)
	}
	for _, s := range during {
		if err := answer(s); err != nil || s.decidedOn == s.from {
			t.Fatalf("a request that came during its fsync: %v, decided on its own goroutine (%v); want the batcher's", err, s.decidedOn == s.from)
		}
	}
	mu.Lock()
	got := fmt.Sprint(sizes)
	mu.Unlock()
	if got != "[1 1 3]" {
		t.Fatalf("batches of %s; want the first, the lone one, and the three that came during its fsync together", got)
	}

	fsys.Gated.Store(true)
	lingers()
	failing := run()
	<-fsys.Syncing
	fsys.Gated.Store(false) // the cut back fsyncs too
	fsys.Gate <- errors.New("injected: EIO")
	var failed *store.AppendError
	if err := answer(failing); !errors.As(err, &failed) || !failed.RolledBack || failing.decidedOn != failing.from {
		t.Fatalf("the lone request whose fsync failed: %v, decided on its own goroutine %v; want the failure, rolled back, and true", err, failing.decidedOn == failing.from)
	}
	after := run()
	if err := answer(after); err != nil {
		t.Fatalf("the request after the failure: %v", err)
	}
	b.Stop()
	if last, err := lastSeq(path); err != nil || last != 7 {
		t.Fatalf("the WAL: %v, %d records; want 7 submits, the failed one left out", err, last)
	}
}

// TestAPanicWhereARequestCameEndsTheProcess: a request decided where it
// came that panics ends the process, as one decided on the batcher's
// goroutine does, though its caller recovers (as net/http does): the
// server must not serve on from a pipe half decided.
func TestAPanicWhereARequestCameEndsTheProcess(t *testing.T) {
	if path := os.Getenv("LEASEWAL_TEST_PANIC_HERE"); path != "" {
		panicWhereItCame(path)
		return
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestAPanicWhereARequestCameEndsTheProcess$")
	cmd.Env = append(os.Environ(), "LEASEWAL_TEST_PANIC_HERE="+filepath.Join(t.TempDir(), "q.wal"))
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 2 || !strings.Contains(string(out), "panic: injected") {
		t.Fatalf("a process whose request panicked where it came: %v; want exit 2 and the panic\n%s", err, out)
	}
}

// panicWhereItCame opens a pipe on the WAL at path, has a request that
// panics decided where it came, recovers, and says it served on.
func panicWhereItCame(path string) {
	h := store.Open(store.Options{Path: path, LockTimeout: time.Second, Resident: true})
	b := newBatcher(NewWALBackend(h, "http://test"), 64, nil, time.Hour)
	if _, err := b.Run(context.Background(), submitNoting(nil)); err != nil { // a pipe on no WAL never lingers: it creates one
		fmt.Println("the first request:", err)
		os.Exit(1)
	}
	for waited := time.Duration(0); !b.lingering.Load(); waited += time.Millisecond {
		if waited > testwait.HangGuard {
			fmt.Println("hang guard: the pipe never lingered")
			os.Exit(1)
		}
		time.Sleep(time.Millisecond)
	}
	func() {
		defer func() { _ = recover() }()
		_, _ = b.Run(context.Background(), func(*store.Tx) error { panic("injected") })
	}()
	fmt.Println("served on after the panic")
	os.Exit(0)
}

// submitNoting is a request that submits a task, telling noted (if not
// nil) its id once decided, before its record is committed.
func submitNoting(noted func(taskID string)) func(tx *store.Tx) error {
	return func(tx *store.Tx) error {
		d, err := tx.State.DecideSubmit(state.Submit{Payload: "p", Window: state.Duration(time.Minute), Policy: state.RetryPolicy{MaxAttempts: 1}}, tx.Now)
		if err != nil {
			return err
		}
		if noted != nil {
			noted(d.TaskID)
		}
		return tx.Commit(d.Records)
	}
}

// goroutine names the goroutine that calls it.
func goroutine() string {
	buf := make([]byte, 64)
	return strings.Fields(string(buf[:runtime.Stack(buf, false)]))[1]
}

// TestABusyPipeLetsLocalCommandsIn: clients that send their next request as
// soon as they are answered never leave the pipe idle long enough for it
// to let the lock go by itself; a local writer, and a local reader, that wait
// for the WAL are seen in its turnstile and get their turn all the same.
// (Their minute of patience is a hang guard: the lock is theirs within a
// few batches.)
func TestABusyPipeLetsLocalCommandsIn(t *testing.T) {
	path := filepath.Join(t.TempDir(), "q.wal")
	submit := submitNoting(nil)
	h := store.Open(store.Options{Path: path, LockTimeout: time.Second, Resident: true})
	defer h.Close()
	b := NewBatcher(NewWALBackend(h, "http://test"), 64, nil)
	defer b.Stop()
	const clients = 4
	stop, busy := make(chan struct{}), make(chan error, clients)
	var answered atomic.Int64
	var served sync.WaitGroup
	for range clients {
		served.Add(1)
		go func() {
			defer served.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				if _, err := b.Run(context.Background(), submit); err != nil {
					busy <- err
					return
				}
				answered.Add(1)
			}
		}()
	}
	defer func() { close(stop); served.Wait() }()
	testwait.Until(t, "the server's first answers", func() bool { return answered.Load() > 10 }, func() string { return "" })
	local := store.Open(store.Options{Path: path, LockTimeout: time.Minute})
	defer local.Close()
	for i := range 3 {
		if err := local.Write(submit); err != nil {
			t.Fatalf("local write %d beside a busy server: %v", i, err)
		}
		var last int64
		if err := local.Read(func(tx *store.Tx) error { last = tx.State.LastSeq(); return nil }); err != nil || last == 0 {
			t.Fatalf("local read %d beside a busy server: %v (%d records)", i, err, last)
		}
	}
	select {
	case err := <-busy:
		t.Fatalf("the server's client stopped: %v", err)
	default:
	}
}

// TestWroteOnlyForWhatTheCompactorWaitsFor: a batch that leaves the WAL no
// larger than the compactor's size bound and is decided before its time
// does not signal Wrote; one past either does, as every batch does while
// the compactor says nothing.
func TestWroteOnlyForWhatTheCompactorWaitsFor(t *testing.T) {
	path := filepath.Join(t.TempDir(), "q.wal")
	h := store.Open(store.Options{Path: path, LockTimeout: time.Second, Resident: true})
	defer h.Close()
	b := newBatcher(NewWALBackend(h, "http://test"), 64, nil, time.Hour)
	defer b.Stop()
	submit := submitNoting(nil)
	if _, err := b.Run(context.Background(), submit); err != nil { // the pipe opens
		t.Fatal(err)
	}
	// Each request then finds the pipe lingering and is decided where it
	// came: the batch is signalled, or not, before its answer.
	signalled := func(w *lookWhen) bool {
		b.lookFor(w)
		testwait.Until(t, "the pipe to linger, idle", b.lingering.Load, nil)
		select { // what an earlier batch signalled
		case <-b.Wrote():
		default:
		}
		if _, err := b.Run(context.Background(), submit); err != nil {
			t.Fatal(err)
		}
		select {
		case <-b.Wrote():
			return true
		default:
			return false
		}
	}
	for _, c := range []struct {
		name string
		w    *lookWhen
		want bool
	}{
		{"the compactor says nothing", nil, true},
		{"below the size, before the time", &lookWhen{above: 1 << 40, at: math.MaxInt64}, false},
		{"below the size, no time", &lookWhen{above: 1 << 40}, false},
		{"past the size", &lookWhen{above: 1}, true},
		{"at the time", &lookWhen{above: 1 << 40, at: 1}, true},
	} {
		if got := signalled(c.w); got != c.want {
			t.Errorf("%s: Wrote signalled %v, want %v", c.name, got, c.want)
		}
	}
}
