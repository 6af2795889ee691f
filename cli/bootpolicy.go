package cli

import (
	"cmp"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/grpc"

	"github.com/pact-hpc/pact/internal/measuredboot"
	pactv1 "github.com/pact-hpc/pact/proto/pact/v1"
)

// BootPolicyView is the JSON form of a boot policy: what pact boot-policy
// show, list and capture print, and what set --file reads. Digests are
// lower-case hex, as tpm2_pcrread and tpm2_eventlog print them.
type BootPolicyView struct {
	VCluster string               `json:"vcluster"`
	Version  uint64               `json:"version,omitempty"`
	Mode     string               `json:"mode"`
	Action   string               `json:"action"`
	PCRs     []BootPolicyPCRView  `json:"pcrs,omitempty"`
	Events   []BootPolicyEventRow `json:"events,omitempty"`
	Comment  string               `json:"comment,omitempty"`
	SetAt    *time.Time           `json:"set_at,omitempty"`
	SetBy    string               `json:"set_by,omitempty"`
	// AttestInterval is how often a streaming node is asked for a quote
	// between renewals (a Go duration, "1h"); empty: never.
	AttestInterval  string `json:"attest_interval,omitempty"`
	AttestTolerance uint32 `json:"attest_tolerance,omitempty"`
	// IMA is what the node's IMA measurement list must show (docs/tpm.md,
	// "IMA"); absent: the list is neither asked for nor read.
	IMA *BootPolicyIMAView `json:"ima,omitempty"`
}

// BootPolicyIMAView: a measured file of a listed path must have one of its
// allowed digests; only_listed refuses unlisted files and violations;
// paths under exclude_prefixes are never checked.
type BootPolicyIMAView struct {
	Files           []BootPolicyIMAFileView `json:"files,omitempty"`
	OnlyListed      bool                    `json:"only_listed,omitempty"`
	ExcludePrefixes []string                `json:"exclude_prefixes,omitempty"`
}

// BootPolicyIMAFileView is one file rule; digests in lower-case hex, as
// the IMA list (ima-ng's d-ng field) and sha256sum print them.
type BootPolicyIMAFileView struct {
	Path           string   `json:"path"`
	AllowedDigests []string `json:"allowed_digests"`
}

// BootPolicyPCRView: PCR index must hold one of allowed.
type BootPolicyPCRView struct {
	Index   uint32   `json:"index"`
	Allowed []string `json:"allowed"`
}

// BootPolicyEventRow: every event of event_type in PCR pcr must have one
// of allowed_digests, and there must be one.
type BootPolicyEventRow struct {
	Name           string   `json:"name,omitempty"`
	PCR            uint32   `json:"pcr"`
	EventType      uint32   `json:"event_type"`
	AllowedDigests []string `json:"allowed_digests"`
}

var (
	bootModes   = map[string]pactv1.BootPolicyMode{"observe": pactv1.BootPolicyMode_BOOT_POLICY_MODE_OBSERVE, "enforce": pactv1.BootPolicyMode_BOOT_POLICY_MODE_ENFORCE}
	bootActions = map[string]pactv1.BootPolicyAction{"observe": pactv1.BootPolicyAction_BOOT_POLICY_ACTION_OBSERVE, "refuse": pactv1.BootPolicyAction_BOOT_POLICY_ACTION_REFUSE, "fence": pactv1.BootPolicyAction_BOOT_POLICY_ACTION_FENCE}
)

func bootModeName(m pactv1.BootPolicyMode) string {
	return strings.ToLower(strings.TrimPrefix(m.String(), "BOOT_POLICY_MODE_"))
}

func bootActionName(x pactv1.BootPolicyAction) string {
	return strings.ToLower(strings.TrimPrefix(x.String(), "BOOT_POLICY_ACTION_"))
}

func hexAll(bs [][]byte) []string {
	out := make([]string, len(bs))
	for k, b := range bs {
		out[k] = hex.EncodeToString(b)
	}
	return out
}

