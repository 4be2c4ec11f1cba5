package pgstore

import (
	"errors"
	"net/url"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/proofkit/nodekit/examples/platform/internal/platformtest"
)

// TestRedactDSN: no secret of a -db value is in its redacted form or in
// the error the driver's parse and connect give, whatever the form.
func TestRedactDSN(t *testing.T) {
	for _, dsn := range platformtest.SecretDSNs {
		got := RedactDSN(dsn)
		if strings.Contains(got, platformtest.DSNSecret) {
			t.Errorf("redactDSN(%q) = %q, shows the secret", dsn, got)
		}
		_, err := pgxpool.ParseConfig(dsn)
		if err == nil {
			err = errors.New("parsed")
		}
		if msg := dbError(dsn, err).Error(); strings.Contains(msg, platformtest.DSNSecret) {
			t.Errorf("dbError(%q) = %q, shows the secret", dsn, msg)
		}
	}
	for _, tc := range []struct{ in, want string }{
		{"postgres://u:pw@h:5432/db?sslmode=disable&password=pw2", "postgres://u:xxxxx@h:5432/db?sslmode=disable&password=xxxxx"},
		{"postgres://h/db", "postgres://h/db"},
		{"host=h user=u password='a b' dbname=d", "host=h user=u password=xxxxx dbname=d"},
		{"host=h sslkey = /k.pem  port=5", "host=h sslkey=xxxxx port=5"},
		{"host=h password='open", "host=h password=(an unterminated quoted value and the rest, not shown)"},
		{"host=h junk password=x", "host=h (the rest does not parse, not shown)"},
		{"postgres://u:pw@[bad", "postgres://(a URL that does not parse, not shown)"},
	} {
		if got := RedactDSN(tc.in); got != tc.want {
			t.Errorf("redactDSN(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

// FuzzRedactDSN: RedactDSN takes any string without panicking, and a
// secret put where one goes, in either form and however it is spelled,
// is never in its output nor in the driver's error for it.
func FuzzRedactDSN(f *testing.F) {
	for _, dsn := range platformtest.SecretDSNs {
		f.Add(dsn, "", uint8(0))
	}
	f.Add("", "p a's\\s", uint8(1))
	f.Add("sslmode=disable", "x@y:z/w?q=1&r", uint8(2))
	f.Fuzz(func(t *testing.T, rest, secret string, form uint8) {
		RedactDSN(rest)
		if len(secret) < 4 || strings.ContainsAny(secret, "\x00") || strings.Contains("postgres://u@h:1/db?sslmode=disable host=h user=u dbname=db xxxxx", secret) || strings.Contains(rest, secret) {
			return
		}
		quoted := "'" + strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(secret) + "'"
		key := dsnSecretKeys[int(form)%len(dsnSecretKeys)]
		var dsn string
		switch form % 4 {
		case 0:
			dsn = "host=h user=u " + key + "=" + quoted + " dbname=db " + rest
		case 1:
			dsn = "postgres://u:" + url.PathEscape(secret) + "@h:1/db?sslmode=disable"
		case 2:
			dsn = "postgres://u@h:1/db?sslmode=disable&" + key + "=" + url.QueryEscape(secret)
		case 3:
			dsn = "host=h " + key + " = " + quoted
		}
		if got := RedactDSN(dsn); strings.Contains(got, secret) {
			t.Fatalf("redactDSN(%q) = %q, shows %q", dsn, got, secret)
		}
		_, err := pgxpool.ParseConfig(dsn)
		if err == nil {
			err = errors.New("parsed")
		}
		if msg := dbError(dsn, err).Error(); strings.Contains(msg, secret) {
			t.Fatalf("dbError(%q) = %q, shows %q", dsn, msg, secret)
		}
	})
}
