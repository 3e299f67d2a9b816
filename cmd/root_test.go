package cmd

import (
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/spf13/viper"
)

// TestOnlyTheCommandRunIsBuilt: a command line that names a command, past
// the root's flags in any spelling, builds that command alone; one that
// names none, asks for help or completion, or names a command that does not
// exist (its suggestions need them all) builds every command. Each entry of
// the table builds the command of its name.
func TestOnlyTheCommandRunIsBuilt(t *testing.T) {
	for _, c := range commands {
		if got := c.build(&app{v: viper.New()}).Name(); got != c.name {
			t.Errorf("the entry %q builds the command %q", c.name, got)
		}
	}
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"submit", "--payload", "x"}, "submit"},
		{[]string{"--wal", "q.wal", "lease", "--worker", "W"}, "lease"},
		{[]string{"--wal=q.wal", "-o", "json", "complete", "--task", "T1"}, "complete"},
		{[]string{"-ojson", "--no-headers", "--no-color=false", "inspect", "T1"}, "inspect"},
		{[]string{"--now", "+1m", "--lock-timeout", "1s", "expire"}, "expire"},
		{[]string{"--no-color", "queue", "limit", "q", "3"}, "queue"},
		{[]string{"--payload", "x", "submit"}, "submit"}, // a command's flag before it, as cobra reads it
		{[]string{"--wal", "submit"}, ""},                // submit is the WAL's name here
		{[]string{"help", "submit"}, ""},
		{[]string{"submit", "--help"}, "submit"},
		{[]string{"completion", "bash"}, ""},
		{[]string{"__complete", "--wal", "q.wal", "complete", "--task", ""}, ""},
		{[]string{"--version"}, ""},
		{[]string{"sbumit"}, ""},
		{nil, ""},
	}
	for _, c := range cases {
		a := &app{v: viper.New(), args: c.args, env: env{stdout: io.Discard, stderr: io.Discard, getenv: os.Getenv}}
		var built []string
		for _, sub := range a.newRoot().Commands() {
			if sub.Name() != "completion" && sub.Name() != "help" {
				built = append(built, sub.Name())
			}
		}
		want := []string{c.want}
		if c.want == "" {
			want = want[:0]
			for _, e := range commands {
				want = append(want, e.name)
			}
		}
		if !slices.Equal(built, want) {
			t.Errorf("%q built %v, want %v", c.args, built, want)
		}
	}
}

// TestACommandAfterDoubleDashIsNamed: '--' ends the flags, so a command's
// name after it is an argument of the root; the refusal says so, rather
// than suggest the very name given, and nothing is written.
func TestACommandAfterDoubleDashIsNamed(t *testing.T) {
	wal := filepath.Join(t.TempDir(), "q.wal")
	var stderr strings.Builder
	code := Main([]string{"--wal", wal, "--", "submit", "--payload", "x"}, nil, io.Discard, &stderr)
	if code != 2 || !strings.Contains(stderr.String(), `"submit" comes after '--'`) || strings.Contains(stderr.String(), "did you mean") {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	if _, err := os.Stat(wal); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("the WAL: %v", err)
	}
}
