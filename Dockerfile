# syntax=docker/dockerfile:1
#
# One image for every parley role: the role is the first argument, e.g.
#   docker run --rm IMAGE processor --nats nats://nats:4222
# (see docker-compose.yml and deploy/). Flags can also be given as PARLEY_*
# environment variables; `docker run --rm IMAGE --help` lists them.

# ---- build ----
FROM golang:1.26 AS build
WORKDIR /src
# Modules first, so editing code does not re-download them.
COPY go.mod go.sum ./
RUN --mount=type=cache,target=/go/pkg/mod \
    go mod download
COPY . .
ARG TARGETOS=linux
ARG TARGETARCH
RUN --mount=type=cache,target=/go/pkg/mod \
    --mount=type=cache,target=/root/.cache/go-build \
    CGO_ENABLED=0 GOOS=${TARGETOS} GOARCH=${TARGETARCH} \
    go build -trimpath -buildvcs=false -ldflags="-s -w" -o /out/parley ./cmd/parley

# ---- runtime ----
# Static, no shell, no package manager; runs as uid/gid 65532 ("nonroot").
FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/parley /parley
# Numeric, so Kubernetes' runAsNonRoot can verify it.
USER 65532:65532
ENTRYPOINT ["/parley"]
CMD ["--help"]
