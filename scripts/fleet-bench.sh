#!/usr/bin/env bash
# The rules and dashboards at fleet size: builds a store of 10,000 agents in 30 clusters (300 scale
# sets) with `promtool tsdb create-blocks-from openmetrics`, starts a real Prometheus on loopback with
# the rule files, and prints each rule group's evaluation time and every dashboard query's time.
# A benchmark that prints figures, not a test: docs/performance.md has the figures and how to read them.
#
#   scripts/fleet-bench.sh [RULES_DIR [DASHBOARDS_DIR]]     # default: alerts/ and dashboards/
#
# Settings (environment): VMS (10000), CLUSTERS (30), SCALE_SETS (300), HISTORY_MINUTES (35: the
# dashboards' 30 minutes and the rules' 15-minute windows), SCRAPE_INTERVAL (30 s), EVAL_INTERVAL
# (15s), EVALUATIONS (3: evaluations sampled per group), BUDGET_MINUTES (45: the whole run stops
# after this), KEEP_DIR (a directory to keep the store in instead of a temporary one).
# Needs promtool, prometheus (Debian package prometheus) and python3; uses loopback only and removes
# everything it wrote (the store is about 1.5 GB, the OpenMetrics text about 20 GB while it is built).
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
rules_dir="$(cd "${1:-$repo/alerts}" && pwd)"
dashboards_dir="$(cd "${2:-$repo/dashboards}" && pwd)"
vms="${VMS:-10000}"
clusters="${CLUSTERS:-30}"
scale_sets="${SCALE_SETS:-300}"
history_minutes="${HISTORY_MINUTES:-35}"
interval="${SCRAPE_INTERVAL:-30}"
eval_interval="${EVAL_INTERVAL:-15s}"
evaluations="${EVALUATIONS:-3}"
budget=$((${BUDGET_MINUTES:-45} * 60))
started=$(date +%s)
deadline=$((started + budget))

for tool in promtool prometheus python3; do
  command -v "$tool" >/dev/null || { echo "fleet-bench: $tool is required (Debian: apt-get install prometheus python3)" >&2; exit 2; }
done
left() { echo $((deadline - $(date +%s))); }
bounded() { # bounded SECONDS command...: the command, stopped when the run's budget is spent
  local limit=$1; shift
  local rest; rest=$(left)
  ((rest > 0)) || { echo "fleet-bench: out of time (BUDGET_MINUTES)" >&2; return 124; }
  ((limit < rest)) || limit=$rest
  timeout --kill-after=10 "$limit" "$@"
}

work="${KEEP_DIR:-}"
if [[ -z "$work" ]]; then
  work="$(mktemp -d "${TMPDIR:-/tmp}/fleet-bench.XXXXXX")"
