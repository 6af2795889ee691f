// Package chaos is pact's chaos harness: it runs journal quorums (3 or 5)
// as real processes, or as containers of the pact image, drives them with
// a recording workload while it injects faults, and then checks the
// history for linearizability and the registry for its invariants.
//
// # Quorums and faults
//
// Each scenario starts a fresh quorum in its own directory. As root, every
// journal runs in its own network namespace (pactchaos-jN) joined by a
// bridge in another (pactchaos-hub); the harness reaches the bridge over
// one veth pair, and a partition is a set of iptables DROP rules inside
// the journals' namespaces, so it cuts journal-to-journal traffic only:
// clients still reach a cut-off journal, which must refuse to write.
// Without namespaces the journals run on loopback and a partition is
// emulated by freezing (SIGSTOP) the cut-off side; the report says so.
// With -docker the journals are containers of the pact image with the
// flags of docker-compose.yml (services j1..jN on a private network);
// faults are docker kill/start/stop, docker pause, and iptables rules
// entered into a container's namespace with nsenter.
//
// Scenarios (chaos -list): leader kill and restart, leader pause (a
// paused ex-leader), minority partition, flapping partitions, full
// restart, a follower that must catch up from a snapshot, and 5-journal
// variants. Each injects its faults on a seeded random schedule, heals,
// lets the load run on, waits until every journal holds the same
// registry, and reads every node from every journal.
//
// # Workload and history
//
// K clients each own a disjoint set of nodes and drive them through their
// life: register (AdminService.RegisterNode), enroll (Enroll with a fresh
// key, or the same key again after an unknown outcome), renew (RenewCert
// over mTLS with the node's current certificate), decommission (forced)
// and read (InspectNode, linearizable), plus calls made to be refused
// (another key, a replaced or revoked certificate). Calls go round robin
// over all journals, each client from its own source address. Every call
// is recorded with its call and return time and what came back: ok, a
// definite refusal (a reason from the journal, NO_LEADER included), or an
// unknown outcome (OUTCOME_UNKNOWN, a timeout, a connection lost after
// the request left).
//
// # Checks
//
// The registry is specified per node (model.go) and porcupine checks each
// node's history. An unknown outcome may take effect any time until the
// run has settled (load stopped, journals converged); the final reads
// then decide, and each unknown write is reported as taken effect, not,
// or either. A node that fails the strict model is checked again with the
// allowances the design makes (a journal may refuse Enroll and RenewCert,
// or answer an Enroll retry, from its own lagging copy: "stale", reported
// but no violation) and with NO_LEADER taken as unknown, to say what kind
// of violation it is. After every run (check.go): no acknowledged write
// lost, no hardware identity active twice, every certificate received is
// committed and for the client's key, no renewal after an acknowledged
// decommission, all journals identical, serials unique, a paused
// ex-leader issued nothing uncommitted, and a lagging follower installed
// a snapshot and caught up.
//
// cmd/chaos is the command; make chaos runs the campaign, make chaos-short
// the CI version.
package chaos
