//! What a fleet pays for: the series the built binary exports at idle (an empty document, instance
//! metadata read), per configuration, as Prometheus would scrape them. The counts are printed,
//! must match the table in docs/metrics.md, and stay within the product's budget of 60 with
//! approval off.

use crate::common;
use crate::ops;

use std::collections::BTreeMap;

use common::process::{AgentProcess, command};
use common::{Imds, THIS_VM, TempDir, TestResult};

/// The product's budget: at idle with approval off, at most this many series.
const BUDGET: usize = 60;

/// Each configuration of the table in docs/metrics.md, with its flags; `kubeconfig` names an API
/// server for the Kubernetes output (down: its requests counter exists all the same). Log events
/// are asked for by a variable ([`LOG_EVENTS`]), in the agent's environment only.
fn configurations(kubeconfig: &str) -> Vec<(&'static str, Vec<String>)> {
    let flags = |flags: &[&str]| flags.iter().map(|f| (*f).to_owned()).collect();
    let mut configurations = vec![
        ("default", flags(&[])),
        ("traces", flags(&["--otlp.endpoint=http://127.0.0.1:9"])),
        (LOG_EVENTS, flags(&["--otlp.endpoint=http://127.0.0.1:9"])),
        ("dry-run", flags(&["--approve.dry-run"])),
        ("approval", flags(&["--approve"])),
        (
            "approval with hook",
            flags(&["--approve", "--approve.hook=true"]),
        ),
        (
            "one webhook",
            vec![format!("--notify.webhook-url={}/", ops::DOWN)],
        ),
    ];
    // The Kubernetes output is in the image's build only (the cargo feature `kubernetes`).
    if cfg!(feature = "kubernetes") {
        configurations.push((
            "kubernetes",
            vec![
                "--kubernetes.node-name=aks-pool-12345678-vmss000000".to_owned(),
                format!("--kubernetes.kubeconfig={kubeconfig}"),
            ],
        ));
    }
    configurations
}

/// The configuration with traces and log events (`OTEL_LOGS_EXPORTER=otlp`).
const LOG_EVENTS: &str = "traces and log events";

/// The series lines of an exposition (neither comments nor blank lines).
fn series(text: &str) -> usize {
    text.lines()
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .count()
}

/// `configuration -> series` from the table of docs/metrics.md, for the configurations named.
fn documented(names: &[&str]) -> Result<BTreeMap<String, usize>, std::io::Error> {
    let text = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/metrics.md"))?;
    Ok(text
        .lines()
        .filter_map(|line| {
            let cells: Vec<&str> = line.split('|').map(str::trim).collect();
            let name = cells.get(1)?;
            names.contains(name).then_some(())?;
            Some((name.to_string(), cells.get(3)?.parse().ok()?))
        })
        .collect())
}

/// The exposition of the binary started with `flags`, once it has read instance metadata and
/// a first (empty) document.
async fn idle_exposition(
    imds: &Imds,
    flags: &[String],
    env: &[(&str, &str)],
) -> Result<String, Box<dyn std::error::Error>> {
    let url = format!("--imds.url={}", imds.url());
    let mut args = vec![
        url.as_str(),
        "--web.listen-address=127.0.0.1:0",
        "--poll.interval=100ms",
    ];
    args.extend(flags.iter().map(String::as_str));
    let mut command = command(&args);
    command.envs(env.iter().copied());
    let mut agent = AgentProcess::spawn(command)?;
    let text = agent
        .wait_for_metrics("the agent to be ready", |text| {
            text.contains("azure_scheduled_events_up 1") && text.contains(THIS_VM)
        })
        .await?;
    tokio::task::spawn_blocking(move || agent.terminate()).await??;
    Ok(text)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn series_at_idle_per_configuration_match_the_docs_and_the_budget() -> TestResult {
    let imds = Imds::start().await?;
    let dir = TempDir::new("footprint")?;
    let configurations = configurations(&ops::down_kubeconfig(&dir.0)?.display().to_string());
    let mut counted = BTreeMap::new();
    for (name, flags) in &configurations {
        let env: &[(&str, &str)] = if *name == LOG_EVENTS {
            &[("OTEL_LOGS_EXPORTER", "otlp")]
        } else {
            &[]
        };
        let text = idle_exposition(&imds, flags, env).await?;
        let count = series(&text);
        eprintln!(
            "{name:<22} {count:>4} series, {:>6} bytes ({})",
            text.len(),
            if flags.is_empty() {
                "no flags".to_owned()
            } else {
                env.iter()
                    .map(|(name, value)| format!("{name}={value}"))
                    .chain(flags.iter().cloned())
                    .collect::<Vec<_>>()
                    .join(" ")
            }
        );
        counted.insert(name.to_string(), count);
    }
    let names: Vec<&str> = configurations.iter().map(|(name, _)| *name).collect();
    assert_eq!(
        documented(&names)?,
        counted,
        "docs/metrics.md states other series counts than the agent exports"
    );
    for name in ["default", "traces"] {
        assert!(
            counted[name] <= BUDGET,
            "{name}: {} series at idle, over the budget of {BUDGET}",
            counted[name]
        );
    }
    Ok(())
}
