// Package hwid normalises and matches node hardware identities: MAC
// addresses, BMC serial and an optional TPM endorsement key hash.
//
// Everything here is deterministic: the journal's state machine uses it to
// re-check an enrollment, so two replicas must always reach the same answer.
package hwid

import (
	"encoding/hex"
	"errors"
	"fmt"
	"sort"
	"strings"
)

// Sentinel errors. Callers match with errors.Is.
var (
	ErrInvalidMAC       = errors.New("hwid: invalid MAC address")
	ErrInvalidBMCSerial = errors.New("hwid: invalid BMC serial")
	ErrInvalidEKHash    = errors.New("hwid: invalid TPM EK hash")
	ErrEmpty            = errors.New("hwid: hardware identity has no MAC address")
	ErrTooMany          = errors.New("hwid: too many MAC addresses")
)

// Limits keep untrusted input small before anything else looks at it.
const (
	MaxMACs         = 64
	MaxBMCSerialLen = 128
)

// CheckUnicast refuses multicast MACs (the group bit, the least
// significant bit of the first octet, set), which no NIC owns, in
// normalised MACs. It is checked where a registration enters the journal
// and the CLI, not by the state machine: Normalize's rules are what Raft
// entries already committed were checked against, and they must not
// change under a replica replaying its log.
func CheckUnicast(macs []string) error {
	var errs []error
	for _, m := range macs {
		if len(m) < 2 {
			continue
		}
		if first := strings.IndexByte("0123456789abcdef", m[1]); first >= 0 && first&1 == 1 {
			errs = append(errs, fmt.Errorf("%w: %q is a multicast address, not a NIC's", ErrInvalidMAC, truncate(m)))
		}
	}
	return errors.Join(errs...)
}

// NormalizeMAC returns a 48-bit MAC in lower-case colon form. It accepts
// colon, dash, dot (Cisco) separated and bare hex forms. All-zero and
// broadcast addresses are rejected: they identify nothing.
func NormalizeMAC(s string) (string, error) {
	raw := strings.TrimSpace(s)
	var hexDigits strings.Builder
	for _, r := range raw {
		switch {
		case r == ':' || r == '-' || r == '.':
			continue
		case (r >= '0' && r <= '9') || (r >= 'a' && r <= 'f') || (r >= 'A' && r <= 'F'):
			hexDigits.WriteRune(r)
		default:
			return "", fmt.Errorf("%w: %q", ErrInvalidMAC, truncate(s))
		}
	}
	h := strings.ToLower(hexDigits.String())
	if len(h) != 12 || !separatorsValid(raw) {
		return "", fmt.Errorf("%w: %q (want six hex octets, e.g. 52:54:00:12:34:56)", ErrInvalidMAC, truncate(s))
	}
	if h == "000000000000" || h == "ffffffffffff" {
		return "", fmt.Errorf("%w: %q is not a unicast hardware address", ErrInvalidMAC, truncate(s))
	}
	var b strings.Builder
	for i := 0; i < 12; i += 2 {
		if i > 0 {
			b.WriteByte(':')
		}
		b.WriteString(h[i : i+2])
	}
	return b.String(), nil
}

// separatorsValid accepts aa:bb:cc:dd:ee:ff, aa-bb-..., aabb.ccdd.eeff and
// aabbccddeeff; it refuses mixed or misplaced separators.
func separatorsValid(s string) bool {
	switch {
	case strings.ContainsAny(s, ":-"):
		sep := ":"
		if strings.Contains(s, "-") {
			sep = "-"
		}
		parts := strings.Split(s, sep)
		if len(parts) != 6 {
			return false
		}
		for _, p := range parts {
			if len(p) != 2 {
				return false
			}
		}
		return !strings.Contains(s, ".")
	case strings.Contains(s, "."):
		parts := strings.Split(s, ".")
		if len(parts) != 3 {
			return false
		}
		for _, p := range parts {
			if len(p) != 4 {
				return false
			}
		}
		return true
	default:
		return len(s) == 12
	}
}

// NormalizeBMCSerial trims the serial and refuses control characters and
// over-long values. An empty serial is allowed (the node has none).
func NormalizeBMCSerial(s string) (string, error) {
	t := strings.TrimSpace(s)
	if len(t) > MaxBMCSerialLen {
		return "", fmt.Errorf("%w: longer than %d bytes", ErrInvalidBMCSerial, MaxBMCSerialLen)
	}
	for _, r := range t {
		if r < 0x20 || r == 0x7f {
			return "", fmt.Errorf("%w: contains control characters", ErrInvalidBMCSerial)
		}
	}
	return t, nil
}

