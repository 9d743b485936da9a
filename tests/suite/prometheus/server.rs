//! What the tests against a live Prometheus share: the server on loopback, simulated IMDS sites,
//! the agents, the shipped rules at test pace, and readers of query answers.

use crate::common::TempDir;
use crate::common::process::AgentProcess;
use crate::ops;

use azure_scheduled_events_exporter::azure::wire::Compute;
use azure_scheduled_events_simulator::{
    RunningSimulator, Scenario, SimulatorHandle, example_compute,
};
use ops::{Error, Process};
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

pub(super) const JOB: &str = "azure-scheduled-events";
/// A second job scraping east's and west's pool_0 again.
pub(super) const SECOND_JOB: &str = "azure-scheduled-events-pods";
/// The scenario's Freeze, shared by web_0, web_1 and web_2: the event dashboard shows it.
pub(super) const SHARED_EVENT: &str = "0E5A2C4B-7D1F-4B8E-9A36-5C2D8F1E7B90";

/// One scrape target: the agent's address and the labels Prometheus gives it.
pub(super) struct Target {
    pub(super) address: String,
    pub(super) labels: Vec<(&'static str, String)>,
}

/// A Prometheus server on loopback, scraping `targets` every second and evaluating the rules.
pub(super) struct Prometheus {
    pub(super) _process: Process,
    pub(super) _dir: TempDir,
    pub(super) base: String,
    pub(super) http: reqwest::Client,
}

impl Prometheus {
    pub(super) async fn start(
        targets: &[Target],
        rule_files: &[std::path::PathBuf],
    ) -> Result<Self, Error> {
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
        let data = dir.0.join("data");
        let (process, base) = ops::serve_prometheus(&config_path, &data, &http).await?;
        Ok(Self {
            _process: process,
            _dir: dir,
            base,
            http,
        })
    }

    pub(super) async fn api(&self, path: &str, query: &[(&str, &str)]) -> Result<Value, Error> {
        let response = self
            .http
            .get(format!("{}{path}", self.base))
            .query(query)
            .send()
            .await?;
        Ok(serde_json::from_str(&response.text().await?)?)
    }

    /// An instant query: the result vector, or Prometheus' error.
    pub(super) async fn query(&self, expr: &str) -> Result<Vec<Value>, String> {
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
    pub(super) async fn rules(&self) -> Result<Vec<(String, String, String, String)>, Error> {
        self.rules_of("alert").await
    }

    /// Every rule of `kind` (alert, record) loaded: (name, state, health, last error).
    pub(super) async fn rules_of(
        &self,
        kind: &str,
    ) -> Result<Vec<(String, String, String, String)>, Error> {
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
    pub(super) async fn alerts(&self) -> Result<Vec<(String, String, Value)>, Error> {
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

/// A simulated IMDS whose instance metadata is `compute` (the agents give their own VM names
/// with `--vm.name`), playing `scenario`.
pub(super) struct Site {
    pub(super) sim: SimulatorHandle,
    pub(super) running: RunningSimulator,
}

impl Site {
    pub(super) async fn start(compute: Compute, scenario: Scenario) -> Result<Self, Error> {
        let sim = SimulatorHandle::new(compute);
        sim.load_scenario(scenario);
        let running = RunningSimulator::start(sim.clone()).await?;
        Ok(Self { sim, running })
    }

    pub(super) fn url(&self) -> String {
        self.running.url()
    }
}

/// The instance metadata of VM `name` in `location`: its own vmId, as Azure gives every VM (the
/// rules count VMs by it), and the scale set `example_compute` derives from `scale_set_of`.
pub(super) fn compute(name: &str, scale_set_of: &str, location: &str, zone: &str) -> Compute {
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

/// A Reboot with 12 minutes of notice for each VM named, one EventId per VM (one per host
/// operation, as Azure does): a wave of maintenance through a scale set.
pub(super) fn reboots(name: &str, vms: &[(&str, &str)]) -> Result<Scenario, Error> {
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

/// The agent as VM `name`, polling `imds_url` fast, its state file and boot id in `dir`.
pub(super) fn agent(
    name: &str,
    imds_url: &str,
    dir: &Path,
    extra: &[&str],
) -> Result<AgentProcess, Error> {
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

/// The shipped rule files, copied into `dir` with every rule group evaluated each second: groups
/// that run every few minutes in production (`interval:`) keep pace with this test's one-second
/// scrapes and evaluations. The expressions are the shipped ones.
pub(super) fn at_test_pace(dir: &Path) -> Result<Vec<PathBuf>, Error> {
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

/// The rule file rendered from the mixin with `config` (Jsonnet) merged into its config.
pub(super) fn rendered_rules(config: &str, dir: &Path) -> Result<Vec<ops::Alert>, Error> {
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

/// `values` with the variable `name` set to `value`.
pub(super) fn set<'a, const N: usize>(
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

pub(super) fn label<'a>(labels: &'a Value, name: &str) -> &'a str {
    labels[name].as_str().unwrap_or_default()
}

/// A query's answer as label value (of `key`, or "" without one) -> sample value.
pub(super) fn answer(result: &[Value], key: Option<&str>) -> BTreeMap<String, String> {
    result
        .iter()
        .map(|s| {
            let name = key.map(|k| label(&s["metric"], k)).unwrap_or_default();
            let value = s["value"][1].as_str().unwrap_or_default();
            (name.to_owned(), value.to_owned())
        })
        .collect()
}
