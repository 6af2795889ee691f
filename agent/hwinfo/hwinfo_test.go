package hwinfo

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/pact-hpc/pact/internal/hwid"
)

// fakeNIC is one interface of a fake sysfs tree.
type fakeNIC struct {
	name     string
	physical bool   // has a device link
	typ      string // content of type; "" means "1"
	assign   string // content of addr_assign_type; "" means "0"
	address  string
	perm     string // bonding_slave/perm_hwaddr; "" means not a bond member
}

// dirMarker as a file's content makes writeTree create a directory there.
const dirMarker = "<dir>"

// writeTree lays out a fake sysfs under root the way the kernel does:
// interfaces live under devices/ and class/net holds symlinks to them;
// physical ones have a device symlink to their (PCI) device directory.
// files are extra paths relative to root (DMI attributes, bonding_masters).
func writeTree(root string, nics []fakeNIC, files map[string]string) error {
	classNet := filepath.Join(root, "class", "net")
	if err := os.MkdirAll(classNet, 0o755); err != nil {
		return err
	}
	for i, n := range nics {
		var rel string // interface directory relative to root
		if n.physical {
			pci := fmt.Sprintf("0000:00:%02x.0", i+1)
			rel = filepath.Join("devices", "pci0000:00", pci, "net", n.name)
			if err := os.MkdirAll(filepath.Join(root, rel), 0o755); err != nil {
				return err
			}
			if err := os.Symlink(filepath.Join("..", "..", "..", pci), filepath.Join(root, rel, "device")); err != nil {
				return err
			}
		} else {
			rel = filepath.Join("devices", "virtual", "net", n.name)
			if err := os.MkdirAll(filepath.Join(root, rel), 0o755); err != nil {
				return err
			}
		}
		if err := os.Symlink(filepath.Join("..", "..", rel), filepath.Join(classNet, n.name)); err != nil {
			return err
		}
		typ, assign := n.typ, n.assign
		if typ == "" {
			typ = "1"
		}
		if assign == "" {
			assign = "0"
		}
		attrs := map[string]string{
			"type":             typ + "\n",
			"addr_assign_type": assign + "\n",
			"address":          n.address + "\n",
		}
		if n.perm != "" {
			attrs["bonding_slave/perm_hwaddr"] = n.perm + "\n"
		}
		for name, content := range attrs {
			if err := writeFile(filepath.Join(root, rel, name), content); err != nil {
				return err
			}
		}
	}
	for name, content := range files {
		if err := writeFile(filepath.Join(root, name), content); err != nil {
			return err
		}
	}
	return nil
}

