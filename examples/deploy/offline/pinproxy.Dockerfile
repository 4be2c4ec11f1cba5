# pinproxy's image built with no registry at hand: FROM scratch, fed by
# the static binary of the release tarball (or one built beside it).
# The directory the tarball unpacks to is the build context, and holds
# this file as its Dockerfile:
#
#   tar xzf pinproxy-VERSION-linux-amd64.tar.gz
#   cd pinproxy-VERSION-linux-amd64
#   docker build -t pinproxy .
#
# From a checkout instead (CGO_ENABLED=0 makes the binary static):
#
#   mkdir -p image && CGO_ENABLED=0 go build -trimpath -o image/ ./cmd/pinproxy
#   cp examples/deploy/pinproxy-upstreams image/
#   docker build -f examples/deploy/offline/pinproxy.Dockerfile -t pinproxy image
#
# It runs as examples/deploy/pinproxy.Dockerfile's image does (see there
# for docker run): the same entrypoint, user and stop signal.
FROM scratch
COPY pinproxy /usr/local/bin/pinproxy
COPY pinproxy-upstreams /etc/pinproxy/upstreams
# distroless's nonroot user: the proxy needs no privilege.
USER 65532:65532
EXPOSE 9333
STOPSIGNAL SIGTERM
ENTRYPOINT ["/usr/local/bin/pinproxy", \
    "-listen", "0.0.0.0:9333", \
    "-upstreams-file", "/etc/pinproxy/upstreams", \
    "-admin", "127.0.0.1:9334", \
    "-shutdown-timeout", "30s", \
    "-log-format", "json"]
