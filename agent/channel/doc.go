// Package channel is the agent's live gRPC channel to the journals: the
// dual-channel swap on renewal, and the client TLS credentials that explain
// a failed handshake (an untrusted journal, a journal's busy answer).
//
// A Rotator holds one live mTLS channel to a journal and moves it from one
// identity to the next without a gap: a new channel is built,
// health-checked (Ping must answer for this node and this certificate, with
// a clock close to ours) and streaming (Subscribe has delivered its first
// event) before it replaces the old one, which is drained of its in-flight
// calls and closed. A journal renewal runs inside a rotation (Rotate), so
// calls the journal refuses as STALE_CERTIFICATE once the renewal has
// committed are retried on the new channel.
//
// The identities themselves come from package identity: its providers and
// cascade say which identity the channel should present; this package only
// presents it. It knows the journal's wire protocol (Ping, Subscribe,
// STALE_CERTIFICATE) so that package identity need not.
package channel
