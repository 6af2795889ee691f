// Package logkey names every structured log key pact uses, so logs stay
// greppable and a key is never spelled two ways.
package logkey

// Log keys.
const (
	Err       = "err"
	NodeID    = "node_id"
	JournalID = "journal_id"
	Domain    = "domain"
	// OtherDomain is a federated domain a journal line is about; domain
	// stays the journal's own (its logger carries it on every line).
	OtherDomain  = "other_domain"
	Serial       = "serial"
	IssuerSerial = "issuer_serial"
	NotAfter     = "not_after"
	Source       = "source"
	Reason       = "reason"
	Method       = "method"
	Actor        = "actor"
	Addr         = "addr"
	DataDir      = "data_dir"
	State        = "state"
	VCluster     = "vcluster"
	MACs         = "macs"
	BMCSerial    = "bmc_serial"
	RetryAfter   = "retry_after"
	Attempt      = "attempt"
	Index        = "index"
	Duration     = "duration"
	SPIFFEID     = "spiffe_id"
	// FeatureLevel is a quorum feature level (docs/upgrade.md).
	FeatureLevel = "feature_level"
	// RootSHA256 is a domain root's fingerprint (pki.CertFingerprint).
	RootSHA256 = "root_sha256"
	TPM        = "tpm"
	TPMEKHash  = "tpm_ek_hash"
	// PCRs are the PCR indices a TPM quote covered.
	PCRs = "pcrs"
	// Events is how many events of a TCG event log replayed;
	// IMAEntries how many entries of an IMA list the quote covered.
	Events     = "events"
	IMAEntries = "ima_entries"
	// PolicyVersion, Mode and Action: a boot policy's version, its mode
	// (observe, enforce) and the action it took (observe, refuse, fence).
	PolicyVersion = "policy_version"
	Mode          = "mode"
	Action        = "action"
)

