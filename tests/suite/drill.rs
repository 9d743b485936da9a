//! The drill of docs/simulator.md ("A drill that pages"), run as written: three simulated VMs of one
//! scale set, each with its own vmId, an agent for each, a real Prometheus with the shipped rules
//! (examples/drill/prometheus.yml) and a real Alertmanager with examples/alertmanager.yml. The page
//! must reach Alertmanager routed to the pager. The page is found by the severity the example routes
//! to the pager, never by its name.

use crate::common::{TempDir, process::AgentProcess, wait};
use crate::ops::{self, Error};

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;

use azure_scheduled_events_simulator::{
    RunningSimulator, Scenario, SimulatorHandle, example_compute,
};
use serde_json::{Value, json};

type TestResult = Result<(), Error>;

/// The VMs of the drill's scale set, as scenarios/drill.yaml names them.
const VMS: [&str; 3] = ["drill-vmss_0", "drill-vmss_1", "drill-vmss_2"];

/// The Alertmanager binary: Debian names it `prometheus-alertmanager`, upstream `alertmanager`.
fn alertmanager_binary() -> Result<&'static str, Error> {
    ["prometheus-alertmanager", "alertmanager"]
        .into_iter()
        .find(|name| {
            Command::new(name)
                .arg("--version")
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .is_ok_and(|s| s.success())
        })
        .ok_or_else(|| {
            "Alertmanager is required (Debian package prometheus-alertmanager; .ci/run installs it)"
                .into()
        })
}

/// The severity examples/alertmanager.yml routes to its pager receiver.
fn paging_severity() -> Result<String, Error> {
    let config = ops::yaml(&ops::repo().join("examples/alertmanager.yml"))?;
    config["route"]["routes"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|r| r["receiver"] == "pager")
        .flat_map(|r| r["matchers"].as_array().cloned().unwrap_or_default())
        .find_map(|m| {
            m.as_str()?
                .strip_prefix("severity=")
                .map(|v| v.trim_matches('"').to_owned())
        })
        .ok_or_else(|| "examples/alertmanager.yml routes no severity to the pager".into())
}

/// The drill's Prometheus configuration as examples/drill/prometheus.yml gives it, pointed at this
/// run's agents and Alertmanager, with the shipped rule files copied so that every group is
/// evaluated each second (the expressions and `for` are the shipped ones).
fn prometheus_config(
    dir: &TempDir,
    agents: &[String],
    alertmanager: &str,
) -> Result<PathBuf, Error> {
    let example = ops::repo().join("examples/drill/prometheus.yml");
    let mut config = ops::yaml(&example)?;
    let mut rules = Vec::new();
    for file in config["rule_files"].as_array().ok_or("no rule_files")? {
        let path = example
            .parent()
            .ok_or("examples/drill")?
            .join(file.as_str().ok_or("a rule file that is not a path")?);
        let text: Vec<String> = std::fs::read_to_string(&path)
            .map_err(|e| format!("{}: {e}", path.display()))?
            .lines()
            .map(|line| {
                if line.starts_with("    interval: ") {
                    "    interval: \"1s\"".to_owned()
                } else {
                    line.to_owned()
                }
            })
            .collect();
        let paced = dir.path(&format!("paced-{}", ops::file_name(&path)));
        std::fs::write(&paced, text.join("\n") + "\n")?;
        rules.push(json!(paced.to_string_lossy()));
    }
    config["rule_files"] = json!(rules);
    config["global"]["scrape_interval"] = json!("1s");
    config["global"]["scrape_timeout"] = json!("1s");
    config["global"]["evaluation_interval"] = json!("1s");
    let documented = config["scrape_configs"][0]["static_configs"][0]["targets"]
        .as_array()
        .map_or(0, Vec::len);
    assert_eq!(
        documented,
        VMS.len(),
        "the example scrapes one agent per VM"
    );
    config["scrape_configs"][0]["static_configs"][0]["targets"] = json!(agents);
    config["alerting"]["alertmanagers"][0]["static_configs"][0]["targets"] =
        json!([alertmanager.trim_start_matches("http://")]);
    let path = dir.path("prometheus.yml");
    std::fs::write(&path, serde_norway::to_string(&config)?)?;
    Ok(path)
}

fn alerts_of(body: &Value) -> Vec<Value> {
    body.as_array().cloned().unwrap_or_default()
}

