package agentmain

import (
	"context"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"

	"github.com/pact-hpc/pact/agent"
	"github.com/pact-hpc/pact/agent/tpm"
	"github.com/pact-hpc/pact/internal/cmdline"
	"github.com/pact-hpc/pact/internal/settings"
	"github.com/pact-hpc/pact/internal/tpmattest"
)

// statusCommand is `pact-agent status`.
func statusCommand(env settings.Env, stdout, stderr io.Writer) *cobra.Command {
	socket := defaultStatusSocket(getuid(), env)
	var output string
	s := settings.New("pact-agent status")
	s.String(&socket, "status-socket", "PACT_AGENT_STATUS_SOCKET", "the agent's status socket")
	cmd := cmdline.Command("status", "show the identity of the agent running on this node", statusUsage, s, func(cmd *cobra.Command) int {
		if !cmdline.Resolve(cmd, s, env) {
			return agent.ExitUsage
		}
		return statusMain(socket, output, stdout, stderr)
	})
	cmd.Flags().StringVarP(&output, "o", "o", "table", "output format: table or json")
	return cmd
}

func statusMain(socket, output string, stdout, stderr io.Writer) int {
	if output != "table" && output != "json" {
		fmt.Fprintf(stderr, "pact-agent status: -o %q: want table or json\n", output)
		return agent.ExitUsage
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := agent.ReadStatus(ctx, socket)
	if err != nil {
		fmt.Fprintf(stderr, "pact-agent status: %v\n", err)
		return agent.ExitError
	}
	if output == "json" {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		err = enc.Encode(st)
	} else {
		err = agent.PrintStatus(stdout, st)
	}
	if err != nil && !errors.Is(err, io.ErrShortWrite) {
		fmt.Fprintf(stderr, "pact-agent status: %v\n", err)
		return agent.ExitError
	}
	if !st.Ready {
		reason := "no unexpired identity with an open stream"
		if st.LastFailureReason != "" {
			reason += "; last failure: " + st.LastFailureReason
			if st.LastFailure != "" {
				reason += " (" + st.LastFailure + ")"
			}
		}
		fmt.Fprintf(stderr, "pact-agent status: the agent is not ready: %s\n", reason)
		return agent.ExitNotReady
	}
	return agent.ExitOK
}

const statusUsage = `pact-agent status shows the identity of the agent running on this node:
its source, serial and expiry, its last rotation and its last failure, read
from the agent's status socket (mode 0600: root, or the user the agent runs
as). It never shows key material.

Usage:
  pact-agent status [--status-socket PATH] [-o table|json]

The socket is the agent's --status-socket: by default /run/pact/agent.sock
for root (the packaged unit's), $XDG_RUNTIME_DIR/pact/agent.sock for
another user (an agent started by hand).

Exit codes, for monitoring: 0 ready (an unexpired identity and an open
stream); 9 the agent answers but is not ready (stderr says why); 1 no agent
answers on the socket; 2 bad flags.

Flags:
`

const tpmEKUsage = `Usage:
  pact-agent tpm-ek [--tpm-device DEV] [-o text|json]

Reads the node's TPM endorsement key (EK) the way pact-agent does when it
enrolls (the persistent EK at 0x81010001, or the one derived from the TCG
default RSA template) and prints its EK hash, the value to register:

  pact node enroll NODE --mac ... --tpm-ek-hash HASH

The EK hash is the hex SHA-256 of the EK public key's DER
SubjectPublicKeyInfo (docs/tpm.md). Also printed: the EK public key in
PEM, for records or to compare with the vendor's EK certificate.

Flags:
`

// tpmEKCommand is `pact-agent tpm-ek`.
func tpmEKCommand(env settings.Env, stdout, stderr io.Writer) *cobra.Command {
	device := tpm.DefaultDevice
	var output string
	s := settings.New("pact-agent tpm-ek")
	s.String(&device, "tpm-device", "PACT_AGENT_TPM_DEVICE", "TPM device, or unix:PATH for a software TPM")
	cmd := cmdline.Command("tpm-ek", "print the node's TPM EK hash, to register", tpmEKUsage, s, func(cmd *cobra.Command) int {
		if !cmdline.Resolve(cmd, s, env) {
			return agent.ExitUsage
		}
		return tpmEKMain(device, output, stdout, stderr)
	})
	cmd.Flags().StringVarP(&output, "o", "o", "text", "text or json")
	return cmd
}

// tpmEKMain prints the node's EK hash and public key for registration.
func tpmEKMain(device, output string, stdout, stderr io.Writer) int {
	if output != "text" && output != "json" {
		fmt.Fprintf(stderr, "pact-agent tpm-ek: -o %q: want text or json\n", output)
		return agent.ExitUsage
	}
	pubArea, hash, err := tpm.ReadEK(device)
	if err != nil {
		fmt.Fprintf(stderr, "pact-agent tpm-ek: %v\n", err)
		if errors.Is(err, tpm.ErrNoDevice) {
			fmt.Fprintf(stderr, "no TPM at %s: is the tpm_crb/tpm_tis driver loaded (ls /dev/tpm*)? Use --tpm-device for another path\n", device)
		}
		return agent.ExitError
	}
	ek, err := tpmattest.ParseEK(pubArea)
	if err != nil {
		fmt.Fprintf(stderr, "pact-agent tpm-ek: %v\n", err)
		return agent.ExitError
	}
	der, err := x509.MarshalPKIXPublicKey(ek.PublicKey())
	if err != nil {
		fmt.Fprintf(stderr, "pact-agent tpm-ek: %v\n", err)
		return agent.ExitError
	}
	pemText := string(pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der}))
	if output == "json" {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		_ = enc.Encode(struct {
			EKHash      string `json:"tpm_ek_hash"`
			EKPublicPEM string `json:"ek_public_pem"`
			Device      string `json:"tpm_device"`
		}{hash, pemText, device})
		return agent.ExitOK
	}
	fmt.Fprintf(stdout, "tpm_ek_hash: %s\n%s", hash, pemText)
	return agent.ExitOK
}
