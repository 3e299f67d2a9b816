package cmd

import (
	"errors"
	"fmt"
	"io/fs"
	"strconv"
	"strings"
	"time"

	"leasewal/state"
	"leasewal/wal"
)

// session is one invocation's view of the WAL: the open, locked file (nil
// while the WAL does not exist yet), the replayed state, and the time now.
type session struct {
	g       *globals
	log     *wal.Log
	st      *state.State
	records []state.Record // kept only for commands that read records (globals.keepRecords)
	now     int64
	// checkpointed is the number of records the checkpoint this session
	// started from holds (0 for a full replay).
	checkpointed int
}

// openSession locks the WAL (shared for reading, exclusive for writing),
// replays every record through state.Apply, and resolves --now. A missing WAL
// is an empty history.
//
// Unless the command needs the records themselves, it starts from the
// checkpoint beside the WAL when that still matches the WAL, and replays only
// the records after it.
func (g *globals) openSession(mode wal.Mode) (*session, error) {
	if !g.keepRecords {
		if st, pos, ok := g.loadCheckpoint(); ok {
			s, err := g.openReplaying(mode, st, st.Apply, pos)
			if !errors.Is(err, wal.ErrStalePosition) {
				if s != nil {
					s.checkpointed = pos.Count
				}
				return s, err
			}
		}
	}
	st := state.New()
	return g.openReplaying(mode, st, st.Apply, wal.Position{})
}

// openReplaying is openSession with the state to build, the step that applies
// each record to it (verify passes its Verifier's), and the position in the
// WAL that state already holds (zero for none).
func (g *globals) openReplaying(mode wal.Mode, st *state.State, step func(state.Record) error, from wal.Position) (*session, error) {
	s := &session{g: g, st: st}
	log, err := wal.OpenAt(g.walPath, mode, g.lockTimeout, from, func(f wal.Frame) error {
		r, err := state.DecodeRecord(f.Body)
		if err == nil {
			err = step(r)
		}
		if err != nil {
			return &damageError{seq: int64(f.Index), offset: f.Offset, err: err}
		}
		if g.keepRecords {
			s.records = append(s.records, r)
		}
		return nil
	})
	switch {
	case errors.Is(err, fs.ErrNotExist) && from.Count > 0:
		return nil, wal.ErrStalePosition // a checkpoint of a WAL that is gone describes nothing
	case errors.Is(err, fs.ErrNotExist):
	case err != nil:
		return nil, g.walOpenError(err)
	default:
		s.log = log
		log.Inject(g.fault)
		if log.Torn != nil && mode == wal.Read {
			fmt.Fprintf(g.stderr, "leasewal: warning: ignoring %d bytes at offset %d after the last complete record (an append that never finished, so never acknowledged); the next writing command cuts them and keeps them in %s.torn-%d\n",
				log.Torn.Length, log.Torn.Offset, g.walPath, log.Torn.Offset)
		}
	}
	now, err := g.clock(s.st.LastAt())
	if err != nil {
		s.close()
		return nil, err
	}
	s.now = now
	return s, nil
}

func (g *globals) walOpenError(err error) error {
	var pathErr *fs.PathError
	if errors.As(err, &pathErr) && errors.Is(err, fs.ErrPermission) {
		return fmt.Errorf("cannot open the WAL %s: permission denied; check the file's permissions or --wal: %w", g.walPath, err)
	}
	var replayDmg *damageError
	if errors.As(err, &replayDmg) {
		return err
	}
	var dmg *wal.DamageError
	if errors.As(err, &dmg) {
		return fmt.Errorf("the WAL %s is damaged: %w; nothing was changed and 'leasewal repair' will refuse too: restore the file from a copy, or inspect it with a text editor", g.walPath, err)
	}
	var format *wal.FormatError
	if errors.As(err, &format) || errors.Is(err, wal.ErrEmptyFile) {
		return fmt.Errorf("%s: %w", g.walPath, err)
	}
	return fmt.Errorf("opening the WAL %s: %w", g.walPath, err)
}

func (s *session) close() {
	if s.log != nil {
		s.log.Close()
	}
}

