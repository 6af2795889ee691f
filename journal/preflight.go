package journal

import (
	"crypto"
	"crypto/x509"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spiffe/go-spiffe/v2/bundle/x509bundle"
	"github.com/spiffe/go-spiffe/v2/spiffeid"
	"golang.org/x/sys/unix"

	"github.com/pact-hpc/pact/internal/caprofile"
	"github.com/pact-hpc/pact/internal/keystore"
	"github.com/pact-hpc/pact/internal/pki"
	"github.com/pact-hpc/pact/journal/ca"
	"github.com/pact-hpc/pact/journal/raftnode"
)

// productionRoot says how a production journal gets its root. A journal
// that is not --dev never suggests --dev: a development root would start,
// and be a domain of its own that no agent of the site trusts.
const productionRoot = `a production journal runs with its site's domain root certificate and a journal CA of its own: make the root once, offline, with pact ca init; on this host make the journal CA's key and its CSR with pact-journal ca-request, have the ceremony sign it (pact ca sign-journal), and point --root-cert, --journal-ca-cert and --journal-ca-key at them (docs/ceremony.md)`

// Preflight reports every problem a start (NewContext, then Start) would meet in
// what c names on disk, at once (errors.Join), each saying what to do. It
// creates, locks and writes nothing, so it may run beside a journal that
// is serving:
//
//   - the root certificate holds one domain root, or two of one domain;
//   - the journal CA certificate and key exist, are readable by this user
//     (a file key by its owner alone), belong together, and the journal CA
//     fits this journal (caprofile.CheckJournalCA: signed by a root, for
//     this journal id, of a journal CA's profile, valid now, permitting
//     every name it serves under; caprofile.CheckJournalCANames: and no
//     name it does not serve under);
//     --dev's own journal CA is --dev's to make;
//   - in the legacy layout, the root key instead: it exists, parses,
//     belongs to a root, and is readable by its owner alone (mode 0600 or
//     stricter); with Dev, a root not yet made is fine;
//   - the data directory is a writable directory, or can be created; it
//     does not hold a REMOVED marker (ErrRemoved); its raft.db is not
//     locked by a running pact-journal (ErrDataDirInUse: a restart stops
//     that journal first, so a caller checking before a restart may
//     report it as a note);
//   - the --listen and --advertise hosts are names the server certificate
//     will carry (ErrNameNotInCertificate: a start goes on, but clients
//     dialing them fail the handshake, so a caller may report it as a
//     warning);
//   - the SPIRE bundle file parses, and the audit log can be appended to.
//
// Settings that need no disk (addresses, durations) are Validate's.
// Checks of readability answer for the user that runs Preflight.
func (c Config) Preflight() error {
	var errs []error
	add := func(err error) {
		if err != nil {
			errs = append(errs, err)
		}
	}
	if c.DataDir != "" {
		add(checkDataDir(c.DataDir))
	}
	domain := ""
	devRootDue := false
	if c.Dev && c.DataDir != "" {
		_, err := os.Stat(filepath.Join(c.DataDir, ca.RootCertFile))
		devRootDue = errors.Is(err, fs.ErrNotExist)
	}
	switch {
	case c.legacyLayout():
		if !devRootDue || c.RootCertFile != "" || c.RootKeyFile != "" {
			var rootErr error
			domain, rootErr = checkRootFiles(c.rootCertFile(), c.rootKeyFile(), c.Dev, !c.Dev && c.RootKeyFile == "")
			add(rootErr)
		}
	case !devRootDue || c.RootCertFile != "":
		roots, d, err := checkRootCerts(c.rootCertFile(), c.Dev)
		add(err)
		domain = d
		if roots != nil && !c.devJournalCA() {
			add(c.checkJournalCA(roots, domain))
		}
	}
	if !c.devJournalCA() {
		add(c.checkDialNames())
	}
	if c.SPIREBundleFile != "" {
		add(checkSPIREBundle(c.SPIREBundleFile, c.SPIRETrustDomain, domain))
	}
	if c.AuditLog != "" && c.AuditLog != "-" {
		add(checkAppendable("--audit-log", c.AuditLog))
	}
	return errors.Join(errs...)
}

