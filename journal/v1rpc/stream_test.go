package v1rpc

import (
	"fmt"
	"testing"

	"github.com/pact-hpc/pact/journal/auth"
	"github.com/pact-hpc/pact/journal/raftnode"
	"github.com/pact-hpc/pact/raftfsm"
)

func TestStreamDropReason(t *testing.T) {
	for _, tt := range []struct {
		decided string
		err     error
		want    string
	}{
		{"", nil, DropClientGone},
		{DropCertExpired, fmt.Errorf("%w: expired", auth.ErrUnauthenticated), DropCertExpired},
		{"", fmt.Errorf("%w: node n1 was decommissioned", raftfsm.ErrNodeRevoked), DropNodeRevoked},
		{"", auth.FencedError("n1"), DropNodeFenced},
		{"", fmt.Errorf("%w: replaced", raftfsm.ErrStaleCertificate), DropSuperseded},
		{"", fmt.Errorf("%w: node n1 is not in the registry", auth.ErrPermission), DropOther},
		{DropShutdown, fmt.Errorf("%w: journal shutting down", raftnode.ErrNoLeader), DropShutdown},
	} {
		if got := StreamDropReason(tt.decided, tt.err); got != tt.want {
			t.Errorf("StreamDropReason(%q, %v) = %q, want %q", tt.decided, tt.err, got, tt.want)
		}
	}
}