func writeFile(path, content string) error {
	if content == dirMarker {
		return os.MkdirAll(path, 0o755)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return os.WriteFile(path, []byte(content), 0o444)
}

const (
	mac1    = "52:54:00:00:00:01"
	mac2    = "52:54:00:00:00:02"
	mac3    = "52:54:00:00:00:03"
	bondMAC = "52:54:00:00:00:b0"
	ibAddr  = "80:00:02:08:fe:80:00:00:00:00:00:00:00:02:c9:03:00:0a:bc:de"
	dmiDir  = "class/dmi/id/"
)

func TestRead(t *testing.T) {
	eth0 := fakeNIC{name: "eth0", physical: true, address: mac1}
	tests := []struct {
		name       string
		nics       []fakeNIC
		files      map[string]string
		noClassNet bool
		cfg        func(*Config)

		wantMACs         []string
		wantSerial       string
		wantSerialSource string            // relative to the tree, or a Source* constant
		wantMACSource    string            // relative to the tree, or a Source* constant; default class/net
		wantTaken        map[string]string // interface -> From
		wantSkipped      map[string]string // interface -> part of the reason
		wantNotes        []string          // each is part of some DMI note
		wantEK           string
		wantErr          []error
		wantErrText      []string
	}{
		{
			name: "physical NICs taken, sorted by MAC",
			nics: []fakeNIC{
				{name: "enp2s0", physical: true, address: mac2},
				{name: "enp1s0", physical: true, address: "52:54:00:00:00:03"},
				eth0,
			},
			wantMACs:  []string{mac1, mac2, mac3},
			wantTaken: map[string]string{"enp1s0": "address", "enp2s0": "address", "eth0": "address"},
		},
		{
			name: "loopback and virtual interfaces skipped",
			nics: []fakeNIC{
				{name: "lo", address: "00:00:00:00:00:00", typ: "772"},
				{name: "veth1a2b", address: "9e:00:00:00:00:01", assign: "1"},
				{name: "br0", address: "9e:00:00:00:00:02", assign: "3"},
				{name: "docker0", address: "02:42:51:51:23:40", assign: "3"},
				{name: "tun0", address: "00:00:00:00:00:00", typ: "65534"},
				eth0,
			},
			files:    map[string]string{"class/net/bonding_masters": "\n"},
			wantMACs: []string{mac1},
			wantSkipped: map[string]string{
				"lo":       "loopback",
				"veth1a2b": "virtual",
				"br0":      "virtual",
				"docker0":  "virtual",
				"tun0":     "virtual",
			},
		},
		{
			name: "InfiniBand skipped",
			nics: []fakeNIC{
				{name: "ib0", physical: true, typ: "32", address: ibAddr},
				eth0,
			},
			wantMACs:    []string{mac1},
			wantSkipped: map[string]string{"ib0": "InfiniBand (type 32)"},
		},
		{
			name: "other link type skipped",
			nics: []fakeNIC{
				{name: "can0", physical: true, typ: "280", address: ""},
				eth0,
			},
			wantMACs:    []string{mac1},
			wantSkipped: map[string]string{"can0": "link type 280 is not Ethernet"},
		},
		{
			name: "random, stolen and set addresses skipped",
			nics: []fakeNIC{
				{name: "usb0", physical: true, assign: "1", address: "ae:12:34:56:78:9a"},
				{name: "eth1", physical: true, assign: "2", address: mac2},
				{name: "eth2", physical: true, assign: "3", address: mac3},
				{name: "eth3", physical: true, assign: "7", address: "52:54:00:00:00:04"},
				eth0,
			},
			wantMACs: []string{mac1},
			wantSkipped: map[string]string{
				"usb0": "random address (addr_assign_type 1)",
				"eth1": "addr_assign_type 2",
				"eth2": "set by software (addr_assign_type 3)",
				"eth3": "unknown addr_assign_type 7",
			},
		},
		{
			name: "bond members report perm_hwaddr, not the bond's address",
			nics: []fakeNIC{
				{name: "bond0", address: bondMAC, assign: "3"},
				// The first member keeps its address (the bond took it), the
				// second gets the bond's; both keep the original in perm_hwaddr.
				{name: "eth0", physical: true, address: bondMAC, perm: bondMAC},
				{name: "eth1", physical: true, address: bondMAC, assign: "3", perm: mac2},
			},
			files:       map[string]string{"class/net/bonding_masters": "bond0\n"},
			wantMACs:    []string{mac2, bondMAC},
			wantTaken:   map[string]string{"eth0": "bonding_slave/perm_hwaddr", "eth1": "bonding_slave/perm_hwaddr"},
			wantSkipped: map[string]string{"bond0": "virtual"},
		},
		{
			name: "bad bond perm_hwaddr is not replaced by the bond's address",
			nics: []fakeNIC{
				{name: "eth1", physical: true, address: bondMAC, assign: "3", perm: "00:00:00:00:00:00"},
				eth0,
			},
			wantMACs:    []string{mac1},
			wantSkipped: map[string]string{"eth1": "bond member, bonding_slave/perm_hwaddr: all-zero address"},
		},
		{
			name: "all-zero and malformed addresses skipped",
			nics: []fakeNIC{
				{name: "eth1", physical: true, address: "00:00:00:00:00:00"},
				{name: "eth2", physical: true, address: "ff:ff:ff:ff:ff:ff"},
				{name: "eth3", physical: true, address: "52-54-00-00-00-03"},
				{name: "eth4", physical: true, address: ""},
				eth0,
			},
			wantMACs: []string{mac1},
			wantSkipped: map[string]string{
				"eth1": "all-zero address",
				"eth2": "not a unicast hardware address",
				"eth3": "not six colon-separated octets",
				"eth4": "not six colon-separated octets",
			},
		},
		{
			name: "no more than hwid.MaxMACs MACs",
			nics: func() []fakeNIC {
				var nics []fakeNIC
				for i := range hwid.MaxMACs + 1 {
					nics = append(nics, fakeNIC{name: fmt.Sprintf("eth%02d", i), physical: true, address: fmt.Sprintf("52:54:00:00:01:%02x", i)})
				}
				return nics
			}(),
			wantMACs: func() []string {
				var macs []string
				for i := range hwid.MaxMACs {
					macs = append(macs, fmt.Sprintf("52:54:00:00:01:%02x", i))
				}
				return macs
			}(),
			wantSkipped: map[string]string{fmt.Sprintf("eth%02d", hwid.MaxMACs): "over the limit of 64"},
		},
		{
			name: "DMI placeholder in product_serial, real board_serial",
			nics: []fakeNIC{eth0},
			files: map[string]string{
				dmiDir + "product_serial": "To Be Filled By O.E.M.\n",
				dmiDir + "board_serial":   "BRD-0042\n",
				dmiDir + "chassis_serial": "CHS-0042\n",
			},
			wantMACs:         []string{mac1},
			wantSerial:       "BRD-0042",
			wantSerialSource: dmiDir + "board_serial",
			wantNotes:        []string{`product_serial: placeholder "To Be Filled By O.E.M."`},
		},
		{
			name: "DMI placeholders are case-insensitive and trimmed",
			nics: []fakeNIC{eth0},
			files: map[string]string{
				dmiDir + "product_serial": "  not specified \n",
				dmiDir + "board_serial":   "0000000000\n",
				dmiDir + "chassis_serial": "CHS-7\n",
			},
			wantMACs:         []string{mac1},
			wantSerial:       "CHS-7",
			wantSerialSource: dmiDir + "chassis_serial",
			wantNotes:        []string{"product_serial: placeholder", "board_serial: placeholder"},
		},
		{
			name: "DMI read error recorded, not fatal",
			nics: []fakeNIC{eth0},
			files: map[string]string{
				dmiDir + "product_serial": dirMarker,
				dmiDir + "board_serial":   "BRD-1\n",
			},
			wantMACs:         []string{mac1},
			wantSerial:       "BRD-1",
			wantSerialSource: dmiDir + "board_serial",
			wantNotes:        []string{"product_serial: read ", "is a directory"},
		},
		{
			name: "DMI serial with control characters passed over",
			nics: []fakeNIC{eth0},
			files: map[string]string{
				dmiDir + "product_serial": "SN\x01X\n",
				dmiDir + "board_serial":   "BRD-2\n",
			},
			wantMACs:         []string{mac1},
			wantSerial:       "BRD-2",
			wantSerialSource: dmiDir + "board_serial",
			wantNotes:        []string{"product_serial: unusable", "control characters"},
		},
		{
			name: "only placeholders: no serial, not an error",
			nics: []fakeNIC{eth0},
			files: map[string]string{
				dmiDir + "product_serial": "System Serial Number\n",
				dmiDir + "board_serial":   "\n",
			},
			wantMACs:  []string{mac1},
			wantNotes: []string{"product_serial: placeholder", `board_serial: placeholder ""`, "chassis_serial: absent"},
		},
		{
			name:      "no DMI at all: no serial, not an error",
			nics:      []fakeNIC{eth0},
			wantMACs:  []string{mac1},
			wantNotes: []string{"DMI not available"},
		},
		{
			name:  "--mac: NICs not read",
			nics:  []fakeNIC{eth0},
			files: map[string]string{dmiDir + "product_serial": "SN-1\n"},
			cfg: func(c *Config) {
				c.MACs = []string{"52-54-00-00-00-09", "52:54:00:00:00:0A"}
			},
			wantMACs:         []string{"52:54:00:00:00:09", "52:54:00:00:00:0a"},
			wantMACSource:    SourceMACFlag,
			wantTaken:        map[string]string{},
			wantSerial:       "SN-1",
			wantSerialSource: dmiDir + "product_serial",
		},
		{
			name: "--bmc-serial: DMI not read",
			nics: []fakeNIC{eth0},
			files: map[string]string{
				dmiDir + "product_serial": "SN-1\n",
				dmiDir + "board_serial":   dirMarker,
			},
			cfg:              func(c *Config) { c.BMCSerial = " OVR-1 " },
			wantMACs:         []string{mac1},
			wantSerial:       "OVR-1",
			wantSerialSource: SourceBMCSerialFlag,
		},
		{
			name:       "both overrides need no sysfs",
			noClassNet: true,
			cfg: func(c *Config) {
				c.SysRoot = ""
				c.MACs = []string{mac2}
				c.BMCSerial = "OVR-2"
			},
			wantMACs:         []string{mac2},
			wantMACSource:    SourceMACFlag,
			wantTaken:        map[string]string{},
			wantSerial:       "OVR-2",
			wantSerialSource: SourceBMCSerialFlag,
		},
		{
			name:     "TPM EK hash passed through, normalised",
			nics:     []fakeNIC{eth0},
			cfg:      func(c *Config) { c.TPMEKHash = strings.Repeat("AB", 32) },
			wantMACs: []string{mac1},
			wantEK:   strings.Repeat("ab", 32),
		},
		{
			name:        "no NIC at all",
			wantErr:     []error{ErrNoHardwareIdentity},
			wantErrText: []string{"class/net (it is empty); pass --mac to set one"},
		},
		{
			name: "no usable NIC",
			nics: []fakeNIC{
				{name: "lo", address: "00:00:00:00:00:00", typ: "772"},
				{name: "docker0", address: "02:42:51:51:23:40", assign: "3"},
				{name: "ib0", physical: true, typ: "32", address: ibAddr},
			},
			wantErr: []error{ErrNoHardwareIdentity},
			wantErrText: []string{
				"no physical NIC with a usable hardware address found under ",
				"docker0: virtual", "ib0: InfiniBand", "lo: loopback",
				"pass --mac to set one",
			},
			wantSkipped: map[string]string{"lo": "loopback", "docker0": "virtual", "ib0": "InfiniBand"},
		},
		{
			name:        "no class/net",
			noClassNet:  true,
			wantErr:     []error{ErrNoHardwareIdentity},
			wantErrText: []string{"cannot list ", "pass --mac to set one"},
		},
		{
			name:    "invalid override",
			cfg:     func(c *Config) { c.MACs = []string{"not-a-mac"} },
			wantErr: []error{ErrInvalidConfig, hwid.ErrInvalidMAC},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			root := t.TempDir()
			if !tt.noClassNet {
				if err := writeTree(root, tt.nics, tt.files); err != nil {
					t.Fatal(err)
				}
			}
			cfg := DefaultConfig()
			cfg.SysRoot = root
			if tt.cfg != nil {
				tt.cfg(&cfg)
			}
			abs := func(p string) string {
				if p == SourceMACFlag || p == SourceBMCSerialFlag || p == "" {
					return p
				}
				return filepath.Join(root, p)
			}

			id, rep, err := Read(cfg)
			t.Logf("report: %v", rep)

			if tt.wantErr != nil {
				if err == nil {
					t.Fatalf("Read = %+v, want error", id)
				}
				for _, want := range tt.wantErr {
					if !errors.Is(err, want) {
						t.Errorf("Read err = %v, want %v", err, want)
					}
				}
				for _, want := range tt.wantErrText {
					if !strings.Contains(err.Error(), want) {
						t.Errorf("Read err = %q, want it to contain %q", err, want)
					}
				}
				if !reflectZero(id) {
					t.Errorf("Read returned identity %+v with an error", id)
				}
			} else if err != nil {
				t.Fatalf("Read: %v", err)
			}

			if !slices.Equal(id.MACs, tt.wantMACs) {
				t.Errorf("MACs = %v, want %v", id.MACs, tt.wantMACs)
			}
			if id.BMCSerial != tt.wantSerial {
				t.Errorf("BMCSerial = %q, want %q", id.BMCSerial, tt.wantSerial)
			}
			if id.EKHash != tt.wantEK {
				t.Errorf("EKHash = %q, want %q", id.EKHash, tt.wantEK)
			}
			if got, want := rep.BMCSerialSource, abs(tt.wantSerialSource); got != want {
				t.Errorf("BMCSerialSource = %q, want %q", got, want)
			}
			if tt.wantErr == nil || errors.Is(err, ErrNoHardwareIdentity) {
				wantSource := tt.wantMACSource
				if wantSource == "" {
					wantSource = "class/net"
				}
				if got, want := rep.MACSource, abs(wantSource); got != want {
					t.Errorf("MACSource = %q, want %q", got, want)
				}
			}
			if cfg.BMCSerial != "" && len(rep.DMINotes) > 0 {
				t.Errorf("DMI was read despite --bmc-serial: %q", rep.DMINotes)
			}

			// Every interface in the tree is accounted for, once.
			if len(cfg.MACs) > 0 {
				if len(rep.Interfaces) != 0 {
					t.Errorf("NICs were read despite --mac: %v", rep.Interfaces)
				}
			} else if len(rep.Interfaces) != len(tt.nics) {
				t.Errorf("report has %d interfaces, tree has %d: %v", len(rep.Interfaces), len(tt.nics), rep.Interfaces)
			}
			byName := map[string]Interface{}
			for _, nic := range rep.Interfaces {
				byName[nic.Name] = nic
			}
			if !slices.IsSortedFunc(rep.Interfaces, func(a, b Interface) int { return strings.Compare(a.Name, b.Name) }) {
				t.Errorf("interfaces not in name order: %v", rep.Interfaces)
			}
			for name, from := range tt.wantTaken {
				if nic := byName[name]; !nic.Taken() || nic.From != from {
					t.Errorf("interface %s = %+v, want taken from %s", name, nic, from)
				}
			}
			for name, reason := range tt.wantSkipped {
				nic, ok := byName[name]
				if !ok || nic.Taken() || !strings.Contains(nic.Skipped, reason) {
					t.Errorf("interface %s = %+v, want skipped with %q", name, nic, reason)
				}
				if nic.MAC != "" {
					t.Errorf("skipped interface %s has MAC %q", name, nic.MAC)
				}
			}
			for _, want := range tt.wantNotes {
				if !slices.ContainsFunc(rep.DMINotes, func(n string) bool { return strings.Contains(n, want) }) {
					t.Errorf("DMI notes %q, want one containing %q", rep.DMINotes, want)
				}
			}
		})
	}
}

