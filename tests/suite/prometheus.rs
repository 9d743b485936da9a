//! The alert rules and dashboards against Prometheus itself: promtool on every rule file and its
//! unit tests, and a real Prometheus scraping real agents that evaluates every expression we ship.

use crate::ops;

use std::collections::BTreeSet;

use ops::Error;

// What the tests that run promtool and a real Prometheus use.
#[cfg(feature = "external-tools")]
use {
    crate::common::process::AgentProcess,
    crate::common::{TempDir, wait},
    azure_scheduled_events_exporter::azure::wire::Compute,
    azure_scheduled_events_simulator::{
        Fault, RunningSimulator, Scenario, SimulatorHandle, example_compute,
    },
    ops::Process,
    serde_json::Value,
    std::collections::BTreeMap,
    std::path::{Path, PathBuf},
    std::process::{Command, Stdio},
    std::time::Duration,
};

type TestResult = Result<(), Error>;

#[cfg(feature = "external-tools")]
fn promtool(args: &[&str]) -> Result<(bool, String), Error> {
    let output = Command::new("promtool")
        .args(args)
        .current_dir(ops::repo())
        .stdin(Stdio::null())
        .output()
        .map_err(|e| {
            format!("promtool is required (Debian package prometheus; .ci/run installs it): {e}")
        })?;
    let report = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    Ok((output.status.success(), report))
}

#[cfg(feature = "external-tools")]
#[test]
fn promtool_accepts_every_rule_file_and_passes_its_unit_tests() -> TestResult {
    for rules in ops::rule_files()? {
        let (ok, report) = promtool(&["check", "rules", &rules.to_string_lossy()])?;
        assert!(ok, "promtool check rules {}:\n{report}", rules.display());
    }
    let tests = ops::rule_tests()?;
    assert!(!tests.is_empty(), "no rule unit tests (alerts/*test*.yml)");
    for test in tests {
        let (ok, report) = promtool(&["test", "rules", &test.to_string_lossy()])?;
        assert!(ok, "promtool test rules {}:\n{report}", test.display());
    }
    Ok(())
}

#[test]
fn every_alert_is_unit_tested_firing_and_not_firing() -> TestResult {
    let mut firing = BTreeSet::new();
    let mut silent = BTreeSet::new();
    for test_file in ops::rule_tests()? {
        let doc = ops::yaml(&test_file)?;
        for test in doc["tests"].as_array().into_iter().flatten() {
            for case in test["alert_rule_test"].as_array().into_iter().flatten() {
                let name = case["alertname"].as_str().unwrap_or_default().to_owned();
                match case["exp_alerts"].as_array() {
                    Some(alerts) if !alerts.is_empty() => firing.insert(name),
                    _ => silent.insert(name),
                };
            }
        }
    }
    let alerts = ops::alerts()?;
    assert!(alerts.len() >= 8, "fewer alerts than expected: {alerts:?}");
    for alert in alerts {
        assert!(
            firing.contains(&alert.name),
            "{} is never tested firing",
            alert.name
        );
        assert!(
            silent.contains(&alert.name),
            "{} is never tested not firing",
            alert.name
        );
    }
    Ok(())
}

/// GitHub's anchor for a Markdown heading.
fn anchor(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || *c == ' ' || *c == '-' || *c == '_')
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

#[test]
fn every_alert_is_named_labelled_described_and_has_a_runbook_section() -> TestResult {
    let runbook = std::fs::read_to_string(ops::repo().join("docs/runbook.md"))?;
    let anchors: BTreeSet<String> = runbook
        .lines()
        .filter_map(|l| l.strip_prefix("## "))
        .map(anchor)
        .collect();
    for alert in ops::alerts()? {
        let name = &alert.name;
        let rule = &alert.rule;
        assert!(
            name.starts_with(|c: char| c.is_ascii_uppercase())
                && name.chars().all(|c| c.is_ascii_alphanumeric()),
            "{name} is not CamelCase"
        );
        assert!(rule["for"].is_string(), "{name} has no `for:`");
        let severity = rule["labels"]["severity"].as_str().unwrap_or_default();
        assert!(
            ["critical", "warning", "info"].contains(&severity),
            "{name}: severity {severity:?} is not critical, warning or info"
        );
        let annotations = &rule["annotations"];
        assert!(
            annotations["summary"]
                .as_str()
                .is_some_and(|s| !s.is_empty()),
            "{name} has no summary"
        );
        let description = annotations["description"].as_str().unwrap_or_default();
        assert!(
            description.contains("$labels.instance") || description.contains(".Labels.instance"),
            "{name}: the description does not name the VM"
        );
        if alert.expr.contains("event_info") && !alert.expr.contains("count by") {
            assert!(
                description.contains("$labels.event_id"),
                "{name}: the description does not name the event"
            );
        }
        // Absolute, so that the link works from a pager or a chat message.
        let url = annotations["runbook_url"].as_str().unwrap_or_default();
        assert!(
            url.starts_with("https://"),
            "{name}: runbook_url {url:?} is not an absolute https URL"
        );
        let section = url
            .split_once("/docs/runbook.md#")
            .map(|(_, section)| section)
            .ok_or_else(|| {
                format!("{name}: runbook_url {url:?} is not .../docs/runbook.md#section")
            })?;
        assert!(
            anchors.contains(section),
            "{name}: docs/runbook.md has no section #{section}"
        );
        assert_eq!(
            section,
            name.to_lowercase(),
            "{name}: its section is named after it"
        );
    }
    Ok(())
}

/// The label lists of every `by (...)` and `on (...)` in `expr`.
fn groupings(expr: &str) -> Vec<String> {
    let mut found = Vec::new();
    for keyword in ["by (", "on ("] {
        let mut rest = expr;
        while let Some(start) = rest.find(keyword) {
            let tail = &rest[start + keyword.len()..];
            let end = tail.find(')').unwrap_or(tail.len());
            found.push(tail[..end].to_owned());
            rest = &tail[end..];
        }
    }
    found
}

#[test]
fn only_a_scale_sets_capacity_pages_and_every_grouping_keeps_the_cluster() -> TestResult {
    let mut pages = Vec::new();
    for alert in ops::alerts()? {
        if alert.rule["labels"]["severity"] == "critical" {
            pages.push(alert.name.clone());
        }
        for labels in groupings(&alert.expr) {
            assert!(
                labels.split(", ").any(|l| l == "cluster"),
                "alert {}: grouping ({labels}) drops the cluster",
                alert.name
            );
        }
    }
    assert_eq!(pages, ["AzureScheduledEventsCapacityAtRisk"]);
    let capacity = ops::alerts()?
        .into_iter()
        .find(|a| a.name == "AzureScheduledEventsCapacityAtRisk")
        .ok_or("no capacity alert")?;
    assert!(
        capacity
            .expr
            .starts_with("count by (cluster, vm_scale_set_name)"),
        "the page is not per cluster and scale set: {}",
        capacity.expr
    );
    // Panels and annotations too; variable queries pick values and may span clusters.
    let mut checked = 0;
    for (dashboard, json) in ops::dashboards()? {
        for query in ops::queries(&dashboard, &json) {
            if query.variable {
                continue;
            }
            for labels in groupings(&query.expr) {
                checked += 1;
                assert!(
                    labels.split(", ").any(|l| l == "cluster"),
                    "{dashboard} {}: grouping ({labels}) drops the cluster: {}",
                    query.place,
                    query.expr
                );
            }
        }
    }
    assert!(checked > 100, "only {checked} groupings found");
    Ok(())
}

