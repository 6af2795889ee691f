package main

import (
	"crypto/tls"
	"crypto/x509"
	"path/filepath"
	"testing"
	"time"

	"github.com/pact-hpc/pact/internal/caprofile"
	"github.com/pact-hpc/pact/internal/pki"
	"github.com/pact-hpc/pact/journal/ca"
)

// The floor and the ceiling must make an agent verify what pact's
// journals make it verify: the design's chain, leaf, intermediate, journal
// CA, root (DESIGN.md, "the chain grows one link"). A stub on the legacy
// two-link chain would spare the agents one signature per chain and
// flatter the floor.
func TestFloorChainIsTheDesigns(t *testing.T) {
	dir := t.TempDir()
	if _, err := ca.InitDev(dir, "floor.test", time.Now()); err != nil {
		t.Fatal(err)
	}
	up, err := ca.LoadKeyFileAuthority(filepath.Join(dir, ca.RootCertFile), filepath.Join(dir, ca.RootKeyFile))
	if err != nil {
		t.Fatal(err)
	}
	stub, err := newStubCA(up, "floor-1")
	if err != nil {
		t.Fatal(err)
	}
	other, err := newStubCA(up, "floor-2")
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AddCert(up.Root())

	server := stub.ServerCertificate()
	if len(server.Certificate) != 3 {
		t.Fatalf("server chain of %d certificates, want leaf, intermediate and journal CA", len(server.Certificate))
	}
	leaf, _ := x509.ParseCertificate(server.Certificate[0])
	inter := x509.NewCertPool()
	for _, der := range server.Certificate[1:] {
		c, _ := x509.ParseCertificate(der)
		inter.AddCert(c)
	}
	chains, err := leaf.Verify(x509.VerifyOptions{Roots: roots, Intermediates: inter, DNSName: "localhost"})
	if err != nil {
		t.Fatalf("an agent does not verify the stub's server chain: %v", err)
	}
	if len(chains[0]) != 4 {
		t.Fatalf("verified server chain of %d certificates, want 4 (leaf, intermediate, journal CA, root)", len(chains[0]))
	}

	agent := func(c *ca.CA, name string) []*x509.Certificate {
		_, csrDER, err := newAgentKey()
		if err != nil {
			t.Fatal(err)
		}
		csr, err := ca.ParseCSR(csrDER)
		if err != nil {
			t.Fatal(err)
		}
		iss, err := c.SignAgent(csr, name)
		if err != nil {
			t.Fatal(err)
		}
		var chain []*x509.Certificate
		for _, der := range iss.ChainDER {
			cert, _ := x509.ParseCertificate(der)
			chain = append(chain, cert)
		}
		return chain
	}
	mine, theirs := agent(stub, "n1"), agent(other, "n2")
	if err := caprofile.CheckChainShape(pki.KindAgent, append(mine, up.Root()), "floor.test"); err != nil {
		t.Fatalf("the stub's agent chain is not the shape pact's journals issue: %v", err)
	}
	expired := *mine[0]
	expired.NotAfter = time.Now().Add(-time.Minute)

	// What a stub's issuers() holds: the stubs' intermediates.
	stubs := []*x509.Certificate{stub.Intermediate()}
	for _, tc := range []struct {
		name  string
		peer  []*x509.Certificate
		wants bool
	}{
		{"no client certificate (Enroll)", nil, true},
		{"signed by a stub's intermediate", mine, true},
		{"signed by an intermediate the stubs do not hold", theirs, false},
		{"not valid now", []*x509.Certificate{&expired}, false},
		{"the intermediate itself", mine[1:], false},
	} {
		err := verifyLeafSignedBy(tls.ConnectionState{PeerCertificates: tc.peer}, stubs)
		if (err == nil) != tc.wants {
			t.Errorf("%s: verifyLeafSignedBy = %v, want accepted %v", tc.name, err, tc.wants)
		}
	}
}
