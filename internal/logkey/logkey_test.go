package logkey_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"go/ast"
	"go/importer"
	"go/parser"
	"go/token"
	"go/types"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
)

const (
	module     = "github.com/pact-hpc/pact"
	logkeyPath = module + "/internal/logkey"
)

// TestEveryLogKeyIsALogkeyConstant fails if production code passes slog a
// key that is not a constant of this package, so every key is spelled
// once, in logkey.go, and a log line stays greppable.
//
// It reads the types (go/types over the module, its imports read from the
// compiler's export data, which go list -export makes): a call is a slog
// call when the function it calls is log/slog's, called directly, through
// a method value (log := a.log.Debug; log(...)) or through a func variable
// assigned one. Keys and values alternate from the variadic args; an
// argument of type slog.Attr takes one place; args spread from a slice
// (attrs...) are followed to the slice's literals and appends, and to the
// return statements of a function that makes it. slog.Attr{Key: ...} and
// the first argument of slog.String, slog.Group, ... are keys too. Helper
// packages (*test), the integration and chaos tests, and the Raft snapshot
// files are out of its scope.
func TestEveryLogKeyIsALogkeyConstant(t *testing.T) {
	mod := loadModule(t)
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	files, used := 0, map[string]bool{}
	for _, p := range mod.pkgs {
		if !inScope(p.ImportPath) {
			continue
		}
		pkg, fset, parsed := typeCheck(t, mod, p.Dir, p.GoFiles, p.ImportPath)
		for i, f := range parsed {
			name := p.GoFiles[i]
			if strings.HasSuffix(name, ".pb.go") || (p.ImportPath == module+"/raftfsm" && strings.HasPrefix(name, "snap")) {
				continue
			}
			files++
			rel, err := filepath.Rel(root, filepath.Join(p.Dir, name))
			if err != nil {
				t.Fatal(err)
			}
			for _, bad := range badKeys(pkg, f) {
				key := filepath.ToSlash(rel) + ":" + types.ExprString(bad)
				if _, ok := forwarded[key]; ok {
					used[key] = true
					continue
				}
				t.Errorf("%s: log key %s is not an internal/logkey constant; add a constant to internal/logkey and use it", fset.Position(bad.Pos()), types.ExprString(bad))
			}
		}
	}
	if files < 50 {
		t.Fatalf("read %d Go files of %s; the check would be meaningless", files, module)
	}
	for key := range forwarded {
		if !used[key] {
			t.Errorf("forwarded entry %q matches nothing: remove it", key)
		}
	}
}

// forwarded lists, by file and expression, the keys that are not pact's
// but passed on as they came, each with why.
var forwarded = map[string]string{
	"journal/raftnode/logger.go:a": "hashicorp/raft's own key-value args, passed on by the hclog adapter: raft's vocabulary, not pact's",
}

// inScope reports whether a package of the module is production code the
// check reads.
func inScope(path string) bool {
	rel, ok := strings.CutPrefix(path, module+"/")
	if !ok {
		return path == module
	}
	for _, part := range strings.Split(rel, "/") {
		if part == "integration" || part == "testdata" || strings.HasSuffix(part, "test") {
			return false
		}
	}
	return true
}

type listed struct {
	ImportPath string
	Dir        string
	GoFiles    []string
	Export     string
	Error      *struct{ Err string }
}

type moduleInfo struct {
	pkgs    []listed          // the module's packages
	exports map[string]string // import path -> export data file, every dependency
}

var (
	loadOnce sync.Once
	loaded   *moduleInfo
	loadErr  error
)

