#!/usr/bin/env python3
"""Polling under scrapes of a large exposition, driven by scripts/scrape-bench.sh.

Starts the simulator (the binary's `simulator` subcommand) serving a document of EVENTS events that
all name this VM, and the agent polling it every second; once the agent shows them all, SCRAPERS
clients scrape /metrics back to back (gzip accepted, as Prometheus asks) for SECONDS seconds while
/healthz is probed twice a second. Then it prints what the simulator saw of polling (the GETs of
`GET /control/requests` during the window, and the longest gap between two) and what the agent
counted (IMDS request failures by reason during the window, `up`), with the scrapes answered and
the slowest /healthz answer. Last, the agent's memory (VmRSS, and VmHWM, the peak) with the document
loaded, after the scrapes, and once the document is empty again (after `--settle` seconds of
polling and a scrape).
"""

import argparse
import http.client
import json
import os
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from datetime import datetime

P = "azure_scheduled_events_"
VM = "bench_0"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def get(url, timeout=60):
    with urllib.request.urlopen(url, timeout=timeout) as answer:
        return answer.read().decode()


def wait_for(what, check, timeout=120):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if check():
                return
        except OSError:
            pass
        time.sleep(0.2)
    sys.exit(f"timed out waiting for {what}")


def failures(exposition):
    counts = {}
    for line in exposition.splitlines():
        if line.startswith(P + "imds_request_failures_total{") and 'operation="get"' in line:
            reason = line.split('reason="')[1].split('"')[0]
            counts[reason] = float(line.rsplit(" ", 1)[1])
    return counts


def value(exposition, series):
    for line in exposition.splitlines():
        if line.startswith(series + " "):
            return float(line.rsplit(" ", 1)[1])
    return None


def memory(pid):
    fields = {}
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            name, _, rest = line.partition(":")
            if name in ("VmRSS", "VmHWM"):
                fields[name] = int(rest.split()[0]) / 1024
    return f"VmRSS {fields['VmRSS']:.1f} MiB, VmHWM (peak) {fields['VmHWM']:.1f} MiB"


def stop_all(processes):
    """Terminates every process, then kills those still running 10 s later."""
    for process in processes:
        process.terminate()
    for process in processes:
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()


