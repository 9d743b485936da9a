#!/usr/bin/env python3
"""The fleet benchmark's two halves, driven by scripts/fleet-bench.sh.

`generate`: OpenMetrics text of a fleet of agents (for `promtool tsdb create-blocks-from
openmetrics`), in the shape of the agent's default exposition (tests/golden/metrics.prom) with the
labels a PodMonitor scrape adds, plus kube-state-metrics' kube_node_info. A few scenarios run
through it, fixed relative to an anchor time: a Reboot wave that pages, a smaller one that does
not, two VMs down for their own Started Reboot, Freeze waves seen by every VM of their scale sets,
a Spot wave, a scale-in, a stuck Started Redeploy, agents down, IMDS failing and nodes without an
agent.

`measure`: against a running Prometheus, each rule group's evaluation time (from /api/v1/rules,
over several evaluations) and every dashboard query's time, with the template variables set.
"""

import argparse
import glob
import json
import os
import statistics
import sys
import time
import urllib.parse
import urllib.request
import uuid

P = "azure_scheduled_events_"
TYPES = ["Freeze", "Reboot", "Redeploy", "Preempt", "Terminate"]
# What the agent pre-creates (src/output/metrics): the lifecycle of each impact type, this VM's pending
# counts; failure reasons, other VMs' counts and `updated` appear only when they have something to say.
TRANSITIONS = ["cancelled", "completed", "scheduled", "started"]
BUCKETS = ["0.005", "0.025", "0.1", "0.5", "2.5", "+Inf"]
JOB = "kube-system/azure-scheduled-events-exporter"


def fleet(vms, clusters, scale_sets):
    """Every VM: (cluster index, scale set index, VM index in the scale set, labels)."""
    per_cluster = scale_sets // clusters
    out = []
    for n in range(vms):
        ss_global = n % scale_sets
        c = ss_global // per_cluster
        s = ss_global % per_cluster
        k = n // scale_sets
        cluster = "aks-%02d" % c
        pool = "np%d" % s + ("spot" if s == per_cluster - 1 else "")
        vmss = "aks-%s-%08d-vmss" % (pool, 10000000 + c)
        node = "%s%06d" % (vmss, k)
        ip = "10.%d.%d.%d" % (c, s, 4 + k)
        vm_id = str(uuid.UUID(int=(0x5EED << 96) | n))
        target = ('cluster="%s",container="exporter",endpoint="metrics",instance="%s:10188",job="%s",'
                  'namespace="kube-system",node="%s",pod="azure-scheduled-events-exporter-%05x"'
                  % (cluster, ip, JOB, node, n))
        priority = "Spot" if pool.endswith("spot") else "Regular"
        # This VM's name, scale set and priority: on vm_info, and on each of its event_info series as
        # the agent puts them there.
        event_vm = 'priority="%s",vm_name="%s_%d",vm_scale_set_name="%s"' % (priority, vmss, k, vmss)
        info = ('location="%s",platform_fault_domain="%d",platform_update_domain="%d",resource_group="MC_rg-%s",'
                'vm_id="%s",vm_size="Standard_D8s_v5",zone="%d",%s'
                % (["eastus2", "westeurope", "norwayeast"][c % 3], k % 5, k % 20, cluster, vm_id, 1 + k % 3,
                   event_vm))
        out.append(dict(c=c, s=s, k=k, cluster=cluster, vmss=vmss, node=node, vm_id=vm_id,
                        target=target, info=info, event_vm=event_vm, n=n))
    return out


def scenario(vms, anchor, per_cluster):
    """Events, keyed by (cluster, scale set): a list of dicts with the VMs they name (indexes in the
    scale set), type, status over time, NotBefore. Times are relative to `anchor`."""
    ev = {}

    def add(c, s, vm_ks, typ, scheduled_at, not_before, started_at=None, ends_at=None, duration=0,
            source="Platform"):
        for k in vm_ks:
            ev.setdefault((c, s), []).append(dict(
                id=str(uuid.UUID(int=(0xE7E7 << 96) | (c << 40) | (s << 24) | (TYPES.index(typ) << 16) | k)).upper(),
                k=k, type=typ, scheduled=anchor + scheduled_at, not_before=anchor + not_before,
                started=None if started_at is None else anchor + started_at,
                ends=None if ends_at is None else anchor + ends_at, duration=duration, source=source))

    # Cluster 0, pool 0: 10 of its VMs face a Reboot in 10 minutes (a page).
    add(0, 0, range(10), "Reboot", -1200, 600, duration=-1)
    # Cluster 1, pool 1: 3 Reboots, two already Started (those VMs are down since).
    add(1, 1, [0, 1], "Reboot", -1800, -900, started_at=-600, duration=-1)
    add(1, 1, [2], "Reboot", -1800, 1200, duration=-1)
    # Clusters 2 to 4, pool 2: a Freeze wave (one EventId per VM), the first few Started.
    for c in (2, 3, 4):
        add(c, 2, range(30), "Freeze", -900, 300, duration=5)
        add(c, 2, range(30, 33), "Freeze", -900, -360, started_at=-360, duration=5)
    # Cluster 5, the Spot pool: 3 VMs evicted.
    add(5, per_cluster - 1, range(3), "Preempt", -480, -450, started_at=-450, duration=-1, source="Platform")
    # Cluster 6, pool 3: a scale-in of 4 VMs.
    add(6, 3, range(4), "Terminate", -300, 600, duration=-1, source="User")
    # Cluster 7, pool 4: a Redeploy Started 45 minutes ago and still there (stuck).
    add(7, 4, [5], "Redeploy", -3600, -2700, started_at=-2700, duration=-1)
    return ev


