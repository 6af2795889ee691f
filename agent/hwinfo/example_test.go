package hwinfo_test

import (
	"fmt"
	"log"
	"os"
	"path/filepath"

	"github.com/pact-hpc/pact/agent/hwinfo"
)

func ExampleRead() {
	// A tiny fake /sys: one physical NIC, loopback, docker0, and DMI with a
	// placeholder product serial. On a node, use hwinfo.DefaultConfig().
	root, err := os.MkdirTemp("", "hwinfo-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(root)
	for path, content := range map[string]string{
		"class/net/eth0/address":          "52:54:00:00:00:01\n",
		"class/net/eth0/type":             "1\n",
		"class/net/eth0/addr_assign_type": "0\n",
		"class/net/lo/address":            "00:00:00:00:00:00\n",
		"class/net/lo/type":               "772\n",
		"class/net/docker0/address":       "02:42:51:51:23:40\n",
		"class/net/docker0/type":          "1\n",
		"class/dmi/id/product_serial":     "To Be Filled By O.E.M.\n",
		"class/dmi/id/board_serial":       "BSN-0042\n",
	} {
		if err := os.MkdirAll(filepath.Join(root, filepath.Dir(path)), 0o755); err != nil {
			log.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(root, path), []byte(content), 0o644); err != nil {
			log.Fatal(err)
		}
	}
	// Only eth0 is backed by a device.
	if err := os.Mkdir(filepath.Join(root, "class/net/eth0/device"), 0o755); err != nil {
		log.Fatal(err)
	}

	cfg := hwinfo.DefaultConfig()
	cfg.SysRoot = root
	id, rep, err := hwinfo.Read(cfg)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("MACs:", id.MACs)
	fmt.Println("BMC serial:", id.BMCSerial)
	for _, nic := range rep.Interfaces {
		fmt.Println(" ", nic)
	}
	source, _ := filepath.Rel(root, rep.BMCSerialSource)
	fmt.Println("serial from:", source)
	fmt.Println("passed over:", rep.DMINotes)
	// Output:
	// MACs: [52:54:00:00:00:01]
	// BMC serial: BSN-0042
	//   docker0: virtual (no device link)
	//   eth0=52:54:00:00:00:01
	//   lo: loopback
	// serial from: class/dmi/id/board_serial
	// passed over: [product_serial: placeholder "To Be Filled By O.E.M."]
}
