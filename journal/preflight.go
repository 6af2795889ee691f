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
	"strconv"

	"github.com/spiffe/go-spiffe/v2/bundle/x509bundle"
	"github.com/spiffe/go-spiffe/v2/spiffeid"
	"golang.org/x/sys/unix"

	"github.com/pact-hpc/pact/internal/pki"
	"github.com/pact-hpc/pact/journal/ca"
	"github.com/pact-hpc/pact/journal/raftnode"
)

// productionRoot says how a production journal gets its root. A journal
// that is not --dev never suggests --dev: a development root would start,
// and be a domain of its own that no agent of the site trusts.
const productionRoot = `a production journal runs with its site's domain root: make it once, on a secure host, with pact-journal init --dir DIR --domain DOMAIN, copy ca.pem and ca-key.pem (mode 0600, owned by the journal's user) to every journal host, and point --root-cert and --root-key at them (docs/quorum.md, "Forming a quorum on real hosts")`

// Preflight reports every problem a start (NewContext, then Start) would meet in
// what c names on disk, at once (errors.Join), each saying what to do. It
// creates, locks and writes nothing, so it may run beside a journal that
// is serving:
//
//   - the root certificate and key exist, are readable by this user,
//     parse, belong together, and the key is readable by its owner alone
//     (mode 0600 or stricter); with Dev, a root not yet made is fine;
//   - the data directory is a writable directory, or can be created; it
//     does not hold a REMOVED marker (ErrRemoved); its raft.db is not
//     locked by a running pact-journal (ErrDataDirInUse: a restart stops
//     that journal first, so a caller checking before a restart may
//     report it as a note);
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
	if !devRootDue || c.RootCertFile != "" || c.RootKeyFile != "" {
		var rootErr error
		domain, rootErr = checkRootFiles(c.rootCertFile(), c.rootKeyFile(), c.Dev)
		add(rootErr)
	}
	if c.SPIREBundleFile != "" {
		add(checkSPIREBundle(c.SPIREBundleFile, c.SPIRETrustDomain, domain))
	}
	if c.AuditLog != "" && c.AuditLog != "-" {
		add(checkAppendable("--audit-log", c.AuditLog))
	}
	return errors.Join(errs...)
}

// checkRootFiles checks what ca.LoadKeyFileAuthority will load, reporting
// every problem, and returns the root's domain when it has one.
func checkRootFiles(certPath, keyPath string, dev bool) (string, error) {
	var errs []error
	missing := func(what, path, flag string, err error) error {
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
	_, certErr := os.Stat(certPath)
	_, keyErr := os.Stat(keyPath)
	if !dev && errors.Is(certErr, fs.ErrNotExist) && errors.Is(keyErr, fs.ErrNotExist) {
		return "", fmt.Errorf("journal: the domain root is missing: neither the root certificate %s nor the root key %s exists; %s", certPath, keyPath, productionRoot)
	}
	var root *x509.Certificate
	domain := ""
	if data, err := os.ReadFile(certPath); err != nil {
		errs = append(errs, missing("root certificate", certPath, "--root-cert", err))
	} else if certs, err := pki.ParseCertsPEM(data); err != nil || len(certs) == 0 {
		errs = append(errs, fmt.Errorf("journal: root certificate %s holds no PEM certificate (%v); give --root-cert the ca.pem pact-journal init made", certPath, err))
	} else if d, err := ca.DomainOf(certs[0]); err != nil || !certs[0].IsCA {
		errs = append(errs, fmt.Errorf("journal: %s is not a pact domain root (a CA certificate naming a spiffe:// trust domain); give --root-cert the ca.pem pact-journal init made", certPath))
	} else {
		root, domain = certs[0], d
	}
	if st, err := os.Stat(keyPath); err != nil {
		errs = append(errs, missing("root key", keyPath, "--root-key", err))
	} else {
		if !st.Mode().IsRegular() {
			errs = append(errs, fmt.Errorf("journal: root key %s is not a regular file; point --root-key at the ca-key.pem pact-journal init made", keyPath))
		} else if perm := st.Mode().Perm(); perm&0o077 != 0 {
			errs = append(errs, fmt.Errorf("journal: root key %s has mode %04o, readable by group or others; run: chmod 600 %s (and chown it to the journal's user)", keyPath, perm, keyPath))
		}
		if key, err := ca.ReadKeyFile(keyPath); err != nil {
			if errors.Is(err, fs.ErrPermission) {
				errs = append(errs, fmt.Errorf("journal: root key %s cannot be read by this user (uid %d): chown it to the journal's user, mode 0600", keyPath, os.Getuid()))
			} else {
				errs = append(errs, fmt.Errorf("journal: root key %s: %w; point --root-key at the ca-key.pem made with the root", keyPath, err))
			}
		} else if root != nil {
			if pub, ok := key.Public().(interface{ Equal(crypto.PublicKey) bool }); !ok || !pub.Equal(root.PublicKey) {
				errs = append(errs, fmt.Errorf("journal: root key %s does not belong to root certificate %s; give the key pact-journal init made with that certificate (both from the same --dir)", keyPath, certPath))
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
