package cmd

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/leasewal/leasewal/internal/index"
)

// TestBackup: a backup is the WAL's records (with --index, its index beside
// it), verifies, and answers every read as the original; one taken
// while writers append is a consistent prefix of the WAL; an existing
// destination is never overwritten; it is a local command only.
func TestBackup(t *testing.T) {
	t.Parallel()
	walPath := historyWAL(t, 2000)
	if code, _, stderr := cli("--wal", walPath, "--now", "2026-11-01T00:00:00Z", "submit", "--payload", "p"); code != 0 {
		t.Fatal(stderr) // a writer: it leaves an index beside the WAL
	}
	dir := t.TempDir()
	copyPath := filepath.Join(dir, "copy.wal")
	code, out, stderr := cli("--wal", walPath, "backup", copyPath, "--index", "-o", "json")
	if code != 0 || !strings.Contains(out, `"index":"`+copyPath+`.index"`) {
		t.Fatalf("backup --index: exit %d %s %s; want the index", code, out, stderr)
	}
	if db, err := index.Open(copyPath+index.Suffix, false, time.Second); err != nil {
		t.Fatalf("the index copied does not open beside the copy: %v", err)
	} else if meta, _, err := db.Meta(); db.Close() != nil || err != nil || meta.Seq < 2000 {
		t.Fatalf("the index copied holds %+v (%v); want the WAL's records", meta, err)
	}
	if code, _, stderr := cli("--wal", copyPath, "verify"); code != 0 {
		t.Fatalf("the copy does not verify: %s", stderr)
	}
	for _, args := range [][]string{{"log", "-o", "json"}, {"inspect", "-o", "json"}} {
		at := []string{"--now", "2026-11-02T00:00:00Z"}
		_, fromWAL, _ := cli(append(append([]string{"--wal", walPath}, at...), args...)...)
		_, fromCopy, _ := cli(append(append([]string{"--wal", copyPath}, at...), args...)...)
		if fromWAL != fromCopy || fromWAL == "" {
			t.Fatalf("%v answers differently from the copy", args)
		}
	}
	before := mustRead(t, copyPath)
	if code, _, stderr := cli("--wal", walPath, "backup", copyPath); code != ExitUsage || !strings.Contains(stderr, "never overwrites") {
		t.Fatalf("a backup onto an existing file: exit %d %s", code, stderr)
	}
	if !bytes.Equal(before, mustRead(t, copyPath)) {
		t.Fatal("a refused backup changed the existing file")
	}
	if code, _, stderr := cli("--server", "http://127.0.0.1:1", "backup", filepath.Join(dir, "x.wal")); code != ExitUsage || !strings.Contains(stderr, "own machine") {
		t.Fatalf("backup --server: exit %d %s", code, stderr)
	}
	// Beside writers: the copy holds a prefix of what the WAL holds at the end.
	var wg sync.WaitGroup
	for w := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 20 {
				if code, _, stderr := cli("--wal", walPath, "--now", "+1s", "submit", "--payload", "w"+string(rune('0'+w))); code != 0 {
					t.Error(stderr)
					return
				}
			}
		}()
	}
	during := filepath.Join(dir, "during.wal")
	if code, _, stderr := cli("--wal", walPath, "backup", during); code != 0 {
		t.Fatal(stderr)
	}
	wg.Wait()
	copied, final := mustRead(t, during), mustRead(t, walPath)
	if !bytes.HasPrefix(final, copied) || len(copied) < len(before) {
		t.Fatalf("the backup taken beside writers (%d bytes) is not a prefix of the WAL (%d bytes)", len(copied), len(final))
	}
	if code, _, stderr := cli("--wal", during, "verify"); code != 0 {
		t.Fatalf("the backup taken beside writers does not verify: %s", stderr)
	}
	if _, err := os.Stat(during + ".index"); err == nil {
		t.Fatal("a backup without --index copied the index")
	}
}
