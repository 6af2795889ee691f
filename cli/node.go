package cli

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/spf13/cobra"
	"google.golang.org/grpc"

	"github.com/pact-hpc/pact/internal/hwid"
	"github.com/pact-hpc/pact/internal/pki"
	pactv1 "github.com/pact-hpc/pact/proto/pact/v1"
)

func (a *app) nodeCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "node",
		Short: "Register, assign and decommission nodes; inspect the enrollment registry",
		Long: `Commands on the enrollment registry: the nodes that may join the domain,
their hardware identity, state, vCluster and current certificate.

A node's life: "pact node enroll" registers it (state registered); its agent
enrolls with matching hardware and gets a certificate (active); if it stops
checking in it becomes inactive until it enrolls again; "pact node
decommission" revokes it and its certificate (revoked). "pact node fence"
quarantines a node without forgetting it: its certificate is revoked and it
may not enroll again until "pact node unfence". "pact node token" makes
single-use join tokens for nodes registered with --require-token.

A node is in at most one vCluster; with none it is in maintenance mode.
"pact node assign" puts a node in maintenance into a vCluster, "pact node
move" takes it from one vCluster to another in one step, and "pact node
unassign" puts it back into maintenance. A platform-admin may do all of
this; a pact-ops-VCLUSTER credential only moves nodes into and out of its
own vCluster; a viewer only reads.`,
		Example: `  pact node enroll node-001 --mac 52:54:00:12:34:56 --bmc-serial SN123
  pact node enroll --batch rack-12.csv
  pact node list --state registered
  pact node assign node-001 --vcluster ml
  pact node inspect node-001
  pact node decommission node-001
  pact node fence node-001 --reason "INC-1234: unexpected outbound traffic"
  pact node token create node-001 --ttl 1h`,
	}
	a.group(cmd)
	cmd.AddCommand(a.enrollCommand(), a.listCommand(), a.inspectCommand(),
		a.updateCommand(), a.decommissionCommand(), a.assignCommand(), a.unassignCommand(), a.moveCommand(),
		a.tokenCommand(), a.fenceCommand(), a.unfenceCommand())
	return cmd
}

// nodeArg reads the single NODE argument and checks its name.
func nodeArg(cmdPath string, args []string) (string, []error) {
	switch len(args) {
	case 0:
		return "", []error{fmt.Errorf("missing NODE: name the node, e.g. %s node-001", cmdPath)}
	case 1:
		if err := pki.ValidateName("node", args[0]); err != nil {
			return args[0], []error{err}
		}
		return args[0], nil
	default:
		return args[0], []error{fmt.Errorf("%s takes one NODE, got %d arguments: %s", cmdPath, len(args), strings.Join(args, " "))}
	}
}

type enrollOptions struct {
	macs      []string
	bmcSerial string
	tpmEKHash string
	tpmEKCert string
	vcluster  string
	spiffeID  string
	batch     string
	// requireToken: the node enrolls only with a join token.
	requireToken bool
}