func bootPolicyViewOf(p *pactv1.BootPolicy) BootPolicyView {
	v := BootPolicyView{VCluster: p.GetVcluster(), Version: p.GetVersion(), Mode: bootModeName(p.GetMode()), Action: bootActionName(p.GetAction()), Comment: p.GetComment(), SetBy: p.GetSetBy()}
	if at := p.GetSetAtUnixNano(); at != 0 {
		t := time.Unix(0, at).UTC()
		v.SetAt = &t
	}
	for _, r := range p.GetPcrs() {
		v.PCRs = append(v.PCRs, BootPolicyPCRView{Index: r.GetIndex(), Allowed: hexAll(r.GetAllowed())})
	}
	for _, r := range p.GetEvents() {
		v.Events = append(v.Events, BootPolicyEventRow{Name: r.GetName(), PCR: r.GetPcr(), EventType: r.GetEventType(), AllowedDigests: hexAll(r.GetAllowedDigests())})
	}
	if s := p.GetAttestIntervalSeconds(); s != 0 {
		v.AttestInterval = (time.Duration(s) * time.Second).String()
		v.AttestTolerance = p.GetAttestTolerance()
	}
	if r := p.GetIma(); r != nil {
		v.IMA = &BootPolicyIMAView{OnlyListed: r.GetOnlyListed(), ExcludePrefixes: r.GetExcludePrefixes()}
		for _, f := range r.GetFiles() {
			v.IMA.Files = append(v.IMA.Files, BootPolicyIMAFileView{Path: f.GetPath(), AllowedDigests: hexAll(f.GetAllowedDigests())})
		}
	}
	return v
}

// attestIntervalSeconds parses an attest interval ("1h"; "" or "0": off).
func attestIntervalSeconds(s string) (uint32, error) {
	if s == "" || s == "0" {
		return 0, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d < 0 || d%time.Second != 0 || d > 30*24*time.Hour {
		return 0, fmt.Errorf("attest interval %q: want a duration in whole seconds, 1m to 720h (0: off)", s)
	}
	return uint32(d / time.Second), nil
}

// attestText says how often nodes are asked for a quote between renewals.
func (v BootPolicyView) attestText() string {
	if v.AttestInterval == "" {
		return "off"
	}
	tol := v.AttestTolerance
	if tol == 0 {
		tol = 3
	}
	return fmt.Sprintf("every %s (tolerance %d)", v.AttestInterval, tol)
}

// policy turns a view (read from a file) back into a policy; it reports
// every problem at once.
func (v BootPolicyView) policy() (*pactv1.BootPolicy, error) {
	var problems []error
	unhex := func(what string, in []string) [][]byte {
		var out [][]byte
		for _, h := range in {
			b, err := hex.DecodeString(h)
			if err != nil {
				problems = append(problems, fmt.Errorf("%s: %q is not hex", what, h))
				continue
			}
			out = append(out, b)
		}
		return out
	}
	p := &pactv1.BootPolicy{Vcluster: v.VCluster, Mode: bootModes[v.Mode], Action: bootActions[v.Action], Comment: v.Comment, AttestTolerance: v.AttestTolerance}
	iv, err := attestIntervalSeconds(v.AttestInterval)
	if err != nil {
		problems = append(problems, err)
	}
	p.AttestIntervalSeconds = iv
	if p.Mode == 0 {
		problems = append(problems, fmt.Errorf("mode %q: want observe or enforce", v.Mode))
	}
	if p.Action == 0 {
		problems = append(problems, fmt.Errorf("action %q: want observe, refuse or fence", v.Action))
	}
	for _, r := range v.PCRs {
		p.Pcrs = append(p.Pcrs, &pactv1.BootPolicyPcr{Index: r.Index, Allowed: unhex(fmt.Sprintf("PCR %d", r.Index), r.Allowed)})
	}
	for _, r := range v.Events {
		p.Events = append(p.Events, &pactv1.BootPolicyEvent{Name: r.Name, Pcr: r.PCR, EventType: r.EventType, AllowedDigests: unhex("event rule "+r.Name, r.AllowedDigests)})
	}
	if v.IMA != nil {
		p.Ima = &pactv1.BootPolicyIma{OnlyListed: v.IMA.OnlyListed, ExcludePrefixes: v.IMA.ExcludePrefixes}
		for _, f := range v.IMA.Files {
			p.Ima.Files = append(p.Ima.Files, &pactv1.BootPolicyImaFile{Path: f.Path, AllowedDigests: unhex("IMA file "+f.Path, f.AllowedDigests)})
		}
	}
	return p, errors.Join(problems...)
}

func (a *app) bootPolicyClient(s *session) (pactv1.BootPolicyServiceClient, error) {
	cc, ok := s.closer.(grpc.ClientConnInterface)
	if !ok {
		return nil, errors.New("pact: this connection cannot reach the boot policy service")
	}
	return pactv1.NewBootPolicyServiceClient(cc), nil
}

func (a *app) bootPolicyCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "boot-policy",
		Short: "What TPM nodes must have booted: capture, set, list, show, remove boot policies",
		Long: `A boot policy says what the TPM quote of a node's boot must show: allowed
values of PCRs and allowed digests of the events of a PCR and event type.
One policy per vCluster; "" (the default) is the domain's, for vClusters
without their own. A policy in observe mode only logs mismatches; in
enforce mode a mismatch gets its action: observe, refuse (the enrollment or
renewal is refused BOOT_POLICY_REFUSED) or fence (the node is fenced).
Capture a policy from a reference node, run it in observe mode, then
enforce it. See docs/tpm.md, "Boot policies". Needs quorum feature level 3.`,
		Example: `  pact boot-policy capture --from-node n1 -o json > image-2026-12.json
  pact boot-policy set --file image-2026-12.json --mode observe
  pact boot-policy set --file image-2026-12.json --mode enforce --action fence
  pact boot-policy list`,
	}
	a.group(cmd)
	cmd.AddCommand(a.bootPolicyCaptureCommand(), a.bootPolicySetCommand(), a.bootPolicyListCommand(), a.bootPolicyShowCommand(), a.bootPolicyRemoveCommand())
	return cmd
}