fi
mkdir -p "$work"
prometheus_pid=""
cleanup() {
  if [[ -n "$prometheus_pid" ]] && kill -0 "$prometheus_pid" 2>/dev/null; then
    kill "$prometheus_pid" 2>/dev/null || true
    wait "$prometheus_pid" 2>/dev/null || true
  fi
  rm -f "$work"/*.om
  [[ -n "${KEEP_DIR:-}" ]] || rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# About 340 bytes per sample line; the text is removed as soon as its blocks are written.
series_per_vm=90
need=$((vms * series_per_vm * (history_minutes * 60 / interval + 1) * 340 / 1024 / 1024 / 1024 + 4))
free=$(df -P -k "$work" | awk 'NR == 2 { print int($4 / 1024 / 1024) }')
if ((free < need)); then
  echo "fleet-bench: about $need GiB free needed in $work, $free GiB there (set TMPDIR or HISTORY_MINUTES)" >&2
  exit 2
fi

rule_files=()
for f in "$rules_dir"/*.yml "$rules_dir"/*.yaml; do
  [[ -e "$f" && "$f" != *.test.yml && "$f" != *.test.yaml ]] && rule_files+=("$f")
done
((${#rule_files[@]})) || { echo "fleet-bench: no rule files in $rules_dir" >&2; exit 2; }
promtool check rules "${rule_files[@]}" >/dev/null

echo "# Fleet benchmark"
echo
echo "- fleet: $vms VMs, $clusters clusters, $scale_sets scale sets; scrape interval ${interval}s, ${history_minutes} minutes of history; evaluation interval $eval_interval"
echo "- rules: ${rule_files[*]#"$repo/"}"
echo "- dashboards: ${dashboards_dir#"$repo/"}"
echo "- machine: $(nproc) CPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(prometheus --version 2>&1 | head -1)"
echo "- source: $(git -C "$repo" rev-parse --short HEAD 2>/dev/null || echo unknown)$(git -C "$repo" diff --quiet 2>/dev/null || echo ' (with uncommitted changes)')"

# History up to the anchor, then catch-up windows until the newest sample is less than two scrape
# intervals old: Prometheus starts on data as fresh as a live one's.
anchor=$(date +%s)
start=$((anchor - history_minutes * 60))
generate() { # generate FROM TO
  local from=$1 to=$2 file="$work/$1.om"
  bounded 1800 python3 "$repo/scripts/fleet_bench.py" generate --vms "$vms" --clusters "$clusters" \
    --scale-sets "$scale_sets" --anchor "$anchor" --start "$from" --end "$to" --interval "$interval" --out "$file"
  bounded 1800 promtool tsdb create-blocks-from openmetrics "$file" "$work/data" >/dev/null
  rm -f "$file"
}
t0=$(date +%s)
generate "$start" "$anchor"
last=$((anchor - (anchor - start) % interval))
while (($(date +%s) - last >= 2 * interval)); do
  now=$(date +%s)
  generate $((last + interval)) "$now"
  last=$((now - (now - last - interval) % interval))
done
echo "- store: $(du -sh "$work/data" | cut -f1), $(ls -d "$work"/data/01* | wc -l) blocks, built in $(($(date +%s) - t0)) s"

port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
{
  echo "global:"
  echo "  evaluation_interval: $eval_interval"
  echo "rule_files:"
  for f in "${rule_files[@]}"; do echo "  - $f"; done
} >"$work/prometheus.yml"
prometheus --config.file="$work/prometheus.yml" --storage.tsdb.path="$work/data" \
  --storage.tsdb.retention.time=30d --web.listen-address="127.0.0.1:$port" \
  --log.level=warn >"$work/prometheus.log" 2>&1 &
prometheus_pid=$!
ready=""
for _ in $(seq 1 120); do
  if python3 -c "import urllib.request; urllib.request.urlopen('http://127.0.0.1:$port/-/ready', timeout=2)" 2>/dev/null; then
    ready=1
    break
  fi
  kill -0 "$prometheus_pid" 2>/dev/null || break
  sleep 1
done
if [[ -z "$ready" ]]; then
  echo "fleet-bench: Prometheus did not become ready:" >&2
  tail -20 "$work/prometheus.log" >&2
  exit 1
fi

event_id=$(python3 - "$anchor" <<'EOF'
import sys, uuid
# The Freeze wave of cluster 2 (scripts/fleet_bench.py: scenario), VM 0.
print(str(uuid.UUID(int=(0xE7E7 << 96) | (2 << 40) | (2 << 24) | (0 << 16) | 0)).upper())
EOF
)
status=0
bounded 1200 python3 "$repo/scripts/fleet_bench.py" measure --url "http://127.0.0.1:$port" \
  --dashboards "$dashboards_dir" --event-id "$event_id" --eval-interval "$eval_interval" \
  --evaluations "$evaluations" --budget "$(($(left) - 60))" || status=$?
rss=$(awk '/VmHWM/ { print int($2 / 1024) " MiB" }' "/proc/$prometheus_pid/status" 2>/dev/null || echo unknown)
echo
echo "Prometheus peak RSS $rss; whole run $(($(date +%s) - started)) s"
if grep -q 'level=error' "$work/prometheus.log"; then
  echo "Prometheus logged errors:"
  grep 'level=error' "$work/prometheus.log" | head -5
fi
exit "$status"