func (a *app) enrollCommand() *cobra.Command {
	var o enrollOptions
	cmd := &cobra.Command{
		Use:   "enroll (NODE --mac MAC [--mac MAC ...] | --batch FILE)",
		Short: "Pre-register nodes' hardware, one or a CSV file of them, so their agents can enroll",
		Long: `Register a node in the enrollment registry before it first boots. The node
starts in state "registered". When its agent boots and enrolls with matching
hardware, the journal signs its certificate and the node becomes "active".
Matching means: at least one registered MAC is reported (extra or failed NICs
are fine), and the BMC serial and TPM EK hash, if registered, are reported
and equal.

NODE is 1-63 letters, digits, '.', '_' or '-', starting with a letter or
digit. A MAC may be written 52:54:00:12:34:56, 52-54-00-12-34-56,
5254.0012.3456 or 525400123456; it is stored lower-case with colons. Each MAC
and BMC serial can belong to only one node of the domain.

Everything is checked here first, and every problem is reported at once,
before the journal is contacted. Without --vcluster the node is in
maintenance mode (no vCluster). A node already registered exactly so
answers "exists", exit 0, and nothing is written (with -o json, the record
with "result": "exists"; "ok" when it was registered).

With --require-token the node must also present a single-use join token
when it enrolls: create one with "pact node token create NODE" and hand it
to the node's agent (--join-token-file). Hardware identifiers are not
secret; a token is (docs/security.md).

On a SPIRE site the node's agent may authenticate with its SPIRE X.509-SVID
instead (docs/spire.md). Its SPIFFE ID maps to the node: by default
spiffe://TRUST-DOMAIN/pact-agent/NODE, or the one given with --spiffe-id
(then the default no longer maps). A SPIFFE ID belongs to one node.

With --batch FILE (or --batch - for stdin) every row of a CSV file is
registered: a header line node_id,mac,bmc_serial,tpm_ek_hash,vcluster
(columns in any order; node_id and mac required; spiffe_id, require_token
and tpm_ek_cert, a path to the node's EK certificate, optional), one node
per line, several
MACs of a node separated by ';'. The file is streamed: rows are checked and
sent in chunks of 500, and each row's result (ok, exists or error, with the
line number) is printed as it comes back, then a summary. Rows are
independent: a bad row does not stop the others. Re-running the same file is
safe: rows already registered identically report "exists". With -o json
each result is one JSON line, and the summary is the last. A progress line
shows on a terminal. Exit code: 0 if every row is ok or exists, 4 if some
conflict with the registry, 2 if some are invalid (docs/batch.md has the
format and all the rules).`,
		Example: `  # One NIC and the BMC serial
  pact node enroll node-001 --mac 52:54:00:12:34:56 --bmc-serial SN123

  # Two NICs, a TPM EK hash, and vCluster "ml"
  pact node enroll node-002 --mac 52:54:00:12:34:57 --mac 52:54:00:ab:cd:ef \
      --tpm-ek-hash 9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08 \
      --vcluster ml

  # A node with a TPM, registered by its EK certificate (docs/tpm.md)
  pact node enroll node-004 --mac 52:54:00:12:34:59 --tpm-ek-cert node-004-ek.pem

  # Print the registered record as JSON
  pact node enroll node-003 --mac 52:54:00:12:34:58 -o json

  # A node that must also present a join token to enroll
  pact node enroll node-004 --mac 52:54:00:12:34:59 --require-token
  pact node token create node-004 --ttl 1h

  # Register every node of a CSV file; keep the results, watch the progress
  pact node enroll --batch rack-12.csv > rack-12.results

  # The same from stdin, with only the rows that failed, via jq
  generate-inventory | pact node enroll --batch - -o json | jq -c 'select(.result == "error")'`,
		Args: cobra.ArbitraryArgs, // checked with the flags, so all problems show at once
		RunE: a.action(func(cmd *cobra.Command, args []string) error {
			if cmd.Flags().Changed("batch") {
				return a.enrollBatch(cmd, args, o)
			}
			return a.enroll(cmd, args, o)
		}),
	}
	f := cmd.Flags()
	f.StringSliceVar(&o.macs, "mac", nil, "MAC address of one of the node's NICs; repeat (or comma-separate) for several")
	f.StringVar(&o.bmcSerial, "bmc-serial", "", "serial number of the node's BMC")
	f.StringVar(&o.tpmEKHash, "tpm-ek-hash", "", "the node's TPM EK hash (pact-agent tpm-ek prints it): the node must then prove its TPM at every enrollment (docs/tpm.md)")
	f.StringVar(&o.tpmEKCert, "tpm-ek-cert", "", "the node's TPM EK certificate, PEM or DER: registers the EK hash of its key (docs/tpm.md)")
	f.StringVar(&o.vcluster, "vcluster", "", "vCluster to assign the node to (default: none, maintenance mode)")
	f.StringVar(&o.spiffeID, "spiffe-id", "", "SPIFFE ID of the node's SPIRE SVIDs, if not spiffe://TRUST-DOMAIN/pact-agent/NODE (SPIRE sites; docs/spire.md)")
	f.StringVar(&o.batch, "batch", "", "register every node of this CSV file (- for stdin) instead of one NODE; see docs/batch.md")
	f.BoolVar(&o.requireToken, "require-token", false, "the node enrolls only with a single-use join token besides matching hardware (pact node token create; docs/security.md)")
	return cmd
}

