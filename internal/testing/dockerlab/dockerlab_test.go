package dockerlab

import (
	"slices"
	"testing"
)

func TestFinalStage(t *testing.T) {
	df := `FROM golang:1.26 AS build
RUN go build -o /out/x .
# the image
FROM scratch
COPY --from=build /out/x /x
EXPOSE 9333
HEALTHCHECK --interval=30s \
    CMD ["/x", "-healthcheck"]
ENTRYPOINT ["/x", \
    "-listen", ":9333"]
`
	stage := FinalStage(t, "Dockerfile", df)
	want := []string{"EXPOSE 9333", `HEALTHCHECK --interval=30s      CMD ["/x", "-healthcheck"]`, `ENTRYPOINT ["/x",      "-listen", ":9333"]`}
	if !slices.Equal(stage, want) {
		t.Errorf("FinalStage = %q, want %q", stage, want)
	}
	if !HasInstruction(stage, "HEALTHCHECK") || HasInstruction(stage, "VOLUME") {
		t.Errorf("HasInstruction on %q", stage)
	}
}

// TestStart: Start returns a daemon that answers, or skips with the
// reason (TestIntegrationContainer in cmd/pinproxy and
// cmd/proofkit-agent use it in full).
func TestStart(t *testing.T) {
	d := Start(t)
	if out := d.Run("version", "--format", "{{.Server.Version}}"); out == "" {
		t.Error("docker version printed nothing")
	}
}
