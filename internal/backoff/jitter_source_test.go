package backoff

import (
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// randAllowed are the production files that import math/rand themselves,
// with why backoff.Jitter is not for them.
var randAllowed = map[string]string{
	"internal/jitter/jitter.go": "Jitter's own source",
	"agent/agent.go":            "picks the first journal to try at random: a choice, not a wait",
}

// Jitter is pact's one source of jitter: no other production file draws
// from math/rand. Tests and test-support packages (*test) are outside the
// rule.
func TestJitterIsTheOneSource(t *testing.T) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		rel = filepath.ToSlash(rel)
		if d.IsDir() {
			name := d.Name()
			if rel != "." && (strings.HasPrefix(name, ".") || name == "testdata" || name == "integration" || strings.HasSuffix(name, "test")) {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(rel, ".go") || strings.HasSuffix(rel, "_test.go") || randAllowed[rel] != "" {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if strings.Contains(string(b), `"math/rand`) {
			t.Errorf("%s imports math/rand: draw jitter through backoff.Jitter (injectable), or add the file to randAllowed with why", rel)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
