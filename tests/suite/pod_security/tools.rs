//! The tests of this module that render the chart with helm.

use super::*;

use std::collections::BTreeMap;

use serde_json::json;

/// The name Pod Security admission's namespace label uses.
pub fn label(level: Option<Level>) -> &'static str {
    match level {
        Some(Level::Restricted) => "restricted",
        Some(Level::Baseline) => "baseline",
        None => "privileged",
    }
}

/// The pods among rendered objects: each workload's pod template and each bare Pod (the `helm test`
/// hook), as (spec, annotations).
pub fn pods(objects: &[Value]) -> Vec<(String, Value, Value)> {
    objects
        .iter()
        .filter_map(|o| {
            let name = format!(
                "{} {}",
                o["kind"].as_str()?,
                o["metadata"]["name"].as_str().unwrap_or("?")
            );
            match o["kind"].as_str()? {
                "Pod" => Some((
                    name,
                    o["spec"].clone(),
                    o["metadata"]["annotations"].clone(),
                )),
                "DaemonSet" | "Deployment" | "StatefulSet" | "Job" => Some((
                    name,
                    o["spec"]["template"]["spec"].clone(),
                    o["spec"]["template"]["metadata"]["annotations"].clone(),
                )),
                _ => None,
            }
        })
        .collect()
}

const CHART: &str = "deploy/helm/azure-scheduled-events-exporter";

fn render(extra: &[&str]) -> Result<Vec<Value>, Error> {
    let mut args = vec![
        "azure-scheduled-events-exporter",
        CHART,
        "--namespace",
        "azure-scheduled-events",
        "--set",
        "namespace.create=true",
    ];
    args.extend_from_slice(extra);
    ops::helm_template(&args)
}

/// The strictest level admitting every pod the chart renders with `set` (the `helm test` pod
/// included), with what the stricter levels refuse; and the level the chart's Namespace enforces.
fn level_of(set: &[&str]) -> Result<(Option<Level>, Vec<String>, String), Error> {
    let objects = render(set)?;
    let pods: Vec<(String, Value, Value)> = pods(&objects);
    assert!(
        pods.iter()
            .any(|(name, _, _)| name.starts_with("DaemonSet")),
        "{set:?}: no DaemonSet"
    );
    let specs: Vec<(Value, Value)> = pods
        .iter()
        .map(|(_, s, a)| (s.clone(), a.clone()))
        .collect();
    let level = strictest(&specs);
    let mut refused = Vec::new();
    for (name, spec, annotations) in &pods {
        for v in violations(spec, annotations, Level::Restricted) {
            refused.push(format!("{name}: {v}"));
        }
    }
    let namespace = ops::of_kind(&objects, "Namespace")
        .first()
        .and_then(|n| n["metadata"]["labels"]["pod-security.kubernetes.io/enforce"].as_str())
        .ok_or("no Namespace with an enforce label")?
        .to_owned();
    Ok((level, refused, namespace))
}

/// The chart's README table "Pod Security": each row's values (`--set` syntax, in backticks) and the
/// level the README says they need.
fn documented_levels() -> Result<Vec<(String, String)>, Error> {
    let readme = std::fs::read_to_string(ops::repo().join(CHART).join("README.md"))?;
    let section = readme
        .split("\n## Pod Security")
        .nth(1)
        .ok_or("the chart's README has no section Pod Security")?;
    let section = section.split("\n## ").next().unwrap_or_default();
    let mut rows = Vec::new();
    for line in section.lines().filter(|l| l.starts_with('|')) {
        let cells: Vec<&str> = line.split('|').map(str::trim).collect();
        let (Some(values), Some(level)) = (cells.get(1), cells.get(2)) else {
            continue;
        };
        if values.starts_with("---") || *values == "values" {
            continue;
        }
        let values = values.trim_matches('`').to_owned();
        let level = level.trim_matches('`').trim_matches('*').to_owned();
        rows.push((values, level));
    }
    Ok(rows)
}

/// The defaults, AKS's default network (pods reach IMDS), meet `restricted` (hence `baseline`): no
/// host network, no hostPath, no root init container, no capability; each setting that asks for host
/// access needs exactly the level the chart's README gives it, refused at `baseline` for the field the
/// README names, and the chart's own Namespace enforces that level.
#[test]
fn each_way_of_running_the_chart_needs_the_pod_security_level_its_readme_gives() -> TestResult {
    let rows = documented_levels()?;
    let documented: BTreeMap<&str, &str> =
        rows.iter().map(|(v, l)| (v.as_str(), l.as_str())).collect();
    for needed in [
        "(defaults)",
        "hostNetwork=true",
        "state.persistent=true",
        "windows.enabled=true",
    ] {
        assert!(
            documented.contains_key(needed),
            "the README's Pod Security table has no row {needed}: {rows:?}"
        );
    }
    for (values, documented_level) in &rows {
        let set: Vec<&str> = if values == "(defaults)" {
            vec![]
        } else {
            vec!["--set", values.as_str()]
        };
        let (level, refused, namespace) = level_of(&set)?;
        assert_eq!(
            label(level),
            documented_level,
            "{values}: the pods need {} (restricted refuses {refused:?}), the README says {documented_level}",
            label(level)
        );
        assert_eq!(
            &namespace, documented_level,
            "{values}: the chart's Namespace enforces {namespace}"
        );
    }
    // What each setting is refused for at baseline.
    for (set, field) in [
        ("hostNetwork=true", "spec.hostNetwork"),
        ("state.persistent=true", "hostPath"),
        ("windows.enabled=true", "hostProcess"),
    ] {
        let objects = render(&["--set", set])?;
        let refused: Vec<String> = pods(&objects)
            .iter()
            .flat_map(|(name, spec, annotations)| {
                violations(spec, annotations, Level::Baseline)
                    .into_iter()
                    .map(move |v| format!("{name}: {v}"))
            })
            .collect();
        assert!(
            refused.iter().any(|v| v.contains(field)),
            "{set}: baseline does not refuse {field}: {refused:?}"
        );
    }
    // The defaults: the pod's network, the emptyDir, no init container, and the test pod alike.
    let objects = render(&[])?;
    let ds = ops::of_kind(&objects, "DaemonSet");
    let pod = &ds.first().ok_or("no DaemonSet")?["spec"]["template"]["spec"];
    assert_eq!(pod["hostNetwork"], false);
    assert!(pod.get("initContainers").is_none(), "{pod}");
    assert_eq!(
        pod["volumes"][0],
        json!({"name": "state", "emptyDir": {"sizeLimit": "16Mi"}})
    );
    for (name, spec, annotations) in pods(&objects) {
        assert_eq!(
            violations(&spec, &annotations, Level::Restricted),
            Vec::<String>::new(),
            "{name} at restricted"
        );
    }
    Ok(())
}
