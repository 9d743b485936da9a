//! The shipped rules within the limits of every store they name: Azure Monitor managed
//! Prometheus (Microsoft.AlertsManagement/prometheusRuleGroups: at most 20 rules a group, an
//! interval of 1 to 15 minutes, annotations of at most 1,024 characters, only `$labels` and
//! `$value` in annotations), Grafana Mimir's and Amazon Managed Prometheus' default of 20 rules a
//! group, and templates that render on every engine, vmalert included, whatever labels a series
//! lacks. The rule files are read as shipped: no external tool is needed.

use crate::ops;

use std::path::Path;

use ops::Error;
use serde_json::Value;

type TestResult = Result<(), Error>;

const MAX_RULES_PER_GROUP: usize = 20;
const MAX_LABELS_PER_RULE: usize = 10;
const MAX_ANNOTATION_CHARS: usize = 1024;

/// Rule groups as `(group name, rules)`, each rule as JSON.
type Groups = Vec<(String, Vec<Value>)>;
/// Each group's name and evaluation interval (ISO 8601).
type Intervals = Vec<(String, String)>;

/// The Prometheus rule files we ship: alerts/ and the Helm chart's two copies.
fn prometheus_rule_files() -> Result<Vec<std::path::PathBuf>, Error> {
    let mut files = ops::rule_files()?;
    for name in [
        "prometheus-rules.yml",
        "prometheus-rules-single-cluster.yml",
    ] {
        files.push(
            ops::repo()
                .join("deploy/helm/azure-scheduled-events-exporter/files")
                .join(name),
        );
    }
    Ok(files)
}

/// Every limit one rule group breaks, as sentences naming the group, the rule and the file.
/// `groups` are `(group name, rules)`, each rule as JSON with `alert` or `record`, `labels` and
/// `annotations`; `azure` adds Azure Monitor's rule that annotations run no query.
fn broken_limits(file: &str, groups: &[(String, Vec<Value>)], azure: bool) -> Vec<String> {
    let mut broken = Vec::new();
    for (group, rules) in groups {
        if rules.len() > MAX_RULES_PER_GROUP || rules.is_empty() {
            broken.push(format!(
                "{file}: group {group} has {} rules (1 to {MAX_RULES_PER_GROUP} allowed)",
                rules.len()
            ));
        }
        for rule in rules {
            let name = rule["alert"]
                .as_str()
                .or_else(|| rule["record"].as_str())
                .unwrap_or("a rule without a name");
            let labels = rule["labels"].as_object().map_or(0, |l| l.len());
            if labels > MAX_LABELS_PER_RULE {
                broken.push(format!(
                    "{file}: {group}/{name} has {labels} labels (at most {MAX_LABELS_PER_RULE})"
                ));
            }
            for (key, text) in rule["annotations"].as_object().into_iter().flatten() {
                let text = text.as_str().unwrap_or_default();
                let chars = text.chars().count();
                if chars > MAX_ANNOTATION_CHARS {
                    broken.push(format!(
                        "{file}: {group}/{name}'s {key} is {chars} characters (at most {MAX_ANNOTATION_CHARS})"
                    ));
                }
                if azure && runs_a_query(text) {
                    broken.push(format!(
                        "{file}: {group}/{name}'s {key} runs a query, which Azure Monitor does not: {text}"
                    ));
                }
                if let Some(why) = fails_on_a_missing_label(text) {
                    broken.push(format!("{file}: {group}/{name}'s {key} {why}: {text}"));
                }
            }
        }
    }
    broken
}

/// Whether a template calls the `query` function.
fn runs_a_query(template: &str) -> bool {
    actions(template).any(|action| {
        action
            .split(|c: char| c.is_whitespace() || c == '(' || c == '|')
            .any(|word| word == "query")
    })
}

/// Why a template fails to render on vmalert when a label it names is missing (nil there): a
/// label passed to printf (`printf "%q" $labels.cluster` renders `%!q(<nil>)`, and a query built
/// from it fails, which drops the alert) or compared with `eq`, `ne`, `lt`... (a nil is no
/// comparable type). `with` and `if` on a label are safe.
fn fails_on_a_missing_label(template: &str) -> Option<&'static str> {
    for action in actions(template) {
        let words: Vec<&str> = action
            .split(|c: char| c.is_whitespace() || c == '(' || c == ')')
            .filter(|w| !w.is_empty())
            .collect();
        let uses_label = |from: usize| words[from..].iter().any(|w| w.starts_with("$labels."));
        for (i, word) in words.iter().enumerate() {
            if *word == "printf" && uses_label(i + 1) {
                return Some("passes a label to printf");
            }
            if ["eq", "ne", "lt", "le", "gt", "ge"].contains(word) && uses_label(i + 1) {
                return Some("compares a label that may be missing");
            }
        }
    }
    None
}

