package cli

import (
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/pact-hpc/pact/internal/apierr"
	"github.com/pact-hpc/pact/internal/atomicfile"
	"github.com/pact-hpc/pact/internal/duration"
	pactv1 "github.com/pact-hpc/pact/proto/pact/v1"
)

// Join token lifetimes the CLI accepts; the journal enforces the same.
const (
	defaultTokenTTL = time.Hour
	maxTokenTTL     = 7 * 24 * time.Hour
)

func (a *app) tokenCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "token",
		Short: "Create, list and revoke single-use join tokens for nodes",
		Long: `A join token is a second enrollment credential beside the hardware match:
a node registered with --require-token enrolls only when its agent presents a
token created for it (pact-agent --join-token-file FILE). Each token is 256
random bits, enrolls once, and expires (default 1 hour, at most 7 days). The
journal keeps only its SHA-256; the token is shown once, when it is created,
and never in a list, the audit trail, a log or an error. Tokens are named by
their id: the first 12 hex digits of that SHA-256.

Hardware identifiers (MACs, BMC serial) are not secret; a token is. See
docs/security.md for what a token proves and how to deliver it to a node.`,
		Example: `  pact node token create node-001 --ttl 1h
  pact node token create node-001 --ttl 30m --out /srv/pxe/tokens/node-001
  pact node token list node-001
  pact node token revoke node-001`,
	}
	a.group(cmd)
	cmd.AddCommand(a.tokenCreateCommand(), a.tokenListCommand(), a.tokenRevokeCommand())
	return cmd
}

func (a *app) tokenCreateCommand() *cobra.Command {
	var ttl time.Duration
	var out string
	cmd := &cobra.Command{
		Use:   "create NODE [--ttl 1h] [--out FILE]",
		Short: "Make a single-use join token for a node and print it once",
		Long: `Create a join token for NODE. The token is printed once, alone on standard
output (so TOKEN=$(pact node token create ...) works), or written to --out
FILE (mode 0600, never overwriting) with only its description printed. It
cannot be shown again: the journal keeps only its SHA-256.

-o json never prints a token: it prints the description, and needs --out.

The node must be registered; it uses the token only if it was registered
with --require-token. Needs a platform-admin credential.`,
		Example: `  # Print the token, to paste into the node's boot configuration
  pact node token create node-001 --ttl 1h

  # Write it to a file the node's provisioning serves, 0600
  pact node token create node-001 --ttl 30m --out /srv/pxe/tokens/node-001 -o json`,
		Args: cobra.ArbitraryArgs,
		RunE: a.action(func(cmd *cobra.Command, args []string) error {
			node, problems := nodeArg(cmd.CommandPath(), args)
			if ttl <= 0 || ttl > maxTokenTTL || ttl%time.Second != 0 {
				problems = append(problems, fmt.Errorf("--ttl %s: give whole seconds from 1s to %s, e.g. --ttl 1h", ttl, maxTokenTTL))
			}
			if cfg, _ := a.flags.resolve(a.env.Getenv); cfg.Output == outputJSON && out == "" {
				problems = append(problems, errors.New("-o json never prints a join token: add --out FILE to write the token there"))
			}
			if out != "" {
				if _, err := os.Lstat(out); err == nil {
					problems = append(problems, fmt.Errorf("--out %s exists; a token file is never overwritten: remove it or choose another", out))
				}
			}
			s, err := a.connect(cmd, problems)
			if err != nil {
				return err
			}
			defer s.close()
			resp, err := s.client.CreateJoinToken(cmd.Context(), &pactv1.CreateJoinTokenRequest{NodeId: node, TtlSeconds: int64(ttl / time.Second)})
			if err != nil {
				return s.explain(action{verb: "create join tokens", node: node, write: true, help: cmd.CommandPath(),
					denied: "creating join tokens needs a credential with role platform-admin"}, err)
			}
			v := JoinTokenViewOf(resp.GetInfo(), a.env.Now())
			if out != "" {
				if err := writeSecretFile(out, resp.GetToken()); err != nil {
					return fmt.Errorf("join token %s for %s was created but could not be written to %s (%w); revoke it with: pact node token revoke %s --id %s", v.ID, node, out, err, node, v.ID)
				}
				if s.cfg.Output == outputJSON {
					return writeJSON(a.env.Stdout, v)
				}
				_, err := fmt.Fprintf(a.env.Stdout, "join token %s for %s written to %s; it expires %s and enrolls once\n", v.ID, printable(v.NodeID), out, v.ExpiresAt)
				return err
			}
			fmt.Fprintf(a.env.Stderr, "join token %s for %s expires %s and enrolls once; it is shown only now: give it to the node's agent (--join-token-file)\n", v.ID, printable(v.NodeID), v.ExpiresAt)
			_, err = fmt.Fprintln(a.env.Stdout, resp.GetToken())
			return err
		}),
	}
	cmd.Flags().Var(duration.NewValue(&ttl, defaultTokenTTL), "ttl", "how long the token may be used, e.g. 30m, 1h or 2d (at most 7d)")
	cmd.Flags().StringVar(&out, "out", "", "write the token to this new file (mode 0600) instead of printing it")
	return cmd
}

