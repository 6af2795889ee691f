package keystore

import "github.com/google/go-tpm/tpm2/transport"

// SetOpenTransport replaces how the TPM is reached (a test stalls or
// refuses a command); the returned function restores it.
func SetOpenTransport(f func(device string) (transport.TPMCloser, error)) (restore func()) {
	old := openTransport
	openTransport = f
	return func() { openTransport = old }
}

// OpenTransport is how the TPM is reached, for a test's wrapper.
var OpenTransport = openTransport

// TPMHolders names the other processes that hold the TPM at device.
var TPMHolders = tpmHolders
