package deploytest

import (
	"os"
	"slices"
	"testing"
)

func TestUnitValueAndEntrypoint(t *testing.T) {
	unit := "[Service]\nExecStart=/usr/bin/x \\\n    -a 1 \\\n    -b\nExecReload=/bin/kill -HUP $MAINPID\n"
	if got := UnitValue(t, "x.service", unit, "ExecStart"); got != "/usr/bin/x      -a 1      -b" {
		t.Errorf("ExecStart = %q", got)
	}
	if got := UnitValue(t, "x.service", unit, "ExecReload"); got != "/bin/kill -HUP $MAINPID" {
		t.Errorf("ExecReload = %q", got)
	}
	env := UnitEnvironment(t, "x.service", "[Service]\nEnvironment=A=1\nEnvironment=B=2\nEnvironment=A=3\n")
	if len(env) != 2 || env["A"] != "3" || env["B"] != "2" {
		t.Errorf("UnitEnvironment = %v", env)
	}
	df := "FROM scratch\nENTRYPOINT [\"/x\", \\\n    \"-a\", \"1\"]\n"
	if got := Entrypoint(t, "Dockerfile", df); !slices.Equal(got, []string{"/x", "-a", "1"}) {
		t.Errorf("Entrypoint = %q", got)
	}
}

func TestRead(t *testing.T) {
	for _, name := range []string{"pinproxy.service", "proofkit-agent.service", "proofkit-platform.service",
		"proofkit-agent.default", "pinproxy.default", "proofkit-platform.default",
		"Dockerfile", "pinproxy.Dockerfile", "proofkit-platform.Dockerfile",
		"offline/proofkit-agent.Dockerfile", "offline/pinproxy.Dockerfile", "offline/proofkit-platform.Dockerfile"} {
		if Read(t, name) == "" {
			t.Errorf("%s is empty", name)
		}
	}
	if _, err := os.Stat(Path(t, "docker-compose.yml")); err != nil {
		t.Error(err)
	}
}
