//! What a fleet pays for: the series the built binary exports at idle (an empty document, instance
//! metadata read), per configuration, as Prometheus would scrape them. The counts are printed,
//! must match the table in docs/metrics.md, and stay within the product's budget of 100 with
//! approval off.

mod common;

use std::collections::BTreeMap;
use std::time::Duration;

use common::process::{AgentProcess, command, scrape};
use common::{Imds, PATIENCE, THIS_VM, TestResult};

/// The product's budget: at idle with approval off, at most this many series.
const BUDGET: usize = 100;

/// Each configuration of the table in docs/metrics.md, with its flags.
const CONFIGURATIONS: &[(&str, &[&str])] = &[
    ("default", &[]),
    ("traces", &["--otlp.endpoint=http://127.0.0.1:9"]),
    ("dry-run", &["--approve.dry-run"]),
    ("approval", &["--approve"]),
    ("approval with hook", &["--approve", "--approve.hook=true"]),
];

/// The series lines of an exposition (neither comments nor blank lines).
fn series(text: &str) -> usize {
    text.lines()
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .count()
}

/// `configuration -> series` from the table of docs/metrics.md.
fn documented() -> Result<BTreeMap<String, usize>, std::io::Error> {
    let text = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/metrics.md"))?;
    Ok(text
        .lines()
        .filter_map(|line| {
            let cells: Vec<&str> = line.split('|').map(str::trim).collect();
            let name = cells.get(1)?;
            CONFIGURATIONS.iter().find(|(n, _)| n == name)?;
            Some((name.to_string(), cells.get(3)?.parse().ok()?))
        })
        .collect())
}

/// The exposition of the binary started with `flags`, once it has read instance metadata and
/// a first (empty) document.
async fn idle_exposition(
    imds: &Imds,
    flags: &[&str],
) -> Result<String, Box<dyn std::error::Error>> {
    let url = format!("--imds.url={}", imds.url());
    let mut args = vec![
        url.as_str(),
        "--web.listen-address=127.0.0.1:0",
        "--poll.interval=100ms",
    ];
    args.extend_from_slice(flags);
    let mut agent = AgentProcess::spawn(command(&args))?;
    let address = agent.address().to_owned();
    let deadline = tokio::time::Instant::now() + PATIENCE;
    let text = loop {
        let address = address.clone();
        let text = tokio::task::spawn_blocking(move || scrape(&address)).await??;
        if text.contains("azure_scheduled_events_up 1") && text.contains(THIS_VM) {
            break text;
        }
        if tokio::time::Instant::now() > deadline {
            return Err(format!("the agent never became ready:\n{text}").into());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    tokio::task::spawn_blocking(move || agent.terminate()).await??;
    Ok(text)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn series_at_idle_per_configuration_match_the_docs_and_the_budget() -> TestResult {
    let imds = Imds::start().await?;
    let mut counted = BTreeMap::new();
    for (name, flags) in CONFIGURATIONS {
        let text = idle_exposition(&imds, flags).await?;
        let count = series(&text);
        eprintln!(
            "{name:<20} {count:>4} series, {:>6} bytes ({})",
            text.len(),
            if flags.is_empty() {
                "no flags".to_owned()
            } else {
                flags.join(" ")
            }
        );
        counted.insert(name.to_string(), count);
    }
    assert_eq!(
        documented()?,
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
