# pinproxy as a container image. Build from the repository root:
#
#   docker build -f examples/deploy/pinproxy.Dockerfile -t pinproxy .
#   docker run -d --name pinproxy -p 9333:9333 \
#       -v $PWD/examples/deploy/pinproxy-upstreams:/etc/pinproxy/upstreams:ro pinproxy
#   docker kill -s HUP pinproxy    # re-read the upstreams file
#   docker stop -t 45 pinproxy     # SIGTERM: drain up to 30 s, then close
#
# The admin port (/metrics, /status, /healthz, /readyz) listens on the
# container's loopback; publish it by adding -admin 0.0.0.0:9334 to the
# command and -p 127.0.0.1:9334:9334 to docker run.
FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN CGO_ENABLED=0 go build -trimpath -ldflags="-s -w" -o /out/pinproxy ./cmd/pinproxy

# distroless/static: no shell; runs as its nonroot user.
FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/pinproxy /usr/local/bin/pinproxy
COPY examples/deploy/pinproxy-upstreams /etc/pinproxy/upstreams
EXPOSE 9333
STOPSIGNAL SIGTERM
ENTRYPOINT ["/usr/local/bin/pinproxy", \
    "-listen", "0.0.0.0:9333", \
    "-upstreams-file", "/etc/pinproxy/upstreams", \
    "-admin", "127.0.0.1:9334", \
    "-shutdown-timeout", "30s", \
    "-log-format", "json"]
