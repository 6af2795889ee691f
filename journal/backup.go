package journal

import (
	"bytes"
	"crypto/sha256"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"

	"github.com/pact-hpc/pact/internal/clock"
	"github.com/pact-hpc/pact/internal/pki"
	"github.com/pact-hpc/pact/internal/snapfile"
	"github.com/pact-hpc/pact/journal/auth"
	"github.com/pact-hpc/pact/journal/ca"
	"github.com/pact-hpc/pact/journal/raftnode"
	pactv1 "github.com/pact-hpc/pact/proto/pact/v1"
)

// ---------------------------------------------------------------------------
// Offline tools: restore a snapshot into a new data directory, and turn
// surviving journals into a new quorum.

// Errors of the offline tools.
var (
	ErrDataDirNotEmpty = raftnode.ErrDataDirNotEmpty
	ErrWrongDomain     = errors.New("journal: snapshot of another domain")
	// ErrWrongRoot: the snapshot was taken under another root than the
	// one given, even if both name the same domain.
	ErrWrongRoot = errors.New("journal: snapshot of another root")
	// ErrRootCert: the root certificate given cannot be read or is not a
	// pact domain root.
	ErrRootCert = errors.New("journal: root certificate")
)

// RestoreConfig seeds a journal of a new quorum from a snapshot file.
type RestoreConfig struct {
	Snapshot string // the file from pact journal snapshot save
	DataDir  string
	NodeID   string
	// InitialCluster is every voter of the new quorum, the same on every
	// journal restored from the file.
	InitialCluster []Peer
	// RootCertFile is the domain root certificate the journal will run
	// with (PEM). The snapshot must have been taken under this very root:
	// the same certificate by SHA-256, not merely the same domain name.
	RootCertFile string
}

// Validate reports every problem at once.
func (c RestoreConfig) Validate() error {
	var errs []error
	if c.Snapshot == "" {
		errs = append(errs, errors.New("--snapshot is required: the file pact journal snapshot save wrote"))
	}
	if c.DataDir == "" {
		errs = append(errs, errors.New("--data-dir is required: the new journal's (empty) data directory"))
	}
	if c.NodeID == "" {
		errs = append(errs, errors.New("--node-id is required: this journal's id in the new quorum"))
	}
	if len(c.InitialCluster) == 0 {
		errs = append(errs, errors.New("--initial-cluster is required: every voter of the new quorum as id=raft-host:port,..., the same on every journal"))
	} else {
		found := false
		for _, p := range c.InitialCluster {
			found = found || p.ID == c.NodeID
		}
		if !found && c.NodeID != "" {
			errs = append(errs, fmt.Errorf("--initial-cluster does not list --node-id %s", c.NodeID))
		}
	}
	if c.RootCertFile == "" {
		errs = append(errs, errors.New("--root-cert is required: the domain root certificate (ca.pem) the journal will run with"))
	}
	return errors.Join(errs...)
}

// RestoreResult says what Restore wrote.
type RestoreResult struct {
	Header *pactv1.SnapshotHeader
	Nodes  int
	// QuorumID is the new quorum's id, derived from the file and the
	// initial cluster (the same on every journal restored alike); the
	// snapshot's own quorum is in Header.QuorumId.
	QuorumID string
	// RootFingerprint is the SHA-256 of the root the snapshot was checked
	// against (pki.CertFingerprint); RootCheck says how it was matched.
	RootFingerprint string
	RootCheck       string
}

// Restore checks the snapshot file completely (format, size, checksum,
// that it was taken under the root of RootCertFile, that the registry
// decodes and keeps its rules) and that the data directory holds no Raft
// state, and only then writes a Raft snapshot holding the state and the
// new quorum's configuration. The journal then starts from it with the
// usual flags.
func Restore(c RestoreConfig) (RestoreResult, error) {
	if err := c.Validate(); err != nil {
		return RestoreResult{}, err
	}
	roots, domain, err := readRoots(c.RootCertFile)
	if err != nil {
		return RestoreResult{}, err
	}
	f, err := os.Open(c.Snapshot)
	if err != nil {
		return RestoreResult{}, err
	}
	defer f.Close()
	h, state, nodes, err := snapfile.Read(f)
	if err != nil {
		return RestoreResult{}, fmt.Errorf("%s: %w", c.Snapshot, err)
	}
	if h.GetDomain() != domain {
		return RestoreResult{}, fmt.Errorf("%w: %s holds domain %s, --root-cert %s is the root of domain %s; restore it with the root of domain %s (the ca.pem its quorum ran with)", ErrWrongDomain, c.Snapshot, h.GetDomain(), c.RootCertFile, domain, h.GetDomain())
	}
	root, how, err := checkSnapshotRoot(c, h, state, roots)
	if err != nil {
		return RestoreResult{}, err
	}
	qid, err := raftnode.WriteRestored(c.DataDir, c.InitialCluster, h, state)
	if err != nil {
		return RestoreResult{}, err
	}
	return RestoreResult{Header: h, Nodes: nodes, RootFingerprint: pki.CertFingerprint(root), RootCheck: how, QuorumID: qid}, nil
}