// loadModule lists the module's packages and the export data of every
// package they import (go list -export builds it, or finds it cached).
func loadModule(t *testing.T) *moduleInfo {
	t.Helper()
	loadOnce.Do(func() {
		cmd := exec.Command("go", "list", "-e", "-export", "-deps", "-json=ImportPath,Dir,GoFiles,Export,Error", "./...")
		cmd.Dir = filepath.Join("..", "..")
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			loadErr = fmt.Errorf("go list: %v\n%s", err, stderr.String())
			return
		}
		m := &moduleInfo{exports: map[string]string{}}
		for dec := json.NewDecoder(bytes.NewReader(out)); ; {
			var p listed
			if err := dec.Decode(&p); errors.Is(err, io.EOF) {
				break
			} else if err != nil {
				loadErr = err
				return
			}
			if p.Error != nil {
				loadErr = fmt.Errorf("go list: %s: %s", p.ImportPath, p.Error.Err)
				return
			}
			m.exports[p.ImportPath] = p.Export
			if p.ImportPath == module || strings.HasPrefix(p.ImportPath, module+"/") {
				m.pkgs = append(m.pkgs, p)
			}
		}
		loaded = m
	})
	if loadErr != nil {
		t.Fatal(loadErr)
	}
	return loaded
}

// typeCheck parses and type-checks one package from source, its imports
// from export data.
func typeCheck(t *testing.T, mod *moduleInfo, dir string, names []string, path string) (*checked, *token.FileSet, []*ast.File) {
	t.Helper()
	fset := token.NewFileSet()
	var files []*ast.File
	for _, n := range names {
		f, err := parser.ParseFile(fset, filepath.Join(dir, n), nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, f)
	}
	return checkFiles(t, mod, fset, path, files), fset, files
}

func checkFiles(t *testing.T, mod *moduleInfo, fset *token.FileSet, path string, files []*ast.File) *checked {
	t.Helper()
	imp := importer.ForCompiler(fset, "gc", func(p string) (io.ReadCloser, error) {
		file, ok := mod.exports[p]
		if !ok || file == "" {
			return nil, fmt.Errorf("no export data for %s", p)
		}
		return os.Open(file)
	})
	info := &types.Info{
		Types: map[ast.Expr]types.TypeAndValue{},
		Defs:  map[*ast.Ident]types.Object{},
		Uses:  map[*ast.Ident]types.Object{},
	}
	pkg, err := (&types.Config{Importer: imp}).Check(path, fset, files, info)
	if err != nil {
		t.Fatalf("type-checking %s: %v", path, err)
	}
	return newChecked(pkg, info, files)
}

// checked is a type-checked package and what badKeys needs to know of it:
// what each variable and function may hold, to follow a method value or
// a spread slice to where it was made.
type checked struct {
	pkg  *types.Package
	info *types.Info
	// assigned maps a variable to every expression assigned to it
	// (x := e, x = e, var x = e, x = append(x, e...)).
	assigned map[types.Object][]ast.Expr
	// returns maps a function of the package to its return expressions.
	returns map[types.Object][]ast.Expr
}

func newChecked(pkg *types.Package, info *types.Info, files []*ast.File) *checked {
	c := &checked{pkg: pkg, info: info, assigned: map[types.Object][]ast.Expr{}, returns: map[types.Object][]ast.Expr{}}
	assign := func(lhs, rhs []ast.Expr) {
		if len(lhs) != len(rhs) {
			return
		}
		for i, l := range lhs {
			id, ok := ast.Unparen(l).(*ast.Ident)
			if !ok {
				continue
			}
			obj := info.Defs[id]
			if obj == nil {
				obj = info.Uses[id]
			}
			if obj != nil {
				c.assigned[obj] = append(c.assigned[obj], rhs[i])
			}
		}
	}
	for _, f := range files {
		for _, d := range f.Decls {
			fd, ok := d.(*ast.FuncDecl)
			if ok && fd.Body != nil {
				obj := info.Defs[fd.Name]
				ast.Inspect(fd.Body, func(n ast.Node) bool {
					if _, ok := n.(*ast.FuncLit); ok {
						return false
					}
					if r, ok := n.(*ast.ReturnStmt); ok {
						c.returns[obj] = append(c.returns[obj], r.Results...)
					}
					return true
				})
			}
		}
		ast.Inspect(f, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.AssignStmt:
				assign(n.Lhs, n.Rhs)
			case *ast.ValueSpec:
				var lhs []ast.Expr
				for _, id := range n.Names {
					lhs = append(lhs, id)
				}
				assign(lhs, n.Values)
			}
			return true
		})
	}
	return c
}