func (a *app) bootPolicyCaptureCommand() *cobra.Command {
	var node, vcluster, mode, act string
	var pcrs, eventPCRs []uint
	var ima bool
	cmd := &cobra.Command{
		Use:   "capture --from-node NODE",
		Short: "Make a policy from the last TPM quote a journal verified for NODE (sets nothing)",
		Long: `Print a boot policy made from the last quote of NODE that the journal
answering verified (journals keep the quotes they verified, in memory: ask
the journal that last enrolled or renewed NODE). By default it takes the
values of PCRs 0, 2, 4 and 7 and the events of PCRs 4, 8 and 9, never PCR 1
(the NIC's MAC on a netbooted node); --pcrs and --event-pcrs choose. Save it
with -o json and give it to pact boot-policy set --file.`,
		Example: `  pact boot-policy capture --from-node n1 -o json > policy.json
  pact boot-policy capture --from-node n1 --pcrs 0,7 --event-pcrs 4,8,9 --vcluster ml -o json`,
		Args: cobra.NoArgs,
		RunE: a.action(func(cmd *cobra.Command, _ []string) error {
			var problems []error
			if node == "" {
				problems = append(problems, errors.New("--from-node: name the reference node"))
			}
			if _, ok := bootModes[mode]; !ok {
				problems = append(problems, fmt.Errorf("--mode %q: want observe or enforce", mode))
			}
			if _, ok := bootActions[act]; !ok {
				problems = append(problems, fmt.Errorf("--action %q: want observe, refuse or fence", act))
			}
			s, err := a.connect(cmd, problems)
			if err != nil {
				return err
			}
			defer s.close()
			c, err := a.bootPolicyClient(s)
			if err != nil {
				return err
			}
			req := &pactv1.CaptureBootPolicyRequest{NodeId: node, Vcluster: vcluster, Mode: bootModes[mode], Action: bootActions[act], Ima: ima}
			for _, i := range pcrs {
				req.Pcrs = append(req.Pcrs, uint32(i))
			}
			for _, i := range eventPCRs {
				req.EventPcrs = append(req.EventPcrs, uint32(i))
			}
			resp, err := c.CaptureBootPolicy(cmd.Context(), req)
			if err != nil {
				return s.explain(action{verb: "capture boot policies", node: node, help: cmd.CommandPath(), notFound: "no journal holds a verified quote of the node: renew it (pact-agent renew-now) or restart its agent, then capture again"}, err)
			}
			return a.printBootPolicy(s, bootPolicyViewOf(resp.GetPolicy()))
		}),
	}
	cmd.Flags().StringVar(&node, "from-node", "", "the reference node whose last verified quote the policy is made from")
	cmd.Flags().StringVar(&vcluster, "vcluster", "", "the vCluster the policy is for (empty: the domain's default)")
	cmd.Flags().StringVar(&mode, "mode", "observe", "observe or enforce")
	cmd.Flags().StringVar(&act, "action", "refuse", "what an enforced mismatch does: observe, refuse or fence")
	cmd.Flags().UintSliceVar(&pcrs, "pcrs", nil, "PCRs whose values become rules (default 0,2,4,7)")
	cmd.Flags().UintSliceVar(&eventPCRs, "event-pcrs", nil, "PCRs whose events become rules (default 4,8,9)")
	cmd.Flags().BoolVar(&ima, "ima", false, "also list each file of the node's IMA measurement list with its digest (its last quote must carry the list: docs/tpm.md, \"IMA\")")
	return cmd
}

