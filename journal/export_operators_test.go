package journal

import (
	"context"
	"crypto"
	"crypto/x509"
	"reflect"
	"unsafe"

	pactv1 "github.com/pact-hpc/pact/proto/pact/v1"
)

// IntermediateKeyForTest returns this journal's current intermediate key,
// with the intermediate certificate and the journal CA that signed it (nil
// in the legacy layout).
//
// The key never leaves journal/ca's intermediate struct, and no code of
// the journal hands it out: this reads it out of the running process's
// memory, as an attacker who can read a journal's memory (or who kept the
// memory of a journal since removed) would. It stands in for that attack
// in the tests of what such a key can and cannot authorize.
func (j *Journal) IntermediateKeyForTest() (crypto.Signer, *x509.Certificate, *x509.Certificate) {
	cur := reflect.ValueOf(j.ca).Elem().FieldByName("cur")
	cur = reflect.NewAt(cur.Type(), unsafe.Pointer(cur.UnsafeAddr())) // *atomic.Pointer[intermediate]
	in := cur.MethodByName("Load").Call(nil)[0].Elem()                // the intermediate, read once
	field := func(v reflect.Value, name string) any {
		f := v.FieldByName(name)
		return reflect.NewAt(f.Type(), unsafe.Pointer(f.UnsafeAddr())).Elem().Interface()
	}
	key := field(in, "key").(crypto.Signer)
	cert := field(in, "cert").(*x509.Certificate)
	issuer := reflect.ValueOf(field(in, "issuer")).Elem()
	if field(issuer, "legacy").(bool) {
		return key, cert, nil
	}
	return key, cert, field(issuer, "cert").(*x509.Certificate)
}

// RecordOperatorForTest commits op through Raft as actor, as the release
// before operator credentials had to be issued by the quorum recorded any
// credential at its first use, whatever signed it.
func (j *Journal) RecordOperatorForTest(ctx context.Context, actor string, op *pactv1.Operator) error {
	_, err := j.propose(ctx, &pactv1.Command{Actor: actor, Op: &pactv1.Command_RecordOperator{RecordOperator: &pactv1.RecordOperatorOp{Operator: op}}})
	return err
}