def fleet_state(args):
    vms = fleet(args.vms, args.clusters, args.scale_sets)
    per_cluster = args.scale_sets // args.clusters
    events = scenario(vms, args.anchor, per_cluster)
    by_ss = {}
    for vm in vms:
        by_ss.setdefault((vm["c"], vm["s"]), []).append(vm)
    # Agents down, IMDS failing: a few VMs spread over the fleet.
    scrape_down = {vm["n"] for vm in vms[101::997][:5]}
    imds_failing = {vm["n"] for vm in vms[202::1499][:5]}
    # VMs rebooting for their own Started event: not scraped (up 0) from 2 minutes after the start.
    down_from = {}
    for (c, s), evs in events.items():
        for e in evs:
            if e["type"] in ("Reboot", "Redeploy") and e["started"] is not None:
                down_from[(c, s, e["k"])] = e["started"] + 120
    # Spot VMs evicted: gone (no series at all) 60 s after the eviction started. Every change of a
    # series' labels happens more than 5 minutes before the anchor: backfilled data has no
    # staleness markers, so a series replaced later would linger next to its successor.
    gone_from = {}
    for (c, s), evs in events.items():
        for e in evs:
            if e["type"] == "Preempt":
                gone_from[(c, s, e["k"])] = e["started"] + 60

    return vms, gone_from, scrape_down, down_from, imds_failing, events


