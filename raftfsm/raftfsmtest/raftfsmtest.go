// Package raftfsmtest builds raftfsm commands and snapshots for tests in any
// package, and holds an in-memory raft.SnapshotSink.
//
// It does not import testing: builders cannot fail, and the helpers that can
// return an error. Certificates and intermediates made here carry placeholder
// DER, not parseable certificates; the FSM only stores the bytes.
package raftfsmtest

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"fmt"
	"io"
	"math/big"
	"sync"
	"time"

	"github.com/hashicorp/raft"
	"google.golang.org/protobuf/proto"

	pactv1 "github.com/pact-hpc/pact/proto/pact/v1"
	"github.com/pact-hpc/pact/raftfsm"
)

// Proposer stamps commands the way a journal does before proposing them: the
// actor, the caller's address, the correlation id and the time are the
// proposer's, never read inside Apply. The FSM copies all four into every
// audit entry the command records.
type Proposer struct {
	Actor         string
	AtUnixNano    int64
	Source        string
	CorrelationID string
}

func (p Proposer) command() *pactv1.Command {
	return &pactv1.Command{AtUnixNano: p.AtUnixNano, Actor: p.Actor, Source: p.Source, CorrelationId: p.CorrelationID}
}

// RegisterNode returns a RegisterNode command. hw must already be normalised
// (hwid.Normalize); the FSM refuses anything else.
func (p Proposer) RegisterNode(nodeID, vcluster string, hw *pactv1.HardwareIdentity) *pactv1.Command {
	c := p.command()
	c.Op = &pactv1.Command_RegisterNode{RegisterNode: &pactv1.RegisterNodeOp{NodeId: nodeID, Hardware: hw, Vcluster: vcluster}}
	return c
}

// RegisterNodeWithSPIFFEID is RegisterNode with a SPIFFE ID override: the
// node's SVIDs carry spiffeID instead of its default ID.
func (p Proposer) RegisterNodeWithSPIFFEID(nodeID, vcluster string, hw *pactv1.HardwareIdentity, spiffeID string) *pactv1.Command {
	c := p.RegisterNode(nodeID, vcluster, hw)
	c.GetRegisterNode().SpiffeId = spiffeID
	return c
}

// SVIDSeen returns an SVIDSeen command: nodeID authenticated with a SPIRE
// X.509-SVID for spiffeID with this serial and expiry.
func (p Proposer) SVIDSeen(nodeID, spiffeID, serial string, notAfterUnix int64) *pactv1.Command {
	c := p.command()
	c.Op = &pactv1.Command_SvidSeen{SvidSeen: &pactv1.SVIDSeenOp{NodeId: nodeID, SpiffeId: spiffeID, Serial: serial, NotAfterUnix: notAfterUnix}}
	return c
}

// StandbyIssued returns a StandbyIssued command: a journal signed cert as
// the standby of nodeID, which authenticated with an SVID of spiffeID.
func (p Proposer) StandbyIssued(nodeID, spiffeID string, cert *pactv1.CertificateInfo) *pactv1.Command {
	c := p.command()
	c.Op = &pactv1.Command_StandbyIssued{StandbyIssued: &pactv1.StandbyIssuedOp{NodeId: nodeID, SpiffeId: spiffeID, Cert: cert}}
	return c
}

// StandbyActivated returns a StandbyActivated command: nodeID opened a
// stream with its standby certificate serial.
func (p Proposer) StandbyActivated(nodeID, serial string) *pactv1.Command {
	c := p.command()
	c.Op = &pactv1.Command_StandbyActivated{StandbyActivated: &pactv1.StandbyActivatedOp{NodeId: nodeID, Serial: serial}}
	return c
}

// Activate returns an Activate command for a node that enrolled reporting
// the given hardware and was signed cert.
func (p Proposer) Activate(nodeID string, reported *pactv1.HardwareIdentity, cert *pactv1.CertificateInfo) *pactv1.Command {
	c := p.command()
	c.Op = &pactv1.Command_Activate{Activate: &pactv1.ActivateOp{NodeId: nodeID, Reported: reported, Cert: cert}}
	return c
}

// ActivateTakeover returns an Activate command that may replace the key of a
// node that is Active with another one, provided no journal has reported the
// node's stream since cutoffUnixNano.
func (p Proposer) ActivateTakeover(nodeID string, reported *pactv1.HardwareIdentity, cert *pactv1.CertificateInfo, cutoffUnixNano int64) *pactv1.Command {
	c := p.Activate(nodeID, reported, cert)
	c.GetActivate().TakeoverCutoffUnixNano = cutoffUnixNano
	return c
}

