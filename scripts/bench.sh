#!/usr/bin/env bash
# Reproduces docs/performance.md: parse+track times; CPU per poll and memory of the agent polling
# the simulator at 50 Hz next to the floor (../shared/tools/floor, a bare GET+parse loop, built and
# run in the same run), for the image's build (.cargo/image.toml, into target/image) and the VM
# packages' (scripts/dist.sh's binary), both built first; /metrics latency under concurrent scrapes;
# and the size of the binaries. Takes about twenty minutes on two cores, the release builds included.
#
#   scripts/bench.sh              everything
#   scripts/bench.sh agent        only the agent bench (or: parse_track)
set -euo pipefail

cd "$(dirname "$0")/.."
if (($#)); then
    benches=("$@")
else
    benches=(parse_track agent)
fi

echo "== machine"
echo "cpus:   $(nproc)"
echo "model:  $(grep -m1 '^model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')"
echo "kernel: $(uname -sr)"
echo "rustc:  $(rustc --version)"
echo "commit: $(git describe --always --dirty --abbrev=12 2>/dev/null || echo unknown)"

if [[ " ${benches[*]} " == *" agent "* ]]; then
    echo
    echo "== the VM packages' binary (scripts/dist.sh)"
    # The Linux packages' binary, no Windows zip; the packages go beside target/dist, which the test
    # suite reads, not over it.
    DIST_WINDOWS=0 DIST_DIR=target/bench-dist scripts/dist.sh >/dev/null
    VM_PACKAGE_BINARY="$PWD/target/x86_64-unknown-linux-gnu/release/azure-scheduled-events-exporter"
    export VM_PACKAGE_BINARY
    echo "$VM_PACKAGE_BINARY: $(stat -c %s "$VM_PACKAGE_BINARY") bytes"
    echo
    echo "== the image's binary (the Dockerfile's build: .cargo/image.toml)"
    cargo build --release --locked --quiet --config .cargo/image.toml --bin azure-scheduled-events-exporter \
        --target-dir target/image
    IMAGE_BINARY="$PWD/target/image/release/azure-scheduled-events-exporter"
    export IMAGE_BINARY
    echo "$IMAGE_BINARY: $(stat -c %s "$IMAGE_BINARY") bytes"
fi

for bench in "${benches[@]}"; do
    echo
    echo "== cargo bench --workspace --bench $bench"
    cargo bench --workspace --bench "$bench"
done

# `cargo bench` builds the binary with the bench profile, which inherits every setting of
# [profile.release] and writes to the same target/release directory; its dependencies carry the
# features the dev-dependencies add, so it is bigger than any binary that ships.
binary=target/release/azure-scheduled-events-exporter
if [[ -f $binary ]]; then
    bytes=$(stat -c %s "$binary")
    echo
    echo "== this bench's build of the agent"
    echo "$binary: $bytes bytes ($(awk -v b="$bytes" 'BEGIN { printf "%.2f MiB, %.2f MB", b / 1048576, b / 1e6 }'))"
fi
