package caprofile

import (
	"bytes"
	"crypto/x509"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/pact-hpc/pact/internal/pki"
)

// ErrChainShape is a chain that verifies to a domain root but has a shape
// pact never issues: a misissued certificate, or one made with a stolen
// key. Its text has no package prefix: verifiers show it to the client.
var ErrChainShape = errors.New("certificate chain of a shape this domain does not issue")

// CheckChainShape checks that a verified chain (leaf first, a root last, as
// x509.Certificate.Verify returns it) is one pact issues to a certificate
// of kind (docs/security.md, "Which chains pact accepts"):
//
//	agent, journal server  [leaf, intermediate, journal CA, root]
//	                       [leaf, legacy intermediate, root] (a journal not migrated yet)
//	operator               [leaf, intermediate, journal CA, root] (pact admin issue)
//	                       [leaf, root] (the ceremony's first platform-admin; legacy credentials)
//
// An intermediate is a CA that is neither a journal CA (JournalOf) nor
// self-issued; the journal CA must be of domain. Anything else (a leaf
// signed by a journal CA, an agent or a journal signed by the root, an
// operator under a legacy intermediate) is ErrChainShape: a journal CA signs
// its journal's intermediates only, and a journal signs operators only
// under its journal CA.
func CheckChainShape(kind string, chain []*x509.Certificate, domain string) error {
	throughJournalCA := len(chain) == 4 && isIntermediate(chain[1]) && isJournalCAOf(chain[2], domain)
	var ok bool
	switch kind {
	case pki.KindAgent, pki.KindJournal:
		ok = throughJournalCA || (len(chain) == 3 && isIntermediate(chain[1]))
	case pki.KindAdmin:
		ok = throughJournalCA || len(chain) == 2
	}
	if ok {
		return nil
	}
	return fmt.Errorf("%w: %s certificate signed by %s; %s", ErrChainShape, kindName(kind), describeChain(chain), shapeAdvice(kind))
}

func isIntermediate(c *x509.Certificate) bool {
	_, _, journalCA := JournalOf(c)
	return c.IsCA && !journalCA && !bytes.Equal(c.RawIssuer, c.RawSubject)
}

func isJournalCAOf(c *x509.Certificate, domain string) bool {
	_, d, ok := JournalOf(c)
	return ok && d == domain
}

func kindName(kind string) string {
	switch kind {
	case pki.KindAgent:
		return "a node agent"
	case pki.KindJournal:
		return "a journal"
	case pki.KindAdmin:
		return "an operator"
	}
	return "a client"
}

func shapeAdvice(kind string) string {
	switch kind {
	case pki.KindAgent:
		return "an agent certificate is signed by a journal's intermediate, under its journal CA or (a journal not migrated yet) the root: re-enroll the node, and find out which key signed this one"
	case pki.KindJournal:
		return "a journal's certificate is signed by its own intermediate, under its journal CA or (not migrated yet) the root: restart that journal with its journal CA (docs/ceremony.md)"
	case pki.KindAdmin:
		return "an operator credential is signed by the root (pact ca issue-admin) or by a journal's intermediate under its journal CA (pact admin issue): ask a platform-admin for a new credential, and find out which key signed this one"
	}
	return "it names no pact identity"
}

// describeChain names the CAs above a chain's leaf, leaf side first:
// `journal CA j1, signed by root "pact root CA site"`.
func describeChain(chain []*x509.Certificate) string {
	if len(chain) < 2 {
		return "no CA"
	}
	parts := make([]string, 0, len(chain)-1)
	for i, c := range chain[1:] {
		id, _, journalCA := JournalOf(c)
		switch {
		case journalCA:
			parts = append(parts, "journal CA "+id)
		case i == len(chain)-2:
			parts = append(parts, "root "+strconv.Quote(c.Subject.CommonName))
		default:
			parts = append(parts, "intermediate "+strconv.Quote(c.Subject.CommonName))
		}
	}
	return strings.Join(parts, ", signed by ")
}
