package auth

import (
	"crypto/x509"
	"time"

	"github.com/pact-hpc/pact/internal/pki"
)

// verifyClient is verifyClientChain without the chain, for the tests that
// ask only whether a certificate passes.
func (a *Authenticator) verifyClient(leaf *x509.Certificate, id pki.Identity, verdict *chainVerdict) error {
	_, err := a.verifyClientChain(leaf, id, verdict)
	return err
}

// valid reports whether a verification against bundle version at now is
// already known to pass.
func (v *chainVerdict) valid(version uint64, now time.Time) bool {
	return v.verified(version, now) != nil
}
