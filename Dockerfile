# azure-scheduled-events-exporter: a small, non-root image.
#
#   docker build --build-arg BUILD_REVISION="$(git rev-parse --short=12 HEAD)" -t azure-scheduled-events-exporter .
#   docker run -d --name azure-scheduled-events-exporter --restart unless-stopped \
#     --network host -v azure-scheduled-events:/var/lib/azure-scheduled-events-exporter \
#     azure-scheduled-events-exporter
#
# Both architectures in one image index (each stage runs on its platform: natively on a builder of that
# architecture, under QEMU emulation otherwise, which is slow); docs/install.md:
#   docker buildx build --platform linux/amd64,linux/arm64 --build-arg BUILD_REVISION=... -t REGISTRY/NAME:TAG --push .
#
# IMDS (169.254.169.254) answers only from the host's network namespace: run with --network host on a
# VM, hostNetwork: true on Kubernetes (docs/install.md).

ARG RUST_VERSION=1

FROM rust:${RUST_VERSION}-bookworm AS build
# amd64 or arm64, set by BuildKit for the platform being built: the compiled target directory is cached
# per architecture, so a multi-platform build never mixes the two.
ARG TARGETARCH
# The source revision for azure_scheduled_events_build_info; the build context has no .git.
ARG BUILD_REVISION=unknown
WORKDIR /src
COPY Cargo.toml Cargo.lock build.rs ./
COPY src ./src
COPY benches ./benches
RUN --mount=type=cache,id=cargo-registry-${TARGETARCH},target=/usr/local/cargo/registry,sharing=locked \
    --mount=type=cache,id=cargo-target-${TARGETARCH},target=/src/target,sharing=locked \
    BUILD_REVISION="${BUILD_REVISION}" cargo build --release --locked --bin azure-scheduled-events-exporter \
    && install -D -m 0755 target/release/azure-scheduled-events-exporter /out/azure-scheduled-events-exporter \
    && install -d -m 0750 /out/state

# glibc and libgcc, nothing else: no shell, no package manager. The agent uses rustls, not OpenSSL.
FROM gcr.io/distroless/cc-debian12:nonroot
# The release (Cargo.toml's version), the commit, and where the source is published, for the OCI labels:
#   --build-arg VERSION=0.1.0 --build-arg BUILD_REVISION=$(git rev-parse HEAD) --build-arg SOURCE_URL=https://...
ARG VERSION=0.1.0
ARG BUILD_REVISION=unknown
ARG SOURCE_URL=""
LABEL org.opencontainers.image.title="azure-scheduled-events-exporter" \
      org.opencontainers.image.description="Turns Azure Scheduled Events into Prometheus metrics, traces and logs" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${BUILD_REVISION}" \
      org.opencontainers.image.source="${SOURCE_URL}" \
      org.opencontainers.image.base.name="gcr.io/distroless/cc-debian12:nonroot"
COPY --from=build /out/azure-scheduled-events-exporter /usr/local/bin/azure-scheduled-events-exporter
# A directory the agent may write, for --state.file; mount a volume here to keep it across containers.
COPY --from=build --chown=65532:65532 /out/state /var/lib/azure-scheduled-events-exporter
WORKDIR /var/lib/azure-scheduled-events-exporter
# distroless' nonroot user (uid 65532).
USER 65532:65532
EXPOSE 10188
ENTRYPOINT ["/usr/local/bin/azure-scheduled-events-exporter"]