#[test]
fn the_grouping_scan_finds_aggregations_and_joins() {
    assert_eq!(
        groupings("sum by (a, b) (x * on (c) group_left (d) y) or on () z"),
        ["a, b", "c", ""]
    );
}

// ----------------------------------------------------------------------------- end to end

#[cfg(feature = "external-tools")]
const JOB: &str = "azure-scheduled-events";
#[cfg(feature = "external-tools")]
/// A second job scraping east's and west's pool_0 again.
const SECOND_JOB: &str = "azure-scheduled-events-pods";
#[cfg(feature = "external-tools")]
/// The scenario's Freeze, shared by web_0, web_1 and web_2: the event dashboard shows it.
const SHARED_EVENT: &str = "0E5A2C4B-7D1F-4B8E-9A36-5C2D8F1E7B90";

#[cfg(feature = "external-tools")]
/// One scrape target: the agent's address and the labels Prometheus gives it.
struct Target {
    address: String,
    labels: Vec<(&'static str, String)>,
}

#[cfg(feature = "external-tools")]
/// A Prometheus server on loopback, scraping `targets` every second and evaluating the rules.
struct Prometheus {
    _process: Process,
    _dir: TempDir,
    base: String,
    http: reqwest::Client,
}

#[cfg(feature = "external-tools")]
impl Prometheus {
    async fn start(targets: &[Target], rule_files: &[std::path::PathBuf]) -> Result<Self, Error> {
        let dir = TempDir::new("prometheus")?;
        let rules: Vec<String> = rule_files
            .iter()
            .map(|p| format!("  - {:?}", p.to_string_lossy()))
            .collect();
        let groups: Vec<String> = targets
            .iter()
            .map(|t| {
                let labels: Vec<String> = t
                    .labels
                    .iter()
                    .map(|(name, value)| format!("{name}: {value:?}"))
                    .collect();
                format!(
                    "      - targets: [{:?}]\n        labels: {{{}}}\n",
                    t.address,
                    labels.join(", ")
                )
            })
            .collect();
        let config = format!(
            "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n  evaluation_interval: 1s\n\
             rule_files:\n{}\n\
             scrape_configs:\n  - job_name: {JOB}\n    static_configs:\n{}",
            rules.join("\n"),
            groups.concat()
        );
        let config_path = dir.0.join("prometheus.yml");
        std::fs::write(&config_path, config)?;
        let http = reqwest::Client::builder().no_proxy().build()?;
        // Prometheus cannot listen on port 0: take a free port, and try again if another
        // process took it before Prometheus bound it.
        let mut last_error = String::new();
        for _ in 0..3 {
            let port = ops::free_port()?;
            let mut process = Process::spawn(
                "prometheus",
                Command::new("prometheus")
                    .arg(format!("--config.file={}", config_path.display()))
                    .arg(format!(
                        "--storage.tsdb.path={}",
                        dir.0.join("data").display()
                    ))
                    .arg(format!("--web.listen-address=127.0.0.1:{port}"))
                    .arg("--log.level=warn")
                    .env_clear()
                    .stdin(Stdio::null())
                    .stdout(Stdio::null())
                    .stderr(Stdio::piped()),
            )
            .map_err(|e| {
                format!(
                    "{e} (Prometheus is required: Debian package prometheus; .ci/run installs it)"
                )
            })?;
            let base = format!("http://127.0.0.1:{port}");
            let url = format!("{base}/-/ready");
            let ready = wait("Prometheus to be ready")
                .within(Duration::from_secs(30))
                .until(async || {
                    if let Some(status) = process.child.try_wait().ok().flatten() {
                        return Err(format!("prometheus exited: {status}"));
                    }
                    Ok(http
                        .get(&url)
                        .send()
                        .await
                        .is_ok_and(|r| r.status().is_success()))
                })
                .await;
            match ready {
                Ok(()) => {
                    return Ok(Self {
                        _process: process,
                        _dir: dir,
                        base,
                        http,
                    });
                }
                Err(e) => {
                    process.kill();
                    let mut stderr = String::new();
                    if let Some(mut pipe) = process.child.stderr.take() {
                        use std::io::Read;
                        let _ = pipe.read_to_string(&mut stderr);
                    }
                    last_error = format!("{e}\n{stderr}");
                }
            }
        }
        Err(format!("Prometheus did not start: {last_error}").into())
    }

    async fn api(&self, path: &str, query: &[(&str, &str)]) -> Result<Value, Error> {
        let response = self
            .http
            .get(format!("{}{path}", self.base))
            .query(query)
            .send()
            .await?;
        Ok(serde_json::from_str(&response.text().await?)?)
    }

    /// An instant query: the result vector, or Prometheus' error.
    async fn query(&self, expr: &str) -> Result<Vec<Value>, String> {
        let answer = self
            .api("/api/v1/query", &[("query", expr)])
            .await
            .map_err(|e| e.to_string())?;
        if answer["status"] != "success" {
            return Err(format!(
                "{}: {}",
                answer["errorType"].as_str().unwrap_or_default(),
                answer["error"].as_str().unwrap_or_default()
            ));
        }
        let data = &answer["data"];
        match data["resultType"].as_str() {
            Some("vector") => Ok(data["result"].as_array().cloned().unwrap_or_default()),
            Some("scalar") => Ok(vec![data["result"].clone()]),
            other => Err(format!("unexpected result type {other:?}")),
        }
    }

    /// Every alerting rule loaded: (name, state, health, last error).
    async fn rules(&self) -> Result<Vec<(String, String, String, String)>, Error> {
        self.rules_of("alert").await
    }

    /// Every rule of `kind` (alert, record) loaded: (name, state, health, last error).
    async fn rules_of(&self, kind: &str) -> Result<Vec<(String, String, String, String)>, Error> {
        let answer = self.api("/api/v1/rules", &[("type", kind)]).await?;
        let mut rules = Vec::new();
        for group in answer["data"]["groups"].as_array().into_iter().flatten() {
            for rule in group["rules"].as_array().into_iter().flatten() {
                let text = |key: &str| rule[key].as_str().unwrap_or_default().to_owned();
                rules.push((
                    text("name"),
                    text("state"),
                    text("health"),
                    text("lastError"),
                ));
            }
        }
        Ok(rules)
    }

    /// The active alerts: (alert name, state, labels).
    async fn alerts(&self) -> Result<Vec<(String, String, Value)>, Error> {
        let answer = self.api("/api/v1/alerts", &[]).await?;
        Ok(answer["data"]["alerts"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|a| {
                (
                    a["labels"]["alertname"]
                        .as_str()
                        .unwrap_or_default()
                        .to_owned(),
                    a["state"].as_str().unwrap_or_default().to_owned(),
                    a["labels"].clone(),
                )
            })
            .collect())
    }
}

#[cfg(feature = "external-tools")]
/// A simulated IMDS whose instance metadata is `compute` (the agents give their own VM names
/// with `--vm.name`), playing `scenario`.
struct Site {
    sim: SimulatorHandle,
    running: RunningSimulator,
}

#[cfg(feature = "external-tools")]
impl Site {
    async fn start(compute: Compute, scenario: Scenario) -> Result<Self, Error> {
        let sim = SimulatorHandle::new(compute);
        sim.load_scenario(scenario);
        let running = RunningSimulator::start(sim.clone()).await?;
        Ok(Self { sim, running })
    }

