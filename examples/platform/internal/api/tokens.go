package api

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"io"
	"maps"
	"strings"
	"sync/atomic"

	"github.com/proofkit/nodekit/examples/platform/internal/store"
	"github.com/proofkit/nodekit/internal/procfile"
	"github.com/proofkit/nodekit/overload"
)

// identity is who a bearer token speaks for. The admin is the platform's
// own token: every node, every endpoint. An operator is a node's owner,
// the person the help page speaks to: their own nodes' state, events,
// notices and settings, nobody else's. A node's agent reports for its
// node and does nothing else; its line may name the node's operator.
type identity struct {
	node     string // a node's agent: the node it reports for
	operator string // an operator's token: the operator; an agent's: its node's operator
}

func (id identity) admin() bool { return id.node == "" && id.operator == "" }

// isOperator reports whether id is an operator's own token.
func (id identity) isOperator() bool { return id.node == "" && id.operator != "" }

// Tokens maps each bearer token to what its line says after it: "" (the
// admin), "NODE" (that node's agent), "operator:NAME" (operator NAME) or
// "NODE operator:NAME" (that node's agent, the node being NAME's).
type Tokens map[string]string

// operatorPrefix marks an operator's name in the token file: node ids
// never hold a ':'.
const operatorPrefix = "operator:"

// identityOf parses a tokens value. Its errors quote nothing of v: a
// line written the wrong way round ("NODE TOKEN") has its token where
// the node goes, and the error is printed and logged.
func identityOf(v string) (identity, error) {
	var id identity
	f := strings.Fields(v)
	if len(f) > 0 && !strings.HasPrefix(f[0], operatorPrefix) {
		if store.CheckNodeID(f[0]) != nil {
			return id, fmt.Errorf("the field after the token is neither a node (%s) nor operator:NAME (the field is not repeated here: it may be a token): %w", overload.NodeRule, store.ErrBadInput)
		}
		id.node, f = f[0], f[1:]
	}
	if len(f) > 0 {
		name, ok := strings.CutPrefix(f[0], operatorPrefix)
		if !ok {
			return id, fmt.Errorf("the field after the node: want operator:NAME (the field is not repeated here: it may be a token): %w", store.ErrBadInput)
		}
		if store.CheckOperator(name) != nil {
			return id, fmt.Errorf("the operator's name: want %s: %w", overload.NodeRule, store.ErrBadInput)
		}
		id.operator, f = name, f[1:]
	}
	if len(f) > 0 {
		return id, fmt.Errorf("want TOKEN, TOKEN NODE, TOKEN operator:NAME or TOKEN NODE operator:NAME")
	}
	return id, nil
}