// Renew returns a Renew command replacing the certificate previousSerial.
func (p Proposer) Renew(nodeID, previousSerial string, cert *pactv1.CertificateInfo) *pactv1.Command {
	c := p.command()
	c.Op = &pactv1.Command_Renew{Renew: &pactv1.RenewOp{NodeId: nodeID, PreviousSerial: previousSerial, Cert: cert}}
	return c
}

// PublishIntermediate returns a PublishIntermediate command.
func (p Proposer) PublishIntermediate(in *pactv1.Intermediate) *pactv1.Command {
	c := p.command()
	c.Op = &pactv1.Command_PublishIntermediate{PublishIntermediate: &pactv1.PublishIntermediateOp{Intermediate: in}}
	return c
}

// PublishIntermediateUnder returns a PublishIntermediate command for an
// intermediate the journal CA jc signed (in.IssuerSerial is set to its
// serial); jc nil publishes under a journal CA the registry holds.
func (p Proposer) PublishIntermediateUnder(in *pactv1.Intermediate, jc *pactv1.JournalCA, issuerSerial string) *pactv1.Command {
	c := p.command()
	in.IssuerSerial = issuerSerial
	c.Op = &pactv1.Command_PublishIntermediate{PublishIntermediate: &pactv1.PublishIntermediateOp{Intermediate: in, JournalCa: jc}}
	return c
}

// RevokeJournalCA returns a RevokeJournalCA command.
func (p Proposer) RevokeJournalCA(reason string, serials ...string) *pactv1.Command {
	c := p.command()
	c.Op = &pactv1.Command_RevokeJournalCa{RevokeJournalCa: &pactv1.RevokeJournalCAOp{Serials: serials, Reason: reason}}
	return c
}

// RecordJournalCA returns a RecordJournalCA command: an operator binds
// jc's journal to it.
func (p Proposer) RecordJournalCA(jc *pactv1.JournalCA) *pactv1.Command {
	c := p.command()
	c.Op = &pactv1.Command_RecordJournalCa{RecordJournalCa: &pactv1.RecordJournalCAOp{JournalCa: jc, Reason: "test"}}
	return c
}

// Decommission returns a Decommission command.
func (p Proposer) Decommission(nodeID string) *pactv1.Command {
	c := p.command()
	c.Op = &pactv1.Command_Decommission{Decommission: &pactv1.DecommissionOp{NodeId: nodeID}}
	return c
}

// Assign returns an Assign command moving nodeID from expectVCluster to
// vcluster; either may be empty (maintenance mode), so the one command
// assigns, unassigns and moves.
func (p Proposer) Assign(nodeID, vcluster, expectVCluster string) *pactv1.Command {
	c := p.command()
	c.Op = &pactv1.Command_Assign{Assign: &pactv1.AssignOp{NodeId: nodeID, Vcluster: vcluster, ExpectVcluster: expectVCluster}}
	return c
}

// LivenessDigest returns a LivenessDigest command: journalID held the
// streams of nodeIDs during the last interval.
func (p Proposer) LivenessDigest(journalID string, nodeIDs ...string) *pactv1.Command {
	c := p.command()
	c.Op = &pactv1.Command_LivenessDigest{LivenessDigest: &pactv1.LivenessDigestOp{JournalId: journalID, NodeIds: nodeIDs}}
	return c
}

// MarkInactive returns a MarkInactive command for the nodes among nodeIDs
// last seen before cutoffUnixNano.
func (p Proposer) MarkInactive(cutoffUnixNano int64, nodeIDs ...string) *pactv1.Command {
	c := p.command()
	c.Op = &pactv1.Command_MarkInactive{MarkInactive: &pactv1.MarkInactiveOp{NodeIds: nodeIDs, CutoffUnixNano: cutoffUnixNano}}
	return c
}

// RegisterNodeRequiringToken is RegisterNode for a node whose credential
// policy requires a join token.
func (p Proposer) RegisterNodeRequiringToken(nodeID, vcluster string, hw *pactv1.HardwareIdentity) *pactv1.Command {
	c := p.RegisterNode(nodeID, vcluster, hw)
	c.GetRegisterNode().Credentials = &pactv1.CredentialPolicy{RequireJoinToken: true}
	return c
}

