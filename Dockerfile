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
# Each release publishes it as ghcr.io/azure-scheduled-events-exporter/azure-scheduled-events-exporter:VERSION,
# each platform built natively on a runner of its architecture, with VERSION, BUILD_REVISION and SOURCE_URL
# set, in one index with the Windows images of Dockerfile.windows (.github/workflows/release.yml,
# docs/releasing.md).
#
# IMDS (169.254.169.254) answers only from the host's network namespace: run with --network host on a
# VM, hostNetwork: true on Kubernetes (docs/install.md).

# Base images by digest, not by tag: every build of a release gets the same bytes, whatever the tags point at
# later. Each digest is the multi-platform index of the tag named before it (amd64 and arm64). To update,
# read the index digest each tag points at now, review that image's notes, and replace the whole reference:
#   docker buildx imagetools inspect rust:1.93-bookworm                        # the "Digest:" line
#   docker buildx imagetools inspect gcr.io/distroless/cc-debian12:nonroot
# (or `crane digest IMAGE:TAG`). A newer Rust is a new tag and digest here (rust-version in Cargo.toml is the
# floor). docs/deploy.md#docker says the same.

FROM rust:1.93-bookworm@sha256:7c4ae649a84014c467d79319bbf17ce2632ae8b8be123ac2fb2ea5be46823f31 AS build
# amd64 or arm64, set by BuildKit for the platform being built: the compiled target directory is cached
# per architecture, so a multi-platform build never mixes the two.
ARG TARGETARCH
# The source revision for azure_scheduled_events_build_info; the build context has no .git.
ARG BUILD_REVISION=unknown
WORKDIR /src
COPY Cargo.toml Cargo.lock build.rs ./
COPY .cargo/image.toml ./.cargo/image.toml
COPY src ./src
COPY crates ./crates
COPY benches ./benches
RUN --mount=type=cache,id=cargo-registry-${TARGETARCH},target=/usr/local/cargo/registry,sharing=locked \
    --mount=type=cache,id=cargo-target-${TARGETARCH},target=/src/target,sharing=locked \
    BUILD_REVISION="${BUILD_REVISION}" cargo build --release --locked --config .cargo/image.toml \
        --bin azure-scheduled-events-exporter \
    && install -D -m 0755 target/release/azure-scheduled-events-exporter /out/azure-scheduled-events-exporter \
    && install -d -m 0750 /out/state

# glibc and libgcc, nothing else: no shell, no package manager. The agent uses rustls, not OpenSSL.
FROM gcr.io/distroless/cc-debian12:nonroot@sha256:9dac0a79194e45a7da0158a9c6da57b217585af0786db3845d1f0ec1a0dd182f
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
      org.opencontainers.image.base.name="gcr.io/distroless/cc-debian12:nonroot" \
      org.opencontainers.image.base.digest="sha256:9dac0a79194e45a7da0158a9c6da57b217585af0786db3845d1f0ec1a0dd182f"
COPY --from=build /out/azure-scheduled-events-exporter /usr/local/bin/azure-scheduled-events-exporter
# A directory the agent may write, for --state.file; mount a volume here to keep it across containers.
COPY --from=build --chown=65532:65532 /out/state /var/lib/azure-scheduled-events-exporter
WORKDIR /var/lib/azure-scheduled-events-exporter
# distroless' nonroot user (uid 65532).
USER 65532:65532
EXPOSE 10188
ENTRYPOINT ["/usr/local/bin/azure-scheduled-events-exporter"]
