#!/usr/bin/env bash
# Instructions per unchanged poll, with and without OTLP export (traces, and traces with log events),
# counted by valgrind's callgrind.
# Instruction counts do not depend on what else the machine is doing, unlike CPU time, so this
# settles the "at most 10 % extra CPU per poll with OTLP configured" target that the side-by-side
# bench in benches/agent.rs can only bracket. See docs/performance.md.
#
# Each configuration runs the release binary under callgrind twice, for 15 s and 35 s, against the
# simulator serving an unchanged 3-event document; (instructions of the long run - short run) /
# (polls of the long run - short run) is the cost of one poll, with startup cancelled out. The OTLP
# receivers are live (Python, the official opentelemetry-proto package, in target/otlp-venv), so the
# exporting agents have a healthy connection, as in production.
#
#   scripts/otlp-instructions.sh      needs valgrind, python3 with venv, and a release build
#   OTLP_BIN=path/to/binary scripts/otlp-instructions.sh      measures that binary, built already
set -euo pipefail
cd "$(dirname "$0")/.."
if [[ -n ${OTLP_BIN:-} ]]; then
    bin=$(realpath "$OTLP_BIN")
else
    cargo build --release --locked
    bin=$PWD/target/release/azure-scheduled-events-exporter
fi
work=$(mktemp -d)
pids=()
trap 'kill "${pids[@]}" 2>/dev/null; rm -rf "$work"' EXIT

venv=target/otlp-venv
[[ -x $venv/bin/python ]] || { python3 -m venv "$venv" && "$venv/bin/pip" install -q grpcio opentelemetry-proto; }

cat > "$work/steady.yaml" <<'YAML'
name: steady
events:
  - { type: Freeze, resources: [demo-vmss_0, demo-vmss_1, demo-vmss_2], notice: 2h, duration_in_seconds: 5 }
  - { type: Reboot, source: User, resources: [demo-vmss_0], notice: 2h }
  - { type: Redeploy, resources: [demo-vmss_0, demo-vmss_1, demo-vmss_2], notice: 3h }
YAML
cat > "$work/receiver.py" <<'PY'
import http.server, sys, threading
from concurrent import futures
import grpc
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2 as pb, trace_service_pb2_grpc as rpc
from opentelemetry.proto.collector.logs.v1 import logs_service_pb2 as logs_pb, logs_service_pb2_grpc as logs_rpc

class Grpc(rpc.TraceServiceServicer):
    def Export(self, request, context):
        return pb.ExportTraceServiceResponse()

class GrpcLogs(logs_rpc.LogsServiceServicer):
    def Export(self, request, context):
        return logs_pb.ExportLogsServiceResponse()

class Http(http.server.BaseHTTPRequestHandler):
    def do_POST(self):
        self.rfile.read(int(self.headers.get("content-length", 0)))
        self.send_response(200)
        self.send_header("content-type", "application/x-protobuf")
        self.send_header("content-length", "0")
        self.end_headers()
    def log_message(self, *args):
        pass

server = grpc.server(futures.ThreadPoolExecutor(2))
rpc.add_TraceServiceServicer_to_server(Grpc(), server)
logs_rpc.add_LogsServiceServicer_to_server(GrpcLogs(), server)
server.add_insecure_port("127.0.0.1:" + sys.argv[1])
server.start()
http.server.HTTPServer(("127.0.0.1", int(sys.argv[2])), Http).serve_forever()
PY

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
sim=$(free_port) grpc=$(free_port) http=$(free_port)
"$bin" simulator --web.listen-address=127.0.0.1:$sim --scenario "$work/steady.yaml" >/dev/null 2>&1 &
pids+=($!)
"$venv/bin/python" "$work/receiver.py" "$grpc" "$http" &
pids+=($!)
sleep 2

# Prints "polls instructions" for one run of $2 seconds with the environment in $3...
run() {
    local name=$1 seconds=$2 port
    shift 2
    port=$(free_port)
    env -i PATH="$PATH" "$@" valgrind --tool=callgrind --callgrind-out-file="$work/$name-$seconds.out" \
        "$bin" --imds.url=http://127.0.0.1:$sim --web.listen-address=127.0.0.1:$port \
        --poll.interval=50ms --log.level=warn --state.file= >/dev/null 2>&1 &
    local pid=$!
    sleep "$seconds"
    local polls
    polls=$(curl -s "127.0.0.1:$port/metrics" |
        awk '/^azure_scheduled_events_imds_requests_total\{operation="events"\}/ { print $2 }')
    kill -TERM $pid
    wait $pid || true
    echo "$polls $(awk '/^(summary|totals):/ { print $2; exit }' "$work/$name-$seconds.out")"
}

printf '%-32s %8s %16s\n' configuration polls 'instructions/poll'
for config in "no OTLP" "OTLP gRPC" "OTLP gRPC + log events" "OTLP HTTP/protobuf" \
    "OTLP HTTP/protobuf + log events" "no OTLP (again)"; do
    case $config in
        "OTLP gRPC") env=(OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:$grpc OTEL_EXPORTER_OTLP_PROTOCOL=grpc) ;;
        "OTLP gRPC + log events")
            env=(OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:$grpc OTEL_EXPORTER_OTLP_PROTOCOL=grpc
                OTEL_LOGS_EXPORTER=otlp) ;;
        "OTLP HTTP/protobuf") env=(OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:$http) ;;
        "OTLP HTTP/protobuf + log events") env=(OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:$http OTEL_LOGS_EXPORTER=otlp) ;;
        *) env=() ;;
    esac
    name=$(tr -c 'A-Za-z0-9' - <<<"$config")
    read -r p1 i1 < <(run "$name" 15 "${env[@]}")
    read -r p2 i2 < <(run "$name" 35 "${env[@]}")
    awk -v c="$config" -v p1="$p1" -v i1="$i1" -v p2="$p2" -v i2="$i2" \
        'BEGIN { printf "%-32s %8d %16.0f\n", c, p2 - p1, (i2 - i1) / (p2 - p1) }'
done
