# The agent's image built with no registry at hand: FROM scratch, fed by
# the static binary of the release tarball (or one built beside it).
# The directory the tarball unpacks to is the build context, and holds
# this file as its Dockerfile:
#
#   tar xzf proofkit-agent-VERSION-linux-amd64.tar.gz
#   cd proofkit-agent-VERSION-linux-amd64
#   cp /etc/ssl/certs/ca-certificates.crt .    # the host's CAs, for an https report URL
#   docker build -t proofkit-agent .
#
# From a checkout instead (any host with Go; CGO_ENABLED=0 makes the
# binary static, as scratch needs):
#
#   mkdir -p image && CGO_ENABLED=0 go build -trimpath -o image/ ./cmd/proofkit-agent
#   cp /etc/ssl/certs/ca-certificates.crt image/
#   docker build -f examples/deploy/offline/proofkit-agent.Dockerfile -t proofkit-agent image
#
# The image is the one examples/deploy/Dockerfile makes from the
# registry's golang and distroless images: the same entrypoint, health
# check and volume, so examples/deploy/docker-compose.yml runs it as it
# is (compose uses the local proofkit-agent image instead of building).
FROM scratch
COPY proofkit-agent /usr/local/bin/proofkit-agent
COPY ca-certificates.crt /etc/ssl/certs/ca-certificates.crt
VOLUME ["/var/lib/proofkit-agent"]
HEALTHCHECK --interval=30s --timeout=10s --start-period=30s --retries=3 \
    CMD ["/usr/local/bin/proofkit-agent", "-healthcheck"]
ENTRYPOINT ["/usr/local/bin/proofkit-agent", \
    "-proc", "/host/proc", "-sys", "/host/sys", \
    "-state-dir", "/var/lib/proofkit-agent", "-sysctl-dir", "/config"]
