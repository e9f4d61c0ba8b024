# syntax=docker/dockerfile:1
#
# One image for every parley role: the role is the first argument, e.g.
#   docker run --rm IMAGE processor --nats nats://nats:4222
# (see docker-compose.yml and deploy/). Flags can also be given as PARLEY_*
# environment variables; `docker run --rm IMAGE --help` lists them.
#
# Build the image the Kubernetes manifests run (deploy/base: ghcr.io/parley-dev/parley,
# tag pinned by overlays/prod and overlays/cluster) from a checkout:
#
#   docker build \
#     --build-arg VERSION=0.1.0 \
#     --build-arg REVISION=$(git rev-parse HEAD) \
#     --build-arg CREATED=$(git log -1 --format=%cI) \
#     -t ghcr.io/parley-dev/parley:0.1.0 .
#
# docker-compose.yml builds the same Dockerfile as parley:local (used by
# deploy/overlays/dev). Multi-platform: add --platform linux/amd64,linux/arm64
# with buildx; the Go build cross-compiles, nothing runs under emulation.
# The build context has no .git (.dockerignore), so the version and commit
# come from the build arguments; `parley --version` prints them.

# ---- build ----
# Pinned to go.mod's `go` line (the toolchain that builds parley everywhere
# else); GOTOOLCHAIN=local makes a mismatch fail instead of downloading
# another toolchain. deploy/release_test.go checks the tag against go.mod.
FROM --platform=$BUILDPLATFORM golang:1.26.8 AS build
ENV GOTOOLCHAIN=local
WORKDIR /src
# Modules first, so editing code does not re-download them.
COPY go.mod go.sum ./
RUN --mount=type=cache,target=/go/pkg/mod \
    go mod download
COPY . .
ARG TARGETOS=linux
ARG TARGETARCH
ARG VERSION=""
ARG REVISION=""
ARG CREATED=""
RUN --mount=type=cache,target=/go/pkg/mod \
    --mount=type=cache,target=/root/.cache/go-build \
    CGO_ENABLED=0 GOOS=${TARGETOS} GOARCH=${TARGETARCH} \
    go build -trimpath -buildvcs=false \
      -ldflags="-s -w -X github.com/parley-dev/parley/internal/version.Version=${VERSION} -X github.com/parley-dev/parley/internal/version.Commit=${REVISION} -X github.com/parley-dev/parley/internal/version.Date=${CREATED}" \
      -o /out/parley ./cmd/parley

# ---- runtime ----
# Static (CGO_ENABLED=0), no shell, no package manager; runs as uid/gid
# 65532 ("nonroot"), matching the manifests' runAsUser.
FROM gcr.io/distroless/static-debian12:nonroot
ARG VERSION=""
ARG REVISION=""
ARG CREATED=""
LABEL org.opencontainers.image.title="parley" \
      org.opencontainers.image.description="Human-in-the-loop AI chat turns as workers exchanging CloudEvents over NATS JetStream" \
      org.opencontainers.image.source="https://github.com/parley-dev/parley" \
      org.opencontainers.image.url="https://github.com/parley-dev/parley" \
      org.opencontainers.image.documentation="https://github.com/parley-dev/parley/blob/main/docs/OPERATIONS.md" \
      org.opencontainers.image.vendor="parley" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}" \
      org.opencontainers.image.created="${CREATED}" \
      org.opencontainers.image.base.name="gcr.io/distroless/static-debian12:nonroot"
COPY --from=build /out/parley /parley
# Numeric, so Kubernetes' runAsNonRoot can verify it.
USER 65532:65532
ENTRYPOINT ["/parley"]
CMD ["--help"]