def scrape(args, state, t):
    """The sample lines of every target at time t, as `name{labels} value t`."""
    vms, gone_from, scrape_down, down_from, imds_failing, events = state
    start = args.anchor - 86400  # counters began a day before the anchor
    lines = []
    ap = lines.append
    for vm in vms:
        key = (vm["c"], vm["s"], vm["k"])
        if key in gone_from and t >= gone_from[key]:
            continue
        tg = vm["target"]
        if vm["n"] in scrape_down or (key in down_from and t >= down_from[key]):
            ap("up{%s} 0 %d\n" % (tg, t))
            continue
        ap("up{%s} 1 %d\n" % (tg, t))
        failing = vm["n"] in imds_failing
        ok_t = t - 3600 if failing else t - 1
        ap("%sup{%s} %d %d\n" % (P, tg, 0 if failing else 1, t))
        ap("%slast_success_timestamp_seconds{%s} %d %d\n" % (P, tg, ok_t, t))
        ap("%slast_poll_timestamp_seconds{%s} %d %d\n" % (P, tg, t - 1, t))
        ap("%sdocument_incarnation{%s} %d %d\n" % (P, tg, 3, t))
        ap('%sapproval_mode{%s,mode="off"} 1 %d\n' % (P, tg, t))
        ap('%sbuild_info{%s,api_version="2020-07-01",revision="5293579",version="0.4.0"} 1 %d\n' % (P, tg, t))
        ap("%svm_info{%s,%s} 1 %d\n" % (P, tg, vm["info"], t))
        ap("%sstate_up{%s} 1 %d\n" % (P, tg, t))
        ap('%sreboots_total{%s,clean="false",expected="false"} 0 %d\n' % (P, tg, t))
        ap('%sreboots_total{%s,clean="true",expected="false"} 0 %d\n' % (P, tg, t))
        polls = (t - start) + 86400 + vm["n"]
        ap('%simds_requests_total{%s,operation="events"} %d %d\n' % (P, tg, polls, t))
        ap('%simds_requests_total{%s,operation="instance"} 1 %d\n' % (P, tg, t))
        if failing:
            ap('%simds_request_failures_total{%s,operation="events",reason="timeout"} %d %d\n' % (P, tg, polls, t))
        for i, le in enumerate(BUCKETS):
            ap('%simds_request_duration_seconds_bucket{%s,operation="events",le="%s"} %d %d\n'
               % (P, tg, le, polls if i >= 1 else polls // 2, t))
        ap('%simds_request_duration_seconds_sum{%s,operation="events"} %.3f %d\n' % (P, tg, polls * 0.006, t))
        ap('%simds_request_duration_seconds_count{%s,operation="events"} %d %d\n' % (P, tg, polls, t))
        # The document this VM sees: every event of its scale set (the placement group).
        seen = []
        for e in events.get((vm["c"], vm["s"]), ()):
            if e["scheduled"] <= t and (e["ends"] is None or t < e["ends"]):
                status = "Started" if e["started"] is not None and t >= e["started"] else "Scheduled"
                seen.append((e, status, "true" if e["k"] == vm["k"] else "false"))
        transitions = {}
        pending = {}
        for e, status, affects in seen:
            pending[(e["type"], status, affects)] = pending.get((e["type"], status, affects), 0) + 1
            transitions[(e["type"], "scheduled")] = transitions.get((e["type"], "scheduled"), 0) + 1
            if status == "Started":
                transitions[(e["type"], "started")] = transitions.get((e["type"], "started"), 0) + 1
            # The agent's default exports per-event series only for events naming its VM
            # (--report.neighbours=false); the pending counts above count every event.
            if affects == "false" and not args.neighbours:
                continue
            labels = 'event_id="%s"' % e["id"]
            ap('%sevent_info{%s,affects_this_vm="%s",%s,event_source="%s",event_status="%s",event_type="%s",'
               'resource_type="VirtualMachine",%s} 1 %d\n'
               % (P, tg, affects, labels, e["source"], status, e["type"], vm["event_vm"], t))
            ap("%sevent_resources{%s,%s} 1 %d\n" % (P, tg, labels, t))
            ap("%sevent_duration_seconds{%s,%s} %d %d\n" % (P, tg, labels, e["duration"], t))
            if status == "Scheduled":
                ap("%sevent_not_before_timestamp_seconds{%s,%s} %d %d\n" % (P, tg, labels, e["not_before"], t))
                ap("%sevent_seconds_until_not_before{%s,%s} %d %d\n" % (P, tg, labels, e["not_before"] - t, t))
        for typ in TYPES:
            for status in ("Scheduled", "Started"):
                for affects in ("false", "true"):
                    if affects == "true" or (typ, status, affects) in pending:
                        ap('%spending{%s,affects_this_vm="%s",event_status="%s",event_type="%s"} %d %d\n'
                           % (P, tg, affects, status, typ, pending.get((typ, status, affects), 0), t))
            for tr in TRANSITIONS:
                ap('%stransitions_total{%s,event_type="%s",transition="%s"} %d %d\n'
                   % (P, tg, typ, tr, transitions.get((typ, tr), 0), t))
    # kube-state-metrics: one kube_node_info per node, 10 nodes more than agents (no agent there).
    if args.kube_state_metrics:
        for vm in vms:
            key = (vm["c"], vm["s"], vm["k"])
            if key in gone_from and t >= gone_from[key]:
                continue
            ap('kube_node_info{cluster="%s",container="kube-state-metrics",instance="10.%d.255.1:8080",'
               'job="kube-state-metrics",node="%s",kubelet_version="v1.30.5",os_image="Ubuntu 22.04.5 LTS",'
               'provider_id="azure:///subscriptions/0/resourceGroups/mc_rg-%s/providers/Microsoft.Compute/'
               'virtualMachineScaleSets/%s/virtualMachines/%d",system_uuid="%s"} 1 %d\n'
               % (vm["cluster"], vm["c"], vm["node"], vm["cluster"], vm["vmss"], vm["k"], vm["vm_id"], t))
        for i in range(10):
            c = (i * 3) % args.clusters
            ap('kube_node_info{cluster="aks-%02d",container="kube-state-metrics",instance="10.%d.255.1:8080",'
               'job="kube-state-metrics",node="aks-arm64-%08d-vmss%06d",kubelet_version="v1.30.5",'
               'os_image="Ubuntu 22.04.5 LTS",provider_id="",system_uuid="%s"} 1 %d\n'
               % (c, c, 10000000 + c, i, uuid.UUID(int=(0xA6E7 << 96) | i), t))
    return lines


def generate(args):
    """OpenMetrics text from --start to --end, for promtool tsdb create-blocks-from openmetrics."""
    state = fleet_state(args)
    with open(args.out, "w") as out:
        t = args.start
        while t <= args.end:
            out.write("".join(scrape(args, state, t)))
            t += args.interval
        out.write("# EOF\n")


def varint(n):
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def field(number, payload):
    """A length-delimited protobuf field."""
    return varint(number << 3 | 2) + varint(len(payload)) + payload


def snappy_literal(data):
    """Snappy block format made of literals only: valid, uncompressed (no dependency)."""
    out = [varint(len(data))]
    for i in range(0, len(data), 65536):
        chunk = data[i:i + 65536]
        out.append(bytes([61 << 2]) + (len(chunk) - 1).to_bytes(2, "little") + chunk)
    return b"".join(out)


LABEL = __import__("re").compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="([^"]*)"')


