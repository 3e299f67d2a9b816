package cmd

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"leasewal/api"
	"leasewal/client"
	"leasewal/server"
)

// The flags that configure this process, never sent to a server.
var clientFlags = map[string]bool{"wal": true, "ca": true, "config": true, "output": true, "no-color": true, "no-headers": true,
	"lock-timeout": true, "server": true, "token-file": true, "payload-file": true, "batch-file": true, "help": true}

// remote checks a command that is sent to a server (--server): its RunE
// sends its typed request there. A list of servers is tried in order until
// one answers; a request whose answer is lost after it was sent is exit
// 10, never guessed.
func (a *app) remote(c *cobra.Command) error {
	first := strings.Fields(strings.TrimPrefix(c.CommandPath(), "leasewal "))[0]
	if localOnly[first] {
		return usageErr("%s works on the WAL's own machine only: run it there, without --server (or LEASEWAL_SERVER)", first)
	}
	if a.env.Now != "" {
		return usageErr("the server stamps time: drop --now (or LEASEWAL_NOW) with --server")
	}
	return nil
}

// remoteWait sends a command that waits (lease --wait, wait) in slices of at
// most server.WaitCap, the most a server waits in one request, until its
// answer is not the "not yet" one (exit notYet) or its own wait (total, the
// flag named by flag; "" for ever) has run out. send sends one slice; only
// the last answer is printed. A lease repeated with its request id is the
// same lease.
func (e env) remoteWait(flag, total string, notYet int, send func(slice string) (*http.Response, string, error)) error {
	forever := true
	var deadline time.Time
	if total != "" {
		d, err := api.ParseDuration(flag, total)
		if err != nil {
			return err
		}
		forever, deadline = false, time.Now().Add(d)
	}
	for {
		slice := server.WaitCap
		if !forever {
			slice = max(0, min(slice, time.Until(deadline)))
		}
		resp, base, err := send(slice.String())
		if err != nil {
			return err
		}
		if resp.Header.Get("Leasewal-Exit") == strconv.Itoa(notYet) && (forever || time.Now().Before(deadline)) {
			resp.Body.Close()
			continue
		}
		return e.printRemote(resp, base)
	}
}

// send sends a request through the Go client's transport to the first
// server of --server that answers: a server that cannot be reached is
// skipped (nothing was sent); one that took the request but whose answer
// was lost is an unknown outcome (exit 10); while a cluster elects a
// leader (503) the list is tried again for up to electionWait.
func (e env) send(method, path string, body []byte, output string) (*http.Response, string, error) {
	return e.sendWith(method, path, body, output, http.Header{})
}

// sendWith is send with header added to the request.
func (e env) sendWith(method, path string, body []byte, output string, header http.Header) (*http.Response, string, error) {
	c, err := e.client()
	if err != nil {
		return nil, "", err
	}
	header.Set("Leasewal-Output", output)
	if output != "json" { // a table is fitted to this terminal, not the server's
		header.Set("Leasewal-Columns", strconv.Itoa(e.terminalWidth()))
	}
	if e.NoHeaders {
		header.Set("Leasewal-No-Headers", "1")
	}
	resp, base, err := c.Send(e.context(), method, path, body, header)
	var (
		untrusted *client.UntrustedError
		none      *client.NoServerError
	)
	switch {
	case errors.As(err, &untrusted):
		return nil, "", usageErr("%v: give the certificate that signs it with --ca FILE (or LEASEWAL_CA)", untrusted)
	case errors.As(err, &none):
		return nil, "", fmt.Errorf("%v: check --server (or LEASEWAL_SERVER) and that 'leasewal serve' runs", none)
	}
	return resp, base, err
}

// client is the Go client of --server, with --token-file and --ca.
func (e env) client() (*client.Client, error) {
	token, err := client.ReadToken(e.TokenFile)
	if err != nil {
		return nil, err
	}
	httpClient, err := client.HTTPTrusting(e.CA)
	if err != nil {
		return nil, err
	}
	return client.New(strings.Split(e.Server, ","), client.Options{Token: token, HTTP: httpClient, ElectionWait: electionWait})
}

// electionWait is how long a client keeps asking a cluster that is electing
// a leader: a few election timeouts.
const electionWait = 20 * time.Second