// slogFunc returns the log/slog function or method fun calls, directly
// or through a variable assigned one (a method value), or nil.
func (c *checked) slogFunc(fun ast.Expr) *types.Func {
	return c.slogFuncSeen(fun, map[types.Object]bool{})
}

func (c *checked) slogFuncSeen(fun ast.Expr, seen map[types.Object]bool) *types.Func {
	var id *ast.Ident
	switch e := ast.Unparen(fun).(type) {
	case *ast.Ident:
		id = e
	case *ast.SelectorExpr:
		id = e.Sel
	default:
		return nil
	}
	switch obj := c.info.Uses[id].(type) {
	case *types.Func:
		if obj.Pkg() != nil && obj.Pkg().Path() == "log/slog" {
			return obj
		}
	case *types.Var:
		if seen[obj] {
			return nil
		}
		seen[obj] = true
		for _, e := range c.assigned[obj] {
			if f := c.slogFuncSeen(e, seen); f != nil {
				return f
			}
		}
	}
	return nil
}

func (c *checked) isAttr(e ast.Expr) bool {
	tv, ok := c.info.Types[e]
	if !ok {
		return false
	}
	n, ok := types.Unalias(tv.Type).(*types.Named)
	return ok && n.Obj().Pkg() != nil && n.Obj().Pkg().Path() == "log/slog" && n.Obj().Name() == "Attr"
}

// isLogkey reports whether e names a constant of internal/logkey.
func (c *checked) isLogkey(e ast.Expr) bool {
	var id *ast.Ident
	switch e := ast.Unparen(e).(type) {
	case *ast.Ident:
		id = e
	case *ast.SelectorExpr:
		id = e.Sel
	default:
		return false
	}
	k, ok := c.info.Uses[id].(*types.Const)
	return ok && k.Pkg() != nil && k.Pkg().Path() == logkeyPath
}

// badKeys returns the keys f passes to slog that are not logkey constants.
func badKeys(c *checked, f *ast.File) []ast.Expr {
	var bad []ast.Expr
	seen := map[ast.Expr]bool{}
	flag := func(e ast.Expr) {
		if !seen[e] {
			seen[e] = true
			bad = append(bad, e)
		}
	}
	// pairs checks args as alternating keys and values.
	pairs := func(args []ast.Expr) {
		for i := 0; i < len(args); {
			switch a := args[i]; {
			case c.isAttr(a):
				i++
			case c.isLogkey(a):
				i += 2
			default:
				flag(a)
				i += 2
			}
		}
	}
	var spread func(e ast.Expr, visited map[any]bool)
	spread = func(e ast.Expr, visited map[any]bool) {
		e = ast.Unparen(e)
		if visited[e] {
			return
		}
		visited[e] = true
		switch e := e.(type) {
		case *ast.CompositeLit:
			pairs(e.Elts)
		case *ast.Ident:
			if obj := c.info.Uses[e]; obj != nil && !visited[obj] {
				visited[obj] = true
				for _, src := range c.assigned[obj] {
					spread(src, visited)
				}
			}
		case *ast.CallExpr:
			if id, ok := ast.Unparen(e.Fun).(*ast.Ident); ok && id.Name == "append" {
				if _, builtin := c.info.Uses[id].(*types.Builtin); builtin && len(e.Args) > 0 {
					spread(e.Args[0], visited)
					rest := e.Args[1:]
					if e.Ellipsis.IsValid() && len(rest) == 1 {
						spread(rest[0], visited)
					} else {
						pairs(rest)
					}
					return
				}
			}
			var id *ast.Ident
			switch fn := ast.Unparen(e.Fun).(type) {
			case *ast.Ident:
				id = fn
			case *ast.SelectorExpr:
				id = fn.Sel
			}
			if id != nil {
				if obj := c.info.Uses[id]; obj != nil {
					for _, r := range c.returns[obj] {
						spread(r, visited)
					}
				}
			}
		}
	}
	ast.Inspect(f, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.CompositeLit:
			if tv, ok := c.info.Types[n]; ok && c.isAttrType(tv.Type) {
				for _, el := range n.Elts {
					if kv, ok := el.(*ast.KeyValueExpr); ok {
						if k, ok := kv.Key.(*ast.Ident); ok && k.Name == "Key" && !c.isLogkey(kv.Value) {
							flag(kv.Value)
						}
					}
				}
			}
		case *ast.CallExpr:
			fn := c.slogFunc(n.Fun)
			if fn == nil {
				return true
			}
			sig := fn.Type().(*types.Signature)
			params := sig.Params()
			if params.Len() > 0 && params.At(0).Name() == "key" && len(n.Args) > 0 && !c.isLogkey(n.Args[0]) {
				flag(n.Args[0]) // slog.String(key, ...), slog.Group(key, ...)
			}
			if !sig.Variadic() {
				return true
			}
			last := params.At(params.Len() - 1).Type().(*types.Slice)
			if !types.Identical(last.Elem(), types.Universe.Lookup("any").Type()) {
				return true // LogAttrs(..., attrs ...Attr): each an Attr, checked where made
			}
			start := params.Len() - 1
			if start > len(n.Args) {
				return true
			}
			args := n.Args[start:]
			if n.Ellipsis.IsValid() && len(args) == 1 {
				spread(args[0], map[any]bool{})
			} else {
				pairs(args)
			}
		}
		return true
	})
	return bad
}

