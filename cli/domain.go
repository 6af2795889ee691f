package cli

import (
	"fmt"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	pactv1 "github.com/pact-hpc/pact/proto/pact/v1"
)

// FederatedDomainView is the JSON output of pact domain list, federate and
// remove: one federated domain.
type FederatedDomainView struct {
	Name              string    `json:"name"`
	Endpoints         []string  `json:"endpoints"`
	EndpointSPIFFEID  string    `json:"endpoint_spiffe_id,omitempty"`
	Policy            string    `json:"policy"`
	Sequence          uint64    `json:"sequence"`
	RefreshHint       string    `json:"refresh_hint,omitempty"`
	FetchedAt         time.Time `json:"fetched_at"`
	BundleAgeSeconds  int64     `json:"bundle_age_seconds"`
	AuthoritiesSHA256 []string  `json:"authorities_sha256"`
	AddedAt           time.Time `json:"added_at"`
	AddedBy           string    `json:"added_by"`
}

func federatedDomainViewOf(v *pactv1.FederatedDomainView, now time.Time) FederatedDomainView {
	out := FederatedDomainView{
		Name:              v.GetName(),
		Endpoints:         append([]string{}, v.GetEndpoints()...),
		EndpointSPIFFEID:  v.GetEndpointSpiffeId(),
		Policy:            v.GetPolicy(),
		Sequence:          v.GetSequence(),
		FetchedAt:         time.Unix(0, v.GetFetchedAtUnixNano()).UTC(),
		AuthoritiesSHA256: append([]string{}, v.GetAuthoritiesSha256()...),
		AddedAt:           time.Unix(0, v.GetAddedAtUnixNano()).UTC(),
		AddedBy:           v.GetAddedBy(),
	}
	if h := v.GetRefreshHintSeconds(); h > 0 {
		out.RefreshHint = (time.Duration(h) * time.Second).String()
	}
	out.BundleAgeSeconds = max(int64(now.Sub(out.FetchedAt)/time.Second), 0)
	return out
}

func (a *app) domainCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "domain",
		Short: "Federate this domain with other pact domains (or SPIRE trust domains): federate, list, remove",
		Long: `A site may run several pact domains, each with its own quorum and root, and
register one machine in several of them (ADR-008): Active in one at a time.
Federating two domains lets each fetch the other's trust bundle from its
SPIFFE bundle endpoint (pact-journal --bundle-endpoint-listen), so their
journals can tell each other which hardware they hold Active.

Federation grants nothing by itself: a certificate of a federated domain
authenticates nothing on this domain's node or operator paths. See
docs/domains.md.`,
		Example: `  pact domain federate b.example --endpoint https://10.1.0.1:8443/ --bundle b-ca.pem
  pact domain list -o json
  pact domain remove b.example`,
	}
	a.group(cmd)
	cmd.AddCommand(a.domainFederateCommand(), a.domainListCommand(), a.domainRemoveCommand())
	return cmd
}

func (a *app) domainFederateCommand() *cobra.Command {
	var endpoints []string
	var bundle, endpointID, policy string
	cmd := &cobra.Command{
		Use:   "federate NAME --endpoint URL --bundle FILE",
		Short: "Federate with domain NAME, or change its endpoints, bootstrap bundle or policy (platform-admin)",
		Long: `Record in Raft that this quorum federates with domain NAME (its domain id,
which is its SPIFFE trust domain): the bundle endpoints to fetch its trust
bundle from (https_spiffe profile, tried in order), and FILE, its bundle to
begin with (the other domain's ca.pem, or a SPIRE server's bundle in PEM).
The endpoint must present an X.509-SVID of NAME that chains to that bundle:
any journal of NAME (spiffe://NAME/pact-journal/ID), or the one
--endpoint-id names (a SPIRE server's).

The leader fetches the bundle at once and then as its refresh hint says (30s
to 1h); when the endpoint cannot be reached it keeps the last good one, and
pact_journal_federated_bundle_age_seconds grows (PactFederatedBundleStale).

--policy says what an enrollment of hardware NAME holds Active does: warn
(the default: enroll, audit, and show it on the node) or refuse (a
retryable refusal naming NAME). Federating again with the same NAME replaces
the record. Needs quorum feature level 3. Audited as domain-federate.`,
		Example: `  pact domain federate b.example --endpoint https://10.1.0.1:8443/ --endpoint https://10.1.0.2:8443/ --bundle b-ca.pem
  pact domain federate spire.example --endpoint https://spire.example:8443/ \
    --endpoint-id spiffe://spire.example/spire/server --bundle spire-bundle.pem --policy refuse`,
		Args: cobra.ArbitraryArgs,
		RunE: a.action(func(cmd *cobra.Command, args []string) error {
			var problems []error
			if len(args) != 1 {
				problems = append(problems, fmt.Errorf("%s takes NAME, got %d arguments", cmd.CommandPath(), len(args)))
			}
			if len(endpoints) == 0 {
				problems = append(problems, fmt.Errorf("--endpoint: give the other domain's bundle endpoint URL (https://HOST:PORT/)"))
			}
			var pemBytes []byte
			if bundle == "" {
				problems = append(problems, fmt.Errorf("--bundle: give the other domain's root certificates (its ca.pem) as FILE"))
			} else {
				var err error
				if pemBytes, err = os.ReadFile(bundle); err != nil {
					problems = append(problems, fmt.Errorf("--bundle: %w", err))
				}
			}
			if policy != "warn" && policy != "refuse" {
				problems = append(problems, fmt.Errorf("--policy %q: want warn or refuse", policy))
			}
			s, err := a.connect(cmd, problems)
			if err != nil {
				return err
			}
			defer s.close()
			resp, err := s.client.FederateDomain(cmd.Context(), &pactv1.FederateDomainRequest{
				Name: args[0], Endpoints: endpoints, EndpointSpiffeId: endpointID, X509Authorities: [][]byte{pemBytes}, Policy: policy,
			})
			if err != nil {
				return s.explain(action{verb: "federate domains", write: true, help: cmd.CommandPath()}, err)
			}
			out := federatedDomainViewOf(resp.GetDomain(), a.env.Now())
			if s.cfg.Output == outputJSON {
				return writeJSON(a.env.Stdout, out)
			}
			fmt.Fprintf(a.env.Stdout, "federated with domain %s (policy %s, %d root(s)); the leader fetches its bundle from %s now\n",
				out.Name, out.Policy, len(out.AuthoritiesSHA256), strings.Join(out.Endpoints, ", "))
			return nil
		}),
	}
	cmd.Flags().StringArrayVar(&endpoints, "endpoint", nil, "the other domain's SPIFFE bundle endpoint URL (repeat for each journal's)")
	cmd.Flags().StringVar(&bundle, "bundle", "", "PEM file of the other domain's bundle to begin with (its ca.pem)")
	cmd.Flags().StringVar(&endpointID, "endpoint-id", "", "SPIFFE ID the endpoint presents (default: any spiffe://NAME/pact-journal/ID)")
	cmd.Flags().StringVar(&policy, "policy", "warn", "what an enrollment of hardware the domain holds Active does: warn or refuse")
	return cmd
}

