// Command embedded-proxy shows pinproxy embedded in a larger Go service
// rather than run as its own binary: the service owns the listeners, the
// logger, the signal handling and its own HTTP API, and the proxy is one
// part of it.
//
// Here the "larger service" is a stand-in for, say, a wallet backend whose
// light client keeps long-lived P2P connections pinned to a few nodes. It
//
//   - listens for those clients on -listen and hands the listener to
//     pinproxy, which sends each to the least-used upstream (-upstream,
//     repeated or comma-separated, in order of preference);
//
//   - serves its own HTTP API on -http: /healthz, /readyz (503 with the
//     reason while the proxy's Ready returns an error), and /proxy/stats
//     with the proxy's Stats and Totals as JSON;
//
//   - logs the proxy's decisions through its own logger, tagged
//     component=pinproxy, and logs Stats every -stats-every;
//
//   - on SIGTERM or SIGINT stops accepting, gives live connections -drain to
//     finish, closes what is left, and exits 0;
//
//   - on SIGUSR2 (Linux) upgrades itself without closing a connection:
//     it starts its binary again (a new one installed at the same path)
//     and hands it the proxy's listener and connections and its own API
//     listener (package pinproxy/handover: Exec, then Proxy.Handoff);
//     the new process finds the hand-over at start (Inherited, then
//     Proxy.Adopt) and serves them. Until the new process serves, this
//     one keeps everything, and serves on if the new one fails.
//
//     go run ./examples/embedded-proxy -listen 127.0.0.1:9333 \
//     -upstream eu-01.example:9333 -upstream usa-01.example:9333
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/proofkit/nodekit/pinproxy"
	"github.com/proofkit/nodekit/pinproxy/handover"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	upgrade := make(chan os.Signal, 4)
	signal.Notify(upgrade, syscall.SIGUSR2)
	code := run(ctx, os.Args[1:], os.Stderr, upgrade)
	stop()
	os.Exit(code)
}

// handoverEnv names the descriptor of the hand-over socket a process
// started for an upgrade inherits.
const handoverEnv = "EMBEDDED_PROXY_HANDOVER_FD"

type options struct {
	listen     string
	httpAddr   string
	upstreams  []string
	statsEvery time.Duration
	rebalance  time.Duration
	drain      time.Duration
	upgrade    time.Duration
}

func parseFlags(args []string, stderr io.Writer) (options, error) {
	var o options
	fs := flag.NewFlagSet("embedded-proxy", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, `usage: embedded-proxy -upstream HOST:PORT [-upstream HOST:PORT …] [flags]

A service that embeds pinproxy: clients on -listen go to the least-used
upstream; the service's own API is on -http (/healthz, /readyz, /proxy/stats).

Flags:
`)
		fs.PrintDefaults()
	}
	fs.StringVar(&o.listen, "listen", "127.0.0.1:9333", "address the proxy accepts clients on")
	fs.StringVar(&o.httpAddr, "http", "127.0.0.1:8081", `address of the service's own API ("off" for none)`)
	fs.Func("upstream", "upstream host:port, in order of preference (repeat, or comma-separate)", func(s string) error {
		for u := range strings.SplitSeq(s, ",") {
			if u = strings.TrimSpace(u); u != "" {
				o.upstreams = append(o.upstreams, u)
			}
		}
		return nil
	})
	fs.DurationVar(&o.statsEvery, "stats-every", 30*time.Second, "how often to log the proxy's Stats (0: never)")
	fs.DurationVar(&o.rebalance, "rebalance-every", pinproxy.DefaultRebalanceInterval, "time between rebalance rounds (negative: none)")
	fs.DurationVar(&o.drain, "drain", 10*time.Second, "on SIGTERM, how long live connections get to finish")
	fs.DurationVar(&o.upgrade, "upgrade-timeout", 10*time.Second, "on SIGUSR2, how long the new binary has to take over before this one serves on")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected argument %q (flags only)", fs.Arg(0))
	}
	if len(o.upstreams) == 0 {
		return o, errors.New("at least one -upstream is required")
	}
	if o.statsEvery < 0 || o.drain < 0 || o.upgrade <= 0 {
		return o, errors.New("-stats-every and -drain must not be negative, -upgrade-timeout must be positive")
	}
	if o.rebalance == 0 {
		o.rebalance = -1 // "0" on the command line means none; pinproxy reads 0 as the default
	}
	if o.httpAddr == "off" {
		o.httpAddr = ""
	}
	return o, nil
}

// statsView is what /proxy/stats serves.
type statsView struct {
	Totals    pinproxy.Totals          `json:"totals"`
	Upstreams []pinproxy.UpstreamStats `json:"upstreams"`
}

