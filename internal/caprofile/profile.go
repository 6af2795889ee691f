package caprofile

import (
	"crypto/x509"
	"fmt"
	"net"
	"slices"
	"strings"

	"github.com/pact-hpc/pact/internal/pki"
)

// ProfileError is a certificate that does not fit its profile. It wraps
// ErrProfile; Reason says what is wrong and what to do, without a package
// prefix (verifiers show it to clients inside ErrChainShape).
type ProfileError struct {
	// Subject is the certificate's subject common name.
	Subject string
	// Reason is what is wrong, and what to do.
	Reason string
}

func (e *ProfileError) Error() string { return ErrProfile.Error() + ": " + e.Reason }

// Unwrap makes a ProfileError ErrProfile.
func (e *ProfileError) Unwrap() error { return ErrProfile }

func profileErr(cert *x509.Certificate, format string, args ...any) *ProfileError {
	return &ProfileError{Subject: cert.Subject.CommonName, Reason: fmt.Sprintf(format, args...)}
}

// reissue is the advice for a journal CA that the ceremony did not make as
// it makes them.
const reissue = "have the ceremony sign this journal's CA again (pact ca sign-journal, docs/ceremony.md); a certificate like this one was not made by pact, so find out which root key signed it"

// claimsJournalCA reports whether cert's subject names it a journal CA,
// whatever else it says: such a certificate is held to the journal CA's
// profile, and is never taken as an intermediate of any other kind.
func claimsJournalCA(cert *x509.Certificate) bool {
	return strings.HasPrefix(cert.Subject.CommonName, journalCANPrefix)
}

// CheckJournalCAProfile checks that cert has the profile of a journal CA of
// domain, as JournalCA and Constrain make one and nothing wider, without
// knowing the journal's names (every verifier of a chain can run it):
//
//   - subject "pact journal CA ID@DOMAIN", ID a journal id;
//   - a CA certificate with keyCertSign, path length exactly 1;
//   - critical name constraints that permit the SPIFFE IDs of domain only
//     (URI domain domain permitted, its subdomains excluded), no e-mail
//     address, at least one DNS name, each a host name that is neither the
//     trust domain, a parent of it, nor a parent of another permitted name,
//     and IP addresses either host by host (/32, /128) or none at all (every
//     range of both families excluded).
//
// An error is a *ProfileError (ErrProfile) saying what to do.
func CheckJournalCAProfile(cert *x509.Certificate, domain string) error {
	if cert == nil {
		return &ProfileError{Reason: "no journal CA certificate"}
	}
	rest, found := strings.CutPrefix(cert.Subject.CommonName, journalCANPrefix)
	id, dom, cut := strings.Cut(rest, "@")
	switch {
	case !found || !cut || pki.ValidateName("journal id", id) != nil:
		return profileErr(cert, "%q is not a journal CA: a journal CA's subject is %q; %s", cert.Subject.CommonName, journalCANPrefix+"ID@"+domain, reissue)
	case dom != domain:
		return profileErr(cert, "journal CA %s is of domain %q, not %q: give this journal a journal CA of its own domain (pact ca sign-journal with this domain's root)", id, dom, domain)
	case !cert.BasicConstraintsValid || !cert.IsCA:
		return profileErr(cert, "journal CA %s is not a CA certificate (basic constraints CA:true); %s", id, reissue)
	case cert.KeyUsage&x509.KeyUsageCertSign == 0:
		return profileErr(cert, "journal CA %s may not sign certificates (no keyCertSign); %s", id, reissue)
	}
	if why := pathLenOne(cert); why != "" {
		return profileErr(cert, "journal CA %s has %s, a journal CA has path length 1 (one CA below it: its journal's intermediate); %s", id, why, reissue)
	}
	if why := journalCAConstraints(cert, domain); why != "" {
		return profileErr(cert, "journal CA %s %s; %s", id, why, reissue)
	}
	return nil
}

// pathLenOne says how cert's path length differs from 1, or "".
func pathLenOne(cert *x509.Certificate) string {
	switch {
	case cert.MaxPathLen == 1 && !cert.MaxPathLenZero:
		return ""
	case cert.MaxPathLen == 0 && cert.MaxPathLenZero:
		return "path length 0 (it could sign no intermediate)"
	case cert.MaxPathLen <= 0:
		return "no path length limit (any number of CAs below it)"
	}
	return fmt.Sprintf("path length %d (CAs below its journal's intermediate)", cert.MaxPathLen)
}

// pathLenZero reports whether cert is a CA that may sign no CA: path
// length 0, present.
func pathLenZero(cert *x509.Certificate) bool {
	return cert.BasicConstraintsValid && cert.IsCA && cert.MaxPathLen == 0 && cert.MaxPathLenZero
}

