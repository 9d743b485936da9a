//! The tests of this module that run node and Grafana's npm packages, jsonnet or helm.

use super::*;

use std::collections::BTreeMap;
use std::process::{Command, Stdio};

#[test]
fn every_dashboard_type_checks_against_grafanas_own_schema() -> TestResult {
    let grafana = ops::repo().join("tests/grafana");
    let tsc = grafana.join("node_modules/typescript/bin/tsc");
    if !tsc.exists() || !grafana.join("node_modules/@grafana/schema").exists() {
        return Err(format!(
            "TypeScript and @grafana/schema are not installed: run `npm ci` in {} (.ci/run does)",
            grafana.display()
        )
        .into());
    }
    let generated = grafana.join("generated");
    if generated.exists() {
        std::fs::remove_dir_all(&generated)?;
    }
    std::fs::create_dir_all(&generated)?;
    let dashboards = ops::dashboards()?;
    for (name, json) in &dashboards {
        let stem = name.trim_end_matches(".json");
        let source = format!(
            "// {name}, checked by tests/suite/dashboards.rs.\nimport type {{ CheckedDashboard }} from '../dashboard';\n\n\
             export const dashboard: CheckedDashboard = {};\n",
            serde_json::to_string_pretty(json)?
        );
        std::fs::write(generated.join(format!("{stem}.ts")), source)?;
    }
    let output = Command::new("node")
        .arg(&tsc)
        .args(["-p", &grafana.to_string_lossy(), "--listFiles"])
        .stdin(Stdio::null())
        .output()
        .map_err(|e| {
            format!("node is required (Debian package nodejs; .ci/run installs it): {e}")
        })?;
    let report = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "tsc found problems:\n{report}");
    for (name, _) in &dashboards {
        let checked = format!("generated/{}.ts", name.trim_end_matches(".json"));
        assert!(
            report.contains(&checked),
            "tsc did not check {checked}:\n{report}"
        );
    }
    Ok(())
}

/// deploy/azure-monitor/ rendered afresh by scripts/render-mixin.sh, and the committed one.
fn azure_monitor_files(dir: &std::path::Path) -> Result<Vec<(String, String)>, Error> {
    let mut files = Vec::new();
    let mut dirs = vec![dir.to_path_buf()];
    while let Some(d) = dirs.pop() {
        for entry in std::fs::read_dir(&d)? {
            let path = entry?.path();
            if path.is_dir() {
                dirs.push(path);
            } else {
                let name = path
                    .strip_prefix(dir)
                    .map_err(|e| e.to_string())?
                    .to_string_lossy()
                    .into_owned();
                files.push((name, std::fs::read_to_string(&path)?));
            }
        }
    }
    files.sort();
    Ok(files)
}

