package main

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// pactMarker is a perf category marker naming one of pact's own
// functions: "journal/auth.(*Authenticator).verifyClient" or
// "journal/ca.ParseCSR".
var pactMarker = regexp.MustCompile(`^((?:journal|agent|raftfsm|internal)(?:/[a-z0-9]+)*)\.(?:\(\*?([A-Za-z0-9_]+)\)\.)?([A-Za-z0-9_]+)$`)

// TestPerfMarkersNameFunctionsThatExist keeps the profile's categories
// true as the code moves: a marker naming a function that no longer
// exists matches no sample, and its samples silently land in a wider
// category (the forwarding and verifyClient markers did, once the code
// moved to journal/raftnode and journal/auth).
func TestPerfMarkersNameFunctionsThatExist(t *testing.T) {
	root := filepath.Join("..", "..", "..")
	checked := 0
	for _, c := range perfCategories {
		for _, m := range c.markers {
			sm := pactMarker.FindStringSubmatch(m)
			if sm == nil {
				if strings.HasPrefix(m, "journal") || strings.HasPrefix(m, "agent") {
					t.Errorf("category %q: marker %q looks like pact's but is not pkg.Func or pkg.(*Type).Method", c.name, m)
				}
				continue
			}
			checked++
			pkg, recv, name := sm[1], sm[2], sm[3]
			if !declares(t, filepath.Join(root, filepath.FromSlash(pkg)), recv, name) {
				t.Errorf("category %q: marker %q: package %s declares no %s", c.name, m, pkg, strings.TrimPrefix(recv+"."+name, "."))
			}
		}
	}
	if checked < 5 {
		t.Fatalf("checked %d of pact's markers, want every one (at least 5): the pattern no longer matches them", checked)
	}
}

// declares reports whether the non-test Go files in dir declare the
// function name (recv empty) or the method recv.name.
func declares(t *testing.T, dir, recv, name string) bool {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Errorf("read %s: %v", dir, err)
		return false
	}
	fset := token.NewFileSet()
	for _, e := range entries {
		if !strings.HasSuffix(e.Name(), ".go") || strings.HasSuffix(e.Name(), "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, filepath.Join(dir, e.Name()), nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatalf("parse %s: %v", e.Name(), err)
		}
		for _, d := range f.Decls {
			fd, ok := d.(*ast.FuncDecl)
			if !ok || fd.Name.Name != name {
				continue
			}
			if recv == "" && fd.Recv == nil {
				return true
			}
			if recv != "" && fd.Recv != nil && receiverName(fd.Recv.List[0].Type) == recv {
				return true
			}
		}
	}
	return false
}

func receiverName(e ast.Expr) string {
	switch x := e.(type) {
	case *ast.StarExpr:
		return receiverName(x.X)
	case *ast.Ident:
		return x.Name
	case *ast.IndexExpr:
		return receiverName(x.X)
	}
	return ""
}
