// Package testbrowser starts the headless Chromium the browser tests drive
// (Debian's chromium package, which .ci/run installs), and says where
// their pages and screenshots go for a person to look at.
package testbrowser

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/chromedp/chromedp"
)

// Start is a headless Chromium for t, ended with it. A machine without
// one skips t, unless LEASEWAL_BROWSER_REQUIRED is set (as in CI). Every
// name under .test resolves to 127.0.0.1, so that a test can show the
// browser a page of another site (or one an attacker's DNS points here).
func Start(t *testing.T) context.Context {
	t.Helper()
	path, err := exec.LookPath("chromium")
	if err != nil {
		if os.Getenv("LEASEWAL_BROWSER_REQUIRED") != "" {
			t.Fatalf("no chromium on PATH, and LEASEWAL_BROWSER_REQUIRED is set: %v", err)
		}
		t.Skip("no chromium on PATH (Debian's chromium package; .ci/run installs it)")
	}
	// As root (CI) Chromium needs --no-sandbox; the background services it
	// would reach for are off, the machine's network being closed.
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(path), chromedp.NoSandbox, chromedp.DisableGPU,
		chromedp.Flag("disable-quic", true), chromedp.Flag("host-resolver-rules", "MAP *.test 127.0.0.1"),
		chromedp.UserDataDir(t.TempDir()), chromedp.WindowSize(1280, 900))
	alloc, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	t.Cleanup(cancelAlloc)
	ctx, cancel := chromedp.NewContext(alloc)
	t.Cleanup(cancel)
	return ctx
}

// OutputDir is where pages and screenshots go, kept after the test for a
// person to look at: LEASEWAL_TEST_OUTPUT, or leasewal-test-output in the
// system's temporary directory.
func OutputDir(t *testing.T) string {
	t.Helper()
	dir := os.Getenv("LEASEWAL_TEST_OUTPUT")
	if dir == "" {
		dir = filepath.Join(os.TempDir(), "leasewal-test-output")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}
