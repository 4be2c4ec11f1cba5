package prometheus_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/proofkit/nodekit/overload"
)

const (
	rulesFile = "nodekit-overload.rules.yml"
	testsFile = "nodekit-overload.test.yml"
	amFile    = "alertmanager.yml"
	// interval is the scrape and evaluation interval the rules are written
	// for: one reading every 30 s, as the agent takes them.
	interval = 30 * time.Second
)

// rule is one recording or alerting rule, as far as these tests read it.
type rule struct {
	line   int
	kind   string // "record" or "alert"
	name   string
	labels string // the labels line, raw
	expr   string
}

// parseRules reads the subset of YAML the rule file uses: a "groups:" list
// of groups with "name", "interval" and "rules", each rule a "- record:" or
// "- alert:" with "expr:" on one line or as a block scalar. It is a
// structural check with the standard library only; promtool, when
// installed, checks the file fully.
func parseRules(t *testing.T, path string) (rules []rule, intervals []string) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var (
		cur        *rule
		blockInd   = -1 // indent of the expr key while reading its block
		sawGroups  bool
		lineNumber int
	)
	flush := func() {
		if cur != nil {
			rules = append(rules, *cur)
			cur = nil
		}
	}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		lineNumber++
		line := sc.Text()
		if strings.Contains(line, "\t") {
			t.Errorf("%s:%d: a tab; YAML indents with spaces", path, lineNumber)
		}
		trimmed := strings.TrimSpace(line)
		indent := len(line) - len(strings.TrimLeft(line, " "))
		if blockInd >= 0 {
			if trimmed == "" || indent > blockInd {
				cur.expr += trimmed + "\n"
				continue
			}
			blockInd = -1
		}
		if trimmed == "" || strings.HasPrefix(trimmed, "#") {
			continue
		}
		if !sawGroups {
			if trimmed != "groups:" {
				t.Fatalf("%s:%d: first key is %q, want groups:", path, lineNumber, trimmed)
			}
			sawGroups = true
			continue
		}
		key, value, _ := strings.Cut(strings.TrimPrefix(trimmed, "- "), ":")
		value = strings.TrimSpace(value)
		switch key {
		case "record", "alert":
			if !strings.HasPrefix(trimmed, "- ") {
				t.Errorf("%s:%d: %s not a list item", path, lineNumber, key)
			}
			flush()
			cur = &rule{line: lineNumber, kind: key, name: value}
		case "expr":
			if cur == nil {
				t.Fatalf("%s:%d: expr outside a rule", path, lineNumber)
			}
			if value == "|" || value == "|-" || value == ">" || value == ">-" {
				blockInd = indent
			} else {
				cur.expr = value
			}
		case "labels":
			if cur != nil {
				cur.labels = value
			}
		case "interval":
			intervals = append(intervals, value)
		case "name":
			flush()
		}
	}
	flush()
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	for _, r := range rules {
		if strings.TrimSpace(r.expr) == "" {
			t.Errorf("%s:%d: %s %s has no expr", path, r.line, r.kind, r.name)
		}
	}
	return rules, intervals
}