func (a *app) domainListCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "list",
		Short: "List the domains this quorum federates with, and how old each bundle is",
		Long: `List the domains this quorum federates with (pact domain federate): each
one's policy, the spiffe_sequence of the bundle held for it, how long ago
that bundle was fetched (or given), its roots and its bundle endpoints. A
bundle age well past the refresh hint means the leader cannot reach the
domain's endpoints and keeps the last good bundle (PactFederatedBundleStale).
Any operator role may list.`,
		Example: `  pact domain list
  pact domain list -o json | jq '.[] | {name, bundle_age_seconds}'`,
		Args: cobra.NoArgs,
		RunE: a.action(func(cmd *cobra.Command, _ []string) error {
			s, err := a.connect(cmd, nil)
			if err != nil {
				return err
			}
			defer s.close()
			resp, err := s.client.ListFederatedDomains(cmd.Context(), &pactv1.ListFederatedDomainsRequest{})
			if err != nil {
				return s.explain(action{verb: "list federated domains", help: cmd.CommandPath()}, err)
			}
			now := a.env.Now()
			out := []FederatedDomainView{}
			for _, d := range resp.GetDomains() {
				out = append(out, federatedDomainViewOf(d, now))
			}
			if s.cfg.Output == outputJSON {
				return writeJSON(a.env.Stdout, out)
			}
			if len(out) == 0 {
				fmt.Fprintln(a.env.Stdout, "this quorum federates with no domain (pact domain federate)")
				return nil
			}
			tw := tabwriter.NewWriter(a.env.Stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "DOMAIN\tPOLICY\tSEQUENCE\tBUNDLE AGE\tROOTS\tENDPOINTS")
			for _, v := range out {
				fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%d\t%s\n", v.Name, v.Policy, v.Sequence, time.Duration(v.BundleAgeSeconds)*time.Second, len(v.AuthoritiesSHA256), strings.Join(v.Endpoints, " "))
			}
			return tw.Flush()
		}),
	}
}

func (a *app) domainRemoveCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "remove NAME",
		Short: "End the federation with domain NAME: its bundle authenticates nothing from now on (platform-admin)",
		Long: `Remove domain NAME from the domains this quorum federates with. From the
commit on its bundle is no longer refreshed and authenticates nothing.
Audited as domain-remove. Needs quorum feature level 3.`,
		Example: `  pact domain remove b.example`,
		Args:    cobra.ArbitraryArgs,
		RunE: a.action(func(cmd *cobra.Command, args []string) error {
			var problems []error
			if len(args) != 1 {
				problems = append(problems, fmt.Errorf("%s takes NAME, got %d arguments", cmd.CommandPath(), len(args)))
			}
			s, err := a.connect(cmd, problems)
			if err != nil {
				return err
			}
			defer s.close()
			resp, err := s.client.RemoveFederatedDomain(cmd.Context(), &pactv1.RemoveFederatedDomainRequest{Name: args[0]})
			if err != nil {
				return s.explain(action{verb: "remove federated domains", write: true, help: cmd.CommandPath(), notFound: "pact domain list shows the domains this quorum federates with"}, err)
			}
			out := federatedDomainViewOf(resp.GetDomain(), a.env.Now())
			if s.cfg.Output == outputJSON {
				return writeJSON(a.env.Stdout, out)
			}
			fmt.Fprintf(a.env.Stdout, "federation with domain %s removed\n", out.Name)
			return nil
		}),
	}
}