// journalCAConstraints says how cert's name constraints are wider than
// Constrain makes them for domain, or "".
func journalCAConstraints(cert *x509.Certificate, domain string) string {
	if len(cert.PermittedDNSDomains)+len(cert.ExcludedDNSDomains)+len(cert.PermittedIPRanges)+len(cert.ExcludedIPRanges)+
		len(cert.PermittedEmailAddresses)+len(cert.ExcludedEmailAddresses)+len(cert.PermittedURIDomains)+len(cert.ExcludedURIDomains) == 0 {
		return "carries no name constraints (it could vouch for any name)"
	}
	if !cert.PermittedDNSDomainsCritical {
		return "carries name constraints that are not critical (a verifier that does not know them would ignore them)"
	}
	if len(cert.PermittedURIDomains) != 1 || !strings.EqualFold(cert.PermittedURIDomains[0], domain) {
		return fmt.Sprintf("permits URIs of %s, not the SPIFFE IDs of %s alone", describeList(cert.PermittedURIDomains, "every domain"), domain)
	}
	if !slices.ContainsFunc(cert.ExcludedURIDomains, func(d string) bool { return strings.EqualFold(d, "."+domain) }) {
		return fmt.Sprintf("permits URIs of the subdomains of %s (other trust domains): it must exclude %q", domain, "."+domain)
	}
	if len(cert.PermittedEmailAddresses) > 0 || !slices.Contains(cert.ExcludedEmailAddresses, "") {
		return "permits e-mail addresses"
	}
	if len(cert.PermittedDNSDomains) == 0 {
		return "permits no DNS name (a journal CA permits at least its journal's id, which the journal serves as)"
	}
	if n := len(cert.PermittedDNSDomains) + len(cert.PermittedIPRanges); n > maxJournalCANames {
		return fmt.Sprintf("permits %d names; a journal CA permits at most %d", n, maxJournalCANames)
	}
	for _, c := range cert.PermittedDNSDomains {
		if !hostName(c) {
			return fmt.Sprintf("permits the DNS constraint %q, which is not a host name (a journal CA permits its journal's host names, like j1.site.example)", c)
		}
		lc := strings.ToLower(c)
		if d := strings.ToLower(domain); d == lc || strings.HasSuffix(d, "."+lc) {
			return fmt.Sprintf("permits the DNS constraint %q, every host under the trust domain %s, not one journal's names", c, domain)
		}
		for _, other := range cert.PermittedDNSDomains {
			if strings.HasSuffix(strings.ToLower(other), "."+lc) {
				return fmt.Sprintf("permits the DNS constraint %q, a parent of %q: every host under it, not one journal's names", c, other)
			}
		}
	}
	if len(cert.PermittedIPRanges) == 0 {
		if !excludesEveryIP(cert.ExcludedIPRanges) {
			return "permits IP addresses without naming them (no permitted address, and not every address excluded)"
		}
		return ""
	}
	for _, r := range cert.PermittedIPRanges {
		if !hostRange(r) {
			return fmt.Sprintf("permits the IP range %v, wider than one address (a journal CA permits its journal's addresses one by one: /32, /128)", r)
		}
	}
	return ""
}

// hostName reports whether c is a host name as a name constraint: dot-
// separated labels of letters, digits and '-', no empty label (so no
// leading period, which would mean "subdomains only"), no wildcard.
func hostName(c string) bool {
	if c == "" || len(c) > 253 {
		return false
	}
	for _, l := range strings.Split(c, ".") {
		if l == "" || len(l) > 63 || l[0] == '-' || l[len(l)-1] == '-' {
			return false
		}
		for _, ch := range l {
			if !(ch >= 'a' && ch <= 'z' || ch >= 'A' && ch <= 'Z' || ch >= '0' && ch <= '9' || ch == '-') {
				return false
			}
		}
	}
	return true
}

// hostRange reports whether r holds exactly one address.
func hostRange(r *net.IPNet) bool {
	if r == nil {
		return false
	}
	ones, bits := r.Mask.Size()
	return bits == 8*len(r.IP) && ones == bits && (bits == 32 || bits == 128)
}

// excludesEveryIP reports whether ranges exclude every IPv4 and every IPv6
// address, as Constrain does for a journal with no address.
func excludesEveryIP(ranges []*net.IPNet) bool {
	var v4, v6 bool
	for _, r := range ranges {
		if r == nil {
			continue
		}
		ones, bits := r.Mask.Size()
		if ones != 0 || bits != 8*len(r.IP) {
			continue
		}
		v4 = v4 || bits == 32
		v6 = v6 || bits == 128
	}
	return v4 && v6
}

func describeList(l []string, none string) string {
	if len(l) == 0 {
		return none
	}
	return strings.Join(l, ", ")
}

// CheckJournalCANames checks that a journal CA permits no name beyond those
// of the journal it serves: each permitted DNS constraint is journalID or
// one of dnsNames (the names the journal serves under: its --listen host,
// --server-names, and the names it adds on its own where the journal CA
// permits them), and each permitted IP range is one of ips. A journal runs
// it at start and at each re-read of its journal CA, before it signs
// anything; CheckJournalCAProfile bounds what it does not see. An error is
// a *ProfileError (ErrProfile) naming every name too many.
func CheckJournalCANames(cert *x509.Certificate, journalID string, dnsNames []string, ips []net.IP) error {
	var extra []string
	for _, c := range cert.PermittedDNSDomains {
		if !strings.EqualFold(c, journalID) && !slices.ContainsFunc(dnsNames, func(n string) bool { return strings.EqualFold(n, c) }) {
			extra = append(extra, c)
		}
	}
	for _, r := range cert.PermittedIPRanges {
		if !hostRange(r) || !slices.ContainsFunc(ips, r.IP.Equal) {
			extra = append(extra, r.String())
		}
	}
	if len(extra) == 0 {
		return nil
	}
	ours := []string{journalID}
	for _, n := range dnsNames {
		if !slices.ContainsFunc(ours, func(o string) bool { return strings.EqualFold(o, n) }) {
			ours = append(ours, n)
		}
	}
	for _, ip := range ips {
		ours = append(ours, ip.String())
	}
	return profileErr(cert, "the journal CA permits %s, which journal %s does not serve under (it serves as %s): a journal CA permits its own journal's names only; have the ceremony sign it again with --names naming only these (pact ca sign-journal), or, if this journal does serve under them, give them with --server-names",
		strings.Join(extra, ", "), journalID, strings.Join(ours, ", "))
}
