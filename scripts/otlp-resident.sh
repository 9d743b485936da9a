#!/usr/bin/env bash
# Resident memory (VmRSS) of the VM packages' binary after 20 s at 50 Hz, three agents side by side against the
# simulator: without OTLP, with traces, with traces and log events, exporting to rotel on loopback (its
# blackhole exporter). A quick check beside the agent bench's rounds (docs/performance.md); needs the build of
# scripts/dist.sh in target/x86_64-unknown-linux-gnu/release and rotel from .ci/run.
#
#   scripts/otlp-resident.sh
set -euo pipefail
cd "$(dirname "$0")/.."
bin=target/x86_64-unknown-linux-gnu/release/azure-scheduled-events-exporter
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
sim=$(free_port) grpc=$(free_port) http=$(free_port)
work=$(mktemp -d)
pids=()
trap 'kill "${pids[@]}" 2>/dev/null; rm -rf "$work"' EXIT
"$bin" simulator --web.listen-address=127.0.0.1:$sim >/dev/null 2>&1 & pids+=($!)
target/ci-tools/bin/rotel-agent start --exporter blackhole --otlp-grpc-endpoint 127.0.0.1:$grpc \
  --otlp-http-endpoint 127.0.0.1:$http --pid-file $work/rotel.pid --log-file $work/rotel.log >/dev/null 2>&1 & pids+=($!)
sleep 2
declare -A agent
for config in "no OTLP" "traces" "traces and log events"; do
  case $config in
    "no OTLP") env=() ;;
    "traces") env=(OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:$http) ;;
    *) env=(OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:$http OTEL_LOGS_EXPORTER=otlp) ;;
  esac
  env -i PATH="$PATH" "${env[@]}" "$bin" --imds.url=http://127.0.0.1:$sim --web.listen-address=127.0.0.1:0 \
    --poll.interval=20ms --log.level=warn --state.file= >/dev/null 2>&1 &
  pids+=($!); agent[$config]=$!
done
sleep 20
for config in "no OTLP" "traces" "traces and log events"; do
  printf '%-24s %s\n' "$config" "$(awk '/^VmRSS/ { printf "%.2f MiB", $2/1024 }' /proc/${agent[$config]}/status)"
done
