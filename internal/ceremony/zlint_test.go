package ceremony

import (
	"sort"
	"testing"
	"time"

	zx509 "github.com/zmap/zcrypto/x509"
	"github.com/zmap/zlint/v3"
	"github.com/zmap/zlint/v3/lint"

	"github.com/pact-hpc/pact/internal/pki"
)

// The ceremony's certificates pass zlint's RFC lints, as journal/ca's do
// (its zlint_test.go says why only the IETF sources bind a private PKI):
// no error, no fatal, no warning.
func TestCeremonyCertificatesPassZlint(t *testing.T) {
	reg, err := lint.GlobalRegistry().Filter(lint.FilterOptions{IncludeSources: lint.SourceList{
		lint.RFC3279, lint.RFC5280, lint.RFC5480, lint.RFC5891, lint.RFC6960, lint.RFC6962, lint.RFC8813,
	}})
	if err != nil {
		t.Fatal(err)
	}
	_, root, key := newRoot(t, 0)
	named, _, _ := signJournal(t, root, key, "j1", "j1.site.example", "localhost", "10.0.0.1", "fd00::1")
	addrOnly, _, _ := signJournal(t, root, key, "j2", "10.0.0.2")
	_, _, admin, err := IssueAdmin(root, key, "alice", pki.RolePlatformAdmin, 7*24*time.Hour, now)
	if err != nil {
		t.Fatal(err)
	}
	for name, cert := range map[string]*zx509.Certificate{"root": zparse(t, root.Raw), "journal CA": zparse(t, named.Raw), "journal CA, its id and an address": zparse(t, addrOnly.Raw), "admin": zparse(t, admin.Raw)} {
		rs := zlint.LintCertificateEx(cert, reg)
		var lints []string
		for l := range rs.Results {
			lints = append(lints, l)
		}
		sort.Strings(lints)
		ran := 0
		for _, l := range lints {
			switch r := rs.Results[l]; r.Status {
			case lint.Error, lint.Fatal, lint.Warn:
				t.Errorf("%s: %s: %s %s", name, r.Status, l, r.Details)
			case lint.NA, lint.NE:
			default:
				ran++
			}
		}
		if ran == 0 {
			t.Errorf("%s: no lint applied", name)
		}
	}
}

func zparse(t *testing.T, der []byte) *zx509.Certificate {
	t.Helper()
	c, err := zx509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return c
}