// readRoots reads the domain roots of a PEM file (one, or two of the
// same domain during a root rollover) and their domain.
func readRoots(path string) ([]*x509.Certificate, string, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, "", fmt.Errorf("%w: --root-cert: %w; give the domain root certificate (ca.pem) the journal will run with", ErrRootCert, err)
	}
	certs, err := pki.ParseCertsPEM(data)
	if err != nil || len(certs) == 0 {
		return nil, "", fmt.Errorf("%w: --root-cert %s holds no PEM certificate (%v); give the domain root certificate (ca.pem) the journal will run with", ErrRootCert, path, err)
	}
	for _, c := range certs {
		if _, err := ca.DomainOf(c); err != nil || !c.IsCA {
			return nil, "", fmt.Errorf("%w: --root-cert %s is not a pact domain root (a CA certificate naming a spiffe:// trust domain); give the ca.pem pact ca init (or pact-journal init) made", ErrRootCert, path)
		}
	}
	domain, err := ca.CheckRoots(certs)
	if err != nil {
		return nil, "", fmt.Errorf("%w: --root-cert %s: %w", ErrRootCert, path, err)
	}
	return certs, domain, nil
}

// checkSnapshotRoot refuses a snapshot taken under none of roots, and says
// which root it was taken under and how that matched: by the fingerprint
// the header records, or, for a file written before headers recorded it,
// by an intermediate in the state that root signed. A domain name alone
// proves nothing: every --dev root and every init without --domain used to
// be pact.local.
func checkSnapshotRoot(c RestoreConfig, h *pactv1.SnapshotHeader, state []byte, roots []*x509.Certificate) (*x509.Certificate, string, error) {
	var have []string
	for _, r := range roots {
		have = append(have, pki.CertFingerprint(r))
	}
	fps := strings.Join(have, " or ")
	advice := "give --root-cert the ca.pem of the quorum the snapshot was taken from (openssl x509 -noout -fingerprint -sha256 -in ca.pem prints a root's fingerprint); a registry cannot move to another root: its agents' certificates chain to the old one"
	if want := h.GetRootSha256(); len(want) > 0 {
		for _, r := range roots {
			if sum := sha256.Sum256(r.Raw); bytes.Equal(want, sum[:]) {
				return r, "the fingerprint in the snapshot's header", nil
			}
		}
		return nil, "", fmt.Errorf("%w: %s was taken under the root with SHA-256 fingerprint %s; --root-cert %s has fingerprint %s, another root (both of domain %s); %s",
			ErrWrongRoot, c.Snapshot, pki.FormatFingerprint(want), c.RootCertFile, fps, h.GetDomain(), advice)
	}
	inters, err := snapfile.Intermediates(state)
	if err != nil {
		return nil, "", fmt.Errorf("%s: %w", c.Snapshot, err)
	}
	for _, in := range inters {
		cert, err := x509.ParseCertificate(in.GetDer())
		if err != nil {
			continue
		}
		for _, r := range roots {
			if cert.CheckSignatureFrom(r) == nil {
				return r, "intermediate " + in.GetSerial() + " (of " + in.GetJournalId() + "), signed by the root", nil
			}
		}
	}
	if len(inters) == 0 {
		return nil, "", fmt.Errorf("%w: %s records no root fingerprint (written by pact %s, before snapshots did) and holds no journal intermediate, so nothing shows it was taken under --root-cert %s (fingerprint %s); take a new snapshot with pact journal snapshot save from a journal of this version, whose header records the root",
			ErrWrongRoot, c.Snapshot, orUnknownVersion(h.GetVersion()), c.RootCertFile, fps)
	}
	return nil, "", fmt.Errorf("%w: %s records no root fingerprint (written by pact %s, before snapshots did), and none of its %d journal intermediates is signed by --root-cert %s (fingerprint %s): it was taken under another root of domain %s; %s",
		ErrWrongRoot, c.Snapshot, orUnknownVersion(h.GetVersion()), len(inters), c.RootCertFile, fps, h.GetDomain(), advice)
}

func orUnknownVersion(v string) string {
	if v == "" {
		return "of an unknown version"
	}
	return v
}

// RecoverConfig turns a surviving journal's data directory into a quorum
// of Members after the majority was lost for good (raftnode.Recover).
type RecoverConfig = raftnode.RecoverConfig

// RecoverResult says what Recover did.
type RecoverResult = raftnode.RecoverResult

// ErrQuorumAnswers: recover refused, the survivor's quorum runs on
// (raftnode.ErrQuorumAnswers).
var ErrQuorumAnswers = raftnode.ErrQuorumAnswers

// RecoverAs rewrites the Raft configuration in a stopped journal's data
// directory (raftnode.Recover), with the credentials of the journal cfg describes
// (its roots and journal CA, or the root key in the legacy layout; a
// fresh intermediate in memory), with which it first asks the voters of
// the survivor's last configuration whether their quorum runs on.
func RecoverAs(cfg Config, c RecoverConfig) (RecoverResult, error) {
	if !c.EvenIfQuorumAnswers {
		if cfg.Logger == nil {
			cfg.Logger = slog.New(slog.DiscardHandler)
		}
		if cfg.Clock == nil {
			cfg.Clock = clock.Real{}
		}
		authority, key, err := openAuthority(cfg, cfg.Logger)
		if err != nil {
			return RecoverResult{}, fmt.Errorf("journal: recover asks the other journals of the survivor's last configuration whether their quorum runs on, as this journal, and cannot make its credentials: %w (give recover the journal's settings: --config, or its --root-cert and journal CA flags)", err)
		}
		if key != nil {
			defer key.Close()
		}
		c.Credentials = authority
		// Nothing recorded: the probe answers any journal of the domain.
		if c.PeerAuth, err = auth.NewPeerVerifier(auth.PeerConfig{Domain: authority.Domain(), Roots: authority.Roots(), Clock: clock.Real{}}); err != nil {
			return RecoverResult{}, err
		}
	}
	return raftnode.Recover(c)
}
