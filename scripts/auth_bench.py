#!/usr/bin/env python3
"""Polling and a real scraper under attacks on basic auth, driven by `scripts/scrape-bench.sh --attack`.

Starts the simulator (the binary's `simulator` subcommand) and the agent polling it every second
with `--web.config.file` naming one user, `prometheus`, whose bcrypt hash has cost COST. The real
scraper's password is verified once before the attack. Then, for SECONDS seconds:

- `--attack passwords`: CLIENTS clients send `GET /metrics` with a new wrong password on a new
  connection each time and hang up at once, without waiting for the answer;
- `--attack idle`: 40 connections that never authenticate send wrong passwords back to back on
  connections kept open, while new connections that send nothing arrive all the time;

- `--attack waiting`: CLIENTS clients from another address (127.0.0.2) send a new wrong password
  each on a new connection and wait for the answer, so that the checks waiting at once fill every
  place of the budget; the real scraper's password is *not* verified before (as after a restart),
  so its first scrape and first probe need bcrypt during the attack;

and meanwhile the real scraper scrapes once every `--every` seconds (10 s timeout) and `/healthz`
is probed twice a second, both with the right password. It prints the polls the simulator saw in
the window and the longest gap between two, the real scrapes answered, the slowest `/healthz`, the
agent's most threads (/proc/PID/status, every half second), and, before the attack, how long the
agent takes to refuse a wrong password and an unknown user (the medians of 5, new passwords each).
"""

import argparse
import base64
import http.client
import json
import os
import socket
import statistics
import subprocess
import sys
import threading
import time
import urllib.request

sys.path.insert(0, os.path.dirname(__file__))
from scrape_bench import free_port, get, parse_at, stop_all, wait_for  # noqa: E402

VM = "bench_0"
PASSWORD = "bench-password"
# bcrypt("bench-password") at costs 10 and 12 (the bench needs no bcrypt library).
HASHES = {
    10: "$2b$10$zB.8lFf2TFusz5436hQRNewl84HylXUX7XztLmJIXqLAEbKV7Ho1.",
    12: "$2b$12$h4TNGyWp2v1WfiO8H0E0Y.jdGzgfKRf.NKi.Xp5h6j4YamPsfPpdq",
}


def basic(user, password):
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


def threads(pid):
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("Threads:"):
                return int(line.split()[1])
    return 0


def request(agent, path, authorization, timeout=10, source=None):
    """One GET on a new connection (from address `source`): (status or error name, seconds)."""
    began = time.monotonic()
    connection = http.client.HTTPConnection(
        agent, timeout=timeout, source_address=(source, 0) if source else None)
    try:
        connection.request("GET", path, headers={"Authorization": authorization})
        answer = connection.getresponse()
        answer.read()
        status = answer.status
    except (OSError, http.client.HTTPException) as error:
        status = type(error).__name__
    finally:
        connection.close()
    return status, time.monotonic() - began