func (c *checked) isAttrType(t types.Type) bool {
	n, ok := types.Unalias(t).(*types.Named)
	return ok && n.Obj().Pkg() != nil && n.Obj().Pkg().Path() == "log/slog" && n.Obj().Name() == "Attr"
}

// The check itself: what it flags and what it leaves alone.
func TestBadKeys(t *testing.T) {
	const src = `package p

import (
	"context"
	"log/slog"

	"google.golang.org/grpc/status"

	"github.com/pact-hpc/pact/internal/logkey"
)

const localKey = "bad7"

func f(log *slog.Logger, dynamic string) {
	log.Info("msg", "bad1", 1)
	log.Info("msg", logkey.Err, "a value", slog.String("bad2", "v"), "bad3", 2)
	log.With("bad4", 1).Warn("msg", slog.Int(logkey.Index, 1), logkey.Reason, "why")
	log.Log(context.Background(), slog.LevelInfo, "msg", "bad5", 1)
	slog.Error("msg", "bad6", 1)
	_ = status.Error(1, "not a log call")
	log.Debug("only a message")
	log.Info("msg", localKey, 1, dynamic, 2)
	out := log.Debug
	if dynamic != "" {
		out = log.Info
	}
	out("a method value", "bad8", 1, logkey.Err, nil)
	attrs := []any{"bad9", 1, logkey.NodeID, "n1"}
	attrs = append(attrs, extra()...)
	attrs = append(attrs, "bad11", 2)
	log.Info("spread", attrs...)
	log.LogAttrs(context.Background(), slog.LevelInfo, "attrs", slog.Attr{Key: "bad12", Value: slog.IntValue(1)}, slog.Any(logkey.Err, nil))
	fine := []any{logkey.Addr, "x", slog.Bool(logkey.TPM, true), logkey.Err, nil}
	log.Warn("fine", fine...)
}

func extra() []any { return []any{"bad10", 1} }
`
	mod := loadModule(t)
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "p.go", src, parser.SkipObjectResolution)
	if err != nil {
		t.Fatal(err)
	}
	c := checkFiles(t, mod, fset, "p", []*ast.File{f})
	var got []string
	for _, e := range badKeys(c, f) {
		got = append(got, types.ExprString(e))
	}
	slices.Sort(got)
	want := []string{`"bad1"`, `"bad11"`, `"bad12"`, `"bad2"`, `"bad3"`, `"bad4"`, `"bad5"`, `"bad6"`, `"bad8"`, `"bad9"`, `"bad10"`, `dynamic`, `localKey`}
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Fatalf("flagged %s, want %s", strings.Join(got, " "), strings.Join(want, " "))
	}
}
