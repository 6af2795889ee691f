package atomicfile

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// writerAllowed are the production files that create or rename files
// themselves, with why internal/atomicfile is not for them.
var writerAllowed = map[string]string{
	"journal/audit.go":             "the audit log is appended to (O_APPEND), never replaced",
	"agent/status.go":              "renames a listening unix socket into place, not a file written",
	"journal/raftnode/watchdog.go": "the write watchdog's disk probe: a page written, synced and removed to see whether the disk answers, never state",
}

// writeCall is a call that creates, replaces or names a file.
var writeCall = regexp.MustCompile(`\b(os\.(WriteFile|Create|CreateTemp|OpenFile|Rename|Link)|ioutil\.WriteFile)\(`)

// Every file pact writes goes through this package: one writer, one
// durability. Tests, test-support packages (*test) and the integration
// harnesses (chaos, benchmarks: reports and logs, not state) are outside
// the rule.
func TestEveryWriterIsAtomicfile(t *testing.T) {
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
			if rel != "." && (strings.HasPrefix(name, ".") || name == "testdata" || name == "integration" || strings.HasSuffix(name, "test") || rel == "internal/atomicfile") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(rel, ".go") || strings.HasSuffix(rel, "_test.go") || writerAllowed[rel] != "" {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for i, line := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(strings.TrimSpace(line), "//") {
				continue
			}
			if m := writeCall.FindString(line); m != "" {
				t.Errorf("%s:%d: %s...): write files with internal/atomicfile (WriteFile, WriteNew, Create), or add the file to writerAllowed with why", rel, i+1, m)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