/// The actions (`{{ ... }}`) of a template, without their braces.
fn actions(template: &str) -> impl Iterator<Item = &str> {
    template
        .split("{{")
        .skip(1)
        .filter_map(|part| part.split_once("}}").map(|(action, _)| action))
}

/// A Prometheus rule file's groups.
fn prometheus_groups(path: &Path) -> Result<Groups, Error> {
    let doc = ops::yaml(path)?;
    Ok(doc["groups"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|g| {
            (
                g["name"].as_str().unwrap_or_default().to_owned(),
                g["rules"].as_array().cloned().unwrap_or_default(),
            )
        })
        .collect())
}

/// The ARM template's rule groups, and the intervals it gives them (parameters resolved to their
/// defaults).
fn arm_groups() -> Result<(Groups, Intervals), Error> {
    let path = ops::repo().join("deploy/azure-monitor/prometheus-rule-groups.json");
    let arm: Value = serde_json::from_str(&std::fs::read_to_string(&path)?)?;
    let mut groups = Vec::new();
    let mut intervals = Vec::new();
    for resource in arm["resources"].as_array().into_iter().flatten() {
        let name = resource["name"].as_str().unwrap_or_default().to_owned();
        let properties = &resource["properties"];
        let interval = properties["interval"].as_str().unwrap_or_default();
        let interval = match interval.strip_prefix("[parameters('") {
            Some(parameter) => {
                let parameter = parameter.trim_end_matches("')]");
                arm["parameters"][parameter]["defaultValue"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned()
            }
            None => interval.to_owned(),
        };
        intervals.push((name.clone(), interval));
        groups.push((
            name,
            properties["rules"].as_array().cloned().unwrap_or_default(),
        ));
    }
    Ok((groups, intervals))
}

/// A Bicep string literal's value (the escapes the mixin's renderer writes).
fn bicep_string(literal: &str) -> String {
    let mut out = String::new();
    let mut chars = literal.chars();
    while let Some(c) = chars.next() {
        if c == '\\' {
            match chars.next() {
                Some('n') => out.push('\n'),
                Some('r') => out.push('\r'),
                Some('t') => out.push('\t'),
                Some(other) => out.push(other),
                None => {}
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// The Bicep file's rule groups, read line by line as the renderer writes them: one `resource` a
/// group, one `{` a rule at the rules' indentation, its labels and annotations one a line.
fn bicep_groups() -> Result<(Groups, Intervals), Error> {
    let path = ops::repo().join("deploy/azure-monitor/prometheus-rule-groups.bicep");
    let text = std::fs::read_to_string(&path)?;
    let default_interval = text
        .lines()
        .find_map(|l| l.strip_prefix("param interval string = "))
        .map(|l| bicep_string(l.trim_matches('\'')))
        .ok_or("the Bicep file has no interval parameter with a default")?;
    let mut groups: Vec<(String, Vec<Value>)> = Vec::new();
    let mut intervals = Vec::new();
    let mut section = "";
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("resource ") {
            groups.push((
                rest.split(' ').next().unwrap_or_default().to_owned(),
                Vec::new(),
            ));
            continue;
        }
        let Some((name, rules)) = groups.last_mut() else {
            continue;
        };
        let trimmed = line.trim_start();
        let indent = line.len() - trimmed.len();
        if let (4, Some(value)) = (indent, trimmed.strip_prefix("interval: ")) {
            let value = if value == "interval" {
                default_interval.clone()
            } else {
                bicep_string(value.trim_matches('\''))
            };
            intervals.push((name.clone(), value));
        }
        if indent == 6 && trimmed == "{" {
            rules.push(serde_json::json!({}));
            continue;
        }
        let Some(rule) = rules.last_mut() else {
            continue;
        };
        if indent == 8 {
            section = match trimmed {
                "labels: {" => "labels",
                "annotations: {" => "annotations",
                _ => "",
            };
            if let Some((key @ ("alert" | "record"), value)) = trimmed.split_once(": ") {
                rule[key] = Value::String(bicep_string(value.trim_matches('\'')));
            }
        } else if let (10, false, Some((key, value))) =
            (indent, section.is_empty(), trimmed.split_once(": "))
        {
            let key = bicep_string(key.trim_matches('\''));
            rule[section][key] = Value::String(bicep_string(value.trim_matches('\'')));
        }
    }
    Ok((groups, intervals))
}

/// An ISO 8601 duration of whole minutes ('PT5M', 'PT1H'), in minutes.
fn iso_minutes(duration: &str) -> Option<u64> {
    let time = duration.strip_prefix("PT")?;
    let mut minutes = 0;
    let mut number = String::new();
    for c in time.chars() {
        match c {
            '0'..='9' => number.push(c),
            'H' => minutes += number.parse::<u64>().ok()? * 60,
            'M' => minutes += number.parse::<u64>().ok()?,
            _ => return None,
        }
        if !c.is_ascii_digit() {
            number.clear();
        }
    }
    number.is_empty().then_some(minutes)
}

#[test]
fn every_prometheus_rule_group_fits_mimir_and_amazon_managed_prometheus() -> TestResult {
    let mut broken = Vec::new();
    for path in prometheus_rule_files()? {
        let groups = prometheus_groups(&path)?;
        assert!(!groups.is_empty(), "{} has no rule groups", path.display());
        broken.extend(broken_limits(&ops::file_name(&path), &groups, false));
    }
    assert!(broken.is_empty(), "{}", broken.join("\n"));
    Ok(())
}

#[test]
fn every_azure_monitor_rule_group_fits_microsofts_limits_in_arm_and_bicep() -> TestResult {
    let (arm, arm_intervals) = arm_groups()?;
    let (bicep, bicep_intervals) = bicep_groups()?;
    assert!(!arm.is_empty(), "the ARM template has no rule groups");
    // The Bicep file is read by lines: the same groups and rules as the ARM template, or the
    // reading is wrong.
    let shape =
        |groups: &[(String, Vec<Value>)]| groups.iter().map(|(_, r)| r.len()).collect::<Vec<_>>();
    assert_eq!(shape(&arm), shape(&bicep), "rules per group, ARM and Bicep");
    let mut broken = broken_limits("prometheus-rule-groups.json", &arm, true);
    broken.extend(broken_limits("prometheus-rule-groups.bicep", &bicep, true));
    assert_eq!(
        arm_intervals.len(),
        arm.len(),
        "every ARM group has an interval"
    );
    assert_eq!(
        bicep_intervals.len(),
        bicep.len(),
        "every Bicep group has an interval"
    );
    for (group, interval) in arm_intervals.iter().chain(&bicep_intervals) {
        match iso_minutes(interval) {
            Some(1..=15) => {}
            _ => broken.push(format!(
                "group {group} is evaluated every {interval} (PT1M to PT15M allowed)"
            )),
        }
    }
    assert!(broken.is_empty(), "{}", broken.join("\n"));
    Ok(())
}

#[test]
fn the_limit_checks_catch_what_they_are_for() {
    let rule = |annotation: &str, labels: usize| {
        serde_json::json!({
            "alert": "A",
            "labels": (0..labels).map(|i| (format!("l{i}"), Value::from("x"))).collect::<serde_json::Map<_, _>>(),
            "annotations": { "description": annotation },
        })
    };
    let group = |rules: Vec<Value>| vec![("g".to_owned(), rules)];
    assert!(broken_limits("f", &group(vec![rule("fine {{ $value }}", 1)]), true).is_empty());
    assert_eq!(
        broken_limits("f", &group(vec![rule("x", 1); 21]), false).len(),
        1
    );
    assert_eq!(
        broken_limits("f", &group(vec![rule("x", 11)]), false).len(),
        1
    );
    assert_eq!(
        broken_limits("f", &group(vec![rule(&"x".repeat(1025), 1)]), false).len(),
        1
    );
    let queried = r#"{{ with query "time()" }}{{ . | first | value }}{{ end }}"#;
    assert!(broken_limits("f", &group(vec![rule(queried, 1)]), false).is_empty());
    assert_eq!(
        broken_limits("f", &group(vec![rule(queried, 1)]), true).len(),
        1
    );
    let piped = r#"{{ range "up" | query }}{{ end }}"#;
    assert_eq!(
        broken_limits("f", &group(vec![rule(piped, 1)]), true).len(),
        1
    );
    let quoted = r#"{{ with printf "up{cluster=%q}" $labels.cluster | query }}{{ end }}"#;
    assert_eq!(
        broken_limits("f", &group(vec![rule(quoted, 1)]), false).len(),
        1
    );
    let compared = r#"{{ if eq $labels.event_source "User" }}u{{ end }}"#;
    assert_eq!(
        broken_limits("f", &group(vec![rule(compared, 1)]), false).len(),
        1
    );
    let guarded = r#"{{ with $labels.event_source }}{{ if eq . "User" }}u{{ end }}{{ end }}"#;
    assert!(broken_limits("f", &group(vec![rule(guarded, 1)]), false).is_empty());
    assert_eq!(iso_minutes("PT15M"), Some(15));
    assert_eq!(iso_minutes("PT1H"), Some(60));
    assert_eq!(iso_minutes("PT30S"), None);
}