    fn url(&self) -> String {
        self.running.url()
    }
}

#[cfg(feature = "external-tools")]
/// The instance metadata of VM `name` in `location`: its own vmId, as Azure gives every VM (the
/// rules count VMs by it), and the scale set `example_compute` derives from `scale_set_of`.
fn compute(name: &str, scale_set_of: &str, location: &str, zone: &str) -> Compute {
    use std::hash::{Hash, Hasher};
    let mut compute = example_compute(scale_set_of);
    compute.name = name.to_owned();
    compute.location = location.to_owned();
    compute.zone = zone.to_owned();
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    (location, name).hash(&mut hasher);
    let h = hasher.finish();
    compute.vm_id = format!(
        "{:08x}-{:04x}-4{:03x}-8{:03x}-{:012x}",
        h >> 32,
        (h >> 16) & 0xffff,
        h & 0xfff,
        (h >> 4) & 0xfff,
        h & 0xffff_ffff_ffff
    );
    compute
}

#[cfg(feature = "external-tools")]
/// A Reboot with 12 minutes of notice for each VM named, one EventId per VM (one per host
/// operation, as Azure does): a wave of maintenance through a scale set.
fn reboots(name: &str, vms: &[(&str, &str)]) -> Result<Scenario, Error> {
    if vms.is_empty() {
        return Ok(Scenario::parse(&format!("name: {name}\nevents: []\n"))?);
    }
    let mut text = format!("name: {name}\nevents:\n");
    for (vm, id) in vms {
        text.push_str(&format!(
            "  - id: {id}\n    type: Reboot\n    resources: [{vm}]\n    notice: 12m\n"
        ));
    }
    Ok(Scenario::parse(&text)?)
}

#[cfg(feature = "external-tools")]
/// The agent as VM `name`, polling `imds_url` fast, its state file and boot id in `dir`.
fn agent(name: &str, imds_url: &str, dir: &Path, extra: &[&str]) -> Result<AgentProcess, Error> {
    let boot_id = dir.join(format!("{name}.boot_id"));
    if !boot_id.exists() {
        std::fs::write(&boot_id, "boot-1\n")?;
    }
    let mut args = vec![
        format!("--imds.url={imds_url}"),
        format!("--vm.name={name}"),
        format!(
            "--state.file={}",
            dir.join(format!("{name}.json")).display()
        ),
        format!("--state.boot-id-file={}", boot_id.display()),
    ];
    // Fast polling and short timeouts, unless `extra` sets them.
    for default in [
        "--poll.interval=200ms",
        "--imds.timeout=1s",
        "--imds.first-timeout=2s",
        "--imds.max-backoff=500ms",
    ] {
        let flag = default.split('=').next().unwrap_or(default);
        if !extra.iter().any(|a| a.starts_with(&format!("{flag}="))) {
            args.push(default.to_owned());
        }
    }
    args.extend(extra.iter().map(|a| (*a).to_owned()));
    ops::start_agent(name, &args)
}

#[cfg(feature = "external-tools")]
/// The shipped rule files, copied into `dir` with every rule group evaluated each second: groups
/// that run every few minutes in production (`interval:`) keep pace with this test's one-second
/// scrapes and evaluations. The expressions are the shipped ones.
fn at_test_pace(dir: &Path) -> Result<Vec<PathBuf>, Error> {
    let mut paced = Vec::new();
    for file in ops::rule_files()? {
        let text: Vec<String> = std::fs::read_to_string(&file)?
            .lines()
            .map(|line| {
                if line.starts_with("    interval: ") {
                    "    interval: \"1s\"".to_owned()
                } else {
                    line.to_owned()
                }
            })
            .collect();
        let path = dir.join(format!("paced-{}", ops::file_name(&file)));
        std::fs::write(&path, text.join("\n") + "\n")?;
        paced.push(path);
    }
    Ok(paced)
}

#[cfg(feature = "external-tools")]
/// The rule file rendered from the mixin with `config` (Jsonnet) merged into its config.
fn rendered_rules(config: &str, dir: &Path) -> Result<Vec<ops::Alert>, Error> {
    let output = Command::new("bash")
        .arg(ops::repo().join("scripts/render-mixin.sh"))
        .arg(dir)
        .arg(config)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("cannot run scripts/render-mixin.sh: {e}"))?;
    if !output.status.success() {
        return Err(format!(
            "scripts/render-mixin.sh (needs jsonnet, Debian package jsonnet; .ci/run installs it): {}",
            String::from_utf8_lossy(&output.stderr)
        )
        .into());
    }
    ops::alerts_in(&dir.join("alerts/azure-scheduled-events.yml"))
}

#[cfg(feature = "external-tools")]
/// `values` with the variable `name` set to `value`.
fn set<'a, const N: usize>(
    mut values: [(&'a str, &'a str); N],
    name: &str,
    value: &'a str,
) -> [(&'a str, &'a str); N] {
    for (variable, old) in &mut values {
        if *variable == name {
            *old = value;
        }
    }
    values
}

#[cfg(feature = "external-tools")]
fn label<'a>(labels: &'a Value, name: &str) -> &'a str {
    labels[name].as_str().unwrap_or_default()
}

#[cfg(feature = "external-tools")]
/// A query's answer as label value (of `key`, or "" without one) -> sample value.
fn answer(result: &[Value], key: Option<&str>) -> BTreeMap<String, String> {
    result
        .iter()
        .map(|s| {
            let name = key.map(|k| label(&s["metric"], k)).unwrap_or_default();
            let value = s["value"][1].as_str().unwrap_or_default();
            (name.to_owned(), value.to_owned())
        })
        .collect()
}