func (a *app) printBootPolicy(s *session, v BootPolicyView) error {
	if s.cfg.Output == outputJSON {
		return writeJSON(a.env.Stdout, v)
	}
	w := a.env.Stdout
	fmt.Fprintf(w, "vcluster: %s\nversion: %d\nmode: %s\naction: %s\n", orDefault(v.VCluster), v.Version, v.Mode, v.Action)
	if v.Comment != "" {
		fmt.Fprintf(w, "comment: %s\n", v.Comment)
	}
	if v.SetAt != nil {
		fmt.Fprintf(w, "set: %s by %s\n", v.SetAt.Format(time.RFC3339), v.SetBy)
	}
	fmt.Fprintf(w, "attest between renewals: %s\n", v.attestText())
	for _, r := range v.PCRs {
		fmt.Fprintf(w, "pcr %d: %s\n", r.Index, strings.Join(r.Allowed, " "))
	}
	for _, r := range v.Events {
		fmt.Fprintf(w, "event %s (pcr %d, type 0x%x): %s\n", r.Name, r.PCR, r.EventType, strings.Join(r.AllowedDigests, " "))
	}
	if r := v.IMA; r != nil {
		which := "listed files checked"
		if r.OnlyListed {
			which = "only listed files allowed"
		}
		fmt.Fprintf(w, "ima: %s", which)
		if len(r.ExcludePrefixes) > 0 {
			fmt.Fprintf(w, "; never checked: %s", strings.Join(r.ExcludePrefixes, " "))
		}
		fmt.Fprintln(w)
		for _, f := range r.Files {
			fmt.Fprintf(w, "ima file %s: %s\n", f.Path, strings.Join(f.AllowedDigests, " "))
		}
	}
	return nil
}

func orDefault(vc string) string {
	if vc == "" {
		return "(domain default)"
	}
	return vc
}