def refusal_times(agent):
    """Medians of the time to refuse a wrong password and an unknown user, new passwords each."""
    medians = {}
    for label, user in (("wrong password", "prometheus"), ("unknown user", "nobody")):
        times = [request(agent, "/healthz", basic(user, f"probe-{label}-{n}"))[1] for n in range(5)]
        medians[label] = statistics.median(times)
    return medians


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("binary", help="the agent")
    parser.add_argument("--simulator", help="the binary whose simulator to run (default: the agent's)")
    parser.add_argument("--attack", choices=["passwords", "idle", "waiting"], required=True)
    parser.add_argument("--seconds", type=float, default=30)
    parser.add_argument("--cost", type=int, choices=sorted(HASHES), default=12)
    parser.add_argument("--clients", type=int, default=64, help="attacking clients (passwords)")
    parser.add_argument("--every", type=float, default=3, help="seconds between real scrapes")
    args = parser.parse_args()

    sim_port, agent_port = free_port(), free_port()
    sim = f"http://127.0.0.1:{sim_port}"
    agent = f"127.0.0.1:{agent_port}"
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}
    config = f"/tmp/auth-bench-{os.getpid()}.yml"
    with open(config, "w") as file:
        file.write(f"basic_auth_users:\n  prometheus: {HASHES[args.cost]}\n")
    processes = [
        subprocess.Popen(
            [args.simulator or args.binary, "simulator", "--vm.name", VM,
             f"--web.listen-address=127.0.0.1:{sim_port}"],
            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
    ]
    stop = threading.Event()
    try:
        wait_for("the simulator", lambda: get(sim + "/control/state") is not None)
        processes.append(
            subprocess.Popen(
                [args.binary, f"--imds.url={sim}", f"--web.listen-address={agent}",
                 "--poll.interval=1s", "--state.file=", f"--web.config.file={config}"],
                env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            )
        )
        pid = processes[1].pid
        right = basic("prometheus", PASSWORD)
        if args.attack == "waiting":
            wait_for("the agent", lambda: request(agent, "/healthz", "")[0] == 401)
            refusals = {}
        else:
            wait_for("the agent", lambda: request(agent, "/metrics", right)[0] == 200)
            refusals = refusal_times(agent)
        idle_threads = threads(pid)
        sent = [0]
        lock = threading.Lock()

        def hang_up(client):
            n = 0
            while not stop.is_set():
                n += 1
                try:
                    with socket.create_connection(agent.split(":"), timeout=5) as s:
                        wrong = basic("prometheus", f"guess-{client}-{n}")
                        s.sendall(f"GET /metrics HTTP/1.1\r\nHost: a\r\nAuthorization: {wrong}\r\n\r\n".encode())
                    with lock:
                        sent[0] += 1
                except OSError:
                    time.sleep(0.01)

        def unauthenticated(client):
            n, connection = 0, None
            while not stop.is_set():
                n += 1
                try:
                    if connection is None:
                        connection = http.client.HTTPConnection(agent, timeout=30)
                    wrong = basic("prometheus", f"idle-{client}-{n}")
                    connection.request("GET", "/metrics", headers={"Authorization": wrong})
                    connection.getresponse().read()
                    with lock:
                        sent[0] += 1
                except (OSError, http.client.HTTPException):
                    connection = None
                    time.sleep(0.01)

        def waiting(client):
            n = 0
            while not stop.is_set():
                n += 1
                wrong = basic("prometheus", f"waiting-{client}-{n}")
                status, _ = request(agent, "/metrics", wrong, timeout=30, source="127.0.0.2")
                if isinstance(status, int):
                    with lock:
                        sent[0] += 1
                else:
                    time.sleep(0.01)

        def newcomers():
            held = []
            while not stop.is_set():
                try:
                    held.append(socket.create_connection(agent.split(":"), timeout=5))
                except OSError:
                    pass
                if len(held) > 400:
                    held.pop(0).close()
                time.sleep(0.005)
            for s in held:
                s.close()

        if args.attack == "passwords":
            attackers = [threading.Thread(target=hang_up, args=(c,)) for c in range(args.clients)]
        elif args.attack == "waiting":
            attackers = [threading.Thread(target=waiting, args=(c,)) for c in range(args.clients)]
        else:
            attackers = [threading.Thread(target=unauthenticated, args=(c,)) for c in range(40)]
            attackers.append(threading.Thread(target=newcomers))
        scrapes, health, most_threads = [], [], [idle_threads]

        def scraper():
            while not stop.is_set():
                began = time.monotonic()
                scrapes.append(request(agent, "/metrics", right))
                stop.wait(max(0, args.every - (time.monotonic() - began)))

        def prober():
            while not stop.is_set():
                health.append(request(agent, "/healthz", right))
                most_threads.append(threads(pid))
                stop.wait(0.5)

        mark = json.loads(get(sim + "/control/state"))["requests"]
        start = time.time()
        for thread in attackers:
            thread.start()
        if args.attack == "waiting":
            # The real scraper comes once the attackers' checks fill the budget.
            wait_for("the budget full", lambda: request(
                agent, "/healthz", basic("prometheus", "full?"), source="127.0.0.2")[0] == 503)
        observers = [threading.Thread(target=scraper), threading.Thread(target=prober)]
        for thread in observers:
            thread.start()
        time.sleep(args.seconds)
        stop.set()
        end = time.time()
        for thread in observers + attackers:
            thread.join()
        log = json.loads(get(sim + "/control/requests"))
        gets = [parse_at(r["at"]) for r in log if r["number"] > mark and r["method"] == "GET"]
        gets = [at for at in gets if at <= end]
        edges = [start] + gets + [end]
        longest = max(b - a for a, b in zip(edges, edges[1:]))
        answered = sum(1 for status, _ in scrapes if status == 200)
        others = sorted({str(status) for status, _ in scrapes if status != 200})
        print(f"attack:              {args.attack}, bcrypt cost {args.cost}, {args.seconds:.0f} s, "
              f"{sent[0]:,} attacking requests")
        print(f"polls (GETs):        {len(gets)} in {end - start:.1f} s")
        print(f"longest poll gap:    {longest:.2f} s (window edges included)")
        print(f"real scrapes:        {answered} of {len(scrapes)} answered 200 (others: {others or 'none'})")
        refused = sorted({str(status) for status, _ in health if status != 200})
        print(f"/healthz:            {len(health)} probes, {sum(1 for s, _ in health if s != 200)} not 200 "
              f"({refused or 'none'}), slowest {max(t for _, t in health):.2f} s")
        if scrapes and health:
            print(f"first scrape, probe: {scrapes[0][0]} in {scrapes[0][1]:.2f} s, "
                  f"{health[0][0]} in {health[0][1]:.2f} s")
        print(f"agent threads:       {idle_threads} before, at most {max(most_threads)} during")
        if refusals:
            print("refusal time:        " + ", ".join(f"{k} {v * 1000:.0f} ms" for k, v in refusals.items())
                  + " (medians of 5, before the attack)")
    finally:
        stop.set()
        stop_all(processes)
        os.unlink(config)


if __name__ == "__main__":
    main()
