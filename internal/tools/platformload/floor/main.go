// Command floor is platformload's yardstick for the platform's CPU a
// report: the least a Go server on net/http does for each POST /report,
// so that what the platform spends beyond it can be told from what the
// machine charges for an HTTP request over loopback.
//
// For each report it does what the platform's report path does before
// the store is reached, the same way: the http.Server with the
// platform's timeouts, the bearer token looked up by its SHA-256, a
// deadline on the request's context, the body read into a pooled buffer,
// the reading decoded by overload.Reading's decoder, and the platform's
// usual answer ({"node": …, "overloaded": false}) written by hand. It
// keeps nothing: no store, no tracker, no plan.
//
// platformload runs it as a replica with -platform floor; it takes the
// platform's flags (those it does not use are ignored) and logs, as JSON
// lines, the two the load waits for ("profiles served", "platform
// serving").
package main

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	_ "net/http/pprof" // the load's CPU profile, on -debug-listen
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/proofkit/nodekit/overload"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintf(os.Stderr, "floor: %v\n", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	var listen, debug, tokenFile string
	for i := 0; i < len(args); i++ {
		if i+1 >= len(args) {
			break
		}
		switch args[i] {
		case "-listen":
			listen = args[i+1]
		case "-debug-listen":
			debug = args[i+1]
		case "-token-file":
			tokenFile = args[i+1]
		default:
			continue
		}
		i++
	}
	if listen == "" || tokenFile == "" {
		return errors.New("-listen and -token-file are needed")
	}
	idx, err := readTokens(tokenFile)
	if err != nil {
		return err
	}
	log := slog.New(slog.NewJSONHandler(os.Stderr, nil))
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return err
	}
	srv := &http.Server{
		Handler:           reportHandler{idx},
		ReadHeaderTimeout: 5 * time.Second,
		MaxHeaderBytes:    64 << 10,
		ReadTimeout:       10 * time.Second,
		WriteTimeout:      30 * time.Second,
		IdleTimeout:       60 * time.Second,
	}
	go srv.Serve(ln)
	if debug != "" {
		dln, err := net.Listen("tcp", debug)
		if err != nil {
			return err
		}
		go http.Serve(dln, http.DefaultServeMux)
		log.Info("profiles served", "debug_addr", dln.Addr().String())
	}
	log.Info("platform serving", "addr", ln.Addr().String())
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	<-ctx.Done()
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return srv.Shutdown(sctx)
}

// readTokens reads the platform's token file: a line "TOKEN NODE" a
// node (a line of a token alone is an operator's, refused here).
func readTokens(file string) (map[[sha256.Size]byte]string, error) {
	f, err := os.Open(file)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	idx := map[[sha256.Size]byte]string{}
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		tok, node, ok := strings.Cut(strings.TrimSpace(sc.Text()), " ")
		if ok && tok != "" && node != "" {
			idx[sha256.Sum256([]byte(tok))] = node
		}
	}
	return idx, sc.Err()
}

type reportHandler struct {
	idx map[[sha256.Size]byte]string
}

var buffers = sync.Pool{New: func() any { b := make([]byte, 0, 1024); return &b }}

func (h reportHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost || r.URL.Path != "/report" {
		http.NotFound(w, r)
		return
	}
	const scheme = "Bearer "
	auth := r.Header.Get("Authorization")
	var node string
	ok := len(auth) > len(scheme) && strings.EqualFold(auth[:len(scheme)], scheme)
	if ok {
		var a [128]byte
		node, ok = h.idx[sha256.Sum256(append(a[:0], auth[len(scheme):]...))]
	}
	if !ok {
		http.Error(w, "unauthorized", http.StatusUnauthorized)
		return
	}
	// The platform's deadline on the request (requestTimeout): its cost
	// is the platform's too, though nothing here waits on it.
	_, cancel := context.WithTimeout(r.Context(), 10*time.Second)
	defer cancel()
	buf := buffers.Get().(*[]byte)
	defer buffers.Put(buf)
	// The body read as the platform's readBody reads it (a copy: the
	// platform is a main package, and the floor must do the same work).
	b := (*buf)[:0]
	for {
		if len(b) == cap(b) {
			b = append(b, 0)[:len(b)]
		}
		n, err := r.Body.Read(b[len(b):cap(b)])
		b = b[:len(b)+n]
		if err == io.EOF {
			break
		}
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
	}
	var rd overload.Reading
	if err := rd.UnmarshalJSON(b); err != nil {
		if err := json.Unmarshal(b, &rd); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
	}
	if rd.Node != "" && rd.Node != node {
		http.Error(w, "another node's reading", http.StatusForbidden)
		return
	}
	b = append(b[:0], "{\n  \"node\": \""...)
	b = append(b, node...)
	b = append(b, "\",\n  \"overloaded\": "...)
	b = strconv.AppendBool(b, false)
	b = append(b, "\n}\n"...)
	*buf = b
	w.Header()["Content-Type"] = jsonContentType
	w.WriteHeader(http.StatusOK)
	w.Write(b)
}

var jsonContentType = []string{"application/json"}
