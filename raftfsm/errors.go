package raftfsm

import (
	"errors"
	"fmt"
)

// Rule errors: the typed results of commands that broke a registry rule.
// Apply returns them inside a *Result; they are never panics.
var (
	ErrNodeNotEnrolled          = errors.New("raftfsm: node not enrolled")
	ErrNodeAlreadyEnrolled      = errors.New("raftfsm: node already enrolled")
	ErrHardwareIdentityConflict = errors.New("raftfsm: hardware identity conflict")
	ErrNodeRevoked              = errors.New("raftfsm: node revoked")
	ErrAlreadyActive            = errors.New("raftfsm: node already active")
	ErrStaleCertificate         = errors.New("raftfsm: certificate is not the node's current one")
	ErrInvalidCommand           = errors.New("raftfsm: invalid command")
	ErrVClusterChanged          = errors.New("raftfsm: vcluster changed")
)

// errorCodes ties each rule error to its wire form so a replica's result can
// be carried in a forwarded response without losing its type.
var errorCodes = []struct {
	err  error
	code string
}{
	{ErrNodeNotEnrolled, "NODE_NOT_ENROLLED"},
	{ErrNodeAlreadyEnrolled, "NODE_ALREADY_ENROLLED"},
	{ErrHardwareIdentityConflict, "HARDWARE_IDENTITY_CONFLICT"},
	{ErrNodeRevoked, "NODE_REVOKED"},
	{ErrAlreadyActive, "ALREADY_ACTIVE"},
	{ErrStaleCertificate, "STALE_CERTIFICATE"},
	{ErrInvalidCommand, "INVALID_ARGUMENT"},
	{ErrVClusterChanged, "VCLUSTER_CHANGED"},
}

// ErrorCode returns the stable code of a rule error, or "" if err is none.
func ErrorCode(err error) string {
	for _, e := range errorCodes {
		if errors.Is(err, e.err) {
			return e.code
		}
	}
	return ""
}

// ErrorFromCode rebuilds a rule error carried across the wire by its code,
// so errors.Is works on a forwarded result. Unknown codes return nil.
func ErrorFromCode(code, msg string) error {
	for _, e := range errorCodes {
		if e.code == code {
			return fmt.Errorf("%w: %s", e.err, msg)
		}
	}
	return nil
}
