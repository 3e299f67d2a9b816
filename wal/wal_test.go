package wal

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"
)

func body(i int) []byte {
	return fmt.Appendf(nil, `{"seq":%d,"type":"Test","payload":"%s"}`, i, bytes.Repeat([]byte{'x'}, i%7))
}

// buildWAL writes n records through Create and Append and returns the path
// and the frame bodies.
func buildWAL(t *testing.T, n int) (string, [][]byte) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "test.wal")
	bodies := [][]byte{body(1)}
	l, err := Create(path, bodies[0], nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := 2; i <= n; i++ {
		b := body(i)
		if _, err := l.Append(b); err != nil {
			t.Fatal(err)
		}
		bodies = append(bodies, b)
	}
	l.Close()
	return path, bodies
}

func TestRoundTrip(t *testing.T) {
	path, bodies := buildWAL(t, 20)
	var frames []Frame
	l, err := OpenAt(path, Read, time.Second, Position{}, func(f Frame) error {
		f.Body = bytes.Clone(f.Body)
		frames = append(frames, f)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if len(frames) != len(bodies) || l.Count != len(bodies) || l.Torn != nil {
		t.Fatalf("%d frames, torn %v", len(frames), l.Torn)
	}
	for i, f := range frames {
		if !bytes.Equal(f.Body, bodies[i]) || f.Index != i+1 {
			t.Fatalf("frame %d = %s", i, f.Body)
		}
	}
	data, _ := os.ReadFile(path)
	if !bytes.HasPrefix(data, []byte("leasewal-wal v2\n")) {
		t.Fatalf("header: %q", data[:20])
	}
}

func TestCreateRace(t *testing.T) {
	path, _ := buildWAL(t, 1)
	if _, err := Create(path, body(9), nil); !errors.Is(err, ErrCreateRace) {
		t.Fatalf("create over an existing WAL: %v", err)
	}
	matches, _ := filepath.Glob(path + ".creating-*")
	if len(matches) != 0 {
		t.Fatalf("temporary files left behind: %v", matches)
	}
}

func TestHeaderRefusals(t *testing.T) {
	cases := map[string]struct {
		data []byte
		want string
	}{
		"empty":          {nil, "empty"},
		"no header":      {[]byte("hello\n"), "not a leasewal WAL"},
		"wrong magic":    {[]byte("leasewol-wal v1\n"), "not a leasewal WAL"},
		"future version": {[]byte("leasewal-wal v5\n"), "version 5 is not supported"},
		"partial header": {[]byte("leasewal-w"), "not a leasewal WAL"},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			_, err := Scan(c.data)
			if err == nil || !bytes.Contains([]byte(err.Error()), []byte(c.want)) {
				t.Fatalf("got %v, want %q", err, c.want)
			}
		})
	}
}

// TestCutAtEveryOffset opens every prefix of a real WAL: each must be exactly
// the longest valid prefix of frames, with a torn tail where a partial frame
// remains, and never a panic.
func TestCutAtEveryOffset(t *testing.T) {
	path, bodies := buildWAL(t, 30)
	data, _ := os.ReadFile(path)
	ends := frameEnds(t, data)
	for cut := 0; cut <= len(data); cut++ {
		s, err := Scan(data[:cut])
		if cut < len(HeaderLine(Version)) {
			if err == nil {
				t.Fatalf("cut %d inside the header was accepted", cut)
			}
			continue
		}
		if err != nil {
			t.Fatalf("cut %d: %v", cut, err)
		}
		complete := 0
		for complete < len(ends) && ends[complete] <= cut {
			complete++
		}
		if len(s.Frames) != complete {
			t.Fatalf("cut %d: %d frames, want %d", cut, len(s.Frames), complete)
		}
		for i, f := range s.Frames {
			if !bytes.Equal(f.Body, bodies[i]) {
				t.Fatalf("cut %d: frame %d altered", cut, i+1)
			}
		}
		atBoundary := cut == len(HeaderLine(Version)) || (complete > 0 && ends[complete-1] == cut)
		if (s.Torn == nil) != atBoundary {
			t.Fatalf("cut %d: torn %v, at a frame boundary %v", cut, s.Torn, atBoundary)
		}
	}
	t.Logf("cut a %d-record WAL at all %d byte offsets", len(bodies), len(data)+1)
}

func frameEnds(t *testing.T, data []byte) []int {
	t.Helper()
	s, err := Scan(data)
	if err != nil {
		t.Fatal(err)
	}
	var ends []int
	for i := range s.Frames {
		if i+1 < len(s.Frames) {
			ends = append(ends, int(s.Frames[i+1].Offset))
		} else {
			ends = append(ends, int(s.End))
		}
	}
	return ends
}

