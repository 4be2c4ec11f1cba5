# The reference platform (examples/platform) as a container image. Build
# from the repository root:
#
#   docker build -f examples/deploy/proofkit-platform.Dockerfile -t proofkit-platform .
#   docker run -d --name platform -p 8080:8080 \
#       -v $PWD/tokens:/etc/proofkit-platform/tokens:ro \
#       -v platform-state:/var/lib/proofkit-platform proofkit-platform
#   docker kill -s HUP platform    # read -notify-file again
#   docker stop platform           # SIGTERM: finish the requests in flight
#
# The tokens file is the one proofkit-platform.default describes (it
# must be readable by the image's user, 65532). Flags after the image's
# name are added to the entrypoint's: with "-db postgres://…" the state
# lives in PostgreSQL and several replicas can share it; without, it is
# a JSON file a node in the volume. GET /healthz answers without a token.
FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN CGO_ENABLED=0 go build -trimpath -ldflags="-s -w" -o /out/proofkit-platform ./examples/platform
RUN mkdir /out/state

# distroless/static: no shell; runs as its nonroot user, who owns the
# state directory.
FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/proofkit-platform /usr/local/bin/proofkit-platform
COPY --from=build --chown=65532:65532 /out/state /var/lib/proofkit-platform
VOLUME ["/var/lib/proofkit-platform"]
EXPOSE 8080
# The platform's own -healthcheck asks its /healthz (no shell, no curl in
# the image); give it the same -listen when the container's differs.
HEALTHCHECK --interval=30s --timeout=10s --start-period=10s --retries=3 \
    CMD ["/usr/local/bin/proofkit-platform", "-healthcheck", "-listen", "127.0.0.1:8080"]
STOPSIGNAL SIGTERM
ENTRYPOINT ["/usr/local/bin/proofkit-platform", \
    "-listen", "0.0.0.0:8080", \
    "-token-file", "/etc/proofkit-platform/tokens", \
    "-state-dir", "/var/lib/proofkit-platform", \
    "-log-format", "json"]