// ErrNameNotInCertificate: a name clients dial this journal by (its
// --listen or --advertise address) cannot be in its server certificate,
// because its journal CA does not permit it (or, for a host name, it is
// not among --server-names). The journal starts, but a client dialing
// that name fails the TLS handshake: --check-config reports it as a
// warning, not a problem.
var ErrNameNotInCertificate = errors.New("journal: a name clients dial is not in the server certificate")

// checkDialNames reports (ErrNameNotInCertificate) the --listen and
// --advertise hosts the server certificate would not carry.
func (c Config) checkDialNames() error {
	var journalCA *x509.Certificate
	if !c.legacyLayout() {
		data, err := os.ReadFile(c.journalCACertFile())
		if err != nil {
			return nil // checkJournalCA reports it
		}
		certs, err := pki.ParseCertsPEM(data)
		if err != nil || len(certs) == 0 {
			return nil
		}
		journalCA = certs[0]
	}
	dnsNames, ips, _ := ServerNamesUnder(journalCA, c.ListenAddr, c.ServerNames)
	var errs []error
	for _, a := range []struct{ flag, addr string }{{"--listen", c.ListenAddr}, {"--advertise", c.AdvertiseGRPC}} {
		host, _, err := net.SplitHostPort(a.addr)
		if err != nil || host == "" {
			continue
		}
		ip := net.ParseIP(host)
		switch {
		case ip != nil && ip.IsUnspecified():
		case ip != nil && !slices.ContainsFunc(ips, ip.Equal):
			errs = append(errs, fmt.Errorf("%w: %s %s: the journal CA %s does not permit the address %s, so the server certificate leaves it out and the pact CLI, agents and journals that dial %s fail the TLS handshake; have the ceremony sign a journal CA whose names include it (pact ca sign-journal --names ...,%s), or %s an address it permits",
				ErrNameNotInCertificate, a.flag, a.addr, c.journalCACertFile(), host, a.addr, host, listenOrAdvertise(a.flag)))
		case ip == nil && !slices.ContainsFunc(dnsNames, func(n string) bool { return strings.EqualFold(n, host) }):
			hint := "add it to --server-names"
			if journalCA != nil {
				hint = "add it to --server-names, and have the journal CA permit it (pact ca sign-journal --names)"
			}
			errs = append(errs, fmt.Errorf("%w: %s %s: the server certificate leaves out %s, so the pact CLI, agents and journals that dial %s fail the TLS handshake; %s, or %s a name it carries",
				ErrNameNotInCertificate, a.flag, a.addr, host, a.addr, hint, listenOrAdvertise(a.flag)))
		}
	}
	return errors.Join(errs...)
}

func listenOrAdvertise(flag string) string {
	if flag == "--listen" {
		return "listen on"
	}
	return "advertise"
}

// missingFile says what to do about a file a journal needs that cannot
// be read.
func missingFile(what, path, flag string, dev bool, err error) error {
	if !errors.Is(err, fs.ErrNotExist) {
		var pe *fs.PathError
		if errors.As(err, &pe) {
			err = pe.Err
		}
		return fmt.Errorf("journal: %s %s cannot be read by this user (uid %d): %w; make it readable by the journal's user, or point %s at another file", what, path, os.Getuid(), err, flag)
	}
	if dev {
		return fmt.Errorf("journal: %s %s does not exist; remove --%s to have --dev make a development root in --data-dir, or give an existing file", what, path, flag[2:])
	}
	return fmt.Errorf("journal: %s %s does not exist: %s", what, path, productionRoot)
}

