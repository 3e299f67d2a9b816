package cluster

import (
	"os"
	"strings"
	"testing"

	"github.com/leasewal/leasewal/state"
)

// TestRecordsEntry: an entry decodes to the records it was made of, and any
// cut of it is refused (or, cut between records, holds the ones before the
// cut), never half a record or a panic.
func TestRecordsEntry(t *testing.T) {
	wal, err := os.ReadFile("../../testdata/seeds/happy_path.wal")
	if err != nil {
		t.Fatal(err)
	}
	var recs []state.Record
	for _, line := range strings.Split(strings.TrimSpace(string(wal)), "\n")[1:] {
		_, body, _ := strings.Cut(line, " ")
		r, err := state.DecodeRecord([]byte(body))
		if err != nil {
			t.Fatal(err)
		}
		recs = append(recs, r)
	}
	entry, err := recordsEntry(recs)
	if err != nil {
		t.Fatal(err)
	}
	got, err := decodeRecords(entry[1:])
	if err != nil || len(got) != len(recs) {
		t.Fatalf("decoded %d records, %v", len(got), err)
	}
	for i := range recs {
		if got[i].Seq != recs[i].Seq || got[i].Type != recs[i].Type || got[i].TaskID != recs[i].TaskID {
			t.Fatalf("record %d: %+v, want %+v", i, got[i], recs[i])
		}
	}
	for cut := 1; cut < len(entry); cut++ {
		part, err := decodeRecords(entry[1:cut])
		if err != nil {
			continue
		}
		for i, r := range part {
			if r.Seq != recs[i].Seq {
				t.Fatalf("an entry cut at byte %d decoded record %d as seq %d", cut, i, r.Seq)
			}
		}
		if len(part) == len(recs) {
			t.Fatalf("an entry cut at byte %d decoded whole", cut)
		}
	}
}
