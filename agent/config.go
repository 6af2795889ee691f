package agent

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"time"

	"github.com/pact-hpc/pact/agent/hwinfo"
	"github.com/pact-hpc/pact/internal/clock"
)

// Config configures a node agent.
type Config struct {
	// JournalAddrs are the journals to use, tried in turn.
	JournalAddrs []string
	// CAFile is the domain root certificate baked into the node image.
	CAFile string
	// Hardware says where the hardware identity comes from.
	Hardware hwinfo.Config
	// CallTimeout bounds one Enroll or RenewCert call.
	CallTimeout time.Duration
	// MinBackoff and MaxBackoff bound the retry delay (full jitter).
	MinBackoff time.Duration
	MaxBackoff time.Duration
	// RenewAt is the fraction of a certificate's lifetime after which it is
	// renewed.
	RenewAt float64
	// MinRenewInterval keeps a failing renewal from looping.
	MinRenewInterval time.Duration

	Logger *slog.Logger
	Clock  clock.Clock
}

// DefaultConfig returns the defaults.
func DefaultConfig() Config {
	return Config{
		Hardware:         hwinfo.DefaultConfig(),
		CallTimeout:      15 * time.Second,
		MinBackoff:       250 * time.Millisecond,
		MaxBackoff:       30 * time.Second,
		RenewAt:          2.0 / 3.0,
		MinRenewInterval: 30 * time.Second,
		Logger:           slog.Default(),
		Clock:            clock.Real{},
	}
}

// Validate reports every problem at once.
func (c Config) Validate() error {
	var errs []error
	if len(c.JournalAddrs) == 0 {
		errs = append(errs, errors.New("agent: no journal address (--journal host:port)"))
	}
	for _, a := range c.JournalAddrs {
		if _, _, err := net.SplitHostPort(a); err != nil {
			errs = append(errs, fmt.Errorf("agent: journal address %q: want host:port", a))
		}
	}
	if c.CAFile == "" {
		errs = append(errs, errors.New("agent: no domain root certificate (--ca FILE)"))
	}
	if err := c.Hardware.Validate(); err != nil {
		errs = append(errs, err)
	}
	if c.CallTimeout <= 0 {
		errs = append(errs, errors.New("agent: CallTimeout must be positive"))
	}
	if c.MinBackoff <= 0 || c.MaxBackoff < c.MinBackoff {
		errs = append(errs, errors.New("agent: need 0 < MinBackoff <= MaxBackoff"))
	}
	if c.RenewAt <= 0 || c.RenewAt >= 1 {
		errs = append(errs, fmt.Errorf("agent: RenewAt %v must be between 0 and 1", c.RenewAt))
	}
	if c.MinRenewInterval <= 0 {
		errs = append(errs, errors.New("agent: MinRenewInterval must be positive"))
	}
	if c.Logger == nil {
		errs = append(errs, errors.New("agent: Logger is required"))
	}
	if c.Clock == nil {
		errs = append(errs, errors.New("agent: Clock is required"))
	}
	return errors.Join(errs...)
}
