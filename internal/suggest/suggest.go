// Package suggest finds the names an operator probably meant: the one
// "did you mean" of pact's three binaries, for a misspelt command or flag
// (internal/cmdline, for pact, pact-journal and pact-agent), a key of a
// configuration file (internal/settings), an operator name (the journal)
// and the like.
package suggest

import (
	"slices"
	"strings"
)

// maxLen bounds the words compared: the distance costs len(a)*len(b).
const maxLen = 128

// Closest returns the candidates nearest to word by edit distance (case
// ignored), all of them if several are equally near, sorted; none when
// even the nearest is too far to be a likely typo (more than a third of
// the longer word's letters, and more than 2), or word is empty.
func Closest(word string, candidates []string) []string {
	w := strings.ToLower(word)
	if w == "" || len(w) > maxLen {
		return nil
	}
	var best []string
	bestD := -1
	for _, c := range candidates {
		if c == "" || len(c) > maxLen {
			continue
		}
		d := Distance(w, strings.ToLower(c))
		if d > max(2, max(len(w), len(c))/3) {
			continue
		}
		switch {
		case bestD < 0 || d < bestD:
			best, bestD = []string{c}, d
		case d == bestD && !slices.Contains(best, c):
			best = append(best, c)
		}
	}
	slices.Sort(best)
	return best
}

// Distance is the Levenshtein distance of two short strings, in bytes.
func Distance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