func reflectZero(id hwid.Identity) bool {
	return id.MACs == nil && id.BMCSerial == "" && id.EKHash == ""
}

func TestReadDMIPermissionDenied(t *testing.T) {
	if os.Geteuid() == 0 {
		t.Skip("root reads mode-000 files; TestRead provokes a read error with a directory instead")
	}
	root := t.TempDir()
	err := writeTree(root, []fakeNIC{{name: "eth0", physical: true, address: mac1}}, map[string]string{
		dmiDir + "product_serial": "SN-1\n",
		dmiDir + "board_serial":   "BRD-1\n",
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(filepath.Join(root, dmiDir, "product_serial"), 0); err != nil {
		t.Fatal(err)
	}
	id, rep, err := Read(Config{SysRoot: root})
	if err != nil {
		t.Fatalf("Read: %v", err)
	}
	if id.BMCSerial != "BRD-1" {
		t.Errorf("BMCSerial = %q, want BRD-1", id.BMCSerial)
	}
	if len(rep.DMINotes) == 0 || !strings.Contains(rep.DMINotes[0], "product_serial: permission denied") {
		t.Errorf("DMI notes = %q, want product_serial: permission denied", rep.DMINotes)
	}
}

func TestValidate(t *testing.T) {
	tests := []struct {
		name string
		cfg  Config
		want []error // nil: valid
	}{
		{name: "default", cfg: DefaultConfig()},
		{name: "overrides", cfg: Config{SysRoot: "/sys", MACs: []string{mac1, "5254.0000.0002"}, BMCSerial: "SN-1", TPMEKHash: strings.Repeat("0f", 32)}},
		{name: "both overrides, no SysRoot", cfg: Config{MACs: []string{mac1}, BMCSerial: "SN-1"}},
		{name: "no SysRoot", cfg: Config{MACs: []string{mac1}}, want: []error{ErrInvalidConfig}},
		{name: "bad MAC", cfg: Config{SysRoot: "/sys", MACs: []string{mac1, "52:54:00"}}, want: []error{ErrInvalidConfig, hwid.ErrInvalidMAC}},
		{name: "placeholder serial", cfg: Config{SysRoot: "/sys", BMCSerial: "To be filled by O.E.M."}, want: []error{ErrInvalidConfig, hwid.ErrInvalidBMCSerial}},
		{name: "blank serial", cfg: Config{SysRoot: "/sys", BMCSerial: "  "}, want: []error{ErrInvalidConfig, hwid.ErrInvalidBMCSerial}},
		{name: "too many MACs", cfg: Config{SysRoot: "/sys", MACs: slices.Repeat([]string{mac1}, hwid.MaxMACs+1)}, want: []error{ErrInvalidConfig, hwid.ErrTooMany}},
		{
			name: "every problem at once",
			cfg:  Config{MACs: []string{"zz"}, BMCSerial: "S\x00", TPMEKHash: "abc"},
			want: []error{ErrInvalidConfig, hwid.ErrInvalidMAC, hwid.ErrInvalidBMCSerial, hwid.ErrInvalidEKHash},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.cfg.Validate()
			if tt.want == nil {
				if err != nil {
					t.Fatalf("Validate: %v", err)
				}
				return
			}
			for _, want := range tt.want {
				if !errors.Is(err, want) {
					t.Errorf("Validate = %v, want %v", err, want)
				}
			}
		})
	}
	// Read refuses what Validate refuses, before touching sysfs.
	if _, _, err := Read(Config{MACs: []string{"zz"}}); !errors.Is(err, ErrInvalidConfig) {
		t.Errorf("Read(invalid) = %v, want ErrInvalidConfig", err)
	}
}

func TestIsPlaceholder(t *testing.T) {
	for _, s := range []string{
		"", "0", "00000000", "None", "NONE", "Not Specified", "To Be Filled By O.E.M.",
		"to be filled by o.e.m.", "Default string", "System Serial Number", "0123456789",
		"Not Applicable", "N/A", "n/a", " \tNone\n",
	} {
		if !isPlaceholder(s) {
			t.Errorf("isPlaceholder(%q) = false, want true", s)
		}
	}
	for _, s := range []string{"S123", "0A", "10", "01234567890", "Nonesuch", "CZJ12345GH"} {
		if isPlaceholder(s) {
			t.Errorf("isPlaceholder(%q) = true, want false", s)
		}
	}
}

func TestParseAddress(t *testing.T) {
	tests := []struct {
		in      string
		want    string
		wantErr error
	}{
		{"52:54:00:ab:cd:01\n", "52:54:00:ab:cd:01", nil},
		{"52:54:00:AB:CD:01", "52:54:00:ab:cd:01", nil},
		{"00:00:00:00:00:00\n", "", errZeroAddress},
		{"ff:ff:ff:ff:ff:ff\n", "", hwid.ErrInvalidMAC},
		{ibAddr + "\n", "", hwid.ErrInvalidMAC},
		{"52-54-00-ab-cd-01", "", hwid.ErrInvalidMAC},
		{"525400abcd01", "", hwid.ErrInvalidMAC},
		{"52:54:00:ab:cd:0g", "", hwid.ErrInvalidMAC},
		{"525:4:00:ab:cd:01", "", hwid.ErrInvalidMAC},
		{"", "", hwid.ErrInvalidMAC},
	}
	for _, tt := range tests {
		got, err := parseAddress(tt.in)
		if got != tt.want || !errors.Is(err, tt.wantErr) {
			t.Errorf("parseAddress(%q) = %q, %v; want %q, %v", tt.in, got, err, tt.want, tt.wantErr)
		}
	}
}

func FuzzParseAddress(f *testing.F) {
	for _, s := range []string{
		"52:54:00:ab:cd:01\n", "52:54:00:AB:CD:01", "00:00:00:00:00:00\n", "ff:ff:ff:ff:ff:ff\n",
		ibAddr + "\n", "52-54-00-ab-cd-01", "5254.00ab.cd01", "525400abcd01", "", "\n",
		" 52:54:00:ab:cd:01 \n", "52:54:00:ab:cd:01:02", "52::54:00:ab:cd:1", "\x00\x00\x00",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		got, err := parseAddress(in)
		if err != nil {
			if got != "" {
				t.Fatalf("parseAddress(%q) = %q with error %v", in, got, err)
			}
			return
		}
		again, err := hwid.NormalizeMAC(got)
		if err != nil || again != got {
			t.Fatalf("parseAddress(%q) = %q, but NormalizeMAC of it = %q, %v", in, got, again, err)
		}
		if again, err := parseAddress(got); err != nil || again != got {
			t.Fatalf("parseAddress(%q) = %q, but parseAddress of it = %q, %v", in, got, again, err)
		}
	})
}