def feed(args):
    """Remote write into Prometheus (--web.enable-remote-write-receiver): the history from --start,
    then one scrape of every target per --interval until stopped, as a live Prometheus ingests
    them. The samples land in the head block, as a live server's last hours do."""
    import http.client
    import struct

    state = fleet_state(args)
    host, port = args.url.split("//", 1)[1].rsplit(":", 1)
    conn = http.client.HTTPConnection(host, int(port), timeout=120)
    series = {}
    pack = struct.Struct("<d").pack

    def send(t):
        lines = scrape(args, state, t)
        ms = varint(t * 1000)
        tail = b"\x10" + ms
        length = 1 + 8 + len(tail)
        batch = []
        for line in lines:
            key, value, _ = line.rsplit(" ", 2)
            head = series.get(key)
            if head is None or head[0] != length:
                name, _, rest = key.partition("{")
                labels = sorted([("__name__", name)] + LABEL.findall(rest))
                pb = b"".join(field(1, field(1, k.encode()) + field(2, v.encode())) for k, v in labels)
                pb += b"\x12" + varint(length)
                head = (length, b"\x0a" + varint(len(pb) + length) + pb + b"\x09")
                series[key] = head
            batch.append(head[1] + pack(float(value)) + tail)
            if len(batch) == 20000:
                post(b"".join(batch))
                batch = []
        if batch:
            post(b"".join(batch))
        with open(args.fed, "w") as f:
            f.write(str(t))

    def post(body):
        # After a long pause Prometheus has closed the idle connection: one retry on a new one.
        for attempt in (1, 2):
            try:
                conn.request("POST", "/api/v1/write", snappy_literal(body), {
                    "Content-Encoding": "snappy", "Content-Type": "application/x-protobuf",
                    "X-Prometheus-Remote-Write-Version": "0.1.0"})
                r = conn.getresponse()
                break
            except (ConnectionError, http.client.HTTPException):
                conn.close()
                if attempt == 2:
                    raise
        detail = r.read()
        if r.status >= 300:
            sys.exit("remote write refused (%d): %s" % (r.status, detail[:300].decode(errors="replace")))

    t = args.start
    while t <= args.end:
        send(t)
        t += args.interval
    print("history fed up to %d" % (t - args.interval), flush=True)
    if not args.live:
        return
    while True:
        while t > time.time():
            time.sleep(0.5)
        # Resumed after a pause (figures are taken with the feed stopped): the scrapes missed are
        # skipped, as a target's are while Prometheus cannot reach it, rather than replayed.
        behind = int(time.time() - t) // args.interval
        if behind > 1:
            t += behind * args.interval
        send(t)
        t += args.interval


def get(base, path, params, timeout):
    url = base + path + "?" + urllib.parse.urlencode(params)
    started = time.monotonic()
    with urllib.request.urlopen(url, timeout=timeout) as r:
        body = json.load(r)
    return body, time.monotonic() - started


def queries(dashboards):
    """Every PromQL expression of the dashboards: (dashboard, place, expr, kind) where kind is
    range, instant, annotation or variable."""
    found = []
    for path in sorted(glob.glob(os.path.join(dashboards, "*.json"))):
        name = os.path.basename(path)
        d = json.load(open(path))
        panels = list(d.get("panels", []))
        while panels:
            p = panels.pop(0)
            panels.extend(p.get("panels", []))
            for t in p.get("targets", []):
                if "expr" in t:
                    kind = "instant" if t.get("instant") and not t.get("range") else "range"
                    found.append((name, "%s/%s" % (p.get("title", ""), t.get("refId", "")), t["expr"], kind))
        for a in d.get("annotations", {}).get("list", []):
            if a.get("target", {}).get("expr"):
                found.append((name, "annotation " + a["name"], a["target"]["expr"], "annotation"))
        for v in d.get("templating", {}).get("list", []):
            if v.get("type") == "query":
                found.append((name, "$" + v["name"], v["query"], "variable"))
    return found


def substitute(expr, values):
    for k in sorted(values, key=len, reverse=True):
        expr = expr.replace("${%s}" % k, values[k]).replace("$" + k, values[k])
    return expr


