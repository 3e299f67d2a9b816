package suggest

import "testing"

func TestClosest(t *testing.T) {
	known := []string{"default", "mail", "img"}
	for word, want := range map[string]string{
		"defualt": "default", // a transposition is two edits
		"mial":    "mail",
		"imgs":    "img",
		"mail":    "", // known: nothing to suggest
		"reports": "", // nothing within two edits
		"":        "", // three edits from img
	} {
		if got := Closest(word, known); got != want {
			t.Errorf("Closest(%q) = %q, want %q", word, got, want)
		}
	}
}
