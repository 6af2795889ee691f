package settings

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/pact-hpc/pact/internal/suggest"
)

// MaxFileSize bounds a configuration file; pact's are a few hundred bytes.
const MaxFileSize = 1 << 20

// FileValue is one setting as the configuration file gives it.
type FileValue struct {
	Raw  []string // one value, or the items of a sequence
	File string
	Line int
}

// yamlLine finds the line in yaml's own syntax errors ("yaml: line 3: ...").
var yamlLine = regexp.MustCompile(`^yaml: line (\d+): (.*)$`)

// ParseFile reads a configuration file: a YAML mapping from setting names
// (the flag names, without --) to values. It returns the values it could
// read and every problem it found, each an *Error with its line. The
// values are not yet checked against their types; Resolve does that.
func (s *Set) ParseFile(path string, data []byte) (map[string]FileValue, []error) {
	values := map[string]FileValue{}
	fileErr := func(line int, name string, sentinel error, format string, args ...any) error {
		return &Error{Source: FromFile, File: path, Line: line, Name: name, Reason: sentinel, Err: fmt.Errorf(format, args...)}
	}
	if len(data) > MaxFileSize {
		return values, []error{fileErr(0, "", ErrFile, "larger than %d bytes; is it the right file?", MaxFileSize)}
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return values, nil // empty: every setting keeps its default
		}
		line, msg := syntaxLine(data, err)
		return values, []error{fileErr(line, "", ErrFile, "not valid YAML: %s", msg)}
	}
	var errs []error
	var extra yaml.Node
	if err := dec.Decode(&extra); err == nil {
		errs = append(errs, fileErr(extra.Line, "", ErrFile, "a second YAML document (---); put every setting in one"))
	} else if !errors.Is(err, io.EOF) {
		errs = append(errs, fileErr(0, "", ErrFile, "not valid YAML after the first document: %v", err))
	}
	root := &doc
	if root.Kind == yaml.DocumentNode {
		if len(root.Content) == 0 {
			return values, errs
		}
		root = root.Content[0]
	}
	if root.Kind == yaml.ScalarNode && root.Tag == "!!null" {
		return values, errs // only comments
	}
	if root.Kind != yaml.MappingNode {
		return values, append(errs, fileErr(root.Line, "", ErrFile, "want a mapping of settings (name: value), one per line"))
	}
	first := map[string]int{}
	for i := 0; i+1 < len(root.Content); i += 2 {
		k, v := root.Content[i], root.Content[i+1]
		if k.Kind != yaml.ScalarNode {
			errs = append(errs, fileErr(k.Line, "", ErrUnknownKey, "a key must be a setting name, not a list or mapping"))
			continue
		}
		name := k.Value
		st, ok := s.byName[name]
		if !ok || !st.file {
			errs = append(errs, fileErr(k.Line, name, ErrUnknownKey, "%s", s.unknown(name, ok)))
			continue
		}
		if l, dup := first[name]; dup {
			errs = append(errs, fileErr(k.Line, name, ErrBadValue, "set twice (first on line %d); keep one", l))
			continue
		}
		first[name] = k.Line
		raw, err := scalars(v, st.list)
		if err != nil {
			errs = append(errs, fileErr(v.Line, name, ErrBadValue, "%v", err))
			continue
		}
		values[name] = FileValue{Raw: raw, File: path, Line: v.Line}
	}
	return values, errs
}

// syntaxLine finds the line (1-based; 0 if unknown) of the syntax error
// err that yaml.v3 gave for data, and its message without the prefix.
//
// yaml.v3 (through v3.0.5) prints the line of the construct it was parsing
// (the context), counted from 0 for a parser error and from 1 for a
// scanner error, and prints none when that line is the first (0): it then
// falls back to the line of the problem, or to no line at all, so an error
// on line 1 showed as line 2, 3 or nothing. Parsing the file again behind
// one blank line puts every construct on a line other than 0, so the
// context line is always printed; the blank line changes nothing else in
// YAML. (A file in UTF-16 keeps its byte order mark first: it gets the
// plain reading.)
func syntaxLine(data []byte, err error) (int, string) {
	line, msg, scanner, ok := yamlErrLine(err)
	if utf16 := bytes.HasPrefix(data, []byte{0xfe, 0xff}) || bytes.HasPrefix(data, []byte{0xff, 0xfe}); !utf16 {
		var n yaml.Node
		shifted := append([]byte("\n"), bytes.TrimPrefix(data, []byte("\xef\xbb\xbf"))...)
		if serr := yaml.NewDecoder(bytes.NewReader(shifted)).Decode(&n); serr != nil {
			if l, m, sc, ok := yamlErrLine(serr); ok && m == msg {
				if sc {
					l-- // printed from 1: the blank line counts once
				}
				// A parser error's line is printed from 0: the blank line
				// makes it the 1-based line of the original.
				return l, msg
			}
		}
	}
	if !ok {
		return 0, msg
	}
	if !scanner {
		line++ // printed from 0
	}
	return line, msg
}

