package cli

import (
	"errors"
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/pact-hpc/pact/internal/apierr"
	"github.com/pact-hpc/pact/internal/pki"
	pactv1 "github.com/pact-hpc/pact/proto/pact/v1"
)

func (a *app) decommissionCommand() *cobra.Command {
	var force bool
	cmd := &cobra.Command{
		Use:   "decommission NODE [--force]",
		Short: "Revoke a node and its certificate",
		Long: `Decommission a node: its state becomes revoked, its certificate serial joins
the domain's revocation set (every journal then refuses it, on every call and
stream), and its hardware identity is released. The registry keeps the
record, with when and by whom it was revoked. To bring the hardware back,
register it again with "pact node enroll".

A node that holds an open stream to a journal is running; decommissioning it
cuts it off, so the journal refuses unless you pass --force.

Needs a platform-admin credential.`,
		Example: `  # A node that is powered off or was never enrolled
  pact node decommission node-001

  # A running node: cut it off now
  pact node decommission node-001 --force

  # The revoked record as JSON
  pact node decommission node-001 -o json`,
		Args: cobra.ArbitraryArgs,
		RunE: a.action(func(cmd *cobra.Command, args []string) error {
			return a.decommission(cmd, args, force)
		}),
	}
	cmd.Flags().BoolVar(&force, "force", false, "decommission even while the node is running (holds an open stream)")
	return cmd
}

func (a *app) decommission(cmd *cobra.Command, args []string, force bool) error {
	node, problems := nodeArg(cmd.CommandPath(), args)
	s, err := a.connect(cmd, problems)
	if err != nil {
		return err
	}
	defer s.close()

	resp, err := s.client.DecommissionNode(cmd.Context(), &pactv1.DecommissionNodeRequest{NodeId: node, Force: force})
	if err != nil {
		if e := apierr.FromError(err); e.Reason == apierr.NodeRevoked {
			msg := fmt.Sprintf("node %s is already decommissioned (journal: %s: %s); nothing to do. To use its hardware again, register it anew with: pact node enroll", node, e.Reason, e.Message)
			return &hintError{msg: msg, err: err}
		}
		return s.explain(action{
			verb:   "decommission nodes",
			node:   node,
			write:  true,
			help:   cmd.CommandPath(),
			denied: "decommissioning needs a credential with role platform-admin",
		}, err)
	}
	n := resp.GetNode()
	if n == nil {
		n = &pactv1.Node{NodeId: node, State: pactv1.NodeState_NODE_STATE_REVOKED}
	}
	v := NodeViewOf(n)
	if s.cfg.Output == outputJSON {
		return writeJSON(a.env.Stdout, v)
	}
	if v.CertSerial == "" {
		_, err = fmt.Fprintf(a.env.Stdout, "decommissioned %s (it held no certificate)\n", printable(v.NodeID))
		return err
	}
	_, err = fmt.Fprintf(a.env.Stdout, "decommissioned %s (certificate %s revoked)\n", printable(v.NodeID), printable(v.CertSerial))
	return err
}

func (a *app) assignCommand() *cobra.Command {
	var vcluster string
	cmd := &cobra.Command{
		Use:   "assign NODE --vcluster V",
		Short: "Put a node in maintenance into a vCluster",
		Long: `Assign a node that is in maintenance mode (no vCluster) to vCluster V. The
node's agent hears of it on its stream. A node already in a vCluster is moved
with "pact node move" instead.

A platform-admin may assign any node; a pact-ops-V credential only into its
own vCluster V.`,
		Example: `  pact node assign node-001 --vcluster ml

  # The updated record as JSON
  pact node assign node-001 --vcluster ml -o json`,
		Args: cobra.ArbitraryArgs,
		RunE: a.action(func(cmd *cobra.Command, args []string) error {
			node, problems := nodeArg(cmd.CommandPath(), args)
			problems = append(problems, vclusterFlag("--vcluster", vcluster)...)
			s, err := a.connect(cmd, problems)
			if err != nil {
				return err
			}
			defer s.close()
			resp, err := s.client.AssignNode(cmd.Context(), &pactv1.AssignNodeRequest{NodeId: node, Vcluster: vcluster})
			if err != nil {
				return s.explain(action{
					verb: "assign nodes to " + vcluster, node: node, write: true, help: cmd.CommandPath(),
					denied:       vclusterDenied(s.cred, pki.RoleOpsPrefix+vcluster),
					precondition: fmt.Sprintf("a node already in a vCluster is moved with: pact node move %s --to-vcluster %s", node, vcluster),
				}, err)
			}
			return a.printAssignment(s, node, "", vcluster, resp.GetNode())
		}),
	}
	cmd.Flags().StringVar(&vcluster, "vcluster", "", "the vCluster to put the node into (required)")
	return cmd
}

