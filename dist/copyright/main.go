// Command copyright writes the packages' /usr/share/doc/pact/copyright
// (`make package` runs it): pact's own license, and, because the binaries
// are statically linked, the license of the Go standard library and of
// every Go module the given binaries were built with (read from their
// build information), each text in full, from the module cache.
//
// The format is Debian's machine-readable copyright format (DEP-5): a
// paragraph per module naming its license, and each distinct license text
// once, in a standalone paragraph.
//
//	go run ./dist/copyright -o COPYRIGHT BINARY...
package main

import (
	"bytes"
	"crypto/sha256"
	"debug/buildinfo"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	"github.com/pact-hpc/pact/internal/atomicfile"
)

func main() {
	out := flag.String("o", "", "write the copyright file here (default: standard output)")
	flag.Parse()
	if flag.NArg() == 0 {
		fmt.Fprintln(os.Stderr, "usage: copyright [-o FILE] BINARY...")
		os.Exit(2)
	}
	text, err := generate(flag.Args())
	if err != nil {
		fmt.Fprintf(os.Stderr, "copyright: %v\n", err)
		os.Exit(1)
	}
	if *out == "" {
		_, err = os.Stdout.Write(text)
	} else {
		err = atomicfile.WriteFile(*out, text, 0o644)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "copyright: %v\n", err)
		os.Exit(1)
	}
}

type module struct{ path, version, dir string }

func generate(binaries []string) ([]byte, error) {
	env, err := exec.Command("go", "env", "GOROOT", "GOMODCACHE").Output()
	if err != nil {
		return nil, fmt.Errorf("go env: %w", err)
	}
	roots := strings.Fields(string(env))
	if len(roots) != 2 {
		return nil, fmt.Errorf("go env GOROOT GOMODCACHE printed %q", env)
	}
	goroot, modcache := roots[0], roots[1]

	seen := map[string]module{}
	goVersion := ""
	for _, b := range binaries {
		info, err := buildinfo.ReadFile(b)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", b, err)
		}
		goVersion = info.GoVersion
		for _, d := range info.Deps {
			if d.Replace != nil {
				d = d.Replace
			}
			dir := d.Path
			if !filepath.IsAbs(dir) && !strings.HasPrefix(dir, ".") {
				dir = filepath.Join(modcache, escape(d.Path)+"@"+escape(d.Version))
			}
			seen[d.Path] = module{path: d.Path, version: d.Version, dir: dir}
		}
	}
	mods := make([]module, 0, len(seen))
	for _, m := range seen {
		mods = append(mods, m)
	}
	slices.SortFunc(mods, func(a, b module) int { return strings.Compare(a.path, b.path) })

	var w bytes.Buffer
	fmt.Fprintf(&w, `Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/
Upstream-Name: pact
Upstream-Contact: pact developers <pact@pact-hpc.invalid>
Source: https://github.com/pact-hpc/pact
Comment: pact-journal, pact-agent and pact are statically linked Go
 programs. Besides pact itself they contain the Go standard library
 (%s) and the Go modules listed below, each under its own license,
 whose full text follows.

Files: *
Copyright: The pact developers
License: Apache-2.0
`, goVersion)

	licenses := map[string]string{} // text hash -> paragraph name
	var paragraphs bytes.Buffer
	named := map[string]int{}
	add := func(what, copyrightFrom, dir string) error {
		text, notice, err := licenseOf(dir)
		if err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
		sum := fmt.Sprintf("%x", sha256.Sum256([]byte(strings.Join(strings.Fields(text), " "))))
		name, ok := licenses[sum]
		if !ok {
			name = kind(text)
			if named[name]++; named[name] > 1 {
				name = fmt.Sprintf("%s-%d", name, named[name])
			}
			licenses[sum] = name
			fmt.Fprintf(&paragraphs, "\nLicense: %s\n%s", name, indent(text))
		}
		fmt.Fprintf(&w, "\nFiles: %s\nCopyright: %s\nLicense: %s\n", what, copyrightFrom, name)
		if notice != "" {
			fmt.Fprintf(&w, "Comment: NOTICE:\n%s", indent(notice))
		}
		return nil
	}
	if err := add("go/*", "The Go Authors (the Go standard library, "+goVersion+")", goroot); err != nil {
		return nil, err
	}
	for _, m := range mods {
		if err := add("go-module/"+m.path+"/*", "The authors of "+m.path+" "+m.version+" (see the license text)", m.dir); err != nil {
			return nil, err
		}
	}
	if named["Apache-2.0"] == 0 {
		// pact's own license, when no module brought its full text.
		fmt.Fprintf(&w, `
License: Apache-2.0
 Licensed under the Apache License, Version 2.0 (the "License"); you may
 not use this file except in compliance with the License. You may obtain a
 copy of the License at http://www.apache.org/licenses/LICENSE-2.0
 .
 On Debian systems, the full text of the Apache License 2.0 is in
 /usr/share/common-licenses/Apache-2.0.
`)
	}
	w.Write(paragraphs.Bytes())
	return w.Bytes(), nil
}

var licenseFile = regexp.MustCompile(`(?i)^(licen[cs]e|copying)(\.(txt|md))?$`)

// licenseOf reads the license (and NOTICE) file at the top of dir.
func licenseOf(dir string) (text, notice string, err error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return "", "", fmt.Errorf("%w (is the module downloaded? go mod download)", err)
	}
	for _, e := range entries {
		name := e.Name()
		switch {
		case text == "" && licenseFile.MatchString(name):
			b, err := os.ReadFile(filepath.Join(dir, name))
			if err != nil {
				return "", "", err
			}
			text = string(b)
		case strings.EqualFold(name, "NOTICE") || strings.EqualFold(name, "NOTICE.txt"):
			b, err := os.ReadFile(filepath.Join(dir, name))
			if err != nil {
				return "", "", err
			}
			notice = string(b)
		}
	}
	if strings.TrimSpace(text) == "" {
		return "", "", errors.New("no license file in " + dir)
	}
	return text, notice, nil
}

// kind names a license text by its wording; the text itself is what
// counts, and it is reproduced whole.
func kind(text string) string {
	has := func(s string) bool { return strings.Contains(text, s) }
	switch {
	case has("MIT License") && has("Apache License"):
		return "MIT-and-Apache-2.0"
	case has("Apache License") && has("Version 2.0"):
		return "Apache-2.0"
	case has("Mozilla Public License") && has("2.0"):
		return "MPL-2.0"
	case has("Permission is hereby granted, free of charge"):
		return "Expat"
	case has("Redistribution and use in source and binary forms") && has("Neither the name"):
		return "BSD-3-clause"
	case has("Redistribution and use in source and binary forms"):
		return "BSD-2-clause"
	}
	return "other"
}

// indent makes text a DEP-5 continuation: each line after a space, an
// empty line as " .".
func indent(text string) string {
	var b strings.Builder
	for _, l := range strings.Split(strings.TrimRight(strings.ReplaceAll(text, "\r\n", "\n"), "\n "), "\n") {
		l = strings.TrimRight(l, " \t")
		if l == "" {
			b.WriteString(" .\n")
			continue
		}
		b.WriteString(" " + l + "\n")
	}
	return b.String()
}

// escape is the module cache's case encoding: an upper-case letter becomes
// '!' and its lower case.
func escape(s string) string {
	var b strings.Builder
	for _, r := range s {
		if 'A' <= r && r <= 'Z' {
			b.WriteByte('!')
			r += 'a' - 'A'
		}
		b.WriteRune(r)
	}
	return b.String()
}
