package agent

import "fmt"

// RenewCertError is a renewal that failed at its RenewCert call: the
// journal at Journal refused it, or its answer did not come. A renewal
// whose RenewCert answered and whose new channel failed afterwards fails
// with another error (the channel's): the agent keeps the renewed
// certificate and moves onto it later. OnAttempt sees it for op "renew".
type RenewCertError struct {
	Journal string
	Err     error
}

func (e *RenewCertError) Error() string {
	return fmt.Sprintf("agent: RenewCert at %s: %v", e.Journal, e.Err)
}

func (e *RenewCertError) Unwrap() error { return e.Err }
