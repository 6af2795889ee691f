package logkey_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// keyStart is, for each slog call this test knows, the index of the first
// argument that may be a key: the ones before it are a context, a level or
// the message. Logger methods and the package-level functions share names.
var keyStart = map[string]int{
	"Debug": 1, "Info": 1, "Warn": 1, "Error": 1,
	"DebugContext": 2, "InfoContext": 2, "WarnContext": 2, "ErrorContext": 2,
	"Log":  3,
	"With": 0,
}

// attrFuncs are slog's Attr constructors; their first argument is a key.
var attrFuncs = map[string]bool{
	"String": true, "Int": true, "Int64": true, "Uint64": true, "Float64": true,
	"Bool": true, "Time": true, "Duration": true, "Any": true, "Group": true,
}

// TestEveryLogKeyIsALogkeyConstant fails if production code passes a
// string literal as a log key to slog, so every key is spelled once, in
// logkey.go, and a log line stays greppable.
//
// It reads the syntax, not the types: a call counts as a slog call when
// its method has a slog name (Info, Warn, With, ...) and its receiver is
// not a package other than log/slog (status.Error is not a log call).
// Keys and values alternate after the message; an slog.Attr argument (an
// slog.String(...) call or any expression that is neither a string
// literal nor a logkey constant) takes one place, so a literal value is
// not mistaken for a key. Helper packages (*test), the integration and
// chaos tests, and the Raft snapshot files are out of its scope.
func TestEveryLogKeyIsALogkeyConstant(t *testing.T) {
	root := filepath.Join("..", "..")
	fset := token.NewFileSet()
	files := 0
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() {
			if path != root && (strings.HasPrefix(name, ".") || name == "testdata" || name == "integration" || strings.HasSuffix(name, "test")) {
				return filepath.SkipDir
			}
			return nil
		}
		rel, _ := filepath.Rel(root, path)
		if !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") || strings.HasSuffix(name, ".pb.go") ||
			(filepath.Dir(rel) == "raftfsm" && strings.HasPrefix(name, "snap")) {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		files++
		for _, lit := range literalKeys(f) {
			t.Errorf("%s: log key %s is a string literal; add a constant to internal/logkey and use it", fset.Position(lit.Pos()), lit.Value)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if files < 50 {
		t.Fatalf("read %d Go files from %s; the check would be meaningless", files, root)
	}
}

// literalKeys returns the string literals f passes to slog as keys.
func literalKeys(f *ast.File) []*ast.BasicLit {
	slogName, others := "", map[string]bool{}
	for _, imp := range f.Imports {
		p, _ := strconv.Unquote(imp.Path.Value)
		name := p[strings.LastIndex(p, "/")+1:]
		if imp.Name != nil {
			name = imp.Name.Name
		}
		if p == "log/slog" {
			slogName = name
		} else {
			others[name] = true
		}
	}
	var lits []*ast.BasicLit
	ast.Inspect(f, func(n ast.Node) bool {
		call, ok := n.(*ast.CallExpr)
		if !ok {
			return true
		}
		sel, ok := call.Fun.(*ast.SelectorExpr)
		if !ok {
			return true
		}
		pkg, _ := sel.X.(*ast.Ident)
		onSlog := pkg != nil && slogName != "" && pkg.Name == slogName
		if pkg != nil && !onSlog && others[pkg.Name] {
			return true // a function of another package
		}
		if onSlog && attrFuncs[sel.Sel.Name] {
			if len(call.Args) > 0 {
				if lit := stringLit(call.Args[0]); lit != nil {
					lits = append(lits, lit)
				}
			}
			return true
		}
		start, ok := keyStart[sel.Sel.Name]
		if !ok {
			return true
		}
		for i := start; i < len(call.Args); {
			arg := call.Args[i]
			if lit := stringLit(arg); lit != nil {
				lits = append(lits, lit)
				i += 2
			} else if isLogkey(arg) {
				i += 2
			} else {
				i++ // an slog.Attr
			}
		}
		return true
	})
	return lits
}

func stringLit(e ast.Expr) *ast.BasicLit {
	if lit, ok := e.(*ast.BasicLit); ok && lit.Kind == token.STRING {
		return lit
	}
	return nil
}

func isLogkey(e ast.Expr) bool {
	sel, ok := e.(*ast.SelectorExpr)
	if !ok {
		return false
	}
	pkg, ok := sel.X.(*ast.Ident)
	return ok && pkg.Name == "logkey"
}

// The check itself: what it flags and what it leaves alone.
func TestLiteralKeys(t *testing.T) {
	const src = `package p

import (
	"log/slog"

	"google.golang.org/grpc/status"

	"github.com/pact-hpc/pact/internal/logkey"
)

func f(log *slog.Logger) {
	log.Info("msg", "bad1", 1)
	log.Info("msg", logkey.Err, "a value", slog.String("bad2", "v"), "bad3", 2)
	log.With("bad4", 1).Warn("msg", slog.Int(logkey.Index, 1), logkey.Reason, "why")
	log.Log(nil, slog.LevelInfo, "msg", "bad5", 1)
	slog.Error("msg", "bad6", 1)
	_ = status.Error(1, "not a log call")
	log.Debug("only a message")
}
`
	f, err := parser.ParseFile(token.NewFileSet(), "p.go", src, parser.SkipObjectResolution)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, lit := range literalKeys(f) {
		got = append(got, lit.Value)
	}
	slices.Sort(got)
	want := `"bad1" "bad2" "bad3" "bad4" "bad5" "bad6"`
	if g := strings.Join(got, " "); g != want {
		t.Fatalf("flagged %s, want %s", g, want)
	}
}
