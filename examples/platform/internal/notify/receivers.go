package notify

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/url"
	"strings"
	"time"

	"github.com/proofkit/nodekit/examples/platform/internal/store"
	"github.com/proofkit/nodekit/internal/procfile"
	"github.com/proofkit/nodekit/overload"
)

// Receiver is where one node's notices go: a URL and the secrets its
// messages are signed with (two while one is rotated).
type Receiver struct {
	Node     string // the node the line is for, or "*"
	Operator string // or the operator whose own receiver it is (the API's)
	URL      *url.URL
	Secrets  [][]byte
	Line     int // the line of the notify file

	FailingSince time.Time // an operator's receiver: when it started failing
	disabled     bool      // an operator's receiver disabled for failing: sent nothing
}

// Host is the receiver's host and port, which is all a log line names of
// it: its URL may carry userinfo or a token in its path or query.
func (r *Receiver) Host() string { return r.URL.Host }

// Receivers is a parsed notify file: one receiver per node that has a
// line of its own, and the "*" line's for every other node.
type Receivers struct {
	byNode map[string]*Receiver
	any    *Receiver
	sum    [32]byte // the file's content hash: a 410 disables a URL until it changes
	path   string
	// The operators' own receivers (withOperators), which take the
	// file's place for their nodes: by operator, each node's operator,
	// and the file's receivers alone.
	byOperator map[string]*Receiver
	owners     map[string]string
	opNodes    map[string][]string // the nodes of each operator in byOperator
	file       *Receivers
}

// minSecret is the least a secret decodes to: 24 bytes, 192 bits.
const minSecret = 24

// parseReceivers reads a notify file: one receiver a line,
//
//	NODE URL SECRET [SECRET…]
//
// NODE is a node id or "*" (every node without a line of its own), URL
// an http:// or https:// URL, each SECRET "whsec_" and the base64 of at
// least 24 bytes; several secrets while one is rotated, each message then
// signed with every one. Blank lines and lines starting with "#" are
// skipped. An error names the file and the line.
func parseReceivers(path string, r io.Reader) (*Receivers, error) {
	b, err := io.ReadAll(r)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	rs := &Receivers{byNode: map[string]*Receiver{}, sum: sha256.Sum256(b), path: path}
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 0, 4096), 64<<10)
	for line := 1; sc.Scan(); line++ {
		text := strings.TrimSpace(sc.Text())
		if text == "" || strings.HasPrefix(text, "#") {
			continue
		}
		rc, err := parseReceiverLine(text)
		if err != nil {
			return nil, fmt.Errorf("%s:%d: %w", path, line, err)
		}
		rc.Line = line
		prev := rs.byNode[rc.Node]
		if rc.Node == "*" {
			prev = rs.any
		}
		if prev != nil {
			return nil, fmt.Errorf("%s:%d: node %s has a line already (line %d)", path, line, rc.Node, prev.Line)
		}
		if rc.Node == "*" {
			rs.any = rc
		} else {
			rs.byNode[rc.Node] = rc
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return rs, nil
}

func parseReceiverLine(text string) (*Receiver, error) {
	f := strings.Fields(text)
	if len(f) < 3 {
		return nil, fmt.Errorf("want NODE URL SECRET [SECRET…], got %d field(s)", len(f))
	}
	rc := &Receiver{Node: f[0]}
	if rc.Node != "*" && (store.CheckNodeID(rc.Node) != nil || strings.HasPrefix(rc.Node, secretPrefix)) {
		// Not quoted: a line out of order has its URL, which may hold
		// a credential, or its secret there, and the error is logged.
		return nil, fmt.Errorf("the first field is neither a node (%s) nor * (the field is not repeated here: it may be a URL or a secret): %w", overload.NodeRule, store.ErrBadInput)
	}
	u, err := parseReceiverURL(f[1])
	if err != nil {
		return nil, fmt.Errorf("node %s: %w", rc.Node, err)
	}
	rc.URL = u
	for i, s := range f[2:] {
		key, err := DecodeSecret(s)
		if err != nil {
			// Never the secret itself: the file's lines are the operator's
			// to read, not the log's.
			return nil, fmt.Errorf("node %s: secret %d: %w", rc.Node, i+1, err)
		}
		rc.Secrets = append(rc.Secrets, key)
	}
	return rc, nil
}

// parseReceiverURL parses a receiver's URL, the notify file's or an
// operator's: an absolute http:// or https:// URL, without a #fragment.
func parseReceiverURL(raw string) (*url.URL, error) {
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, errors.New("the URL is not an absolute http:// or https:// URL")
	}
	if u.Fragment != "" {
		return nil, errors.New("the URL has a #fragment, which is never sent")
	}
	return u, nil
}

