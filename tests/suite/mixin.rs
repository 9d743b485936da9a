//! The monitoring mixin (mixin/) and what is rendered from it: alerts/, dashboards/ and the Helm
//! chart's copy of the rules must be its exact rendering, its config must change what it claims
//! to, the chart's PrometheusRule must be the mixin's rendering with the chart's values, and the
//! optional example Alertmanager configuration must pass amtool.

use crate::common;
use crate::ops;

use std::collections::BTreeSet;
use std::path::Path;

use common::TempDir;
use ops::Error;

type TestResult = Result<(), Error>;

/// The rules file `path` passed through `promtool check rules` (`what` names it in the failure), and
/// read back as its alerts.
fn checked_alerts(path: &Path, what: &str) -> Result<Vec<ops::Alert>, Error> {
    let (ok, report) = ops::run(
        "promtool",
        &["check", "rules", &path.to_string_lossy()],
        "prometheus",
    )?;
    assert!(ok, "promtool check rules on {what}:\n{report}");
    ops::alerts_in(path)
}

/// The chart's rule `groups` written to `dir`, checked by promtool and read back as alerts.
fn chart_alerts(groups: &serde_json::Value, dir: &Path) -> Result<Vec<ops::Alert>, Error> {
    let rules = dir.join("chart-rules.yml");
    std::fs::write(
        &rules,
        serde_json::to_string(&serde_json::json!({ "groups": groups }))?,
    )?;
    checked_alerts(&rules, "the chart's rules")
}

