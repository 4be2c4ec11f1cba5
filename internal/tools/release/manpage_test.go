package main

import (
	"bytes"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// agentHelp is the head of proofkit-agent -help, as flag prints it.
const agentHelp = `usage: proofkit-agent [flags]

Every flag but -version may also be set in the environment as PROOFKIT_AGENT_<NAME>
(-report-url as PROOFKIT_AGENT_REPORT_URL);
a flag given on the command line wins over its variable.

  -interval duration
    	time between readings (default 30s)
  -listen string
    	address for the page at / and /metrics ("off" for none) (default "127.0.0.1:9464")
  -once
    	take one reading, print it as JSON and exit
  -weird string
    	.starts with a dot, holds a \backslash
    	and goes on
`

// TestManPage: the page has its header, name line, synopsis, the help's
// words as the description and one entry per flag, with troff's special
// characters escaped; and man reads it without a warning where installed.
func TestManPage(t *testing.T) {
	bin := binary{name: "proofkit-agent", description: "ProofKit node agent: overload readings\nTells the platform.\nRaises the kernel's table."}
	b := build{version: "v0.5.0", date: time.Date(2026, 12, 4, 10, 0, 0, 0, time.UTC)}
	page, err := manPage(bin, agentHelp, b)
	if err != nil {
		t.Fatal(err)
	}
	s := string(page)
	for _, want := range []string{
		`.TH PROOFKIT\-AGENT 8 "2026-12-04" "proofkit\-agent v0.5.0"` + "\n",
		".SH NAME\nproofkit\\-agent \\- ProofKit node agent: overload readings\n",
		".SH SYNOPSIS\n.B proofkit\\-agent\n[flags]\n",
		"Tells the platform.\nRaises the kernel's table.\n",
		"a flag given on the command line wins over its variable.\n",
		".TP\n.BI \\-interval \" duration\"\ntime between readings (default 30s)\n",
		".TP\n.B \\-once\ntake one reading, print it as JSON and exit\n",
		".TP\n.BI \\-weird \" string\"\n\\&.starts with a dot, holds a \\ebackslash\nand goes on\n",
		".SH SEE ALSO\n",
	} {
		if !strings.Contains(s, want) {
			t.Errorf("the page lacks %q:\n%s", want, s)
		}
	}
	if _, err := manPage(bin, "no usage line\n", b); err == nil {
		t.Error("a help text without a usage line gave a page")
	}
	if _, err := exec.LookPath("man"); err != nil {
		t.Log("no man: the page is not rendered")
		return
	}
	cmd := exec.Command("man", "--warnings", "-E", "UTF-8", "-l", "-")
	cmd.Stdin = bytes.NewReader(page)
	cmd.Env = append(cmd.Environ(), "MANWIDTH=80", "MAN_KEEP_STDERR=1")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil || stderr.Len() > 0 {
		t.Errorf("man -l: %v\n%s", err, stderr.Bytes())
	}
	if !strings.Contains(string(out), "-interval duration") {
		t.Errorf("man -l renders:\n%s", out)
	}
}