class Server:
    """The Prometheus process (its CPU time) and the feed (paused while figures are taken, so
    that they are the queries' own; resumed to keep the newest sample fresh)."""

    def __init__(self, args):
        self.args = args

    def cpu(self):
        with open("/proc/%d/stat" % self.args.prometheus_pid) as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def go(self):
        """Bytes the Go runtime has allocated and the GC cycles it has run, from Prometheus' own
        metrics: at this heap size a GC cycle costs seconds of CPU, so a figure of CPU time is
        read with the cycles that landed in it."""
        body = urllib.request.urlopen(self.args.url + "/metrics", timeout=30).read().decode()
        found = {}
        for line in body.splitlines():
            name, _, value = line.partition(" ")
            if name in ("go_memstats_alloc_bytes_total", "go_gc_duration_seconds_count"):
                found[name] = float(value)
        return found.get("go_memstats_alloc_bytes_total", 0.0), found.get("go_gc_duration_seconds_count", 0.0)

    def fed(self):
        try:
            with open(self.args.fed) as f:
                return int(f.read().strip() or 0)
        except OSError:
            return 0

    def fresh(self, max_age):
        """If the newest sample is older than max_age, resumes the feed until it has fed a scrape
        taken within one interval of the resume, then pauses it. (The feed skips the scrapes it
        missed while paused, so that is the first or second scrape after it resumes, however long
        each takes to send; the first one to end may be the one the pause cut short, as old as the
        pause.)"""
        import signal
        if not self.args.feed_pid or time.time() - self.fed() <= max_age:
            return
        resumed = time.time()
        os.kill(self.args.feed_pid, signal.SIGCONT)
        until = time.monotonic() + 300
        while self.fed() < resumed - self.args.interval - 5 and time.monotonic() < until:
            time.sleep(0.5)
        os.kill(self.args.feed_pid, signal.SIGSTOP)

    def rules(self, with_rules):
        with open(self.args.config_rules if with_rules else self.args.config_bare) as f:
            text = f.read()
        with open(self.args.config, "w") as f:
            f.write(text)
        urllib.request.urlopen(urllib.request.Request(self.args.url + "/-/reload", method="POST"), timeout=120)


def share_of_cycle(group, cycle):
    """The share of each evaluation cycle that one evaluation of a group costs: a group evaluated
    every 2 minutes costs a 15-second cycle an eighth of its evaluation."""
    return cycle / max(float(group.get("interval") or cycle), cycle)


def rule_queries(args, base, samples, server, cycle):
    """Each rule's expression run alone as an instant query, with the query statistics Prometheus
    keeps (`stats=all`): the samples it read, which do not depend on the machine's load, the
    best of three evaluation times, and the least Go heap allocated by one of the three (Prometheus'
    own counter read before and after, less what reading it costs; the feed is paused, and a group
    evaluating meanwhile shows only in the larger readings), with its share of each evaluation
    cycle at the group's interval: what sets off the garbage collector. Alert templates and the
    writing of recorded series are not in these figures; the CPU per cycle above has them."""
    def allocating(call):
        """What call() returns, and the bytes Prometheus allocated meanwhile (one read of its
        counter included)."""
        before = server.go()[0]
        result = call()
        return result, server.go()[0] - before

    reading = min(allocating(lambda: None)[1] for _ in range(3))

    def three_runs(query, **params):
        """Three runs of an instant query: each one's answer and the heap it allocated. The least
        of the three is the query's own (a group evaluating meanwhile shows only in the others)."""
        return [(body, allocated - reading) for (body, _), allocated in (
            allocating(lambda: get(base, "/api/v1/query", dict(query=query, timeout="30s", **params), 40))
            for _ in range(3))]

    # What any rule pays for each series of every agent it reads, whatever it then does: the
    # floor under a rule that reads each agent's series, at this Prometheus' version.
    runs = three_runs("count(%sbuild_info)" % P)
    selected, result = min(a for _, a in runs), runs[0][0]["data"]["result"]
    agents = int(float(result[0]["value"][1])) if result else 0
    aggregated = min(a for _, a in three_runs("count(max by (cluster, job, instance) (%sbuild_info))" % P))
    if agents:
        print("\nReading one series of every agent (`count(%sbuild_info)`, %d series): %.1f MB of heap, %.2f kB a"
              " series; one aggregation of them more (`max by (cluster, job, instance)`): %.2f kB a series"
              % (P, agents, selected / 1e6, selected / agents / 1e3, (aggregated - selected) / agents / 1e3))
    print("\n## Each rule's expression alone (instant query, best of 3)\n")
    print("| group | rule | ms | samples read | peak samples | result series | MB allocated | MB per cycle |")
    print("|---|---|---:|---:|---:|---:|---:|---:|")
    total_ms = 0.0
    total_samples = 0
    total_mb = 0.0
    for name in sorted(samples):
        if not samples[name]:
            continue
        group = samples[name][-1][1]
        share = share_of_cycle(group, cycle)
        for r in group["rules"]:
            server.fresh(120)
            try:
                runs = three_runs(r["query"], stats="all")
            except Exception as e:  # reported, not fatal: the figures of the others stand
                print("| %s | %s | %s | | | | | |" % (name, r.get("name", ""), ("error: %s" % e)[:80]))
                continue
            best = None
            for body, _ in runs:
                st = body["data"].get("stats", {})
                took = st.get("timings", {}).get("evalTotalTime", 0.0)
                got = (took, st.get("samples", {}).get("totalQueryableSamples", 0),
                       st.get("samples", {}).get("peakSamples", 0), len(body["data"]["result"]))
                if best is None or took < best[0]:
                    best = got
            least = min(a for _, a in runs)
            total_ms += best[0] * 1000
            total_samples += best[1]
            total_mb += least / 1e6 * share
            print("| %s | %s | %.1f | %d | %d | %d | %.1f | %.1f |" % (name, r.get("name", ""), best[0] * 1000, best[1], best[2],
                                                                 best[3], least / 1e6, least / 1e6 * share))
    print("| **all rules** | | **%.1f** | **%d** | | | | **%.1f** |" % (total_ms, total_samples, total_mb))


