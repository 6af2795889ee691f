package cli

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/pact-hpc/pact/internal/caprofile"
	"github.com/pact-hpc/pact/internal/keystore"
	"github.com/pact-hpc/pact/internal/pki"
	"github.com/pact-hpc/pact/journal"
	"github.com/pact-hpc/pact/journal/ca"
	"github.com/pact-hpc/pact/journal/journaltest"
)

// issueCred has the journal issue a platform-admin credential for name
// (pact admin issue, as the bootstrap admin) and returns the variables
// that make pact use it.
func issueCred(t *testing.T, env map[string]string, name string) map[string]string {
	t.Helper()
	dir := t.TempDir()
	cert, key := filepath.Join(dir, name+".pem"), filepath.Join(dir, name+"-key.pem")
	if code, out, errs := pact(t, env, nil, "admin", "issue", name, "--role", "platform-admin", "--cert-out", cert, "--key-out", key); code != ExitOK {
		t.Fatalf("issue %s: exit %d\n%s%s", name, code, out, errs)
	}
	return map[string]string{EnvCert: cert, EnvKey: key}
}

// writeOtherJournalCA puts at h's --journal-ca-cert a journal CA for
// journal id, for h's key, signed by h's root: a file the journal refuses
// at its next re-key.
func writeOtherJournalCA(t *testing.T, h *journaltest.Harness, id string) {
	t.Helper()
	root, err := ca.LoadKeyFileAuthority(filepath.Join(h.Dir, ca.RootCertFile), filepath.Join(h.Dir, ca.RootKeyFile))
	if err != nil {
		t.Fatal(err)
	}
	spec, err := keystore.Parse(h.Cfg.JournalCAKey)
	if err != nil {
		t.Fatal(err)
	}
	key, err := keystore.Open(spec, keystore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer key.Close()
	dnsNames, ips := journal.ServerNames(h.Cfg.ListenAddr, h.Cfg.ServerNames)
	cert, err := ca.SignJournalCA(root, key.Public(), caprofile.JournalCAParams{Domain: journaltest.Domain, JournalID: id, DNSNames: dnsNames, IPs: ips,
		NotBefore: time.Now().Add(-time.Minute), NotAfter: time.Now().Add(caprofile.DefaultJournalCALifetime)})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(h.Cfg.JournalCACertFile, pki.EncodeCertsPEM(cert.Raw), 0o644); err != nil {
		t.Fatal(err)
	}
}

// pact admin list names what each credential chains to; retire-intermediate
// says what became of each intermediate (retiring, already retiring,
// revoked, already revoked), waits for the journal to re-key and says what
// it signs under, warns an operator whose own credential goes at the end
// of the grace, and refuses (exit 6, nothing changed) a retirement with no
// grace of her own intermediate. A journal that refused its new journal CA
// file is an error (exit 6) saying why, and pact journal status shows it.
func TestRetireIntermediateSaysWhatHappened(t *testing.T) {
	h, env := realJournal(t)
	ops := issueCred(t, env, "ops")
	inter := h.J.Intermediate()
	jca := pki.SerialHex(h.J.JournalCA().SerialNumber)

	code, out, errs := pact(t, env, nil, "admin", "list", "-o", "json")
	var list OperatorsView
	if code != ExitOK || json.Unmarshal([]byte(out), &list) != nil {
		t.Fatalf("admin list: exit %d\n%s%s", code, out, errs)
	}
	for _, o := range list.Operators {
		want := [2]string{inter, jca}
		if o.Name == "admin" {
			want = [2]string{"root", ""}
		}
		if got := [2]string{o.Issuer, o.JournalCASerial}; got != want {
			t.Errorf("%s's credential chains to %v, want %v", o.Name, got, want)
		}
	}
	if _, out, _ := pact(t, env, nil, "admin", "list"); !strings.Contains(out, "ISSUER") || !strings.Contains(out, "JOURNAL CA") || !strings.Contains(out, inter) {
		t.Errorf("admin list table:\n%s", out)
	}

	// Her own intermediate, at once: refused, nothing changed.
	code, out, errs = pact(t, env, ops, "journal", "retire-intermediate", inter, "--now")
	if code != ExitPrecondition || !strings.Contains(errs, "REVOKES_OWN_CREDENTIAL") || !strings.Contains(errs, "nothing was changed") ||
		!strings.Contains(errs, "intermediate "+inter+" of journal j1, under journal CA "+jca) || !strings.Contains(errs, "--yes-including-my-credential") {
		t.Fatalf("retire --now of the caller's own intermediate: exit %d\n%s%s", code, out, errs)
	}
	if h.J.Intermediate() != inter {
		t.Fatal("a refused retirement re-keyed the journal")
	}

	// With a grace: the journal re-keys, and the answer says under what.
	code, out, errs = pact(t, env, nil, "journal", "retire-intermediate", "j1", "--grace", "1h", "--reason", "drill")
	if code != ExitOK || !strings.Contains(out, "intermediate "+inter+" of journal j1 is retiring: its agents renew now") ||
		!strings.Contains(out, "journal j1 signs with intermediate ") || !strings.Contains(out, "under journal CA "+jca) || strings.Contains(errs, "your own credential") {
		t.Fatalf("retire j1: exit %d\n%s%s", code, out, errs)
	}
	if h.J.Intermediate() == inter {
		t.Fatal("the journal did not re-key before the command returned")
	}
	// Again, by ops: unchanged, and her own credential goes at the end
	// of the first grace.
	code, out, errs = pact(t, env, ops, "journal", "retire-intermediate", inter, "--grace", "2h")
	if code != ExitOK || !strings.Contains(out, "intermediate "+inter+" of journal j1 was already retiring: unchanged") ||
		!strings.Contains(errs, "warning: your own credential") || !strings.Contains(errs, "stops working at") || !strings.Contains(errs, "pact admin renew") {
		t.Fatalf("retire a retiring intermediate again: exit %d\n%s%s", code, out, errs)
	}
	// At once (the bootstrap credential is the root's), then again.
	if code, out, errs = pact(t, env, nil, "journal", "retire-intermediate", inter, "--now"); code != ExitOK || !strings.Contains(out, "is revoked: the certificates it signed are refused") {
		t.Fatalf("retire --now: exit %d\n%s%s", code, out, errs)
	}
	if code, out, errs = pact(t, env, nil, "journal", "retire-intermediate", inter, "--now"); code != ExitOK || !strings.Contains(out, "was already revoked") || strings.Contains(out, "renew now") {
		t.Fatalf("retire a revoked intermediate: exit %d\n%s%s", code, out, errs)
	}
	// ops's credential went with it: the CLI says the journal refused it,
	// not that the journal is down.
	if code, _, errs = pact(t, env, ops, "node", "list"); code != ExitUnavailable || !strings.Contains(errs, "refused your credential") || strings.Contains(errs, "make run") {
		t.Errorf("a credential whose intermediate was revoked: exit %d\n%s", code, errs)
	}

	// A journal CA file the journal refuses.
	writeOtherJournalCA(t, h, "j9")
	cur := h.J.Intermediate()
	code, out, errs = pact(t, env, nil, "journal", "retire-intermediate", "j1", "--grace", "1h")
	if code != ExitPrecondition || !strings.Contains(errs, "journal j1 re-keyed under its OLD journal CA "+jca) || !strings.Contains(errs, "is for journal j9") ||
		!strings.Contains(errs, "the intermediates are retired, but j1 refused the journal CA in its --journal-ca-cert file") {
		t.Fatalf("retire with a refused journal CA file: exit %d\n%s%s", code, out, errs)
	}
	if h.J.Intermediate() == cur {
		t.Error("the journal did not re-key")
	}
	code, out, errs = pact(t, env, nil, "journal", "status")
	if code != ExitOK || !strings.Contains(out, "journal CA file refused: ") || !strings.Contains(errs, "warning: journal j1 refused the certificate in its --journal-ca-cert file") {
		t.Errorf("status with a refused journal CA file: exit %d\n%s%s", code, out, errs)
	}
	var st QuorumView
	if _, out, _ = pact(t, env, nil, "journal", "status", "-o", "json"); json.Unmarshal([]byte(out), &st) != nil || len(st.Members) != 1 ||
		!strings.Contains(st.Members[0].JournalCAFileRefused, "is for journal j9") || st.Members[0].JournalCASerial != jca {
		t.Errorf("status -o json with a refused journal CA file:\n%s", out)
	}
}

// revoke-ca of the journal CA above the caller's own credential is refused,
// nothing changed, unless she confirms it; then she is told her credential
// is gone, and, the journal having no other journal CA, that it signs
// nothing. remove's flag goes with --revoke-intermediate only.
func TestRevokeCAOfTheCallersOwnChain(t *testing.T) {
	h, env := realJournal(t)
	ops := issueCred(t, env, "ops")
	jca := pki.SerialHex(h.J.JournalCA().SerialNumber)

	code, out, errs := pact(t, env, ops, "journal", "revoke-ca", jca, "--reason", "drill", "--yes")
	if code != ExitPrecondition || !strings.Contains(errs, "REVOKES_OWN_CREDENTIAL") || !strings.Contains(errs, "refused, to keep you from cutting off your own credential") ||
		!strings.Contains(errs, "under journal CA "+jca) {
		t.Fatalf("revoke-ca of the caller's chain: exit %d\n%s%s", code, out, errs)
	}
	if code, out, _ := pact(t, env, nil, "journal", "intermediates", "--journal-cas", "-o", "json"); code != ExitOK || strings.Contains(out, `"revoked"`) {
		t.Fatalf("a refused revocation revoked:\n%s", out)
	}
	code, out, errs = pact(t, env, ops, "journal", "revoke-ca", jca, "--reason", "drill", "--yes-including-my-credential")
	if code != ExitOK || !strings.Contains(out, "journal CA "+jca+" of journal j1 is revoked") ||
		!strings.Contains(out, "journal j1 signs nothing until it has a new journal CA: the ceremony signs one, and pact journal record-ca j1 FILE binds it") ||
		!strings.Contains(errs, "warning: your own credential") || !strings.Contains(errs, "is refused from now on") {
		t.Fatalf("revoke-ca --yes-including-my-credential: exit %d\n%s%s", code, out, errs)
	}
	if code, _, errs = pact(t, env, ops, "node", "list"); code != ExitUnavailable || !strings.Contains(errs, "refused your credential") {
		t.Errorf("the revoked chain's credential: exit %d\n%s", code, errs)
	}
	if code, _, errs = pact(t, env, nil, "journal", "remove", "j1", "--yes-including-my-credential"); code != ExitUsage || !strings.Contains(errs, "--yes-including-my-credential goes with --revoke-intermediate") {
		t.Errorf("remove --yes-including-my-credential alone: exit %d\n%s", code, errs)
	}
}

// pact node list --issuer names the nodes whose current certificate an
// intermediate, or one of a journal CA's intermediates, signed; pact journal
// intermediates counts them.
func TestNodeListByIssuer(t *testing.T) {
	h, env := realJournal(t)
	h.Register(t, "n1", "SN1", "52:54:00:00:00:01")
	h.Register(t, "n2", "SN2", "52:54:00:00:00:02")
	if _, err := h.Enroll(t, journaltest.NewKey(t), "SN1", "52:54:00:00:00:01"); err != nil {
		t.Fatal(err)
	}
	inter, jca := h.J.Intermediate(), pki.SerialHex(h.J.JournalCA().SerialNumber)
	for _, issuer := range []string{inter, jca, "0bad," + jca} {
		code, out, errs := pact(t, env, nil, "node", "list", "--issuer", issuer, "-o", "json")
		var ns []NodeView
		if issuer == "0bad,"+jca {
			if code != ExitUsage || !strings.Contains(errs, "--issuer 0bad: no intermediate or journal CA of that serial") {
				t.Errorf("--issuer with an unknown serial: exit %d\n%s%s", code, out, errs)
			}
			continue
		}
		if code != ExitOK || json.Unmarshal([]byte(out), &ns) != nil || len(ns) != 1 || ns[0].NodeID != "n1" {
			t.Errorf("--issuer %s: exit %d\n%s%s", issuer, code, out, errs)
		}
	}
	code, out, _ := pact(t, env, nil, "journal", "intermediates", "--journal-cas", "-o", "json")
	var cas []JournalCAView
	if code != ExitOK || json.Unmarshal([]byte(out), &cas) != nil || len(cas) != 1 || cas[0].Nodes != 1 {
		t.Errorf("journal CAs: %s", out)
	}
	code, out, _ = pact(t, env, nil, "journal", "intermediates", "-o", "json")
	var ins []IntermediateView
	if code != ExitOK || json.Unmarshal([]byte(out), &ins) != nil || len(ins) != 1 || ins[0].Nodes != 1 || ins[0].State != "active" {
		t.Errorf("intermediates: %s", out)
	}
}
