// Package chaos is pact's chaos harness: it runs journal quorums (3 or 5)
// as real processes, or as containers of the pact image, drives them with
// a recording workload while it injects faults, and then checks the
// history for linearizability, the registry for its invariants, and the
// run for the evidence that it did what it is about.
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
// Scenarios (chaos -list, scenario.go): leader kill and restart, leader
// pause (a paused ex-leader), minority partition, flapping partitions,
// full restart, a follower that must catch up from a snapshot, 5-journal
// variants, hardware churn with reboots around a takeover window, a slow
// follower, a full disk, clock steps, liveness under partitions (nodes
// that stream instead of the registry workload), membership changes, and
// operator mistakes (mistakes.go: a wiped journal restarted with its old
// --initial-cluster, pact-journal recover while a lost journal comes back
// with its old disk, pact-journal restore under another root of the same
// name), each made with the operator's own commands. Each injects its
// faults on a seeded random schedule, heals, lets the load run on, waits
// until every journal holds the same registry, and reads every node from
// every journal.
//
// # Workload and history
//
// K clients each own a disjoint set of nodes and drive them through their
// life: register (AdminService.RegisterNode), enroll (Enroll with a fresh
// key, or the same key again after an unknown outcome), renew (RenewCert
// over mTLS with the node's current certificate), decommission (forced)
// and read (InspectNode, linearizable), plus calls made to be refused
// (another key, a replaced or revoked certificate). Hardware moves between
// node ids as at a site: a decommissioned node's hardware (or its NIC)
// goes to a new node id, and the Enroll calls of such a node say so
// (Input.Moved). With a takeover window, nodes reboot with a new key
// (takeover). Calls go round robin over all journals, each client from its
// own source address.
//
// Right after every leader loss (a kill, a pause, a full restart, a
// leader cut off) the schedule tells the workload (Env.leaderLost,
// Workload.Probe), and for the next few seconds every other call of every
// client is a probe: a read of each of its nodes and of a node id never
// registered, and calls made to be refused for good (a replaced or
// revoked certificate, a decommission of a revoked or unknown node, an
// Enroll of unknown hardware). They are part of the history like any
// other call.
//
// Every call is recorded with its call and return time and what came
// back: ok, a definite refusal (a reason from the journal, NO_LEADER
// included, or UNREACHABLE: a connection refused before the request
// left), or an unknown outcome (OUTCOME_UNKNOWN, INTERNAL, a timeout, a
// connection lost after the request left).
//
// # The model
//
// The registry is specified per node (model.go) and porcupine checks each
// node's history. An unknown outcome may take effect any time until the
// run has settled (load stopped, journals converged); the final reads
// then decide, and each unknown write is reported as taken effect, not,
// or either.
//
// The model is strict: every answer must be the one the node's state at
// the call's linearization point gives. Final refusals (NODE_NOT_ENROLLED,
// NODE_REVOKED, STALE_CERTIFICATE, ALREADY_ACTIVE without a retry-after,
// NODE_ALREADY_ENROLLED) and an Enroll retry's certificate are accepted
// only in the states that give them: a journal confirms them with the
// leader first. In any state it accepts only the refusals that say
// nothing about the node: NO_LEADER, RATE_LIMITED and UNREACHABLE. A
// renewal with the node's current, unrevoked certificate may be refused
// only with one of those; any other refusal of it (UNAUTHENTICATED,
// STALE_CERTIFICATE, NODE_REVOKED, ...) is a violation, and a renewal
// racing a decommission is judged in the state after it, as porcupine
// tries every order. The one stale answer the design allows
// (DesignAllowances) is takeover-wait: ALREADY_ACTIVE with a retry-after,
// which a journal gives from its own copy, accepted only where a lagging
// copy could show the node's hardware active with another key (the node
// held a certificate for another key at some point, or its hardware moved
// from another node id). Nodes that need it are reported, not failed. A
// node that fails the model is checked again with NO_LEADER taken as
// unknown, to say whether a write refused NO_LEADER took effect.
//
// # Invariants and evidence
//
// After every run (check.go): no acknowledged write lost, no hardware
// identity active twice at any index of the committed audit, every
// certificate received is committed and for the client's key, no renewal
// after an acknowledged decommission, all journals identical, serials
// unique, and, where the scenario does it: a paused ex-leader issued
// nothing uncommitted, a lagging follower installed a snapshot, a slow
// follower stalled no write, a full disk gave no INTERNAL, membership
// changes converged, no node streaming to a journal that reaches the
// leader was marked Inactive, every operator mistake met the refusal it
// must (exit code and message, a peer refusal counted by reason, nothing
// written) while the quorum served, and each ended with one quorum (one
// quorum id, configuration and leader in pact journal status, audit
// trails of one history). The recovery is made while the survivor leads
// (verified with the others frozen), so every acknowledged write is in
// its log and the registry checks need no allowance for a recovery.
//
// A verdict that looked at nothing fails (verdict.go): every invariant
// must have checked something in the run, or be declared not applicable
// to the scenario with the reason (invariantRules, Scenario.NotApplicable),
// and the report prints both. Once the faults are healed, the load must
// still succeed: at least a few successful calls of each kind (register,
// enroll, renew, decommission, read, and takeover where nodes reboot;
// AfterHealPlan), or the run fails; the recovery lasts until they are
// reached or 15 s have passed. The probes after leader losses must have
// been made and answered (a read and a final refusal at least). And each
// scenario must show what it is about (evidence.go): enough calls, its
// faults, a leader change, hardware moves and conflicts, takeovers.
//
// cmd/chaos is the command; make chaos runs the campaign, make chaos-short
// the CI version. docs/chaos.md describes both and how to add a scenario.
package chaos
