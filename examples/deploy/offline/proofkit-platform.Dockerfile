# The reference platform's image built with no registry at hand: FROM
# scratch, fed by the static binary of the release tarball (or one built
# beside it). The directory the tarball unpacks to is the build context,
# and holds this file as its Dockerfile:
#
#   tar xzf proofkit-platform-VERSION-linux-amd64.tar.gz
#   cd proofkit-platform-VERSION-linux-amd64
#   docker build -t proofkit-platform .
#
# From a checkout instead (CGO_ENABLED=0 makes the binary static):
#
#   mkdir -p image && CGO_ENABLED=0 go build -trimpath -o image/proofkit-platform ./examples/platform
#   cp README.md image/
#   docker build -f examples/deploy/offline/proofkit-platform.Dockerfile -t proofkit-platform image
#
# It runs as examples/deploy/proofkit-platform.Dockerfile's image does
# (see there for docker run): the same entrypoint, volume and stop
# signal, as the same user.
FROM scratch
COPY proofkit-platform /usr/local/bin/proofkit-platform
# scratch has no mkdir: copying a file in makes the state directory, and
# --chown makes it the platform's user's. The platform reads only *.json
# files there.
COPY --chown=65532:65532 README.md /var/lib/proofkit-platform/README.md
# distroless's nonroot user: the platform needs no privilege.
USER 65532:65532
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