func (a *app) enroll(cmd *cobra.Command, args []string, o enrollOptions) error {
	node, problems := nodeArg(cmd.CommandPath(), args)
	if len(o.macs) == 0 {
		problems = append(problems, errors.New("no MAC address: pass --mac with at least one of the node's NICs, e.g. --mac 52:54:00:12:34:56 (or --batch FILE for many nodes)"))
	}
	ekHash := o.tpmEKHash
	if o.tpmEKCert != "" {
		switch h, err := ekHashFromCert(o.tpmEKCert); {
		case err != nil:
			problems = append(problems, fmt.Errorf("--tpm-ek-cert: %w", err))
		case ekHash != "" && !strings.EqualFold(strings.TrimSpace(ekHash), h):
			problems = append(problems, fmt.Errorf("--tpm-ek-hash %s is not the hash of the key in --tpm-ek-cert (%s); give one of them", ekHash, h))
		default:
			ekHash = h
		}
	}
	hw, err := hwid.Normalize(o.macs, o.bmcSerial, ekHash)
	err = errors.Join(err, hwid.CheckUnicast(hw.MACs))
	for _, e := range flatten(err) {
		if !errors.Is(e, hwid.ErrEmpty) { // reported above, with the flag to use
			problems = append(problems, e)
		}
	}
	if o.vcluster != "" {
		if err := pki.ValidateName("vcluster", o.vcluster); err != nil {
			problems = append(problems, err)
		}
	}
	if o.spiffeID != "" && pki.ValidateName("node", node) == nil {
		if err := validateSPIFFEID(node, o.spiffeID); err != nil {
			problems = append(problems, fmt.Errorf("--spiffe-id: %w", err))
		}
	}
	s, err := a.connect(cmd, problems)
	if err != nil {
		return err
	}
	defer s.close()

	req := &pactv1.RegisterNodeRequest{
		NodeId:   node,
		Hardware: &pactv1.HardwareIdentity{Macs: hw.MACs, BmcSerial: hw.BMCSerial, TpmEkHash: hw.EKHash},
		Vcluster: o.vcluster,
		SpiffeId: o.spiffeID,
	}
	if o.requireToken {
		req.Credentials = &pactv1.CredentialPolicy{RequireJoinToken: true}
	}
	resp, err := s.client.RegisterNode(cmd.Context(), req)
	if err != nil {
		return s.explain(action{verb: "register nodes", node: node, write: true, help: cmd.CommandPath(),
			denied: "registering nodes needs a credential with role platform-admin"}, err)
	}
	n := resp.GetNode()
	if n == nil { // a journal that answers success without the record
		n = &pactv1.Node{NodeId: node, Hardware: req.Hardware, State: pactv1.NodeState_NODE_STATE_REGISTERED, Vcluster: o.vcluster, SpiffeId: o.spiffeID}
	}
	v := NodeViewOf(n)
	if s.cfg.Output == outputJSON {
		return writeJSON(a.env.Stdout, nodeResult(n, resp.GetExists(), resultExists))
	}
	if resp.GetExists() {
		_, err = fmt.Fprintf(a.env.Stdout, "%s exists: already registered with this identity; nothing changed\n", printable(v.NodeID))
		return err
	}
	_, err = fmt.Fprintf(a.env.Stdout, "registered %s (macs %s)\n", printable(v.NodeID), printable(strings.Join(v.MACs, ", ")))
	return err
}

type listOptions struct {
	state      string
	vcluster   string
	unassigned bool
	mac        string
	bmcSerial  string
	issuer     []string
}