def parse_at(text):
    # RFC 3339 with nanoseconds: keep microseconds for Python.
    date, fraction = text.rstrip("Z").split(".")
    return datetime.fromisoformat(f"{date}.{fraction[:6]}+00:00").timestamp()


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("binary", help="the agent")
    parser.add_argument("--simulator", help="the binary whose simulator to run (default: the agent's)")
    parser.add_argument("--events", type=int, default=5000)
    parser.add_argument("--scrapers", type=int, default=40)
    parser.add_argument("--seconds", type=float, default=30)
    parser.add_argument("--settle", type=float, default=10)
    parser.add_argument("--resources", type=int, default=1,
                        help="VMs each event names (this VM first, then others)")
    parser.add_argument("--id-length", type=int, default=36,
                        help="bytes of each EventId (Azure's are GUIDs, 36; the agent accepts 64)")
    parser.add_argument("--long-fields", action="store_true",
                        help="EventType, EventSource and ResourceType unique per event, as long as the EventId")
    args = parser.parse_args()

    sim_port, agent_port = free_port(), free_port()
    sim = f"http://127.0.0.1:{sim_port}"
    agent = f"127.0.0.1:{agent_port}"
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}
    processes = [
        subprocess.Popen(
            [args.simulator or args.binary, "simulator", "--vm.name", VM, f"--web.listen-address=127.0.0.1:{sim_port}"],
            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
    ]
    try:
        wait_for("the simulator", lambda: get(sim + "/control/state") is not None)
        def padded(text):
            return text.ljust(args.id_length, "x")[: max(args.id_length, len(text))]

        events = [
            {
                "EventId": padded(f"E0000000-0000-4000-8000-{i:012d}"),
                "EventStatus": "Scheduled",
                "EventType": padded(f"T{i:06d}") if args.long_fields else "Freeze",
                "ResourceType": padded(f"R{i:06d}") if args.long_fields else "VirtualMachine",
                "Resources": [VM] + [f"bench-neighbour-vmss_{n}" for n in range(1, args.resources)],
                "NotBefore": "Mon, 11 Apr 2050 22:26:58 GMT",
                "Description": "",
                "EventSource": padded(f"S{i:06d}") if args.long_fields else "Platform",
                "DurationInSeconds": 9,
            }
            for i in range(args.events)
        ]
        document = json.dumps({"DocumentIncarnation": 2, "Events": events},
                              separators=(",", ":")).encode()
        put = urllib.request.Request(sim + "/control/document", data=document, method="PUT")
        urllib.request.urlopen(put, timeout=60).close()
        processes.append(
            subprocess.Popen(
                [args.binary, f"--imds.url={sim}", f"--web.listen-address={agent}",
                 "--poll.interval=1s", "--state.file="],
                env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            )
        )
        def shown(exposition):
            return sum(line.startswith(P + "event_resources{") for line in exposition.splitlines())

        def shown_or_refused():
            exposition = get(f"http://{agent}/metrics")
            return shown(exposition) == args.events or value(exposition, P + "up") == 0

        wait_for("the agent to show every event or refuse the document", shown_or_refused)
        if value(get(f"http://{agent}/metrics"), P + "up") == 0:
            print(f"document:            {len(document):,} bytes ({args.events:,} events): refused (up 0)")
            return
        before = get(f"http://{agent}/metrics")
        size = len(before.encode())
        loaded = memory(processes[1].pid)
        mark = json.loads(get(sim + "/control/state"))["requests"]
        start = time.time()
        until = time.monotonic() + args.seconds
        scrapes, errors, health = [0], [], []
        lock = threading.Lock()

        def scraper():
            connection = None
            while time.monotonic() < until:
                try:
                    if connection is None:
                        connection = http.client.HTTPConnection(agent, timeout=60)
                    connection.request("GET", "/metrics", headers={"Accept-Encoding": "gzip"})
                    answer = connection.getresponse()
                    answer.read()
                    with lock:
                        if answer.status == 200:
                            scrapes[0] += 1
                        else:
                            errors.append(answer.status)
                except (OSError, http.client.HTTPException) as error:
                    with lock:
                        errors.append(type(error).__name__)
                    connection = None

        def prober():
            while time.monotonic() < until:
                began = time.monotonic()
                try:
                    with urllib.request.urlopen(f"http://{agent}/healthz", timeout=60) as answer:
                        status = answer.status
                except urllib.error.HTTPError as error:
                    status = error.code
                except OSError as error:
                    status = type(error).__name__
                health.append((status, time.monotonic() - began))
                time.sleep(0.5)

        threads = [threading.Thread(target=scraper) for _ in range(args.scrapers)]
        threads.append(threading.Thread(target=prober))
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        end = time.time()
        scraped = memory(processes[1].pid)
        after = get(f"http://{agent}/metrics")
        log = json.loads(get(sim + "/control/requests"))
        gets = [parse_at(r["at"]) for r in log if r["number"] > mark and r["method"] == "GET"]
        gets = [at for at in gets if at <= end]
        edges = [start] + gets + [end]
        longest = max(b - a for a, b in zip(edges, edges[1:]))
        failed = {reason: count - failures(before).get(reason, 0)
                  for reason, count in failures(after).items()
                  if count - failures(before).get(reason, 0) > 0}
        bad_health = [s for s, _ in health if s != 200]
        print(f"document:            {len(document):,} bytes ({args.events:,} events)")
        print(f"exposition:          {size:,} bytes")
        print(f"scrapers:            {args.scrapers} for {args.seconds:.0f} s")
        print(f"scrapes answered:    {scrapes[0]:,} ({len(errors)} errors: {sorted(set(map(str, errors)))})")
        print(f"polls (GETs):        {len(gets)} in {end - start:.1f} s")
        print(f"longest poll gap:    {longest:.2f} s (window edges included)")
        print(f"IMDS GET failures:   {failed or 'none'}")
        print(f"up after:            {value(after, P + 'up')}")
        print(f"/healthz:            {len(health)} probes, {len(bad_health)} not 200, "
              f"slowest {max(t for _, t in health):.2f} s")
        print(f"memory, loaded:      {loaded}")
        print(f"memory, scraped:     {scraped}")
        empty = json.dumps({"DocumentIncarnation": 3, "Events": []}).encode()
        put = urllib.request.Request(sim + "/control/document", data=empty, method="PUT")
        urllib.request.urlopen(put, timeout=60).close()
        wait_for("the agent to show no event", lambda: shown(get(f"http://{agent}/metrics")) == 0)
        time.sleep(args.settle)
        get(f"http://{agent}/metrics")
        print(f"memory, emptied:     {memory(processes[1].pid)} ({args.settle:.0f} s later)")
    finally:
        stop_all(processes)


if __name__ == "__main__":
    main()
