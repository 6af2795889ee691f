package raftnode

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
)

// A journal's first election (a lone voter at every start, each member
// of a new quorum) is logged at INFO: nothing is wrong. An election after
// losing a leader it knew stays a WARN.
func TestFirstElectionIsNoWarning(t *testing.T) {
	for _, tt := range []struct {
		name   string
		leader raft.ServerID
		want   string
	}{
		{"no leader known since the start", "", "level=INFO"},
		{"a known leader went quiet", "j2", "level=WARN"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var buf bytes.Buffer
			l := newRaftLogger(slog.New(slog.NewTextHandler(&buf, nil)))
			l.Warn("heartbeat timeout reached, starting election", "last-leader-addr", raft.ServerAddress(""), "last-leader-id", tt.leader)
			if !strings.Contains(buf.String(), tt.want) {
				t.Errorf("logged %q, want %s", buf.String(), tt.want)
			}
		})
	}
	var buf bytes.Buffer
	newRaftLogger(slog.New(slog.NewTextHandler(&buf, nil))).Log(hclog.Warn, "failed to contact", "server-id", "j2")
	if !strings.Contains(buf.String(), "level=WARN") {
		t.Errorf("another warning: %q", buf.String())
	}
}
