package pki_test

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"

	"github.com/pact-hpc/pact/internal/pki"
)

// A client that dials a journal verifies its chain against the domain
// roots and its name against the address, as any TLS client does, and
// then authorizes it as a journal by its SPIFFE ID.
func ExampleAuthorizeJournal() {
	roots := x509.NewCertPool() // the domain roots (--ca)
	_ = &tls.Config{
		MinVersion:       tls.VersionTLS13,
		RootCAs:          roots,
		ServerName:       "journal-1.example",
		VerifyConnection: pki.VerifyConnection(pki.AuthorizeJournal("pact.local")),
	}

	authorize := pki.AuthorizeJournal("pact.local")
	journal := pki.Identity{Kind: pki.KindJournal, Name: "j1", Domain: "pact.local"}
	node := pki.Identity{Kind: pki.KindAgent, Name: "n1", Domain: "pact.local"}
	fmt.Println(authorize(journal, nil))
	fmt.Println(authorize(node, nil) != nil)
	// Output:
	// <nil>
	// true
}
