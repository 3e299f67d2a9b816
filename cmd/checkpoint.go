package cmd

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"

	"leasewal/state"
	"leasewal/wal"
)

// The checkpoint is derived state cached beside the WAL (<wal>.checkpoint) so
// that a command replays only the records after it. It is a cache, never the
// truth: safe to delete, checked against the WAL before use (the WAL must
// still hold, at the recorded offset, a frame with the recorded chained
// checksum), ignored when missing, stale or damaged, and rewritten
// atomically by writers (checkpointDue says when). verify, log and inspect with records always replay from scratch.
//
// Layout: the line "leasewal-checkpoint v1\n", the CRC32C of the rest (4
// bytes, little endian), the WAL position as uvarints (count, end, checksum,
// offset of the last frame), then the state snapshot.

const (
	checkpointSuffix = ".checkpoint"
	checkpointMagic  = "leasewal-checkpoint v1\n"
	// minCheckpointTail is the least number of records a checkpoint may lag
	// behind before a writer rewrites it (see checkpointDue).
	minCheckpointTail = 100
)

// checkpointDue is the refresh rule: a writing command rewrites the checkpoint,
// after its own append, once max(100, tasks/50) records follow it. Writing it
// costs O(tasks), so rewriting every tasks/50 records keeps that cost constant
// per command, and the tail a command replays stays short.
func checkpointDue(tail, tasks int) bool {
	return tail >= max(minCheckpointTail, tasks/50)
}

var checkpointCRC = crc32.MakeTable(crc32.Castagnoli)

func encodeCheckpoint(st *state.State, pos wal.Position) []byte {
	var body []byte
	for _, v := range []uint64{uint64(pos.Count), uint64(pos.End), uint64(pos.LastSum), uint64(pos.LastOffset)} {
		body = binary.AppendUvarint(body, v)
	}
	body = append(body, st.Snapshot()...)
	out := append([]byte(checkpointMagic), binary.LittleEndian.AppendUint32(nil, crc32.Checksum(body, checkpointCRC))...)
	return append(out, body...)
}

// decodeCheckpoint returns the state and the WAL position it holds, or false
// for anything that is not an intact checkpoint.
func decodeCheckpoint(data []byte) (*state.State, wal.Position, bool) {
	rest, ok := bytes.CutPrefix(data, []byte(checkpointMagic))
	if !ok || len(rest) < 4 {
		return nil, wal.Position{}, false
	}
	body := rest[4:]
	if binary.LittleEndian.Uint32(rest) != crc32.Checksum(body, checkpointCRC) {
		return nil, wal.Position{}, false
	}
	var fields [4]uint64
	for i := range fields {
		v, n := binary.Uvarint(body)
		if n <= 0 {
			return nil, wal.Position{}, false
		}
		fields[i], body = v, body[n:]
	}
	st, err := state.LoadSnapshot(body)
	if err != nil || fields[0] == 0 || int64(fields[0]) != st.LastSeq() {
		return nil, wal.Position{}, false
	}
	return st, wal.Position{Count: int(fields[0]), End: int64(fields[1]), LastSum: uint32(fields[2]), LastOffset: int64(fields[3])}, true
}

// loadCheckpoint reads the checkpoint beside the WAL, if there is a good one.
func (g *globals) loadCheckpoint() (*state.State, wal.Position, bool) {
	data, err := os.ReadFile(g.sidePath(checkpointSuffix))
	if err != nil {
		return nil, wal.Position{}, false
	}
	return decodeCheckpoint(data)
}

// saveCheckpoint writes the checkpoint atomically: a temporary file, fsync,
// rename over the old one, fsync of the directory. A failure costs speed, not
// correctness, so it is only a warning.
func (g *globals) saveCheckpoint(st *state.State, pos wal.Position) {
	path := g.sidePath(checkpointSuffix)
	dir := filepath.Dir(path)
	err := func() error {
		tmp, err := os.CreateTemp(dir, filepath.Base(path)+".tmp-*")
		if err != nil {
			return err
		}
		defer os.Remove(tmp.Name())
		_, err = tmp.Write(encodeCheckpoint(st, pos))
		if err == nil {
			err = tmp.Sync()
		}
		if cerr := tmp.Close(); err == nil {
			err = cerr
		}
		if err == nil {
			err = os.Rename(tmp.Name(), path)
		}
		if err == nil {
			err = wal.SyncDir(dir)
		}
		return err
	}()
	if err != nil {
		fmt.Fprintf(g.stderr, "leasewal: warning: could not write the checkpoint %s (%v); commands stay correct but replay more of the WAL\n", path, err)
	}
}
