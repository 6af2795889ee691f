package agent

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/pact-hpc/pact/identity"
	"github.com/pact-hpc/pact/identity/identitytest"
	"github.com/pact-hpc/pact/identity/spire/spiretest"
	"github.com/pact-hpc/pact/internal/clock"
	"github.com/pact-hpc/pact/journal/journaltest"
	pactv1 "github.com/pact-hpc/pact/proto/pact/v1"
)

// spireSite is a journal, a SPIRE CA for the pact.local trust domain and a
// fake SPIRE agent that serves nothing until told to.
type spireSite struct {
	h     *journaltest.Harness
	ca    *identitytest.CA
	spire *spiretest.Server
}

// newSPIRESite starts the journal, trusting the SPIRE CA when trusted (a
// journal of a site without SPIRE otherwise), and registers n1.
func newSPIRESite(t *testing.T, trusted bool) *spireSite {
	t.Helper()
	ca := identitytest.NewCA("pact.local", time.Now())
	jcfg := journaltest.Config(t.TempDir())
	if trusted {
		jcfg.SPIREBundleFile = filepath.Join(t.TempDir(), "spire-bundle.pem")
		if err := os.WriteFile(jcfg.SPIREBundleFile, identitytest.CertsPEM(ca.Cert), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	s := &spireSite{h: journaltest.Start(t, jcfg), ca: ca, spire: spiretest.New(t)}
	s.h.Register(t, "n1", "SN1", mac1)
	s.spire.Start()
	return s
}

func (s *spireSite) svid() *identity.Identity {
	now := time.Now()
	return s.ca.Issue(identity.SourceSPIRE, "spiffe://pact.local/pact-agent/n1", now.Add(-time.Minute), now.Add(time.Hour))
}

func (s *spireSite) agentConfig() Config {
	cfg := agentConfig(s.h, clock.Real{}, "SN1", mac1)
	cfg.SPIRESocket = s.spire.Addr()
	return cfg
}

// SPIRE appears after the agent enrolled: the agent moves its channel to
// the SVID under load, without a failed call, and follows SPIRE's rotations.
func TestUpgradeToSPIRE(t *testing.T) {
	s := newSPIRESite(t, true)
	r := runAgent(t, s.agentConfig())
	eventually(t, "n1 streams with its journal certificate", func() bool {
		st := r.Status()
		return st.Ready && st.Source == "journal"
	})
	journalCh := r.rot.Active()

	l := startLoad(t, r.Agent, 8)
	l.waitCalls(t, 100)
	svid := s.svid()
	s.spire.SetSVID(svid)
	eventually(t, "the agent moves to the SVID", func() bool {
		ch := r.rot.Active()
		return ch.Identity().Source == identity.SourceSPIRE && ch.Identity().Serial() == svid.Serial() &&
			inspect(t, s.h, "n1").GetCert().GetSerial() == svid.Serial()
	})
	l.waitCalls(t, 100)
	l.end()
	if n := l.failures.Load(); n != 0 {
		t.Errorf("%d of %d calls failed during the upgrade; first: %v", n, l.calls.Load(), l.firstErr.Load())
	}
	rec, _ := r.rot.LastSwap()
	t.Logf("upgrade took %v, stream gap %v, %d calls", rec.Duration(), rec.StreamGap(), l.calls.Load())
	if rec.From != journalCh || rec.StreamGap() > rec.Duration() {
		t.Errorf("swap %+v: from %p (want %p), gap %v > %v", rec, rec.From, journalCh, rec.StreamGap(), rec.Duration())
	}
	eventually(t, "one stream remains", func() bool { return s.h.J.OpenStreams("n1") == 1 })
	st := r.Status()
	if st.Source != "spire" || st.SPIFFEID != "spiffe://pact.local/pact-agent/n1" || st.Serial != svid.Serial() || !st.Ready {
		t.Errorf("status after the upgrade: %+v", st)
	}
	if v, _ := metricValue(t, r.Agent, "pact_agent_identity_source", "source", "spire"); v != 1 {
		t.Errorf("pact_agent_identity_source{source=spire} = %v", v)
	}

	rotated := s.svid()
	s.spire.SetSVID(rotated)
	eventually(t, "the agent follows SPIRE's rotation", func() bool {
		return r.rot.Active().Identity().Serial() == rotated.Serial() && s.h.J.OpenStreams("n1") == 1
	})
}

// With an SVID at start, the agent never enrolls with the journal: its
// journal-signed identity is the standby it got over the SVID channel.
func TestSPIREAtBoot(t *testing.T) {
	s := newSPIRESite(t, true)
	svid := s.svid()
	s.spire.SetSVID(svid)
	r := runAgent(t, s.agentConfig())
	eventually(t, "n1 streams with its SVID", func() bool {
		st := r.Status()
		return st.Ready && st.Source == "spire" && st.Serial == svid.Serial()
	})
	if c := inspect(t, s.h, "n1").GetCert(); c.GetSerial() != svid.Serial() {
		t.Errorf("registry holds certificate %s, want the SVID %s", c.GetSerial(), svid.Serial())
	}
	eventually(t, "the agent holds the node's standby", func() bool {
		id, err := r.jp.Current(t.Context())
		return err == nil && inspect(t, s.h, "n1").GetStandbyCert().GetSerial() == id.Serial()
	})
	resp, err := s.h.AdminClient(t).ListAudit(t.Context(), &pactv1.ListAuditRequest{NodeId: "n1"})
	if err != nil {
		t.Fatal(err)
	}
	if got := auditActions(resp.GetEntries()); strings.Join(got, ",") != "register,enroll,standby" {
		t.Errorf("audit actions %v, want register, enroll (by the SVID), standby", got)
	}
}

// A journal that does not take SVIDs refuses the upgrade: the agent keeps
// its journal channel, says why, and tries again later.
func TestUpgradeRefusedKeepsTheChannel(t *testing.T) {
	s := newSPIRESite(t, false)
	r := runAgent(t, s.agentConfig())
	eventually(t, "n1 streams with its journal certificate", func() bool {
		st := r.Status()
		return st.Ready && st.Source == "journal"
	})
	before := r.rot.Active()
	l := startLoad(t, r.Agent, 4)
	s.spire.SetSVID(s.svid())
	st := waitFailure(t, r.Agent, ReasonIdentityRefused)
	if st.LastFailureOp != "upgrade" {
		t.Errorf("failed op %q, want upgrade", st.LastFailureOp)
	}
	n := failures(t, r.Agent, ReasonIdentityRefused)
	eventually(t, "the upgrade is retried", func() bool { return failures(t, r.Agent, ReasonIdentityRefused) > n })
	l.waitCalls(t, 100)
	l.end()
	if n := l.failures.Load(); n != 0 {
		t.Errorf("%d calls failed; first: %v", n, l.firstErr.Load())
	}
	if r.rot.Active() != before || !before.StreamAlive() || s.h.J.OpenStreams("n1") != 1 {
		t.Errorf("the refused upgrade disturbed the journal channel")
	}
	if st := r.Status(); st.Source != "journal" || !st.Ready {
		t.Errorf("status %+v", st)
	}
}

// A bootstrap identity from the image is tried first; the journal does not
// take it, so the agent enrolls and moves up to its journal-signed
// certificate. The bootstrap identity is never written to the identity
// directory.
func TestBootstrapIdentityThenJournal(t *testing.T) {
	h := journaltest.Start(t, journaltest.Config(t.TempDir()))
	h.Register(t, "n1", "SN1", mac1)
	now := time.Now()
	boot := identitytest.NewCA("pact.local", now).Issue(identity.SourceStatic, "spiffe://pact.local/pact-agent/n1", now.Add(-time.Hour), now.Add(time.Hour))
	files := identitytest.WriteFiles(t, t.TempDir(), boot)
	cfg := agentConfig(h, clock.Real{}, "SN1", mac1)
	cfg.BootstrapCert, cfg.BootstrapKey, cfg.BootstrapBundle = files.Cert, files.Key, files.Bundle
	cfg.IdentityDir = t.TempDir()
	r := runAgent(t, cfg)
	eventually(t, "n1 streams with its journal certificate", func() bool {
		st := r.Status()
		return st.Ready && st.Source == "journal"
	})
	if st := r.Status(); st.LastFailureOp != "connect" || st.LastFailureReason != ReasonIdentityRefused {
		t.Errorf("the refused bootstrap identity is not the last failure: %+v", st)
	}
	chainFile := filepath.Join(cfg.IdentityDir, ChainFile)
	eventually(t, "the identity files are written", func() bool { _, err := os.Stat(chainFile); return err == nil })
	data, err := os.ReadFile(chainFile)
	if err != nil {
		t.Fatal(err)
	}
	if string(data) == string(identitytest.CertsPEM(boot.Chain...)) || !strings.Contains(string(data), "CERTIFICATE") {
		t.Fatalf("chain.pem holds the bootstrap certificate or nothing:\n%s", data)
	}
}

func auditActions(entries []*pactv1.AuditEntry) []string {
	var out []string
	for _, e := range entries {
		out = append(out, e.GetAction())
	}
	return out
}
