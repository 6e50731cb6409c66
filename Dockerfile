# Builds the cqlguard proxy into a small image that runs as a non-root user.
#
#   docker build -t cqlguard .
#   docker run --rm cqlguard version
#   docker run --rm -p 9042:9042 -p 127.0.0.1:9180:9180 \
#       -e CQLGUARD_UPSTREAMS=10.0.0.12:9042 cqlguard
#
# The version: `cqlguard version` names the revision the build stamps, as
# make build does: git describe's, read from the build context's .git (see
# .dockerignore), or the REVISION build argument when the context has no
# readable .git (a tarball, or a Git worktree, whose .git file points
# outside the context):
#
#   docker build --build-arg REVISION=$(git describe --always --dirty) -t cqlguard .
#
# Without either the image still builds, and names no revision. A context
# that lacks tracked files says "-dirty": .dockerignore leaves out only what
# Git ignores.
FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
# The product's module alone: go.work also ties in the benchmark tool's and
# the deploy tests' modules, whose dependencies the binary does not use.
ENV GOWORK=off
# -s -w strip symbols, not the build information.
ARG REVISION
RUN rev=${REVISION:-$(git describe --always --dirty 2>/dev/null)}; \
    CGO_ENABLED=0 go build -trimpath -ldflags="-s -w -X main.revision=$rev" -o /cqlguard ./cmd/cqlguard

# No shell in this image, so no HEALTHCHECK: probe /healthz and /readyz on
# the admin port from outside (Kubernetes probes, see deploy/kubernetes).
FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /cqlguard /cqlguard
COPY config.example.yaml /etc/cqlguard/cqlguard.yaml
# Inside a container the listeners must take connections from outside it.
# These apply over the configuration file (flags apply over them): a file
# mounted at /etc/cqlguard/cqlguard.yaml cannot change the addresses, set
# them here or with flags. Advertise is what drivers dial: the host's
# loopback for `docker run -p 9042:9042`, and a pod's for a sidecar.
ENV CQLGUARD_CONFIG=/etc/cqlguard/cqlguard.yaml \
    CQLGUARD_LISTEN=0.0.0.0:9042 \
    CQLGUARD_ADVERTISE=127.0.0.1:9042 \
    CQLGUARD_ADMIN_LISTEN=0.0.0.0:9180
EXPOSE 9042 9180
# distroless's nonroot, by number so that Kubernetes' runAsNonRoot can
# verify it.
USER 65532:65532
ENTRYPOINT ["/cqlguard"]
CMD ["serve"]
