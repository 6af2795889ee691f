package journalmain

import (
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"

	"github.com/pact-hpc/pact/internal/cmdline"
	"github.com/pact-hpc/pact/internal/dirowner"
	"github.com/pact-hpc/pact/internal/pki"
	"github.com/pact-hpc/pact/internal/settings"
	"github.com/pact-hpc/pact/journal"
	"github.com/pact-hpc/pact/journal/ca"
)

const restoreUsage = `pact-journal restore seeds a journal of a NEW quorum from a snapshot file
(pact journal snapshot save). Run it on every journal host of the new
quorum, with the same file and the same --initial-cluster, then start
pact-journal there with its usual flags (--initial-cluster is then ignored:
the data directory is no longer empty).

Usage:
  pact-journal restore --snapshot FILE --data-dir DIR --node-id ID \
      --initial-cluster j1=HOST:PORT,j2=HOST:PORT,j3=HOST:PORT --root-cert ca.pem

The file is checked completely before anything is written: its format
version, size and SHA-256, that its registry decodes and keeps its rules,
and that it was taken under the very root given as --root-cert: the SHA-256
fingerprint its header records must be that of --root-cert (a file from a
version that recorded none must hold an intermediate --root-cert signed).
The same domain name is not enough: two roots made apart are two domains.
A data directory that already holds Raft state is refused. Run as root,
restore gives what it makes to the owner of the data directory (or, when
it does not exist yet, of its nearest existing parent), as recover does.

The restored quorum is a new quorum with a new quorum id (printed; the
same on every journal restored with the same file and --initial-cluster):
journals of the quorum the snapshot came from cannot speak Raft with it.

Agents that enrolled before the snapshot keep working: their certificates
chain to intermediates the snapshot holds, and the registry has their
serials. Agents whose certificate is newer than the snapshot re-enroll on
their own (docs/quorum.md, "Backup and restore").

Exit codes: 0 restored; 1 the file or the directory refused (the message
says why; nothing was written); 2 bad flags, or a --root-cert that cannot
be read.

Flags:
`

func restoreCommand(stdout, stderr io.Writer) *cobra.Command {
	var c journal.RestoreConfig
	var initial string
	cmd := cmdline.Command("restore", "seed a journal of a new quorum from a snapshot file", restoreUsage, nil, func(*cobra.Command) int {
		return restoreMain(c, initial, stdout, stderr)
	})
	f := cmd.Flags()
	f.StringVar(&c.Snapshot, "snapshot", "", "the snapshot file")
	f.StringVar(&c.DataDir, "data-dir", "", "the new journal's data directory (empty or absent)")
	f.StringVar(&c.NodeID, "node-id", "", "this journal's id in the new quorum")
	f.StringVar(&initial, "initial-cluster", "", "every voter of the new quorum as id=raft-host:port,...; the same on every journal")
	f.StringVar(&c.RootCertFile, "root-cert", "", "the domain root certificate the journal will run with (default DATA_DIR/ca.pem); the snapshot must have been taken under this root")
	return cmd
}

func restoreMain(c journal.RestoreConfig, initial string, stdout, stderr io.Writer) int {
	peers, err := journal.ParsePeers(initial)
	if err != nil {
		fmt.Fprintf(stderr, "pact-journal restore: %v\n", err)
		return 2
	}
	c.InitialCluster = peers
	if c.RootCertFile == "" && c.DataDir != "" {
		c.RootCertFile = filepath.Join(c.DataDir, ca.RootCertFile)
	}
	if err := c.Validate(); err != nil {
		fmt.Fprintf(stderr, "pact-journal restore: %v\n(see pact-journal restore --help)\n", err)
		return 2
	}
	return asDirOwner("pact-journal restore", c.DataDir, stdout, stderr, func() int { return restore(c, stdout, stderr) })
}

func restore(c journal.RestoreConfig, stdout, stderr io.Writer) int {
	res, err := journal.Restore(c)
	if err != nil {
		fmt.Fprintf(stderr, "pact-journal restore: %v\nnothing was written to %s\n", err, c.DataDir)
		if errors.Is(err, journal.ErrRootCert) {
			return 2
		}
		return 1
	}
	h := res.Header
	fmt.Fprintf(stdout, "new quorum id %s (the snapshot's quorum was %s)\n", res.QuorumID, quorumOrNone(h.GetQuorumId()))
	fmt.Fprintf(stdout, "restored %d nodes of domain %s (index %d, term %d, taken %s by %s) into %s as journal %s of a new quorum of %d\nroot SHA-256 fingerprint %s, matched by %s\nnow start pact-journal --node-id %s --data-dir %s with its usual flags\n",
		res.Nodes, h.GetDomain(), h.GetIndex(), h.GetTerm(), time.Unix(0, h.GetTakenAtUnixNano()).UTC().Format(time.RFC3339), h.GetTakenBy(),
		c.DataDir, c.NodeID, len(c.InitialCluster), res.RootFingerprint, res.RootCheck, c.NodeID, c.DataDir)
	return 0
}

