package pgstore

import (
	"errors"
	"fmt"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"
)

// The secrets a PostgreSQL connection string may hold, by the name libpq
// gives them in a URL's query or a key=value string: what the platform
// never writes to a log or an error. (The password in a URL's user
// information is one too.) sslkey names a file rather than holding the
// key, but where a client key lives is not for the log either.
var dsnSecretKeys = []string{"password", "sslpassword", "sslkey"}

// The environment variables pgx reads the same secrets from.
var dsnSecretEnv = []string{"PGPASSWORD", "PGSSLPASSWORD", "PGSSLKEY"}

const masked = "xxxxx"

// IsURL reports whether a -db value is in URL form (scheme://…) rather
// than key=value form: a "://" before any "=".
func IsURL(dsn string) bool {
	i := strings.Index(dsn, "://")
	return i > 0 && !strings.Contains(dsn[:i], "=")
}

// RedactDSN is a -db value with every secret in it masked, for logs and
// errors: in a URL the password of its user information and the values of
// the password, sslpassword and sslkey parameters; in key=value form the
// values of those keys. What cannot be parsed far enough to tell where a
// secret ends is left out.
func RedactDSN(dsn string) string {
	if IsURL(dsn) {
		return redactDSNURL(dsn)
	}
	return redactKeywords(dsn)
}

func redactDSNURL(dsn string) string {
	u, err := url.Parse(dsn)
	if err != nil || u.Opaque != "" {
		scheme, _, _ := strings.Cut(dsn, "://")
		return scheme + "://(a URL that does not parse, not shown)"
	}
	if _, has := u.User.Password(); has {
		u.User = url.UserPassword(u.User.Username(), masked)
	}
	// The query, pair by pair in its own order, with secret values masked;
	// a pair that does not decode is masked whole.
	if u.RawQuery != "" {
		pairs := strings.Split(u.RawQuery, "&")
		for i, kv := range pairs {
			k, _, _ := strings.Cut(kv, "=")
			name, err := url.QueryUnescape(k)
			switch {
			case err != nil:
				pairs[i] = masked
			case slices.Contains(dsnSecretKeys, strings.ToLower(name)):
				pairs[i] = k + "=" + masked
			}
		}
		u.RawQuery = strings.Join(pairs, "&")
	}
	u.Fragment, u.RawFragment = "", ""
	return u.String()
}

// redactKeywords masks the secrets of a key=value connection string
// (libpq's rules: pairs separated by white space, white space allowed
// around "=", a value either bare, with backslash escapes, or in single
// quotes with \' and \\). Everything from the first place it does not
// parse is left out.
func redactKeywords(s string) string {
	var b strings.Builder
	i := 0
	space := func() {
		for i < len(s) && isSpace(s[i]) {
			i++
		}
	}
	for {
		space()
		if i == len(s) {
			return strings.TrimSpace(b.String())
		}
		start := i
		for i < len(s) && s[i] != '=' && !isSpace(s[i]) {
			i++
		}
		key := s[start:i]
		space()
		if key == "" || i == len(s) || s[i] != '=' {
			return strings.TrimSpace(strings.TrimSpace(b.String()) + " (the rest does not parse, not shown)")
		}
		i++ // '='
		space()
		vstart := i
		if i < len(s) && s[i] == '\'' {
			i++
			for i < len(s) && s[i] != '\'' {
				if s[i] == '\\' {
					i++
				}
				i++
			}
			if i >= len(s) {
				return strings.TrimSpace(strings.TrimSpace(b.String()) + " " + key + "=(an unterminated quoted value and the rest, not shown)")
			}
			i++ // closing quote
		} else {
			for i < len(s) && !isSpace(s[i]) {
				if s[i] == '\\' {
					i++
				}
				i++
			}
			i = min(i, len(s))
		}
		value := s[vstart:i]
		if slices.Contains(dsnSecretKeys, key) {
			value = masked
		}
		b.WriteString(key + "=" + value + " ")
	}
}

func isSpace(c byte) bool {
	return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'
}

