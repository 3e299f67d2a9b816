package cmd

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"

	"leasewal/api"
	"leasewal/state"
	"leasewal/store"
)

// The batch door's limits: how many tasks one batch holds, and how long a
// line may be (a payload at the 64 KiB limit, every byte escaped, and the
// rest). A server takes at most maxBatchBody bytes of lines a request.
const (
	maxBatchTasks = 1_000_000
	maxBatchLine  = 512 << 10
	maxBatchBody  = 256 << 20
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
	reqs, lines, err := readBatch(in, base)
	if err != nil {
		return err
	}
	if e.Server != "" {
		return e.remoteBatch(reqs)
	}
	return e.submitBatch(reqs, lines)
}

// readBatch reads one submit per line: a JSON object whose keys are the
// submit flags' names, each overriding base; blank lines are skipped.
// lines[i] is the line of reqs[i].
func readBatch(r io.Reader, base api.SubmitRequest) (reqs []api.SubmitRequest, lines []int, err error) {
	scan := bufio.NewScanner(r)
	scan.Buffer(make([]byte, 64<<10), maxBatchLine)
	for n := 1; scan.Scan(); n++ {
		line := bytes.TrimSpace(scan.Bytes())
		if len(line) == 0 {
			continue
		}
		if len(reqs) == maxBatchTasks {
			return nil, nil, usageErr("the batch holds more than %d tasks: split it", maxBatchTasks)
		}
		req := base
		if err := strictJSON(line, &req); err != nil {
			return nil, nil, usageErr("batch line %d: %v; each line is one JSON object such as {\"payload\":\"x\",\"request-id\":\"r1\"}", n, err)
		}
		reqs, lines = append(reqs, req), append(lines, n)
	}
	if err := scan.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			return nil, nil, usageErr("batch line %d is over %d bytes", len(lines)+1, maxBatchLine)
		}
		return nil, nil, usageErr("reading the batch: %v", err)
	}
	if len(reqs) == 0 {
		return nil, nil, usageErr("the batch holds no task: give one JSON object per line")
	}
	return reqs, lines, nil
}

// submitBatch decides reqs (from lines) as one operation: every task or
// none, in one write.
func (e env) submitBatch(reqs []api.SubmitRequest, lines []int) error {
	subs := make([]state.Submit, len(reqs))
	for i, r := range reqs {
		var err error
		if subs[i], err = submitCommand(r); err != nil {
			return fmt.Errorf("batch line %d: %w", lines[i], err)
		}
	}
	return e.write(func(tx *store.Tx) (answer, error) {
		ds, err := tx.State.DecideSubmits(subs, tx.Now)
		var refused *state.BatchError
		if errors.As(err, &refused) {
			return answer{}, fmt.Errorf("batch line %d: %w; nothing of the batch was written", lines[refused.Index], refused.Err)
		}
		if err != nil {
			return answer{}, err
		}
		var recs []state.Record
		for _, d := range ds {
			recs = append(recs, d.Records...)
		}
		if err := tx.Commit(recs); err != nil {
			return answer{}, err
		}
		acks := make(batchAcks, len(ds))
		for i, d := range ds {
			t, err := tx.State.Task(d.TaskID)
			if err != nil {
				return answer{}, err
			}
			acks[i] = ackOf(d, t)
		}
		return answer{doc: acks, outcome: state.ResultAck, table: acks.table,
			recovery: "send the same batch again: each line with a request-id answers with its task and writes nothing (give every line one)"}, nil
	})
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

func (b batchAcks) table(w io.Writer, p palette) error {
	t := newTable(w, p, "TASK", "REQUEST", "DUPLICATE", "QUEUE", "PRIORITY", "AVAILABLE AT")
	for _, a := range b {
		t.Append(a.TaskID, escape(a.RequestID), strconv.FormatBool(a.Duplicate), a.Queue, strconv.Itoa(a.Priority), a.AvailableAt)
	}
	return t.Render()
}

// remoteBatch sends a batch to the server's batch door, one JSON object per
// line, and prints its answer.
func (e env) remoteBatch(reqs []api.SubmitRequest) error {
	var body bytes.Buffer
	enc := json.NewEncoder(&body)
	enc.SetEscapeHTML(false)
	for _, r := range reqs {
		r.Actor = e.Actor
		if err := enc.Encode(r); err != nil {
			return err
		}
	}
	resp, base, err := e.send(http.MethodPost, "submit/batch", body.Bytes(), e.Output)
	if err != nil {
		return err
	}
	return e.printRemote(resp, base)
}
