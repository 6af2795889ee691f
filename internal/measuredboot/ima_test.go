package measuredboot_test

import (
	"bytes"
	"crypto"
	"encoding/binary"
	"errors"
	"strings"
	"testing"

	"github.com/pact-hpc/pact/internal/measuredboot"
	"github.com/pact-hpc/pact/internal/measuredboot/imatest"
	pactv1 "github.com/pact-hpc/pact/proto/pact/v1"
)

var (
	imaSlurm = imatest.File{Path: "/usr/sbin/slurmd", Content: []byte("slurmd 24.05")}
	imaMunge = imatest.File{Path: "/usr/sbin/munged", Content: []byte("munged 0.5")}
	imaTmp   = imatest.File{Path: "/tmp/job.sh", Content: []byte("#!/bin/sh")}
)

func quotedPCR10(l imatest.List) map[int][]byte { return map[int][]byte{10: l.PCR10()} }

// The list replays to the quoted PCR 10, and each entry keeps its file's
// path and digest.
func TestReplayIMA(t *testing.T) {
	list := imatest.Runtime(imaSlurm, imaMunge)
	got, err := measuredboot.ReplayIMA(list.Bytes(), crypto.SHA256, quotedPCR10(list))
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(list) {
		t.Fatalf("%d entries, want %d", len(got), len(list))
	}
	for i, e := range got {
		if e.Path != list[i].Path || e.FileDigestAlg != "sha256" || !bytes.Equal(e.FileDigest, list[i].FileDigest()) || e.PCR != 10 || e.Template != "ima-ng" || e.Violation {
			t.Errorf("entry %d: %+v, want %s with its SHA-256", i, e, list[i].Path)
		}
	}
}

// The list grows while the node runs and the agent reads it after its
// quote: what the quote covers is kept, the rest dropped unverified.
func TestReplayIMAKeepsWhatTheQuoteCovers(t *testing.T) {
	atQuote := imatest.Runtime(imaSlurm)
	later := append(append(imatest.List{}, atQuote...), imaMunge, imaTmp)
	got, err := measuredboot.ReplayIMA(later.Bytes(), crypto.SHA256, quotedPCR10(atQuote))
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(atQuote) || got[len(got)-1].Path != imaSlurm.Path {
		t.Errorf("kept %+v, want the %d entries the quote covers", got, len(atQuote))
	}
}

func TestReplayIMARefuses(t *testing.T) {
	list := imatest.Runtime(imaSlurm, imaMunge)
	good := list.Bytes()
	// The munged entry claims another file content: the template data and
	// its SHA-1 agree, but PCR 10 was extended with the real one.
	forged := append(imatest.List{}, list...)
	forged[2] = imatest.File{Path: imaMunge.Path, Content: []byte("munged, trojaned")}
	badSHA1 := bytes.Clone(good)
	badSHA1[4] ^= 1 // the first entry's template digest
	legacy := legacyIMAEntry()
	cases := []struct {
		name   string
		list   []byte
		quoted map[int][]byte
		want   string
	}{
		{"a forged entry", forged.Bytes(), quotedPCR10(list), "no prefix"},
		{"a template digest that is not its data's", badSHA1, quotedPCR10(list), "SHA-1 template digest"},
		{"PCR 10 not quoted", good, map[int][]byte{9: list.PCR10()}, "not quoted"},
		{"an empty list", nil, quotedPCR10(list), "empty"},
		{"the legacy ima template", legacy, map[int][]byte{10: make([]byte, 32)}, "ima_template=ima-ng"},
		{"a list too long", make([]byte, measuredboot.MaxIMALog+1), quotedPCR10(list), "more than"},
		{"another PCR 10 (another boot)", good, quotedPCR10(imatest.Runtime(imaMunge)), "no prefix"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := measuredboot.ReplayIMA(tc.list, crypto.SHA256, tc.quoted)
			if !errors.Is(err, measuredboot.ErrIMALogInvalid) || !strings.Contains(err.Error(), tc.want) || got != nil {
				t.Errorf("ReplayIMA: %v, %v; want ErrIMALogInvalid saying %q", got, err, tc.want)
			}
		})
	}
	// Cut anywhere, the list is refused, never read past its end.
	for n := 1; n < len(good); n++ {
		if _, err := measuredboot.ReplayIMA(good[:n], crypto.SHA256, quotedPCR10(list)); err == nil {
			// A cut between entries is a shorter list: it reproduces
			// the quote only if it is the whole list.
			t.Errorf("the list cut at %d of %d bytes replayed", n, len(good))
		}
	}
}

// legacyIMAEntry is one entry of the first template, "ima".
func legacyIMAEntry() []byte {
	var b bytes.Buffer
	_ = binary.Write(&b, binary.LittleEndian, uint32(10))
	b.Write(make([]byte, 20))
	_ = binary.Write(&b, binary.LittleEndian, uint32(3))
	b.WriteString("ima")
	b.Write(make([]byte, 20+256))
	return b.Bytes()
}