// writeSecretFile creates path with mode 0600 and writes s and a newline;
// it never replaces an existing file.
func writeSecretFile(path, s string) error {
	return atomicfile.WriteNew(path, []byte(s+"\n"), 0o600)
}

func (a *app) tokenListCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "list [NODE]",
		Short: "List join tokens (ids, never the tokens)",
		Long: `List the join tokens the journal holds, for every node or for NODE: id,
state (unused, used, expired), expiry, when it was used and who created it.
Used and expired tokens are kept until they expire, then dropped.`,
		Example: `  pact node token list
  pact node token list node-001 -o json`,
		Args: cobra.ArbitraryArgs,
		RunE: a.action(func(cmd *cobra.Command, args []string) error {
			var node string
			var problems []error
			if len(args) > 0 {
				node, problems = nodeArg(cmd.CommandPath(), args)
			}
			s, err := a.connect(cmd, problems)
			if err != nil {
				return err
			}
			defer s.close()
			resp, err := s.client.ListJoinTokens(cmd.Context(), &pactv1.ListJoinTokensRequest{NodeId: node})
			if err != nil {
				return s.explain(action{verb: "list join tokens", node: node, help: cmd.CommandPath()}, err)
			}
			views := make([]JoinTokenView, 0, len(resp.GetTokens()))
			for _, t := range resp.GetTokens() {
				views = append(views, JoinTokenViewOf(t, a.env.Now()))
			}
			if s.cfg.Output == outputJSON {
				return writeJSON(a.env.Stdout, views)
			}
			return writeTokenTable(a.env.Stdout, views)
		}),
	}
}

func (a *app) tokenRevokeCommand() *cobra.Command {
	var id string
	cmd := &cobra.Command{
		Use:   "revoke NODE [--id ID]",
		Short: "Revoke a node's unused join tokens",
		Long: `Revoke NODE's unused join tokens, or only the one whose id is ID (as
pact node token list shows it). A revoked token enrolls nothing. Needs a
platform-admin credential.`,
		Example: `  pact node token revoke node-001
  pact node token revoke node-001 --id 3f2a9c01b7de`,
		Args: cobra.ArbitraryArgs,
		RunE: a.action(func(cmd *cobra.Command, args []string) error {
			node, problems := nodeArg(cmd.CommandPath(), args)
			s, err := a.connect(cmd, problems)
			if err != nil {
				return err
			}
			defer s.close()
			resp, err := s.client.RevokeJoinTokens(cmd.Context(), &pactv1.RevokeJoinTokensRequest{NodeId: node, Id: id})
			if err != nil {
				if e := apierr.FromError(err); e.Reason == apierr.NotFound {
					return &hintError{msg: fmt.Sprintf("nothing to revoke (journal: %s); see the node's tokens with: pact node token list %s", e.Message, node), err: err}
				}
				return s.explain(action{verb: "revoke join tokens", node: node, write: true, help: cmd.CommandPath(),
					denied: "revoking join tokens needs a credential with role platform-admin"}, err)
			}
			views := make([]JoinTokenView, 0, len(resp.GetRevoked()))
			for _, t := range resp.GetRevoked() {
				views = append(views, JoinTokenViewOf(t, a.env.Now()))
			}
			if s.cfg.Output == outputJSON {
				return writeJSON(a.env.Stdout, views)
			}
			for _, v := range views {
				if _, err := fmt.Fprintf(a.env.Stdout, "revoked join token %s of %s\n", v.ID, printable(v.NodeID)); err != nil {
					return err
				}
			}
			return nil
		}),
	}
	cmd.Flags().StringVar(&id, "id", "", "revoke only the token with this id (default: every unused token of NODE)")
	return cmd
}

