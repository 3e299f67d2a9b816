package cmd

import (
	"context"
	"encoding/json"
	"io"
	"os"
	"strconv"

	"leasewal/api"
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
	var reqs []api.SubmitRequest
	var lines []int
	err = api.ReadBatch(in, base, func(req api.SubmitRequest, line int) error {
		reqs, lines = append(reqs, req), append(lines, line)
		return nil
	})
	if err != nil {
		return err
	}
	return call(e, func(ctx context.Context, s api.Service) (batchAcks, error) {
		acks, err := s.SubmitBatch(ctx, reqs)
		return acks, api.BatchRefusal(err, lines)
	}, batchAcks.table, "send the same batch again: each line with a request-id answers with its task and writes nothing (give every line one)", "")
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
			t.Append(a.TaskID, escape(a.RequestID), strconv.FormatBool(a.Duplicate), a.Queue, strconv.Itoa(a.Priority), a.AvailableAt)
		}
		return t.Render()
	}
}