func (a *app) listCommand() *cobra.Command {
	var o listOptions
	cmd := &cobra.Command{
		Use:   "list [--state STATE] [--vcluster V | --unassigned] [--mac M] [--bmc-serial S] [--issuer SERIAL]",
		Short: "List the nodes of the enrollment registry",
		Long: `List the nodes of the enrollment registry, sorted by name: every node, or
only those in one state, in one vCluster, or in none (maintenance mode).
The filters combine. The table shortens long serials; -o json prints them in
full, as an array of the objects "pact node inspect -o json" prints.

STATE is registered, active, inactive or revoked, marked ",fenced" while an
operator has the node fenced (pact node fence) and ",released" while its
agent has stopped cleanly (SIGTERM) and released its certificate, until the
node enrolls again or is marked inactive. --state takes any of these, and
several joined by commas as the column shows them, every one of which must
hold: --state fenced, --state inactive,fenced, --state released.

--issuer lists the nodes whose current certificate was signed by the
journal intermediate of that serial, or by one of the intermediates of the
journal CA of that serial (pact journal intermediates lists both, with how
many nodes each has): during a root rollover, the nodes that still chain to
an old journal CA (docs/rollover.md).

LAST SEEN is when a journal last saw the node's stream (or its last
enrollment or renewal), relative to now; "-" if never. An empty VCLUSTER is
shown as (maintenance); other empty cells as "-".

A list is read from the answering journal's own copy of the registry, which
may lag the leader by a few milliseconds; after the table, stderr names that
journal and the Raft index its copy is at ("served by j2 at index 120").
"pact node inspect" always reads the latest.`,
		Example: `  # Every node
  pact node list

  # Nodes whose agent has not enrolled yet
  pact node list --state registered

  # Fenced nodes, and those whose agent was stopped (e.g. for an upgrade)
  pact node list --state fenced
  pact node list --state active,released

  # Active nodes of vCluster ml, and nodes in maintenance
  pact node list --state active --vcluster ml
  pact node list --unassigned

  # Which node has this NIC, or this BMC? (a swapped card, a found server)
  pact node list --mac 52:54:00:12:34:56
  pact node list --bmc-serial SN123

  # Names of active nodes, with jq
  pact node list --state active -o json | jq -r '.[].node_id'

  # Nodes still under an old journal CA (pact journal intermediates --journal-cas)
  pact node list --issuer 3f2a9c...`,
		Args: cobra.ArbitraryArgs,
		RunE: a.action(func(cmd *cobra.Command, args []string) error {
			return a.list(cmd, args, o)
		}),
	}
	f := cmd.Flags()
	f.StringVar(&o.state, "state", "", "only nodes in this state (registered, active, inactive or revoked), fenced or released nodes, or both as the STATE column shows them (inactive,fenced)")
	f.StringVar(&o.vcluster, "vcluster", "", "only nodes in this vCluster")
	f.BoolVar(&o.unassigned, "unassigned", false, "only nodes in no vCluster (maintenance mode)")
	f.StringVar(&o.mac, "mac", "", "only the node with this MAC address (any common form)")
	f.StringVar(&o.bmcSerial, "bmc-serial", "", "only the node with this BMC serial (exact, case-sensitive, as registered)")
	f.StringSliceVar(&o.issuer, "issuer", nil, "only nodes whose current certificate this journal intermediate, or an intermediate of this journal CA, signed (serials from pact journal intermediates; several comma-separated)")
	return cmd
}

