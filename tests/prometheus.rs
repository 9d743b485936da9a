//! The alert rules and dashboards against Prometheus itself: promtool on every rule file and its
//! unit tests, and a real Prometheus scraping real agents that evaluates every expression we ship.

mod common;
mod ops;

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use azure_scheduled_events_exporter::simulator::Scenario;
use common::process::AgentProcess;
use common::{Imds, TempDir};
use ops::{Error, Process};
use serde_json::Value;

type TestResult = Result<(), Error>;

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
            ["critical", "warning"].contains(&severity),
            "{name}: severity {severity:?} is neither critical nor warning"
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
        if alert.expr.contains("event_info") && !alert.expr.contains("count by (job)") {
            assert!(
                description.contains("$labels.event_id"),
                "{name}: the description does not name the event"
            );
        }
        let url = annotations["runbook_url"].as_str().unwrap_or_default();
        let section = url
            .strip_prefix("docs/runbook.md#")
            .ok_or_else(|| format!("{name}: runbook_url {url:?} is not docs/runbook.md#section"))?;
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

// ----------------------------------------------------------------------------- end to end

const JOB: &str = "azure-scheduled-events";
/// The scenario's Freeze, shared by web_0, web_1 and web_2: the event dashboard shows it.
const SHARED_EVENT: &str = "0E5A2C4B-7D1F-4B8E-9A36-5C2D8F1E7B90";

/// A Prometheus server on loopback, scraping `targets` every second and evaluating the rules.
struct Prometheus {
    _process: Process,
    _dir: TempDir,
    base: String,
    http: reqwest::Client,
}