#[cfg(feature = "external-tools")]
/// Two clusters in one metrics store, as AKS clusters sharing a workspace: their agents'
/// `instance` labels collide (relabelled to the same addresses) and both have a scale set
/// `pool` of four VMs.
///
/// Every VM has its own IMDS (simulator), hence its own vmId.
///
/// - east: 3 of pool's 4 VMs face a Reboot (one EventId each: a maintenance wave), and `slow_0`,
///   whose poll loop stalls on a request that never ends.
/// - south: Spot scale set `spot`, both of whose VMs are evicted (a Spot wave, not a page), and a
///   target of the agent's job that never answers (a node without a working agent).
/// - west: 1 of pool's 4 VMs faces a Reboot, and scenarios/fleet.yaml played to five plain VMs:
///   web_0..web_2 see the scenario (web_0 exports traces, to a collector that is down, so its
///   OTLP counters exist; web_1 approves Spot evictions through a hook that fails;
///   web_2's machine reboots without warning), web_3 cannot reach IMDS, web_4 stops after its
///   first scrapes.
///
/// One Prometheus scrapes them all with the shipped rules. Every alert rule evaluates without
/// error; only east's pool pages; every dashboard query, with its variables set for either
/// cluster, returns that cluster's answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_real_prometheus_keeps_two_clusters_apart_in_every_alert_and_dashboard() -> TestResult {
    let dir = TempDir::new("fleet")?;
    let east_reboots = [
        ("pool_0", "A0000000-0000-4000-8000-00000000000E"),
        ("pool_1", "A1000000-0000-4000-8000-00000000000E"),
        ("pool_2", "A2000000-0000-4000-8000-00000000000E"),
    ];
    let west_reboots = [("pool_0", "B0000000-0000-4000-8000-00000000000A")];
    // The VMs' IMDS, by cluster/VM.
    let mut sites: BTreeMap<String, Site> = BTreeMap::new();
    for (cluster, location, zone, events) in [
        ("east", "eastus", "2", &east_reboots[..]),
        ("west", "westeurope", "1", &west_reboots[..]),
    ] {
        for k in 0..4 {
            let name = format!("pool_{k}");
            let site = Site::start(
                compute(&name, &name, location, zone),
                reboots(cluster, events)?,
            )
            .await?;
            sites.insert(format!("{cluster}/{name}"), site);
        }
    }
    for name in ["web_0", "web_1", "web_2", "web_4"] {
        // Plain VMs: no scale set.
        let site = Site::start(
            compute(name, "web", "westeurope", "1"),
            Scenario::from_file(&ops::repo().join("scenarios/fleet.yaml"))?,
        )
        .await?;
        sites.insert(format!("west/{name}"), site);
    }
    for name in ["spot_0", "spot_1"] {
        let evicted = Scenario::parse(&format!(
            "name: spot\nevents:\n  - id: C{}000000-0000-4000-8000-00000000000C\n    type: Preempt\n    resources: [{name}]\n    notice: 30s\n    runs_for: 1h\n",
            &name[5..]
        ))?;
        let site = Site::start(compute(name, name, "southcentralus", "3"), evicted).await?;
        sites.insert(format!("south/{name}"), site);
    }
    let url = |key: &str| -> Result<String, Error> {
        Ok(sites.get(key).ok_or(format!("no site {key}"))?.url())
    };
    let slow = Site::start(
        compute("slow_0", "slow_0", "eastus", "2"),
        reboots("slow", &[])?,
    )
    .await?;
    // web_3's IMDS: a socket that is bound but never answers, held for the whole test.
    let silent = std::net::TcpListener::bind("127.0.0.1:0")?;
    let unreachable = format!("http://{}", silent.local_addr()?);

    // west/pool_0's outputs fail: neither its API server nor its webhook receiver can be reached
    // (`ops::DOWN`). Its Reboot's notification is counted failed once its retries
    // are over, some 15 s after the agent starts: Prometheus has scraped the counter at 0 by then,
    // so increase() sees it rise.
    let kubeconfig = ops::down_kubeconfig(&dir.0)?;
    let mut agents: BTreeMap<String, AgentProcess> = BTreeMap::new();
    let mut targets = Vec::new();
    for cluster in ["east", "west"] {
        for k in 0..4 {
            let name = format!("pool_{k}");
            let mut extra = vec![format!("--vm.name={name}")];
            if cluster == "west" && k == 0 {
                extra.push(format!("--notify.webhook-url={}/", ops::DOWN));
                extra.push("--kubernetes.node-name=aks-pool-12345678-vmss000000".to_owned());
                extra.push(format!("--kubernetes.kubeconfig={}", kubeconfig.display()));
            }
            let extra: Vec<&str> = extra.iter().map(String::as_str).collect();
            let process = agent(
                &format!("{cluster}-{name}"),
                &url(&format!("{cluster}/{name}"))?,
                &dir.0,
                &extra,
            )?;
            let mut labels = vec![
                ("cluster", cluster.to_owned()),
                ("instance", format!("10.224.0.{}:10188", 4 + k)),
            ];
            // The node's name, as the chart's PodMonitor sets it.
            if cluster == "west" && k == 0 {
                labels.push(("node", "aks-pool-12345678-vmss000000".to_owned()));
            }
            // pool_0 of each cluster is scraped by a second job too (scrape annotations and a
            // PodMonitor both on): its alerts still come once.
            if k == 0 {
                let mut second = labels.clone();
                second.push(("job", SECOND_JOB.to_owned()));
                second.retain(|(name, _)| *name != "node");
                targets.push(Target {
                    address: process.address().to_owned(),
                    labels: second,
                });
            }
            targets.push(Target {
                address: process.address().to_owned(),
                labels,
            });
            agents.insert(format!("{cluster}/{name}"), process);
        }
    }
    let approve = [
        "--approve",
        "--approve.event-types=Preempt",
        "--approve.hook=false",
    ];
    let traces = ["--otlp.endpoint=http://127.0.0.1:9"];
    for (name, url, extra) in [
        ("web_0", url("west/web_0")?, &traces[..]),
        ("web_1", url("west/web_1")?, &approve[..]),
        ("web_2", url("west/web_2")?, &[]),
        ("web_3", unreachable.clone(), &[]),
        ("web_4", url("west/web_4")?, &[]),
    ] {
        let process = agent(name, &url, &dir.0, extra)?;
        targets.push(Target {
            address: process.address().to_owned(),
            labels: vec![("cluster", "west".to_owned())],
        });
        agents.insert(format!("west/{name}"), process);
    }
    let process = agent(
        "slow_0",
        &slow.url(),
        &dir.0,
        &["--imds.timeout=120s", "--imds.first-timeout=120s"],
    )?;
    targets.push(Target {
        address: process.address().to_owned(),
        labels: vec![
            ("cluster", "east".to_owned()),
            ("instance", "10.224.1.4:10188".to_owned()),
        ],
    });
    agents.insert("east/slow_0".into(), process);
    for name in ["spot_0", "spot_1"] {
        let process = agent(name, &url(&format!("south/{name}"))?, &dir.0, &[])?;
        targets.push(Target {
            address: process.address().to_owned(),
            labels: vec![("cluster", "south".to_owned())],
        });
        agents.insert(format!("south/{name}"), process);
    }
    // A node of south whose agent never started: its target is listed but never answers.
    let never = std::net::TcpListener::bind("127.0.0.1:0")?;
    targets.push(Target {
        address: never.local_addr()?.to_string(),
        labels: vec![("cluster", "south".to_owned())],
    });
    let prometheus = Prometheus::start(&targets, &at_test_pace(&dir.0)?).await?;
    let patience = Duration::from_secs(60);
    let count = |v: &[Value]| {
        v.first()
            .and_then(|s| s["value"][1].as_str().map(str::to_owned))
    };

    // Every agent scraped, instance metadata read by those that reach IMDS, and enough samples
    // for rates.
    wait("every agent to be scraped")
        .within(patience)
        .retrying_errors()
        .until(async || {
            let up = prometheus.query("count(up == 1)").await?;
            let vms = prometheus
                .query("count(count_over_time(azure_scheduled_events_vm_info[1m]) >= 3)")
                .await?;
            Ok::<_, Error>(
                (count(&up).as_deref() == Some("18") && count(&vms).as_deref() == Some("17"))
                    .then_some(()),
            )
        })
        .await?;
    // slow_0's poll loop stalls: its next request to IMDS takes longer than the test.
    slow.sim
        .inject_fault(Fault::delay(Duration::from_secs(600)).until_cleared());
    // web_4 goes away: Prometheus keeps its history and sees the target down.
    let web_4 = agents.remove("west/web_4").ok_or("no web_4")?;
    let web_4_address = web_4.address().to_owned();
    drop(web_4);
    let down = format!("up{{instance=\"{web_4_address}\"}} == 0");
    wait("web_4 to be seen down")
        .within(patience)
        .retrying_errors()
        .until(async || prometheus.query(&down).await.map(|r| !r.is_empty()))
        .await?;
    // web_2's machine reboots: a new boot id, and the agent back on the same address.
    let web_2 = agents.remove("west/web_2").ok_or("no web_2")?;
    let web_2_address = web_2.address().to_owned();
    drop(web_2);
    std::fs::write(dir.0.join("web_2.boot_id"), "boot-2\n")?;
    let listen = format!("--web.listen-address={web_2_address}");
    let web_2 = wait("web_2 to restart on its address")
        .within(patience)
        .retrying_errors()
        .until(async || agent("web_2", &url("west/web_2")?, &dir.0, &[listen.as_str()]).map(Some))
        .await?;
    agents.insert("west/web_2".into(), web_2);
    let rebooted = format!(
        "increase(azure_scheduled_events_reboots_total{{instance=\"{web_2_address}\",expected=\"false\"}}[1m]) > 0"
    );
    wait("web_2's unexpected reboot to be counted")
        .within(patience)
        .retrying_errors()
        .until(async || prometheus.query(&rebooted).await.map(|r| !r.is_empty()))
        .await?;
    wait("web_1's approval hook to fail").within(patience).retrying_errors().until(async || {
        prometheus
            .query("increase(azure_scheduled_events_approval_failures_total{reason=\"hook_failed\"}[1m]) > 0")
            .await
            .map(|failed| !failed.is_empty())
    })
    .await?;
    wait("west/pool_0's notification to fail")
        .within(patience)
        .retrying_errors()
        .until(async || {
            prometheus
                .query(
                    "increase(azure_scheduled_events_notifications_total{result=\"failed\"}[1m]) > 0",
                )
                .await
                .map(|failed| !failed.is_empty())
        })
        .await?;
    wait("the Spot eviction and east's capacity to alert")
        .within(patience)
        .retrying_errors()
        .until(async || {
            let alerts = prometheus.alerts().await?;
            let spot = alerts
                .iter()
                .any(|(name, state, _)| name == "AzureSpotEviction" && state == "firing");
            let capacity = alerts
                .iter()
                .any(|(name, _, _)| name == "AzureScheduledEventsCapacityAtRisk");
            Ok::<_, Error>(spot && capacity)
        })
        .await?;

    let mut failures = Vec::new();

    // Dashboards: every target, annotation and variable query, with the variables set as a
    // user would, for each cluster. West plays the whole fleet scenario: every query has data
    // there. Whatever a query returns carries the cluster asked for and no other.
    let trace_id = SHARED_EVENT.replace('-', "");
    let typed = trace_id.to_lowercase();
    let values = |cluster: &'static str| {
        [
            ("cluster", cluster),
            ("location", ".*"),
            ("scale_set", ".*"),
            ("zone", ".*"),
            ("job", JOB),
            ("instance", ".*"),
            ("event", typed.as_str()),
            ("event_id", SHARED_EVENT),
            ("trace_id", trace_id.as_str()),
            ("__rate_interval", "1m"),
            ("__interval", "15s"),
            ("__range", "5m"),
        ]
    };
    let mut evaluated = 0;
    let dashboards = ops::dashboards()?;
    for cluster in ["east", "west"] {
        for (dashboard, json) in &dashboards {
            for query in ops::queries(dashboard, json) {
                let place = format!("{dashboard} {} (cluster {cluster})", query.place);
                let (expr, label_name) = if query.variable {
                    match ops::variable_promql(&query.expr) {
                        Some(parts) => parts,
                        None => {
                            failures.push(format!(
                                "{place}: not label_values() or query_result(): {}",
                                query.expr
                            ));
                            continue;
                        }
                    }
                } else {
                    (query.expr.clone(), None)
                };
                let expr = match ops::substitute(&expr, &values(cluster)) {
                    // The per-agent age panels keep only agents over a minute behind, which no
                    // agent of this short scenario is: asked for every agent behind at all, they
                    // must show data like every other panel.
                    Ok(expr) => expr.replace("< time() - 60)", "< time() - 0)"),
                    Err(e) => {
                        failures.push(format!("{place}: {e}"));
                        continue;
                    }
                };
                evaluated += 1;
                let result = match prometheus.query(&expr).await {
                    Err(e) => {
                        failures.push(format!("{place}: {e}\n    {expr}"));
                        continue;
                    }
                    Ok(result) => result,
                };
                if result.is_empty() && cluster == "west" {
                    failures.push(format!("{place}: no data\n    {expr}"));
                }
                let clusters: BTreeSet<&str> = result
                    .iter()
                    .filter_map(|s| s["metric"]["cluster"].as_str())
                    .collect();
                // Variables list the values to pick from, those of every cluster included.
                if clusters.iter().any(|c| *c != cluster) && !query.variable {
                    failures.push(format!(
                        "{place}: series of clusters {clusters:?}\n    {expr}"
                    ));
                }
                if let Some(label_name) = label_name
                    && cluster == "west"
                    && !result.iter().any(|s| s["metric"][&label_name].is_string())
                {
                    failures.push(format!("{place}: no series has label {label_name}"));
                }
                // The trace link must carry the EventId without dashes.
                if expr.contains("\"trace_id\"") && expr.contains(SHARED_EVENT) && cluster == "west"
                {
                    let ids: BTreeSet<&str> = result
                        .iter()
                        .filter_map(|s| s["metric"]["trace_id"].as_str())
                        .collect();
                    if ids != BTreeSet::from([trace_id.as_str()]) {
                        failures.push(format!("{place}: trace ids {ids:?}, expected {trace_id}"));
                    }
                }
            }
        }
    }
    assert!(
        evaluated >= 100,
        "only {evaluated} dashboard expressions found"
    );

    // The right answer per cluster, for the panels that say how much is at stake.
    let panel = |file: &str, title: &str, ref_id: &str| -> Result<String, Error> {
        let (_, json) = dashboards
            .iter()
            .find(|(name, _)| name == file)
            .ok_or(format!("no {file}"))?;
        ops::queries(file, json)
            .into_iter()
            .find(|q| q.place == format!("panel {title:?} target {ref_id}"))
            .map(|q| q.expr)
            .ok_or_else(|| format!("{file}: no panel {title:?} target {ref_id}").into())
    };
    let scale_set = Some("vm_scale_set_name");
    // (dashboard, panel, target, cluster, label keying the answer, answer)
    type Expectation<'a> = (
        &'a str,
        &'a str,
        &'a str,
        &'static str,
        Option<&'a str>,
        &'a [(&'a str, &'a str)],
    );
    let expectations: [Expectation; 14] = [
        (
            "fleet-overview.json",
            "VMs with a pending event",
            "A",
            "east",
            None,
            &[("", "3")],
        ),
        (
            "fleet-overview.json",
            "VMs with a pending event",
            "A",
            "west",
            None,
            &[("", "4")],
        ),
        (
            "fleet-overview.json",
            "Scale sets",
            "A",
            "east",
            scale_set,
            &[("pool", "3")],
        ),
        (
            "fleet-overview.json",
            "Scale sets",
            "B",
            "east",
            scale_set,
            &[("pool", "4"), ("slow", "1")],
        ),
        (
            "fleet-overview.json",
            "Scale sets",
            "A",
            "west",
            scale_set,
            &[("pool", "1")],
        ),
        (
            "fleet-overview.json",
            "Scale sets",
            "B",
            "west",
            scale_set,
            &[("pool", "4")],
        ),
        (
            "fleet-overview.json",
            "Maintenance waves",
            "A",
            "east",
            scale_set,
            &[("pool", "3")],
        ),
        (
            "fleet-overview.json",
            "Maintenance waves",
            "B",
            "west",
            scale_set,
            &[("pool", "1")],
        ),
        (
            "event.json",
            "VMs reporting it",
            "A",
            "west",
            None,
            &[("", "3")],
        ),
        (
            "event.json",
            "VMs reporting it",
            "A",
            "east",
            None,
            &[("", "0")],
        ),
        (
            "agent-health.json",
            "Agents down",
            "A",
            "west",
            None,
            &[("", "1")],
        ),
        // East's three Reboots, each first seen by the VM it names 12 minutes ahead: three
        // events, none with 7 minutes or less, all with 12 or less (the series are born with
        // them, which increase() alone would not count).
        (
            "fleet-overview.json",
            "Notice each event gave",
            "A",
            "east",
            Some("event_type"),
            &[("Reboot", "3")],
        ),
        (
            "fleet-overview.json",
            "Notice each event gave",
            "E",
            "east",
            Some("event_type"),
            &[("Reboot", "0")],
        ),
        (
            "fleet-overview.json",
            "Notice each event gave",
            "F",
            "east",
            Some("event_type"),
            &[("Reboot", "3")],
        ),
    ];
    for (file, title, ref_id, cluster, key, expected) in expectations {
        let expr = ops::substitute(&panel(file, title, ref_id)?, &values(cluster))?;
        let got = answer(&prometheus.query(&expr).await?, key);
        let expected: BTreeMap<String, String> = expected
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        if got != expected {
            failures.push(format!(
                "{file} {title:?} {ref_id} for {cluster}: {got:?}, expected {expected:?}\n    {expr}"
            ));
        }
    }
    // The location variable narrows to the VMs there: east's are in eastus.
    let in_eastus = set(values(".*"), "location", "eastus");
    let expr = ops::substitute(
        &panel("fleet-overview.json", "VMs with a pending event", "A")?,
        &in_eastus,
    )?;
    let got = answer(&prometheus.query(&expr).await?, None);
    if got != BTreeMap::from([(String::new(), "3".to_owned())]) {
        failures.push(format!(
            "VMs with a pending event in eastus: {got:?}, expected 3\n    {expr}"
        ));
    }
    // The EventId as pasted: any case, with or without dashes.
    let (_, event) = dashboards
        .iter()
        .find(|(name, _)| name == "event.json")
        .ok_or("no event.json")?;
    let normalise = ops::queries("event.json", event)
        .into_iter()
        .find(|q| q.place == "variable $event_id")
        .and_then(|q| ops::variable_promql(&q.expr))
        .ok_or("no $event_id variable")?
        .0;
    for pasted in [
        SHARED_EVENT.to_owned(),
        SHARED_EVENT.to_lowercase(),
        trace_id.clone(),
        typed.clone(),
    ] {
        let with = set(values(".*"), "event", &pasted);
        let expr = ops::substitute(&normalise, &with)?;
        let ids: BTreeSet<String> = prometheus
            .query(&expr)
            .await?
            .iter()
            .filter_map(|s| s["metric"]["event_id"].as_str().map(str::to_owned))
            .collect();
        if ids != BTreeSet::from([SHARED_EVENT.to_owned()]) {
            failures.push(format!("EventId pasted as {pasted}: {ids:?}"));
        }
    }

    // Alert rules: every one evaluates without error; every expression but the stuck loop's
    // returns data for this scenario.
    let alerts = ops::alerts()?;
    for (name, _, health, error) in prometheus.rules().await? {
        if health != "ok" || !error.is_empty() {
            failures.push(format!("alert {name}: health {health:?} {error}"));
        }
    }
    // Recording rules: every one evaluates without error; each has data for this scenario but
    // the node count, which needs kube-state-metrics, and the released targets, which need a VM
    // back from its reboot (alerts/azure-scheduled-events.test.yml: "impact soon").
    let records = prometheus.rules_of("record").await?;
    let recorded_names: BTreeSet<&str> = records.iter().map(|(n, ..)| n.as_str()).collect();
    if recorded_names.len() < 10 {
        failures.push(format!(
            "only {} recording rules loaded",
            recorded_names.len()
        ));
    }
    for (name, _, health, error) in &records {
        if health != "ok" || !error.is_empty() {
            failures.push(format!("record {name}: health {health:?} {error}"));
        }
    }
    for name in &recorded_names {
        if matches!(
            *name,
            "azure_scheduled_events:nodes:count"
                | "azure_scheduled_events:target_event_impact:released"
        ) {
            continue;
        }
        let data = wait(&format!("{name} to have data"))
            .within(patience)
            .retrying_errors()
            .until(async || prometheus.query(name).await.map(|r| !r.is_empty()))
            .await;
        if let Err(e) = data {
            failures.push(format!("record {name}: {e}"));
        }
    }
    // VMs by vmId, per cluster: east's pool and slow_0; west's pool and the three plain VMs that
    // read instance metadata and are up (web_3 cannot reach IMDS, web_4 is gone); south's two.
    let by_cluster =
        |result: &[Value]| -> BTreeMap<String, String> { answer(result, Some("cluster")) };
    let expected_counts = |pairs: &[(&str, &str)]| -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    };
    for (expr, expected) in [
        (
            "azure_scheduled_events:vms_reporting:count",
            expected_counts(&[("east", "5"), ("south", "2"), ("west", "7")]),
        ),
        (
            "azure_scheduled_events:capacity_vms_at_risk:count{vm_scale_set_name=\"pool\"}",
            expected_counts(&[("east", "3"), ("west", "1")]),
        ),
        (
            "azure_scheduled_events:capacity_vms_evicted:count",
            expected_counts(&[("south", "2")]),
        ),
        (
            "azure_scheduled_events:nodes_without_agent:count",
            expected_counts(&[("south", "1")]),
        ),
    ] {
        let got = by_cluster(&prometheus.query(expr).await?);
        if got != expected {
            failures.push(format!("{expr}: {got:?}, expected {expected:?}"));
        }
    }

    let stuck = "AzureScheduledEventsPollLoopStuck";
    // The per-VM alerts read recorded conditions (groups .agents and .vms), a few evaluations
    // behind the series they are recorded from.
    for alert in &alerts {
        if alert.name == stuck {
            if let Err(e) = prometheus.query(&alert.expr).await {
                failures.push(format!("alert {}: {e}", alert.name));
            }
            continue;
        }
        let data = wait(&format!("alert {} to have data", alert.name))
            .within(patience)
            .retrying_errors()
            .until(async || prometheus.query(&alert.expr).await.map(|r| !r.is_empty()))
            .await;
        if let Err(e) = data {
            failures.push(format!(
                "alert {}: no data for the scenario: {e}",
                alert.name
            ));
        }
    }
    // The stuck loop, with the mixin rendered for an 8-second threshold: slow_0 alone (its request
    // hangs for 120 s). Not less: web_3's polls each wait the 2 s first-call timeout and 0.5 s of
    // backoff, and Prometheus reads its heartbeat up to a scrape late, so its last poll can look
    // 3.5 s old and more on a busy machine, though its loop is alive. The alert
    // reads the recorded per-VM conditions; the rendering's recording rules are evaluated here
    // as one expression (the loaded rules have the default threshold).
    let quick_dir = dir.0.join("quick");
    rendered_rules("{pollStuckSeconds: 8}", &quick_dir)?;
    let quick = ops::yaml(&quick_dir.join("alerts/azure-scheduled-events.yml"))?;
    let record = |name: &str| -> Result<String, Error> {
        quick["groups"]
            .as_array()
            .into_iter()
            .flatten()
            .flat_map(|g| g["rules"].as_array().into_iter().flatten())
            .find(|r| r["record"] == name)
            .and_then(|r| r["expr"].as_str())
            .map(str::to_owned)
            .ok_or_else(|| format!("no recording rule {name} in the rendering").into())
    };
    let conditions = "azure_scheduled_events:target_alert:value";
    let agent_conditions = "azure_scheduled_events:target_agent_alert:value";
    let conditions_expr = record(conditions)?.replace(
        agent_conditions,
        &format!("({})", record(agent_conditions)?),
    );
    // vm_alert reads the conditions joined with each target's VM (target_alert_vm, which also
    // joins the held impacts, `{alert=""}`): that join of the rendered conditions alone.
    let joined = "azure_scheduled_events:target_alert_vm:value";
    let held = "\nor\nazure_scheduled_events:target_event_impact:held\n";
    let joined_expr = record(joined)?;
    if !joined_expr.contains(held) {
        return Err(
            format!("{joined} does not join the held impacts as expected: {joined_expr}").into(),
        );
    }
    let joined_expr = joined_expr.replace(held, "\n");
    let vm_alert = record("azure_scheduled_events:vm_alert:value")?;
    let only_alerts = format!("{joined}{{alert!=\"\"}}");
    if !vm_alert.contains(&only_alerts) {
        return Err(format!("vm_alert does not read {only_alerts}: {vm_alert}").into());
    }
    let expr = vm_alert
        .replace(&only_alerts, &format!("({joined_expr})"))
        .replace(joined, &format!("({joined_expr})"))
        .replace(conditions, &format!("({conditions_expr})"));
    let stalled = wait("slow_0's loop to be seen stuck")
        .within(patience)
        .retrying_errors()
        .until(async || {
            let result: Vec<Value> = prometheus
                .query(&expr)
                .await?
                .into_iter()
                .filter(|s| s["metric"]["alert"] == stuck)
                .collect();
            Ok::<_, Error>((!result.is_empty()).then_some(result))
        })
        .await?;
    let stalled: BTreeSet<(String, String)> = stalled
        .iter()
        .map(|s| {
            (
                label(&s["metric"], "cluster").to_owned(),
                label(&s["metric"], "vm_name").to_owned(),
            )
        })
        .collect();
    if stalled != BTreeSet::from([("east".to_owned(), "slow_0".to_owned())]) {
        failures.push(format!(
            "{stuck} with an 8 s threshold: {stalled:?}, expected east/slow_0"
        ));
    }

    // Rule states as Prometheus evaluates them: no delay fires, the others are pending.
    let states = wait("every alert to be pending or firing")
        .within(patience)
        .retrying_errors()
        .until(async || {
            let rules = prometheus.rules().await?;
            Ok::<_, Error>(
                rules
                    .iter()
                    .all(|(name, state, _, _)| {
                        name == stuck || state == "pending" || state == "firing"
                    })
                    .then_some(rules),
            )
        })
        .await;
    match states {
        Ok(rules) => {
            for alert in alerts.iter().filter(|a| a.name != stuck) {
                let immediate = alert.rule["for"].as_str() == Some("0s");
                let state = rules
                    .iter()
                    .find(|(name, ..)| *name == alert.name)
                    .map(|(_, state, ..)| state.as_str());
                // A rule with a delay may have fired by now on a slow machine; never inactive.
                let acceptable = match state {
                    Some("firing") => true,
                    Some("pending") => !immediate,
                    _ => false,
                };
                if !acceptable {
                    failures.push(format!("alert {}: {state:?}", alert.name));
                }
            }
        }
        Err(e) => failures.push(e.to_string()),
    }

    // Who is told what: one page, for east's pool; per-VM alerts name their cluster and VM.
    let active = prometheus.alerts().await?;
    let pages: Vec<(String, String, String)> = active
        .iter()
        .filter(|(_, _, labels)| label(labels, "severity") == "critical")
        .map(|(name, _, labels)| {
            (
                name.clone(),
                label(labels, "cluster").to_owned(),
                label(labels, "vm_scale_set_name").to_owned(),
            )
        })
        .collect();
    let expected_pages = vec![(
        "AzureScheduledEventsCapacityAtRisk".to_owned(),
        "east".to_owned(),
        "pool".to_owned(),
    )];
    if pages != expected_pages {
        failures.push(format!("pages {pages:?}, expected {expected_pages:?}"));
    }
    // West's pool_0 is scraped with its node's name: its alert names the node.
    let nodes: BTreeSet<(String, String, String)> = active
        .iter()
        .filter(|(name, _, labels)| {
            name == "AzureScheduledEventImpactSoon" && labels.get("node").is_some()
        })
        .map(|(_, _, labels)| {
            (
                label(labels, "cluster").to_owned(),
                label(labels, "vm_name").to_owned(),
                label(labels, "node").to_owned(),
            )
        })
        .collect();
    let expected_nodes = BTreeSet::from([(
        "west".to_owned(),
        "pool_0".to_owned(),
        "aks-pool-12345678-vmss000000".to_owned(),
    )]);
    if nodes != expected_nodes {
        failures.push(format!(
            "AzureScheduledEventImpactSoon with a node: {nodes:?}, expected {expected_nodes:?}"
        ));
    }
    let impact_alerts: Vec<(String, String, String)> = active
        .iter()
        .filter(|(name, _, _)| name == "AzureScheduledEventImpactSoon")
        .map(|(_, _, labels)| {
            (
                label(labels, "cluster").to_owned(),
                label(labels, "vm_name").to_owned(),
                label(labels, "event_type").to_owned(),
            )
        })
        .collect();
    let impact: BTreeSet<(String, String, String)> = impact_alerts.iter().cloned().collect();
    // One alert per VM, though both pool_0 are scraped by two jobs.
    if impact_alerts.len() != impact.len() {
        failures.push(format!(
            "AzureScheduledEventImpactSoon more than once for a VM: {impact_alerts:?}"
        ));
    }
    let expected_impact: BTreeSet<(String, String, String)> = [
        ("east", "pool_0"),
        ("east", "pool_1"),
        ("east", "pool_2"),
        ("west", "pool_0"),
        ("west", "web_0"),
        ("west", "web_1"),
    ]
    .into_iter()
    .map(|(c, v)| (c.to_owned(), v.to_owned(), "Reboot".to_owned()))
    .collect();
    if impact != expected_impact {
        failures.push(format!(
            "AzureScheduledEventImpactSoon for {impact:?}, expected {expected_impact:?}"
        ));
    }

    // South's Spot wave and its node without an agent are reported, not paged (above).
    for name in [
        "AzureSpotEvictionWave",
        "AzureScheduledEventsNodesWithoutAgent",
    ] {
        let clusters: BTreeSet<String> = active
            .iter()
            .filter(|(alert, _, _)| alert == name)
            .map(|(_, _, labels)| label(labels, "cluster").to_owned())
            .collect();
        if clusters != BTreeSet::from(["south".to_owned()]) {
            failures.push(format!("{name} for clusters {clusters:?}, expected south"));
        }
    }

    // The failing outputs are west/pool_0's alone, though east/pool_0 has the same instance.
    // Receivers and the API server are shared by nature: one alert per cluster and receiver or
    // operation, with no VM label, and the VM it comes from in the per-VM record.
    for name in [
        "AzureScheduledEventNotificationsFailing",
        "AzureScheduledEventsKubernetesRequestsFailing",
    ] {
        let fired: Vec<&Value> = active
            .iter()
            .filter(|(alert, _, _)| alert == name)
            .map(|(_, _, labels)| labels)
            .collect();
        let clusters: BTreeSet<&str> = fired.iter().map(|l| label(l, "cluster")).collect();
        if clusters != BTreeSet::from(["west"]) {
            failures.push(format!("{name} for clusters {clusters:?}, expected west"));
        }
        if let Some(labels) = fired.iter().find(|l| !label(l, "vm_name").is_empty()) {
            failures.push(format!(
                "{name} names a VM, though its cause is shared: {labels}"
            ));
        }
        // Once per receiver or operation, though west/pool_0 is scraped by two jobs.
        let keys: Vec<Vec<&str>> = fired
            .iter()
            .map(|labels| {
                ["cluster", "receiver", "operation", "result"]
                    .iter()
                    .map(|key| label(labels, key))
                    .collect()
            })
            .collect();
        let distinct: BTreeSet<&Vec<&str>> = keys.iter().collect();
        if distinct.len() != keys.len() {
            failures.push(format!("{name} more than once for one cause: {keys:?}"));
        }
        let per_vm = prometheus
            .query(&format!(
                "azure_scheduled_events:vm_alert:value{{alert=\"{name}\"}}"
            ))
            .await?;
        let named: BTreeSet<(String, String)> = per_vm
            .iter()
            .map(|r| {
                (
                    label(&r["metric"], "cluster").to_owned(),
                    label(&r["metric"], "vm_name").to_owned(),
                )
            })
            .collect();
        let expected = BTreeSet::from([("west".to_owned(), "pool_0".to_owned())]);
        if named != expected {
            failures.push(format!(
                "{name} recorded for {named:?}, expected {expected:?}"
            ));
        }
    }

    assert!(
        failures.is_empty(),
        "{} problems:\n{}",
        failures.len(),
        failures.join("\n")
    );
    drop(agents);
    drop((sites, slow, silent, never));
    Ok(())
}

