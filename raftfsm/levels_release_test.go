package raftfsm_test

import (
	"bufio"
	"os"
	"strings"
	"testing"

	"github.com/pact-hpc/pact/raftfsm"
)

// Every feature level names the first release that speaks it: one that
// RELEASES records, or, for the levels added since the last release, the
// one next release (levels accumulate between releases). Levels are
// numbered 1, 2, 3 ... and FeatureLevel is the highest.
func TestLevelsNameReleases(t *testing.T) {
	f, err := os.Open("../RELEASES")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	released := map[string]bool{}
	var last string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		v := strings.Fields(line)[0]
		released[v], last = true, v
	}
	if last == "" {
		t.Fatal("RELEASES names no release")
	}
	next := ""
	for i, l := range raftfsm.Levels {
		if l.Level != uint32(i+1) {
			t.Errorf("Levels[%d] is level %d, want %d", i, l.Level, i+1)
		}
		if released[l.Release] {
			if next != "" {
				t.Errorf("level %d names released %s after level %d named the next release %s", l.Level, l.Release, l.Level-1, next)
			}
			continue
		}
		if next != "" && l.Release != next {
			t.Errorf("level %d names release %s and an earlier unreleased level names %s: the levels since %s all ship in the next release", l.Level, l.Release, next, last)
		}
		next = l.Release
	}
	if got := raftfsm.Levels[len(raftfsm.Levels)-1].Level; got != raftfsm.FeatureLevel {
		t.Errorf("the highest level is %d, FeatureLevel %d", got, raftfsm.FeatureLevel)
	}
}
