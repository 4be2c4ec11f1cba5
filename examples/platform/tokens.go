package main

import (
	"bufio"
	"crypto/sha256"
	"fmt"
	"io"
	"strings"
)

// tokens maps each bearer token to the node it may report for; "" means
// an operator's token, which may report for any node (the reading names
// it) and use every endpoint.
type tokens map[string]string

// parseTokens reads a token file: one token a line, optionally followed by
// the node it belongs to; blank lines and lines starting with # are
// skipped.
//
//	# operator (and agents that name their node in each reading)
//	Zx9…
//	# one node's agent
//	Qm3… de-fra-1
func parseTokens(r io.Reader) (tokens, error) {
	t := tokens{}
	sc := bufio.NewScanner(r)
	for line := 1; sc.Scan(); line++ {
		s := strings.TrimSpace(sc.Text())
		if s == "" || strings.HasPrefix(s, "#") {
			continue
		}
		f := strings.Fields(s)
		if len(f) > 2 {
			return nil, fmt.Errorf("line %d: want TOKEN or TOKEN NODE", line)
		}
		if _, dup := t[f[0]]; dup {
			return nil, fmt.Errorf("line %d: token listed twice", line)
		}
		node := ""
		if len(f) == 2 {
			if err := checkNodeID(f[1]); err != nil {
				return nil, fmt.Errorf("line %d: %w", line, err)
			}
			node = f[1]
		}
		t[f[0]] = node
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if len(t) == 0 {
		return nil, fmt.Errorf("no token in it")
	}
	return t, nil
}

// tokenIndex is tokens keyed by the SHA-256 of each token. A request's
// token is hashed once and looked up: checking it costs the same for one
// token as for a token per node of a fleet, and its timing tells nothing
// of the tokens, only of their hashes.
type tokenIndex map[[sha256.Size]byte]string

func (t tokens) index() tokenIndex {
	x := make(tokenIndex, len(t))
	for tok, node := range t {
		x[sha256.Sum256([]byte(tok))] = node
	}
	return x
}

// lookup returns the node the request's bearer token belongs to and
// whether the token is known. The scheme's name is case-insensitive, as
// HTTP's authentication schemes are (RFC 9110, 11.1).
func (x tokenIndex) lookup(header string) (node string, ok bool) {
	const scheme = "Bearer "
	if len(header) < len(scheme) || !strings.EqualFold(header[:len(scheme)], scheme) {
		return "", false
	}
	// The token is copied to hash it; a copy in an array on the stack
	// saves the heap one []byte(token) makes of a token over 32 bytes.
	var a [128]byte
	node, ok = x[sha256.Sum256(append(a[:0], header[len(scheme):]...))]
	return node, ok
}
