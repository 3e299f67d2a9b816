package wal

import (
	"bytes"
	"testing"
)

// FuzzScan: any file either is refused or scans as frames that re-encode to
// exactly the bytes they came from, followed by nothing or a torn tail that
// runs to the end of the file. The scanner never panics.
func FuzzScan(f *testing.F) {
	f.Add(append(append([]byte{}, HeaderLine(Version)...), "6d20ec50 {\"seq\":1}\n"...))
	f.Add(append(append([]byte{}, HeaderLine(Version)...), "0badc0de {\"seq\":1,\"ty"...))
	f.Add([]byte("leasewal-wal v7\n"))
	frame, _, _ := EncodeFrame(headerSeed, []byte(`{"seq":1,"type":"TaskCreated"}`))
	f.Add(append(append(append([]byte{}, HeaderLine(Version)...), frame...), frame...))
	f.Fuzz(func(t *testing.T, data []byte) {
		s, err := Scan(data)
		if err != nil {
			return
		}
		rebuilt := append([]byte{}, HeaderLine(s.Version)...)
		sum := headerSeed
		for _, fr := range s.Frames {
			var frame []byte
			frame, sum, err = EncodeFrame(sum, fr.Body)
			if err != nil {
				t.Fatalf("an accepted frame does not re-encode: %v", err)
			}
			rebuilt = append(rebuilt, frame...)
		}
		if !bytes.Equal(rebuilt, data[:s.End]) || sum != s.LastSum {
			t.Fatal("the accepted frames are not the file's bytes")
		}
		tail := int64(len(data)) - s.End
		if (tail == 0) != (s.Torn == nil) || (s.Torn != nil && (s.Torn.Offset != s.End || s.Torn.Length != tail)) {
			t.Fatalf("torn tail %+v does not cover the %d bytes after the frames", s.Torn, tail)
		}
	})
}
