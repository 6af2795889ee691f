// Package version holds the release of pact's binaries, stamped at link
// time from git by `make build`, the container image and the packages:
//
//	go build -ldflags "-X github.com/pact-hpc/pact/internal/version.Version=v0.3.0 \
//	    -X github.com/pact-hpc/pact/internal/version.Commit=0123abc" ./cmd/...
//
// It is the only place that holds them: pact, pact-journal and pact-agent
// print the same string for the same build, and a journal reports it to
// `pact journal status` and `pact version`.
package version

import (
	"fmt"
	"runtime"
	"runtime/debug"
)

// Set by the linker (-X); empty in a plain `go build`, where Get falls back
// to what the Go toolchain recorded.
var (
	// Version is the release: vx.y.z from `make release`, otherwise what
	// `git describe --tags --always --dirty` says, or without a release tag
	// in the clone the same from RELEASES (scripts/version.sh).
	Version = ""
	// Commit is the full git commit the binary was built from.
	Commit = ""
)

// Info is one binary's version, as printed and as sent to the CLI.
type Info struct {
	Version  string `json:"version"`
	Commit   string `json:"commit"`
	Go       string `json:"go"`
	Platform string `json:"platform"`
}

// Get returns the stamped version, or the module version and VCS revision
// from the build info, or "(devel)".
func Get() Info {
	info := Info{Version: Version, Commit: Commit, Go: runtime.Version(), Platform: runtime.GOOS + "/" + runtime.GOARCH}
	bi, ok := debug.ReadBuildInfo()
	if info.Version == "" && ok && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		info.Version = bi.Main.Version
	}
	if info.Commit == "" && ok {
		for _, s := range bi.Settings {
			if s.Key == "vcs.revision" {
				info.Commit = s.Value
			}
		}
	}
	if info.Version == "" {
		info.Version = "(devel)"
	}
	return info
}

// String is the one line every binary prints for --version, e.g.
// "pact-agent v0.3.0 (commit 0123abc, go1.26.0, linux/amd64)".
func (i Info) String() string {
	commit := i.Commit
	if len(commit) > 12 {
		commit = commit[:12]
	}
	if commit == "" {
		commit = "unknown"
	}
	return fmt.Sprintf("%s (commit %s, %s, %s)", i.Version, commit, i.Go, i.Platform)
}

// Line is what `NAME --version` prints.
func Line(name string) string { return name + " " + Get().String() }
