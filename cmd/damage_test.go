package cmd

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/leasewal/leasewal/internal/histgen"
	"github.com/leasewal/leasewal/wal"
)

// realisticWAL returns a WAL of at least n records of every kind (see histgen).
func realisticWAL(t *testing.T, n int) []byte {
	t.Helper()
	var buf bytes.Buffer
	if _, err := histgen.Write(&buf, histgen.Options{Records: n}); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// verifyFile runs `verify -o json` on data and returns the exit code, the
// decoded answer and stderr.
func verifyFile(t *testing.T, dir string, data []byte) (int, map[string]any, string) {
	t.Helper()
	path := filepath.Join(dir, "cut.wal")
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	var out, errOut bytes.Buffer
	code := Main([]string{"--wal", path, "verify", "-o", "json", "--now", "2030-01-01T00:00:00Z"}, strings.NewReader(""), &out, &errOut)
	var v map[string]any
	if err := json.Unmarshal(out.Bytes(), &v); err != nil {
		t.Fatalf("verify printed no JSON: %q", out.String())
	}
	return code, v, errOut.String()
}

// TestCutAtEveryByte cuts a realistic WAL at every byte offset. Every cut must
// scan as exactly the longest valid prefix of frames, byte for byte, with a
// torn tail exactly when a partial record remains; at every frame boundary and
// in the middle of every frame the whole CLI path (replay, verify) must agree,
// warning of the torn tail. The scans cost the square of the WAL's size: 120
// records by default, 300 under LEASEWAL_SOAK=1 (set by .ci/run).
func TestCutAtEveryByte(t *testing.T) {
	t.Parallel()
	records := 120
	if os.Getenv("LEASEWAL_SOAK") == "1" {
		records = 300
	}
	data := realisticWAL(t, records)
	whole, err := wal.Scan(data)
	if err != nil {
		t.Fatal(err)
	}
	frames := whole.Frames
	ends := make([]int, len(frames))
	for i := range frames {
		ends[i] = int(whole.End)
		if i+1 < len(frames) {
			ends[i] = int(frames[i+1].Offset)
		}
	}
	dir := t.TempDir()
	cliChecks := 0
	for cut, complete := len(wal.HeaderLine(wal.Version)), 0; cut <= len(data); cut++ {
		for complete < len(ends) && ends[complete] <= cut {
			complete++
		}
		s, err := wal.Scan(data[:cut])
		if err != nil || len(s.Frames) != complete {
			t.Fatalf("cut %d: %v, %d frames, want %d", cut, err, len(s.Frames), complete)
		}
		for i, f := range s.Frames {
			if !bytes.Equal(f.Body, frames[i].Body) {
				t.Fatalf("cut %d: record %d altered", cut, i+1)
			}
		}
		boundary := cut == len(wal.HeaderLine(wal.Version)) || (complete > 0 && ends[complete-1] == cut)
		if (s.Torn == nil) != boundary {
			t.Fatalf("cut %d: torn tail %v at a boundary %v", cut, s.Torn, boundary)
		}
		start, next := len(wal.HeaderLine(wal.Version)), len(data) // the partial frame's extent
		if complete > 0 {
			start = ends[complete-1]
		}
		if complete < len(ends) {
			next = ends[complete]
		}
		if cut > len(wal.HeaderLine(wal.Version)) && (boundary || cut == start+(next-start)/2) {
			cliChecks++
			code, v, stderr := verifyFile(t, dir, data[:cut])
			if code != 0 || int(v["records"].(float64)) != complete {
				t.Fatalf("cut %d: verify exit %d %v", cut, code, v)
			}
			if torn := v["torn_tail_bytes"].(float64) > 0; torn == boundary || torn != strings.Contains(stderr, "warning: ignoring") {
				t.Fatalf("cut %d: torn %v, boundary %v, stderr %q", cut, torn, boundary, stderr)
			}
		}
	}
	t.Logf("cut a %d-record, %d-byte WAL at every one of its %d byte offsets past the header; %d cuts replayed and verified through the CLI",
		len(frames), len(data), len(data)-len(wal.HeaderLine(wal.Version))+1, cliChecks)
}

// TestFlipEveryBitThroughVerify flips every bit of a small WAL and runs verify:
// exit 5 naming the record that holds the bit (or NotAWAL for the header), or,
// in the last record only, a torn tail and the valid prefix of records.
func TestFlipEveryBitThroughVerify(t *testing.T) {
	t.Parallel()
	data := realisticWAL(t, 3)
	whole, _ := wal.Scan(data)
	last := whole.Frames[len(whole.Frames)-1]
	recordOf := func(off int) int {
		n := 0
		for _, f := range whole.Frames {
			if int(f.Offset) <= off {
				n = f.Index
			}
		}
		return n
	}
	dir := t.TempDir()
	flips := 0
	// The wal package flips every bit of a WAL against the scanner itself;
	// here, through the whole command, every 11th bit is enough by default
	// and LEASEWAL_SOAK=1 (set by .ci/run) flips them all.
	stride := 11
	if os.Getenv("LEASEWAL_SOAK") == "1" {
		stride = 1
	}
	for off := range data {
		for bit := range 8 {
			if (off*8+bit)%stride != 0 {
				continue
			}
			flipped := bytes.Clone(data)
			flipped[off] ^= 1 << bit
			flips++
			code, v, stderr := verifyFile(t, dir, flipped)
			switch {
			case off == len(wal.HeaderLine(wal.Version))-2 && code == 0 && flipped[off] == '3':
				// the version digit 2 become 3: version 3 may hold every
				// record version 2 may, so the records read as they are
			case off < len(wal.HeaderLine(wal.Version)):
				if code != ExitDamaged || v["error"] != "NotAWAL" {
					t.Fatalf("flip %d.%d in the header: exit %d %v", off, bit, code, v)
				}
			case code == ExitDamaged:
				if seq, _ := v["seq"].(float64); int(seq) != recordOf(off) || !strings.Contains(v["message"].(string), "byte offset") {
					t.Fatalf("flip %d.%d in record %d: %v", off, bit, recordOf(off), v)
				}
			case code == 0:
				if int64(off) < last.Offset || int(v["records"].(float64)) != len(whole.Frames)-1 || !strings.Contains(stderr, "warning") {
					t.Fatalf("flip %d.%d (last record at %d) accepted: %v %s", off, bit, last.Offset, v, stderr)
				}
			default:
				t.Fatalf("flip %d.%d: exit %d %v", off, bit, code, v)
			}
			if lines := strings.Count(strings.TrimSpace(stderr), "\n"); lines > 0 {
				t.Fatalf("flip %d.%d: the message is not one line: %q", off, bit, stderr)
			}
		}
	}
	t.Logf("flipped %d bits (every %d) of a %d-record WAL through verify: each one detected", flips, stride, len(whole.Frames))
}