// commit stamps each record with seq, time and actor, applies it (so that a
// record replay would refuse is never written), and appends it durably.
func (s *session) commit(recs []state.Record) error {
	for _, r := range recs {
		r.Seq, r.At, r.Actor = s.st.LastSeq()+1, s.now, s.g.actor
		if err := s.st.Apply(r); err != nil {
			return fmt.Errorf("internal error: a decided record was refused (%v); nothing was written", err)
		}
		body, err := state.EncodeRecord(r)
		if err != nil {
			return fmt.Errorf("encoding record %d: %w", r.Seq, err)
		}
		if err := s.append(body); err != nil {
			return err
		}
	}
	return nil
}

func (s *session) append(body []byte) error {
	if s.log == nil {
		log, err := wal.Create(s.g.walPath, body, s.g.fault)
		if err != nil {
			return err
		}
		s.log = log
		return nil
	}
	cut, err := s.log.Append(body)
	if cut != nil {
		fmt.Fprintf(s.g.stderr, "leasewal: warning: cut %d bytes of an unfinished append at offset %d (never acknowledged); they are kept in %s\n", cut.Length, cut.Offset, cut.SavedAs)
	}
	return err
}

// write runs a writing command: lock, replay, decide, commit. If another
// process creates the WAL between our look and our create, the whole command
// runs again on the WAL that now exists, so both records survive.
func (g *globals) write(run func(s *session) error) error {
	for {
		s, err := g.openSession(wal.Write)
		if err != nil {
			return err
		}
		err = run(s)
		if err == nil || errors.As(err, new(*outcomeExit)) {
			s.refreshCheckpoint()
		}
		s.close()
		if !errors.Is(err, wal.ErrCreateRace) {
			return err
		}
	}
}

// refreshCheckpoint applies the checkpoint rule after a writing command,
// still under the exclusive lock.
func (s *session) refreshCheckpoint() {
	if s.log != nil && checkpointDue(s.log.Count-s.checkpointed, len(s.st.Tasks())) {
		s.g.saveCheckpoint(s.st, s.log.Position)
	}
}

// read runs a read-only command under the shared lock.
func (g *globals) read(run func(s *session) error) error {
	s, err := g.openSession(wal.Read)
	if err != nil {
		return err
	}
	defer s.close()
	return run(s)
}

// clock resolves --now against the last record's time: time never runs
// backwards inside a WAL.
func (g *globals) clock(lastAt int64) (int64, error) {
	wall := time.Now().UnixMilli()
	if g.nowFlag == "" {
		return max(wall, lastAt), nil
	}
	now, err := parseTime(g.nowFlag, lastAt, wall)
	if err != nil {
		return 0, err
	}
	if now < lastAt {
		return 0, usageErr("--now %s is before the last record's time %s; time never runs backwards in a WAL: give a later time or +DURATION", g.nowFlag, state.FormatTime(lastAt))
	}
	return now, nil
}

// parseTime reads RFC 3339, unix milliseconds, or +DURATION (after the last
// record, or after the wall clock on an empty WAL).
func parseTime(text string, lastAt, wall int64) (int64, error) {
	if rest, ok := strings.CutPrefix(text, "+"); ok {
		d, err := time.ParseDuration(rest)
		if err != nil || d < 0 {
			return 0, usageErr("--now %q: after '+' give a duration such as 30s or 1m30s", text)
		}
		base := lastAt
		if base == 0 {
			base = wall
		}
		return base + d.Milliseconds(), nil
	}
	if ms, err := strconv.ParseInt(text, 10, 64); err == nil {
		if ms < 0 {
			return 0, usageErr("--now %q: unix milliseconds must not be negative", text)
		}
		return ms, nil
	}
	t, err := time.Parse(time.RFC3339Nano, text)
	if err != nil {
		return 0, usageErr("--now %q is not a time: use RFC 3339 (2026-01-01T00:00:30Z), unix milliseconds, or +DURATION", text)
	}
	return t.UnixMilli(), nil
}

// optTime renders a time that may be unset (0).
func optTime(ms int64) string {
	if ms == 0 {
		return ""
	}
	return state.FormatTime(ms)
}

// parseDuration reads a duration flag, with the flag's name in the error.
func parseDuration(flag, text string) (time.Duration, error) {
	d, err := time.ParseDuration(text)
	if err != nil {
		return 0, usageErr("--%s %q is not a duration: use Go syntax such as 30s, 5m or 1h30m", flag, text)
	}
	return d, nil
}
