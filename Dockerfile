# syntax=docker/dockerfile:1
#
# idemgate container image.
#
#   docker build -t idemgate .
#   docker run --rm --stop-timeout 35 -p 8080:8080 -p 9090:9090 \
#     --add-host=host.docker.internal:host-gateway idemgate
#
# --stop-timeout above shutdown_grace (30s): docker stop otherwise kills the
# gateway after 10s, cutting off requests still in flight.
#
# The image ships deploy/docker/idemgate.toml as /etc/idemgate/idemgate.toml:
# the quick-start config with 0.0.0.0 listeners, the embedded store in the
# /var/lib/idemgate volume and the upstream at host.docker.internal:3000.
# Mount your own file over it (-v ./my.toml:/etc/idemgate/idemgate.toml:ro).
# See docs/deploy.md.

ARG RUST_VERSION=1.95
ARG DEBIAN_RELEASE=bookworm

# ---------------------------------------------------------------- build stage
FROM rust:${RUST_VERSION}-slim-${DEBIAN_RELEASE} AS build
WORKDIR /src

# Dependencies first, in their own layer: it is rebuilt only when Cargo.toml,
# Cargo.lock or .cargo/config.toml (SQLite's build flags) change. The stub
# sources are replaced by the real ones below; the stub bench stays, because
# Cargo.toml names it and cargo refuses a manifest whose targets are missing.
COPY Cargo.toml Cargo.lock ./
COPY .cargo ./.cargo
RUN mkdir src benches \
 && echo 'fn main() {}' > src/main.rs \
 && echo 'fn main() {}' > benches/hot_path.rs \
 && touch src/lib.rs \
 && cargo build --release --locked \
 && rm -rf src

# The real sources. touch makes them newer than the stub's build artifacts, so
# cargo rebuilds the crate itself (COPY keeps the build context's mtimes).
COPY src ./src
RUN touch src/main.rs src/lib.rs \
 && cargo build --release --locked \
 && cp target/release/idemgate /usr/local/bin/idemgate \
 && /usr/local/bin/idemgate --version

# -------------------------------------------------------------- runtime stage
FROM debian:${DEBIAN_RELEASE}-slim AS runtime

# ca-certificates: the system roots that TLS to Postgres (sslmode=require),
# rediss:// and https upstreams verify against (an upstream falls back to the
# Mozilla roots built into the binary only where the system has none).
# curl: only for the HEALTHCHECK below (about 1 MB with --no-install-recommends;
# the gateway has no HTTP client subcommand of its own).
# Versions are not pinned: a rebuild picks up Debian security updates.
# hadolint ignore=DL3008
RUN apt-get update \
 && apt-get install -y --no-install-recommends ca-certificates curl \
 && rm -rf /var/lib/apt/lists/*

# A fixed, non-root uid/gid (10001), matching runAsUser in deploy/kubernetes.
RUN groupadd --system --gid 10001 idemgate \
 && useradd --system --uid 10001 --gid idemgate --home-dir /var/lib/idemgate \
      --no-create-home --shell /usr/sbin/nologin idemgate \
 && mkdir -p /etc/idemgate /var/lib/idemgate \
 && chown idemgate:idemgate /var/lib/idemgate

COPY --from=build /usr/local/bin/idemgate /usr/local/bin/idemgate
COPY deploy/docker/idemgate.toml /etc/idemgate/idemgate.toml

# The embedded store's file (store.path = "/var/lib/idemgate/idemgate.db").
VOLUME ["/var/lib/idemgate"]
WORKDIR /var/lib/idemgate
USER 10001:10001

ENV IDEMGATE_CONFIG=/etc/idemgate/idemgate.toml
# 8080: data plane (server.listen); 9090: admin plane (server.admin_listen).
EXPOSE 8080 9090

# /healthz is 200 while the process serves. A config that moves admin_listen
# off port 9090 must change this line too (or docker run --no-healthcheck).
HEALTHCHECK --interval=10s --timeout=3s --start-period=10s --retries=3 \
  CMD ["curl", "-fsS", "-o", "/dev/null", "http://127.0.0.1:9090/healthz"]

STOPSIGNAL SIGTERM
ENTRYPOINT ["idemgate"]
CMD ["serve", "-c", "/etc/idemgate/idemgate.toml"]