impl Prometheus {
    async fn start(targets: &[String], rule_files: &[std::path::PathBuf]) -> Result<Self, Error> {
        let dir = TempDir::new("prometheus")?;
        let rules: Vec<String> = rule_files
            .iter()
            .map(|p| format!("  - {:?}", p.to_string_lossy()))
            .collect();
        let config = format!(
            "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n  evaluation_interval: 1s\n\
             rule_files:\n{}\n\
             scrape_configs:\n  - job_name: {JOB}\n    static_configs:\n      - targets: [{}]\n",
            rules.join("\n"),
            targets
                .iter()
                .map(|t| format!("{t:?}"))
                .collect::<Vec<_>>()
                .join(", ")
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
            let ready = ops::eventually("Prometheus to be ready", Duration::from_secs(30), || {
                let url = format!("{base}/-/ready");
                let http = http.clone();
                let exited = process.child.try_wait().ok().flatten();
                async move {
                    if let Some(status) = exited {
                        return Err(format!("prometheus exited: {status}").into());
                    }
                    Ok(http
                        .get(url)
                        .send()
                        .await
                        .ok()
                        .filter(|r| r.status().is_success())
                        .map(|_| ()))
                }
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

    /// Alert name -> state ("inactive", "pending", "firing") of every alerting rule loaded.
    async fn rule_states(&self) -> Result<BTreeMap<String, String>, Error> {
        let answer = self.api("/api/v1/rules", &[("type", "alert")]).await?;
        let mut states = BTreeMap::new();
        for group in answer["data"]["groups"].as_array().into_iter().flatten() {
            for rule in group["rules"].as_array().into_iter().flatten() {
                states.insert(
                    rule["name"].as_str().unwrap_or_default().to_owned(),
                    rule["state"].as_str().unwrap_or_default().to_owned(),
                );
            }
        }
        Ok(states)
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

/// The agent as VM `name`, polling `imds_url` fast, its state file and boot id in `dir`.
fn agent(name: &str, imds_url: &str, dir: &Path, extra: &[&str]) -> Result<AgentProcess, Error> {
    let boot_id = dir.join(format!("{name}.boot_id"));
    if !boot_id.exists() {
        std::fs::write(&boot_id, "boot-1\n")?;
    }
    let mut args = vec![
        format!("--imds.url={imds_url}"),
        format!("--vm.name={name}"),
        "--poll.interval=200ms".into(),
        "--imds.timeout=1s".into(),
        "--imds.first-timeout=2s".into(),
        "--imds.max-backoff=500ms".into(),
        format!(
            "--state.file={}",
            dir.join(format!("{name}.json")).display()
        ),
        format!("--state.boot-id-file={}", boot_id.display()),
    ];
    args.extend(extra.iter().map(|a| (*a).to_owned()));
    ops::start_agent(name, &args)
}

/// scenarios/fleet.yaml played to five agents scraped by one Prometheus with the alert rules:
/// web_0..web_2 see the scenario (web_0 exports traces, to a collector that is down, so its
/// OTLP counters exist; web_1 approves Spot evictions through a hook that fails; web_2's
/// machine reboots without warning), web_3 cannot reach IMDS, web_4 stops after its first scrapes.
/// Every dashboard expression (variables set to real values) and every alert expression must
/// parse and return data, the alerts without a delay must fire, and the others must be pending.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_real_prometheus_evaluates_every_dashboard_and_alert_expression_against_the_agent()
-> TestResult {
    let imds = Imds::start().await?;
    imds.sim.load_scenario(Scenario::from_file(
        &ops::repo().join("scenarios/fleet.yaml"),
    )?);
    // web_3's IMDS: a socket that is bound but never answers, held for the whole test.
    let silent = std::net::TcpListener::bind("127.0.0.1:0")?;
    let unreachable = format!("http://{}", silent.local_addr()?);
    let dir = TempDir::new("fleet")?;
    let approve = [
        "--approve",
        "--approve.event-types=Preempt",
        "--approve.hook=false",
    ];
    let traces = ["--otlp.endpoint=http://127.0.0.1:9"];
    let mut agents = Vec::new();
    for (name, url, extra) in [
        ("web_0", imds.url(), &traces[..]),
        ("web_1", imds.url(), &approve[..]),
        ("web_2", imds.url(), &[]),
        ("web_3", unreachable, &[]),
        ("web_4", imds.url(), &[]),
    ] {
        agents.push(agent(name, &url, &dir.0, extra)?);
    }
    let targets: Vec<String> = agents.iter().map(|a| a.address().to_owned()).collect();
    let prometheus = Prometheus::start(&targets, &ops::rule_files()?).await?;
    let patience = Duration::from_secs(60);

    // Every agent scraped, instance metadata read by those that reach IMDS, and enough samples
    // for rates.
    ops::eventually("every agent to be scraped", patience, || async {
        let up = prometheus.query("count(up == 1)").await?;
        let vms = prometheus
            .query("count(count_over_time(azure_scheduled_events_vm_info[1m]) >= 3)")
            .await?;
        let count = |v: &[Value]| {
            v.first()
                .and_then(|s| s["value"][1].as_str().map(str::to_owned))
        };
        Ok(
            (count(&up).as_deref() == Some("5") && count(&vms).as_deref() == Some("4"))
                .then_some(()),
        )
    })
    .await?;
    // web_4 goes away: Prometheus keeps its history and sees the target down.
    let web_4 = agents.pop().ok_or("no web_4")?;
    let web_4_address = web_4.address().to_owned();
    drop(web_4);
    let down = format!("up{{instance=\"{web_4_address}\"}} == 0");
    ops::eventually("web_4 to be seen down", patience, || async {
        Ok((!prometheus.query(&down).await?.is_empty()).then_some(()))
    })
    .await?;
    // web_2's machine reboots: a new boot id, and the agent back on the same address.
    let web_2 = agents.remove(2);
    let web_2_address = web_2.address().to_owned();
    drop(web_2);
    std::fs::write(dir.0.join("web_2.boot_id"), "boot-2\n")?;
    let listen = format!("--web.listen-address={web_2_address}");
    let web_2 = ops::eventually("web_2 to restart on its address", patience, || async {
        Ok(agent("web_2", &imds.url(), &dir.0, &[listen.as_str()]).ok())
    })
    .await?;
    agents.insert(2, web_2);
    let rebooted = format!(
        "increase(azure_scheduled_events_reboots_total{{instance=\"{web_2_address}\",expected=\"false\"}}[1m]) > 0"
    );
    ops::eventually(
        "web_2's unexpected reboot to be counted",
        patience,
        || async { Ok((!prometheus.query(&rebooted).await?.is_empty()).then_some(())) },
    )
    .await?;
    ops::eventually("web_1's approval hook to fail", patience, || async {
        let failed = prometheus
            .query("increase(azure_scheduled_events_approval_failures_total{reason=\"hook_failed\"}[1m]) > 0")
            .await?;
        Ok((!failed.is_empty()).then_some(()))
    })
    .await?;
    ops::eventually("the Spot eviction to page", patience, || async {
        let alerts = prometheus.alerts().await?;
        Ok(alerts
            .iter()
            .any(|(name, state, _)| name == "AzureSpotEviction" && state == "firing")
            .then_some(()))
    })
    .await?;

    let mut failures = Vec::new();

    // Dashboards: every target and variable query, with variables set as a user would.
    let trace_id = SHARED_EVENT.replace('-', "");
    let values = [
        ("job", JOB),
        ("instance", ".+"),
        ("event_id", SHARED_EVENT),
        ("trace_id", trace_id.as_str()),
        ("__rate_interval", "1m"),
        ("__interval", "15s"),
        ("__range", "5m"),
    ];
    let mut evaluated = 0;
    for (dashboard, json) in ops::dashboards()? {
        for query in ops::queries(&dashboard, &json) {
            let place = format!("{dashboard} {}", query.place);
            let (expr, label) = if query.variable {
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
            let expr = match ops::substitute(&expr, &values) {
                Ok(expr) => expr,
                Err(e) => {
                    failures.push(format!("{place}: {e}"));
                    continue;
                }
            };
            evaluated += 1;
            match prometheus.query(&expr).await {
                Err(e) => failures.push(format!("{place}: {e}\n    {expr}")),
                Ok(result) if result.is_empty() => {
                    failures.push(format!("{place}: no data\n    {expr}"));
                }
                Ok(result) => {
                    if let Some(label) = label
                        && !result.iter().any(|s| s["metric"][&label].is_string())
                    {
                        failures.push(format!("{place}: no series has label {label}"));
                    }
                    // The trace link must carry the EventId without dashes.
                    if expr.contains("\"trace_id\"") && expr.contains(SHARED_EVENT) {
                        let ids: BTreeSet<&str> = result
                            .iter()
                            .filter_map(|s| s["metric"]["trace_id"].as_str())
                            .collect();
                        if ids != BTreeSet::from([trace_id.as_str()]) {
                            failures
                                .push(format!("{place}: trace ids {ids:?}, expected {trace_id}"));
                        }
                    }
                }
            }
        }
    }
    assert!(
        evaluated >= 30,
        "only {evaluated} dashboard expressions found"
    );

    // Alert rules: every expression returns data for this scenario.
    let alerts = ops::alerts()?;
    for alert in &alerts {
        match prometheus.query(&alert.expr).await {
            Err(e) => failures.push(format!("alert {}: {e}", alert.name)),
            Ok(result) if result.is_empty() => {
                failures.push(format!("alert {}: no data for the scenario", alert.name));
            }
            Ok(_) => {}
        }
    }

    // Rule states as Prometheus evaluates them: no delay fires, the others are pending.
    let states = ops::eventually("every alert to be pending or firing", patience, || async {
        let states = prometheus.rule_states().await?;
        Ok(states
            .values()
            .all(|s| s == "pending" || s == "firing")
            .then_some(states))
    })
    .await;
    match states {
        Ok(states) => {
            for alert in &alerts {
                let immediate = alert.rule["for"].as_str() == Some("0s");
                let expected = if immediate { "firing" } else { "pending" };
                let state = states.get(&alert.name).map(String::as_str);
                // A rule with a delay may have fired by now on a slow machine; never inactive.
                let acceptable = match state {
                    Some("firing") => true,
                    Some("pending") => !immediate,
                    _ => false,
                };
                if !acceptable {
                    failures.push(format!(
                        "alert {}: {state:?}, expected {expected}",
                        alert.name
                    ));
                }
            }
        }
        Err(e) => failures.push(e.to_string()),
    }

    // Which events page: the Freeze and the Redeploy a week ahead never do.
    let impact: BTreeSet<String> = prometheus
        .alerts()
        .await?
        .into_iter()
        .filter(|(name, _, _)| name == "AzureScheduledEventImpactSoon")
        .filter_map(|(_, _, labels)| labels["event_type"].as_str().map(str::to_owned))
        .collect();
    let expected: BTreeSet<String> = ["Preempt", "Reboot", "Terminate"].map(String::from).into();
    if impact != expected {
        failures.push(format!(
            "AzureScheduledEventImpactSoon for {impact:?}, expected {expected:?}"
        ));
    }

    assert!(
        failures.is_empty(),
        "{} problems:\n{}",
        failures.len(),
        failures.join("\n")
    );
    drop(agents);
    drop(imds);
    drop(silent);
    Ok(())
}