/// What a user who imports the dashboards before loading the rules sees at the top of each:
/// Not loaded (1) for the cluster whose agent is scraped; with the rules, Loaded (0); where no
/// agent is, nothing (the panel then says no agent's series are there), never that rules are
/// missing.
#[cfg(feature = "external-tools")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_dashboard_says_whether_the_recording_rules_are_loaded() -> Result<(), Error> {
    const TITLE: &str = "Recording rules (alerts/azure-scheduled-events.yml)";
    let dir = TempDir::new("rules-loaded")?;
    let site = Site::start(
        compute("pool_0", "pool_0", "eastus", "2"),
        reboots("quiet", &[])?,
    )
    .await?;
    let pool_0 = agent("pool_0", &site.url(), &dir.0, &[])?;
    let targets = [Target {
        address: pool_0.address().to_owned(),
        labels: vec![("cluster", "east".to_owned())],
    }];
    let without = Prometheus::start(&targets, &[]).await?;
    let with = Prometheus::start(&targets, &at_test_pace(&dir.0)?).await?;
    wait("the agent's vm_info to be scraped and its place recorded")
        .within(Duration::from_secs(60))
        .retrying_errors()
        .until(async || {
            let scraped = without.query("azure_scheduled_events_vm_info").await?;
            let recorded = with
                .query("azure_scheduled_events:target_place:info")
                .await?;
            Ok::<_, String>(!scraped.is_empty() && !recorded.is_empty())
        })
        .await?;
    let values = |cluster: &'static str, location: &'static str| {
        [
            ("cluster", cluster),
            ("location", location),
            ("scale_set", ".*"),
            ("zone", ".*"),
            ("job", JOB),
            ("instance", ".*"),
        ]
    };
    let said =
        |cluster: &str, value: &str| BTreeMap::from([(cluster.to_owned(), value.to_owned())]);
    let mut checked = 0;
    for (dashboard, json) in ops::dashboards()? {
        let expr = ops::queries(&dashboard, &json)
            .into_iter()
            .find(|q| q.place == format!("panel {TITLE:?} target A"))
            .map(|q| q.expr)
            .ok_or(format!("{dashboard}: no panel {TITLE:?}"))?;
        for (prometheus, rules, state) in [
            (&without, "without the rules", "1"),
            (&with, "with the rules", "0"),
        ] {
            let east = ops::substitute(&expr, &values("east", ".*"))?;
            assert_eq!(
                answer(&prometheus.query(&east).await?, Some("cluster")),
                said("east", state),
                "{dashboard} {rules}: {east}"
            );
            // The location variable narrows both sides alike: east's VM is in eastus.
            let eastus = ops::substitute(&expr, &values(".*", "eastus"))?;
            assert_eq!(
                answer(&prometheus.query(&eastus).await?, Some("cluster")),
                said("east", state),
                "{dashboard} {rules} in eastus: {eastus}"
            );
            // No agent in west nor in westeurope: nothing is said to be missing there.
            for nowhere in [values("west", ".*"), values(".*", "westeurope")] {
                let query = ops::substitute(&expr, &nowhere)?;
                let result = prometheus.query(&query).await?;
                assert!(
                    result.is_empty(),
                    "{dashboard} {rules}: {result:?} where no agent is: {query}"
                );
            }
            checked += 1;
        }
    }
    assert_eq!(checked, 6, "three dashboards, with and without the rules");
    drop(pool_0);
    Ok(())
}