func (a *app) unassignCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "unassign NODE",
		Short: "Take a node out of its vCluster into maintenance mode",
		Long: `Unassign a node: it leaves its vCluster and is in maintenance mode (no
vCluster) until it is assigned again. The node's agent hears of it on its
stream. Unassigning a node already in maintenance changes nothing.

A platform-admin may unassign any node; a pact-ops-V credential only nodes of
its own vCluster V.`,
		Example: `  pact node unassign node-001

  # Then give it to another vCluster
  pact node assign node-001 --vcluster hpc`,
		Args: cobra.ArbitraryArgs,
		RunE: a.action(func(cmd *cobra.Command, args []string) error {
			node, problems := nodeArg(cmd.CommandPath(), args)
			s, err := a.connect(cmd, problems)
			if err != nil {
				return err
			}
			defer s.close()
			resp, err := s.client.UnassignNode(cmd.Context(), &pactv1.UnassignNodeRequest{NodeId: node})
			if err != nil {
				return s.explain(action{
					verb: "take nodes out of their vCluster", node: node, write: true, help: cmd.CommandPath(),
					denied:       vclusterDenied(s.cred, pki.RoleOpsPrefix+"VCLUSTER of the node's vCluster"),
					precondition: "re-run if it should still go into maintenance",
				}, err)
			}
			return a.printAssignment(s, node, resp.GetPreviousVcluster(), "", resp.GetNode())
		}),
	}
	return cmd
}

func (a *app) moveCommand() *cobra.Command {
	var to string
	cmd := &cobra.Command{
		Use:   "move NODE --to-vcluster V",
		Short: "Move a node from its vCluster to another, in one step",
		Long: `Move a node from the vCluster it is in to vCluster V, atomically: it is never
in both, nor in neither. The node's agent hears of it on its stream. A node
in maintenance mode is placed with "pact node assign" instead.

Moving between two vClusters needs a platform-admin credential: a pact-ops-V
credential may only move nodes into and out of its own vCluster V.`,
		Example: `  pact node move node-001 --to-vcluster hpc

  # The updated record as JSON
  pact node move node-001 --to-vcluster hpc -o json`,
		Args: cobra.ArbitraryArgs,
		RunE: a.action(func(cmd *cobra.Command, args []string) error {
			node, problems := nodeArg(cmd.CommandPath(), args)
			problems = append(problems, vclusterFlag("--to-vcluster", to)...)
			s, err := a.connect(cmd, problems)
			if err != nil {
				return err
			}
			defer s.close()
			resp, err := s.client.MoveNode(cmd.Context(), &pactv1.MoveNodeRequest{NodeId: node, ToVcluster: to})
			if err != nil {
				return s.explain(action{
					verb: "move nodes to " + to, node: node, write: true, help: cmd.CommandPath(),
					denied:       vclusterDenied(s.cred, ""),
					precondition: fmt.Sprintf("a node in maintenance is placed with: pact node assign %s --vcluster %s", node, to),
				}, err)
			}
			return a.printAssignment(s, node, resp.GetPreviousVcluster(), to, resp.GetNode())
		}),
	}
	cmd.Flags().StringVar(&to, "to-vcluster", "", "the vCluster to move the node to (required)")
	return cmd
}

// vclusterFlag checks a required vCluster flag.
func vclusterFlag(flag, v string) []error {
	if v == "" {
		return []error{fmt.Errorf("missing %s: name the vCluster, e.g. %s ml (to put a node into maintenance use: pact node unassign NODE)", flag, flag)}
	}
	if err := pki.ValidateName("vcluster", v); err != nil {
		return []error{fmt.Errorf("%s: %w", flag, err)}
	}
	return nil
}

// vclusterDenied is the advice when the journal refuses a vCluster change:
// what the caller's own role allows, and only roles that would work. ops
// is the pact-ops role that may make this change besides platform-admin
// (empty: none, e.g. a move between two vClusters).
func vclusterDenied(cred *credential, ops string) string {
	role := ""
	if cred != nil {
		role = cred.role
	}
	others := "a platform-admin credential"
	if ops != "" {
		others += ", or " + ops
	}
	switch {
	case strings.HasPrefix(role, pki.RoleOpsPrefix) && len(role) > len(pki.RoleOpsPrefix):
		v := role[len(pki.RoleOpsPrefix):]
		return fmt.Sprintf("a %s credential may only move nodes into and out of %s; this change needs %s", role, v, others)
	case role == pki.RoleViewer:
		return "role viewer may only read; use " + others
	}
	return "use " + others
}

// printAssignment prints "NODE: FROM -> TO" (or the record as JSON). from
// is "" for maintenance; for assign the journal does not say where the
// node was, which is maintenance by definition.
func (a *app) printAssignment(s *session, node, from, to string, n *pactv1.Node) error {
	if s.cfg.Output == outputJSON {
		if n == nil {
			msg := "the journal answered without a record for " + node + "; this is a journal fault: check the journal's log"
			return &hintError{msg: msg, err: errors.New(msg)}
		}
		return writeJSON(a.env.Stdout, NodeViewOf(n))
	}
	var err error
	if from == to {
		_, err = fmt.Fprintf(a.env.Stdout, "%s: already in %s\n", printable(node), vclusterName(to))
	} else {
		_, err = fmt.Fprintf(a.env.Stdout, "%s: %s -> %s\n", printable(node), vclusterName(from), vclusterName(to))
	}
	return err
}
