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
// An intermediate is a CA of path length 0 that is neither a journal CA
// nor self-issued; a journal CA (a certificate whose subject names one,
// wherever it is on the chain) must fit a journal CA's profile of domain
// (CheckJournalCAProfile). Anything else (a leaf signed by a journal CA,
// an agent or a journal signed by the root, an operator under a legacy
// intermediate, a root-signed CA of path length 1 or more taken for a
// legacy intermediate) is ErrChainShape: a journal CA signs its journal's
// intermediates only, and a journal signs operators only under its
// journal CA.
func CheckChainShape(kind string, chain []*x509.Certificate, domain string) error {
	if len(chain) == 0 {
		return fmt.Errorf("%w: no certificate; %s", ErrChainShape, shapeAdvice(kind))
	}
	return CheckChainAboveLeaf(kind, chain[1:], domain)
}

// CheckChainAboveLeaf is CheckChainShape of a chain given without its leaf
// (above: the leaf's issuer first, a root last), which is all the shape
// depends on: a verifier that keeps the verified chains above its
// intermediates (journal/auth's fast path) checks each once, not once per
// leaf.
func CheckChainAboveLeaf(kind string, above []*x509.Certificate, domain string) error {
	for _, c := range above {
		if !claimsJournalCA(c) {
			continue
		}
		if err := CheckJournalCAProfile(c, domain); err != nil {
			var pe *ProfileError
			reason := err.Error()
			if errors.As(err, &pe) {
				reason = pe.Reason
			}
			return fmt.Errorf("%w: %s certificate signed by %s, under a journal CA that does not fit its profile: %s", ErrChainShape, kindName(kind), describeChain(above), reason)
		}
	}
	throughJournalCA := len(above) == 3 && isIntermediate(above[0]) && isJournalCAOf(above[1], domain)
	var ok bool
	switch kind {
	case pki.KindAgent, pki.KindJournal:
		ok = throughJournalCA || (len(above) == 2 && isIntermediate(above[0]))
	case pki.KindAdmin:
		ok = throughJournalCA || len(above) == 1
	}
	if ok {
		return nil
	}
	return fmt.Errorf("%w: %s certificate signed by %s%s; %s", ErrChainShape, kindName(kind), describeChain(above), pathLenNote(above), shapeAdvice(kind))
}

// isIntermediate reports whether c is shaped as a journal intermediate
// (current or legacy): a CA that may sign no CA (path length 0), neither a
// journal CA nor self-issued. A root-signed CA that may sign CAs is no
// legacy intermediate, whatever its name.
func isIntermediate(c *x509.Certificate) bool {
	return pathLenZero(c) && !claimsJournalCA(c) && !bytes.Equal(c.RawIssuer, c.RawSubject)
}

// pathLenNote names the first CA above the leaf that would be an
// intermediate but for its path length, or "".
func pathLenNote(above []*x509.Certificate) string {
	if len(above) < 2 {
		return ""
	}
	c := above[0]
	if !c.IsCA || pathLenZero(c) || claimsJournalCA(c) || bytes.Equal(c.RawIssuer, c.RawSubject) {
		return ""
	}
	if c.MaxPathLen < 0 || c.MaxPathLen == 0 && !c.MaxPathLenZero {
		return fmt.Sprintf(" (%q has no path length limit; an intermediate has path length 0)", c.Subject.CommonName)
	}
	return fmt.Sprintf(" (%q has path length %d; an intermediate has path length 0)", c.Subject.CommonName, c.MaxPathLen)
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

// describeChain names the CAs above a chain's leaf (above), leaf side
// first: `journal CA j1, signed by root "pact root CA site"`.
func describeChain(above []*x509.Certificate) string {
	if len(above) == 0 {
		return "no CA"
	}
	parts := make([]string, 0, len(above))
	for i, c := range above {
		id, _, journalCA := JournalOf(c)
		switch {
		case journalCA:
			parts = append(parts, "journal CA "+id)
		case i == len(above)-1:
			parts = append(parts, "root "+strconv.Quote(c.Subject.CommonName))
		default:
			parts = append(parts, "intermediate "+strconv.Quote(c.Subject.CommonName))
		}
	}
	return strings.Join(parts, ", signed by ")
}