// dsnSecrets returns the secret values a -db value and the environment
// hold, each as written and decoded, longest first, for scrubbing text
// that came from the driver. It is generous: a value it is not sure of is
// listed too.
func dsnSecrets(dsn string) []string {
	var out []string
	add := func(v string) {
		for _, s := range []string{v, unescapeKeyword(v), url.QueryEscape(v), url.PathEscape(v)} {
			if s != "" {
				out = append(out, s)
				if q := strconv.Quote(s); len(q) > 2 {
					out = append(out, q[1:len(q)-1])
				}
			}
		}
		if d, err := url.QueryUnescape(v); err == nil && d != "" {
			out = append(out, d)
		}
		if d, err := url.PathUnescape(v); err == nil && d != "" {
			out = append(out, d)
		}
	}
	for _, name := range dsnSecretEnv {
		add(os.Getenv(name))
	}
	if IsURL(dsn) {
		_, rest, _ := strings.Cut(dsn, "://")
		// The user information: up to the last "@" before the path, or
		// the last "@" at all when that finds none.
		auth := rest
		if j := strings.IndexAny(auth, "/?#"); j >= 0 && strings.Contains(auth[:j], "@") {
			auth = auth[:j]
		}
		if at := strings.LastIndex(auth, "@"); at >= 0 {
			if _, pw, ok := strings.Cut(auth[:at], ":"); ok {
				add(pw)
			}
		}
		if _, q, ok := strings.Cut(rest, "?"); ok {
			q, _, _ = strings.Cut(q, "#")
			for kv := range strings.SplitSeq(q, "&") {
				k, v, _ := strings.Cut(kv, "=")
				if name, err := url.QueryUnescape(k); err != nil || slices.Contains(dsnSecretKeys, strings.ToLower(name)) {
					add(v)
				}
			}
		}
	} else {
		for _, key := range dsnSecretKeys {
			// Every place key= appears, as a pair or not: the value to the
			// next white space, and to the closing quote if quoted.
			for j := 0; ; {
				k := strings.Index(dsn[j:], key)
				if k < 0 {
					break
				}
				j += k + len(key)
				rest := strings.TrimLeft(dsn[j:], " \t\n\r\f\v")
				if !strings.HasPrefix(rest, "=") {
					continue
				}
				rest = strings.TrimLeft(rest[1:], " \t\n\r\f\v")
				if strings.HasPrefix(rest, "'") {
					end := 1
					for end < len(rest) && rest[end] != '\'' {
						if rest[end] == '\\' {
							end++
						}
						end++
					}
					add(rest[1:min(end, len(rest))])
				} else if f := strings.Fields(rest); len(f) > 0 {
					add(f[0])
				}
			}
		}
	}
	slices.SortFunc(out, func(a, b string) int { return len(b) - len(a) })
	return slices.Compact(out)
}

// unescapeKeyword undoes a key=value string's backslash escapes.
func unescapeKeyword(v string) string {
	if !strings.Contains(v, `\`) {
		return v
	}
	var b strings.Builder
	for i := 0; i < len(v); i++ {
		if v[i] == '\\' && i+1 < len(v) {
			i++
		}
		b.WriteByte(v[i])
	}
	return b.String()
}

// scrubber masks a -db value's secrets in text from the driver, whose
// own redaction is best effort (a quoted password with an escaped quote,
// an sslkey path in a "cannot read" error).
type scrubber []string

func (sc scrubber) scrub(text string) string {
	for _, v := range sc {
		text = strings.ReplaceAll(text, v, masked)
	}
	return text
}

// dbError is the error of a -db value the driver could not parse or
// connect with: the value redacted, then the driver's words with every
// secret scrubbed. A parse error's copy of the value (the driver's own,
// best-effort redaction) is left out.
func dbError(dsn string, err error) error {
	text := err.Error()
	var pe *pgconn.ParseConfigError
	if errors.As(err, &pe) {
		text = pe.Error()
		inner := ""
		if u := pe.Unwrap(); u != nil {
			inner = u.Error()
			text = strings.TrimSuffix(text, " ("+inner+")")
		}
		if i := strings.LastIndex(text, "`: "); i >= 0 {
			text = text[i+len("`: "):]
		}
		text = "cannot parse: " + text
		if inner != "" {
			text += ": " + inner
		}
	}
	return fmt.Errorf("-db %s: %s", RedactDSN(dsn), scrubber(dsnSecrets(dsn)).scrub(text))
}
