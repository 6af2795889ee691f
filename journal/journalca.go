package journal

import (
	"log/slog"
	"net"
	"path/filepath"
	"time"

	"github.com/pact-hpc/pact/internal/logkey"
	"github.com/pact-hpc/pact/internal/pki"
	"github.com/pact-hpc/pact/journal/ca"
)

// The journal's CA layout (issue 23): the domain root is offline; each
// journal holds a journal CA (its key in the host's TPM, a token or a 0600
// file) that signs nothing but this journal's in-memory intermediates.

// legacyLayoutWarning is logged once at start by a journal that signs its
// intermediates with the domain root key (--root-key).
const legacyLayoutWarning = "the domain root key is on this journal host; move it offline: docs/migration.md"

// journalCAExpiryWarning is how long before its journal CA expires a
// journal warns, at start and at each re-key: time enough for the renewal
// ceremony (docs/ceremony.md).
const journalCAExpiryWarning = 30 * 24 * time.Hour

// devSetUp makes the development set-up of a --dev journal in its data
// directory: a domain root and an admin credential (once; the credential
// renewed when it nears its end), and a journal CA for this journal and
// the names it serves under, made again whenever it no longer fits them.
// The root key stays in the data directory: development only.
func devSetUp(cfg Config, log *slog.Logger, dnsNames []string, ips []net.IP) error {
	now := cfg.Clock.Now()
	created, err := ca.InitDev(cfg.DataDir, cfg.Domain, now)
	if err != nil {
		return err
	}
	if created {
		log.Info("created a development domain root and admin credential",
			logkey.Root, filepath.Join(cfg.DataDir, ca.RootCertFile),
			logkey.AdminCert, filepath.Join(cfg.DataDir, ca.AdminCertFile))
	} else if renewed, err := ca.RenewDevAdmin(cfg.DataDir, now); err != nil {
		return err
	} else if renewed {
		log.Info("renewed the development admin credential, which expired within a day",
			logkey.AdminCert, filepath.Join(cfg.DataDir, ca.AdminCertFile))
	}
	if !cfg.devJournalCA() {
		return nil
	}
	made, err := ca.DevJournalCA(cfg.DataDir, cfg.journalCACertFile(), cfg.devJournalCAKeyFile(), cfg.NodeID, dnsNames, ips, now)
	if err != nil {
		return err
	}
	if made {
		log.Info("made a development journal CA for this journal from the development root",
			logkey.File, cfg.journalCACertFile())
	}
	log.Info("this is a development set-up: the domain root key is in the data directory; production journals get a journal CA from an offline root (docs/ceremony.md)",
		logkey.Root, filepath.Join(cfg.DataDir, ca.RootCertFile))
	return nil
}

// warnJournalCAExpiry warns when the journal CA ends within
// journalCAExpiryWarning.
func warnJournalCAExpiry(log *slog.Logger, authority *ca.CA, now time.Time) {
	jc := authority.JournalCA()
	if jc == nil || jc.NotAfter.Sub(now) > journalCAExpiryWarning {
		return
	}
	log.Warn("this journal's journal CA expires within 30 days: renew it (docs/ceremony.md); the journal takes the new certificate at its next re-key, with no restart",
		logkey.Serial, pki.SerialHex(jc.SerialNumber), logkey.NotAfter, jc.NotAfter.UTC().Format(time.RFC3339))
}