func (a *app) bootPolicySetCommand() *cobra.Command {
	var files []string
	var mode, act, vcluster, interval string
	var expect uint64
	var tolerance uint32
	cmd := &cobra.Command{
		Use:   "set --file FILE [--file FILE2 ...]",
		Short: "Set a vCluster's (or the domain's) boot policy from FILE, as the next version (platform-admin)",
		Long: `Set the boot policy FILE holds (the JSON pact boot-policy capture and show
print) as the next version of its vCluster's policy. Several --file are
merged into one policy that allows what any of them allows: how a rollout
admits the old image and the new one at once (capture each from a
reference node; set the merged policy; once every node runs the new image,
set its policy alone). The first file's mode, action and vCluster apply;
--mode, --action and --vcluster override them. --attest-interval D has
the journal each TPM node streams to ask it for a fresh quote every D
between renewals (0: never; docs/tpm.md, "Attestation between renewals");
--attest-tolerance N treats a node as not matching once it leaves N
requests in a row without a verified answer (default 3). --expect-version
N refuses the change if another operator changed the policy since version
N. Audited as boot-policy-set.`,
		Example: `  pact boot-policy set --file policy.json --mode observe
  pact boot-policy set --file policy.json --mode enforce --action fence --expect-version 1
  pact boot-policy set --file policy.json --mode enforce --action fence --attest-interval 1h

  # during a rollout: both images are allowed
  pact boot-policy set --file image-2026-11.json --file image-2026-12.json --mode enforce --action refuse`,
		Args: cobra.NoArgs,
		RunE: a.action(func(cmd *cobra.Command, _ []string) error {
			var problems []error
			var p *pactv1.BootPolicy
			if len(files) == 0 {
				problems = append(problems, errors.New("--file: give the policy's JSON (pact boot-policy capture -o json)"))
			}
			for _, file := range files {
				var v BootPolicyView
				b, err := os.ReadFile(file)
				if err == nil {
					err = json.Unmarshal(b, &v)
				}
				if err != nil {
					problems = append(problems, fmt.Errorf("--file %s: %w", file, err))
					continue
				}
				if mode != "" {
					v.Mode = mode
				}
				if act != "" {
					v.Action = act
				}
				if cmd.Flags().Changed("vcluster") {
					v.VCluster = vcluster
				}
				if cmd.Flags().Changed("attest-interval") {
					v.AttestInterval = interval
				}
				if cmd.Flags().Changed("attest-tolerance") {
					v.AttestTolerance = tolerance
				}
				one, err := v.policy()
				if err != nil {
					problems = append(problems, fmt.Errorf("--file %s: %w", file, err))
					continue
				}
				if p == nil {
					p = one
				} else {
					// The first file's attestation applies, as its mode.
					iv, tol := p.GetAttestIntervalSeconds(), p.GetAttestTolerance()
					p = measuredboot.Merge(p, one)
					p.AttestIntervalSeconds, p.AttestTolerance = iv, tol
				}
			}
			s, err := a.connect(cmd, problems)
			if err != nil {
				return err
			}
			defer s.close()
			c, err := a.bootPolicyClient(s)
			if err != nil {
				return err
			}
			resp, err := c.SetBootPolicy(cmd.Context(), &pactv1.SetBootPolicyRequest{Policy: p, ExpectVersion: expect})
			if err != nil {
				return s.explain(action{verb: "set boot policies", write: true, help: cmd.CommandPath()}, err)
			}
			out := bootPolicyViewOf(resp.GetPolicy())
			if s.cfg.Output == outputJSON {
				return writeJSON(a.env.Stdout, out)
			}
			fmt.Fprintf(a.env.Stdout, "boot policy of %s is version %d (%s, action %s)\n", orDefault(out.VCluster), out.Version, out.Mode, out.Action)
			return nil
		}),
	}
	cmd.Flags().StringArrayVar(&files, "file", nil, "the policy, as pact boot-policy capture -o json prints it; repeat to allow what any of several allows")
	cmd.Flags().StringVar(&mode, "mode", "", "observe or enforce (default: the file's)")
	cmd.Flags().StringVar(&act, "action", "", "observe, refuse or fence (default: the file's)")
	cmd.Flags().StringVar(&vcluster, "vcluster", "", "the vCluster (default: the file's; empty: the domain's default)")
	cmd.Flags().Uint64Var(&expect, "expect-version", 0, "refuse unless this is the version in force")
	cmd.Flags().StringVar(&interval, "attest-interval", "", "ask each streaming TPM node for a fresh quote this often between renewals, e.g. 1h (0: never; default: the file's)")
	cmd.Flags().Uint32Var(&tolerance, "attest-tolerance", 0, "requests in a row a node may leave unanswered before it counts as not matching (0: 3; default: the file's)")
	return cmd
}