// A violation (a file measured while open for writing) extends PCR 10 with
// all ones and carries no digest to trust.
func TestReplayIMAViolation(t *testing.T) {
	list := imatest.Runtime(imaSlurm, imatest.File{Path: "/var/log/x", Violation: true})
	got, err := measuredboot.ReplayIMA(list.Bytes(), crypto.SHA256, quotedPCR10(list))
	if err != nil {
		t.Fatal(err)
	}
	if !got[2].Violation {
		t.Errorf("entry %+v, want a violation", got[2])
	}
}

func TestEvaluateIMA(t *testing.T) {
	list := imatest.Runtime(imaSlurm, imaMunge, imaTmp)
	withViolation := imatest.Runtime(imaSlurm, imatest.File{Path: "/usr/sbin/munged", Violation: true})
	evidence := func(l imatest.List) *measuredboot.BootEvidence {
		entries, err := measuredboot.ReplayIMA(l.Bytes(), crypto.SHA256, quotedPCR10(l))
		if err != nil {
			t.Fatal(err)
		}
		return &measuredboot.BootEvidence{HashAlg: "sha256", PCRs: quotedPCR10(l), IMA: entries, IMALog: true}
	}
	file := func(f imatest.File) *pactv1.BootPolicyImaFile {
		return &pactv1.BootPolicyImaFile{Path: f.Path, AllowedDigests: [][]byte{f.FileDigest()}}
	}
	other := imatest.File{Path: imaSlurm.Path, Content: []byte("slurmd 23.11")}
	cases := []struct {
		name string
		ima  *pactv1.BootPolicyIma
		ev   *measuredboot.BootEvidence
		want []string // one substring per mismatch
	}{
		{"listed files match", &pactv1.BootPolicyIma{Files: []*pactv1.BootPolicyImaFile{file(imaSlurm), file(imaMunge)}}, evidence(list), nil},
		{"a listed file with another digest", &pactv1.BootPolicyIma{Files: []*pactv1.BootPolicyImaFile{file(other)}}, evidence(list), []string{"/usr/sbin/slurmd has sha256 digest"}},
		{"only listed: an unlisted file", &pactv1.BootPolicyIma{OnlyListed: true, Files: []*pactv1.BootPolicyImaFile{file(imaSlurm), file(imaMunge), file(imatest.Runtime()[0])}}, evidence(list), []string{"/tmp/job.sh"}},
		{"only listed: /tmp excluded", &pactv1.BootPolicyIma{OnlyListed: true, ExcludePrefixes: []string{"/tmp/"}, Files: []*pactv1.BootPolicyImaFile{file(imaSlurm), file(imaMunge), file(imatest.Runtime()[0])}}, evidence(list), nil},
		{"a violation of a listed file", &pactv1.BootPolicyIma{Files: []*pactv1.BootPolicyImaFile{file(imaMunge)}}, evidence(withViolation), []string{"violation"}},
		{"no list sent", &pactv1.BootPolicyIma{Files: []*pactv1.BootPolicyImaFile{file(imaSlurm)}}, &measuredboot.BootEvidence{HashAlg: "sha256", PCRs: map[int][]byte{10: make([]byte, 32)}}, []string{"no IMA measurement list"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := measuredboot.Evaluate(&pactv1.BootPolicy{Ima: tc.ima}, tc.ev)
			if len(got) != len(tc.want) {
				t.Fatalf("mismatches %q, want %d: %q", got, len(tc.want), tc.want)
			}
			for i, w := range tc.want {
				if !strings.Contains(got[i], w) {
					t.Errorf("mismatch %q, want it to say %q", got[i], w)
				}
			}
		})
	}
}