#[test]
fn the_azure_monitor_rule_groups_are_the_mixins_rendering_one_resource_per_group() -> TestResult {
    let out = TempDir::new("azure-monitor")?;
    let rendered = Command::new("bash")
        .arg(ops::repo().join("scripts/render-mixin.sh"))
        .arg(&out.0)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("bash and jsonnet are required (.ci/run installs jsonnet): {e}"))?;
    assert!(
        rendered.status.success(),
        "rendering failed: {}",
        String::from_utf8_lossy(&rendered.stderr)
    );
    let fresh = azure_monitor_files(&out.0.join("deploy/azure-monitor"))?;
    let committed = azure_monitor_files(&ops::repo().join("deploy/azure-monitor"))?;
    let names = |files: &[(String, String)]| files.iter().map(|f| f.0.clone()).collect::<Vec<_>>();
    assert_eq!(
        names(&committed),
        names(&fresh),
        "deploy/azure-monitor/ holds other files than the mixin renders: run scripts/render-mixin.sh"
    );
    for ((name, want), (_, have)) in fresh.iter().zip(&committed) {
        assert!(
            want == have,
            "deploy/azure-monitor/{name} differs from the mixin's rendering: edit mixin/ and run scripts/render-mixin.sh"
        );
    }

    // The ARM template: one prometheusRuleGroups resource per group of the rule files, every
    // rule as written there, alerts with Azure's integer severity and the action group.
    let arm: Value = serde_json::from_str(&std::fs::read_to_string(
        ops::repo().join("deploy/azure-monitor/prometheus-rule-groups.json"),
    )?)?;
    // One action group per severity, each empty by default (no action), so that only what is
    // pointed at the pager pages.
    const ACTION_GROUPS: [&str; 3] = [
        "criticalActionGroupId",
        "warningActionGroupId",
        "infoActionGroupId",
    ];
    for parameter in ["azureMonitorWorkspaceId", "clusterName"]
        .into_iter()
        .chain(ACTION_GROUPS)
    {
        assert_eq!(
            arm["parameters"][parameter]["type"], "string",
            "no parameter {parameter}"
        );
    }
    for parameter in ACTION_GROUPS {
        assert_eq!(
            arm["parameters"][parameter]["defaultValue"], "",
            "{parameter}: empty means no action"
        );
    }
    let action_group = |severity| match severity {
        0 => "criticalActionGroupId",
        1 | 2 => "warningActionGroupId",
        _ => "infoActionGroupId",
    };
    let resources = arm["resources"].as_array().ok_or("no resources")?;
    let mut groups = Vec::new();
    for path in ops::rule_files()? {
        let doc = ops::yaml(&path)?;
        groups.extend(doc["groups"].as_array().into_iter().flatten().cloned());
    }
    assert_eq!(resources.len(), groups.len(), "one resource per rule group");
    let severities = BTreeMap::from([("critical", 0), ("warning", 2), ("info", 3)]);
    let mut alerts = 0;
    let mut pages = BTreeSet::new();
    for (resource, group) in resources.iter().zip(&groups) {
        let group_name = group["name"].as_str().ok_or("a group without a name")?;
        assert_eq!(
            resource["type"],
            "Microsoft.AlertsManagement/prometheusRuleGroups"
        );
        assert!(
            resource["apiVersion"]
                .as_str()
                .is_some_and(|v| v.len() == 10)
        );
        assert!(
            resource["name"]
                .as_str()
                .is_some_and(|n| n.ends_with(&format!("'{group_name}')]"))),
            "{}",
            resource["name"]
        );
        let properties = &resource["properties"];
        assert!(
            properties["scopes"]
                .as_str()
                .is_some_and(|s| s.contains("parameters('azureMonitorWorkspaceId')")),
            "{group_name}: not scoped to the workspace"
        );
        assert!(
            properties["clusterName"]
                .as_str()
                .is_some_and(|s| s.contains("parameters('clusterName')")),
            "{group_name}: no clusterName"
        );
        let rules = properties["rules"].as_array().ok_or("no rules")?;
        let written = group["rules"].as_array().ok_or("no rules")?;
        assert_eq!(rules.len(), written.len(), "{group_name}");
        for (rule, source) in rules.iter().zip(written) {
            let expr = source["expr"].as_str().unwrap_or_default().trim_end();
            assert_eq!(rule["expression"].as_str(), Some(expr), "{group_name}");
            assert_eq!(rule["enabled"], true);
            if let Some(name) = source["alert"].as_str() {
                alerts += 1;
                assert_eq!(rule["alert"].as_str(), Some(name));
                let label = source["labels"]["severity"].as_str().unwrap_or_default();
                let want = severities.get(label).copied().unwrap_or(4);
                assert_eq!(rule["severity"], want, "{name}: severity {label}");
                assert!(
                    rule["for"].as_str().is_some_and(|f| f.starts_with("PT")),
                    "{name}: for {}",
                    rule["for"]
                );
                let group = action_group(want);
                assert_eq!(
                    rule["actions"],
                    format!(
                        "[if(empty(parameters('{group}')), createArray(), createArray(createObject('actionGroupId', parameters('{group}'))))]"
                    ),
                    "{name}"
                );
                if want == 0 {
                    pages.insert(name.to_owned());
                }
                // Azure Monitor runs no query in an annotation: where the rule file's text runs
                // one (the time left), the Azure text is its own, with the same annotations and
                // no query; everywhere else it is the rule file's.
                let runs_query = |v: &Value| v.to_string().contains("| query");
                if runs_query(&source["annotations"]) {
                    let keys = |v: &Value| {
                        v.as_object()
                            .map(|o| o.keys().cloned().collect::<Vec<_>>())
                            .unwrap_or_default()
                    };
                    assert_eq!(
                        keys(&rule["annotations"]),
                        keys(&source["annotations"]),
                        "{name}"
                    );
                    assert!(
                        !runs_query(&rule["annotations"]),
                        "{name}: an Azure annotation runs a query"
                    );
                } else {
                    assert_eq!(rule["annotations"], source["annotations"], "{name}");
                }
            } else {
                assert_eq!(rule["record"], source["record"], "{group_name}");
                assert!(rule.get("severity").is_none() && rule.get("actions").is_none());
            }
        }
    }
    assert!(alerts >= 10, "only {alerts} alerts");
    assert_eq!(
        pages,
        BTreeSet::from(["AzureScheduledEventsCapacityAtRisk".to_owned()]),
        "only the capacity page reaches the critical action group"
    );

    // Bicep, from the same data: one resource per group, the same parameters.
    let bicep = std::fs::read_to_string(
        ops::repo().join("deploy/azure-monitor/prometheus-rule-groups.bicep"),
    )?;
    assert_eq!(
        bicep
            .matches("'Microsoft.AlertsManagement/prometheusRuleGroups@")
            .count(),
        groups.len()
    );
    for group in &groups {
        let name = group["name"].as_str().unwrap_or_default();
        assert!(
            bicep.contains(&format!("name: '${{ruleGroupPrefix}}{name}'")),
            "bicep lacks {name}"
        );
    }
    for parameter in ["azureMonitorWorkspaceId", "clusterName"] {
        assert!(bicep.contains(&format!("param {parameter} string")));
    }
    for parameter in ACTION_GROUPS {
        assert!(bicep.contains(&format!("param {parameter} string = ''")));
    }
    assert_eq!(
        bicep
            .matches("actionGroupId: criticalActionGroupId")
            .count(),
        1,
        "one alert pages"
    );
    assert_eq!(
        ACTION_GROUPS
            .iter()
            .map(|p| bicep.matches(&format!("actionGroupId: {p}")).count())
            .sum::<usize>(),
        alerts,
        "every alert notifies the action group of its severity"
    );
    // The Azure dashboards differ from dashboards/ only in the type of $datasource and in their
    // uids, which end in -azmon (and so do their links to each other): a Grafana that imports both
    // sets keeps both, where one uid for two dashboards would let the second import replace the first.
    let mut azure_uids = BTreeSet::new();
    for (name, json) in ops::dashboards()? {
        let azure: Value = serde_json::from_str(&std::fs::read_to_string(
            ops::repo()
                .join("deploy/azure-monitor/dashboards")
                .join(&name),
        )?)?;
        let uid = json["uid"].as_str().ok_or("no uid")?;
        assert_eq!(azure["uid"], format!("{uid}-azmon"), "{name}");
        azure_uids.insert(azure["uid"].as_str().unwrap_or_default().to_owned());
        let mut text = serde_json::to_string(&json)?;
        for uid in UIDS {
            text = text.replace(&format!("\"{uid}\""), &format!("\"{uid}-azmon\""));
            text = text.replace(&format!("/d/{uid}?"), &format!("/d/{uid}-azmon?"));
        }
        let mut expected: Value = serde_json::from_str(&text)?;
        let list = expected["templating"]["list"]
            .as_array_mut()
            .ok_or("no variables")?;
        for v in list.iter_mut() {
            if v["name"] == "datasource" {
                v["query"] = "grafana-azureprometheus-datasource".into();
            }
        }
        assert_eq!(azure, expected, "{name}");
    }
    let uids: BTreeSet<String> = UIDS.iter().map(|u| (*u).to_owned()).collect();
    assert_eq!(azure_uids.len(), UIDS.len());
    assert!(azure_uids.is_disjoint(&uids), "{azure_uids:?}");
    Ok(())
}

