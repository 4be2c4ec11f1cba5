package main

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// docsPage is pinproxy's page in the repository's docs.
const docsPage = "../../docs/pinproxy.md"

// codeFiles are the sources whose log lines the docs page lists.
func codeFiles(t *testing.T) []string {
	t.Helper()
	files, err := filepath.Glob("../../pinproxy/*.go")
	if err != nil {
		t.Fatal(err)
	}
	cmd, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	files = append(files, cmd...)
	return slices.DeleteFunc(files, func(f string) bool { return strings.HasSuffix(f, "_test.go") })
}

// tableColumn returns the backquoted values in the first column of the
// markdown table whose header row starts with header.
func tableColumn(t *testing.T, page, header string) []string {
	t.Helper()
	_, rest, ok := strings.Cut(page, "\n"+header)
	if !ok {
		t.Fatalf("%s: no table with the header %q", docsPage, header)
	}
	var out []string
	for _, line := range strings.Split(rest, "\n")[1:] {
		if !strings.HasPrefix(line, "|") {
			break
		}
		cells := strings.Split(line, "|")
		if len(cells) < 2 || strings.HasPrefix(strings.TrimSpace(cells[1]), "---") {
			continue
		}
		for _, m := range regexp.MustCompile("`([^`]+)`").FindAllStringSubmatch(cells[1], -1) {
			out = append(out, m[1])
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// The reasons a connection's line gives and the messages pinproxy logs are
// exactly the ones its docs page lists: each written one is documented,
// and each documented one is written.
func TestLogLinesDocumented(t *testing.T) {
	b, err := os.ReadFile(docsPage)
	if err != nil {
		t.Fatal(err)
	}
	page := string(b)
	var code strings.Builder
	for _, f := range codeFiles(t) {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		code.Write(b)
	}
	src := code.String()

	m := regexp.MustCompile(`func \(r endReason\) String\(\) string \{\s*return \[\.\.\.\]string\{([^}]*)\}`).FindStringSubmatch(src)
	if m == nil {
		t.Fatal("endReason.String's table not found in package pinproxy")
	}
	var reasons []string
	for _, q := range regexp.MustCompile(`"([^"]+)"`).FindAllStringSubmatch(m[1], -1) {
		reasons = append(reasons, q[1])
	}
	slices.Sort(reasons)
	if doc := tableColumn(t, page, "| `reason` |"); !slices.Equal(reasons, doc) {
		t.Errorf("reasons written: %q\ndocumented: %q", reasons, doc)
	}

	var msgs []string
	for _, re := range []string{
		`LogAttrs\([^,\n]+, (?:slog\.Level\w+|level), "([^"]+)"`,
		`logLocal\("([^"]+)"`,
		`p\.attempt\([^,\n]+, [^,\n]+, [^,\n]+, "([^"]+)"`,
		`p\.testConnect\([^,\n]+, [^,\n]+, [^,\n]+, [^,\n]+, "([^"]+)"`,
		`const (?:localTestConnect|dialLocal) = "([^"]+)"`,
		`slog\.NewRecord\([^,\n]+, [^,\n]+, "([^"]+)"`,
		`\.log\(p, [^,\n]+, slog\.Level\w+, "([^"]+)"`,
		`log\.(?:Info|Warn|Error|Debug)\("([^"]+)"`,
		`msg :?= "([^"]+)"`,
		`go p\.every\([^,]+, "([^"]+)"`, // logs what+" failed"
	} {
		for _, m := range regexp.MustCompile(re).FindAllStringSubmatch(src, -1) {
			msg := m[1]
			if strings.HasPrefix(re, `go p\.every`) {
				msg += " failed"
			}
			msgs = append(msgs, msg)
		}
	}
	slices.Sort(msgs)
	msgs = slices.Compact(msgs)
	doc := tableColumn(t, page, "| message |")
	doc = append(doc, "connection ended") // the line of its own, above the table
	slices.Sort(doc)
	doc = slices.Compact(doc)
	slices.Sort(doc)
	for _, msg := range msgs {
		if !slices.Contains(doc, msg) {
			t.Errorf("logged but not documented: %q", msg)
		}
	}
	for _, msg := range doc {
		if !slices.Contains(msgs, msg) {
			t.Errorf("documented but never logged: %q", msg)
		}
	}
}
