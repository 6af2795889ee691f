package journalmain

import (
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/pact-hpc/pact/internal/clock"
	"github.com/pact-hpc/pact/internal/keystore"
	"github.com/pact-hpc/pact/journal"
)

// tpmClock times the TPM's commands (the system clock when nil); tests
// replace it.
var tpmClock clock.Clock

// isTPMTransient: the TPM refused for now (busy, held by another program,
// out of object memory). Nothing is wrong with the settings or the key,
// and the same start succeeds once the TPM is free or cleared: exit 1,
// which the unit restarts, not 2, which it does not.
func isTPMTransient(err error) bool {
	return errors.Is(err, keystore.ErrTPMBusy) || errors.Is(err, keystore.ErrTPMFull)
}

// splitTPMTransient takes the TPM's transient refusals out of the
// preflight's problems.
func splitTPMTransient(problems error) (transient, rest error) {
	var t, r []error
	for _, e := range flattenJoin(problems) {
		if isTPMTransient(e) {
			t = append(t, e)
		} else {
			r = append(r, e)
		}
	}
	return errors.Join(t...), errors.Join(r...)
}

// flattenJoin lists the parts of an errors.Join (recursively), as
// cmdline.ReportProblems counts them.
func flattenJoin(err error) []error {
	if err == nil {
		return nil
	}
	if j, ok := err.(interface{ Unwrap() []error }); ok && isJoin(err, j.Unwrap()) {
		var out []error
		for _, e := range j.Unwrap() {
			out = append(out, flattenJoin(e)...)
		}
		return out
	}
	return []error{err}
}

// reportTPMTransient says that the TPM, not the configuration, stopped the
// check or the start.
func reportTPMTransient(w io.Writer, check bool, err error) {
	what := "cannot start"
	if check {
		what = "cannot check the journal CA key"
	}
	fmt.Fprintf(w, "pact-journal: %s: the TPM cannot be used now; this is not a configuration problem (exit 1: the service manager starts the journal again, and it starts once the TPM is free):\n", what)
	for _, l := range strings.Split(err.Error(), "\n") {
		fmt.Fprintf(w, "  %s\n", l)
	}
}

// tpmDeviceWarning warns when the journal CA key is tpm: and used through
// a raw TPM device while the kernel's resource manager exists.
func tpmDeviceWarning(cfg journal.Config) string {
	spec, err := keystore.Parse(cfg.JournalCAKey)
	if cfg.JournalCAKey == "" || err != nil || spec.Backend != keystore.BackendTPM {
		return ""
	}
	return keystore.TPMDeviceWarning(cfg.TPMDevice)
}
