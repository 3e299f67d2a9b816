package store_test

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/leasewal/leasewal/cmd"
	"github.com/leasewal/leasewal/internal/histgen"
	"github.com/leasewal/leasewal/internal/store"
	"github.com/leasewal/leasewal/wal"
)

// cli runs leasewal in-process and returns its exit code, stdout and stderr.
func cli(args ...string) (int, string, string) {
	var out, errOut bytes.Buffer
	code := cmd.Main(args, strings.NewReader(""), &out, &errOut)
	return code, out.String(), errOut.String()
}

const cpNow = "2026-11-01T00:00:00Z"

// historyWAL writes a realistic history of about n records to dir/q.wal.
func historyWAL(t *testing.T, dir string, n int) string {
	t.Helper()
	return backlogWAL(t, dir, n, 3)
}

// backlogWAL is historyWAL with waiting tasks left at its end.
func backlogWAL(t *testing.T, dir string, n, waiting int) string {
	t.Helper()
	path := filepath.Join(dir, "q.wal")
	if err := histgen.WriteFile(path, histgen.Options{Records: n, Waiting: waiting}); err != nil {
		t.Fatal(err)
	}
	return path
}

// stateOf is the whole state as inspect and worklease inspect print it.
func stateOf(t *testing.T, walPath string) string {
	t.Helper()
	_, tasks, e1 := cli("--wal", walPath, "--now", cpNow, "inspect", "-o", "json")
	_, domains, e2 := cli("--wal", walPath, "--now", cpNow, "worklease", "inspect", "-o", "json")
	if e1+e2 != "" && !strings.Contains(e1+e2, "warning") {
		t.Fatalf("inspect: %s %s", e1, e2)
	}
	return tasks + domains
}

func TestCheckpointIsWrittenAndUsed(t *testing.T) {
	dir := t.TempDir()
	walPath := historyWAL(t, dir, 1200)
	cpPath := walPath + store.CheckpointSuffix
	stateOf(t, walPath) // a full replay, by a reader: no checkpoint yet
	if _, err := os.Stat(cpPath); !os.IsNotExist(err) {
		t.Fatal("a reader wrote a checkpoint")
	}
	if code, out, _ := cli("--wal", walPath, "--now", cpNow, "expire", "-o", "json"); code != 0 {
		t.Fatalf("expire: %s", out)
	}
	if _, err := os.Stat(cpPath); err != nil {
		t.Fatalf("a writer past %d records wrote no checkpoint: %v", store.MinCheckpointTail, err)
	}
	if count, ok := store.LoadCheckpoint(walPath); !ok || count < 1200 {
		t.Fatalf("checkpoint of %d records, ok %v", count, ok)
	}
	want := stateOf(t, walPath) // expire may have changed records
	// Damage the WAL before the checkpoint's position: a command that starts
	// from the checkpoint never reads it (verify does, and says so).
	damaged := bytes.Clone(mustRead(t, walPath))
	damaged[100] ^= 1
	os.WriteFile(walPath, damaged, 0o644)
	if got := stateOf(t, walPath); got != want {
		t.Fatal("the state from the checkpoint differs from the full replay")
	}
	if code, _, _ := cli("--wal", walPath, "verify"); code != cmd.ExitDamaged {
		t.Fatal("verify must replay from scratch")
	}
}