// yamlErrLine splits one of yaml's syntax errors ("yaml: line 3: ...")
// into the line as printed, the message, whether it is a scanner error
// (line printed from 1) rather than a parser error (from 0), and whether
// a line was printed at all.
func yamlErrLine(err error) (line int, msg string, scanner, ok bool) {
	msg = strings.TrimPrefix(err.Error(), "yaml: ")
	m := yamlLine.FindStringSubmatch(err.Error())
	if m == nil {
		return 0, msg, false, false
	}
	line, _ = strconv.Atoi(m[1])
	return line, m[2], !parserError(m[2]), true
}

// parserError tells yaml's parser errors from its scanner errors: for the
// former, yaml.v3 (through v3.0.5) prints a line counted from 0.
func parserError(msg string) bool {
	for _, p := range []string{"did not find expected", "found duplicate %", "found incompatible YAML document", "found undefined tag handle"} {
		if strings.HasPrefix(msg, p) {
			return true
		}
	}
	return false
}

// scalars reads a value node: a scalar, or for a list a sequence of them.
func scalars(n *yaml.Node, list bool) ([]string, error) {
	if n.Kind == yaml.AliasNode && n.Alias != nil {
		n = n.Alias
	}
	switch n.Kind {
	case yaml.ScalarNode:
		if n.Tag == "!!null" {
			return nil, errors.New("no value; give one (\"\" for an empty string) or remove the line")
		}
		return []string{n.Value}, nil
	case yaml.SequenceNode:
		if !list {
			return nil, errors.New("want one value, not a list")
		}
		out := []string{}
		for _, item := range n.Content {
			if item.Kind == yaml.AliasNode && item.Alias != nil {
				item = item.Alias
			}
			if item.Kind != yaml.ScalarNode || item.Tag == "!!null" {
				return nil, fmt.Errorf("item on line %d: want a plain value", item.Line)
			}
			out = append(out, item.Value)
		}
		if len(out) == 0 {
			// An empty sequence empties the list; one empty string does.
			out = []string{""}
		}
		return out, nil
	}
	if list {
		return nil, errors.New("want a value or a list of values, not a mapping")
	}
	return nil, errors.New("want one value, not a mapping")
}

// unknown says what to do about a key that names no setting.
func (s *Set) unknown(name string, isConfig bool) string {
	if isConfig {
		return fmt.Sprintf("%s cannot be set in the configuration file itself; give it as a flag or in the environment", name)
	}
	msg := fmt.Sprintf("unknown setting %s", quote(name))
	if near := s.nearest(name); near != "" {
		msg += fmt.Sprintf(" (did you mean %s?)", near)
	}
	return msg + ": remove it, or see " + s.prog + " --help for the settings (the keys are the flag names without --)"
}

// nearest is the setting whose name is closest to a misspelt key, if one
// is close enough to be a likely typo.
func (s *Set) nearest(key string) string {
	if len(key) > 64 {
		return ""
	}
	norm := strings.ToLower(strings.NewReplacer("_", "-", " ", "-").Replace(strings.TrimPrefix(key, "--")))
	best, bestD := "", 3
	names := make([]string, 0, len(s.byName))
	for n := range s.byName {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		if !s.byName[n].file {
			continue
		}
		if d := suggest.Distance(norm, n); d < bestD {
			best, bestD = n, d
		}
	}
	if best != "" {
		return best
	}
	// listen-addr for listen: a name with a word too many.
	for _, n := range names {
		if s.byName[n].file && strings.HasPrefix(norm, n+"-") && len(n) > len(best) {
			best = n
		}
	}
	return best
}
