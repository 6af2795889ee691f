package journal

import (
	"errors"
	"strings"

	"github.com/pact-hpc/pact/journal/ca"
)

// A journal re-reads its --journal-ca-cert file at every re-key and takes
// a new journal CA for its key (the renewal ceremony, a root rollover). A
// file it refuses (another key, another journal, names it does not serve,
// unreadable) leaves it signing under the journal CA it had: logged at
// ERROR, and kept where the operator looks until a re-key takes the file
// (or finds the journal CA in use there): pact journal status (per member),
// pact_journal_ca_file_refused (PactJournalCAFileRefused), and pact journal
// retire-intermediate's report of each journal's re-key.

// noteJournalCAFile records what the re-key's reading of the file said:
// err is Rotate's error.
func (j *Journal) noteJournalCAFile(err error) {
	if !errors.Is(err, ca.ErrJournalCAKept) {
		j.caFileRefused.Store(nil)
		return
	}
	why := journalCAFileWhy(err)
	j.caFileRefused.Store(&why)
}

// journalCAFileWhy is the refusal of the file, as an operator reads it:
// the sentinel's text is said by the field that carries it.
func journalCAFileWhy(err error) string {
	msg := err.Error()
	for _, line := range strings.Split(msg, "\n") {
		if rest, ok := strings.CutPrefix(line, ca.ErrJournalCAKept.Error()+": "); ok {
			return rest
		}
	}
	return msg
}

// journalCAFileRefused says why the file was refused at the last re-key,
// or "" if it was not.
func (j *Journal) journalCAFileRefused() string {
	if why := j.caFileRefused.Load(); why != nil {
		return *why
	}
	return ""
}