func TestValidatePolicyIMA(t *testing.T) {
	d := make([]byte, 32)
	base := func(ima *pactv1.BootPolicyIma) *pactv1.BootPolicy {
		return &pactv1.BootPolicy{Mode: pactv1.BootPolicyMode_BOOT_POLICY_MODE_ENFORCE, Action: pactv1.BootPolicyAction_BOOT_POLICY_ACTION_REFUSE, Ima: ima}
	}
	if err := measuredboot.ValidatePolicy(base(&pactv1.BootPolicyIma{Files: []*pactv1.BootPolicyImaFile{{Path: "/usr/sbin/slurmd", AllowedDigests: [][]byte{d}}}})); err != nil {
		t.Errorf("an IMA-only policy: %v", err)
	}
	for _, tc := range []struct {
		name string
		ima  *pactv1.BootPolicyIma
		want string
	}{
		{"no rule", &pactv1.BootPolicyIma{}, "would allow any measurement"},
		{"an empty prefix", &pactv1.BootPolicyIma{OnlyListed: true, ExcludePrefixes: []string{""}}, "excluded prefix"},
		{"a path twice", &pactv1.BootPolicyIma{Files: []*pactv1.BootPolicyImaFile{{Path: "/a", AllowedDigests: [][]byte{d}}, {Path: "/a", AllowedDigests: [][]byte{d}}}}, "two rules"},
		{"no digest", &pactv1.BootPolicyIma{Files: []*pactv1.BootPolicyImaFile{{Path: "/a"}}}, "allows nothing"},
		{"a digest of no algorithm", &pactv1.BootPolicyIma{Files: []*pactv1.BootPolicyImaFile{{Path: "/a", AllowedDigests: [][]byte{{1, 2}}}}}, "a digest of 2 bytes"},
		{"no path", &pactv1.BootPolicyIma{Files: []*pactv1.BootPolicyImaFile{{AllowedDigests: [][]byte{d}}}}, "path of 0 bytes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := measuredboot.ValidatePolicy(base(tc.ima))
			if !errors.Is(err, measuredboot.ErrPolicyInvalid) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("%v, want ErrPolicyInvalid saying %q", err, tc.want)
			}
		})
	}
}

// FuzzReplayIMA: an untrusted IMA list never panics, and a list that
// replays keeps at least one entry (TestReplayIMA and
// TestReplayIMARefuses check what is kept against the quoted PCR).
func FuzzReplayIMA(f *testing.F) {
	list := imatest.Runtime(imaSlurm, imaMunge)
	f.Add(list.Bytes())
	f.Add(legacyIMAEntry())
	f.Add([]byte{10, 0, 0, 0})
	quoted := quotedPCR10(list)
	f.Fuzz(func(t *testing.T, b []byte) {
		got, err := measuredboot.ReplayIMA(b, crypto.SHA256, quoted)
		if err == nil && len(got) == 0 {
			t.Fatal("a list replayed to nothing")
		}
	})
}

// Capture lists the reference node's measured files with their digests,
// and the policy it makes matches that node and no node that ran another
// binary; Merge allows both images' files.
func TestCaptureAndMergeIMA(t *testing.T) {
	ref := imatest.Runtime(imaSlurm, imaMunge)
	evidence := func(l imatest.List) *measuredboot.BootEvidence {
		entries, err := measuredboot.ReplayIMA(l.Bytes(), crypto.SHA256, quotedPCR10(l))
		if err != nil {
			t.Fatal(err)
		}
		return &measuredboot.BootEvidence{HashAlg: "sha256", PCRs: quotedPCR10(l), IMA: entries, IMALog: true}
	}
	p, err := measuredboot.Capture(evidence(ref), measuredboot.CaptureOptions{IMA: true}, pactv1.BootPolicyMode_BOOT_POLICY_MODE_ENFORCE, pactv1.BootPolicyAction_BOOT_POLICY_ACTION_REFUSE)
	if err != nil {
		t.Fatal(err)
	}
	if n := len(p.GetIma().GetFiles()); n != 2 {
		t.Fatalf("captured %d files, want slurmd and munged (not boot_aggregate): %v", n, p.GetIma())
	}
	if d := measuredboot.Evaluate(p, evidence(ref)); len(d) != 0 {
		t.Errorf("the reference node does not match its own capture: %q", d)
	}
	upgraded := imatest.Runtime(imatest.File{Path: imaSlurm.Path, Content: []byte("slurmd 24.11")}, imaMunge)
	if d := measuredboot.Evaluate(p, evidence(upgraded)); len(d) != 1 || !strings.Contains(d[0], imaSlurm.Path) {
		t.Errorf("a node with another slurmd: %q, want one mismatch naming it", d)
	}
	q, err := measuredboot.Capture(evidence(upgraded), measuredboot.CaptureOptions{IMA: true}, pactv1.BootPolicyMode_BOOT_POLICY_MODE_ENFORCE, pactv1.BootPolicyAction_BOOT_POLICY_ACTION_REFUSE)
	if err != nil {
		t.Fatal(err)
	}
	both := measuredboot.Merge(p, q)
	for _, l := range []imatest.List{ref, upgraded} {
		if d := measuredboot.Evaluate(both, evidence(l)); len(d) != 0 {
			t.Errorf("the merged policy refuses an image it merged: %q", d)
		}
	}
	if _, err := measuredboot.Capture(&measuredboot.BootEvidence{HashAlg: "sha256", PCRs: quotedPCR10(ref)}, measuredboot.CaptureOptions{IMA: true}, pactv1.BootPolicyMode_BOOT_POLICY_MODE_OBSERVE, pactv1.BootPolicyAction_BOOT_POLICY_ACTION_OBSERVE); err == nil || !strings.Contains(err.Error(), "only_listed") {
		t.Errorf("capture without a list: %v, want an error saying how to get one", err)
	}
}
