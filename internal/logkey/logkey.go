// Package logkey names every structured log key pact uses, so logs stay
// greppable and a key is never spelled two ways.
package logkey

// Log keys.
const (
	Err          = "err"
	NodeID       = "node_id"
	JournalID    = "journal_id"
	Domain       = "domain"
	Serial       = "serial"
	IssuerSerial = "issuer_serial"
	NotAfter     = "not_after"
	Source       = "source"
	Reason       = "reason"
	Method       = "method"
	Actor        = "actor"
	Addr         = "addr"
	DataDir      = "data_dir"
	State        = "state"
	VCluster     = "vcluster"
	MACs         = "macs"
	BMCSerial    = "bmc_serial"
	RetryAfter   = "retry_after"
	Attempt      = "attempt"
	Index        = "index"
	Duration     = "duration"
	SPIFFEID     = "spiffe_id"
	// RootSHA256 is a domain root's fingerprint (pki.CertFingerprint).
	RootSHA256 = "root_sha256"
	TPM        = "tpm"
	TPMEKHash  = "tpm_ek_hash"
)
