package report_test

import (
	"bytes"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/leasewal/leasewal/cmd"
	"github.com/leasewal/leasewal/internal/testbrowser"
)

// page writes the report of a copy of a seed WAL to dir/name.html, as
// 'leasewal report -o html ARGS' writes it, and returns its path; the
// command's exit code must be want.
func page(t *testing.T, dir, seed, name string, want int, args ...string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "testdata", "seeds", seed))
	if err != nil {
		t.Fatal(err)
	}
	walPath := filepath.Join(t.TempDir(), seed)
	if err := os.WriteFile(walPath, b, 0o600); err != nil {
		t.Fatal(err)
	}
	var out, errOut bytes.Buffer
	args = append([]string{"--wal", walPath, "report", "-o", "html", "--title", "report of " + seed}, args...)
	if code := cmd.Main(args, strings.NewReader(""), &out, &errOut); code != want {
		t.Fatalf("leasewal %v: exit %d, want %d\n%s", args, code, want, errOut.String())
	}
	wellFormed(t, out.Bytes())
	path := filepath.Join(dir, name+".html")
	if err := os.WriteFile(path, out.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// wellFormed parses the page with a strict XML parser: every element
// closed, every attribute quoted, every id once.
func wellFormed(t *testing.T, page []byte) {
	t.Helper()
	d := xml.NewDecoder(bytes.NewReader(bytes.Replace(page, []byte("<!DOCTYPE html>"), nil, 1)))
	d.Strict, d.Entity = true, xml.HTMLEntity
	ids := map[string]bool{}
	for {
		tok, err := d.Token()
		if errors.Is(err, io.EOF) {
			return
		}
		if err != nil {
			t.Fatalf("the page is not well formed: %v", err)
		}
		if el, ok := tok.(xml.StartElement); ok {
			switch el.Name.Local {
			case "script", "link", "img", "iframe":
				t.Fatalf("the page loads or runs something: <%s>", el.Name.Local)
			}
			for _, a := range el.Attr {
				if a.Name.Local == "id" {
					if ids[a.Value] {
						t.Fatalf("id %q twice", a.Value)
					}
					ids[a.Value] = true
				}
			}
		}
	}
}

// TestReportInABrowser: the reports of seeds 000 and 001, and of seed 000
// against a trace that diverges at its third record, opened from disk in
// headless Chromium, show the tasks, L1's lapse and its cancelled late
// completion, the workers' lanes, each step of the trace held or not and
// the first divergence with verify's difference; they run no script;
// screenshots are saved beside them.
func TestReportInABrowser(t *testing.T) {
	dir := testbrowser.OutputDir(t)
	ctx := testbrowser.Start(t)
	for _, c := range []struct {
		seed, name string
		exit       int
		args       []string
		checks     map[string]string // a JavaScript expression -> what it must give
	}{
		{"lease_expiry.wal", "seed000", 0, nil, map[string]string{
			`document.scripts.length`:                                                            "0",
			`document.querySelectorAll("section.task").length`:                                   "1",
			`document.querySelector("#task-T1").dataset.state`:                                   "COMPLETED",
			`document.querySelector("#task-T1 text.expired.event title").textContent`:            "T1: lease L1 of W1 lapsed at 2026-01-01T00:00:30.000Z",
			`document.querySelector("#task-T1 text.cancelled.event title").textContent`:          "T1: a late completion under L1 was cancelled at 2026-01-01T00:00:55.000Z",
			`[...document.querySelectorAll("tr.lane")].map(r => r.dataset.worker).join()`:        "W1,W2",
			`document.querySelector("tr.lane[data-worker=W1] text.cancelled title").textContent`: "W1 finished T1 under L1 too late: cancelled",
			`document.querySelector("[data-state=COMPLETED] b").textContent`:                     "1",
			`document.querySelectorAll("#task-T1 tr[data-type=TaskCancelled]").length`:           "1",
			`document.querySelector("#chart a[href='#task-T1'] text.expired") !== null`:          "true",
			`getComputedStyle(document.querySelector("#task-T1 rect.completed")).fill !== ""`:    "true",
			// the scale and the legend of the chart, the lapsed task listed
			// first, its timeline on its own axis
			`document.querySelectorAll("#chart text.ytick").length >= 2`:                   "true",
			`document.querySelector(".chart-legend .depth") !== null`:                      "true",
			`document.querySelector("#attention tr[data-task=T1] a").getAttribute("href")`: "#task-T1",
			`document.querySelector("#task-T1 text.tick").textContent`:                     "00:00:00",
			`document.querySelector("#undrawn") === null`:                                  "true",
			`document.querySelector(".range").textContent.includes("as they stand at")`:    "true",
		}},
		{"happy_path.wal", "seed001", 0, nil, map[string]string{
			`document.querySelector("#task-T1").dataset.state`:                    "COMPLETED",
			`document.querySelectorAll("#task-T1 text.event").length`:             "0",
			`document.querySelector("[data-state=COMPLETED] b").textContent`:      "1",
			`document.querySelectorAll("tr.lane").length`:                         "1",
			`document.querySelector("#task-T1 rect.completed title").textContent`: "L1 W1 attempt 1: completed",
		}},
		{"lease_expiry.wal", "seed000-diverging", 5, []string{"--expect", filepath.Join("testdata", "diverging.trace.yaml")}, map[string]string{
			`document.querySelectorAll("ol.steps li.step").length`:                          "7",
			`document.querySelectorAll("ol.steps li.step[data-held=false]").length`:         "1",
			`document.querySelector("#first-divergence b").textContent`:                     "after seq 3",
			`document.querySelector("#first-divergence .differences").textContent`:          `after seq 3: T1.worker: expected "W1", got "W2"`,
			`getComputedStyle(document.querySelector("#first-divergence")).borderLeftStyle`: "solid",
			`document.querySelector("#task-T1").dataset.state`:                              "COMPLETED",
		}},
	} {
		path := page(t, dir, c.seed, c.name, c.exit, c.args...)
		if _, err := chromedp.Run(ctx, chromedp.Navigate("file://"+path)); err != nil {
			t.Fatalf("%s in chromium: %v", c.name, err)
		}
		if _, err := chromedp.Run(ctx, chromedp.WaitVisible("#overview")); err != nil {
			t.Fatalf("%s in chromium: %v", c.name, err)
		}
		shot, err := chromedp.Run(ctx, chromedp.FullScreenshot(100)) // 100: a PNG
		if err != nil {
			t.Fatalf("%s: a screenshot: %v", c.name, err)
		}
		if err := os.WriteFile(filepath.Join(dir, c.name+".png"), shot, 0o644); err != nil {
			t.Fatal(err)
		}
		for expr, want := range c.checks {
			got, err := chromedp.Run(ctx, chromedp.Evaluate[any](expr))
			if err != nil {
				t.Fatalf("%s: %s: %v", c.name, expr, err)
			}
			if s := fmt.Sprint(got); s != want {
				t.Errorf("%s: %s is %q, want %q", c.name, expr, s, want)
			}
		}
	}
	t.Logf("pages and screenshots in %s", dir)
}
