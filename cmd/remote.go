package cmd

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/leasewal/leasewal/api"
	"github.com/leasewal/leasewal/client"
)

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

// client is the Go client of --server, with --token-file and --ca; lines
// has it keep a connection to the server's lines door for its calls (a
// command of many calls: a runner), else each call is a request of its own
// (one call gains nothing from switching a connection first).
func (e env) client(lines bool) (*client.Client, error) {
	token, err := client.ReadToken(e.TokenFile)
	if err != nil {
		return nil, err
	}
	httpClient, err := client.HTTPTrusting(e.CA)
	if err != nil {
		return nil, err
	}
	return client.New(strings.Split(e.Server, ","), client.Options{Token: token, HTTP: httpClient, ElectionWait: electionWait, NoLines: !lines})
}

// electionWait is how long a client keeps asking a cluster that is electing
// a leader: a few election timeouts.
const electionWait = 20 * time.Second

// admin sends a cluster request to --server and returns its answer, which
// with -o json it prints as it came; a refusal is the error.
func (e env) admin(method, path string, body []byte) ([]byte, string, error) {
	c, err := e.client(false)
	if err != nil {
		return nil, "", err
	}
	resp, base, err := c.Send(e.context(), method, path, body, http.Header{})
	if err != nil {
		return nil, "", e.remoteError(err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, base, &client.UnknownOutcomeError{Server: base, Err: err}
	}
	code, err := client.ExitCode(resp, base)
	if err != nil {
		return nil, base, err
	}
	if code != ExitOK {
		refusal := &api.Error{Exit: code}
		if err := json.Unmarshal(raw, refusal); err != nil {
			return nil, base, &client.UnknownOutcomeError{Server: base, Err: fmt.Errorf("an answer that is not JSON: %.200s", raw)}
		}
		return nil, base, e.remoteError(refusal)
	}
	if e.Output == "json" {
		_, err = e.stdout.Write(raw)
	}
	return raw, base, err
}