// checkRootCerts checks --root-cert: one domain root, or two of one
// domain. It returns them and their domain when they are usable.
func checkRootCerts(certPath string, dev bool) ([]*x509.Certificate, string, error) {
	data, err := os.ReadFile(certPath)
	if err != nil {
		return nil, "", missingFile("root certificate", certPath, "--root-cert", dev, err)
	}
	certs, err := pki.ParseCertsPEM(data)
	if err != nil || len(certs) == 0 {
		return nil, "", fmt.Errorf("journal: root certificate %s holds no PEM certificate (%v); give --root-cert the ca.pem pact ca init made", certPath, err)
	}
	for _, c := range certs {
		if _, err := ca.DomainOf(c); err != nil || !c.IsCA {
			return nil, "", fmt.Errorf("journal: %s is not a pact domain root (a CA certificate naming a spiffe:// trust domain); give --root-cert the ca.pem pact ca init made", certPath)
		}
	}
	domain, err := ca.CheckRoots(certs)
	if err != nil {
		return nil, "", fmt.Errorf("journal: --root-cert %s: %w", certPath, err)
	}
	return certs, domain, nil
}

// checkJournalCA checks what the journal will sign its intermediates
// with: the journal CA certificate and its key, and that the journal CA
// fits this journal.
func (c Config) checkJournalCA(roots []*x509.Certificate, domain string) error {
	certPath := c.journalCACertFile()
	var errs []error
	var cert *x509.Certificate
	if data, err := os.ReadFile(certPath); err != nil {
		errs = append(errs, missingFile("journal CA certificate", certPath, "--journal-ca-cert", false, err))
	} else if certs, err := pki.ParseCertsPEM(data); err != nil || len(certs) == 0 {
		errs = append(errs, fmt.Errorf("journal: journal CA certificate %s holds no PEM certificate (%v); give --journal-ca-cert the certificate pact ca sign-journal wrote", certPath, err))
	} else {
		cert = certs[0]
	}
	spec, ok := c.journalCAKey()
	switch {
	case !ok:
		errs = append(errs, errors.New("journal: --journal-ca-key is required with --journal-ca-cert: where this journal's journal CA key is (tpm:PATH, a pkcs11: URI or file:PATH; docs/ceremony.md)"))
	default:
		key, err := keystore.Open(spec, keystore.Options{TPMDevice: c.TPMDevice, TPMTimeout: c.TPMTimeout})
		if err != nil {
			errs = append(errs, fmt.Errorf("journal: --journal-ca-key %s: %w", spec, err))
			break
		}
		if cert != nil {
			if pub, ok := key.Public().(interface{ Equal(crypto.PublicKey) bool }); !ok || !pub.Equal(cert.PublicKey) {
				errs = append(errs, fmt.Errorf("journal: --journal-ca-key %s is not the key of journal CA certificate %s: give the key its CSR was made with (pact-journal ca-request), or have the ceremony sign this key's CSR", spec, certPath))
			}
		}
		_ = key.Close()
	}
	if cert != nil && domain != "" {
		now := time.Now()
		if c.Clock != nil {
			now = c.Clock.Now()
		}
		dnsNames, ips, _ := ServerNamesUnder(cert, c.ListenAddr, c.ServerNames)
		if err := caprofile.CheckJournalCA(cert, roots, c.NodeID, domain, dnsNames, ips, now); err != nil {
			errs = append(errs, fmt.Errorf("journal: --journal-ca-cert %s: %w", certPath, err))
		} else if err := caprofile.CheckJournalCANames(cert, c.NodeID, dnsNames, ips); err != nil {
			errs = append(errs, fmt.Errorf("journal: --journal-ca-cert %s: %w", certPath, err))
		}
	}
	return errors.Join(errs...)
}

