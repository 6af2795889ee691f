package raftfsm

// DeclaredOps exposes the oneof cases of Command to the tests.
var DeclaredOps = declaredOps