func (a *app) fenceCommand() *cobra.Command {
	var reason string
	cmd := &cobra.Command{
		Use:   "fence NODE --reason TEXT",
		Short: "Quarantine a node: revoke its certificate, keep its registration",
		Long: `Fence a node for incident response. Its current certificate is revoked at
once (every journal closes its streams), and Enroll and RenewCert answer
NODE_FENCED until "pact node unfence". Unlike decommission, the node keeps
its registration, hardware identity and vCluster, so nothing the registry
knows about it is lost. The reason is recorded in the audit trail (the node
itself is not told it). Needs a platform-admin credential. Fencing a fenced
node changes nothing (its first reason stays): pact says so and exits 0
(with -o json, "result": "unchanged"; "ok" when it fenced the node).`,
		Example: `  pact node fence node-001 --reason "INC-1234: unexpected outbound traffic"
  pact audit --node node-001`,
		Args: cobra.ArbitraryArgs,
		RunE: a.action(func(cmd *cobra.Command, args []string) error {
			node, problems := nodeArg(cmd.CommandPath(), args)
			if reason == "" {
				problems = append(problems, errors.New(`--reason is required: say why, e.g. --reason "INC-1234: unexpected outbound traffic"; it goes into the audit trail`))
			}
			s, err := a.connect(cmd, problems)
			if err != nil {
				return err
			}
			defer s.close()
			resp, err := s.client.FenceNode(cmd.Context(), &pactv1.FenceNodeRequest{NodeId: node, Reason: reason})
			if err != nil {
				return s.explain(action{verb: "fence nodes", node: node, write: true, help: cmd.CommandPath(),
					denied: "fencing needs a credential with role platform-admin"}, err)
			}
			v := NodeViewOf(resp.GetNode())
			if s.cfg.Output == outputJSON {
				return writeJSON(a.env.Stdout, nodeResult(resp.GetNode(), resp.GetUnchanged(), resultUnchanged))
			}
			if resp.GetUnchanged() {
				_, err = fmt.Fprintf(a.env.Stdout, "%s is already fenced (since %s by %s: %s); nothing changed\n",
					printable(node), cell(v.FencedAt), cell(v.FencedBy), cell(v.FenceReason))
				return err
			}
			revoked := ""
			if v.CertSerial != "" {
				revoked = " (certificate " + printable(v.CertSerial) + " revoked)"
			}
			_, err = fmt.Fprintf(a.env.Stdout, "fenced %s%s; it may not enroll or renew until: pact node unfence %s\n", printable(node), revoked, printable(node))
			return err
		}),
	}
	cmd.Flags().StringVar(&reason, "reason", "", "why the node is fenced, for the audit trail (required)")
	return cmd
}

func (a *app) unfenceCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "unfence NODE",
		Short: "Lift a node's fence so its agent may enroll again",
		Long: `Lift the fence of NODE. Its old certificate stays revoked: the agent enrolls
again (with a new key, and a new join token if the node requires one). Needs
a platform-admin credential.

A node that is not fenced is left as it is: pact says "nothing changed",
exits 0 and writes nothing (with -o json, "result": "unchanged"; "ok" when
it lifted a fence).`,
		Example: `  pact node unfence node-001`,
		Args:    cobra.ArbitraryArgs,
		RunE: a.action(func(cmd *cobra.Command, args []string) error {
			node, problems := nodeArg(cmd.CommandPath(), args)
			s, err := a.connect(cmd, problems)
			if err != nil {
				return err
			}
			defer s.close()
			resp, err := s.client.UnfenceNode(cmd.Context(), &pactv1.UnfenceNodeRequest{NodeId: node})
			if err != nil {
				return s.explain(action{verb: "unfence nodes", node: node, write: true, help: cmd.CommandPath(),
					denied: "unfencing needs a credential with role platform-admin"}, err)
			}
			if s.cfg.Output == outputJSON {
				return writeJSON(a.env.Stdout, nodeResult(resp.GetNode(), resp.GetUnchanged(), resultUnchanged))
			}
			if resp.GetUnchanged() {
				_, err = fmt.Fprintf(a.env.Stdout, "%s is not fenced; nothing changed\n", printable(node))
				return err
			}
			_, err = fmt.Fprintf(a.env.Stdout, "unfenced %s; its agent may enroll again\n", printable(node))
			return err
		}),
	}
}