def measure(args):
    base = args.url
    deadline = time.monotonic() + args.budget
    server = Server(args)
    server.fresh(0)
    cycle = float(args.eval_interval.rstrip("s"))

    def span(after):
        """One span of a minute (or to the deadline) with the feed paused, after one more scrape
        fed if the newest is a minute old: (CPU seconds, seconds, bytes allocated, GC cycles).
        `after(start)` reads the rule groups once the figures are taken: read every second within
        the span, /api/v1/rules cost Prometheus about 4 ms of CPU and 0.36 MB of heap a call at
        5,000 agents, the benchmark's own load, which a production Prometheus does not carry."""
        server.fresh(60)
        (alloc0, gc0), start, cpu0, t0 = server.go(), time.time(), server.cpu(), time.monotonic()
        while time.monotonic() - t0 < 60 and time.monotonic() < deadline:
            time.sleep(1)
        cpu, took, (alloc, gc) = server.cpu() - cpu0, time.monotonic() - t0, server.go()
        after(start)
        return cpu, took, alloc - alloc0, gc - gc0

    def per_cycle(spans):
        """CPU seconds, allocated MB and GC cycles per evaluation cycle, and the cycles measured."""
        cycles = max(sum(s[1] for s in spans), 1e-9) / cycle
        return (sum(s[0] for s in spans) / cycles, sum(s[2] for s in spans) / cycles / 1e6,
                sum(s[3] for s in spans), cycles)

    # What Prometheus spends without rules, in spans taken as the rules' are below (the ingestion
    # before each, its own housekeeping, the GC cycles that ingestion sets off), for a quarter of
    # the rules' minutes and at least three spans: the rules' own cost is the difference.
    server.rules(False)
    bare_cpu, bare_mb, bare_gc, bare_cycles = per_cycle(
        [span(lambda _: None) for _ in range(max(3, int(args.minutes / 4)))])
    server.rules(True)
    # Rule groups: each group's evaluationTime, its last evaluation within each span, after its
    # first evaluation. The feed is paused while figures are taken, in spans of a minute: data
    # older than a few minutes would make every agent look stuck (rules compare timestamps with
    # time()). Between spans it feeds one more scrape; the CPU seconds and the evaluations counted
    # are the spans' only.
    import calendar
    samples = {}
    last = {}

    spans = []

    def enough():
        return (min([len(v) for v in samples.values()] or [0]) >= args.evaluations
                and sum(s[1] for s in spans) >= args.minutes * 60)

    def poll(since):
        body, _ = get(base, "/api/v1/rules", {}, 30)
        for g in body["data"]["groups"]:
            stamp = g.get("lastEvaluation", "")
            samples.setdefault(g["name"], [])
            if stamp.startswith("0001-") or last.get(g["name"]) == stamp:
                continue
            last[g["name"]] = stamp
            at = calendar.timegm(time.strptime(stamp[:19], "%Y-%m-%dT%H:%M:%S"))
            if last.get(g["name"] + "#seen") and since is not None and at >= since - 1:
                samples[g["name"]].append((g["evaluationTime"], g))
            last[g["name"] + "#seen"] = True

    # Until every group has evaluated once (the first evaluations are not counted).
    loaded = time.monotonic() + 60
    while not get(base, "/api/v1/rules", {}, 30)[0]["data"]["groups"]:
        if time.monotonic() > loaded:
            raise SystemExit("fleet-bench: Prometheus loaded no rule group from %s" % args.config_rules)
        time.sleep(1)
    while time.monotonic() < deadline and not all(last.get(n + "#seen") for n in samples or ["?"]):
        server.fresh(60)
        poll(None)
        time.sleep(1)
    while time.monotonic() < deadline and not enough():
        spans.append(span(poll))
    rules_cpu, rules_mb, rules_gc, cycles = per_cycle(spans)
    print("\n## Rule groups (evaluation interval %s; median and max of %d evaluations after the first)\n"
          % (args.eval_interval, args.evaluations))
    print("| group | interval | rules | median s | max s | per cycle s | errors |")
    print("|---|---:|---:|---:|---:|---:|---|")
    total = 0.0
    per_cycle = 0.0
    for name in sorted(samples):
        s = samples[name]
        if not s:
            print("| %s | | | not evaluated within the budget | | | |" % name)
            continue
        times = [x[0] for x in s]
        g = s[-1][1]
        errors = sorted({r.get("lastError", "") for r in g["rules"] if r.get("lastError")})
        med = statistics.median(times)
        share = med * share_of_cycle(g, cycle)
        total += med
        per_cycle += share
        print("| %s | %gs | %d | %.3f | %.3f | %.3f | %s |" % (name, float(g.get("interval") or cycle), len(g["rules"]), med,
                                                         max(times), share, "; ".join(errors)[:120]))
    print("| **all groups** | | | **%.3f** | | **%.3f** | |" % (total, per_cycle))
    print("\nPrometheus CPU per evaluation cycle, all groups: %.3f s (%.1f cycles, feed paused; load average %s);"
          " without rules %.3f s, so the rules' own %.3f s"
          % (rules_cpu, cycles, open("/proc/loadavg").read().split()[0], bare_cpu, rules_cpu - bare_cpu))
    print("Go heap allocated per cycle: %.0f MB with rules, %.0f MB without; GC cycles within the figures: %d in"
          " %.1f cycles with rules, %d in %.1f without" % (rules_mb, bare_mb, rules_gc, cycles, bare_gc, bare_cycles))
    print("Each span's CPU per cycle (* where a GC cycle ran): "
          + " ".join("%.2f%s" % (c / max(t / cycle, 1e-9), "*" * int(g)) for c, t, _, g in spans))
    slow_rules = []
    for name in samples:
        if samples[name]:
            for r in samples[name][-1][1]["rules"]:
                slow_rules.append((r.get("evaluationTime", 0), name, r.get("name", "")))
    slow_rules.sort(reverse=True)
    print("\nSlowest rules (last evaluation): " + ", ".join("%s %.3f s" % (n, t) for t, _, n in slow_rules[:6]))
    if args.rule_queries:
        rule_queries(args, base, samples, server, cycle)

    firing = get(base, "/api/v1/alerts", {}, 30)[0]["data"]["alerts"]
    counts = {}
    for a in firing:
        key = "%s (%s)" % (a["labels"]["alertname"], a["state"])
        counts[key] = counts.get(key, 0) + 1
    print("Alerts: " + (", ".join("%s %d" % kv for kv in sorted(counts.items())) or "none"))

    # Dashboards: as Grafana runs them over the last 30 minutes, every variable at All, with the
    # rules unloaded so that the CPU time is the query's.
    server.rules(False)
    values = {"cluster": ".*", "location": ".*", "scale_set": ".*", "zone": ".*", "job": ".*",
              "instance": ".*", "vm": ".*", "node": ".*", "event": args.event_id, "event_id": args.event_id,
              "trace_id": args.event_id.replace("-", "").lower(), "__range": "30m", "__interval": args.step,
              "__rate_interval": args.rate_interval, "topk": "20", "datasource": "prometheus",
              "__range_s": "1800"}
    rows = []
    for dash, place, expr, kind in queries(args.dashboards):
        if time.monotonic() > deadline:
            rows.append((dash, place, kind, None, "budget exhausted"))
            continue
        q = substitute(expr, values)
        server.fresh(90)
        now = time.time()
        cpu0 = server.cpu()
        try:
            if kind == "variable":
                if q.startswith("label_values("):
                    inner = q[len("label_values("):-1]
                    sel, label = inner.rsplit(",", 1)
                    body, took = get(base, "/api/v1/label/%s/values" % label.strip(),
                                     {"match[]": sel.strip(), "start": now - 1800, "end": now}, 40)
                elif q.startswith("query_result("):
                    body, took = get(base, "/api/v1/query", {"query": q[len("query_result("):-1], "time": now,
                                                             "timeout": "30s"}, 40)
                else:
                    body, took = get(base, "/api/v1/label/%s/values" % "__name__", {}, 40)
                n = len(body["data"]) if isinstance(body["data"], list) else len(body["data"]["result"])
            elif kind == "instant":
                body, took = get(base, "/api/v1/query", {"query": q, "time": now, "timeout": "30s"}, 40)
                n = len(body["data"]["result"])
            else:
                step = "60" if kind == "annotation" else args.step.rstrip("s")
                body, took = get(base, "/api/v1/query_range", {"query": q, "start": now - 1800, "end": now,
                                                               "step": step, "timeout": "30s"}, 40)
                n = len(body["data"]["result"])
            rows.append((dash, place, kind, took, "%d series, %.3f s CPU" % (n, server.cpu() - cpu0)))
        except Exception as e:  # a failing query is a figure too, reported as such
            detail = e.read().decode()[:200] if hasattr(e, "read") else str(e)
            rows.append((dash, place, kind, None, "error: " + detail))
    print("\n## Dashboard queries (last 30 minutes, step %s, every variable All; load average %s)\n"
          % (args.step, open("/proc/loadavg").read().split()[0]))
    print("| dashboard | panel/ref or variable | kind | seconds | result |")
    print("|---|---|---|---:|---|")
    for dash, place, kind, took, result in sorted(rows, key=lambda r: -(r[3] or 1e9)):
        print("| %s | %s | %s | %s | %s |" % (dash, place.replace("|", "/"), kind,
                                            "-" if took is None else "%.3f" % took, result))
    timed = [r[3] for r in rows if r[3] is not None]
    errors = [r for r in rows if r[3] is None]
    print("\n%d queries, slowest %.3f s, %d over 2 s, total %.1f s, %d failed"
          % (len(rows), max(timed or [0]), sum(1 for x in timed if x > 2), sum(timed), len(errors)))
    return 0 if not errors else 1