/// docs/simulator.md's drill: three simulated VMs of scale set drill-vmss, each with its own vmId,
/// make the page fire in a real Prometheus and reach a real Alertmanager routed to the pager, naming
/// the scale set, when its first VM goes down and how long is left.
#[tokio::test(flavor = "multi_thread")]
async fn the_documented_drill_pages_through_prometheus_and_alertmanager() -> TestResult {
    let severity = paging_severity()?;
    let docs = std::fs::read_to_string(ops::repo().join("docs/simulator.md"))?;
    for needed in [
        "scenarios/drill.yaml",
        "examples/drill/prometheus.yml",
        "examples/alertmanager.yml",
    ] {
        assert!(docs.contains(needed), "the drill no longer uses {needed}");
    }
    // The rules' page, by its severity: it exists, and it is the one alert routed to the pager.
    let pages: Vec<String> = ops::alerts()?
        .into_iter()
        .filter(|a| a.rule["labels"]["severity"] == severity.as_str())
        .map(|a| a.name)
        .collect();
    assert!(!pages.is_empty(), "no alert of severity {severity}");

    let dir = TempDir::new("drill")?;
    let scenario = Scenario::from_file(&ops::repo().join("scenarios/drill.yaml"))?;
    let http = reqwest::Client::builder().no_proxy().build()?;

    // One simulator and one agent per VM, as the drill's loop starts them.
    let mut simulators = Vec::new();
    let mut agents: Vec<AgentProcess> = Vec::new();
    for vm in VMS {
        let sim = SimulatorHandle::new(example_compute(vm));
        sim.load_scenario(scenario.clone());
        let running = RunningSimulator::start(sim).await?;
        let agent = ops::start_agent(
            vm,
            &[
                format!("--imds.url={}", running.url()),
                "--state.file=".to_owned(),
                "--poll.interval=200ms".to_owned(),
            ],
        )?;
        simulators.push(running);
        agents.push(agent);
    }
    // Each agent reports its own VM, with a vmId of its own.
    let mut ids = BTreeSet::new();
    for (vm, agent) in VMS.iter().zip(&agents) {
        let text = agent.wait_for_series(&format!("vm_name=\"{vm}\"")).await?;
        let id = text
            .lines()
            .filter(|l| l.starts_with("azure_scheduled_events_vm_info{"))
            .find_map(|l| l.split("vm_id=\"").nth(1)?.split('"').next())
            .ok_or_else(|| format!("{vm}: no vm_id in vm_info"))?
            .to_owned();
        ids.insert(id);
    }
    assert_eq!(
        ids.len(),
        VMS.len(),
        "the simulated VMs share a vmId: {ids:?}"
    );

    let amtool_dir = dir.path("alertmanager");
    std::fs::create_dir_all(&amtool_dir)?;
    let binary = alertmanager_binary()?;
    let (_alertmanager, alertmanager) = ops::serve(
        "Alertmanager",
        |port| {
            let mut c = Command::new(binary);
            c.arg(format!(
                "--config.file={}",
                ops::repo().join("examples/alertmanager.yml").display()
            ))
            .arg(format!("--storage.path={}", amtool_dir.display()))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .arg("--cluster.listen-address=");
            c
        },
        &http,
    )
    .await?;
    let targets: Vec<String> = agents.iter().map(|a| a.address().to_owned()).collect();
    let config = prometheus_config(&dir, &targets, &alertmanager)?;
    let data = dir.path("prometheus-data");
    let (_prometheus, _base) = ops::serve_prometheus(&config, &data, &http).await?;

    // The page reaches Alertmanager (the shipped `for` is a minute, the groups run each second).
    let url = format!("{alertmanager}/api/v2/alerts");
    let mut held = Vec::new();
    wait("the page in Alertmanager")
        .within(Duration::from_secs(300))
        .until(async || {
            let text = http.get(&url).send().await?.text().await?;
            held = alerts_of(&serde_json::from_str(&text).unwrap_or(Value::Null));
            Ok::<bool, reqwest::Error>(
                held.iter()
                    .any(|a| a["labels"]["severity"] == severity.as_str()),
            )
        })
        .await
        .map_err(|e| format!("{e}: Alertmanager holds {held:#?}"))?;
    let page = held
        .iter()
        .find(|a| a["labels"]["severity"] == severity.as_str())
        .ok_or("no page")?;
    let name = page["labels"]["alertname"].as_str().unwrap_or_default();
    assert!(
        pages.iter().any(|p| p == name),
        "{name} is not a page of the rules"
    );
    assert_eq!(
        page["labels"]["vm_scale_set_name"], "drill-vmss",
        "{page:#}"
    );
    assert_eq!(page["labels"]["cluster"], "drill", "{page:#}");
    let receivers: Vec<&str> = page["receivers"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|r| r["name"].as_str())
        .collect();
    assert_eq!(receivers, ["pager"], "{page:#}");
    let summary = page["annotations"]["summary"].as_str().unwrap_or_default();
    // The drill's Reboots are 12 minutes ahead and the page fires within about a minute: its
    // summary names the scale set, when the first VM goes down and how long is left.
    for said in ["drill-vmss", " UTC", ", in "] {
        assert!(
            summary.contains(said),
            "the page's summary does not say {said:?}: {summary}"
        );
    }

    for mut agent in agents {
        agent.terminate()?;
    }
    for running in simulators {
        running.stop().await?;
    }
    Ok(())
}
