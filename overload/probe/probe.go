package probe

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"

	"github.com/proofkit/nodekit/overload"
)

// Config says where a Probe reads from. The zero value reads the caller's
// own /proc, /sys and network namespace.
type Config struct {
	// ProcRoot is where procfs is mounted; "" means "/proc". An agent in a
	// container reads the host's memory and load from a bind mount of the
	// host's /proc (e.g. "/host/proc").
	//
	// The network files under it (/proc/sys/net/netfilter, the thread's
	// net/netstat and net/stat/nf_conntrack) show the network namespace of
	// the thread that opens them, whatever the mount: to read the host's
	// from a container without host networking, set NetNS too (e.g.
	// "/host/proc/1/ns/net").
	ProcRoot string

	// SysRoot is where sysfs is mounted; "" means "/sys". Link speeds are
	// read from SysRoot/class/net/IF/speed. A sysfs shows the links of the
	// network namespace that mounted it: with NetNS set, SysRoot must be a
	// sysfs mounted from inside that namespace (as `ip netns exec` does),
	// else the probe finds the links do not match (index or address) and
	// reports their speed as unknown rather than another namespace's.
	SysRoot string

	// NetNS is the path of a network namespace to read the network
	// sources from: conntrack, listen queues and links, e.g.
	// "/var/run/netns/x" or "/proc/PID/ns/net". "" means the caller's.
	// Each Read enters it on a thread of its own, which is thrown away
	// afterwards. Entering a namespace needs CAP_SYS_ADMIN; without it the
	// network inputs are missing from every reading, with a note.
	NetNS string

	// LinkSpeedMbps holds operator-given link speeds in Mbit/s, by link
	// name. A speed given here is used even when the kernel reports one:
	// the operator knows the contracted rate (a 10 Gbit/s NIC on a
	// 1 Gbit/s plan). A link with no speed here and none in sysfs has an
	// unknown speed: its bandwidth check is skipped, never guessed.
	LinkSpeedMbps map[string]uint64

	// LinkSpeedHint ends the note of a link whose speed is unknown,
	// telling the reader how to give it. "" means "an operator can give
	// it in LinkSpeedMbps"; a program that takes the speeds from its own
	// flag or file names that instead, e.g. "give it with -link-speed".
	LinkSpeedHint string

	// Node is copied into every Reading's Node.
	Node string

	// Timeout bounds each netlink request; 0 means 2 s. A context
	// deadline, when earlier, bounds it too.
	Timeout time.Duration

	// Logger receives debug records about degraded sources; nil discards.
	Logger *slog.Logger
}

// defaultTimeout bounds a netlink request when Config.Timeout is 0.
const defaultTimeout = 2 * time.Second

// withDefaults returns cfg with its documented defaults filled in.
func (cfg Config) withDefaults() Config {
	if cfg.ProcRoot == "" {
		cfg.ProcRoot = "/proc"
	}
	if cfg.SysRoot == "" {
		cfg.SysRoot = "/sys"
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = defaultTimeout
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	speeds := make(map[string]uint64, len(cfg.LinkSpeedMbps))
	for k, v := range cfg.LinkSpeedMbps {
		speeds[k] = v
	}
	cfg.LinkSpeedMbps = speeds
	return cfg
}

// validate checks the fields New cannot default.
func (cfg Config) validate() error {
	if cfg.Timeout < 0 {
		return fmt.Errorf("negative Timeout %v", cfg.Timeout)
	}
	for name, v := range cfg.LinkSpeedMbps {
		if v == 0 {
			return fmt.Errorf("LinkSpeedMbps[%q] is 0; leave the link out to mean unknown", name)
		}
	}
	return nil
}

// Probe takes readings of the node it runs on, keeping the previous
// reading's counters for the next one's deltas. Its methods may be called
// from any goroutine; readings are taken one at a time. Close it when done.
// Probing needs Linux.
type Probe struct {
	cfg Config

	mu     sync.Mutex
	closed bool
	state  // the per-OS part: procfs, the namespace, the previous sample
}

// New returns a Probe reading from cfg's roots and network namespace. It
// fails when ProcRoot is not a directory or NetNS is not a network
// namespace; sources that are missing later only degrade readings. Off
// Linux it returns an error wrapping errors.ErrUnsupported.
func New(cfg Config) (*Probe, error) {
	if err := unsupported("new"); err != nil {
		return nil, err
	}
	if err := cfg.validate(); err != nil {
		return nil, fmt.Errorf("probe: new: %w", err)
	}
	p := &Probe{cfg: cfg.withDefaults()}
	if err := p.open(); err != nil {
		return nil, fmt.Errorf("probe: new: %w", err)
	}
	return p, nil
}

// Read takes one reading. Counters that only grow (conntrack drops, listen
// drops, link bytes) become deltas since the previous Read; the first Read
// has none and lists those inputs as missing. A source that cannot be
// read makes its input missing, with a note that says why; Read itself
// fails only when ctx ends, the Probe is closed, or ProcRoot cannot be
// read at all. Read returns by ctx's deadline whatever a file or netlink
// socket does; a file that is not a regular one (a FIFO left in a -proc
// tree) is refused, naming its path. A regular file that never answers (a
// hung FUSE or network mount) fails the Read that first meets it; until
// that read returns, later Reads skip its input (missing, with a note
// that says so) and give the others, so the hang holds one goroutine,
// not one a Read. Off Linux it returns an error wrapping
// errors.ErrUnsupported.
func (p *Probe) Read(ctx context.Context) (overload.Reading, error) {
	r, _, err := p.ReadLinkBytes(ctx)
	return r, err
}

// LinkBytes is what one link moved between two readings, as the kernel
// counts it: the growth of the link's own byte counters (rtnetlink's
// 64-bit statistics, as in /sys/class/net/IF/statistics/rx_bytes). It
// depends on no clock, so a sum of LinkBytes equals the kernel's counters'
// growth whatever the wall clock did meanwhile.
type LinkBytes struct {
	// Name is the link's name, as in the reading's Links.
	Name string
	// RxBytes and TxBytes are the bytes received and transmitted.
	RxBytes, TxBytes uint64
}

// ReadLinkBytes takes one reading, as Read does, and returns with it the
// bytes each of its links moved since the previous reading (Read or
// ReadLinkBytes): one LinkBytes for each link that has a rate in the
// reading, the same counters' growth the rate was made from. A link
// without a rate (new, replaced, its counters reset, the first reading,
// a reboot) has none.
func (p *Probe) ReadLinkBytes(ctx context.Context) (overload.Reading, []LinkBytes, error) {
	if err := unsupported("read"); err != nil {
		return overload.Reading{}, nil, err
	}
	if err := ctx.Err(); err != nil {
		return overload.Reading{}, nil, fmt.Errorf("probe: read: %w", err)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return overload.Reading{}, nil, fmt.Errorf("probe: read: %w", os.ErrClosed)
	}
	r, b, err := p.read(ctx)
	if err != nil {
		return overload.Reading{}, nil, fmt.Errorf("probe: read: %w", err)
	}
	return r, b, nil
}

// Close releases the network namespace handle. Read fails after Close.
func (p *Probe) Close() error {
	if p == nil {
		return nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil
	}
	p.closed = true
	return p.close()
}
