#!/usr/bin/env bash
# Polling under forty scrapers of a 5,000-event exposition (docs/performance.md): the longest gap
# between the agent's GETs as the simulator saw them, the failures the agent counted, /healthz.
# Builds the release binary unless BINARY names one (to compare an older build).
#
#   scripts/scrape-bench.sh                         5,000 events, 40 scrapers, 30 s
#   scripts/scrape-bench.sh --events 17000 --seconds 10
#   BINARY=/tmp/old/azure-scheduled-events-exporter scripts/scrape-bench.sh
set -euo pipefail

cd "$(dirname "$0")/.."
binary=${BINARY:-target/release/azure-scheduled-events-exporter}
if [[ -z ${BINARY:-} ]]; then
    cargo build --release --bin azure-scheduled-events-exporter
fi
echo "cpus: $(nproc); commit: $(git describe --always --dirty --abbrev=12 2>/dev/null || echo unknown); binary: $binary"
exec python3 scripts/scrape_bench.py "$binary" "$@"
