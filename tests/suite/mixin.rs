//! The monitoring mixin (mixin/) and what is rendered from it: alerts/ and dashboards/ must be its
//! exact rendering, its config must change what it claims to, and the example Alertmanager
//! configuration that goes with its paging policy must pass amtool.

use crate::common;
use crate::ops;

use std::collections::BTreeSet;
use std::path::Path;
use std::process::{Command, Stdio};

use common::TempDir;
use ops::Error;

type TestResult = Result<(), Error>;

fn run(program: &str, args: &[&str], package: &str) -> Result<(bool, String), Error> {
    let output = Command::new(program)
        .args(args)
        .current_dir(ops::repo())
        .stdin(Stdio::null())
        .output()
        .map_err(|e| {
            format!("{program} is required (Debian package {package}; .ci/run installs it): {e}")
        })?;
    Ok((
        output.status.success(),
        format!(
            "{}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        ),
    ))
}

/// Renders the mixin into `dir`, with `config` (Jsonnet) merged into its config when given.
fn render(dir: &Path, config: Option<&str>) -> TestResult {
    let (ok, report) = match config {
        None => run(
            "bash",
            &["scripts/render-mixin.sh", &dir.to_string_lossy()],
            "jsonnet",
        )?,
        Some(config) => run(
            "bash",
            &["scripts/render-mixin.sh", &dir.to_string_lossy(), config],
            "jsonnet",
        )?,
    };
    assert!(ok, "rendering the mixin failed:\n{report}");
    Ok(())
}

/// Relative path -> contents of every file under `dir/sub`.
fn tree(
    dir: &Path,
    sub: &str,
    skip: impl Fn(&str) -> bool,
) -> Result<Vec<(String, String)>, Error> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir.join(sub))? {
        let path = entry?.path();
        let name = format!("{sub}/{}", ops::file_name(&path));
        if !skip(&name) {
            files.push((name, std::fs::read_to_string(&path)?));
        }
    }
    files.sort();
    Ok(files)
}

#[test]
fn the_committed_alerts_and_dashboards_are_exactly_the_mixins_rendering() -> TestResult {
    let out = TempDir::new("mixin")?;
    render(&out.0, None)?;
    // The rule unit tests are written by hand, next to the rules they test.
    let hand_written = |name: &str| name.ends_with(".test.yml");
    for sub in ["alerts", "dashboards"] {
        let rendered = tree(&out.0, sub, hand_written)?;
        let committed = tree(&ops::repo(), sub, hand_written)?;
        let names = |files: &[(String, String)]| -> BTreeSet<String> {
            files.iter().map(|(n, _)| n.clone()).collect()
        };
        assert_eq!(
            names(&committed),
            names(&rendered),
            "{sub}/ holds other files than the mixin renders: run scripts/render-mixin.sh"
        );
        for ((name, want), (_, have)) in rendered.iter().zip(&committed) {
            assert!(
                want == have,
                "{name} differs from the mixin's rendering: edit mixin/ and run scripts/render-mixin.sh"
            );
        }
    }
    Ok(())
}

#[test]
fn the_mixin_renders_for_one_cluster_and_a_selector_of_your_own() -> TestResult {
    let out = TempDir::new("mixin-config")?;
    render(
        &out.0,
        Some(
            r#"{clusterLabel: "", selector: 'job="ase"', capacityLabel: "zone", capacityName: "zone"}"#,
        ),
    )?;
    let rules = out.0.join("alerts/azure-scheduled-events.yml");
    let (ok, report) = run(
        "promtool",
        &["check", "rules", &rules.to_string_lossy()],
        "prometheus",
    )?;
    assert!(
        ok,
        "promtool check rules on the single-cluster rendering:\n{report}"
    );
    let alerts = ops::alerts_in(&rules)?;
    let mut texts: Vec<(String, String)> = alerts
        .iter()
        .map(|a| (format!("alert {}", a.name), a.expr.clone()))
        .collect();
    let dashboards = tree(&out.0, "dashboards", |_| false)?;
    for (name, text) in &dashboards {
        let json: serde_json::Value = serde_json::from_str(text)?;
        for query in ops::queries(name, &json) {
            texts.push((format!("{name} {}", query.place), query.expr));
        }
        assert!(
            !json["templating"]["list"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|v| v["name"] == "cluster"),
            "{name}: a $cluster variable without a cluster label"
        );
    }
    for (place, expr) in &texts {
        assert!(
            !expr.contains("cluster"),
            "{place} still names a cluster: {expr}"
        );
        // Every selector of the agent's series carries the selector.
        for name in ops::metric_names(expr) {
            for (at, _) in expr.match_indices(&name) {
                let after = &expr[at + name.len()..];
                if after.starts_with(|c: char| c.is_ascii_alphanumeric() || c == '_') {
                    continue;
                }
                assert!(
                    after.starts_with("{job=\"ase\""),
                    "{place}: {name} without the selector: {expr}"
                );
            }
        }
    }
    let capacity = alerts
        .iter()
        .find(|a| a.name == "AzureScheduledEventsCapacityAtRisk")
        .ok_or("no capacity alert")?;
    assert!(
        capacity.expr.starts_with("count by (zone)"),
        "{}",
        capacity.expr
    );
    Ok(())
}

#[test]
fn the_example_alertmanager_config_passes_amtool_and_names_what_the_rules_carry() -> TestResult {
    let example = ops::repo().join("examples/alertmanager.yml");
    let (ok, report) = run(
        "amtool",
        &["check-config", &example.to_string_lossy()],
        "prometheus-alertmanager",
    )?;
    assert!(ok, "amtool check-config {}:\n{report}", example.display());
    let config = ops::yaml(&example)?;
    let alerts: BTreeSet<String> = ops::alerts()?.into_iter().map(|a| a.name).collect();
    let inhibit = config["inhibit_rules"]
        .as_array()
        .ok_or("no inhibit_rules")?;
    assert!(
        inhibit.len() >= 2,
        "expected inhibitions under the page and during reboots"
    );
    let mut named = BTreeSet::new();
    for rule in inhibit {
        for side in ["source_matchers", "target_matchers"] {
            for matcher in rule[side].as_array().into_iter().flatten() {
                let matcher = matcher.as_str().unwrap_or_default();
                if let Some(names) = matcher.strip_prefix("alertname=~") {
                    for name in names.trim_matches('"').split('|') {
                        named.insert(name.to_owned());
                    }
                } else if let Some(name) = matcher.strip_prefix("alertname=") {
                    named.insert(name.trim_matches('"').to_owned());
                }
            }
        }
    }
    let ours: BTreeSet<&String> = named.iter().filter(|n| n.starts_with("Azure")).collect();
    for name in &ours {
        assert!(
            alerts.contains(*name),
            "the example names {name}, which no rule defines"
        );
    }
    assert!(
        ours.iter()
            .any(|n| *n == "AzureScheduledEventsCapacityAtRisk"),
        "the example does not inhibit under the capacity page: {named:?}"
    );
    Ok(())
}