// CreateJoinToken stores a join token hash (64 hex digits) for nodeID,
// expiring at expiresUnixNano.
func (p Proposer) CreateJoinToken(nodeID, sha256Hex string, expiresUnixNano int64) *pactv1.Command {
	c := p.command()
	c.Op = &pactv1.Command_CreateJoinToken{CreateJoinToken: &pactv1.CreateJoinTokenOp{Token: &pactv1.JoinToken{
		Sha256: sha256Hex, NodeId: nodeID, ExpiresAtUnixNano: expiresUnixNano,
	}}}
	return c
}

// RevokeJoinTokens deletes nodeID's unused tokens whose hash has prefix.
func (p Proposer) RevokeJoinTokens(nodeID, prefix string) *pactv1.Command {
	c := p.command()
	c.Op = &pactv1.Command_RevokeJoinTokens{RevokeJoinTokens: &pactv1.RevokeJoinTokensOp{NodeId: nodeID, Sha256Prefix: prefix}}
	return c
}

// ActivateWithToken is Activate presenting the join token with this hash.
func (p Proposer) ActivateWithToken(nodeID string, reported *pactv1.HardwareIdentity, cert *pactv1.CertificateInfo, sha256Hex string) *pactv1.Command {
	c := p.Activate(nodeID, reported, cert)
	c.GetActivate().Credentials = &pactv1.PresentedCredentials{JoinTokenSha256: sha256Hex}
	return c
}

// Fence fences nodeID with reason; Unfence lifts it.
func (p Proposer) Fence(nodeID, reason string) *pactv1.Command {
	c := p.command()
	c.Op = &pactv1.Command_Fence{Fence: &pactv1.FenceOp{NodeId: nodeID, Fenced: true, Reason: reason}}
	return c
}

// Unfence lifts nodeID's fence.
func (p Proposer) Unfence(nodeID string) *pactv1.Command {
	c := p.command()
	c.Op = &pactv1.Command_Fence{Fence: &pactv1.FenceOp{NodeId: nodeID}}
	return c
}

// RecordOperator returns a RecordOperator command.
func (p Proposer) RecordOperator(o *pactv1.Operator) *pactv1.Command {
	c := p.command()
	c.Op = &pactv1.Command_RecordOperator{RecordOperator: &pactv1.RecordOperatorOp{Operator: o}}
	return c
}

// RevokeOperator returns a RevokeOperator command by name or serial.
func (p Proposer) RevokeOperator(name, serial string) *pactv1.Command {
	c := p.command()
	c.Op = &pactv1.Command_RevokeOperator{RevokeOperator: &pactv1.RevokeOperatorOp{Name: name, Serial: serial}}
	return c
}

// RetireIntermediate returns a RetireIntermediate command.
func (p Proposer) RetireIntermediate(revokeAtUnixNano int64, serials ...string) *pactv1.Command {
	c := p.command()
	c.Op = &pactv1.Command_RetireIntermediate{RetireIntermediate: &pactv1.RetireIntermediateOp{Serials: serials, RevokeAtUnixNano: revokeAtUnixNano, Reason: "test"}}
	return c
}

// Release returns a Release command: nodeID's agent stopped on purpose
// holding the certificate serial.
func (p Proposer) Release(nodeID, serial string) *pactv1.Command {
	c := p.command()
	c.Op = &pactv1.Command_Release{Release: &pactv1.ReleaseOp{NodeId: nodeID, Serial: serial}}
	return c
}

// UpdateNode returns an UpdateNode command replacing nodeID's hardware.
func (p Proposer) UpdateNode(nodeID string, hw *pactv1.HardwareIdentity) *pactv1.Command {
	c := p.command()
	c.Op = &pactv1.Command_UpdateNode{UpdateNode: &pactv1.UpdateNodeOp{NodeId: nodeID, Hardware: hw}}
	return c
}

// Batch returns a batch of cmds in one command, as a journal proposes the
// activations it groups (each keeps its own proposer stamp).
func (p Proposer) Batch(cmds ...*pactv1.Command) *pactv1.Command {
	c := p.command()
	c.Op = &pactv1.Command_Batch{Batch: &pactv1.BatchOp{Commands: cmds}}
	return c
}

// Hardware returns a hardware identity with the given BMC serial (empty for
// none) and MACs, taken as they are: pass them sorted, lower-case and unique
// unless the point is that they are not.
func Hardware(bmcSerial string, macs ...string) *pactv1.HardwareIdentity {
	return &pactv1.HardwareIdentity{Macs: macs, BmcSerial: bmcSerial}
}

