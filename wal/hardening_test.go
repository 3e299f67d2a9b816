package wal

import (
	"errors"
	"os"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/leasewal/leasewal/internal/testwait"
)

// TestLongZeroTailIsReadInBoundedMemory: a crash can leave zeros of any
// length past the last record (here 256 MiB, a sparse file). Reading it costs
// a bounded amount of memory, it is a torn tail (nothing in it was ever
// acknowledged), and the keepsake a writer makes of it is sparse too.
func TestLongZeroTailIsReadInBoundedMemory(t *testing.T) {
	path, _ := buildWAL(t, 3)
	info, _ := os.Stat(path)
	const zeros = 256 << 20
	if err := os.Truncate(path, info.Size()+zeros); err != nil {
		t.Fatal(err)
	}
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	l, err := OpenAt(path, Write, time.Second, Position{}, nil)
	runtime.ReadMemStats(&after)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if allocated := after.TotalAlloc - before.TotalAlloc; allocated > 8<<20 {
		t.Fatalf("reading a %d MiB zero tail allocated %d MiB", zeros>>20, allocated>>20)
	}
	if l.Torn == nil || l.Torn.Length != zeros || l.Count != 3 {
		t.Fatalf("torn %+v after %d records", l.Torn, l.Count)
	}
	cut, err := l.Append(body(4))
	if err != nil {
		t.Fatal(err)
	}
	var st syscall.Stat_t
	if err := syscall.Stat(cut.SavedAs, &st); err != nil {
		t.Fatal(err)
	}
	if st.Size != zeros || st.Blocks*512 > 1<<20 {
		t.Fatalf("keepsake of %d bytes takes %d bytes of disk", st.Size, st.Blocks*512)
	}
}

// TestOversizedLastFrameIsNotSaidToBeFollowed: a checksum-valid frame over the
// size limit as the last line is damage (no writer writes it), and the
// message does not claim that records follow it.
func TestOversizedLastFrameIsNotSaidToBeFollowed(t *testing.T) {
	path, _ := buildWAL(t, 2)
	huge := make([]byte, MaxBodySize+100)
	for i := range huge {
		huge[i] = 'a'
	}
	huge[0], huge[len(huge)-1] = '{', '}'
	f, _ := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	f.WriteString("0badc0de ")
	f.Write(huge)
	f.WriteString("\n")
	f.Close()
	_, err := OpenAt(path, Read, time.Second, Position{}, nil)
	var dmg *DamageError
	if !errors.As(err, &dmg) || dmg.Index != 3 || strings.Contains(err.Error(), "follow") || !strings.Contains(err.Error(), "never writes") {
		t.Fatalf("got %v", err)
	}
}

// failingStore fails every fsync and every truncate: a rollback that cannot
// restore the file.
type failingStore struct{ Storage }

func (failingStore) Sync() error               { return syscall.EIO }
func (failingStore) Truncate(size int64) error { return syscall.EROFS }

