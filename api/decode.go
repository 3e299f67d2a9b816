package api

import (
	"fmt"

	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"leasewal/state"
)

// DecodeStrict decodes one JSON object into v: unknown fields and anything
// after it are refused (ErrTrailing).
func DecodeStrict(body []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if _, err := dec.Token(); err != io.EOF {
		return ErrTrailing
	}
	return nil
}

// ErrTrailing is a body with something after its JSON object.
var ErrTrailing = errors.New("data after the JSON object")

// The batch door's limits: how many tasks one batch holds, and how long a
// line may be (a payload at the 64 KiB limit, every byte escaped, and the
// rest). A server takes at most MaxBatchBody bytes of lines a request.
const (
	MaxBatchTasks = 1_000_000
	MaxBatchLine  = 512 << 10
	MaxBatchBody  = 256 << 20
)

// ReadBatch reads a batch of submits, one JSON object a line (NDJSON; an
// empty line is skipped), each over base: it calls each with the request
// and its line number, from 1.
func ReadBatch(r io.Reader, base SubmitRequest, each func(req SubmitRequest, line int) error) error {
	scan := bufio.NewScanner(r)
	scan.Buffer(make([]byte, 64<<10), MaxBatchLine)
	n, tasks := 0, 0
	for scan.Scan() {
		n++
		line := bytes.TrimSpace(scan.Bytes())
		if len(line) == 0 {
			continue
		}
		if tasks++; tasks > MaxBatchTasks {
			return Usage("the batch holds more than %d tasks: split it", MaxBatchTasks)
		}
		req := base
		if err := DecodeStrict(line, &req); err != nil {
			return Usage("batch line %d: %v; each line is one JSON object such as {\"payload\":\"x\",\"request-id\":\"r1\"}", n, err)
		}
		if err := each(req, n); err != nil {
			return err
		}
	}
	if err := scan.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			return Usage("batch line %d is over %d bytes", n+1, MaxBatchLine)
		}
		return Usage("reading the batch: %v", err)
	}
	if tasks == 0 {
		return Usage("the batch holds no task: give one JSON object per line")
	}
	return nil
}

// BatchRefusal names the line of a batch's refused task: lines[i] is the
// line of the batch's i-th task.
func BatchRefusal(err error, lines []int) error {
	var refused *state.BatchError
	if errors.As(err, &refused) && refused.Index < len(lines) {
		return fmt.Errorf("batch line %d: %w; nothing of the batch was written", lines[refused.Index], refused.Err)
	}
	return err
}
