#!/usr/bin/env bash
# Validates deploy/ offline: the Dockerfile with hadolint, deploy/compose.yaml and its Kafka
# override against the compose-spec schema, and the Kubernetes base, production and Kafka
# overlays rendered by kustomize (kubectl's) and checked with kubernetes-validate --strict
# against the Kubernetes version it bundles. Any finding fails. The validators come from
# `deploy/validate-requirements.txt`; give their virtualenv's bin directory as $1 (.ci/run
# does), or have them on PATH.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ -n "${1:-}" ]; then
    export PATH="$1:$PATH"
fi

echo "-- hadolint Dockerfile"
hadolint --failure-threshold style Dockerfile

for compose in deploy/compose.yaml deploy/compose.kafka.yaml; do
    echo "-- compose-spec schema: $compose"
    check-jsonschema --builtin-schema vendor.compose-spec "$compose"
done

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
# The overlay generates its Secrets from files kept out of the repository: render a copy given
# throwaway ones.
cp -r deploy/kubernetes "$work/"
mkdir -p "$work/kubernetes/overlays/production/secrets"
head -c 48 /dev/urandom | base64 >"$work/kubernetes/overlays/production/secrets/jwt-hs256-secret"
printf 'postgres://mesh:unused@db.invalid:5432/mesh' >"$work/kubernetes/overlays/production/secrets/database-url"
for target in base overlays/production overlays/kafka; do
    echo "-- kustomize $target, kubernetes-validate --strict (its newest bundled Kubernetes version)"
    rendered="$work/$(echo "$target" | tr / -).yaml"
    kubectl kustomize "$work/kubernetes/$target" >"$rendered"
    kubernetes-validate --strict --quiet "$rendered"
    echo "$(grep -c '^kind:' "$rendered") resources valid"
done