/// Renders the mixin into `dir`, with `config` (Jsonnet) merged into its config when given.
fn render(dir: &Path, config: Option<&str>) -> TestResult {
    let (ok, report) = match config {
        None => ops::run(
            "bash",
            &["scripts/render-mixin.sh", &dir.to_string_lossy()],
            "jsonnet",
        )?,
        Some(config) => ops::run(
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
    for chart_rules in [
        "deploy/helm/azure-scheduled-events-exporter/files/prometheus-rules.yml",
        "deploy/helm/azure-scheduled-events-exporter/files/prometheus-rules-single-cluster.yml",
    ] {
        assert!(
            std::fs::read_to_string(out.0.join(chart_rules))?
                == std::fs::read_to_string(ops::repo().join(chart_rules))?,
            "{chart_rules} differs from the mixin's rendering: edit mixin/ and run scripts/render-mixin.sh"
        );
    }
    Ok(())
}

/// The rule groups of the PrometheusRule that `helm template` renders with `values` (a file).
fn chart_rule_groups(values: &Path) -> Result<serde_json::Value, Error> {
    let values = values.to_string_lossy();
    let objects = ops::helm_template(&[
        "ase",
        "deploy/helm/azure-scheduled-events-exporter",
        "--values",
        &values,
    ])?;
    match ops::of_kind(&objects, "PrometheusRule").as_slice() {
        [rule] => Ok(rule["spec"]["groups"].clone()),
        other => Err(format!("helm template renders {} PrometheusRules", other.len()).into()),
    }
}

#[test]
fn the_charts_prometheus_rule_is_the_mixins_rendering_with_the_charts_values() -> TestResult {
    let dir = TempDir::new("chart-rules")?;
    // The defaults: exactly alerts/.
    let defaults = dir.0.join("defaults.yaml");
    std::fs::write(&defaults, "prometheusRule:\n  enabled: true\n")?;
    let shipped = ops::yaml(&ops::repo().join("alerts/azure-scheduled-events.yml"))?;
    assert!(
        chart_rule_groups(&defaults)? == shipped["groups"],
        "with its default values, the chart's PrometheusRule is not alerts/azure-scheduled-events.yml"
    );

    // Every setting changed: the mixin rendered with the same settings.
    let changed = dir.0.join("changed.yaml");
    std::fs::write(
        &changed,
        r#"prometheusRule:
  enabled: true
  runbookUrlBase: https://wiki.example.com/runbook#
  selector: 'job="ase"'
  clusterLabel: k8s_cluster
  vmLabels: [job, instance, pod]
  vmInfoLabels: [vm_name, zone]
  nodeLabel: kubernetes_node
  capacity:
    eventTypes: [Reboot, Redeploy, Preempt]
    minVMs: 3
    fraction: 0.3
    for: 5m
  spotWave:
    eventTypes: [Preempt]
    minVMs: 4
    fraction: 0.5
    for: 2m
    severity: info
  coverage:
    nodeMatchers: ['os_image!~"Windows.*"', 'node!~"virtual-node.*"']
    kubeStateMetricsSelector: 'job="kube-state-metrics"'
    for: 30m
"#,
    )?;
    let groups = chart_rule_groups(&changed)?;
    let out = dir.0.join("mixin");
    render(
        &out,
        Some(
            r#"{runbookUrlBase: "https://wiki.example.com/runbook#", selector: 'job="ase"', clusterLabel: "k8s_cluster",
                vmLabels: ["job", "instance", "pod"], vmInfoLabels: ["vm_name", "zone"], nodeLabel: "kubernetes_node",
                coverage+: {nodeMatchers: ['os_image!~"Windows.*"', 'node!~"virtual-node.*"'],
                            kubeStateMetricsSelector: 'job="kube-state-metrics"', "for": "30m"},
                capacity+: {eventTypes: ["Reboot", "Redeploy", "Preempt"], minVMs: 3, fraction: 0.3, "for": "5m"},
                spotWave+: {eventTypes: ["Preempt"], minVMs: 4, fraction: 0.5, "for": "2m", severity: "info"}}"#,
        ),
    )?;
    let mixin = ops::yaml(&out.join("alerts/azure-scheduled-events.yml"))?;
    assert!(
        groups == mixin["groups"],
        "with changed values, the chart's PrometheusRule is not the mixin rendered with them"
    );
    // What a user would look for, and what promtool says of it.
    let alerts = chart_alerts(&groups, &dir.0)?;
    assert!(alerts.len() >= 8);
    for alert in &alerts {
        let url = alert.rule["annotations"]["runbook_url"]
            .as_str()
            .unwrap_or_default();
        assert_eq!(
            url,
            format!(
                "https://wiki.example.com/runbook#{}",
                alert.name.to_lowercase()
            )
        );
        assert!(
            !alert.expr.contains("(cluster,") && !alert.expr.contains("(cluster)"),
            "{}: {}",
            alert.name,
            alert.expr
        );
    }
    let capacity = alerts
        .iter()
        .find(|a| a.name == "AzureScheduledEventsCapacityAtRisk")
        .ok_or("no capacity alert")?;
    assert!(
        capacity
            .expr
            .starts_with("min by (k8s_cluster, vm_scale_set_name)"),
        "{}",
        capacity.expr
    );
    for part in [
        ">= 3\n",
        ") > 0.3",
        "event_type=~\"Reboot|Redeploy|Preempt\"",
    ] {
        assert!(
            capacity.expr.contains(part),
            "no {part:?}: {}",
            capacity.expr
        );
    }
    assert_eq!(capacity.rule["for"], "5m");
    let description = capacity.rule["annotations"]["description"]
        .as_str()
        .unwrap_or_default();
    assert!(
        description.contains("a Reboot or Redeploy or Preempt event")
            && description.contains("more than 30 %"),
        "{description}"
    );
    let wave = alerts
        .iter()
        .find(|a| a.name == "AzureSpotEvictionWave")
        .ok_or("no Spot wave alert")?;
    assert_eq!(wave.rule["labels"]["severity"], "info");
    assert!(
        wave.expr.contains(">= 4\n") && wave.expr.contains(") > 0.5"),
        "{}",
        wave.expr
    );
    // The per-VM alerts read one recorded join of every per-VM condition with the VM's labels.
    let impact = alerts
        .iter()
        .find(|a| a.name == "AzureScheduledEventImpactSoon")
        .ok_or("no impact alert")?;
    assert!(
        impact.expr.contains(
            "azure_scheduled_events:vm_alert:value{alert=\"AzureScheduledEventImpactSoon\"}"
        ),
        "{}",
        impact.expr
    );
    // One per VM as its event series name it (cluster, scale set, name, and the node where a
    // job's series carry it), with no join: the events' group reads no series of every target.
    let per_vm = record_expr(&groups, "azure_scheduled_events:vm_alert:value")?;
    assert!(
        per_vm
            .contains("max by (k8s_cluster, vm_scale_set_name, vm_name, kubernetes_node, alert, ")
            && per_vm.contains(
                "azure_scheduled_events:target_alert:value unless on (vm_name) vector(1) unless on (kubernetes_node) vector(1)"
            )
            && per_vm.contains("or on (k8s_cluster, vm_scale_set_name, vm_name, alert, ")
            && per_vm.ends_with(
                "azure_scheduled_events:target_alert:value and on (vm_name) vector(1)\n"
            ),
        "{per_vm}"
    );
    let events = groups
        .as_array()
        .into_iter()
        .flatten()
        .find(|group| group["name"] == "azure-scheduled-events.events")
        .ok_or("no events group")?;
    for rule in events["rules"].as_array().into_iter().flatten() {
        let expr = rule["expr"].as_str().unwrap_or_default();
        assert!(
            !expr.contains("azure_scheduled_events:target_vm") && !expr.contains("_vm_info"),
            "the events' group reads every target's VM: {expr}"
        );
    }
    // The agent-health alerts are joined once with each target's recorded vm_info (its
    // vmInfoLabels and scale set), then one per VM.
    let joined = record_expr(
        &groups,
        "azure_scheduled_events:target_agent_alert_vm:value",
    )?;
    assert!(
        joined.contains(
            "* on (k8s_cluster, job, instance, pod) group_left (vm_id, vm_name, zone, vm_scale_set_name, priority)\nazure_scheduled_events:target_vm_info:last"
        ),
        "{joined}"
    );
    let down = record_expr(
        &groups,
        "azure_scheduled_events:target_down:timestamp_seconds",
    )?;
    assert!(
        down.contains(
            "max by (k8s_cluster, job, instance, pod, kubernetes_node) (up{job=\"ase\"}) == 0"
        ),
        "{down}"
    );
    let conditions = record_expr(&groups, "azure_scheduled_events:target_agent_alert:value")?;
    assert!(
        conditions.contains("azure_scheduled_events:target_down:timestamp_seconds")
            && conditions.contains("\"alert\", \"AzureScheduledEventsAgentDown\""),
        "{conditions}"
    );
    // Coverage: kube-state-metrics' nodes, as selected, under the agent's node label.
    let coverage = alerts
        .iter()
        .find(|a| a.name == "AzureScheduledEventsNodesWithoutAgent")
        .ok_or("no coverage alert")?;
    assert_eq!(coverage.rule["for"], "30m");
    let description = coverage.rule["annotations"]["description"]
        .as_str()
        .unwrap_or_default();
    // The text names the cluster under the chart's label and runs no query (Azure Monitor runs
    // none, and a query is where a missing label breaks a text); the nodes come from the record.
    assert!(
        description.contains("{{ with $labels.k8s_cluster }} in cluster {{ . }}{{ end }}")
            && !description.contains("query"),
        "{description}"
    );
    let nodes = record_expr(&groups, "azure_scheduled_events:nodes:count")?;
    // kube-state-metrics without the cluster label counts only where an agent's series lack it
    // too: it never makes a cluster of its own.
    for part in [
        r#"label_replace(kube_node_info{job="kube-state-metrics", os_image!~"Windows.*", node!~"virtual-node.*", k8s_cluster!=""}, "kubernetes_node", "$1", "node", "(.*)")"#,
        r#"label_replace(kube_node_info{job="kube-state-metrics", os_image!~"Windows.*", node!~"virtual-node.*", k8s_cluster=""}, "kubernetes_node", "$1", "node", "(.*)")"#,
        r#"and on (k8s_cluster) group by (k8s_cluster) (azure_scheduled_events_build_info{job="ase", k8s_cluster=""})"#,
    ] {
        assert!(nodes.contains(part), "{nodes}\nlacks {part}");
    }
    Ok(())
}

/// The expression of the recording rule `name` among rule `groups`.
fn record_expr(groups: &serde_json::Value, name: &str) -> Result<String, Error> {
    groups
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|group| group["rules"].as_array().into_iter().flatten())
        .find(|rule| rule["record"] == name)
        .and_then(|rule| rule["expr"].as_str())
        .map(str::to_owned)
        .ok_or_else(|| format!("no recording rule {name}").into())
}