func (a *app) bootPolicyListCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "list",
		Short: "List the boot policies: vCluster, version, mode, action, rules",
		Long: `List the boot policies in force: one per vCluster that has its own, and
the domain's default ("(domain default)"), each with its version, mode,
action, how many PCR and event rules it has and who set it. Any operator
role may list.`,
		Example: `  pact boot-policy list
  pact boot-policy list -o json | jq '.[] | {vcluster, version, mode}'`,
		Args: cobra.NoArgs,
		RunE: a.action(func(cmd *cobra.Command, _ []string) error {
			s, err := a.connect(cmd, nil)
			if err != nil {
				return err
			}
			defer s.close()
			c, err := a.bootPolicyClient(s)
			if err != nil {
				return err
			}
			resp, err := c.ListBootPolicies(cmd.Context(), &pactv1.ListBootPoliciesRequest{})
			if err != nil {
				return s.explain(action{verb: "list boot policies", help: cmd.CommandPath()}, err)
			}
			out := []BootPolicyView{}
			for _, p := range resp.GetPolicies() {
				out = append(out, bootPolicyViewOf(p))
			}
			if s.cfg.Output == outputJSON {
				return writeJSON(a.env.Stdout, out)
			}
			if len(out) == 0 {
				fmt.Fprintln(a.env.Stdout, "no boot policy: TPM nodes are judged on credential activation and a verified quote alone (pact boot-policy capture)")
				return nil
			}
			tw := tabwriter.NewWriter(a.env.Stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "VCLUSTER\tVERSION\tMODE\tACTION\tPCR RULES\tEVENT RULES\tSET BY\tATTEST")
			for _, v := range out {
				fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%d\t%d\t%s\t%s\n", orDefault(v.VCluster), v.Version, v.Mode, v.Action, len(v.PCRs), len(v.Events), v.SetBy, cmp.Or(v.AttestInterval, "off"))
			}
			return tw.Flush()
		}),
	}
}

func (a *app) bootPolicyShowCommand() *cobra.Command {
	var vcluster string
	cmd := &cobra.Command{
		Use:   "show [--vcluster VC]",
		Short: "Show one boot policy with its rules (the domain's default without --vcluster)",
		Long: `Show the boot policy of --vcluster (the domain's default without it): every
PCR rule with its allowed values and every event rule with its allowed
digests, in hex. -o json prints what pact boot-policy set --file reads.`,
		Example: `  pact boot-policy show
  pact boot-policy show --vcluster ml -o json > ml-policy.json`,
		Args: cobra.NoArgs,
		RunE: a.action(func(cmd *cobra.Command, _ []string) error {
			s, err := a.connect(cmd, nil)
			if err != nil {
				return err
			}
			defer s.close()
			c, err := a.bootPolicyClient(s)
			if err != nil {
				return err
			}
			resp, err := c.ListBootPolicies(cmd.Context(), &pactv1.ListBootPoliciesRequest{})
			if err != nil {
				return s.explain(action{verb: "list boot policies", help: cmd.CommandPath()}, err)
			}
			for _, p := range resp.GetPolicies() {
				if p.GetVcluster() == vcluster {
					return a.printBootPolicy(s, bootPolicyViewOf(p))
				}
			}
			return fmt.Errorf("pact: no boot policy for %s (pact boot-policy list)", orDefault(vcluster))
		}),
	}
	cmd.Flags().StringVar(&vcluster, "vcluster", "", "the vCluster (empty: the domain's default)")
	return cmd
}

func (a *app) bootPolicyRemoveCommand() *cobra.Command {
	var vcluster string
	cmd := &cobra.Command{
		Use:   "remove [--vcluster VC]",
		Short: "Remove a vCluster's (or the domain's default) boot policy (platform-admin)",
		Long: `Remove the boot policy of --vcluster (the domain's default without it). The
vCluster's nodes fall back to the domain's default policy, or to none.
Audited as boot-policy-remove.`,
		Example: `  pact boot-policy remove --vcluster ml`,
		Args:    cobra.NoArgs,
		RunE: a.action(func(cmd *cobra.Command, _ []string) error {
			s, err := a.connect(cmd, nil)
			if err != nil {
				return err
			}
			defer s.close()
			c, err := a.bootPolicyClient(s)
			if err != nil {
				return err
			}
			resp, err := c.RemoveBootPolicy(cmd.Context(), &pactv1.RemoveBootPolicyRequest{Vcluster: vcluster})
			if err != nil {
				return s.explain(action{verb: "remove boot policies", write: true, help: cmd.CommandPath(), notFound: "pact boot-policy list shows the policies"}, err)
			}
			out := bootPolicyViewOf(resp.GetPolicy())
			if s.cfg.Output == outputJSON {
				return writeJSON(a.env.Stdout, out)
			}
			fmt.Fprintf(a.env.Stdout, "boot policy of %s removed (was version %d)\n", orDefault(out.VCluster), out.Version)
			return nil
		}),
	}
	cmd.Flags().StringVar(&vcluster, "vcluster", "", "the vCluster (empty: the domain's default)")
	return cmd
}