func TestReportString(t *testing.T) {
	rep := Report{
		MACSource: "/sys/class/net",
		Interfaces: []Interface{
			{Name: "eth0", MAC: mac1, From: "address"},
			{Name: "eth1", MAC: mac2, From: "bonding_slave/perm_hwaddr"},
			{Name: "lo", Skipped: "loopback"},
		},
		BMCSerialSource: "/sys/class/dmi/id/board_serial",
		DMINotes:        []string{`product_serial: placeholder "None"`},
	}
	want := `MACs from /sys/class/net: took eth0=52:54:00:00:00:01, eth1=52:54:00:00:00:02 (from bonding_slave/perm_hwaddr); ` +
		`skipped lo: loopback; BMC serial from /sys/class/dmi/id/board_serial; DMI: product_serial: placeholder "None"`
	if got := rep.String(); got != want {
		t.Errorf("String() =\n%s\nwant\n%s", got, want)
	}

	var buf bytes.Buffer
	log := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{
		ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
			if a.Key == slog.TimeKey {
				return slog.Attr{}
			}
			return a
		},
	}))
	log.Info("hardware identity", "hw", rep)
	wantLog := `level=INFO msg="hardware identity" hw.mac_source=/sys/class/net ` +
		`hw.taken="[eth0=52:54:00:00:00:01 eth1=52:54:00:00:00:02 (from bonding_slave/perm_hwaddr)]" ` +
		`hw.skipped="[lo: loopback]" hw.bmc_serial_source=/sys/class/dmi/id/board_serial ` +
		`hw.dmi_notes="[product_serial: placeholder \"None\"]"` + "\n"
	if buf.String() != wantLog {
		t.Errorf("log =\n%s\nwant\n%s", buf.String(), wantLog)
	}

	for _, tt := range []struct {
		rep  Report
		want string
	}{
		{Report{}, ""},
		{Report{MACSource: SourceMACFlag, BMCSerialSource: SourceBMCSerialFlag}, "MACs from --mac; BMC serial from --bmc-serial"},
		{Report{MACSource: SourceMACFlag, DMINotes: []string{"DMI not available: x"}}, "MACs from --mac; no BMC serial found; DMI: DMI not available: x"},
	} {
		if got := tt.rep.String(); got != tt.want {
			t.Errorf("%+v.String() = %q, want %q", tt.rep, got, tt.want)
		}
	}
}

// TestReadRealSys reads this machine's /sys. It only logs: a build or CI
// machine may have no physical NIC, and then the only acceptable error is
// ErrNoHardwareIdentity.
func TestReadRealSys(t *testing.T) {
	id, rep, err := Read(DefaultConfig())
	t.Logf("identity: MACs=%v BMCSerial=%q", id.MACs, id.BMCSerial)
	t.Logf("report: %v", rep)
	for _, nic := range rep.Interfaces {
		t.Logf("  %v", nic)
	}
	if err != nil {
		t.Logf("error: %v", err)
		if !errors.Is(err, ErrNoHardwareIdentity) {
			t.Errorf("Read(DefaultConfig()) = %v, want nil or ErrNoHardwareIdentity", err)
		}
	}
}
