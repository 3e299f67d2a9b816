package cmd

import (
	"bytes"
	"errors"
	"fmt"
	"io"
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
	g   *globals
	log *wal.Log
	st  *state.State
	now int64
	// checkpointed is the number of records the checkpoint this session
	// started from holds (0 for a full replay).
	checkpointed int
	release      func() // unmaps the checkpoint's archive, if the state reads one
	appended     bool   // a record of this session reached the WAL
}

// openSession locks the WAL (shared for reading, exclusive for writing),
// replays every record through state.Apply, and resolves --now. A missing WAL
// is an empty history.
//
// Unless the command needs the records themselves, it starts from the
// checkpoint beside the WAL when that still matches the WAL, and replays only
// the records after it.
func (g *globals) openSession(mode wal.Mode) (*session, error) {
	if g.onRecord == nil && !g.fullReplay {
		if st, pos, release, ok := g.loadCheckpoint(); ok {
			s, err := g.openReplaying(mode, st, st.Apply, pos)
			if s != nil {
				s.checkpointed, s.release = pos.Count, release
			} else {
				release()
			}
			if !errors.Is(err, wal.ErrStalePosition) {
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
	p := startPipeline(func(d decoded) error {
		if err := step(d.r); err != nil {
			return &damageError{seq: int64(d.index), offset: d.offset, err: err}
		}
		if g.onRecord != nil {
			return g.onRecord(d.r, st)
		}
		return nil
	})
	log, err := wal.OpenAt(g.walPath, mode, g.lockTimeout, from, func(f wal.Frame) error {
		r, err := state.DecodeRecord(f.Body)
		if err != nil {
			return &damageError{seq: int64(f.Index), offset: f.Offset, err: err}
		}
		return p.add(decoded{r: r, index: f.Index, offset: f.Offset})
	})
	if applyErr := p.finish(); applyErr != nil { // it is about an earlier record than any error of the scan
		if log != nil {
			log.Close()
		}
		log, err = nil, applyErr
	}
	switch {
	case errors.Is(err, errStopReplay): // the command has read what it needs; the file is closed
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
	if s.release != nil {
		s.release()
	}
}

// commit stamps each record with seq, time and actor, applies it (so that a
// record replay would refuse is never written), and appends it durably.
func (s *session) commit(recs []state.Record) error {
	if s.st.Damage() != nil {
		return errArchiveDamaged // decided on answers a damaged archive gave: run again from the WAL
	}
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
		s.appended = true
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

// errStopReplay, from globals.onRecord, ends a replay early.
var errStopReplay = errors.New("replay stopped")

// errArchiveDamaged stops a command whose state read a damaged archive
// before it wrote anything; runSession runs it again from a full replay.
var errArchiveDamaged = errors.New("the checkpoint's archive is damaged")

// write runs a writing command: lock, replay, decide, commit. If another
// process creates the WAL between our look and our create, the whole command
// runs again on the WAL that now exists, so both records survive.
func (g *globals) write(run func(s *session) error) error {
	return g.runSession(wal.Write, run)
}

// read runs a read-only command under the shared lock.
func (g *globals) read(run func(s *session) error) error {
	return g.runSession(wal.Read, run)
}

// runSession opens a session, runs the command in it and, after a writing
// command, applies the checkpoint rule still under the exclusive lock.
//
// A state loaded from a checkpoint reads finished tasks from the archive
// only when it looks them up, so damage there can surface in the middle of a
// command. Until the command has appended, such a command is void: its output
// is held back and it runs again from a full replay of the WAL.
func (g *globals) runSession(mode wal.Mode, run func(s *session) error) error {
	for {
		s, err := g.openSession(mode)
		if err != nil {
			return err
		}
		stdout, stderr := g.stdout, g.stderr
		var held heldOutput
		if s.release != nil {
			g.stdout, g.stderr = &held.stdout, &held.stderr
		}
		err = run(s)
		g.stdout, g.stderr = stdout, stderr
		if damage := s.st.Damage(); damage != nil {
			s.close()
			g.dropCheckpoint()
			if !s.appended {
				fmt.Fprintf(g.stderr, "leasewal: warning: %v; replaying the whole WAL instead\n", damage)
				g.fullReplay = true
				continue
			}
			held.flush(stdout, stderr)
			return err
		}
		held.flush(stdout, stderr)
		if mode == wal.Write && (err == nil || errors.As(err, new(*outcomeExit))) {
			s.refreshCheckpoint()
		}
		s.close()
		if !errors.Is(err, wal.ErrCreateRace) {
			return err
		}
	}
}

// heldOutput is a command's output kept back until it is known to stand.
type heldOutput struct{ stdout, stderr bytes.Buffer }

func (h *heldOutput) flush(stdout, stderr io.Writer) {
	_, _ = h.stdout.WriteTo(stdout)
	_, _ = h.stderr.WriteTo(stderr)
}

// refreshCheckpoint applies the checkpoint rule after a writing command.
func (s *session) refreshCheckpoint() {
	if s.log == nil {
		return
	}
	if inMemory, _ := s.st.InMemory(); checkpointDue(s.log.Count-s.checkpointed, inMemory) {
		s.g.saveCheckpoint(s.st, s.log.Position)
	}
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