func (e env) printRemote(resp *http.Response, base string) error {
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	if err != nil {
		return &client.UnknownOutcomeError{Server: base, Err: err}
	}
	code, err := client.ExitCode(resp, base)
	if err != nil {
		return err
	}
	if quoted := resp.Header.Get("Leasewal-Stderr"); quoted != "" {
		if text, err := strconv.Unquote(quoted); err == nil {
			io.WriteString(e.stderr, text)
		}
	} else if resp.StatusCode != http.StatusOK { // the server's own refusal (a bad token, a bad request)
		var v errorView
		if json.Unmarshal(out, &v) == nil {
			msg := v.Message
			if resp.StatusCode == http.StatusUnauthorized {
				msg = "the server refused the token: give the file holding its token with --token-file F (or LEASEWAL_TOKEN_FILE)"
				if e.TokenFile == "" {
					msg = "the server needs a token: give the file holding it with --token-file F (or LEASEWAL_TOKEN_FILE)"
				}
			}
			fmt.Fprintf(e.stderr, "leasewal: %s: %s\n", base, msg)
		}
		if e.Output != "json" { // the error document is for scripts; people have the line above
			return &exitStatus{code: code}
		}
	}
	if _, err := e.stdout.Write(out); err != nil && code == ExitOK {
		return fmt.Errorf("writing the answer to stdout: %w", err)
	}
	return &exitStatus{code: code}
}

// followRemote is log --follow through a server: the records so far, then
// each new record, asked for every 0.5 s (a server's WAL cannot be watched
// from another host), until SIGINT or SIGTERM, in the one format a local
// follow prints.
func (e env) followRemote(req api.LogRequest) error {
	absolute := req.Absolute
	var last int64 // the last record printed
	if req.From > 1 {
		last = req.From - 1
	}
	req.To = 0      // following has no end
	var first int64 // the first record's time: the lines' offsets count from it
	if lines, err := e.recordsSince(api.LogRequest{From: 1, To: 1}, "json"); err != nil {
		return err
	} else if len(lines) > 0 {
		var r struct {
			At string `json:"at"`
		}
		if json.Unmarshal([]byte(lines[0]), &r) == nil {
			first = api.ParseTime(r.At)
		}
	}
	req.Absolute = true
	output := "tsv" // one record a line, its cells apart, whatever the client prints
	if e.Output == "json" {
		output = "json"
	}
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	defer signal.Stop(sigs)
	out := bufio.NewWriter(e.stdout)
	stream := newLogStream(e.palette(), absolute)
	switch {
	case e.Output == "tsv" && !e.NoHeaders:
		fmt.Fprintln(out, strings.Join(logColumns, "\t"))
	case e.Output != "json" && e.Output != "tsv":
		stream.header(out)
	}
	for {
		req.From = last + 1
		lines, err := e.recordsSince(req, output)
		if err != nil {
			return err
		}
		for _, line := range lines {
			seq, cells, err := followedLine(line, output)
			if err != nil {
				return err
			}
			last = seq
			if first == 0 && seq == 1 && output == "tsv" {
				first = api.ParseTime(cells[1])
			}
			if output == "json" {
				fmt.Fprintln(out, line)
				continue
			}
			if !absolute {
				cells[1] = offset(api.ParseTime(cells[1]) - first)
			}
			if e.Output == "tsv" {
				fmt.Fprintln(out, strings.Join(cells, "\t"))
			} else {
				stream.write(out, cells)
			}
		}
		if err := out.Flush(); err != nil {
			if errors.Is(err, syscall.EPIPE) {
				return &exitStatus{code: ExitOK} // the reader went away: 'leasewal log --follow | head'
			}
			return fmt.Errorf("writing the records to stdout: %w", err)
		}
		select {
		case <-sigs:
			return &exitStatus{code: ExitOK} // an exit status ends the command here, before its local run
		case <-time.After(client.PollEvery):
		}
	}
}

// followedLine reads one line of log's JSON or TSV: its seq, and its cells.
func followedLine(line, output string) (int64, []string, error) {
	if output == "json" {
		var r struct {
			Seq int64 `json:"seq"`
		}
		err := json.Unmarshal([]byte(line), &r)
		return r.Seq, nil, err
	}
	cells := strings.Split(line, "\t")
	seq, err := strconv.ParseInt(cells[0], 10, 64)
	if err != nil || len(cells) < 2 {
		return 0, nil, fmt.Errorf("the server's log line %q does not start with a seq and a time", line)
	}
	return seq, cells, nil
}

// recordsSince asks the server for log's lines (output json or tsv), no
// header row.
func (e env) recordsSince(req api.LogRequest, output string) ([]string, error) {
	e.NoHeaders = true
	resp, base, err := e.postTypedAs("log", req, output)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("reading the records from %s: %w", base, err)
	}
	if code := resp.Header.Get("Leasewal-Exit"); code != "0" {
		var v errorView
		_ = json.Unmarshal(raw, &v)
		return nil, fmt.Errorf("%s answered log with exit %s: %s", base, code, v.Message)
	}
	text := strings.TrimRight(string(raw), "\n")
	if text == "" {
		return nil, nil
	}
	return strings.Split(text, "\n"), nil
}
