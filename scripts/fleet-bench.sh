#!/usr/bin/env bash
# The rules and dashboards at fleet size: starts a real Prometheus on loopback, fills it with 10,000
# agents in 30 clusters (300 scale sets) in the shape of the agent's exposition (scripts/fleet_bench.py:
# by remote write into the head block, as a live server holds its last hours, then one scrape of every
# agent per interval while figures are taken; STORE=blocks writes the history with
# `promtool tsdb create-blocks-from openmetrics` instead, which needs about 20 GB of disk for the text),
# loads the rule files and prints each rule group's evaluation time and Prometheus' CPU per evaluation
# cycle, then every dashboard query's time and CPU. A benchmark that prints figures, not a test:
# docs/performance.md has the figures and how to read them.
#
#   scripts/fleet-bench.sh [RULES_DIR [DASHBOARDS_DIR]]     # default: alerts/ and dashboards/
#   scripts/fleet-bench.sh RULES_DIR DASHBOARDS_DIR RULES_DIR2 DASHBOARDS_DIR2 ...
#
# More pairs are measured one after the other on the same store (before and after a change).
#
# Settings (environment): VMS (10000), CLUSTERS (30), SCALE_SETS (300), HISTORY_MINUTES (30: the
# dashboards' 30 minutes and the rules' 15-minute windows), SCRAPE_INTERVAL (30 s), EVAL_INTERVAL
# (15s), EVALUATIONS (1: evaluations sampled per group after its first; a group evaluated every
# 10 minutes makes that about 20 minutes per rule set, 10 more for each further evaluation), CPU_MINUTES
# (20: the CPU per cycle is taken over at least this many minutes, so that the garbage collector's
# cycles, seconds each over a heap of gigabytes, are averaged in rather than in or out), BUDGET_MINUTES
# (60: the whole run stops after this), KEEP_DIR (a directory to keep the store in instead of a temporary one), STORE
# (remote-write or blocks), NEIGHBOURS (0: each agent exports per-event series for the events naming
# its VM, the agent's default; 1: for every event of its scale set, as with --report.neighbours=true).
# Needs promtool, prometheus (Debian package prometheus) and python3; uses loopback only and removes
# everything it wrote. The store lives in /dev/shm where there is one (about 5 GB of memory for
# Prometheus at 10,000 agents).
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
[[ $# -gt 0 ]] || set -- "$repo/alerts" "$repo/dashboards"
[[ $# -gt 1 ]] || set -- "$1" "$repo/dashboards"
(($# % 2 == 0)) || { echo "fleet-bench: RULES_DIR and DASHBOARDS_DIR come in pairs" >&2; exit 2; }
pairs=("$@")
vms="${VMS:-10000}"
clusters="${CLUSTERS:-30}"
scale_sets="${SCALE_SETS:-300}"
history_minutes="${HISTORY_MINUTES:-30}"
interval="${SCRAPE_INTERVAL:-30}"
eval_interval="${EVAL_INTERVAL:-15s}"
evaluations="${EVALUATIONS:-1}"
cpu_minutes="${CPU_MINUTES:-20}"
store="${STORE:-remote-write}"
neighbours="${NEIGHBOURS:-0}"
[[ "$neighbours" == 0 || "$neighbours" == 1 ]] || { echo "fleet-bench: NEIGHBOURS is 0 or 1" >&2; exit 2; }
[[ "$store" == remote-write || "$store" == blocks ]] || { echo "fleet-bench: STORE is remote-write or blocks" >&2; exit 2; }
((history_minutes < 60)) || [[ "$store" == blocks ]] || { echo "fleet-bench: HISTORY_MINUTES under 60 with remote write (the head takes the last hour)" >&2; exit 2; }
budget=$((${BUDGET_MINUTES:-60} * 60))
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
  # A memory-backed directory where there is one: the store is written and read once.
  tmp="${TMPDIR:-/tmp}"
  [[ -n "${TMPDIR:-}" || ! -w /dev/shm ]] || tmp=/dev/shm
  work="$(mktemp -d "$tmp/fleet-bench.XXXXXX")"
fi
mkdir -p "$work"
prometheus_pid=""
feed_pid=""
cleanup() {
  if [[ -n "$feed_pid" ]] && kill -0 "$feed_pid" 2>/dev/null; then
    kill "$feed_pid" 2>/dev/null || true
    kill -CONT "$feed_pid" 2>/dev/null || true
    wait "$feed_pid" 2>/dev/null || true
  fi
  if [[ -n "$prometheus_pid" ]] && kill -0 "$prometheus_pid" 2>/dev/null; then
    kill "$prometheus_pid" 2>/dev/null || true
    wait "$prometheus_pid" 2>/dev/null || true
  fi
  rm -f "$work"/*.om
  [[ -n "${KEEP_DIR:-}" ]] || rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

rules_in() { # rules_in DIR: the rule files of DIR, checked by promtool
  local f files=()
  for f in "$1"/*.yml "$1"/*.yaml; do
    [[ -e "$f" && "$f" != *.test.yml && "$f" != *.test.yaml ]] && files+=("$f")
  done
  ((${#files[@]})) || { echo "fleet-bench: no rule files in $1" >&2; return 2; }
  promtool check rules "${files[@]}" >/dev/null
  printf '%s\n' "${files[@]}"
}
for ((i = 0; i < ${#pairs[@]}; i += 2)); do
  [[ -d "${pairs[i + 1]}" ]] || { echo "fleet-bench: no directory ${pairs[i + 1]}" >&2; exit 2; }
  rules_in "${pairs[i]}" >/dev/null
  # Absolute: Prometheus reads rule files relative to its configuration's directory.
  pairs[i]="$(cd "${pairs[i]}" && pwd)"
  pairs[i + 1]="$(cd "${pairs[i + 1]}" && pwd)"
done

echo "# Fleet benchmark"
echo
echo "- fleet: $vms VMs, $clusters clusters, $scale_sets scale sets; scrape interval ${interval}s, ${history_minutes} minutes of history; evaluation interval $eval_interval; store: $store; per-event series: $([[ $neighbours == 1 ]] && echo "every event of the scale set (--report.neighbours=true)" || echo "events naming the VM (the agent's default)")"
echo "- machine: $(nproc) CPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(prometheus --version 2>&1 | head -1)"
echo "- source: $(git -C "$repo" rev-parse --short HEAD 2>/dev/null || echo unknown)$(git -C "$repo" diff --quiet 2>/dev/null || echo ' (with uncommitted changes)')"

anchor=$(date +%s)
start=$((anchor - history_minutes * 60))
fleet=(--vms "$vms" --clusters "$clusters" --scale-sets "$scale_sets" --anchor "$anchor" --interval "$interval" --neighbours "$neighbours")
port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
url="http://127.0.0.1:$port"
config() { # config [RULES...]: the Prometheus configuration, with these rule files
  echo "global:"
  echo "  evaluation_interval: $eval_interval"
  if [[ $# -gt 0 ]]; then
    echo "rule_files:"
    for f in "$@"; do echo "  - $f"; done
  fi
}
t0=$(date +%s)
if [[ "$store" == blocks ]]; then
  # The history as OpenMetrics text (about 340 bytes per sample), one create-blocks-from run, then
  # catch-up runs until the newest sample is less than two scrape intervals old. Backfilled data
  # has no staleness markers and lives in blocks rather than in the head: queries read each block.
  need=$((vms * 90 * (history_minutes * 60 / interval + 1) * 340 / 1024 / 1024 / 1024 + 2))
  free=$(df -P -k "$work" | awk 'NR == 2 { print int($4 / 1024 / 1024) }')
  if ((free < need)); then
    echo "fleet-bench: about $need GiB free needed in $work, $free GiB there (set TMPDIR or HISTORY_MINUTES)" >&2
    exit 2
  fi
  blocks() { # blocks FROM TO
    bounded 1800 python3 "$repo/scripts/fleet_bench.py" generate "${fleet[@]}" --start "$1" --end "$2" --out "$work/$1.om"
    bounded 1800 promtool tsdb create-blocks-from openmetrics "$work/$1.om" "$work/data" >/dev/null
    rm -f "$work/$1.om"
  }
  blocks "$start" "$anchor"
  last=$((anchor - (anchor - start) % interval))
  while (($(date +%s) - last >= 2 * interval)); do
    now=$(date +%s)
    blocks $((last + interval)) "$now"
    last=$((now - (now - last - interval) % interval))
  done
fi
config >"$work/prometheus.yml"
prometheus --config.file="$work/prometheus.yml" --storage.tsdb.path="$work/data" \
  --storage.tsdb.retention.time=30d --web.listen-address="127.0.0.1:$port" \
  --web.enable-remote-write-receiver --web.enable-lifecycle \
  --log.level=warn >"$work/prometheus.log" 2>&1 &
prometheus_pid=$!
ready=""
for _ in $(seq 1 120); do
  if python3 -c "import urllib.request; urllib.request.urlopen('$url/-/ready', timeout=2)" 2>/dev/null; then
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
if [[ "$store" == remote-write ]]; then
  # The history, then a scrape of every target each interval while the figures are taken, by
  # remote write into the head block: the layout and the ingestion of a live Prometheus.
  python3 "$repo/scripts/fleet_bench.py" feed "${fleet[@]}" --start "$start" --end "$anchor" --url "$url" --fed "$work/fed" \
    >"$work/feed.log" 2>&1 &
  feed_pid=$!
  until grep -q 'history fed' "$work/feed.log"; do
    kill -0 "$feed_pid" 2>/dev/null || { echo "fleet-bench: feeding failed:" >&2; tail -5 "$work/feed.log" >&2; exit 1; }
    (($(left) > 0)) || { echo "fleet-bench: out of time (BUDGET_MINUTES)" >&2; exit 124; }
    sleep 2
  done
fi
echo "- store built in $(($(date +%s) - t0)) s: $(python3 "$repo/scripts/fleet_bench.py" series --url "$url") series in the head, $(ls -d "$work"/data/01* 2>/dev/null | wc -l) blocks"
config >"$work/bare.yml"

event_id=$(python3 - "$anchor" <<'EOF'
import sys, uuid
# The Freeze wave of cluster 2 (scripts/fleet_bench.py: scenario), VM 0.
print(str(uuid.UUID(int=(0xE7E7 << 96) | (2 << 40) | (2 << 24) | (0 << 16) | 0)).upper())
EOF
)
status=0
for ((i = 0; i < ${#pairs[@]}; i += 2)); do
  mapfile -t rule_files < <(rules_in "${pairs[i]}")
  config "${rule_files[@]}" >"$work/rules.yml"
  echo
  echo "# Rules ${rule_files[*]#"$repo/"}, dashboards ${pairs[i + 1]#"$repo/"}"
  for f in "${rule_files[@]}" "${pairs[i + 1]}"/*.json; do
    echo "- $f: $(sha256sum "$f" | cut -c1-12)"
  done
  bounded "$(left)" python3 "$repo/scripts/fleet_bench.py" measure --url "$url" \
    --dashboards "${pairs[i + 1]}" --event-id "$event_id" --eval-interval "$eval_interval" \
    --evaluations "$evaluations" --minutes "$cpu_minutes" --budget "$((($(left) - 60) * 2 / (${#pairs[@]} - i)))" --prometheus-pid "$prometheus_pid" \
    --feed-pid "${feed_pid:-0}" --fed "$work/fed" --interval "$interval" --config "$work/prometheus.yml" \
    --config-rules "$work/rules.yml" --config-bare "$work/bare.yml" || status=$?
done
rss=$(awk '/VmHWM/ { print int($2 / 1024) " MiB" }' "/proc/$prometheus_pid/status" 2>/dev/null || echo unknown)
echo
echo "Prometheus peak RSS $rss; whole run $(($(date +%s) - started)) s"
if grep -q 'level=error' "$work/prometheus.log"; then
  echo "Prometheus logged errors:"
  grep 'level=error' "$work/prometheus.log" | head -5
fi
exit "$status"
