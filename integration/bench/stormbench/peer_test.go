package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"os"
	"strings"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"
)

func TestSummarizePeer(t *testing.T) {
	run := func(round, clients int, pactOK int, pactCPU, pactRate, stepCPU, stepRate float64) peerRun {
		return peerRun{Round: round, Clients: clients,
			Pact:   certRun{OK: pactOK, ServerCPUMsPerCert: pactCPU, CertsPerS: pactRate, FirstError: "refused"},
			StepCA: certRun{OK: 100, ServerCPUMsPerCert: stepCPU, CertsPerS: stepRate}}
	}
	runs := []peerRun{
		run(1, 32, 100, 3.0, 200, 2.0, 400),
		run(1, 256, 100, 2.6, 250, 2.6, 250),
		run(2, 32, 100, 2.4, 300, 2.0, 300),
		run(2, 256, 99, 9, 10, 2.5, 250), // pact fell short: out of the spreads
		run(3, 32, 100, 4.0, 100, 2.0, 400),
	}
	by, problems := summarizePeer(runs, 100)
	if len(problems) != 1 || !strings.Contains(problems[0], "round 2, 256 clients: pact issued 99 of 100 (refused)") {
		t.Errorf("problems %q", problems)
	}
	if got := []float64{runs[0].CPURatio, runs[0].ThroughputRatio, runs[1].CPURatio, runs[2].CPURatio}; got[0] != 1.5 || got[1] != 0.5 || got[2] != 1 || got[3] != 1.2 {
		t.Errorf("ratios %v, want [1.5 0.5 1 1.2]", got)
	}
	want := []peerByClients{
		{Clients: 32, PactCPUPerCert: &spread{2.4, 3, 4}, StepCACPUPerCert: &spread{2, 2, 2}, CPURatio: &spread{1.2, 1.5, 2}, ThroughputRatio: &spread{0.25, 0.5, 1}},
		{Clients: 256, PactCPUPerCert: &spread{2.6, 2.6, 2.6}, StepCACPUPerCert: &spread{2.6, 2.6, 2.6}, CPURatio: &spread{1, 1, 1}, ThroughputRatio: &spread{1, 1, 1}},
	}
	if asJSON(t, by) != asJSON(t, want) {
		t.Errorf("by clients:\n got %s\nwant %s", asJSON(t, by), asJSON(t, want))
	}
}

// The floor's ratios come from the runs in which all three sides issued
// every certificate; a floor that fell short is a problem of the run and
// leaves pact's and step-ca's spreads alone.
func TestSummarizePeerWithTheFloor(t *testing.T) {
	run := func(round int, floorOK int, pactCPU, stepCPU, floorCPU float64) peerRun {
		return peerRun{Round: round, Clients: 32,
			Pact:   certRun{OK: 100, ServerCPUMsPerCert: pactCPU, CertsPerS: 100},
			StepCA: certRun{OK: 100, ServerCPUMsPerCert: stepCPU, CertsPerS: 100},
			Floor:  &certRun{OK: floorOK, ServerCPUMsPerCert: floorCPU, CertsPerS: 100, FirstError: "deadline"}}
	}
	runs := []peerRun{
		run(1, 100, 3.0, 2.0, 2.5),
		run(2, 100, 3.3, 2.2, 2.2),
		run(3, 50, 3.6, 2.0, 9.0), // the floor fell short: out of its spreads
	}
	by, problems := summarizePeer(runs, 100)
	if len(problems) != 1 || !strings.Contains(problems[0], "round 3, 32 clients: the floor issued 50 of 100 (deadline)") {
		t.Errorf("problems %q", problems)
	}
	if runs[0].FloorCPURatio != 1.25 || runs[0].PactOverFloorCPU != 1.2 || runs[1].FloorCPURatio != 1 || runs[1].PactOverFloorCPU != 1.5 {
		t.Errorf("run ratios %+v %+v", runs[0], runs[1])
	}
	want := []peerByClients{{Clients: 32,
		PactCPUPerCert: &spread{3, 3.3, 3.6}, StepCACPUPerCert: &spread{2, 2, 2.2}, CPURatio: &spread{1.5, 1.5, 1.8}, ThroughputRatio: &spread{1, 1, 1},
		FloorCPUPerCert: &spread{2.2, 2.35, 2.5}, FloorCPURatio: &spread{1, 1.125, 1.25}, PactOverFloorCPU: &spread{1.2, 1.35, 1.5}}}
	if asJSON(t, by) != asJSON(t, want) {
		t.Errorf("by clients:\n got %s\nwant %s", asJSON(t, by), asJSON(t, want))
	}
}

