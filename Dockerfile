# azure-scheduled-events-exporter: a small, non-root image.
#
#   docker build --build-arg BUILD_REVISION="$(git rev-parse --short=12 HEAD)" -t azure-scheduled-events-exporter .
#   docker run -d --name azure-scheduled-events-exporter --restart unless-stopped \
#     --network host -v azure-scheduled-events:/var/lib/azure-scheduled-events-exporter \
#     azure-scheduled-events-exporter
#
# IMDS (169.254.169.254) answers only from the host's network namespace: run with --network host on a
# VM, hostNetwork: true on Kubernetes (docs/deploy.md).

ARG RUST_VERSION=1

FROM rust:${RUST_VERSION}-bookworm AS build
# The source revision for azure_scheduled_events_build_info; the build context has no .git.
ARG BUILD_REVISION=unknown
WORKDIR /src
COPY Cargo.toml Cargo.lock build.rs ./
COPY src ./src
COPY benches ./benches
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    BUILD_REVISION="${BUILD_REVISION}" cargo build --release --locked --bin azure-scheduled-events-exporter \
    && install -D -m 0755 target/release/azure-scheduled-events-exporter /out/azure-scheduled-events-exporter \
    && install -d -m 0750 /out/state

# glibc and libgcc, nothing else: no shell, no package manager. The agent uses rustls, not OpenSSL.
FROM gcr.io/distroless/cc-debian12:nonroot
ARG BUILD_REVISION=unknown
LABEL org.opencontainers.image.title="azure-scheduled-events-exporter" \
      org.opencontainers.image.description="Turns Azure Scheduled Events into Prometheus metrics, traces and logs" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.revision="${BUILD_REVISION}" \
      org.opencontainers.image.base.name="gcr.io/distroless/cc-debian12:nonroot"
COPY --from=build /out/azure-scheduled-events-exporter /usr/local/bin/azure-scheduled-events-exporter
# A directory the agent may write, for --state.file; mount a volume here to keep it across containers.
COPY --from=build --chown=65532:65532 /out/state /var/lib/azure-scheduled-events-exporter
WORKDIR /var/lib/azure-scheduled-events-exporter
# distroless' nonroot user (uid 65532).
USER 65532:65532
EXPOSE 10188
ENTRYPOINT ["/usr/local/bin/azure-scheduled-events-exporter"]