func (a *app) list(cmd *cobra.Command, args []string, o listOptions) error {
	var problems []error
	if len(args) > 0 {
		problems = append(problems, fmt.Errorf("%s takes no arguments, got %q; to see one node use: pact node inspect %s", cmd.CommandPath(), args[0], args[0]))
	}
	state, err := parseState(o.state)
	if err != nil {
		problems = append(problems, err)
	}
	if o.vcluster != "" {
		if err := pki.ValidateName("vcluster", o.vcluster); err != nil {
			problems = append(problems, err)
		}
		if o.unassigned {
			problems = append(problems, errors.New("--vcluster and --unassigned exclude each other: a node in a vCluster is not unassigned; pass one"))
		}
	}
	if o.mac != "" {
		m, err := hwid.NormalizeMAC(o.mac)
		if err != nil {
			problems = append(problems, fmt.Errorf("--mac: %w", err))
		}
		o.mac = m
	}
	if o.bmcSerial != "" {
		b, err := hwid.NormalizeBMCSerial(o.bmcSerial)
		if err != nil {
			problems = append(problems, fmt.Errorf("--bmc-serial: %w", err))
		}
		o.bmcSerial = b
	}
	s, err := a.connect(cmd, problems)
	if err != nil {
		return err
	}
	defer s.close()

	req := &pactv1.ListNodesRequest{State: state.state, Fenced: state.fenced, Released: state.released,
		Vcluster: o.vcluster, Unassigned: o.unassigned, Mac: o.mac, BmcSerial: o.bmcSerial, PageSize: listPageSize}
	var nodes []*pactv1.Node
	var pages []*pactv1.ListNodesResponse
	for {
		resp, err := s.client.ListNodes(cmd.Context(), req, grpc.MaxCallRecvMsgSize(maxListAnswer))
		if err != nil {
			return s.explain(action{verb: "list nodes", help: cmd.CommandPath()}, err)
		}
		nodes = append(nodes, resp.GetNodes()...)
		pages = append(pages, resp)
		next := resp.GetNextPageToken()
		if next == "" {
			break
		}
		if next == req.GetPageToken() || len(pages) >= maxListPages {
			msg := fmt.Sprintf("journal %s gave page %d of the list the token of a page already read; this is a journal fault: check the journal's log", printable(resp.GetServedBy()), len(pages))
			return &hintError{msg: msg, err: errors.New(msg)}
		}
		req.PageToken = next
	}
	resp := servedRange(pages)
	views := slices.DeleteFunc(nodeViews(nodes), func(v NodeView) bool { return !state.match(v) })
	also := map[string]string{}
	for _, p := range pages {
		for id, text := range p.GetAlsoActive() {
			also[id] = text
		}
	}
	for i := range views {
		if text, ok := also[views[i].NodeID]; ok {
			views[i].AlsoActive = strings.Split(text, "; ")
		}
	}
	if len(o.issuer) > 0 {
		under, err := a.intermediatesUnder(cmd, s, o.issuer)
		if err != nil {
			return err
		}
		views = slices.DeleteFunc(views, func(v NodeView) bool { return !under[v.CertIssuerSerial] })
	}
	if s.cfg.Output == outputJSON {
		return writeJSON(a.env.Stdout, views)
	}
	if len(views) == 0 {
		var filters []string
		if f := state.String(); f != "" {
			filters = append(filters, "in state "+f)
		}
		if o.vcluster != "" {
			filters = append(filters, "in vCluster "+o.vcluster)
		}
		if o.unassigned {
			filters = append(filters, "in maintenance (no vCluster)")
		}
		if o.mac != "" {
			filters = append(filters, "with MAC "+o.mac)
		}
		if o.bmcSerial != "" {
			filters = append(filters, "with BMC serial "+printable(o.bmcSerial)+" (serials match exactly, case-sensitive)")
		}
		if len(o.issuer) > 0 {
			filters = append(filters, "with a current certificate under "+printable(strings.Join(o.issuer, ", ")))
		}
		if len(filters) > 0 {
			fmt.Fprintf(a.env.Stderr, "no nodes %s\n", strings.Join(filters, ", "))
		} else {
			fmt.Fprintln(a.env.Stderr, "no nodes registered; register one with: pact node enroll NODE --mac MAC")
		}
		a.servedBy(resp)
		return nil
	}
	if err := writeNodeTable(a.env.Stdout, views, a.env.Now()); err != nil {
		return err
	}
	for _, v := range views {
		for _, text := range v.AlsoActive {
			fmt.Fprintf(a.env.Stderr, "note: node %s is also active in domain %s\n", printable(v.NodeID), printable(text))
		}
	}
	a.servedBy(resp)
	return nil
}

// intermediatesUnder resolves --issuer: each serial an intermediate's, or
// a journal CA's (then every intermediate it signed). A serial the
// registry does not hold is a usage error naming where to find them.
func (a *app) intermediatesUnder(cmd *cobra.Command, s *session, serials []string) (map[string]bool, error) {
	resp, err := s.client.ListIntermediates(cmd.Context(), &pactv1.ListIntermediatesRequest{})
	if err != nil {
		return nil, s.explain(action{verb: "list intermediates", help: cmd.CommandPath()}, err)
	}
	under := map[string]bool{}
	var unknown []error
	for _, want := range serials {
		want = strings.ToLower(strings.TrimSpace(want))
		found := false
		for _, in := range resp.GetIntermediates() {
			if in.GetSerial() == want || (in.GetIssuerSerial() != "" && in.GetIssuerSerial() == want) {
				under[in.GetSerial()], found = true, true
			}
		}
		if !found && !slices.ContainsFunc(resp.GetJournalCas(), func(jc *pactv1.JournalCA) bool { return jc.GetSerial() == want }) {
			unknown = append(unknown, fmt.Errorf("--issuer %s: no intermediate or journal CA of that serial in the registry; pact journal intermediates lists them", printable(want)))
		}
	}
	if len(unknown) > 0 {
		return nil, newUsage(cmd.CommandPath(), unknown...)
	}
	return under, nil
}