func TestParseClients(t *testing.T) {
	if got, err := parseClients("32, 256"); err != nil || len(got) != 2 || got[0] != 32 || got[1] != 256 {
		t.Errorf("got %v, %v", got, err)
	}
	for _, bad := range []string{"", "32,", "0", "x"} {
		if _, err := parseClients(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

// The one-time token must be what step-ca's JWK provisioner accepts: an
// ES256 JWS whose kid names the provisioner's key, signed by it, issued
// by the provisioner for the sign endpoint, naming the certificate's
// subject and SANs, with a jti of its own.
func TestStepCAToken(t *testing.T) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	signer, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.ES256, Key: jose.JSONWebKey{Key: key, KeyID: "kid-1"}}, (&jose.SignerOptions{}).WithType("JWT"))
	if err != nil {
		t.Fatal(err)
	}
	s := &stepCA{signer: signer, audience: "https://127.0.0.1:9000/1.0/sign"}
	seen := map[string]bool{}
	for range 2 {
		raw, err := s.token("peer-000001")
		if err != nil {
			t.Fatal(err)
		}
		tok, err := jwt.ParseSigned(raw, []jose.SignatureAlgorithm{jose.ES256})
		if err != nil {
			t.Fatal(err)
		}
		if kid := tok.Headers[0].KeyID; kid != "kid-1" {
			t.Errorf("kid %q", kid)
		}
		var claims jwt.Claims
		var extra struct {
			SANs []string `json:"sans"`
		}
		if err := tok.Claims(&key.PublicKey, &claims, &extra); err != nil {
			t.Fatalf("not signed by the provisioner's key: %v", err)
		}
		if err := claims.ValidateWithLeeway(jwt.Expected{Issuer: stepCAProvisioner, Subject: "peer-000001", AnyAudience: jwt.Audience{s.audience}, Time: time.Now()}, 0); err != nil {
			t.Error(err)
		}
		if len(extra.SANs) != 1 || extra.SANs[0] != "peer-000001" {
			t.Errorf("sans %v", extra.SANs)
		}
		if claims.ID == "" || seen[claims.ID] {
			t.Errorf("jti %q not unique", claims.ID)
		}
		seen[claims.ID] = true
	}
}

// The root and intermediate step-ca is given chain up, and the root's key
// is not written.
func TestStepCAPKI(t *testing.T) {
	dir := t.TempDir()
	rootPath, crtPath, keyPath, err := writeStepCAPKI(dir)
	if err != nil {
		t.Fatal(err)
	}
	roots, err := loadPool(rootPath)
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(crtPath)
	if err != nil {
		t.Fatal(err)
	}
	block, _ := pem.Decode(b)
	if block == nil {
		t.Fatal("intermediate: no PEM")
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	if !cert.IsCA || !cert.MaxPathLenZero {
		t.Errorf("intermediate: CA %v, path length zero %v", cert.IsCA, cert.MaxPathLenZero)
	}
	if _, err := cert.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}}); err != nil {
		t.Errorf("intermediate does not chain to the root: %v", err)
	}
	if fi, err := os.Stat(keyPath); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("intermediate key: %v, %v", fi, err)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	if strings.Join(names, " ") != "intermediate_ca.crt intermediate_ca_key root_ca.crt" {
		t.Errorf("files %v: want the root, the intermediate and its key only", names)
	}
}
