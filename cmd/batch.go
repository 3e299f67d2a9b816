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
	"leasewal/server"
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
	if e.Server != "" {
		return e.remoteBatch(in, base)
	}
	subs, lines, err := readSubmits(in, base)
	if err != nil {
		return err
	}
	return e.submitBatch(subs, lines)
}

// readBatch reads one submit per line: a JSON object whose keys are the
// submit flags' names, each overriding base; blank lines are skipped. each
// sees every request with its line number, as it is read.
func readBatch(r io.Reader, base api.SubmitRequest, each func(req api.SubmitRequest, line int) error) error {
	scan := bufio.NewScanner(r)
	scan.Buffer(make([]byte, 64<<10), maxBatchLine)
	n, tasks := 0, 0
	for scan.Scan() {
		n++
		line := bytes.TrimSpace(scan.Bytes())
		if len(line) == 0 {
			continue
		}
		if tasks++; tasks > maxBatchTasks {
			return usageErr("the batch holds more than %d tasks: split it", maxBatchTasks)
		}
		req := base
		if err := server.DecodeStrict(line, &req); err != nil {
			return usageErr("batch line %d: %v; each line is one JSON object such as {\"payload\":\"x\",\"request-id\":\"r1\"}", n, err)
		}
		if err := each(req, n); err != nil {
			return err
		}
	}
	if err := scan.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			return usageErr("batch line %d is over %d bytes", n+1, maxBatchLine)
		}
		return usageErr("reading the batch: %v", err)
	}
	if tasks == 0 {
		return usageErr("the batch holds no task: give one JSON object per line")
	}
	return nil
}

// readSubmits reads a batch as state decides it; lines[i] is the line of
// subs[i].
func readSubmits(r io.Reader, base api.SubmitRequest) (subs []state.Submit, lines []int, err error) {
	err = readBatch(r, base, func(req api.SubmitRequest, line int) error {
		sub, err := submitCommand(req)
		if err != nil {
			return fmt.Errorf("batch line %d: %w", line, err)
		}
		subs, lines = append(subs, sub), append(lines, line)
		return nil
	})
	return subs, lines, err
}

// submitBatch decides subs (from lines) as one operation: every task or
// none, in one write.
func (e env) submitBatch(subs []state.Submit, lines []int) error {
	return e.write(func(tx *store.Tx) (answer, error) {
		ds, err := tx.State.DecideSubmits(subs, tx.Now)
		var refused *state.BatchError
		if errors.As(err, &refused) {
			return answer{}, fmt.Errorf("batch line %d: %w; nothing of the batch was written", lines[refused.Index], refused.Err)
		}
		if err != nil {
			return answer{}, err
		}
		recs := make([]state.Record, 0, len(ds))
		for i := range ds {
			recs = append(recs, ds[i].Records...)
			ds[i].Records = nil
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
func (e env) remoteBatch(in io.Reader, base api.SubmitRequest) error {
	var body bytes.Buffer
	enc := json.NewEncoder(&body)
	enc.SetEscapeHTML(false)
	base.Actor = e.Actor
	err := readBatch(in, base, func(req api.SubmitRequest, line int) error {
		if _, err := submitCommand(req); err != nil { // refused here, before anything is sent
			return fmt.Errorf("batch line %d: %w", line, err)
		}
		return enc.Encode(req)
	})
	if err != nil {
		return err
	}
	resp, server, err := e.sendWith(http.MethodPost, "submit/batch", body.Bytes(), e.Output, http.Header{"Content-Type": {"application/x-ndjson"}})
	if err != nil {
		return err
	}
	return e.printRemote(resp, server)
}