// TestRulesMatchDefaultLimits: the thresholds, the window and the notice
// hour written in the rules are overload.DefaultLimits().
func TestRulesMatchDefaultLimits(t *testing.T) {
	rules, intervals := parseRules(t, rulesFile)
	if len(intervals) != 1 || intervals[0] != "30s" {
		t.Errorf("group intervals %v, want one group every 30s", intervals)
	}
	l := overload.DefaultLimits()
	// The range that holds the last Window evaluations, and the one that
	// holds the last hour's but not one exactly NoticeEvery old: half an
	// interval short of each, in both Prometheus 2 (closed ranges) and 3
	// (open at the start).
	window := time.Duration(l.Window)*interval - interval/2
	hour := l.NoticeEvery - interval/2
	passed := map[overload.Check]string{
		overload.CheckMemory:         fmt.Sprintf("> bool %v", l.MemoryPercent),
		overload.CheckLoad:           fmt.Sprintf("> bool %v * instance:nodekit_cpus:count", l.LoadPerCPU),
		overload.CheckConntrackFill:  fmt.Sprintf("* 100 >= bool proofkit_agent_nf_conntrack_entries_limit{job=\"proofkit-agent\"} * %v", l.ConntrackFillPercent),
		overload.CheckConntrackDrops: fmt.Sprintf("> bool %d", l.ConntrackDrops),
		overload.CheckListenQueue:    fmt.Sprintf(">= bool %d", l.ListenDrops),
		overload.CheckBandwidth:      fmt.Sprintf("> bool %v", l.BandwidthPercent),
	}
	want := map[string]string{
		"instance_check:nodekit_overload_holds:bool": fmt.Sprintf("[%s]) >= bool %d", window, l.Need),
		"instance:nodekit_overload_notice:bool":      fmt.Sprintf("[%s])", hour),
		"instance:nodekit_overload_start:bool":       fmt.Sprintf("offset %s == 1", interval),
		"instance:nodekit_overload_end:bool":         fmt.Sprintf("offset %s == 1", interval),
		"NodekitOverloaded":                          "instance:nodekit_overloaded:bool == 1",
		"NodekitOverloadNotice":                      "instance:nodekit_overload_notice:bool",
	}
	found := map[string]bool{}
	for _, r := range rules {
		if r.name == "instance_check:nodekit_overload_passed:bool" {
			for i, c := range overload.Checks() {
				if !strings.Contains(r.labels, fmt.Sprintf("check: %s,", c)) {
					continue
				}
				found[string(c)] = true
				if !strings.Contains(r.expr, passed[c]) {
					t.Errorf("%s:%d: check %s: expr %q, want it to contain %q", rulesFile, r.line, c, r.expr, passed[c])
				}
				if o := fmt.Sprintf(`order: "%d"`, i+1); !strings.Contains(r.labels, o) {
					t.Errorf("%s:%d: check %s: labels %s, want %s (notice order)", rulesFile, r.line, c, r.labels, o)
				}
			}
			continue
		}
		if w, ok := want[r.name]; ok {
			found[r.name] = true
			if !strings.Contains(r.expr, w) {
				t.Errorf("%s:%d: %s: expr %q, want it to contain %q", rulesFile, r.line, r.name, r.expr, w)
			}
		}
	}
	for _, c := range overload.Checks() {
		if !found[string(c)] {
			t.Errorf("%s: no rule for check %s", rulesFile, c)
		}
	}
	for name := range want {
		if !found[name] {
			t.Errorf("%s: no rule %s", rulesFile, name)
		}
	}
}

// TestRulesWordNoticesAsThePackage: the promtool test expects, for a
// reading where every check passes, the description the Go package words
// for the same reading.
func TestRulesWordNoticesAsThePackage(t *testing.T) {
	r := overload.Reading{
		At:                time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC),
		MemoryUsedPercent: 92, Load15: 17.3, CPUs: 8,
		ConntrackEntries: 222822, ConntrackMax: 262144, ConntrackDrops: 37,
		ListenDrops: 14,
		Links: []overload.Link{
			{Name: "eth0", RxBitsPerSecond: 870e6, TxBitsPerSecond: 8e6 / 30, SpeedMbps: 1000},
			{Name: "eth1", RxBitsPerSecond: 8000 / 30, TxBitsPerSecond: 8000 / 30, SpeedMbps: 10000},
		},
	}
	var texts []string
	for _, f := range overload.Evaluate(r, overload.Limits{}) {
		texts = append(texts, f.Text)
	}
	if len(texts) != len(overload.Checks()) {
		t.Fatalf("the reading passes %d checks, want all", len(texts))
	}
	b, err := os.ReadFile(testsFile)
	if err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf("description: %q", strings.Join(texts, "; "))
	if !strings.Contains(string(b), want) {
		t.Errorf("%s does not expect the package's wording:\n%s", testsFile, want)
	}
}

// TestPromtool runs promtool's own checks and the unit tests when promtool
// is installed (Debian: apt-get install prometheus).
func TestPromtool(t *testing.T) {
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		t.Skip("promtool not installed (apt-get install prometheus); the structural tests above ran")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for _, args := range [][]string{
		{"check", "rules", rulesFile},
		{"test", "rules", testsFile},
	} {
		out, err := exec.CommandContext(ctx, promtool, args...).CombinedOutput()
		if err != nil {
			t.Errorf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
}

// TestAlertmanagerConfig checks the route names the rules' alerts, and
// runs amtool on it when amtool is installed.
func TestAlertmanagerConfig(t *testing.T) {
	b, err := os.ReadFile(amFile)
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	for _, w := range []string{`alertname = "NodekitOverloadNotice"`, "receiver: operators", "send_resolved: false", "repeat_interval: 1h"} {
		if !strings.Contains(s, w) {
			t.Errorf("%s lacks %s", amFile, w)
		}
	}
	if strings.Contains(s, "\t") {
		t.Errorf("%s has a tab", amFile)
	}
	amtool, err := exec.LookPath("amtool")
	if err != nil {
		t.Log("amtool not installed (apt-get install prometheus-alertmanager): only the structural check ran")
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if out, err := exec.CommandContext(ctx, amtool, "check-config", amFile).CombinedOutput(); err != nil {
		t.Errorf("amtool check-config: %v\n%s", err, out)
	}
}
