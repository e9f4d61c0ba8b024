// Package deploy holds parley's Kubernetes manifests (Kustomize base/ and
// overlays/) and the collector config for docker-compose.yml. Its tests
// check those files, the compose file and the Dockerfile against the real
// binary: roles and PARLEY_* variables are read from `parley --help`, the
// JetStream consumers from the workers' source, and the NATS flags are parsed
// by nats-server itself. `kustomize build` runs when kustomize (or kubectl) is
// on PATH, and is skipped otherwise.
//
// Test-only: it may import any of parley's packages, and nothing imports it.
package deploy
