package static

import "github.com/pact-hpc/pact/identity"

// Parse builds the bootstrap identity from the PEM contents of the three
// files (bundlePEM may be empty for none). Errors wrap identity.ErrBadFiles.
// It is what New does after reading, and what the fuzz target exercises.
func Parse(certPEM, keyPEM, bundlePEM []byte) (*identity.Identity, error) {
	bundle := input{}
	if len(bundlePEM) > 0 {
		bundle = input{label: "bundle", data: bundlePEM, present: true}
	}
	return build(
		input{label: "certificate", data: certPEM, present: true},
		input{label: "key", data: keyPEM, present: true},
		bundle,
	)
}
