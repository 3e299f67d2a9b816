package cmd

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
)

// TestTableRowsPastMemoryDrawAlike: a box table whose rows go to a temporary
// file past the first few draws exactly as one that keeps them all, fitted
// to a width or not: the widths, the empty columns dropped (here a column
// only the rows in the file fill, and one no row fills), and the cells cut.
func TestTableRowsPastMemoryDrawAlike(t *testing.T) {
	for _, width := range []int{0, 60, 200} {
		draw := func(inMemory int) string {
			var out bytes.Buffer
			s := newTable(&out, palette{width: width}, "TASK", "STATE", "LATE", "EMPTY", "PAYLOAD")
			s.inMemory = inMemory
			for i := range 50 {
				late := ""
				if i > 40 {
					late = fmt.Sprintf("late-%d", i)
				}
				if err := s.Append(fmt.Sprintf("T%d", i), "WAITING", late, "", strings.Repeat("p", i*7)); err != nil {
					t.Fatal(err)
				}
			}
			if err := s.Render(); err != nil {
				t.Fatal(err)
			}
			return out.String()
		}
		kept, spilled := draw(1000), draw(10)
		if kept != spilled {
			t.Fatalf("width %d: drawn with rows in a file:\n%s\nwith every row in memory:\n%s", width, spilled, kept)
		}
		if !strings.Contains(kept, "late-49") && width != 60 || strings.Count(kept, "\n") != 50+4 {
			t.Fatalf("width %d: not the table asked for:\n%s", width, kept)
		}
	}
}
