package scenarios

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/leasewal/leasewal/internal/histgen"
	"github.com/leasewal/leasewal/internal/index"
)

// TestIndexCrashImages: the index beside a WAL as crashes and damage leave
// it never changes an answer. From every image (a reindex killed at a
// random moment of its rebuild; a server killed at a random moment while
// its committer writes the index; a good index with bytes flipped, pages
// zeroed or its end cut off at random places; an index synced before the
// machine restarted whose branch pages name themselves) the next commands
// answer exactly as a replay of the WAL alone does, verify passes, and a
// writer leaves an index the command after it reads.
func TestIndexCrashImages(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	src := filepath.Join(dir, "src.wal")
	if err := histgen.WriteFile(src, histgen.Options{Records: 20_000, Waiting: 2_000}); err != nil {
		t.Fatal(err)
	}
	seed := time.Now().UnixNano()
	if s, err := strconv.ParseInt(os.Getenv("LEASEWAL_SEED"), 10, 64); err == nil {
		seed = s // a failure's seed, to see it again
	}
	rng := rand.New(rand.NewPCG(uint64(seed), 44))
	t.Logf("seed %d", seed)

	// Each image is a directory of its own holding q.wal and what stands
	// beside it.
	image := func(withIndex bool) string {
		p := filepath.Join(t.TempDir(), "q.wal")
		copyTo(t, src, p)
		if withIndex {
			copyTo(t, src+".index", p+".index")
		}
		return p
	}
	if code, out, errOut := run(t, src, nil, "reindex"); code != 0 {
		t.Fatalf("reindex: exit %d %s %s", code, out, errOut)
	}
	began := time.Now()
	run(t, image(true), nil, "reindex")
	rebuild := time.Since(began)

	check := func(t *testing.T, p, what string) {
		t.Helper()
		alone := filepath.Join(t.TempDir(), "alone.wal")
		copyTo(t, p, alone)
		want := answersOf(t, alone)
		if got := answersOf(t, p); got != want {
			t.Fatalf("%s: the next command answers differently from a replay of the WAL alone", what)
		}
		if code, out, errOut := capped(t, p, nil, "verify", "-o", "json"); code != 0 {
			t.Fatalf("%s: verify: exit %d %s %s", what, code, out, errOut)
		}
		if code, out, errOut := capped(t, p, nil, "submit", "--payload", "after", "--request-id", "after", "-o", "json"); code != 0 {
			t.Fatalf("%s: a writer after it: exit %d %s %s", what, code, out, errOut)
		}
		copyTo(t, p, alone)
		if got, want := answersOf(t, p), answersOf(t, alone); got != want {
			t.Fatalf("%s: after a writer, the answers differ from a replay of the WAL alone", what)
		}
	}

	good, err := os.ReadFile(src + ".index")
	if err != nil {
		t.Fatal(err)
	}

	t.Run("reindex killed", func(t *testing.T) {
		for i := range 4 {
			p := image(true)
			cmd := exec.Command(binary(), "--wal", p, "reindex")
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			time.Sleep(time.Duration(rng.Int64N(int64(rebuild)*5/4 + 1)))
			cmd.Process.Kill()
			cmd.Wait()
			check(t, p, fmt.Sprintf("reindex killed (%d)", i))
		}
	})

	t.Run("server killed while it writes the index", func(t *testing.T) {
		for i := range 2 {
			p := image(true)
			server, url, _ := startServe(t, "--wal", p, "serve", "--listen", "127.0.0.1:0")
			batch := filepath.Join(t.TempDir(), "batch.jsonl")
			var lines strings.Builder
			for j := range 200 {
				fmt.Fprintf(&lines, "{\"payload\":\"p%d\"}\n", j)
			}
			if err := os.WriteFile(batch, []byte(lines.String()), 0o600); err != nil {
				t.Fatal(err)
			}
			stop := make(chan struct{})
			var clients sync.WaitGroup
			clients.Add(2)
			client := func(work func()) {
				defer clients.Done()
				for {
					select {
					case <-stop:
						return
					default:
						work()
					}
				}
			}
			go client(func() { exec.Command(binary(), "--server", url, "submit", "--batch-file", batch).Run() })
			go client(func() { // work done, and the next task leased
				out, err := exec.Command(binary(), "--server", url, "lease", "--worker", "W", "-o", "json").Output()
				if m := leased.FindStringSubmatch(string(out)); err == nil && m != nil {
					exec.Command(binary(), "--server", url, "complete", "--task", m[1], "--lease", m[2]).Run()
				}
			})
			time.Sleep(300*time.Millisecond + time.Duration(rng.Int64N(int64(1200*time.Millisecond))))
			server.Process.Kill()
			server.Wait()
			close(stop)
			clients.Wait()
			if n := countRecords(t, p); n <= countRecords(t, src) {
				t.Fatalf("the server wrote nothing before it was killed (%d records)", n)
			}
			if written, _ := os.ReadFile(p + ".index"); bytes.Equal(written, good) {
				t.Fatal("the server never wrote the index before it was killed: the image is not one of a commit")
			}
			check(t, p, fmt.Sprintf("server killed (%d)", i))
		}
	})

	t.Run("an end that 5,000 tasks wait for", func(t *testing.T) {
		deps := filepath.Join(t.TempDir(), "deps.wal")
		var lines strings.Builder
		lines.WriteString("{\"payload\":\"up\",\"request_id\":\"up\",\"queue\":\"up\"}\n")
		for i := range 5000 { // more than a chunk: written into the index 4,096 at a time
			fmt.Fprintf(&lines, "{\"payload\":\"d%d\",\"after\":[\"up\"],\"queue\":\"down\"}\n", i)
		}
		batch := filepath.Join(t.TempDir(), "deps.jsonl")
		if err := os.WriteFile(batch, []byte(lines.String()), 0o600); err != nil {
			t.Fatal(err)
		}
		for _, args := range [][]string{{"submit", "--batch-file", batch}, {"reindex"}} {
			if code, out, errOut := run(t, deps, nil, args...); code != 0 {
				t.Fatalf("%v: exit %d %s %s", args, code, out, errOut)
			}
		}
		image := func() string {
			p := filepath.Join(t.TempDir(), "q.wal")
			copyTo(t, deps, p)
			copyTo(t, deps+".index", p+".index")
			if code, out, errOut := run(t, p, nil, "lease", "--worker", "W", "--queue", "up"); code != 0 {
				t.Fatalf("lease: exit %d %s %s", code, out, errOut)
			}
			return p
		}

		// Killed after its first chunk is in the index, before its record is
		// in the WAL.
		p := image()
		code, out, _ := run(t, p, []string{"LEASEWAL_FAILPOINT=index-partial"}, "complete", "--task", "T1", "--lease", "L1")
		if code != -int(syscall.SIGKILL) || out != "" {
			t.Fatalf("the complete was not killed where it writes its dependents into the index: exit %d %s", code, out)
		}
		check(t, p, "an end killed while it writes its dependents")
		if code, out, errOut := run(t, p, nil, "lease", "--worker", "W", "--queue", "down"); code != 4 {
			t.Fatalf("a dependent was leased although the end that releases it is not in the WAL: exit %d %s %s", code, out, errOut)
		}

		// Through a server, which stops cleanly at once: the index it leaves
		// holds the end, and is not built again.
		p = image()
		server, url, _ := startServe(t, "--wal", p, "serve", "--listen", "127.0.0.1:0")
		if out, err := exec.Command(binary(), "--server", url, "complete", "--task", "T1", "--lease", "L1").CombinedOutput(); err != nil {
			t.Fatalf("complete through the server: %v %s", err, out)
		}
		server.Process.Signal(syscall.SIGTERM)
		server.Wait()
		if code, out, errOut := run(t, p, nil, "lease", "--worker", "W", "--queue", "down"); code != 0 || errOut != "" {
			t.Fatalf("after the server's clean stop, a lease of what the end released: exit %d %s %s", code, out, errOut)
		}
		check(t, p, "an end through a server")
	})

	// An index synced before the machine restarted whose branch pages name
	// themselves (a crash of the machine under bbolt has left such loops:
	// etcd-io/bbolt#701): bbolt would follow them until the process ran
	// out of memory. Each command under a cap of its address space (a
	// regression ends there, not in the machine's memory) answers as a
	// replay of the WAL alone, and a writer builds the index again.
	t.Run("pages in a loop, synced before the machine restarted", func(t *testing.T) {
		p := image(true)
		db, err := index.Open(p+index.Suffix, true, 0)
		if err != nil {
			t.Fatal(err)
		}
		m, head, err := db.Meta()
		if err != nil {
			t.Fatal(err)
		}
		m.Boot, m.Synced = "an earlier boot", true
		if err := db.Write(nil, head, m, true); err != nil {
			t.Fatal(err)
		}
		db.Close()
		b, err := os.ReadFile(p + index.Suffix)
		if err != nil {
			t.Fatal(err)
		}
		loops := 0
		for page := 0; page+4096 <= len(b); page += 4096 {
			if b[page+8] == 0x01 && b[page+9] == 0 { // a branch page (bbolt's flags, little-endian): its last entry names it
				count := int(b[page+10]) | int(b[page+11])<<8
				copy(b[page+16+16*(count-1)+8:], b[page:page+8])
				loops++
			}
		}
		if loops == 0 {
			t.Fatal("the index has no branch page")
		}
		if err := os.WriteFile(p+index.Suffix, b, 0o600); err != nil {
			t.Fatal(err)
		}
		alone := filepath.Join(t.TempDir(), "alone.wal")
		copyTo(t, p, alone)
		for i, args := range [][]string{{"inspect", "-o", "json", "--now", "+1s"}, {"stats", "-o", "json", "--now", "+1s", "--recent", "0"}, {"submit", "--payload", "after", "--request-id", "after", "-o", "json", "--now", "+1s"}, {"inspect", "-o", "json", "--now", "+2s"}} {
			code, got, warned := capped(t, p, nil, args...)
			if code != 0 {
				t.Fatalf("%v: exit %d %s", args, code, warned)
			}
			code, want, errOut := run(t, alone, nil, args...)
			if code != 0 {
				t.Fatalf("%v on the WAL alone: exit %d %s", args, code, errOut)
			}
			if got != want {
				t.Fatalf("%v: answered differently from a replay of the WAL alone:\n%s\nwant\n%s", args, got, want)
			}
			if damaged := strings.Contains(warned, "is damaged"); damaged != (i == 0) { // the writer builds the index again
				t.Fatalf("%v: said %q", args, warned)
			}
		}
	})

	t.Run("damaged copies", func(t *testing.T) {
		for i := range 6 {
			p := image(false)
			b := bytes.Clone(good)
			at := rng.IntN(len(b))
			var what string
			switch i % 3 {
			case 0:
				for j := at; j < min(at+16, len(b)); j++ {
					b[j] ^= byte(1 + rng.IntN(255))
				}
				what = fmt.Sprintf("16 bytes flipped at %d", at)
			case 1:
				at -= at % 4096
				clear(b[at:min(at+4096, len(b))])
				what = fmt.Sprintf("the page at %d zeroed", at)
			default:
				b = b[:at]
				what = fmt.Sprintf("cut at %d", at)
			}
			if err := os.WriteFile(p+".index", b, 0o600); err != nil {
				t.Fatal(err)
			}
			check(t, p, what)
		}
	})
}