// secretPrefix begins every Standard Webhooks secret.
const secretPrefix = "whsec_"

// DecodeSecret decodes a Standard Webhooks secret, "whsec_" and base64.
func DecodeSecret(s string) ([]byte, error) {
	b64, ok := strings.CutPrefix(s, secretPrefix)
	if !ok {
		return nil, fmt.Errorf(`want "whsec_" and base64 of at least %d bytes`, minSecret)
	}
	key, err := base64.StdEncoding.DecodeString(b64)
	if err != nil {
		return nil, fmt.Errorf("not base64 after \"whsec_\": %w", err)
	}
	if len(key) < minSecret {
		return nil, fmt.Errorf("%d bytes: want at least %d", len(key), minSecret)
	}
	return key, nil
}

// ReadReceivers reads and parses the notify file at path: a regular
// file of at most MaxConfigFile bytes, so that neither a FIFO (which
// blocks its reader) nor a device such as /dev/zero (which never ends)
// stops the platform starting or reloading.
func ReadReceivers(path string) (*Receivers, error) {
	b, _, err := procfile.Read(context.Background(), path, store.MaxConfigFile)
	if err != nil {
		return nil, err
	}
	return parseReceivers(path, bytes.NewReader(b))
}

// ForOperator is operator's own receiver, or nil when it has none.
func (rs *Receivers) ForOperator(operator string) *Receiver { return rs.byOperator[operator] }

// ForNode is node's receiver, or nil when it has none.
func (rs *Receivers) ForNode(node string) *Receiver {
	if rs == nil {
		return nil
	}
	if r := rs.byOperator[rs.owners[node]]; r != nil {
		if r.disabled {
			return nil
		}
		return r
	}
	if r := rs.byNode[node]; r != nil {
		return r
	}
	return rs.any
}

// NewSecret is a Standard Webhooks secret: 32 random bytes.
func NewSecret() ([]byte, error) {
	key := make([]byte, 32)
	if _, err := rand.Read(key); err != nil {
		return nil, fmt.Errorf("receiver secret: %w", err)
	}
	return key, nil
}

// SecretText is key as an operator sets it in their receiver:
// "whsec_" and base64.
func SecretText(key []byte) string { return "whsec_" + base64.StdEncoding.EncodeToString(key) }

// CheckReceiverURL checks an operator's receiver URL as the notify
// file's are checked.
func CheckReceiverURL(raw string) (*url.URL, error) {
	if err := store.CheckText("receiver: url", raw); err != nil {
		return nil, err
	}
	u, err := parseReceiverURL(raw)
	if err != nil {
		return nil, fmt.Errorf("receiver: %w: %w", err, store.ErrBadInput)
	}
	return u, nil
}

// withOperators is file's receivers (the notify file's) with the
// operators' own, which take the place of the file's for each of the
// operator's nodes (owners: each node's operator), as in force at now.
func withOperators(file *Receivers, ops map[string]store.OperatorReceiver, owners map[string]string, now time.Time) *Receivers {
	rs := &Receivers{byNode: map[string]*Receiver{}}
	if file != nil {
		*rs = *file
	}
	rs.file = file
	rs.owners = maps.Clone(owners)
	rs.byOperator = map[string]*Receiver{}
	for op, r := range ops {
		if rc := operatorReceiver(op, r, now); rc != nil {
			rs.byOperator[op] = rc
		}
	}
	rs.opNodes = map[string][]string{}
	for node, op := range owners {
		if rs.byOperator[op] != nil {
			rs.opNodes[op] = append(rs.opNodes[op], node)
		}
	}
	return rs
}

// operatorReceiver is operator op's own receiver r as in force at now;
// nil when it cannot be sent to (a URL that does not parse, no secret),
// and the notify file's stands for the operator's nodes.
func operatorReceiver(op string, r store.OperatorReceiver, now time.Time) *Receiver {
	u, err := url.Parse(r.URL)
	keys := r.Signing(now)
	if err != nil || len(keys) == 0 {
		return nil
	}
	return &Receiver{Operator: op, URL: u, Secrets: keys, FailingSince: r.FailingSince, disabled: !r.Disabled.IsZero()}
}

// owner is node's operator as rs has it, or "".
func (rs *Receivers) owner(node string) string {
	if rs == nil {
		return ""
	}
	return rs.owners[node]
}
