package cmd

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// The flags that configure this process, never sent to a server.
var clientFlags = map[string]bool{"wal": true, "config": true, "output": true, "no-color": true, "no-headers": true,
	"lock-timeout": true, "server": true, "token-file": true, "payload-file": true, "help": true}

// remote sends the command to a server (--server) and prints and exits as
// the command would locally. A list of servers is tried in order until one
// answers; a request whose answer is lost after it was sent is exit 10,
// never guessed.
func (a *app) remote(c *cobra.Command, args []string) error {
	path := strings.ReplaceAll(strings.TrimPrefix(c.CommandPath(), "leasewal "), " ", "/")
	first := strings.SplitN(path, "/", 2)[0]
	if localOnly[first] {
		return usageErr("%s works on the WAL's own machine only: run it there, without --server (or LEASEWAL_SERVER)", first)
	}
	if a.env.Now != "" {
		return usageErr("the server stamps time: drop --now (or LEASEWAL_NOW) with --server")
	}
	if follow, _ := c.Flags().GetBool("follow"); follow {
		return usageErr("log --follow works on the WAL's own machine only, not with --server")
	}
	body, err := requestBody(c, args, a.env)
	if err != nil {
		return err
	}
	resp, base, err := a.env.post(path, body, a.env.Output)
	if err != nil {
		return err
	}
	return a.printRemote(resp, base)
}

// post sends a request to the first server of --server that answers. A
// server that cannot be reached is skipped (nothing was sent); one that took
// the request but whose answer was lost is an unknown outcome (exit 10).
func (e env) post(path string, body []byte, output string) (*http.Response, string, error) {
	var token string
	if e.TokenFile != "" {
		b, err := os.ReadFile(e.TokenFile)
		if err != nil {
			return nil, "", usageErr("cannot read --token-file %s: %v", e.TokenFile, unwrapPathErr(err))
		}
		token = strings.TrimSpace(string(b))
	}
	var lastErr error
	for _, base := range strings.Split(e.Server, ",") {
		base = strings.TrimRight(strings.TrimSpace(base), "/")
		req, err := http.NewRequest(http.MethodPost, base+"/v1/"+path, bytes.NewReader(body))
		if err != nil {
			return nil, "", usageErr("--server %q: %v", base, err)
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Leasewal-Output", output)
		if output != "json" { // a table is fitted to this terminal, not the server's
			req.Header.Set("Leasewal-Columns", strconv.Itoa(e.terminalWidth()))
		}
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := serverClient.Do(req)
		if err != nil {
			var op *net.OpError
			if errors.As(err, &op) && op.Op == "dial" {
				lastErr = err // nothing was sent: the next server may answer
				continue
			}
			return nil, "", &unknownOutcome{server: base, err: err}
		}
		return resp, base, nil
	}
	return nil, "", fmt.Errorf("no server answered (%v); nothing was sent: check --server (or LEASEWAL_SERVER) and that 'leasewal serve' runs", lastErr)
}

// serverClient is the HTTP client of --server: one, so that connections are reused.
var serverClient = &http.Client{Timeout: 10 * time.Minute}

// call sends one operation to the server and returns its JSON answer and exit code.
func (e env) call(path string, flags map[string]any) (map[string]any, int, error) {
	flags["actor"] = e.Actor
	body, err := json.Marshal(flags)
	if err != nil {
		return nil, 0, err
	}
	resp, base, err := e.post(path, body, "json")
	if err != nil {
		return nil, 0, err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, 0, &unknownOutcome{server: base, err: err}
	}
	code, err := strconv.Atoi(resp.Header.Get("Leasewal-Exit"))
	if err != nil {
		return nil, 0, &unknownOutcome{server: base, err: fmt.Errorf("HTTP %s without an exit code", resp.Status)}
	}
	var doc map[string]any
	if err := json.Unmarshal(raw, &doc); err != nil {
		return nil, code, fmt.Errorf("%s answered something that is not JSON: %.200s", base, raw)
	}
	return doc, code, nil
}

func (a *app) printRemote(resp *http.Response, base string) error {
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	if err != nil {
		return &unknownOutcome{server: base, err: err}
	}
	code, err := strconv.Atoi(resp.Header.Get("Leasewal-Exit"))
	if err != nil {
		return &unknownOutcome{server: base, err: fmt.Errorf("HTTP %s without an exit code", resp.Status)}
	}
	if quoted := resp.Header.Get("Leasewal-Stderr"); quoted != "" {
		if text, err := strconv.Unquote(quoted); err == nil {
			io.WriteString(a.env.stderr, text)
		}
	} else if resp.StatusCode != http.StatusOK { // the server's own refusal (a bad token, a bad request)
		var v errorView
		if json.Unmarshal(out, &v) == nil {
			fmt.Fprintf(a.env.stderr, "leasewal: %s: %s\n", base, v.Message)
		}
	}
	if _, err := a.env.stdout.Write(out); err != nil && code == ExitOK {
		return fmt.Errorf("writing the answer to stdout: %w", err)
	}
	return &exitStatus{code: code}
}

// unknownOutcome is a request sent to a server whose answer never came back.
type unknownOutcome struct {
	server string
	err    error
}

func (e *unknownOutcome) Error() string {
	return fmt.Sprintf("the request was sent to %s but its answer was lost (%v): the outcome is unknown; repeat it with the same --request-id, or look with 'leasewal inspect'", e.server, e.err)
}

// requestBody is the command's flags as a JSON object, the positional
// arguments as "args": what the server turns back into a command line. A
// --payload-file is read here and sent as --payload: the file is the
// client's.
func requestBody(c *cobra.Command, args []string, e env) ([]byte, error) {
	flags := map[string]any{}
	var err error
	c.Flags().Visit(func(f *pflag.Flag) {
		if clientFlags[f.Name] || err != nil {
			return
		}
		if f.Value.Type() == "stringSlice" {
			list, _ := c.Flags().GetStringSlice(f.Name)
			flags[f.Name] = strings.Join(list, ",")
			return
		}
		flags[f.Name] = f.Value.String()
	})
	if file, _ := c.Flags().GetString("payload-file"); file != "" && c.Flags().Changed("payload-file") {
		o := submitOptions{payloadFile: file}
		payload, perr := o.readPayload(e.stdin)
		if perr != nil {
			return nil, perr
		}
		flags["payload"] = payload
	}
	flags["actor"] = e.Actor
	if len(args) > 0 {
		flags["args"] = args
	}
	if err != nil {
		return nil, err
	}
	return json.Marshal(flags)
}