var leased = regexp.MustCompile(`"task_id":"(T\d+)","lease_id":"(L\d+)"`)

// answersOf is what the commands that read every task answer on the WAL
// at p, as it stands beside what it has: every task, the domains, the
// counts.
func answersOf(t *testing.T, p string) string {
	t.Helper()
	var all strings.Builder
	for _, args := range [][]string{{"inspect", "-o", "json", "--now", "+1s"}, {"worklease", "inspect", "-o", "json", "--now", "+1s"}, {"stats", "-o", "json", "--now", "+1s", "--recent", "0"}} {
		code, out, errOut := capped(t, p, nil, args...)
		if code != 0 {
			t.Fatalf("%v: exit %d %s", args, code, errOut)
		}
		all.WriteString(out)
	}
	return all.String()
}

// capped is run with the command's address space capped at 4 GB: an index
// whose damage sends bbolt down a loop of pages (docs/not-done.md) ends the
// command (exit 2, out of memory) rather than take the machine's memory.
func capped(t *testing.T, walPath string, env []string, args ...string) (int, string, string) {
	t.Helper()
	return runProgram(t, "bash", walPath, env, append([]string{"-c", `ulimit -v 4000000; exec "$0" "$@"`, binary()}, args...)...)
}

func copyTo(t *testing.T, from, to string) {
	t.Helper()
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, b, 0o600); err != nil {
		t.Fatal(err)
	}
}
