package journal

import (
	"net/netip"
	"testing"

	"github.com/pact-hpc/pact/journal/v1rpc"
)

func woken(w *streamWaker) bool {
	select {
	case <-w.node:
		return true
	default:
		return false
	}
}

// A stream that has sent its first state wakes no other stream of its
// node: a renewed agent closes its old channel itself, and an old stream
// whose client has not is let go at its next re-check
// (TestStreamDropsByReason). Waking them cost every renewal of a storm a
// re-check and an ending status on the journal and a read on the agent.
func TestStreamingWakesNoOtherStream(t *testing.T) {
	h := newHub()
	old := h.register("n1", "s1", v1rpc.ConnID{})
	renewed := h.register("n1", "s2", v1rpc.ConnID{})
	h.streaming(renewed)
	if woken(old) {
		t.Error("the node's new stream streaming woke its old one")
	}
	if !h.hasStream("n1", "s2") || h.hasStream("n1", "s1") {
		t.Error("hasStream does not follow which stream has sent its first state")
	}
	if !h.othersStreaming(old) || h.othersStreaming(renewed) {
		t.Error("othersStreaming does not follow which stream has sent its first state")
	}
}

// A renewal made over a stream's own connection marks only the streams of
// the renewed certificate on that very connection; a connection without
// addresses (a transport that has none) matches nothing, not even another
// such connection.
func TestRenewingOverMarksOnlyTheStreamOnItsConnection(t *testing.T) {
	conn := func(remote string) v1rpc.ConnID {
		return v1rpc.ConnID{Remote: netip.MustParseAddrPort(remote), Local: netip.MustParseAddrPort("127.0.0.1:9443")}
	}
	h := newHub()
	own := h.register("n1", "s1", conn("127.0.0.1:40001"))
	otherConn := h.register("n1", "s1", conn("127.0.0.1:40002"))
	otherCert := h.register("n1", "s0", conn("127.0.0.1:40001"))
	otherNode := h.register("n2", "s1", conn("127.0.0.1:40001"))
	noAddr := h.register("n1", "s1", v1rpc.ConnID{})

	h.renewingOver(conn("127.0.0.1:40001"), "n1", "s1", "s2")
	h.renewingOver(v1rpc.ConnID{}, "n1", "s1", "s3")

	for _, tc := range []struct {
		name string
		w    *streamWaker
		want string
	}{
		{"the renewed certificate's stream on the renewal's connection", own, "s2"},
		{"the same certificate's stream on another connection", otherConn, ""},
		{"another certificate's stream on the renewal's connection", otherCert, ""},
		{"another node's stream", otherNode, ""},
		{"a stream on a connection without addresses", noAddr, ""},
	} {
		if got := tc.w.RenewedOverItsConnection(); got != tc.want {
			t.Errorf("%s: RenewedOverItsConnection() = %q, want %q", tc.name, got, tc.want)
		}
	}
}