// TestFlipEveryBit flips each bit of a small WAL. Each flip is detected: as a
// header error, as damage naming the frame that holds the flipped byte, or,
// in the last frame only, as a torn tail. A flipped file never yields a frame
// that differs from the original.
func TestFlipEveryBit(t *testing.T) {
	path, bodies := buildWAL(t, 6)
	data, _ := os.ReadFile(path)
	ends := frameEnds(t, data)
	lastStart := int(len(HeaderLine(Version)))
	if len(ends) > 1 {
		lastStart = ends[len(ends)-2]
	}
	frameOf := func(off int) int {
		for i, e := range ends {
			if off < e {
				return i + 1
			}
		}
		return len(ends)
	}
	flips := 0
	for off := range data {
		for bit := range 8 {
			flipped := bytes.Clone(data)
			flipped[off] ^= 1 << bit
			flips++
			s, err := Scan(flipped)
			var dmg *DamageError
			var format *FormatError
			switch {
			case off == len(HeaderLine(Version))-2 && s != nil && s.Version > NewVersion:
				// v2 to v3: the frames still read, as a newer version may
				// hold every record version 2 may.
			case off < len(HeaderLine(Version)):
				if !errors.As(err, &format) {
					t.Fatalf("flip %d.%d in the header: %v", off, bit, err)
				}
			case errors.As(err, &dmg):
				if dmg.Index != frameOf(off) {
					t.Fatalf("flip %d.%d in frame %d reported as frame %d", off, bit, frameOf(off), dmg.Index)
				}
			case err != nil:
				t.Fatalf("flip %d.%d: unexpected %v", off, bit, err)
			default:
				if off < lastStart || s.Torn == nil || len(s.Frames) != len(bodies)-1 {
					t.Fatalf("flip %d.%d (last frame starts at %d) accepted: %d frames, torn %v", off, bit, lastStart, len(s.Frames), s.Torn)
				}
				for i, f := range s.Frames {
					if !bytes.Equal(f.Body, bodies[i]) {
						t.Fatalf("flip %d.%d: frame %d altered", off, bit, i+1)
					}
				}
			}
		}
	}
	t.Logf("flipped all %d bits of a %d-record WAL: every flip detected", flips, len(bodies))
}

func TestGarbageAfterLastRecordIsTorn(t *testing.T) {
	path, bodies := buildWAL(t, 3)
	data, _ := os.ReadFile(path)
	for name, tail := range map[string][]byte{
		"zeros":           make([]byte, 4096),
		"garbage lines":   []byte("\x01\x02garbage\nmore garbage\n\xff"),
		"half a frame":    []byte(`0badc0de {"seq":4,"ty`),
		"bad crc, whole ": []byte("00000000 {\"seq\":4}\n"),
	} {
		s, err := Scan(append(bytes.Clone(data), tail...))
		if err != nil || s.Torn == nil || s.Torn.Length != int64(len(tail)) || len(s.Frames) != len(bodies) {
			t.Fatalf("%s: err %v torn %+v frames %d", name, err, s.Torn, len(s.Frames))
		}
	}
}

func TestDamageFollowedByRecordsIsRefused(t *testing.T) {
	path, _ := buildWAL(t, 5)
	data, _ := os.ReadFile(path)
	ends := frameEnds(t, data)
	damaged := bytes.Clone(data)
	damaged[ends[1]+12] ^= 0x20 // inside frame 3's body
	_, err := Scan(damaged)
	var dmg *DamageError
	if !errors.As(err, &dmg) || dmg.Index != 3 || dmg.Offset != int64(ends[1]) {
		t.Fatalf("got %v", err)
	}
	zeroed := bytes.Clone(data)
	copy(zeroed[ends[0]:ends[1]], make([]byte, ends[1]-ends[0])) // a lost block mid-file
	if _, err := Scan(zeroed); !errors.As(err, &dmg) || dmg.Index != 2 {
		t.Fatalf("zeroed frame 2: %v", err)
	}
}

func TestOversizedFrameIsDamage(t *testing.T) {
	path, _ := buildWAL(t, 1)
	data, _ := os.ReadFile(path)
	huge := append([]byte("00000000 {"), bytes.Repeat([]byte("a"), MaxBodySize+10)...)
	huge = append(huge, "}\n"...)
	var dmg *DamageError
	if _, err := Scan(append(bytes.Clone(data), huge...)); !errors.As(err, &dmg) {
		t.Fatalf("an oversized frame: %v", err)
	}
	if _, _, err := EncodeFrame(0, bytes.Repeat([]byte("a"), MaxBodySize+1)); err == nil {
		t.Fatal("EncodeFrame accepted an oversized body")
	}
}

