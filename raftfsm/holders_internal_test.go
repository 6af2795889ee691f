package raftfsm

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"
	"testing"
)

// holders answers like the map of sets it stands for, through any
// sequence of adds and removes (repeated ones included).
func TestHoldersMatchAMapOfSets(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	h := newHolders(0)
	ref := map[string]nodeSet{}
	for step := range 5000 {
		key, id := fmt.Sprint("k", rng.IntN(4)), fmt.Sprint("n", rng.IntN(4))
		if rng.IntN(2) == 0 {
			h.add(key, id)
			addHolder(ref, key, id)
		} else {
			h.remove(key, id)
			removeHolder(ref, key, id)
		}
		for k := range 4 {
			key := fmt.Sprint("k", k)
			var got, want []string
			h.each(key, func(id string) { got = append(got, id) })
			for id := range ref[key] {
				want = append(want, id)
			}
			sort.Strings(got)
			sort.Strings(want)
			if !slices.Equal(got, want) {
				t.Fatalf("step %d: holders of %s = %v, want %v", step, key, got, want)
			}
			if _, one := h.one[key]; one && len(h.many[key]) > 0 {
				t.Fatalf("step %d: %s is in both halves", step, key)
			}
		}
	}
}
