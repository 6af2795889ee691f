package journal_test

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestSecurityDocNamesRealTests keeps docs/security.md honest: every test
// it names ("pkg: TestName", or a bare `TestName` in a table) exists in
// that package of the repository.
func TestSecurityDocNamesRealTests(t *testing.T) {
	doc, err := os.ReadFile("../docs/security.md")
	if err != nil {
		t.Fatal(err)
	}
	defined := map[string]map[string]bool{} // package dir -> test names
	all := map[string]bool{}
	err = filepath.WalkDir("..", func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, "_test.go") {
			return err
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		dir := strings.TrimPrefix(filepath.ToSlash(filepath.Dir(path)), "../")
		for _, m := range regexp.MustCompile(`(?m)^func ((?:Test|Fuzz)\w+)\(`).FindAllStringSubmatch(string(b), -1) {
			if defined[dir] == nil {
				defined[dir] = map[string]bool{}
			}
			defined[dir][m[1]] = true
			all[m[1]] = true
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	named := 0
	for _, m := range regexp.MustCompile("`([a-z/]+): ((?:Test|Fuzz)\\w+)`").FindAllStringSubmatch(string(doc), -1) {
		named++
		if !defined[m[1]][m[2]] {
			t.Errorf("docs/security.md names %s: %s, which does not exist", m[1], m[2])
		}
	}
	for _, m := range regexp.MustCompile("`((?:Test|Fuzz)\\w+)`").FindAllStringSubmatch(string(doc), -1) {
		named++
		if !all[m[1]] {
			t.Errorf("docs/security.md names %s, which does not exist", m[1])
		}
	}
	if named < 20 {
		t.Errorf("found only %d test names in docs/security.md; the patterns no longer match its text", named)
	}
}