func TestWriterCutsTornTailAndKeepsIt(t *testing.T) {
	path, _ := buildWAL(t, 3)
	tail := []byte(`0badc0de {"seq":4,"ty`)
	f, _ := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	f.Write(tail)
	f.Close()
	l, err := OpenAt(path, Write, time.Second, Position{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	cut, err := l.Append(body(4))
	l.Close()
	if err != nil || cut == nil || cut.Length != int64(len(tail)) {
		t.Fatalf("append over a torn tail: cut %+v err %v", cut, err)
	}
	saved, _ := os.ReadFile(cut.SavedAs)
	if !bytes.Equal(saved, tail) || filepath.Base(cut.SavedAs) != fmt.Sprintf("test.wal.torn-%d", cut.Offset) {
		t.Fatalf("saved %q as %s", saved, cut.SavedAs)
	}
	l, err = OpenAt(path, Read, time.Second, Position{}, nil)
	if err != nil || l.Count != 4 || l.Torn != nil {
		t.Fatalf("after the cut: %v, %d frames", err, l.Count)
	}
	l.Close()
}

func TestFailedAppendsRollBack(t *testing.T) {
	for _, spec := range []string{"short-write", "enospc", "fsync-eio"} {
		t.Run(spec, func(t *testing.T) {
			path, _ := buildWAL(t, 3)
			before, _ := os.ReadFile(path)
			l, err := OpenAt(path, Write, time.Second, Position{}, nil)
			if err != nil {
				t.Fatal(err)
			}
			fault, err := ParseFault(spec)
			if err != nil {
				t.Fatal(err)
			}
			l.Inject(fault)
			_, err = l.Append(body(4))
			l.Close()
			var ae *AppendError
			if !errors.As(err, &ae) || !ae.RolledBack {
				t.Fatalf("got %v", err)
			}
			after, _ := os.ReadFile(path)
			if !bytes.Equal(before, after) {
				t.Fatalf("the WAL changed: %d bytes before, %d after", len(before), len(after))
			}
		})
	}
	t.Run("create", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "new.wal")
		if _, err := Create(path, body(1), &Fault{Action: "enospc"}); err == nil {
			t.Fatal("a failed create succeeded")
		}
		if _, err := os.Stat(path); !os.IsNotExist(err) {
			t.Fatalf("a failed create left a WAL: %v", err)
		}
	})
}

func TestParseFault(t *testing.T) {
	for _, bad := range []string{"", "mid", "mid-write:explode", "after-sync:sleep=soon"} {
		if _, err := ParseFault(bad); err == nil {
			t.Fatalf("%q accepted", bad)
		}
	}
	f, err := ParseFault("mid-write:sleep=20ms")
	if err != nil || f.Point != "mid-write" || f.Delay != 20*time.Millisecond {
		t.Fatalf("%+v %v", f, err)
	}
}

func TestLockTimeout(t *testing.T) {
	path, _ := buildWAL(t, 1)
	writer, err := OpenAt(path, Write, time.Second, Position{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer writer.Close()
	start := time.Now()
	_, err = OpenAt(path, Read, 50*time.Millisecond, Position{}, nil)
	var lt *LockTimeoutError
	if !errors.As(err, &lt) || time.Since(start) < 50*time.Millisecond {
		t.Fatalf("a reader beside a writer: %v after %s", err, time.Since(start))
	}
	reader, err := OpenAt(path, Read, 100*time.Millisecond, Position{}, nil)
	if err == nil {
		reader.Close()
		t.Fatal("a reader got in beside a writer")
	}
}

func TestNotRegularFile(t *testing.T) {
	var nr *NotRegularError
	if _, err := OpenAt(t.TempDir(), Read, time.Second, Position{}, nil); !errors.As(err, &nr) {
		t.Fatalf("a directory: %v", err)
	}
}

// TestAReplacementTakesTheLogsUpgrade: a record of a newer version appended
// while a compaction wrote its replacement (in an older one) upgrades the
// log; the replacement that takes it is upgraded as it is put in place, so
// that no record is in a file of an older version than its own.
func TestAReplacementTakesTheLogsUpgrade(t *testing.T) {
	path, bodies := buildWAL(t, 3)
	r, err := StartReplacement(path, BaseVersion, nil, func(write func([]byte) error) error { return write(bodies[0]) })
	if err != nil {
		t.Fatal(err)
	}
	l, err := OpenAt(path, Write, time.Second, Position{}, func(Frame) error { return nil })
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	from := l.End
	if _, err := l.AppendBatch([][]byte{body(4)}, Version); err != nil {
		t.Fatal(err)
	}
	if err := l.Replace(r, from); err != nil {
		t.Fatal(err)
	}
	data, _ := os.ReadFile(path)
	frame := append(body(4), '\n')
	if !bytes.HasPrefix(data, HeaderLine(Version)) || !bytes.HasSuffix(data, frame) {
		t.Fatalf("the replaced WAL starts %.16q and ends %q; want the header of version %d and the frame appended meanwhile", data, data[max(0, len(data)-len(frame)):], Version)
	}
}
