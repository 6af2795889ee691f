package auth

import (
	"context"
	"crypto/x509"
	"strings"

	"github.com/pact-hpc/pact/internal/pki"
	pactv1 "github.com/pact-hpc/pact/proto/pact/v1"
)

// Principal is an authenticated caller.
type Principal struct {
	ID     pki.Identity
	Role   string // operators only
	Serial string
	SPKI   string
	Leaf   *x509.Certificate
	// Chain is what a peer journal sent, leaf first (journals only).
	Chain []*x509.Certificate
	// Unpublished is, for a peer journal, the intermediate on its verified
	// path when Raft has not published it (nil when it has): the only
	// thing such a journal may do is publish that one.
	Unpublished *x509.Certificate
	// SVID is set when an agent authenticated with a SPIRE X.509-SVID
	// rather than a journal-signed certificate; SPIFFEID is the SVID's ID.
	SVID     bool
	SPIFFEID string
	// Replaced is set on a RenewCert call whose certificate the registry
	// no longer holds: the handler answers it only as the retry of the
	// renewal that replaced it (same new key), and refuses it stale
	// otherwise.
	Replaced bool
}

// spireIdentitySource is what Ping reports for an SVID-authenticated agent.
const spireIdentitySource = "spiffe"

// IdentitySource names where an agent's identity came from (Ping).
func (p *Principal) IdentitySource() string {
	if p.SVID {
		return spireIdentitySource
	}
	return "journal"
}

// Actor is how the audit names an operator.
func (p *Principal) Actor() string { return "admin/" + p.ID.Name }

type principalKey struct{}

// FromContext returns the caller the interceptors authenticated, or nil
// (a public method).
func FromContext(ctx context.Context) *Principal {
	p, _ := ctx.Value(principalKey{}).(*Principal)
	return p
}

// NewContext returns ctx carrying the authenticated caller p: what the
// interceptors give the handlers (journal/v1rpc), as grpc's peer.NewContext
// carries the peer.
func NewContext(ctx context.Context, p *Principal) context.Context {
	return context.WithValue(ctx, principalKey{}, p)
}

// policy says who may call a method. Methods not listed are refused.
type policy struct {
	public bool // no client certificate needed (Enroll)
	peer   bool // another journal of the quorum
	agent  bool // an agent bound to its current certificate
	// replaced lets an agent whose certificate a renewal replaced through
	// to the handler (Principal.Replaced), to ask for that renewal's
	// answer again.
	replaced bool
	admin    func(role string) bool // an operator whose role passes
}

func anyRole(string) bool { return true }

// PlatformAdmin reports whether role may administer the whole platform.
func PlatformAdmin(role string) bool { return role == pki.RolePlatformAdmin }

func assigner(role string) bool { return PlatformAdmin(role) || OpsVCluster(role) != "" }

// OpsVCluster is the vCluster of a pact-ops-{vcluster} role, or "".
func OpsVCluster(role string) string {
	if strings.HasPrefix(role, pki.RoleOpsPrefix) && len(role) > len(pki.RoleOpsPrefix) {
		return role[len(pki.RoleOpsPrefix):]
	}
	return ""
}