def head_series(args):
    with urllib.request.urlopen(args.url + "/metrics", timeout=30) as r:
        for line in r.read().decode().splitlines():
            if line.startswith("prometheus_tsdb_head_series "):
                print(int(float(line.split()[1])))
                return 0
    print("unknown")
    return 0


def main():
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    g = sub.add_parser("generate")
    f = sub.add_parser("feed")
    for p in (g, f):
        p.add_argument("--vms", type=int, default=10000)
        p.add_argument("--clusters", type=int, default=30)
        p.add_argument("--scale-sets", type=int, default=300)
        p.add_argument("--anchor", type=int, required=True)
        p.add_argument("--start", type=int, required=True)
        p.add_argument("--end", type=int, required=True)
        p.add_argument("--interval", type=int, default=30)
        p.add_argument("--kube-state-metrics", type=int, default=1)
        p.add_argument("--neighbours", type=int, default=0,
                       help="1: every agent exports the series of every event of its scale set, as with"
                            " --report.neighbours=true; 0 (the agent's default): only of events naming its VM")
    g.add_argument("--out", required=True)
    f.add_argument("--url", required=True)
    f.add_argument("--live", type=int, default=1)
    f.add_argument("--fed", required=True, help="a file that holds the time of the last scrape fed")
    sub.add_parser("series").add_argument("--url", required=True)
    m = sub.add_parser("measure")
    m.add_argument("--url", required=True)
    m.add_argument("--dashboards", required=True)
    m.add_argument("--event-id", required=True)
    m.add_argument("--step", default="30s")
    m.add_argument("--rate-interval", default="2m")
    m.add_argument("--eval-interval", default="15s")
    m.add_argument("--evaluations", type=int, default=3)
    m.add_argument("--minutes", type=float, default=0,
                   help="measure the CPU per cycle over at least this many minutes (GC cycles average out)")
    m.add_argument("--budget", type=int, default=900)
    m.add_argument("--prometheus-pid", type=int, required=True)
    m.add_argument("--feed-pid", type=int, default=0)
    m.add_argument("--fed", default="")
    m.add_argument("--interval", type=int, default=30)
    m.add_argument("--config", required=True)
    m.add_argument("--config-rules", required=True)
    m.add_argument("--config-bare", required=True)
    m.add_argument("--rule-queries", type=int, default=1, help="also run each rule's expression alone")
    args = ap.parse_args()
    if args.cmd in ("generate", "feed"):
        if args.scale_sets % args.clusters:
            sys.exit("--scale-sets must be a multiple of --clusters")
        (generate if args.cmd == "generate" else feed)(args)
        return 0
    return head_series(args) if args.cmd == "series" else measure(args)


if __name__ == "__main__":
    sys.exit(main())