// Cert returns certificate info with placeholder DER derived from serial.
func Cert(serial, spkiSHA256 string, notAfterUnix int64) *pactv1.CertificateInfo {
	return &pactv1.CertificateInfo{
		Serial:        serial,
		SpkiSha256:    spkiSHA256,
		NotAfterUnix:  notAfterUnix,
		IssuerSerial:  "issuer-" + serial,
		Der:           []byte("der:" + serial),
		NotBeforeUnix: notAfterUnix - 3*24*3600,
	}
}

// Intermediate returns an intermediate with placeholder DER.
func Intermediate(journalID, serial string, notAfterUnix int64) *pactv1.Intermediate {
	return &pactv1.Intermediate{JournalId: journalID, Serial: serial, NotAfterUnix: notAfterUnix, Der: []byte("der:" + serial)}
}

// JournalCA returns a journal CA record for journalID with a
// self-signed certificate of the journal CA's shape (the FSM reads its
// journal and key, not its signature). Every journal CA of one journal
// made here has the same key, as a re-issue of its journal CA has;
// JournalCAWithNewKey makes one with a key of its own.
func JournalCA(journalID, serial string, notAfterUnix int64) *pactv1.JournalCA {
	journalCAKeysMu.Lock()
	key, ok := journalCAKeys[journalID]
	if !ok {
		key = newJournalCAKey()
		journalCAKeys[journalID] = key
	}
	k := journalCADERKey{journalID, serial, notAfterUnix}
	der, ok := journalCADERs[k]
	if !ok {
		// The same record each time: replicas fed commands built twice
		// must write the same state.
		der = journalCARecord(journalID, serial, notAfterUnix, key).GetDer()
		journalCADERs[k] = der
	}
	journalCAKeysMu.Unlock()
	return &pactv1.JournalCA{JournalId: journalID, Serial: serial, NotAfterUnix: notAfterUnix, Der: der}
}

type journalCADERKey struct {
	journalID, serial string
	notAfterUnix      int64
}

// JournalCAWithNewKey is JournalCA with a key no other journal CA has: a
// replaced host's, or one the ceremony made after a revocation.
func JournalCAWithNewKey(journalID, serial string, notAfterUnix int64) *pactv1.JournalCA {
	return journalCARecord(journalID, serial, notAfterUnix, newJournalCAKey())
}

var (
	journalCAKeysMu sync.Mutex
	journalCAKeys   = map[string]*ecdsa.PrivateKey{}
	journalCADERs   = map[journalCADERKey][]byte{}
)

func newJournalCAKey() *ecdsa.PrivateKey {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		panic(err)
	}
	return key
}

func journalCARecord(journalID, serial string, notAfterUnix int64, key *ecdsa.PrivateKey) *pactv1.JournalCA {
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "pact journal CA " + journalID + "@pact.test"},
		NotBefore:             time.Unix(0, 0),
		NotAfter:              time.Unix(notAfterUnix, 0),
		IsCA:                  true,
		BasicConstraintsValid: true,
		MaxPathLen:            1,
		KeyUsage:              x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		panic(err)
	}
	return &pactv1.JournalCA{JournalId: journalID, Serial: serial, NotAfterUnix: notAfterUnix, Der: der}
}

// SetQuorumLevel returns the command a leader proposes to raise the
// quorum's feature level.
func (p Proposer) SetQuorumLevel(level uint32) *pactv1.Command {
	c := p.command()
	c.Op = &pactv1.Command_SetQuorumLevel{SetQuorumLevel: &pactv1.SetQuorumLevelOp{Level: level, Release: raftfsm.ReleaseOfLevel(level)}}
	return c
}

// AtFeatureLevel returns an empty FSM whose quorum runs at this binary's
// feature level (raised by log entry 1, as a leader does once every
// member speaks it), and an Applier for it: the registry's rules as a
// quorum of this release applies them.
func AtFeatureLevel() (*raftfsm.FSM, *Applier) {
	f := raftfsm.New()
	a := &Applier{FSM: f}
	if res := a.Apply(Proposer{Actor: "journal/j1", AtUnixNano: 1}.SetQuorumLevel(raftfsm.FeatureLevel)); res.Err != nil {
		panic(fmt.Sprintf("raftfsmtest: raise the feature level: %v", res.Err))
	}
	return f, a
}

// Applier feeds commands to an FSM through raft.FSM.Apply, at consecutive
// log indexes as Raft would.
type Applier struct {
	FSM   raft.FSM
	Index uint64 // index of the last entry applied
}