const (
	// listPageSize is how many nodes pact node list asks for at a time,
	// the most a journal gives (about 1.3 MB of active nodes; a journal
	// also ends a page at about 2 MiB): each page costs the journal a
	// sort of the whole registry, so fewer pages list a large one faster
	// (100,000 nodes: 5.8 s in pages of 1,000).
	listPageSize = 5000
	// maxListAnswer is the largest answer pact node list accepts: a
	// journal from before paging sends every node at once (about 260
	// bytes each), and 64 MiB holds some 250,000.
	maxListAnswer = 64 << 20
	// maxListPages ends a list whose pages do not end (a journal fault):
	// fifty million nodes at the page size.
	maxListPages = 10000
)

// listServed is which journals' copies a list came from.
type listServed struct {
	by       []string
	from, to uint64
	pages    int
}

func servedRange(pages []*pactv1.ListNodesResponse) listServed {
	var s listServed
	seen := map[string]bool{}
	for i, p := range pages {
		if b := p.GetServedBy(); b != "" && !seen[b] {
			seen[b] = true
			s.by = append(s.by, printable(b))
		}
		ix := p.GetAppliedIndex()
		if i == 0 || ix < s.from {
			s.from = ix
		}
		s.to = max(s.to, ix)
	}
	s.pages = len(pages)
	return s
}

// servedBy notes on stderr which journal's copy a list came from: a list
// may lag the leader by a moment, inspect never does. A list of several
// pages was read page by page, not as one snapshot: the note gives the
// range of indexes. Journals that do not say get no note.
func (a *app) servedBy(s listServed) {
	if len(s.by) == 0 {
		return
	}
	if s.pages <= 1 {
		fmt.Fprintf(a.env.Stderr, "served by %s at index %d\n", s.by[0], s.to)
		return
	}
	at := fmt.Sprintf("index %d", s.to)
	if s.from != s.to {
		at = fmt.Sprintf("indexes %d-%d", s.from, s.to)
	}
	fmt.Fprintf(a.env.Stderr, "served by %s at %s, in %d pages\n", strings.Join(s.by, ", "), at, s.pages)
}

func (a *app) inspectCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "inspect NODE",
		Short: "Show one node's registry record",
		Long: `Show everything the registry holds about one node: state, vCluster,
hardware identity, current certificate (full serial, expiry, issuing
intermediate), when and by whom it was registered, activated and revoked,
and when a journal last saw it. No key material is ever stored in the
registry, so none is shown.`,
		Example: `  pact node inspect node-001

  # Certificate expiry, with jq
  pact node inspect node-001 -o json | jq -r .cert_not_after`,
		Args: cobra.ArbitraryArgs,
		RunE: a.action(func(cmd *cobra.Command, args []string) error {
			return a.inspect(cmd, args)
		}),
	}
	return cmd
}

func (a *app) inspect(cmd *cobra.Command, args []string) error {
	node, problems := nodeArg(cmd.CommandPath(), args)
	s, err := a.connect(cmd, problems)
	if err != nil {
		return err
	}
	defer s.close()

	resp, err := s.client.InspectNode(cmd.Context(), &pactv1.InspectNodeRequest{NodeId: node})
	if err != nil {
		return s.explain(action{verb: "inspect nodes", node: node, help: cmd.CommandPath()}, err)
	}
	if resp.GetNode() == nil {
		msg := "the journal answered without a record for " + node + "; this is a journal fault: check the journal's log"
		return &hintError{msg: msg, err: errors.New(msg)}
	}
	v := NodeViewOf(resp.GetNode())
	v.AlsoActive = resp.GetAlsoActive()
	if s.cfg.Output == outputJSON {
		return writeJSON(a.env.Stdout, v)
	}
	return writeNodeBlock(a.env.Stdout, v, a.env.Now())
}