var policies = map[string]policy{
	pactv1.EnrollmentService_Enroll_FullMethodName:       {public: true},
	pactv1.EnrollmentService_RenewCert_FullMethodName:    {agent: true, replaced: true},
	pactv1.EnrollmentService_Subscribe_FullMethodName:    {agent: true},
	pactv1.EnrollmentService_Ping_FullMethodName:         {agent: true},
	pactv1.EnrollmentService_IssueStandby_FullMethodName: {agent: true},
	pactv1.EnrollmentService_Release_FullMethodName:      {agent: true},
	pactv1.EnrollmentService_AttestBoot_FullMethodName:   {agent: true},
	pactv1.AdminService_RegisterNode_FullMethodName:      {admin: PlatformAdmin},
	pactv1.AdminService_RegisterNodes_FullMethodName:     {admin: PlatformAdmin},
	pactv1.AdminService_DecommissionNode_FullMethodName:  {admin: PlatformAdmin},
	pactv1.AdminService_UpdateNode_FullMethodName:        {admin: PlatformAdmin},
	// The vCluster rules for pact-ops roles are checked in the handlers,
	// against the node's current assignment.
	pactv1.AdminService_AssignNode_FullMethodName:         {admin: assigner},
	pactv1.AdminService_UnassignNode_FullMethodName:       {admin: assigner},
	pactv1.AdminService_MoveNode_FullMethodName:           {admin: assigner},
	pactv1.AdminService_ListNodes_FullMethodName:          {admin: anyRole},
	pactv1.AdminService_InspectNode_FullMethodName:        {admin: anyRole},
	pactv1.AdminService_ListAudit_FullMethodName:          {admin: anyRole},
	pactv1.AdminService_JournalStatus_FullMethodName:      {admin: anyRole},
	pactv1.AdminService_AddJournal_FullMethodName:         {admin: PlatformAdmin},
	pactv1.AdminService_RemoveJournal_FullMethodName:      {admin: PlatformAdmin},
	pactv1.AdminService_CreateJoinToken_FullMethodName:    {admin: PlatformAdmin},
	pactv1.AdminService_ListJoinTokens_FullMethodName:     {admin: anyRole},
	pactv1.AdminService_RevokeJoinTokens_FullMethodName:   {admin: PlatformAdmin},
	pactv1.AdminService_FenceNode_FullMethodName:          {admin: PlatformAdmin},
	pactv1.AdminService_UnfenceNode_FullMethodName:        {admin: PlatformAdmin},
	pactv1.AdminService_SaveSnapshot_FullMethodName:       {admin: PlatformAdmin},
	pactv1.JournalPeerService_Propose_FullMethodName:      {peer: true},
	pactv1.JournalPeerService_ReadIndex_FullMethodName:    {peer: true},
	pactv1.JournalPeerService_MemberStatus_FullMethodName: {peer: true},
	pactv1.JournalPeerService_BootEvidence_FullMethodName: {peer: true},

	// Any operator may renew its own credential; the handler checks that
	// only a platform-admin issues for another name or role.
	pactv1.AdminService_IssueOperator_FullMethodName:      {admin: anyRole},
	pactv1.AdminService_ListOperators_FullMethodName:      {admin: anyRole},
	pactv1.AdminService_RevokeOperator_FullMethodName:     {admin: PlatformAdmin},
	pactv1.AdminService_RetireIntermediate_FullMethodName: {admin: PlatformAdmin},
	pactv1.AdminService_ListIntermediates_FullMethodName:  {admin: anyRole},
	pactv1.AdminService_RevokeJournalCA_FullMethodName:    {admin: PlatformAdmin},
	pactv1.AdminService_RecordJournalCA_FullMethodName:    {admin: PlatformAdmin},
	// Federation (docs/domains.md): a federated domain's bundle decides
	// which of its journals may call the claim feed.
	pactv1.AdminService_FederateDomain_FullMethodName:        {admin: PlatformAdmin},
	pactv1.AdminService_ListFederatedDomains_FullMethodName:  {admin: anyRole},
	pactv1.AdminService_RemoveFederatedDomain_FullMethodName: {admin: PlatformAdmin},
	// Boot policies (docs/tpm.md): platform-admin sets and removes; any
	// role lists and captures (a capture sets nothing).
	pactv1.BootPolicyService_SetBootPolicy_FullMethodName:     {admin: PlatformAdmin},
	pactv1.BootPolicyService_RemoveBootPolicy_FullMethodName:  {admin: PlatformAdmin},
	pactv1.BootPolicyService_ListBootPolicies_FullMethodName:  {admin: anyRole},
	pactv1.BootPolicyService_CaptureBootPolicy_FullMethodName: {admin: anyRole},
}

// OperatorRecord is what the registry keeps of an operator certificate.
func OperatorRecord(cert *x509.Certificate, name, role, issuedBy string) *pactv1.Operator {
	return &pactv1.Operator{
		Name:          name,
		Role:          role,
		Serial:        pki.SerialHex(cert.SerialNumber),
		NotBeforeUnix: cert.NotBefore.Unix(),
		NotAfterUnix:  cert.NotAfter.Unix(),
		IssuedBy:      issuedBy,
		SpkiSha256:    pki.SPKIFingerprint(cert),
	}
}

func shortMethod(full string) string {
	if i := strings.LastIndex(full, "/"); i >= 0 {
		return full[i+1:]
	}
	return full
}
