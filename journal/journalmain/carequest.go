package journalmain

import (
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/pact-hpc/pact/internal/ceremony"
	"github.com/pact-hpc/pact/internal/cmdline"
	"github.com/pact-hpc/pact/internal/keystore"
	"github.com/pact-hpc/pact/internal/pki"
	"github.com/pact-hpc/pact/internal/settings"
)

const caRequestUsage = `pact-journal ca-request makes this journal's CA key, if it has none, and a
certificate request for it, to be signed offline by the domain root
(pact ca sign-journal; docs/ceremony.md).

Usage:
  pact-journal ca-request --journal-id ID --key SPEC [--tpm-device DEV] \
      [--tpm-timeout 30s] [--names NAME,IP,...] --out ID.csr

--key is where the journal CA's key lives, the journal's --journal-ca-key:
  tpm:/etc/pact/journal-ca.tpmkey   in this host's TPM (the file holds only a
                                    blob that this TPM alone can load)
  pkcs11:token=...;object=...       in a PKCS#11 token (a binary built with
                                    make build-pkcs11)
  file:/etc/pact/journal-ca-key.pem a 0600 file: the weaker choice
A tpm: key uses the TPM at --tpm-device, /dev/tpmrm0 (the kernel's
resource manager) unless told otherwise: give the journal's own
--tpm-device (its journal.yaml's tpm-device) if it has one. Each TPM
command waits at most --tpm-timeout: a TPM that another program holds
fails with its name, not a hang.
If the key exists it is used as it is: that is a renewal, and the journal
takes the new certificate at its next re-key without a restart. If not, it
is made now. The key never leaves: the request carries its public half.

--names are what you ask the ceremony to permit: every host name and
address this journal serves under: localhost, 127.0.0.1 and ::1, this
host's name (hostname), the hosts of --listen and --raft-listen, its
--server-names, the names agents dial. The ceremony decides them with its
own --names and warns when they differ; a journal CA that lacks one makes
the journal refuse to start, naming it (--check-config shows it first). The printed SPKI SHA-256 is the key's: read it to
whoever signs, who checks that pact ca sign-journal prints the same.

Example (on journal j1's host, as the journal's user):
  pact-journal ca-request --journal-id j1 --key tpm:/etc/pact/journal-ca.tpmkey \
      --names localhost,127.0.0.1,::1,j1,j1.hpc.example.org,10.0.0.1 --out j1.csr

Exit codes: 0 written; 1 the key could not be made or used (a TPM busy or
out of object memory says so, and how to free it); 2 bad flags,
an --out that exists, or a key location refused.

Flags:
`

func caRequestCommand(env settings.Env, stdout, stderr io.Writer) *cobra.Command {
	var r caRequestArgs
	r.tpmTimeout = keystore.DefaultTPMTimeout
	s := settings.New("pact-journal ca-request")
	s.String(&r.journalID, "journal-id", "PACT_NODE_ID", "this journal's id, its --node-id (required)")
	s.String(&r.key, "key", "PACT_JOURNAL_CA_KEY", "where the journal CA's key is or is to be made: tpm:PATH, a pkcs11: URI or file:PATH (required)")
	s.String(&r.tpmDevice, "tpm-device", "PACT_TPM_DEVICE", "the TPM for a tpm: key: a device (default /dev/tpmrm0) or unix:PATH of a software TPM")
	s.Duration(&r.tpmTimeout, "tpm-timeout", "PACT_TPM_TIMEOUT", "how long to wait for the TPM to open and to answer each command before giving up, naming what holds it")
	s.String(&r.label, "pkcs11-label", "PACT_PKCS11_LABEL", "the key's label in the token when the pkcs11: URI names no object")
	s.List(&r.names, "names", "PACT_CA_REQUEST_NAMES", "the host names and addresses to ask the ceremony to permit, comma-separated")
	cmd := cmdline.Command("ca-request", "make this journal's CA key and a request for pact ca sign-journal", caRequestUsage, s, func(cmd *cobra.Command) int {
		if !cmdline.Resolve(cmd, s, env) {
			return 2
		}
		return r.run(stdout, stderr)
	})
	cmd.Flags().StringVar(&r.out, "out", "", "where to write the request, e.g. j1.csr (required; never overwritten)")
	return cmd
}