// checkRootFiles checks the root certificate and the root key of the
// legacy layout, reporting every problem, and returns the roots' domain
// when they have one. implicit: the key was not given (--root-key), only
// its default looked for.
func checkRootFiles(certPath, keyPath string, dev, implicit bool) (string, error) {
	var errs []error
	_, certErr := os.Stat(certPath)
	_, keyErr := os.Stat(keyPath)
	if !dev && errors.Is(certErr, fs.ErrNotExist) && errors.Is(keyErr, fs.ErrNotExist) {
		return "", fmt.Errorf("journal: the domain root is missing: neither the root certificate %s nor the root key %s exists; %s", certPath, keyPath, productionRoot)
	}
	if implicit && errors.Is(keyErr, fs.ErrNotExist) {
		errs = append(errs, fmt.Errorf("journal: no journal CA key given (--journal-ca-key), and no domain root key at %s for the legacy layout: %s", keyPath, productionRoot))
		_, domain, err := checkRootCerts(certPath, dev)
		return domain, errors.Join(append(errs, err)...)
	}
	roots, domain, err := checkRootCerts(certPath, dev)
	if err != nil {
		errs = append(errs, err)
	}
	if st, err := os.Stat(keyPath); err != nil {
		errs = append(errs, missingFile("root key", keyPath, "--root-key", dev, err))
	} else {
		if !st.Mode().IsRegular() {
			errs = append(errs, fmt.Errorf("journal: root key %s is not a regular file; point --root-key at the ca-key.pem made with the root", keyPath))
		} else if perm := st.Mode().Perm(); perm&0o077 != 0 {
			errs = append(errs, fmt.Errorf("journal: root key %s has mode %04o, readable by group or others; run: chmod 600 %s (and chown it to the journal's user)", keyPath, perm, keyPath))
		}
		if key, err := ca.ReadKeyFile(keyPath); err != nil {
			if errors.Is(err, fs.ErrPermission) {
				errs = append(errs, fmt.Errorf("journal: root key %s cannot be read by this user (uid %d): chown it to the journal's user, mode 0600", keyPath, os.Getuid()))
			} else {
				errs = append(errs, fmt.Errorf("journal: root key %s: %w; point --root-key at the ca-key.pem made with the root", keyPath, err))
			}
		} else if roots != nil {
			pub, ok := key.Public().(interface{ Equal(crypto.PublicKey) bool })
			belongs := false
			for _, r := range roots {
				belongs = belongs || (ok && pub.Equal(r.PublicKey))
			}
			if !belongs {
				errs = append(errs, fmt.Errorf("journal: root key %s does not belong to root certificate %s; give the key made with that certificate (both from the same --dir)", keyPath, certPath))
			}
		}
	}
	return domain, errors.Join(errs...)
}

// checkDataDir checks that dir is, or can be made, a writable directory
// of a journal that was not removed and that no running journal holds.
func checkDataDir(dir string) error {
	st, err := os.Stat(dir)
	if errors.Is(err, fs.ErrNotExist) || errors.Is(err, unix.ENOTDIR) {
		// The journal makes it (MkdirAll): the nearest existing parent
		// must let this user create entries.
		parent := filepath.Dir(dir)
		for {
			pst, perr := os.Stat(parent)
			if perr == nil {
				if !pst.IsDir() {
					return fmt.Errorf("journal: data directory %s cannot be created: %s is not a directory; choose another --data-dir", dir, parent)
				}
				if unix.Access(parent, unix.W_OK|unix.X_OK) != nil {
					return fmt.Errorf("journal: data directory %s does not exist and cannot be created by this user (uid %d): %s is not writable; create it owned by the journal's user, mode 0700, or choose another --data-dir (under the packaged unit systemd creates /var/lib/pact-journal at start: StateDirectory=)", dir, os.Getuid(), parent)
				}
				return nil
			}
			if next := filepath.Dir(parent); next != parent {
				parent = next
				continue
			}
			return fmt.Errorf("journal: data directory %s: %w", dir, perr)
		}
	}
	if err != nil {
		return fmt.Errorf("journal: data directory %s: %w; make it reachable by the journal's user, or choose another --data-dir", dir, err)
	}
	if !st.IsDir() {
		return fmt.Errorf("journal: data directory %s is not a directory; choose another --data-dir", dir)
	}
	if unix.Access(dir, unix.W_OK|unix.X_OK) != nil {
		return fmt.Errorf("journal: data directory %s is not writable by this user (uid %d); chown it to the journal's user, mode 0700, or choose another --data-dir", dir, os.Getuid())
	}
	var errs []error
	if err := raftnode.CheckRemovedMarker(dir); err != nil {
		errs = append(errs, fmt.Errorf("%w; this data directory must not be started again: empty it and add the journal anew (--join, then pact journal add), docs/quorum.md", err))
	}
	if err := raftDBLocked(filepath.Join(dir, "raft.db")); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// raftDBLocked reports whether a running pact-journal holds raft.db: bbolt
// keeps an exclusive flock on it while open, so a shared one, tried
// without waiting and dropped at once, fails exactly then.
func raftDBLocked(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return nil // absent: a first start; unreadable: the start says so
	}
	defer f.Close()
	err = unix.Flock(int(f.Fd()), unix.LOCK_SH|unix.LOCK_NB)
	if errors.Is(err, unix.EWOULDBLOCK) {
		return fmt.Errorf("%w by a running pact-journal: %s is locked; a start now would fail until that journal stops (systemctl restart stops it first)", ErrDataDirInUse, path)
	}
	if err == nil {
		_ = unix.Flock(int(f.Fd()), unix.LOCK_UN)
	}
	return nil
}

