package main

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

// tpm-cost sets the attesting storm beside the plain one: the journals'
// extra CPU per enrollment and renewal, the throughput ratios, and a
// failure when the attesting run was refused anything or did not attest.
func TestTPMCostReport(t *testing.T) {
	parse := func(s string) attestLine {
		var l attestLine
		if err := json.Unmarshal([]byte(s), &l); err != nil {
			t.Fatal(err)
		}
		return l
	}
	plain := parse(`{"bench":"storm","pass":true,"agents":1000,"journal_cpu_ms_per_agent":2.0,"streaming_per_s":400,"journal_cpu_ms_per_renew":1.5,"renew_per_s":500,"tpm":false}`)
	tpm := parse(`{"bench":"storm","pass":true,"agents":1000,"journal_cpu_ms_per_agent":3.0,"streaming_per_s":300,"journal_cpu_ms_per_renew":2.5,"renew_per_s":250,"tpm":true,"enroll_refused":0,"renew_refused":0,"boot_policy_verdicts":{"match":1000},"renew_boot_policy_verdicts":{"match":1000}}`)
	p := tpmCostOf(1, plain, tpm)
	if !p.Pass || p.AttestJournalCPU != 1 || p.JournalCPURatio != 1.5 || p.ThroughputRatio != 0.75 || p.Matched != 2000 {
		t.Fatalf("pair %+v", p)
	}
	if p.AttestRenewJournalCPU == nil || *p.AttestRenewJournalCPU != 1 || *p.RenewThroughputRatio != 0.5 {
		t.Fatalf("renewal figures %v %v", p.AttestRenewJournalCPU, p.RenewThroughputRatio)
	}
	var out bytes.Buffer
	if err := tpmCostReport(&out, 1000, []tpmCostPair{p}); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	var js map[string]any
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &js); err != nil {
		t.Fatal(err)
	}
	if js["pass"] != true || js["median_attestation_journal_cpu_ms_per_enroll"] != 1.0 || js["median_throughput_ratio_tpm"] != 0.75 {
		t.Fatalf("JSON %v", js)
	}

	// Two pairs: the medians are the means of the middle two, to three
	// places; the renewal's are there too.
	tpm2 := tpm
	tpm2.JournalCPU, tpm2.RenewJournalCPU = 2.5, ptr(1.75)
	out.Reset()
	if err := tpmCostReport(&out, 1000, []tpmCostPair{p, tpmCostOf(2, plain, tpm2)}); err != nil {
		t.Fatal(err)
	}
	lines = strings.Split(strings.TrimSpace(out.String()), "\n")
	js = nil
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &js); err != nil {
		t.Fatal(err)
	}
	if js["median_attestation_journal_cpu_ms_per_enroll"] != 0.75 || js["median_journal_cpu_ratio_tpm"] != 1.375 || js["median_attestation_journal_cpu_ms_per_renew"] != 0.625 {
		t.Fatalf("JSON of two pairs %v", js)
	}

	refused := tpm
	refused.EnrollRefused = 3
	if err := tpmCostReport(&bytes.Buffer{}, 1000, []tpmCostPair{tpmCostOf(1, plain, refused)}); err == nil {
		t.Fatal("an attesting run with refusals passed")
	}
	if tpmCostOf(1, plain, plain).Pass {
		t.Fatal("a run without -tpm passed as the attesting one")
	}
}
