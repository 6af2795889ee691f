package cli

import (
	"errors"
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/pact-hpc/pact/internal/hwid"
	pactv1 "github.com/pact-hpc/pact/proto/pact/v1"
)

type updateOptions struct {
	macs      []string
	bmcSerial string
	tpmEKHash string
}

func (a *app) updateCommand() *cobra.Command {
	var o updateOptions
	cmd := &cobra.Command{
		Use:   "update NODE [--mac MAC ...] [--bmc-serial S] [--tpm-ek-hash H]",
		Short: "Change a registered node's hardware identity (a NIC or BMC swap)",
		Long: `Change the MACs, BMC serial or TPM EK hash of a registered node, for
example after a NIC or a motherboard was replaced, without decommissioning
it. Only the identifiers you pass change: --mac replaces the whole MAC list
(repeat it for several), --bmc-serial "" and --tpm-ek-hash "" remove them.

The node keeps its state, vCluster and current certificate; the new
identity is what its next enrollment is matched against (after the swap the
agent restarts with the new hardware and enrolls as usual). Identifiers
another node holds are refused (HARDWARE_IDENTITY_CONFLICT, exit 4). The
change is in the audit trail ("pact audit --node NODE"). Needs a
platform-admin credential.`,
		Example: `  # The node's second NIC was replaced
  pact node update node-001 --mac 52:54:00:12:34:56 --mac 52:54:00:aa:bb:cc

  # A new motherboard: new BMC serial, and no TPM yet
  pact node update node-001 --bmc-serial SN999 --tpm-ek-hash ""`,
		Args: cobra.ArbitraryArgs,
		RunE: a.action(func(cmd *cobra.Command, args []string) error {
			return a.update(cmd, args, o)
		}),
	}
	f := cmd.Flags()
	f.StringSliceVar(&o.macs, "mac", nil, "the node's MACs from now on; repeat (or comma-separate) for several")
	f.StringVar(&o.bmcSerial, "bmc-serial", "", `the node's BMC serial from now on ("" removes it)`)
	f.StringVar(&o.tpmEKHash, "tpm-ek-hash", "", `hex SHA-256 of the node's TPM endorsement key from now on ("" removes it)`)
	return cmd
}

func (a *app) update(cmd *cobra.Command, args []string, o updateOptions) error {
	node, problems := nodeArg(cmd.CommandPath(), args)
	req := &pactv1.UpdateNodeRequest{NodeId: node}
	f := cmd.Flags()
	if !f.Changed("mac") && !f.Changed("bmc-serial") && !f.Changed("tpm-ek-hash") {
		problems = append(problems, errors.New("nothing to update: pass --mac, --bmc-serial or --tpm-ek-hash"))
	}
	if f.Changed("mac") {
		if len(o.macs) == 0 {
			problems = append(problems, errors.New("--mac is empty: a node needs at least one MAC"))
		}
		for _, m := range o.macs {
			n, err := hwid.NormalizeMAC(m)
			if err == nil {
				err = hwid.CheckUnicast([]string{n})
			}
			if err != nil {
				problems = append(problems, err)
				continue
			}
			req.Macs = append(req.Macs, n)
		}
	}
	if f.Changed("bmc-serial") {
		b, err := hwid.NormalizeBMCSerial(o.bmcSerial)
		if err != nil {
			problems = append(problems, err)
		}
		req.BmcSerial = &b
	}
	if f.Changed("tpm-ek-hash") {
		e := ""
		if strings.TrimSpace(o.tpmEKHash) != "" {
			var err error
			if e, err = hwid.NormalizeEKHash(o.tpmEKHash); err != nil {
				problems = append(problems, err)
			}
		}
		req.TpmEkHash = &e
	}
	s, err := a.connect(cmd, problems)
	if err != nil {
		return err
	}
	defer s.close()

	resp, err := s.client.UpdateNode(cmd.Context(), req)
	if err != nil {
		return s.explain(action{
			verb:   "update nodes",
			node:   node,
			write:  true,
			help:   cmd.CommandPath(),
			denied: "changing a node's hardware identity needs a credential with role platform-admin",
		}, err)
	}
	v := NodeViewOf(resp.GetNode())
	if s.cfg.Output == outputJSON {
		return writeJSON(a.env.Stdout, nodeResult(resp.GetNode(), resp.GetUnchanged(), resultUnchanged))
	}
	if resp.GetUnchanged() {
		_, err = fmt.Fprintf(a.env.Stdout, "%s already has this hardware identity; nothing changed\n", printable(node))
		return err
	}
	bmc := v.BMCSerial
	if bmc == "" {
		bmc = none
	}
	_, err = fmt.Fprintf(a.env.Stdout, "updated %s: macs %s, bmc serial %s; its next enrollment is matched against this\n",
		printable(v.NodeID), printable(strings.Join(v.MACs, ", ")), printable(bmc))
	return err
}
