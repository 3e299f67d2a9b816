package store_test

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/leasewal/leasewal/cmd"
	"github.com/leasewal/leasewal/wal"
)

// TestReplayReportsTheEarliestBadRecord: records are decoded on one goroutine
// and applied on another, so the scan runs ahead of Apply. A record with a
// valid checksum that Apply refuses (a seq gap), followed by records whose
// chained checksums it broke, must be reported as itself, wherever it falls
// in the batches, and not as the checksum damage the scan found later.
func TestReplayReportsTheEarliestBadRecord(t *testing.T) {
	data := mustRead(t, historyWAL(t, t.TempDir(), 2000))
	scanned, err := wal.Scan(data)
	if err != nil {
		t.Fatal(err)
	}
	for _, bad := range []int{2, 255, 256, 257, 300, 513, 1500, len(scanned.Frames) - 1} {
		prev := data[scanned.Frames[bad-2].Offset:]
		prevSum, err := strconv.ParseUint(string(prev[:8]), 16, 32)
		if err != nil {
			t.Fatal(err)
		}
		body := bytes.Clone(scanned.Frames[bad-1].Body)
		seq := fmt.Sprintf(`"seq":%d,`, bad)
		if !bytes.Contains(body, []byte(seq)) {
			t.Fatalf("record %d does not start with its seq: %s", bad, body)
		}
		body = bytes.Replace(body, []byte(seq), []byte(fmt.Sprintf(`"seq":%d,`, bad+7)), 1)
		frame, _, err := wal.EncodeFrame(uint32(prevSum), body)
		if err != nil {
			t.Fatal(err)
		}
		var damaged []byte
		damaged = append(damaged, data[:scanned.Frames[bad-1].Offset]...)
		damaged = append(damaged, frame...)
		damaged = append(damaged, data[scanned.Frames[bad].Offset:]...) // now failing their checksums
		path := t.TempDir() + "/bad.wal"
		os.WriteFile(path, damaged, 0o644)
		for _, args := range [][]string{{"verify"}, {"submit", "--payload", "P"}, {"log", "-o", "json"}} {
			code, out, errOut := cli(append([]string{"--wal", path}, args...)...)
			want := fmt.Sprintf("damaged at record %d ", bad)
			if code != cmd.ExitDamaged || !strings.Contains(errOut, want) || !strings.Contains(errOut, "expected") {
				t.Fatalf("record %d refused by Apply, %v: exit %d, %s%s", bad, args, code, out, errOut)
			}
		}
	}
}
