package main

import (
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/proofkit/nodekit/agent"
	"github.com/proofkit/nodekit/agent/agenttest"
	"github.com/proofkit/nodekit/internal/testing/chromium"
	"github.com/proofkit/nodekit/internal/testing/testkit"
)

// TestPageInBrowser loads the agent's page in a real headless browser
// while a node fed by agenttest is overloaded: the DOM says so, with the
// notice's figures, and a screenshot is kept.
func TestPageInBrowser(t *testing.T) {
	chromium.Need(t)
	dir := node(t, agenttest.Node{MemoryUsedPercent: 40, ConntrackCount: 1000})
	p := start(t, dir, "-sysctl", "off", "-state-dir", t.TempDir(), "-interval", "300ms")
	status := func() agent.Status {
		resp, err := http.Get(p.url("/status"))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var s agent.Status
		if err := json.NewDecoder(resp.Body).Decode(&s); err != nil {
			t.Fatal(err)
		}
		return s
	}
	testkit.WaitFor(t, "a reading", func() bool { return status().Reading != nil })
	if err := agenttest.WriteNode(dir, agenttest.Node{MemoryUsedPercent: 95, ConntrackCount: 1000}); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, "the overload", func() bool { return status().Overloaded })
	testkit.WaitFor(t, "the notice in the log", func() bool { return p.count("overload notice") > 0 })
	var notice string
	for line := range strings.SplitSeq(p.log(), "\n") {
		if _, n, ok := strings.Cut(line, `msg="overload notice" `); ok {
			_, notice, _ = strings.Cut(n, `notice="`)
			notice = strings.TrimSuffix(notice, `"`)
		}
	}
	if !strings.Contains(notice, "memory at 95 %") {
		t.Fatalf("the notice %q lacks the memory figure", notice)
	}

	dom := chromium.Run(t, p.url("/"), "--dump-dom")
	for _, want := range []string{
		`<p id="state" class="state overloaded">overloaded since `,
		notice,
		"memory at 95 %",
		"95.0 %",
		"passed, passed, passed",
		"<svg",
	} {
		if !strings.Contains(dom, want) {
			t.Errorf("the DOM lacks %q", want)
		}
	}
	if t.Failed() {
		t.Logf("DOM:\n%s", dom)
	}

	shot := filepath.Join(testkit.ArtifactDir(t), "agent-page.png")
	chromium.Run(t, p.url("/"), "--window-size=1100,1600", "--hide-scrollbars", "--screenshot="+shot)
	fi, err := os.Stat(shot)
	if err != nil || fi.Size() < 10_000 {
		t.Fatalf("screenshot %s: %v (size %v)", shot, err, fi)
	}
	t.Logf("screenshot of the overloaded page: %s (%d bytes)", shot, fi.Size())
	if p.stop() != 0 {
		t.Error("exit status not 0")
	}
}
