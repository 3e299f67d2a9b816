package cmd

import (
	"encoding/json"
	"fmt"
	"net/http"

	"github.com/spf13/cobra"

	"github.com/leasewal/leasewal/client"
	"github.com/leasewal/leasewal/internal/server"
)

// The cluster commands talk to a running node over HTTP: the configuration
// lives in raft, not in a WAL a command could open.
func (a *app) newClusterCmd() *cobra.Command {
	c := &cobra.Command{
		Use:   "cluster",
		Short: "List a raft cluster's nodes, or remove one",
		Long: `The nodes of a raft cluster (serve --raft-id …), asked of a running node
with --server. To replace a dead node: remove it, then start the new one
with --join; a WAL that already holds records moves into a new cluster by
founding it (serve --raft-id … without --join, on that WAL).`,
		Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error { return c.Help() },
	}
	members := &cobra.Command{
		Use:     "members",
		Short:   "List the cluster's nodes as the node asked knows them",
		Example: "  leasewal --server http://127.0.0.1:7421 cluster members",
		Args:    cobra.NoArgs,
		RunE:    func(*cobra.Command, []string) error { return a.clusterMembers() },
	}
	remove := &cobra.Command{
		Use:   "remove NODE",
		Short: "Take a node out of the cluster (its raft vote and its URL)",
		Long: `Take a node out of the cluster: it stops counting towards a majority and
is sent nothing more. Removing a node removed before is not an error (it
says "already"), so a removal may be repeated after a failover. The
removed node's files stay where they are; stop its process.`,
		Example: "  leasewal --server http://127.0.0.1:7421 cluster remove n3",
		Args: func(c *cobra.Command, args []string) error {
			if len(args) != 1 {
				return usageErr("'%s' takes one node id, e.g. '%s n3' (see 'leasewal cluster members')", c.CommandPath(), c.CommandPath())
			}
			return nil
		},
		RunE: func(_ *cobra.Command, args []string) error { return a.clusterRemove(args[0]) },
	}
	c.AddCommand(members, remove)
	return c
}

func (a *app) needServer() error {
	if a.env.Server == "" {
		return usageErr("the cluster commands ask a running node: give --server URL (or LEASEWAL_SERVER)")
	}
	return nil
}

func (a *app) clusterMembers() error {
	if err := a.needServer(); err != nil {
		return err
	}
	raw, base, err := a.env.admin(http.MethodGet, "cluster/members", nil)
	if err != nil || a.env.Output == "json" {
		return err
	}
	var v server.Members
	if err := json.Unmarshal(raw, &v); err != nil {
		return fmt.Errorf("%s answered a member list that does not parse: %w", base, err)
	}
	t := newTable(a.env.stdout, a.env.palette(), "NODE", "ROLE", "RAFT", "URL")
	for _, m := range v.Members {
		role := "follower"
		if m.Leader {
			role = "leader"
		}
		t.Append(m.ID, role, m.RaftAddr, m.URL)
	}
	return t.Render()
}

func (a *app) clusterRemove(id string) error {
	if err := a.needServer(); err != nil {
		return err
	}
	body, _ := json.Marshal(server.RemoveRequest{ID: id}) // a string always marshals
	raw, base, err := a.env.admin(http.MethodPost, "cluster/remove", body)
	if err != nil || a.env.Output == "json" {
		return err
	}
	var v struct {
		Already bool `json:"already"`
	}
	if err := json.Unmarshal(raw, &v); err != nil {
		return &client.UnknownOutcomeError{Server: base, Err: err}
	}
	note := "removed"
	if v.Already {
		note = "already removed"
	}
	fmt.Fprintf(a.env.stdout, "%s %s\n", id, note)
	return nil
}