const recoverUsage = `pact-journal recover makes the surviving journal(s) of a quorum that lost
its majority for good into a new quorum (hashicorp/raft's RecoverCluster).
Use it only when the lost journals will never come back: see the runbook in
docs/quorum.md ("Recovering from a lost majority"). Stop pact-journal on
the survivor first.

Usage:
  pact-journal recover --config /etc/pact/journal.yaml --members j1=HOST:PORT[,...]

Give it the journal's own settings (--config, the environment, or the
flags it runs with): its --data-dir and --node-id, and its --root-cert and
journal CA, with which it asks first. --members is the new quorum: usually
the survivor alone, with its own Raft address. Run the same command on
every survivor. Then start pact-journal as before, and add new journals
with pact journal add.

Before it changes anything, recover asks every other voter of the
survivor's last configuration on its Raft port (as the bootstrap agreement
does). If those that answer as members of its quorum are, with the
survivor, a majority, the quorum is not lost and recover refuses (exit 5),
naming them: start the journal again instead, and it rejoins the quorum.
Recovering then would split the survivor off into a quorum of its own, with
a registry the others never see. --even-if-quorum-answers recovers
without asking: only for journals abandoned for good that may still run.

What the survivor has in its log is kept, committed or not; writes that
only the lost journals had are gone. The new quorum gets a new quorum id
(printed): a lost journal that comes back with its old disk belongs to the
old quorum and is refused, and a wiped one must join with --join and
pact journal add (an empty journal started with --initial-cluster asks the
listed journals first and refuses to start a second quorum).

Run as root on a data directory that belongs to another user (pact, the
journal's user under the packages), recover gives every file it makes
there to that user, so the journal can open them; running it as that
user (sudo -u pact pact-journal recover ...) needs nothing more.

Exit codes: 0 recovered; 1 failed (nothing changed unless the message says
so: a recovery done whose files could not be given to the directory's
owner says so, with the chown that does it); 2 bad flags; 5 refused: a
majority of the quorum answers (nothing changed).

Flags (with every setting of pact-journal; only those named above are used):
`

func recoverCommand(env settings.Env, stdout, stderr io.Writer) *cobra.Command {
	cfg := journal.DefaultConfig()
	var log cmdline.Logging
	var configFile, members string
	var force bool
	s := Settings(&cfg, &log, &configFile)
	cmd := cmdline.Command("recover", "make a survivor of a lost majority a new quorum", recoverUsage, s, func(cmd *cobra.Command) int {
		if !cmdline.Resolve(cmd, s, env) {
			return 2
		}
		return recoverMain(cfg, log, members, force, stdout, stderr)
	})
	cmd.Flags().StringVar(&members, "members", "", "the new quorum as id=raft-host:port,...")
	cmd.Flags().BoolVar(&force, "even-if-quorum-answers", false, "recover without first asking the other voters of the survivor's last configuration, even if they and the survivor are a majority that runs on: the survivor then leaves that quorum and serves a registry of its own")
	return cmd
}

func recoverMain(cfg journal.Config, log cmdline.Logging, members string, force bool, stdout, stderr io.Writer) int {
	peers, err := journal.ParsePeers(members)
	if err != nil {
		fmt.Fprintf(stderr, "pact-journal recover: --members: %v\n", err)
		return 2
	}
	c := journal.RecoverConfig{DataDir: cfg.DataDir, NodeID: cfg.NodeID, Members: peers, EvenIfQuorumAnswers: force}
	if c.NodeID != "" {
		if err := pki.ValidateName("journal id", c.NodeID); err != nil {
			fmt.Fprintf(stderr, "pact-journal recover: --node-id: %v\n", err)
			return 2
		}
	}
	if logger, err := log.Logger(stderr); err == nil {
		cfg.Logger = logger
	}
	return asDirOwner("pact-journal recover", c.DataDir, stdout, stderr, func() int { return recoverRun(cfg, c, members, stdout, stderr) })
}

func recoverRun(cfg journal.Config, c journal.RecoverConfig, members string, stdout, stderr io.Writer) int {
	res, err := journal.RecoverAs(cfg, c)
	if err != nil {
		fmt.Fprintf(stderr, "pact-journal recover: %v\n", err)
		if errors.Is(err, journal.ErrQuorumAnswers) {
			return ExitQuorumAnswers
		}
		return 1
	}
	fmt.Fprintf(stdout, "recovered %s: its log through index %d is now the state of a new quorum of %d (%s)\nnew quorum id %s (was %s): journals of the old quorum that come back are refused, and cannot pull this one into their history\nstart pact-journal as before; then add new journals with --join and: pact journal add ID RAFT_ADDR\n",
		c.DataDir, res.LastIndex, len(c.Members), members, res.QuorumID, quorumOrNone(res.PreviousQuorumID))
	return 0
}

func quorumOrNone(id string) string {
	if id == "" {
		return "none recorded"
	}
	return id
}

// asDirOwner runs a subcommand that writes into the journal's data
// directory dir. Run as root on a directory that belongs to another user
// (pact, under the packages), everything it creates there is given to that
// user afterwards, so the journal, started again as that user, can open it
// (internal/dirowner); it says so. A failure to do so is reported with the
// chown that repairs it, and exits 1 even if the command itself succeeded.
func asDirOwner(name, dir string, stdout, stderr io.Writer, run func() int) int {
	k, err := dirowner.Keep(dir)
	if err != nil {
		fmt.Fprintf(stderr, "%s: cannot tell who owns %s, to leave what it writes there to them: %v\nnothing was changed\n", name, dir, err)
		return 1
	}
	code := run()
	n, err := k.Chown()
	if err != nil {
		fmt.Fprintf(stderr, "%s: %v\nthe journal cannot open them until then\n", name, err)
		if code == 0 {
			code = 1
		}
		return code
	}
	if n > 0 {
		fmt.Fprintf(stdout, "%d files and directories made in %s as root are now owned by %s, who owns the directory\n", n, dir, k.Owner())
	}
	return code
}
