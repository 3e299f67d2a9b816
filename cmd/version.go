package cmd

import (
	"fmt"
	"io"
	"runtime"
	"runtime/debug"
	"strings"
	"sync"

	"github.com/spf13/cobra"

	"github.com/leasewal/leasewal/api"
	"github.com/leasewal/leasewal/wal"
)

// baseVersion is the version a build without a stamp says it is near.
const baseVersion = "0.1.0"

// stamped and stampedCommit are the version and commit a release build
// stamps in (.ci/release: -ldflags "-X github.com/leasewal/leasewal/cmd.stamped=…",
// from git describe); "" in any other build.
var stamped, stampedCommit string

// buildInfo is what a binary says of itself (leasewal version).
type buildInfo struct {
	Version string `json:"version"`
	Commit  string `json:"commit"`
	// WALReads are the WAL format versions it reads; WALWrites the one a
	// new WAL is written in (a compacted one is WALCompacted).
	WALReads     []int  `json:"wal_reads"`
	WALWrites    int    `json:"wal_writes"`
	WALCompacted int    `json:"wal_compacted"`
	Go           string `json:"go"`
	Platform     string `json:"platform"`
}

// build is this binary's buildInfo: the version stamped in, else the
// module's (go install …@vX.Y.Z), else baseVersion-dev; the commit from the
// build's VCS stamp. It is read once: the root command asks twice.
var build = sync.OnceValue(func() buildInfo {
	b := buildInfo{Version: stamped, Commit: "unknown", WALWrites: wal.NewVersion, WALCompacted: wal.BaseVersion,
		Go: runtime.Version(), Platform: runtime.GOOS + "/" + runtime.GOARCH}
	for v := 1; v <= wal.Version; v++ {
		b.WALReads = append(b.WALReads, v)
	}
	info, ok := debug.ReadBuildInfo()
	if b.Version == "" && ok && info.Main.Version != "" && info.Main.Version != "(devel)" {
		b.Version = strings.TrimPrefix(info.Main.Version, "v")
	}
	if b.Version == "" {
		b.Version = baseVersion + "-dev"
	}
	if ok {
		modified := false
		for _, s := range info.Settings {
			switch s.Key {
			case "vcs.revision":
				b.Commit = s.Value
			case "vcs.modified":
				modified = s.Value == "true"
			}
		}
		if modified {
			b.Commit += " (with uncommitted changes)"
		}
	}
	if stampedCommit != "" {
		b.Commit = stampedCommit
	}
	return b
})

// text is the build as leasewal version and --version print it.
func (b buildInfo) text() string {
	return fmt.Sprintf("leasewal %s\ncommit    %s\nWAL       reads format 1 to %d; writes %d (%d once compacted)\nGo        %s %s\n",
		b.Version, b.Commit, b.WALReads[len(b.WALReads)-1], b.WALWrites, b.WALCompacted, b.Go, b.Platform)
}

func (a *app) newVersionCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print leasewal's version, commit, the WAL formats it reads and writes, and the Go version",
		Args:  cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			b := build()
			return a.env.print(answer{doc: b, outcome: api.ResultOK, table: func(w io.Writer, _ palette) error {
				_, err := io.WriteString(w, b.text())
				return err
			}}, written{})
		},
	}
}