// TestDoubleFaultNamesTheRecordsLeftBehind: when the fsync of an append fails
// and so does the truncate that would undo it, the error says which records
// may be left in the WAL.
func TestDoubleFaultNamesTheRecordsLeftBehind(t *testing.T) {
	path, _ := buildWAL(t, 3)
	l, err := OpenAt(path, Write, time.Second, Position{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	l.Route(Seam{Wrap: func(s Storage) Storage { return failingStore{s} }})
	_, err = l.AppendBatch([][]byte{body(4), body(5)}, 1)
	var ae *AppendError
	if !errors.As(err, &ae) || ae.RolledBack || !strings.Contains(err.Error(), "records 4 to 5") || !strings.Contains(err.Error(), "verify") {
		t.Fatalf("got %v", err)
	}
}

// TestWaitingWriterGoesBeforeNewReaders: readers do not starve writers.
// While a writer waits for a reader to let go of the WAL, a reader that comes
// later queues behind the writer (at the turnstile) instead of sharing the
// lock with the first reader.
func TestWaitingWriterGoesBeforeNewReaders(t *testing.T) {
	path, _ := buildWAL(t, 1)
	open := func() *os.File {
		f, err := os.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		return f
	}
	var mu sync.Mutex
	var order []string
	note := func(s string) { mu.Lock(); order = append(order, s); mu.Unlock() }
	first := open()
	if err := lockFair(first, path, unix.LOCK_SH, time.Second); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		w := open()
		defer w.Close()
		if err := lockFair(w, path, unix.LOCK_EX, testwait.HangGuard); err != nil {
			t.Error(err)
		}
		note("writer")
		time.Sleep(50 * time.Millisecond)
	}()
	testwait.UntilLockWaiters(t, path, 1) // the writer waits for the WAL, holding the turnstile
	go func() {
		defer wg.Done()
		r := open()
		defer r.Close()
		if err := lockFair(r, path, unix.LOCK_SH, testwait.HangGuard); err != nil {
			t.Error(err)
		}
		note("later reader")
	}()
	testwait.UntilLockWaiters(t, path+TurnstileSuffix, 1) // the later reader waits at the turnstile, behind the writer
	note("first reader done")
	first.Close()
	wg.Wait()
	if got := strings.Join(order, ", "); got != "first reader done, writer, later reader" {
		t.Fatalf("order: %s", got)
	}
}

// TestReaderReadsWithoutHoldingTheLock: a reader holds the shared lock only
// to fix the end of what it reads, so a writer gets the lock while a long
// replay is still running; what the reader reads is the prefix it fixed.
func TestReaderReadsWithoutHoldingTheLock(t *testing.T) {
	path, _ := buildWAL(t, 50)
	var writerGotIn bool
	frames := 0
	l, err := OpenAt(path, Read, time.Second, Position{}, func(Frame) error {
		if frames++; frames == 10 { // in the middle of the replay, a writer appends
			w, err := OpenAt(path, Write, 100*time.Millisecond, Position{}, nil)
			if err != nil {
				return err
			}
			defer w.Close()
			if _, err := w.Append(body(51)); err != nil {
				return err
			}
			writerGotIn = true
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	l.Close()
	if !writerGotIn || l.Count != 50 || l.Torn != nil {
		t.Fatalf("writer got in: %v; the reader read %d frames, torn %+v", writerGotIn, l.Count, l.Torn)
	}
}

// TestVersionOneFileIsUpgradedInPlace: a file written before revision 2
// (header v1) is read, appended to as v1 while its records need no more, and
// upgraded by rewriting its header's digit when a record needs v2; the chain
// of checksums holds across the upgrade.
func TestVersionOneFileIsUpgradedInPlace(t *testing.T) {
	path, _ := buildWAL(t, 2)
	data, _ := os.ReadFile(path)
	copy(data, HeaderLine(1)) // as revision 1 wrote it: the chain does not depend on the digit
	os.WriteFile(path, data, 0o644)
	l, err := OpenAt(path, Write, time.Second, Position{}, nil)
	if err != nil || l.Version != 1 || l.Count != 2 {
		t.Fatalf("a v1 file: version %d, %d frames, %v", l.Version, l.Count, err)
	}
	if _, err := l.AppendBatch([][]byte{body(3)}, 1); err != nil || l.Version != 1 {
		t.Fatalf("a v1 append: version %d, %v", l.Version, err)
	}
	if _, err := l.AppendBatch([][]byte{body(4)}, 2); err != nil || l.Version != 2 {
		t.Fatalf("a v2 append: version %d, %v", l.Version, err)
	}
	l.Close()
	data, _ = os.ReadFile(path)
	s, err := Scan(data)
	if err != nil || s.Version != 2 || len(s.Frames) != 4 || s.Torn != nil {
		t.Fatalf("after the upgrade: %+v, %v", s, err)
	}
}
