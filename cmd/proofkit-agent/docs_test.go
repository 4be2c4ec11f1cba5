package main

import (
	"bytes"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/proofkit/nodekit/agent"
	"github.com/proofkit/nodekit/agent/agenttest"
	"github.com/proofkit/nodekit/internal/testing/deploytest"
	"github.com/proofkit/nodekit/internal/testing/testkit"
)

// umaskRecipeRe is a documented one-line way to write a token file.
var umaskRecipeRe = regexp.MustCompile(`\(umask 077; echo [^)]*> token\)`)

// TestDocsTokenRecipes runs each documented way to write the token file,
// as an operator with the usual umask 022 would (sudo dropped, /etc moved
// to a temporary directory), and checks that the agent given the file
// reads the token and does not warn that others can read it.
func TestDocsTokenRecipes(t *testing.T) {
	root := filepath.Dir(filepath.Dir(deploytest.Dir(t)))
	var recipes []string
	// docs/agent.md's section on the token: its first sh block.
	b, err := os.ReadFile(filepath.Join(root, "docs", "agent.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(b), "\n## The token\n")
	_, block, ok2 := strings.Cut(section, "```sh\n")
	block, _, ok3 := strings.Cut(block, "```")
	if !ok || !ok2 || !ok3 {
		t.Fatal("docs/agent.md has no sh block under ## The token")
	}
	recipes = append(recipes, block)
	for _, name := range []string{"README.md", "docs/agent.md", "docs/platform.md"} {
		b, err := os.ReadFile(filepath.Join(root, name))
		if err != nil {
			t.Fatal(err)
		}
		recipes = append(recipes, umaskRecipeRe.FindAllString(string(b), -1)...)
	}
	for i, recipe := range recipes {
		dir := t.TempDir()
		etc := filepath.Join(dir, "etc")
		// The package's user, proofkit-agent, is not on a test machine:
		// the file is the test's own.
		script := strings.NewReplacer("sudo ", "", "/etc/proofkit-agent", etc,
			"-o proofkit-agent ", "", "-g proofkit-agent ", "").Replace(recipe)
		cmd := exec.Command("sh", "-c", "umask 022\n"+script)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "TOKEN=tok-A", "tok=tok-A")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("recipe %d %q: %v\n%s", i, recipe, err, out)
		}
		file := filepath.Join(dir, "token")
		if _, err := os.Stat(file); err != nil {
			file = filepath.Join(etc, "token")
		}
		var logs bytes.Buffer
		a, err := agent.New(agent.Config{Node: "n1", Source: nopSource{}, ReportURL: "http://127.0.0.1:1/r",
			TokenFile: file, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
		if err != nil {
			t.Fatalf("recipe %q: %v", recipe, err)
		}
		a.Close()
		if strings.Contains(logs.String(), "can be read by other users") {
			t.Errorf("recipe %q leaves a token file the agent warns of:\n%s", recipe, logs.String())
		}
	}
	if len(recipes) < 3 {
		t.Errorf("found %d token recipes in the docs, want the token section's and the one-liners", len(recipes))
	}
}

// TestPageNamesLinkSpeedFlag: with the real probe, a link whose speed the
// kernel does not know (every link of the fake tree's /sys) is shown on
// the page with the flag that gives it, not the probe's Go field.
func TestPageNamesLinkSpeedFlag(t *testing.T) {
	p := start(t, node(t, agenttest.Node{MemoryUsedPercent: 40}), "-sysctl", "off", "-state-dir", t.TempDir(), "-interval", "1s")
	var body string
	testkit.WaitFor(t, "three readings on the page", func() bool {
		if st := p.status(); st.Reading == nil || st.Reading.Seq < 3 {
			return false
		}
		resp, err := http.Get(p.url("/"))
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		body = string(b)
		return true
	})
	if !strings.Contains(body, "speed unknown") {
		t.Skip("skipping: the network namespace has no link whose speed is unknown")
	}
	if !strings.Contains(body, "-link-speed") || strings.Contains(body, "LinkSpeedMbps") {
		t.Errorf("the page's note on a link of unknown speed does not name -link-speed:\n%s", body)
	}
}
