package raftnode

import (
	"strings"
	"testing"

	"github.com/pact-hpc/pact/raftfsm"
)

// Validate names every problem at once, and the defaults with the four
// required fields pass.
func TestConfigValidate(t *testing.T) {
	var zero Config
	err := zero.Validate()
	if err == nil {
		t.Fatal("the zero Config passed")
	}
	for _, want := range []string{"NodeID", "DataDir or Stores", "FSM", "ApplyTimeout", "RaftWriteTimeout", "HandshakeTimeout", "ActivationBatchMax", "Logger", "Clock"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("Validate did not name %s: %v", want, err)
		}
	}
	cfg := DefaultConfig()
	cfg.NodeID, cfg.DataDir = "j1", t.TempDir()
	cfg.FSM = raftfsm.New()
	if err := cfg.Validate(); err != nil {
		t.Fatalf("defaults: %v", err)
	}
	cfg.RaftListen = "127.0.0.1:0"
	if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "Credentials") || !strings.Contains(err.Error(), "Conns") {
		t.Fatalf("a Raft port without credentials and limits: %v", err)
	}
	cfg.RaftListen = ""
	// Credentials without the peer authentication that goes with them.
	cfg.Credentials = peerCreds{}
	if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "PeerAuth is required with Credentials") {
		t.Fatalf("credentials without PeerAuth: %v", err)
	}
	cfg.Credentials = nil
	cfg.Join, cfg.InitialCluster = true, []Peer{{ID: "j1", RaftAddr: "127.0.0.1:1"}}
	if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "Join and InitialCluster") {
		t.Fatalf("join and an initial cluster: %v", err)
	}
}