// Log keys that name what one kind of log line is about.
const (
	// AdminCert is the path of the development admin credential's certificate.
	AdminCert = "admin_cert"
	// Applied is a journal's applied Raft index.
	Applied = "applied"
	// Authorities counts the SPIRE trust bundle's authorities.
	Authorities = "authorities"
	// BMCSerialSource says where the agent read the BMC serial.
	BMCSerialSource = "bmc_serial_source"
	// Bridge is the clock skew an agent bridges with the journal's time (ClockBridge).
	Bridge = "bridge"
	// Bytes is a size in bytes (a backup).
	Bytes = "bytes"
	// Certificates counts certificates (the intermediates an agent holds).
	Certificates = "certificates"
	// Component is the part of a journal a line comes from (raft: the
	// hashicorp/raft logger's name).
	Component = "component"
	// Configured is a value as configured, logged beside the one found instead.
	Configured = "configured"
	// Count is a number of records a call changed.
	Count = "count"
	// DMINotes are the agent's notes on what DMI data it could not read.
	DMINotes = "dmi_notes"
	// Dir is a directory (the agent's identity directory).
	Dir = "dir"
	// DrainTimeout is how long an old channel may drain its calls.
	DrainTimeout = "drain_timeout"
	// ExitCode is a process's exit code.
	ExitCode = "exit_code"
	// Expires is when a credential (an enrollment token) expires.
	Expires = "expires"
	// Failures counts failures (of enrollments by one hardware identity).
	Failures = "failures"
	// File is a file's path.
	File = "file"
	// Forced is whether an operator forced a change past a safety check.
	Forced = "forced"
	// From is a state a change left.
	From = "from"
	// Grace is how long a lost identity source is still trusted.
	Grace = "grace"
	// Identity is an identity.Identity (logged as a group: source, serial, ...).
	Identity = "identity"
	// IdentitySource is the source of the identity a node enrolled with.
	IdentitySource = "identity_source"
	// InFlight counts calls still in flight.
	InFlight = "in_flight"
	// IntermediatesRetired counts the intermediates retired with a journal.
	IntermediatesRetired = "intermediates_retired"
	// Journal is another journal than the one logging (JournalID): one a membership change acts on, or the journal's clock an agent compared with its own.
	Journal = "journal"
	// KeyOut is whether the agent also writes its key elsewhere (--key-out).
	KeyOut = "key_out"
	// Local is this node's clock reading.
	Local = "local"
	// MACSource says how the agent chose the MACs it reports.
	MACSource = "mac_source"
	// Members is a quorum's members, or how many there are.
	Members = "members"
	// Name is an operator credential's name.
	Name = "name"
	// Nodes is a number of nodes.
	Nodes = "nodes"
	// Offset is a clock offset.
	Offset = "offset"
	// Op is what the agent was doing when a journal answered (enroll,
	// renew, ...).
	Op = "op"
	// Operator is an operator credential a change acts on (Actor is who asked).
	Operator = "operator"
	// Path is a socket's or file's path.
	Path = "path"
	// Previous is the identity a new one replaced.
	Previous = "previous"
	// FallBackTo is the identity an agent moves to when it gives up the
	// one it streams on, or why there is none yet.
	FallBackTo = "fallback"
	// PreviousSerial is the serial of the certificate a new one replaced.
	PreviousSerial = "previous_serial"
	// QuorumID is the id of a quorum (made at its bootstrap).
	QuorumID = "quorum_id"
	// RaftAddr is a journal's Raft address.
	RaftAddr = "raft_addr"
	// RaftWriteTimeout is the watchdog's bound on a Raft store write.
	RaftWriteTimeout = "raft_write_timeout"
	// ReachableAfter counts the voters reachable after a membership change.
	ReachableAfter = "reachable_after"
	// Records counts the records a change touched.
	Records = "records"
	// RefusalsNotLogged counts refusals left out of the log to bound its rate.
	RefusalsNotLogged = "refusals_not_logged"
	// Released is whether a node was released (its agent let go of it).
	Released = "released"
	// Report is the agent's hardware report.
	Report = "report"
	// RetryIn is how long until the next attempt.
	RetryIn = "retry_in"
	// RevokeAt is when a revocation takes effect.
	RevokeAt = "revoke_at"
	// Role is an operator's role.
	Role = "role"
	// Root is the path of a domain root certificate.
	Root = "root"
	// RootsAdded, RootsRemoved and RootsTrusted are domain roots'
	// fingerprints (pki.CertFingerprint) an agent started or stopped
	// trusting, and all it trusts after the change; RootsRefused those it
	// would not take.
	RootsAdded   = "roots_added"
	RootsRemoved = "roots_removed"
	RootsRefused = "roots_refused"
	RootsTrusted = "roots_trusted"
	// SPIRETrustDomain is the SPIRE trust domain a journal accepts SVIDs from.
	SPIRETrustDomain = "spire_trust_domain"
	// SVIDSerial is the serial of a SPIRE X.509 SVID.
	SVIDSerial = "svid_serial"
	// Serials lists certificate serials.
	Serials = "serials"
	// Names are host names and addresses (a journal's, a journal CA's).
	Names = "names"
	// Skew is the difference between this node's clock and the journal's.
	Skew = "skew"
	// Skipped lists the network interfaces the agent did not report.
	Skipped = "skipped"
	// Socket is a Unix socket's path (the SPIRE Workload API).
	Socket = "socket"
	// Streams is a number of node streams a journal holds.
	Streams = "streams"
	// Suppressed is how many like lines a sampled log left out;
	// SuppressedWithin the interval they fell in.
	Suppressed       = "suppressed"
	SuppressedWithin = "suppressed_within"
	// StateQuorumID is the quorum id recorded in the replicated state.
	StateQuorumID = "state_quorum_id"
	// TPMDevice is the TPM device's path.
	TPMDevice = "tpm_device"
	// Taken lists the network interfaces the agent reported.
	Taken = "taken"
	// Takeover is whether an enrollment took over a node's identity.
	Takeover = "takeover"
	// Timeout is a configured timeout.
	Timeout = "timeout"
	// To is a state a change entered.
	To = "to"
	// TokenID is an enrollment token's ID (never the token).
	TokenID = "token_id"
	// Version is pact's version.
	Version = "version"
	// VotersAfter counts the voters after a membership change.
	VotersAfter = "voters_after"
	// WaitingFor says what a start is waiting for.
	WaitingFor = "waiting_for"
	// Was is a value before a change.
	Was = "was"
	// Where names where a refusal happened.
	Where = "where"
	// WritesInFlight counts Raft store writes outstanding.
	WritesInFlight = "writes_in_flight"
)

// Keys of federation and cross-domain claims (journal/federation.go,
// journal/claims.go; docs/domains.md).
const (
	// BundleAge is how old the last good federated bundle is.
	BundleAge = "bundle_age"
	// Caller names who called (a federated domain's journal).
	Caller = "caller"
	// Claims counts claims in a feed.
	Claims = "claims"
	// ClaimsAge is how old the claims held from a domain are.
	ClaimsAge = "claims_age"
	// Full says a claim feed is a full listing, not changes.
	Full = "full"
	// Dropped counts what was dropped at a bound.
	Dropped = "dropped"
	// Bound is the bound something was held to.
	Bound = "bound"
	// OtherNode is the node id another domain has the hardware as.
	OtherNode = "other_node"
	// Since is when something began.
	Since = "since"
)