// caRequestArgs is pact-journal ca-request's command line.
type caRequestArgs struct {
	journalID, key, tpmDevice, label, out string
	tpmTimeout                            time.Duration
	names                                 []string
}

func (r caRequestArgs) run(stdout, stderr io.Writer) int {
	journalID, key, tpmDevice, label, out, tpmTimeout, names := r.journalID, r.key, r.tpmDevice, r.label, r.out, r.tpmTimeout, r.names
	var problems []string
	if journalID == "" {
		problems = append(problems, "--journal-id is required: this journal's --node-id, e.g. j1")
	} else if err := pki.ValidateName("journal id", journalID); err != nil {
		problems = append(problems, fmt.Sprintf("--journal-id: %v", err))
	}
	var spec keystore.Spec
	if key == "" {
		problems = append(problems, "--key is required: where the journal CA's key is, e.g. tpm:/etc/pact/journal-ca.tpmkey (see --help)")
	} else {
		var err error
		if spec, err = keystore.Parse(key); err != nil {
			problems = append(problems, fmt.Sprintf("--key: %v", err))
		}
	}
	dns, ips, err := ceremony.ParseNames(names)
	if err != nil {
		problems = append(problems, fmt.Sprintf("--names: %v", strings.ReplaceAll(err.Error(), "\n", "; ")))
	}
	if out == "" {
		problems = append(problems, "--out is required: where to write the request, e.g. "+orDefault(journalID, "j1")+".csr")
	} else if _, err := os.Lstat(out); err == nil {
		problems = append(problems, fmt.Sprintf("--out %s already exists; remove it or choose another path", out))
	}
	if tpmTimeout <= 0 {
		problems = append(problems, fmt.Sprintf("--tpm-timeout %v: give a positive duration, e.g. 30s", tpmTimeout))
	}
	if len(problems) > 0 {
		fmt.Fprintf(stderr, "pact-journal ca-request: %s\n", strings.Join(problems, "\n  "))
		return 2
	}
	if spec.Backend == keystore.BackendTPM {
		if w := keystore.TPMDeviceWarning(tpmDevice); w != "" {
			fmt.Fprintf(stderr, "pact-journal ca-request: warning: %s\n", w)
		}
	}
	opts := keystore.Options{TPMDevice: tpmDevice, Label: label, TPMTimeout: tpmTimeout, Clock: tpmClock}
	req, err := ceremony.NewRequest(journalID, spec, opts, dns, ips)
	if err != nil {
		fmt.Fprintf(stderr, "pact-journal ca-request: %v\n", err)
		return 1
	}
	if err := ceremony.WriteNew(out, req.PEM, 0o644); err != nil {
		fmt.Fprintf(stderr, "pact-journal ca-request: %v\n", err)
		return 2
	}
	made := "reused the journal CA key at %s (a renewal: the new certificate keeps this key)\n"
	if req.Created {
		made = "made the journal CA key at %s\n"
	}
	fmt.Fprintf(stdout, made, req.Key)
	fmt.Fprintf(stdout, `wrote the certificate request of journal %s: %s
SPKI SHA-256 %s
(pact ca sign-journal prints this for the key it signs: compare them)

Next: carry %s to the ceremony machine and sign it there:
  pact ca sign-journal --dir ROOT-DIR --csr %s --journal-id %s --names %s --out %s-ca.pem
then bring %s-ca.pem back as this journal's --journal-ca-cert, with --journal-ca-key %s.
`, journalID, out, req.Fingerprint, out, out, journalID, orDefault(strings.Join(names, ","), "NAME,IP"), journalID, journalID, req.Key)
	return 0
}

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}
