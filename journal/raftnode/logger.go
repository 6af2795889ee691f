package raftnode

import (
	"context"
	"fmt"
	"io"
	"log/slog"

	"github.com/hashicorp/go-hclog"

	"github.com/pact-hpc/pact/internal/logkey"
)

// newRaftLogger routes hashicorp/raft's hclog output into slog.
func newRaftLogger(l *slog.Logger) hclog.Logger {
	il := hclog.NewInterceptLogger(&hclog.LoggerOptions{
		Name:   "raft",
		Level:  hclog.Info,
		Output: io.Discard,
	})
	il.RegisterSink(slogSink{l: l})
	return il
}

type slogSink struct{ l *slog.Logger }

func (s slogSink) Accept(name string, level hclog.Level, msg string, args ...interface{}) {
	var lvl slog.Level
	switch {
	case level <= hclog.Debug:
		lvl = slog.LevelDebug
	case level == hclog.Info:
		lvl = slog.LevelInfo
	case level == hclog.Warn:
		lvl = slog.LevelWarn
	default:
		lvl = slog.LevelError
	}
	if level == hclog.Warn && msg == msgElection && !knewLeader(args) {
		// A journal that has known no leader since it started (a lone
		// voter, every member of a quorum starting) starts the first
		// election: nothing is wrong. Losing a leader it knew stays WARN.
		lvl = slog.LevelInfo
	}
	attrs := make([]any, 0, len(args)+2)
	attrs = append(attrs, logkey.Component, name)
	for _, a := range args {
		if f, ok := a.(hclog.Format); ok && len(f) > 0 {
			if format, ok := f[0].(string); ok {
				a = fmt.Sprintf(format, f[1:]...)
			}
		}
		attrs = append(attrs, a)
	}
	s.l.Log(context.Background(), lvl, msg, attrs...)
}

// msgElection is what hashicorp/raft logs, at WARN, when a voter's
// heartbeat timeout passes without a leader and it starts an election.
const msgElection = "heartbeat timeout reached, starting election"

// knewLeader reports whether raft's key-value args name the leader the
// journal last knew (last-leader-id).
func knewLeader(args []any) bool {
	for i := 0; i+1 < len(args); i += 2 {
		if k, ok := args[i].(string); ok && k == "last-leader-id" {
			return fmt.Sprint(args[i+1]) != ""
		}
	}
	return true
}