// Apply encodes cmd, applies it as the next log entry and returns the typed
// result. It panics if cmd cannot be encoded (a string that is not UTF-8) or
// the FSM does not return a *raftfsm.Result: both are bugs in the test.
func (a *Applier) Apply(cmd *pactv1.Command) *raftfsm.Result {
	data, err := raftfsm.Encode(cmd)
	if err != nil {
		panic(fmt.Sprintf("raftfsmtest: %v", err))
	}
	a.Index++
	out := a.FSM.Apply(&raft.Log{Index: a.Index, Term: 1, Type: raft.LogCommand, Data: data})
	res, ok := out.(*raftfsm.Result)
	if !ok {
		panic(fmt.Sprintf("raftfsmtest: Apply returned %T, want *raftfsm.Result", out))
	}
	return res
}

// Sink is an in-memory raft.SnapshotSink. It is a fake rather than Raft's
// own file or in-memory store because a sink is just an io.Writer with an id,
// Cancel and Close; this one keeps the bytes and records how it was ended.
type Sink struct {
	bytes.Buffer
	Closed, Cancelled bool
}

// ID implements raft.SnapshotSink.
func (s *Sink) ID() string { return "raftfsmtest" }

// Cancel implements raft.SnapshotSink.
func (s *Sink) Cancel() error { s.Cancelled = true; return nil }

// Close implements raft.SnapshotSink.
func (s *Sink) Close() error { s.Closed = true; return nil }

// SnapshotBytes takes a snapshot of f and persists it into a Sink, as Raft
// does, and returns the bytes.
func SnapshotBytes(f raft.FSM) ([]byte, error) {
	snap, err := f.Snapshot()
	if err != nil {
		return nil, err
	}
	defer snap.Release()
	var sink Sink
	if err := snap.Persist(&sink); err != nil {
		return nil, err
	}
	if !sink.Closed || sink.Cancelled {
		return nil, fmt.Errorf("raftfsmtest: Persist left the sink closed=%v cancelled=%v", sink.Closed, sink.Cancelled)
	}
	return sink.Bytes(), nil
}

// Restore marshals snap and restores f from it. It is how a test puts a
// registry into a given state directly (Inactive and Revoked records, revoked
// serials, last-seen times, audit entries) or builds a large one quickly.
func Restore(f raft.FSM, snap *pactv1.Snapshot) error {
	data, err := proto.Marshal(snap)
	if err != nil {
		return fmt.Errorf("raftfsmtest: marshal snapshot: %w", err)
	}
	return RestoreBytes(f, data)
}

// RestoreBytes restores f from snapshot bytes, as Raft does from a stored
// or installed snapshot.
func RestoreBytes(f raft.FSM, data []byte) error {
	return f.Restore(io.NopCloser(bytes.NewReader(data)))
}

// FederateDomain returns the command pact domain federate proposes.
func (p Proposer) FederateDomain(d *pactv1.FederatedDomain) *pactv1.Command {
	c := p.command()
	c.Op = &pactv1.Command_FederateDomain{FederateDomain: &pactv1.FederateDomainOp{Domain: d}}
	return c
}

// RemoveFederatedDomain returns the command pact domain remove proposes.
func (p Proposer) RemoveFederatedDomain(name string) *pactv1.Command {
	c := p.command()
	c.Op = &pactv1.Command_RemoveFederatedDomain{RemoveFederatedDomain: &pactv1.RemoveFederatedDomainOp{Name: name}}
	return c
}

// UpdateFederatedBundle returns the command a leader proposes after
// fetching a federated domain's bundle.
func (p Proposer) UpdateFederatedBundle(op *pactv1.UpdateFederatedBundleOp) *pactv1.Command {
	c := p.command()
	c.Op = &pactv1.Command_UpdateFederatedBundle{UpdateFederatedBundle: op}
	return c
}

// SetBootPolicy returns the command pact boot-policy set proposes.
func (p Proposer) SetBootPolicy(policy *pactv1.BootPolicy, expectVersion uint64) *pactv1.Command {
	c := p.command()
	c.Op = &pactv1.Command_SetBootPolicy{SetBootPolicy: &pactv1.SetBootPolicyOp{Policy: policy, ExpectVersion: expectVersion}}
	return c
}

// RemoveBootPolicy returns the command pact boot-policy remove proposes.
func (p Proposer) RemoveBootPolicy(vcluster string) *pactv1.Command {
	c := p.command()
	c.Op = &pactv1.Command_RemoveBootPolicy{RemoveBootPolicy: &pactv1.RemoveBootPolicyOp{Vcluster: vcluster}}
	return c
}
