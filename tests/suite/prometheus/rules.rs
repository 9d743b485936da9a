//! The rule files as shipped: promtool accepts them and passes their unit tests, every alert is
//! unit-tested firing and not, named, labelled, described and has a runbook section, only a scale
//! set's capacity pages, and every grouping keeps the cluster.

use crate::ops;

use std::collections::BTreeSet;

use ops::Error;

type TestResult = Result<(), Error>;

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
        // A per-VM alert names its VM; an alert of many VMs (a scale set, a cluster, an event)
        // runs no query to list them (Azure Monitor runs none): its runbook section gives the
        // query that does, for its cluster.
        let section_text = runbook
            .split("\n## ")
            .find(|s| s.starts_with(&format!("{name}\n")))
            .unwrap_or_default();
        assert!(
            description.contains("$labels.instance")
                || section_text.contains("cluster=\"<cluster>\""),
            "{name}: the description does not name the VM, nor its runbook section list them"
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
            .starts_with("min by (cluster, vm_scale_set_name)"),
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

// The tests that run an external tool, compiled with the feature `external-tools`.
#[cfg(feature = "external-tools")]
mod tools;