// checkSPIREBundle loads the bundle file as the journal does at start.
func checkSPIREBundle(path, tdName, domain string) error {
	if tdName == "" {
		tdName = domain
	}
	td, err := spiffeid.TrustDomainFromString(tdName)
	if err != nil {
		// Validate reports a bad --spire-trust-domain; a root not found
		// is reported above. The file is still read.
		td = spiffeid.RequireTrustDomainFromString("unknown.invalid")
	}
	b, err := x509bundle.Load(td, path)
	switch {
	case err != nil:
		return fmt.Errorf("journal: --spire-bundle: %w; write the PEM X.509 bundle there (spire-server bundle show), readable by the journal's user (docs/spire.md)", err)
	case b.Empty():
		return fmt.Errorf("journal: --spire-bundle %s holds no certificate; write the PEM X.509 bundle there (spire-server bundle show)", path)
	}
	return nil
}

// checkAppendable checks that the journal can open path to append, as it
// will (O_CREATE|O_APPEND), without creating it.
func checkAppendable(flag, path string) error {
	st, err := os.Stat(path)
	switch {
	case err == nil && st.IsDir():
		return fmt.Errorf("journal: %s %s is a directory; name a file", flag, path)
	case err == nil:
		if unix.Access(path, unix.W_OK) != nil {
			return fmt.Errorf("journal: %s %s is not writable by this user (uid %d); chown it to the journal's user", flag, path, os.Getuid())
		}
		return nil
	case errors.Is(err, fs.ErrNotExist):
		dir := filepath.Dir(path)
		if unix.Access(dir, unix.W_OK|unix.X_OK) != nil {
			return fmt.Errorf("journal: %s %s cannot be created: %s does not exist or is not writable by this user (uid %d); create the directory for the journal's user, or name another file", flag, path, dir, os.Getuid())
		}
		return nil
	default:
		return fmt.Errorf("journal: %s %s: %w", flag, path, err)
	}
}

// checkAddr checks a host:port setting as the listener or a dialer will
// read it: a port number (or service name) within 0-65535. An address
// others dial (dialed) needs a host and a port other than 0.
func checkAddr(setting, addr string, dialed bool) error {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("journal: %s %q: %w; write it as host:port, e.g. 10.0.0.1:7443 or [fd00::1]:7443", setting, addr, err)
	}
	n, err := net.LookupPort("tcp", port)
	if err != nil {
		return fmt.Errorf("journal: %s %q: port %q is not a port number (0-65535)", setting, addr, port)
	}
	if dialed && (host == "" || n == 0) {
		return fmt.Errorf("journal: %s %q: other journals dial it, so it needs a host and a port other than 0, e.g. 10.0.0.1:%s", setting, addr, strconv.Itoa(max(n, 7443)))
	}
	return nil
}
