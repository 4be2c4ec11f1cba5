package store

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// CheckText checks a string of an operator's request that the platform
// stores or looks up (a route id, a user, a key): 1 to maxText bytes of
// UTF-8 without control characters.
func CheckText(what, s string) error {
	bad := s == "" || len(s) > maxText || !utf8.ValidString(s) ||
		strings.ContainsFunc(s, func(r rune) bool { return r < 0x20 || r == 0x7f })
	if bad {
		return fmt.Errorf("%s %.80q: want 1 to %d bytes of UTF-8 without control characters: %w", what, s, maxText, ErrBadInput)
	}
	return nil
}

// maxText bounds a route id, a user and a key.
const maxText = 256

// MaxConfigFile bounds the token and notify files: a line per node of a
// 100,000-node fleet is a few megabytes.
const MaxConfigFile = 32 << 20
