package deploytest

import (
	"regexp"
	"strings"
	"testing"
)

// settingLine is a line of a /etc/default file systemd's EnvironmentFile=
// reads as the operator means it: KEY=VALUE with no comment after it
// (systemd would keep "# …" in the value).
var settingLine = regexp.MustCompile(`^[A-Z][A-Z0-9_]*=[^#]*$`)

// TestSettingsFiles: each unit reads its /etc/default file, and each file
// holds only settings and comments, under its binary's prefix.
func TestSettingsFiles(t *testing.T) {
	for _, c := range []struct{ unit, file, prefix string }{
		{"proofkit-agent.service", "proofkit-agent.default", "PROOFKIT_AGENT_"},
		{"pinproxy.service", "pinproxy.default", "PINPROXY_"},
		{"proofkit-platform.service", "proofkit-platform.default", "PLATFORM_"},
	} {
		unit := Read(t, c.unit)
		want := "-/etc/default/" + strings.TrimSuffix(c.file, ".default")
		if got := UnitValue(t, c.unit, unit, "EnvironmentFile"); got != want {
			t.Errorf("%s: EnvironmentFile=%s, want %s", c.unit, got, want)
		}
		for i, l := range strings.Split(Read(t, c.file), "\n") {
			l = strings.TrimSpace(l)
			if l == "" || strings.HasPrefix(l, "#") {
				continue
			}
			if !settingLine.MatchString(l) || !strings.HasPrefix(l, c.prefix) {
				t.Errorf("%s:%d: %q: want %sNAME=VALUE, a comment on a line of its own", c.file, i+1, l, c.prefix)
			}
		}
	}
}

// TestAgentUnitSettings: every setting, the unit's own included, is a
// variable: the platform's address and the token file come from
// /etc/default/proofkit-agent, where an operator sets them, and the
// unit's choices are Environment= lines that file or a drop-in
// overrides, never flags on ExecStart, which would win over both; the
// agent refuses to run without an address, and systemd does not retry.
func TestAgentUnitSettings(t *testing.T) {
	unit := Read(t, "proofkit-agent.service")
	if args := strings.Fields(UnitValue(t, "proofkit-agent.service", unit, "ExecStart")); len(args) != 1 {
		t.Errorf("ExecStart gives flags %q: a flag wins over /etc/default/proofkit-agent and over a drop-in's Environment=; make it an Environment= line", args[1:])
	}
	if got := UnitEnvironment(t, "proofkit-agent.service", unit)["PROOFKIT_AGENT_REQUIRE_REPORT"]; got != "true" {
		t.Errorf("Environment=PROOFKIT_AGENT_REQUIRE_REPORT=%q, want true", got)
	}
	if got := UnitValue(t, "proofkit-agent.service", unit, "RestartPreventExitStatus"); got != "2" {
		t.Errorf("RestartPreventExitStatus=%s, want 2 (the agent's configuration errors)", got)
	}
	settings := Settings(t, "proofkit-agent.default")
	if url, ok := settings["PROOFKIT_AGENT_REPORT_URL"]; !ok || url != "" {
		t.Errorf("proofkit-agent.default: PROOFKIT_AGENT_REPORT_URL=%q (set: %v), want the line, empty, for the operator to fill", url, ok)
	}
	if got := settings["PROOFKIT_AGENT_TOKEN_FILE"]; got != "/etc/proofkit-agent/token" {
		t.Errorf("proofkit-agent.default: PROOFKIT_AGENT_TOKEN_FILE=%q, want /etc/proofkit-agent/token", got)
	}
	for _, name := range []string{"proofkit-agent.service", "proofkit-agent.default"} {
		for i, l := range strings.Split(Read(t, name), "\n") {
			if strings.Contains(l, "platform.example/") && !strings.HasPrefix(strings.TrimSpace(l), "#") {
				t.Errorf("%s:%d: %q: the documentation's placeholder as a setting", name, i+1, l)
			}
		}
	}
}

// TestPlatformUnitVerifies: the platform's unit passes systemd-analyze
// verify (the agent's and the proxy's are checked by their commands'
// tests against the built binaries).
func TestPlatformUnitVerifies(t *testing.T) {
	VerifyUnit(t, "proofkit-platform.service", "/usr/local/bin/proofkit-platform", "/bin/true")
}