// parseTokens reads a token file: one token a line, then what it may do;
// blank lines and lines starting with # are skipped.
//
//	# the admin (the platform's own token: every node, every endpoint)
//	Zx9…
//	# operator alice: her nodes, their events, notices and settings
//	Hk2… operator:alice
//	# one node's agent: reports for that node only
//	Qm3… de-fra-1
//	# one node's agent, the node being alice's
//	Pw7… de-fra-2 operator:alice
func parseTokens(r io.Reader) (Tokens, error) {
	t := Tokens{}
	sc := bufio.NewScanner(r)
	for line := 1; sc.Scan(); line++ {
		s := strings.TrimSpace(sc.Text())
		if s == "" || strings.HasPrefix(s, "#") {
			continue
		}
		f := strings.Fields(s)
		tok, rest := f[0], strings.Join(f[1:], " ")
		if strings.HasPrefix(tok, operatorPrefix) {
			// Taken as a token, the line would make "operator:NAME",
			// which anyone can guess, the admin's (or an agent's).
			return nil, fmt.Errorf("line %d: no token before %.80s", line, tok)
		}
		if _, err := identityOf(rest); err != nil {
			return nil, fmt.Errorf("line %d: %w", line, err)
		}
		if _, dup := t[tok]; dup {
			return nil, fmt.Errorf("line %d: token listed twice", line)
		}
		t[tok] = rest
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if len(t) == 0 {
		return nil, fmt.Errorf("no token in it")
	}
	if _, err := t.owners(); err != nil {
		return nil, err
	}
	return t, nil
}

// owners is each node's operator as the agents' lines name it; a node
// named with two operators is an error.
func (t Tokens) owners() (map[string]string, error) {
	out := map[string]string{}
	for _, v := range t {
		id, err := identityOf(v)
		if err != nil {
			return nil, err
		}
		if id.node == "" || id.operator == "" {
			continue
		}
		if prev, ok := out[id.node]; ok && prev != id.operator {
			return nil, fmt.Errorf("node %s is named operator %s's and operator %s's", id.node, prev, id.operator)
		}
		out[id.node] = id.operator
	}
	return out, nil
}

// tokenIndex is tokens keyed by the SHA-256 of each token. A request's
// token is hashed once and looked up: checking it costs the same for one
// token as for a token per node of a fleet, and its timing tells nothing
// of the tokens, only of their hashes.
type tokenIndex map[[sha256.Size]byte]identity

// index is t keyed by hash; a value that does not parse (a tokens map
// not read by parseTokens) is left out.
func (t Tokens) index() tokenIndex {
	x := make(tokenIndex, len(t))
	for tok, v := range t {
		if id, err := identityOf(v); err == nil {
			x[sha256.Sum256([]byte(tok))] = id
		}
	}
	return x
}

// lookup returns who the request's bearer token speaks for and whether
// the token is known. The scheme's name is case-insensitive, as HTTP's
// authentication schemes are (RFC 9110, 11.1).
func (x tokenIndex) lookup(header string) (id identity, ok bool) {
	const scheme = "Bearer "
	if len(header) < len(scheme) || !strings.EqualFold(header[:len(scheme)], scheme) {
		return identity{}, false
	}
	// The token is copied to hash it; a copy in an array on the stack
	// saves the heap one []byte(token) makes of a token over 32 bytes.
	var a [128]byte
	id, ok = x[sha256.Sum256(append(a[:0], header[len(scheme):]...))]
	return id, ok
}

// keys is the token file in force: who each token speaks for, put in
// force whole when the file is read again (SIGHUP). Each node's operator
// is the fleet's (Fleet.OwnersNow), set from the same file (ownersWith).
type keys struct{ p atomic.Pointer[tokenIndex] }

// newKeys is toks in force.
func newKeys(toks Tokens) *keys {
	k := &keys{}
	k.put(toks)
	return k
}

// put puts toks in force.
func (k *keys) put(toks Tokens) {
	idx := toks.index()
	k.p.Store(&idx)
}

// load is the token file in force.
func (k *keys) load() tokenIndex { return *k.p.Load() }

// lookup is tokenIndex.lookup in the token file in force.
func (k *keys) lookup(header string) (identity, bool) { return k.load().lookup(header) }

// ownersWith is each node's operator by toks's agent lines and by the
// route table (table), which CheckOwners has found agreeing.
func ownersWith(toks Tokens, table map[string]string) map[string]string {
	owners, _ := toks.owners()
	if owners == nil {
		owners = map[string]string{}
	}
	maps.Copy(owners, table)
	return owners
}

// CheckOwners refuses a token file that names a node's operator
// otherwise than the route table does.
func CheckOwners(toks Tokens, seed map[string]string) error {
	owners, err := toks.owners()
	if err != nil {
		return err
	}
	for node, op := range owners {
		if s, ok := seed[node]; ok && s != op {
			return fmt.Errorf("node %s is operator %s's, and operator %s's in the route table", node, op, s)
		}
	}
	return nil
}

// ReadTokens reads the token file: a regular file of at most
// MaxConfigFile bytes (a FIFO or a device is refused at once, never
// waited on or read without end).
func ReadTokens(path string) (Tokens, error) {
	b, _, err := procfile.Read(context.Background(), path, store.MaxConfigFile)
	if err != nil {
		return nil, err
	}
	return parseTokens(bytes.NewReader(b))
}
