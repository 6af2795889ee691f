package bareclient

import (
	"crypto/x509"
	"errors"
	"testing"

	pactv1 "github.com/pact-hpc/pact/proto/pact/v1"
)

// What a run needs is checked before any client starts; the runs
// themselves are stormbench's (TestTinyFloorBareClients: real stub
// journals over loopback).
func TestValidate(t *testing.T) {
	good := DefaultConfig()
	good.Addrs = []string{"127.0.0.1:1"}
	good.Roots = x509.NewCertPool()
	good.Agents = 1
	good.Hardware = func(int) *pactv1.HardwareIdentity { return &pactv1.HardwareIdentity{} }
	if err := good.Validate(); err != nil {
		t.Fatalf("a complete configuration: %v", err)
	}
	for name, mutate := range map[string]func(*Config){
		"no addresses":    func(c *Config) { c.Addrs = nil },
		"no roots":        func(c *Config) { c.Roots = nil },
		"no clients":      func(c *Config) { c.Agents = 0 },
		"no hardware":     func(c *Config) { c.Hardware = nil },
		"no deadline":     func(c *Config) { c.Deadline = 0 },
		"no call timeout": func(c *Config) { c.CallTimeout = 0 },
	} {
		c := good
		mutate(&c)
		if err := c.Validate(); err == nil {
			t.Errorf("%s: accepted", name)
		}
		if _, err := Run(c); err == nil || errors.Is(err, nil) {
			t.Errorf("%s: Run started anyway", name)
		}
	}
}