// run is the service; upgrade delivers SIGUSR2 (nil: never).
func run(ctx context.Context, args []string, stderr io.Writer, upgrade <-chan os.Signal) int {
	o, err := parseFlags(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintf(stderr, "embedded-proxy: %v\n", err)
		return 2
	}
	// The service's logger; the proxy gets a child of it.
	log := slog.New(slog.NewTextHandler(stderr, nil)).With("service", "wallet")

	proxy, err := pinproxy.New(pinproxy.Config{
		Upstreams:         o.upstreams,
		RebalanceInterval: o.rebalance,
		Logger:            log.With("component", "pinproxy"),
	})
	if err != nil {
		fmt.Fprintf(stderr, "embedded-proxy: %v\n", err)
		return 2
	}
	// Started by an upgrade? Then the listeners and connections come
	// from the process before this one.
	var ln, hl net.Listener
	var adopted *pinproxy.Adopted
	if peer, err := handover.Inherited(handoverEnv); err != nil || peer != nil {
		if err == nil {
			actx, cancel := context.WithTimeout(ctx, o.upgrade)
			adopted, err = proxy.Adopt(actx, peer)
			cancel()
		}
		if err != nil {
			fmt.Fprintf(stderr, "embedded-proxy: upgrade: %v\n", err)
			return 1
		}
		if len(adopted.Listeners) > 0 {
			ln = adopted.Listeners[0]
		}
		if len(adopted.Extra) > 0 {
			hl = adopted.Extra[0]
		}
	}
	// The service's own listener: any net.Listener works (one from systemd
	// socket activation, say). proxy.Listen would give one that sets TCP
	// keepalive once on the listening socket instead of on each client.
	if ln == nil {
		if ln, err = net.Listen("tcp", o.listen); err != nil {
			fmt.Fprintf(stderr, "embedded-proxy: -listen: %v\n", err)
			return 1
		}
	}
	served := make(chan error, 1)
	go func() { served <- proxy.Serve(ln) }()
	log.Info("proxy listening", "addr", ln.Addr().String(), "upstreams", o.upstreams)

	// The service's own API, beside the proxy.
	var api *http.Server
	if hl == nil && o.httpAddr != "" {
		if hl, err = net.Listen("tcp", o.httpAddr); err != nil {
			proxy.Shutdown(context.Background())
			fmt.Fprintf(stderr, "embedded-proxy: -http: %v\n", err)
			return 1
		}
	}
	if hl != nil {
		mux := http.NewServeMux()
		mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok\n") })
		mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
			if err := proxy.Ready(); err != nil {
				http.Error(w, err.Error(), http.StatusServiceUnavailable)
				return
			}
			io.WriteString(w, "ok\n")
		})
		mux.HandleFunc("GET /proxy/stats", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			json.NewEncoder(w).Encode(statsView{Totals: proxy.Totals(), Upstreams: proxy.Stats()})
		})
		api = &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second,
			ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn)}
	}
	if adopted != nil {
		// Nothing adopted is touched before the old process commits.
		rctx, cancel := context.WithTimeout(ctx, o.upgrade)
		err := adopted.Ready(rctx)
		cancel()
		if err != nil {
			log.Error("upgrade: the old process did not commit; it serves on, and this one stops", "err", err)
			return 1
		}
		log.Info("upgrade: took over", "from_pid", adopted.OldPID, "conns", adopted.Conns)
	}
	if api != nil {
		go func() {
			if err := api.Serve(hl); err != nil && !errors.Is(err, http.ErrServerClosed) {
				log.Error("API stopped", "err", err)
			}
		}()
		log.Info("http listening", "addr", hl.Addr().String())
	}

	var tick <-chan time.Time
	if o.statsEvery > 0 {
		t := time.NewTicker(o.statsEvery)
		defer t.Stop()
		tick = t.C
	}
	stopAPI := func() {
		if api != nil {
			actx, cancel := context.WithTimeout(context.Background(), time.Second)
			api.Shutdown(actx)
			cancel()
		}
	}
	for {
		select {
		case <-tick:
			logStats(log, proxy)
		case <-upgrade:
			if upgradeSelf(log, proxy, o.upgrade, hl) {
				stopAPI()
				<-served // returns ErrProxyClosed
				log.Info("upgraded; exiting")
				return 0
			}
			for len(upgrade) > 0 { // signals sent during the hand-over were for it
				<-upgrade
			}
		case err := <-served:
			log.Error("proxy stopped serving", "err", err)
			return 1
		case <-ctx.Done():
			log.Info("stopping: no new clients; draining", "drain", o.drain, "live", proxy.Totals().Live)
			stopAPI()
			dctx, cancel := context.WithTimeout(context.Background(), o.drain)
			err := proxy.Shutdown(dctx)
			cancel()
			<-served // returns ErrProxyClosed
			logStats(log, proxy)
			if err != nil {
				log.Warn("drain time over; closed the connections left", "err", err)
			}
			log.Info("stopped")
			return 0
		}
	}
}

// upgradeSelf starts this program's binary again and hands it the proxy's
// listener and connections and api, the API's listener (nil: none). It
// reports whether the new process took them; if not, this one serves on
// with everything.
func upgradeSelf(log *slog.Logger, proxy *pinproxy.Proxy, timeout time.Duration, api net.Listener) bool {
	peer, err := handover.Exec(handoverEnv)
	if err != nil {
		log.Error("upgrade failed: cannot start the new binary; serving on", "err", err)
		return false
	}
	log.Info("upgrade: new binary started; handing over", "pid", peer.PID())
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	var extra []net.Listener
	if api != nil {
		extra = append(extra, api)
	}
	res, err := proxy.Handoff(ctx, peer, extra...) // the proxy logs how it went
	if !res.Committed {
		log.Warn("upgrade failed; serving on", "err", err)
	}
	return res.Committed
}

func logStats(log *slog.Logger, p *pinproxy.Proxy) {
	t := p.Totals()
	log.Info("proxy stats", "live", t.Live, "accepted", t.Accepted, "unrouted", t.Unrouted, "moves", t.Moves)
	for _, u := range p.Stats() {
		log.Info("upstream stats", "upstream", u.Addr, "live", u.Live, "dials", u.Dials,
			"failures", u.Failures, "state", u.State, "moved", u.Moved,
			"bytes_sent", u.BytesSent, "bytes_received", u.BytesReceived)
	}
}