#[test]
fn the_charts_prometheus_rule_for_one_cluster_has_no_cluster_label() -> TestResult {
    // One cluster, a scrape target known by its instance alone, VMs grouped by zone, every node
    // expected to run the agent, and kube-state-metrics wherever it is.
    let dir = TempDir::new("chart-rules-one-cluster")?;
    let values = dir.0.join("one-cluster.yaml");
    std::fs::write(
        &values,
        r#"prometheusRule:
  enabled: true
  clusterLabel: ""
  vmLabels: [instance]
  capacityLabel: zone
  vmInfoLabels: [vm_name, zone, node]
  coverage:
    nodeMatchers: []
    kubeStateMetricsSelector: ""
    for: 1h
"#,
    )?;
    let groups = chart_rule_groups(&values)?;
    let out = dir.0.join("mixin");
    render(
        &out,
        Some(
            r#"{clusterLabel: "", vmLabels: ["instance"], capacityLabel: "zone", vmInfoLabels: ["vm_name", "zone", "node"],
                coverage+: {nodeMatchers: [], kubeStateMetricsSelector: "", "for": "1h"}}"#,
        ),
    )?;
    let mixin = ops::yaml(&out.join("alerts/azure-scheduled-events.yml"))?;
    assert!(
        groups == mixin["groups"],
        "with clusterLabel \"\", the chart's PrometheusRule is not the mixin rendered for one cluster"
    );
    let alerts = chart_alerts(&groups, &dir.0)?;
    assert!(alerts.len() >= 8);
    for alert in &alerts {
        let text = serde_json::to_string(&alert.rule)?;
        assert!(!text.contains("cluster="), "{}: {text}", alert.name);
        assert!(
            !alert.expr.contains("job"),
            "{}: {}",
            alert.name,
            alert.expr
        );
    }
    let capacity = alerts
        .iter()
        .find(|a| a.name == "AzureScheduledEventsCapacityAtRisk")
        .ok_or("no capacity alert")?;
    assert!(
        capacity.expr.starts_with("min by (zone)"),
        "{}",
        capacity.expr
    );
    let coverage = alerts
        .iter()
        .find(|a| a.name == "AzureScheduledEventsNodesWithoutAgent")
        .ok_or("no coverage alert")?;
    assert_eq!(coverage.rule["for"], "1h");
    let nodes = record_expr(&groups, "azure_scheduled_events:nodes:count")?;
    assert_eq!(nodes.trim_end(), "count by () (kube_node_info)");
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
    let alerts = checked_alerts(&rules, "the single-cluster rendering")?;
    let mut texts: Vec<(String, String)> = alerts
        .iter()
        .map(|a| (format!("alert {}", a.name), a.expr.clone()))
        .collect();
    // The recording rules too.
    let mut records = 0;
    for group in ops::yaml(&rules)?["groups"]
        .as_array()
        .into_iter()
        .flatten()
    {
        for rule in group["rules"].as_array().into_iter().flatten() {
            if let Some(name) = rule["record"].as_str() {
                records += 1;
                texts.push((
                    format!("record {name}"),
                    rule["expr"].as_str().unwrap_or_default().to_owned(),
                ));
            }
        }
    }
    assert!(records >= 10, "only {records} recording rules");
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
        capacity.expr.starts_with("min by (zone)"),
        "{}",
        capacity.expr
    );
    Ok(())
}

#[test]
fn the_example_alertmanager_config_passes_amtool_and_names_what_the_rules_carry() -> TestResult {
    let example = ops::repo().join("examples/alertmanager.yml");
    let (ok, report) = ops::run(
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
