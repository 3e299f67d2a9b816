package scenarios

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

func TestScenarios(t *testing.T) {
	t.Parallel()
	scripts, _ := filepath.Glob("*.sh")
	ran := 0
	for _, script := range scripts {
		switch script {
		case "lib.sh", "bench.sh", "under_load.sh": // helpers, figures and the loaded runs: run them by hand
			continue
		}
		ran++
		t.Run(script, func(t *testing.T) {
			t.Parallel()
			cmd := exec.Command("bash", script)
			cmd.Env = append(os.Environ(),
				"PATH="+binDir+string(os.PathListSeparator)+os.Getenv("PATH"),
				"TMPDIR="+t.TempDir(), "LEASEWAL_WAL=", "LEASEWAL_ACTOR=scenario", "NO_COLOR=1")
			if os.Getenv("LEASEWAL_SOAK") != "1" { // a quick chaos run; .ci/run runs the full one
				cmd.Env = append(cmd.Env, "CHAOS_TASKS=25", "CHAOS_SECONDS=10", "CHAOS_WINDOW=10s", "CLUSTER_KILLS=2", "CLUSTER_TASKS=20")
			}
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("%s failed: %v\n%s", script, err, out)
			}
			t.Logf("%s", out)
		})
	}
	if ran == 0 {
		t.Fatal("no scenario ran")
	}
}