// NormalizeEKHash returns a lower-case hex SHA-256, or "" for none. The EK
// hash is the SHA-256 of the DER SubjectPublicKeyInfo of the TPM
// endorsement key (internal/tpmattest.EKHash, docs/tpm.md).
func NormalizeEKHash(s string) (string, error) {
	t := strings.ToLower(strings.TrimSpace(s))
	if t == "" {
		return "", nil
	}
	if len(t) != 64 {
		return "", fmt.Errorf("%w: want 64 hex digits (SHA-256), got %d characters", ErrInvalidEKHash, len(t))
	}
	if _, err := hex.DecodeString(t); err != nil {
		return "", fmt.Errorf("%w: not hexadecimal", ErrInvalidEKHash)
	}
	return t, nil
}

// Identity is a normalised hardware identity. MACs are sorted and unique.
type Identity struct {
	MACs      []string
	BMCSerial string
	EKHash    string
}

// Normalize validates and normalises an identity as reported by an agent or
// registered by an operator. It reports every problem at once.
func Normalize(macs []string, bmcSerial, ekHash string) (Identity, error) {
	var errs []error
	if len(macs) > MaxMACs {
		return Identity{}, fmt.Errorf("%w: %d (at most %d)", ErrTooMany, len(macs), MaxMACs)
	}
	seen := make(map[string]struct{}, len(macs))
	out := make([]string, 0, len(macs))
	for _, m := range macs {
		n, err := NormalizeMAC(m)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if _, dup := seen[n]; dup {
			continue
		}
		seen[n] = struct{}{}
		out = append(out, n)
	}
	sort.Strings(out)
	bmc, err := NormalizeBMCSerial(bmcSerial)
	if err != nil {
		errs = append(errs, err)
	}
	ek, err := NormalizeEKHash(ekHash)
	if err != nil {
		errs = append(errs, err)
	}
	if len(errs) == 0 && len(out) == 0 {
		errs = append(errs, ErrEmpty)
	}
	if len(errs) > 0 {
		return Identity{}, errors.Join(errs...)
	}
	return Identity{MACs: out, BMCSerial: bmc, EKHash: ek}, nil
}

// Mismatch explains why a reported identity does not match a registered one.
type Mismatch string

// Reasons a reported identity fails to match its registration.
const (
	MatchOK             Mismatch = ""
	MismatchNoMAC       Mismatch = "no registered MAC address was reported"
	MismatchBMCMissing  Mismatch = "the node is registered with a BMC serial but reported none"
	MismatchBMCDiffers  Mismatch = "the reported BMC serial differs from the registered one"
	MismatchEKMissing   Mismatch = "the node is registered with a TPM EK hash but reported none"
	MismatchEKDiffers   Mismatch = "the reported TPM EK hash differs from the registered one"
	MismatchForeignMAC  Mismatch = "a reported MAC address is registered to another node"
	MismatchForeignBMC  Mismatch = "the reported BMC serial is registered to another node"
	MismatchNoCandidate Mismatch = "no registered node has any of the reported MACs or the BMC serial"
)

// Match decides whether reported is the hardware that was registered.
//
// The rule (docs/registry.md): at least one registered MAC must be reported
// (extra NICs are fine, a failed NIC is fine); a registered BMC serial must
// be reported and equal; a registered EK hash must be reported and equal.
// Ownership of reported identifiers by other nodes is checked by the caller,
// which holds the indexes.
func Match(registered, reported Identity) Mismatch {
	if registered.BMCSerial != "" {
		if reported.BMCSerial == "" {
			return MismatchBMCMissing
		}
		if reported.BMCSerial != registered.BMCSerial {
			return MismatchBMCDiffers
		}
	}
	if registered.EKHash != "" {
		if reported.EKHash == "" {
			return MismatchEKMissing
		}
		if reported.EKHash != registered.EKHash {
			return MismatchEKDiffers
		}
	}
	for _, m := range reported.MACs {
		for _, r := range registered.MACs {
			if m == r {
				return MatchOK
			}
		}
	}
	return MismatchNoMAC
}

func truncate(s string) string {
	if len(s) > 40 {
		return s[:40] + "…"
	}
	return s
}
