// Package suggest finds the word a person most likely meant: a field of a
// trace, a queue's name.
package suggest

import "slices"

// Closest is the known word closest to word, at most two edits away (the
// first by name among those as close); "" when none is, or when word is
// known itself.
func Closest(word string, known []string) string {
	best, bestDistance := "", 3
	for _, k := range slices.Sorted(slices.Values(known)) {
		if k == word {
			return ""
		}
		if max(len(k)-len(word), len(word)-len(k)) >= bestDistance { // no closer: each edit changes the length by one at most
			continue
		}
		if d := editDistance(word, k); d < bestDistance {
			best, bestDistance = k, d
		}
	}
	return best
}

// editDistance is the Levenshtein distance between a and b, in bytes.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur := make([]int, len(b)+1)
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev = cur
	}
	return prev[len(b)]
}
