#!/usr/bin/env bash
# Polling and memory under forty scrapers of a 5,000-event exposition (docs/performance.md): the
# longest gap between the agent's GETs as the simulator saw them, the failures the agent counted,
# /healthz, and the agent's resident memory loaded, scraped and emptied. Builds the release binary
# (its simulator serves the document); BINARY names another agent build to measure (an older one).
#
#   scripts/scrape-bench.sh                         5,000 events, 40 scrapers, 30 s
#   scripts/scrape-bench.sh --events 16000 --seconds 10
#   scripts/scrape-bench.sh --events 5000 --id-length 64 --long-fields   every label value at its cap
#   BINARY=/tmp/old/azure-scheduled-events-exporter scripts/scrape-bench.sh
#
# With --attack, basic auth under attack instead (scripts/auth_bench.py, docs/performance.md):
#
#   scripts/scrape-bench.sh --attack passwords      wrong passwords from clients that hang up
#   scripts/scrape-bench.sh --attack idle           40 unauthenticated connections, and newcomers
#   scripts/scrape-bench.sh --attack passwords --cost 10 --seconds 10
set -euo pipefail

cd "$(dirname "$0")/.."
cargo build --release --bin azure-scheduled-events-exporter
current=${CARGO_TARGET_DIR:-target}/release/azure-scheduled-events-exporter
binary=${BINARY:-$current}
echo "cpus: $(nproc); commit: $(git describe --always --dirty --abbrev=12 2>/dev/null || echo unknown); agent: $binary"
if [[ ${1:-} == --attack ]]; then
    exec python3 scripts/auth_bench.py "$binary" --simulator "$current" "$@"
fi
exec python3 scripts/scrape_bench.py "$binary" --simulator "$current" "$@"