func mustRead(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestBadCheckpointsAreIgnored: a checkpoint that is stale, truncated,
// bit-flipped, of another WAL, or ahead of the WAL is ignored, and every
// command sees exactly the state a full replay gives.
func TestBadCheckpointsAreIgnored(t *testing.T) {
	dir := t.TempDir()
	walPath := historyWAL(t, dir, 700)
	cpPath := walPath + store.CheckpointSuffix
	want := stateOf(t, walPath)
	good := mustReadCheckpoint(t, walPath, 400) // a checkpoint after record 400

	other := historyWAL(t, t.TempDir(), 900) // another history, longer
	foreign := mustReadCheckpoint(t, other, 600)

	cases := map[string][]byte{
		"older than the WAL (used, then the tail)": good,
		"truncated":        good[:len(good)/2],
		"empty":            {},
		"not a checkpoint": []byte("hello"),
		"of another WAL":   foreign,
		"ahead of the WAL": mustReadCheckpoint(t, other, 800),
	}
	for name, data := range cases {
		os.WriteFile(cpPath, data, 0o644)
		if got := stateOf(t, walPath); got != want {
			t.Fatalf("%s: the state differs from a full replay", name)
		}
	}
	flips := 0
	for i := 0; i < len(good); i += 97 {
		flipped := bytes.Clone(good)
		flipped[i] ^= 0x10
		if store.DecodesAsCheckpoint(flipped) {
			t.Fatalf("a checkpoint with byte %d flipped was accepted", i)
		}
		flips++
	}
	os.WriteFile(cpPath, good, 0o644)
	// The WAL cut below the checkpoint's position (as repair does) makes it stale.
	data := mustRead(t, walPath)
	os.WriteFile(walPath, data[:len(data)/3], 0o644)
	code, out, _ := cli("--wal", walPath, "--now", cpNow, "inspect", "-o", "json")
	if code != 0 || strings.Count(out, `"task_id"`) >= strings.Count(want, `"task_id"`) {
		t.Fatalf("a stale checkpoint was used for a shorter WAL: exit %d", code)
	}
	t.Logf("%d checkpoint cases and %d flipped bytes: each ignored or used exactly as a full replay", len(cases), flips)
}

// mustReadCheckpoint builds the checkpoint of walPath's first n records.
func mustReadCheckpoint(t *testing.T, walPath string, n int) []byte {
	t.Helper()
	data := mustRead(t, walPath)
	scanned, err := wal.Scan(data)
	if err != nil {
		t.Fatal(err)
	}
	prefix := filepath.Join(t.TempDir(), "prefix.wal")
	end := scanned.Frames[n].Offset
	os.WriteFile(prefix, data[:end], 0o644)
	cp, err := store.CheckpointOf(prefix)
	if err != nil {
		t.Fatal(err)
	}
	return cp
}

// TestCheckpointOfADeletedWAL: a checkpoint left behind by a deleted WAL is
// ignored; the next write starts a new WAL at seq 1.
func TestCheckpointOfADeletedWAL(t *testing.T) {
	dir := t.TempDir()
	walPath := historyWAL(t, dir, 300)
	if code, out, _ := cli("--wal", walPath, "--now", cpNow, "expire"); code != 0 {
		t.Fatal(out)
	}
	if _, err := os.Stat(walPath + store.CheckpointSuffix); err != nil {
		t.Fatalf("no checkpoint to leave behind: %v", err)
	}
	os.Remove(walPath)
	if code, out, _ := cli("--wal", walPath, "--now", cpNow, "inspect", "-o", "json"); code != 0 || !strings.Contains(out, `"tasks":[]`) {
		t.Fatalf("a missing WAL must read as empty: %s", out)
	}
	if code, out, _ := cli("--wal", walPath, "--now", cpNow, "submit", "--payload", "P", "-o", "json"); code != 0 || !strings.Contains(out, `"task_id":"T1"`) {
		t.Fatalf("submit on a fresh WAL: %s", out)
	}
	if code, out, _ := cli("--wal", walPath, "verify", "-o", "json"); code != 0 || !strings.Contains(out, `"records":1`) {
		t.Fatalf("verify: %s", out)
	}
}

// archivedPair writes the same history twice: the first WAL gets a
// checkpoint and an archive from a writing command, the second none.
func archivedPair(t *testing.T) (withArchive, plain string) {
	t.Helper()
	withArchive = backlogWAL(t, t.TempDir(), 3000, 300) // enough waiting for a cold set
	plain = filepath.Join(t.TempDir(), "q.wal")
	os.WriteFile(plain, mustRead(t, withArchive), 0o644)
	for _, walPath := range []string{withArchive, plain} {
		if code, out, errOut := cli("--wal", walPath, "--now", cpNow, "expire", "-o", "json"); code != 0 {
			t.Fatalf("expire: %s %s", out, errOut)
		}
	}
	info, err := os.Stat(runOf(t, withArchive, store.ArchiveSuffix))
	if err != nil {
		t.Fatalf("3000 records of history wrote no archive: %v", err)
	}
	runOf(t, withArchive, store.ColdSuffix) // 300 tasks waiting wrote a cold set
	t.Logf("archive of %d bytes, checkpoint of %d", info.Size(), len(mustRead(t, withArchive+store.CheckpointSuffix)))
	return withArchive, plain
}

// archiveProbes are commands whose answers depend on finished tasks: T1 and
// job-1 (98 p's) are long finished and archived.
var archiveProbes = [][]string{
	{"inspect", "T1", "-o", "json"},
	{"inspect", "T2", "--timeline"},
	{"submit", "--request-id", "job-1", "--payload", strings.Repeat("p", 98), "--window", "10m", "--max-attempts", "3", "-o", "json"},
	{"submit", "--request-id", "job-1", "--payload", "other", "-o", "json"},
	{"complete", "--task", "T1", "--lease", "L1", "-o", "json"},
	{"extend", "--task", "T5", "--lease", "L2", "-o", "json"},
	{"lease", "--worker", "X", "-o", "json"},
	{"submit", "--payload", "new", "-o", "json"},
	{"inspect", "-o", "json"},
	{"worklease", "inspect", "-o", "json"},
}

// TestArchiveAnswersAsAFullReplay runs the same commands against a WAL whose
// checkpoint keeps finished tasks in an archive and against the same WAL
// replayed in full each time: the exit codes, the output and the records
// written are the same.
func TestArchiveAnswersAsAFullReplay(t *testing.T) {
	withArchive, plain := archivedPair(t)
	for _, args := range archiveProbes {
		removeCaches(plain)
		code, out, errOut := cli(append([]string{"--wal", withArchive, "--now", cpNow}, args...)...)
		removeCaches(plain)
		wantCode, wantOut, wantErr := cli(append([]string{"--wal", plain, "--now", cpNow}, args...)...)
		if code != wantCode || out != wantOut || errOut != wantErr {
			t.Fatalf("%v: exit %d %s %s, a full replay says exit %d %s %s", args, code, out, errOut, wantCode, wantOut, wantErr)
		}
	}
	if !bytes.Equal(mustRead(t, withArchive), mustRead(t, plain)) {
		t.Fatal("the WALs differ")
	}
}

// TestDamagedArchiveIsReplayedAround: with the archive's index and records zeroed, or
// the archive of another WAL in its place, every command answers as a full
// replay does and writes what it writes; a damaged archive found by a lookup
// is reported as a warning, and its checkpoint is dropped (or replaced, with a
// new archive, by a writer).
func TestDamagedArchiveIsReplayedAround(t *testing.T) {
	for _, suffix := range []string{store.ArchiveSuffix, store.ColdSuffix} {
		t.Run(suffix, func(t *testing.T) { damagedSideFileIsReplayedAround(t, suffix) })
	}
}

func damagedSideFileIsReplayedAround(t *testing.T, suffix string) {
	withArchive, plain := archivedPair(t)
	run := runOf(t, withArchive, suffix)
	archive := mustRead(t, run)
	other, _ := archivedPair(t)
	zeroed := bytes.Clone(archive)
	clear(zeroed[200 : len(zeroed)-min(4096, len(zeroed)/4)]) // the records and most index blocks; the header and the fence at the end stay intact
	for name, bad := range map[string][]byte{"zeroed index and records": zeroed, "another WAL's": mustRead(t, runOf(t, other, suffix))} {
		reported := 0
		for _, args := range archiveProbes[2:] { // inspect of one task replays from scratch: it shows the records
			checkpoint := mustRead(t, withArchive+store.CheckpointSuffix)
			os.WriteFile(run, bad, 0o644)
			code, out, errOut := cli(append([]string{"--wal", withArchive, "--now", cpNow}, args...)...)
			wantCode, wantOut, _ := cli(append([]string{"--wal", plain, "--now", cpNow}, args...)...)
			os.Remove(plain + store.CheckpointSuffix)
			if code != wantCode || out != wantOut {
				t.Fatalf("%s %s, %v: exit %d %s %s, a full replay says exit %d %s", name, suffix, args, code, out, errOut, wantCode, wantOut)
			}
			// A command reports the damage it reads; one whose lookups land
			// in intact parts reads none.
			if strings.Contains(errOut, "archive of tasks") {
				reported++
				_, err := os.Stat(withArchive + store.CheckpointSuffix)
				if err == nil && bytes.Equal(mustRead(t, runOf(t, withArchive, suffix)), bad) {
					t.Fatalf("%v: the checkpoint of a damaged %s was kept", args, suffix) // dropped, or rewritten by a writer with new files
				}
			}
			os.WriteFile(withArchive+store.CheckpointSuffix, checkpoint, 0o644)
		}
		if name != "another WAL's" && reported == 0 {
			t.Fatalf("%s %s: no command reported the damage", name, suffix)
		}
	}
	if !bytes.Equal(mustRead(t, withArchive), mustRead(t, plain)) {
		t.Fatal("the WALs differ")
	}
}

// TestLeftoverTemporaryFilesAreRemoved: the temporary files a crash leaves
// while writing a checkpoint or a run, a run no checkpoint names, and the
// files of an older leasewal, are removed by the next writer that writes a
// checkpoint, also when the WAL's name holds glob characters.
func TestLeftoverTemporaryFilesAreRemoved(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "odd [dir]*")
	os.Mkdir(dir, 0o755)
	walPath := filepath.Join(dir, "q?.wal")
	os.WriteFile(walPath, mustRead(t, historyWAL(t, t.TempDir(), 2500)), 0o644)
	leftovers := []string{
		walPath + store.ArchiveSuffix + "-00000000000000ab.tmp-123", walPath + store.CheckpointSuffix + ".tmp-9",
		walPath + store.ColdSuffix + "-00000000000000cd",                     // written whole, never named: a crash came before its checkpoint
		walPath + store.ArchiveSuffix, walPath + store.ColdSuffix + ".tmp-5", // an older leasewal's
	}
	for _, path := range leftovers {
		os.WriteFile(path, []byte("half"), 0o644)
	}
	unrelated := filepath.Join(dir, "qx.wal"+store.ArchiveSuffix+".tmp-1") // another WAL's, which ? would match
	os.WriteFile(unrelated, []byte("theirs"), 0o644)
	if code, out, errOut := cli("--wal", walPath, "--now", cpNow, "expire"); code != 0 {
		t.Fatal(out, errOut)
	}
	for _, path := range leftovers {
		if _, err := os.Stat(path); err == nil {
			t.Fatalf("%s is still there", path)
		}
	}
	if _, err := os.Stat(unrelated); err != nil {
		t.Fatalf("another WAL's file was removed: %v", err)
	}
	runOf(t, walPath, store.ArchiveSuffix)
}

// runOf is the path of the one run of the archive (suffix ArchiveSuffix) or
// of the cold set beside the WAL at walPath, as a one-shot writer leaves it.
func runOf(t *testing.T, walPath, suffix string) string {
	t.Helper()
	var runs []string
	for _, path := range store.Caches(walPath) {
		if rest, ok := strings.CutPrefix(path, walPath+suffix+"-"); ok && !strings.Contains(rest, ".tmp-") {
			runs = append(runs, path)
		}
	}
	if len(runs) != 1 {
		t.Fatalf("beside %s: %d runs of %s (%v), want 1", walPath, len(runs), suffix, store.Caches(walPath))
	}
	return runs[0]
}

// removeCaches removes the checkpoint and the runs beside walPath.
func removeCaches(walPath string) {
	for _, path := range store.Caches(walPath) {
		os.Remove(path)
	}
}
