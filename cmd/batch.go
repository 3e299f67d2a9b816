package cmd

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"

	"github.com/leasewal/leasewal/api"
	"github.com/leasewal/leasewal/client"
	"github.com/leasewal/leasewal/internal/service"
)

// runSubmitBatch is submit --batch-file: every line a submit, decided all or
// nothing and written in one append with one fsync.
func runSubmitBatch(e env, o submitOptions) error {
	if o.payload != "" || o.payloadFile != "" || o.requestID != "" {
		return usageErr("--batch-file gives each task's payload and request id on its line: drop --payload, --payload-file and --request-id")
	}
	base, err := o.request(nil)
	if err != nil {
		return err
	}
	in := e.stdin
	if o.batchFile != "-" {
		f, err := os.Open(o.batchFile)
		if err != nil {
			return usageErr("cannot read --batch-file %s: %v", o.batchFile, unwrapPathErr(err))
		}
		defer f.Close()
		in = f
	}
	base.Actor = e.Actor
	warned := false
	deprecated := func(line int, old []string) {
		if !warned {
			warned = true
			fmt.Fprintf(e.stderr, "leasewal: note: batch line %d spells %s as versions before 0.2 did: write %s (the old spelling is read until then)\n",
				line, strings.Join(old, ", "), strings.ReplaceAll(strings.Join(old, ", "), "-", "_"))
		}
	}
	reqs, lines, err := api.CollectBatch(in, base, api.MaxBatchTasks, deprecated)
	if err != nil {
		return err
	}
	parts := [][2]int{{0, len(reqs)}}
	if e.Server != "" { // a server takes a batch of at most its limits a request
		if parts, err = api.BatchParts(reqs); err != nil {
			return err
		}
	}
	return call(e, func(ctx context.Context, s api.Service) (batchAcks, error) {
		var all batchAcks
		for _, p := range parts {
			acks, err := s.SubmitBatch(ctx, reqs[p[0]:p[1]])
			if err != nil {
				return nil, partRefusal(service.BatchRefusal(err, lines[p[0]:p[1]]), lines, p, len(parts))
			}
			if all == nil { // a batch in one part is answered without a copy
				all = slices.Grow(batchAcks(acks), len(reqs)-len(acks))
				continue
			}
			all = append(all, acks...)
		}
		return all, nil
	}, batchAcks.table, "send the same batch again: each line with a request-id answers with its task and writes nothing (give every line one)", "")
}

// partRefusal is the refusal of part p of a batch sent in parts, or its
// unknown outcome: the parts before it were written, each atomic, and
// none after it was sent.
func partRefusal(err error, lines []int, p [2]int, parts int) error {
	if parts == 1 {
		return err
	}
	written := "no line before it was written"
	if p[0] > 0 {
		written = fmt.Sprintf("lines 1 to %d were written by the requests before it", lines[p[0]-1])
	}
	this := "nothing of lines %d to %d was written"
	if _, unknown := errors.AsType[*client.UnknownOutcomeError](err); unknown {
		this = "lines %d to %d may have been written"
	}
	return fmt.Errorf("%w (the server takes a batch in parts of at most %d lines or %d MiB: "+this+"; %s; no line after them was sent)",
		err, api.MaxServerBatchTasks, api.MaxServerBatchBody>>20, lines[p[0]], lines[p[1]-1], written)
}

// batchAcks is a batch's answer: one line per task, a JSON object each with
// -o json (NDJSON).
type batchAcks []api.Ack

func (b batchAcks) streamJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	for _, a := range b {
		if err := enc.Encode(a); err != nil {
			return err
		}
	}
	return nil
}

func (b batchAcks) table() func(io.Writer, palette) error {
	return func(w io.Writer, p palette) error {
		t := newTable(w, p, "TASK", "REQUEST", "DUPLICATE", "QUEUE", "PRIORITY", "AVAILABLE AT")
		for _, a := range b {
			t.Append(a.TaskID, escape(a.RequestID), strconv.FormatBool(a.Duplicate), a.Queue, strconv.Itoa(a.Priority), deref(a.AvailableAt))
		}
		return t.Render()
	}
}