#[test]
fn the_kube_prometheus_stack_quickstart_renders_objects_its_selectors_pick() -> TestResult {
    let objects = ops::helm_template(&[
        "ase",
        "deploy/helm/azure-scheduled-events-exporter",
        "-f",
        "examples/helm-kube-prometheus-stack.yaml",
        "--namespace",
        "azure-scheduled-events",
    ])?;
    let mut kinds = BTreeMap::new();
    for object in &objects {
        let Some(kind) = object["kind"].as_str() else {
            continue;
        };
        *kinds.entry(kind.to_owned()).or_insert(0) += 1;
        let labels = &object["metadata"]["labels"];
        match kind {
            // kube-prometheus-stack's Prometheus selects these by its release label.
            "PodMonitor" | "PrometheusRule" => {
                assert_eq!(labels["release"], "kube-prometheus-stack", "{kind}");
                assert_eq!(object["apiVersion"], "monitoring.coreos.com/v1", "{kind}");
            }
            // Its Grafana's sidecar reads ConfigMaps labelled grafana_dashboard in its namespace.
            "ConfigMap" => {
                assert_eq!(labels["grafana_dashboard"], "1");
                assert_eq!(object["metadata"]["namespace"], "monitoring");
            }
            // One scrape per agent: the PodMonitor's, no annotation-based job as well.
            "DaemonSet" => {
                let annotations = &object["spec"]["template"]["metadata"]["annotations"];
                assert!(
                    annotations.get("prometheus.io/scrape").is_none(),
                    "the pods also carry scrape annotations: {annotations}"
                );
            }
            _ => {}
        }
    }
    for kind in ["DaemonSet", "PodMonitor", "PrometheusRule"] {
        assert_eq!(kinds.get(kind), Some(&1), "{kind} rendered: {kinds:?}");
    }
    assert_eq!(
        kinds.get("ConfigMap"),
        Some(&3),
        "one ConfigMap per dashboard"
    );
    Ok(())
}
