//! The Grafana dashboards as Grafana and the agent see them: Grafana's own schema, what import
//! and provisioning need, and no metric the agent does not export.

use crate::ops;

use ops::Error;
use serde_json::Value;
use std::collections::BTreeSet;

// What the agent exports with every optional output: the Kubernetes output is in the image's build
// (the cargo feature `kubernetes`) only.
#[cfg(feature = "kubernetes")]
use {
    crate::common::{Agent, Imds, TempDir},
    azure_scheduled_events_simulator::{Fault, InitialStatus, Scenario, ScenarioEvent},
};

type TestResult = Result<(), Error>;

/// The uids users link to and provisioning keys on: changing one breaks bookmarks.
const UIDS: [&str; 3] = [
    "azure-sched-events-agent",
    "azure-sched-events-event",
    "azure-sched-events-fleet",
];

/// Every object in `json`, depth first.
fn objects(json: &Value) -> Vec<&serde_json::Map<String, Value>> {
    let mut found = Vec::new();
    let mut stack = vec![json];
    while let Some(value) = stack.pop() {
        match value {
            Value::Object(map) => {
                found.push(map);
                stack.extend(map.values());
            }
            Value::Array(items) => stack.extend(items),
            _ => {}
        }
    }
    found
}

fn variable<'a>(json: &'a Value, name: &str) -> Option<&'a Value> {
    json["templating"]["list"]
        .as_array()?
        .iter()
        .find(|v| v["name"] == name)
}

#[test]
fn dashboards_import_anywhere_with_stable_uids_and_datasource_variables() -> TestResult {
    let mut uids = BTreeSet::new();
    for (name, json) in ops::dashboards()? {
        assert!(json["id"].is_null(), "{name}: id must be null for import");
        assert!(
            json.get("__inputs").is_none(),
            "{name}: __inputs breaks file provisioning"
        );
        let uid = json["uid"].as_str().unwrap_or_default().to_owned();
        assert!(uids.insert(uid.clone()), "{name}: uid {uid} used twice");

        let prometheus = variable(&json, "datasource").ok_or(format!("{name}: no $datasource"))?;
        assert_eq!(prometheus["type"], "datasource", "{name}");
        assert_eq!(prometheus["query"], "prometheus", "{name}");
        let tempo = variable(&json, "tempo").ok_or(format!("{name}: no $tempo"))?;
        assert_eq!(tempo["type"], "datasource", "{name}");
        assert_eq!(tempo["query"], "tempo", "{name}");
        for filter in [
            "cluster",
            "location",
            "scale_set",
            "zone",
            "job",
            "instance",
        ] {
            let var = variable(&json, filter).ok_or(format!("{name}: no ${filter}"))?;
            assert_eq!(var["type"], "query", "{name} ${filter}");
            assert_eq!(
                var["includeAll"], true,
                "{name} ${filter}: All must be offered"
            );
        }

        // No datasource uid of anyone's Grafana: only the variables.
        for object in objects(&json) {
            if let Some(datasource) = object.get("datasource") {
                let uid = datasource["uid"].as_str().or(datasource.as_str());
                assert!(
                    matches!(uid, Some("${datasource}" | "${tempo}")),
                    "{name}: hard-coded datasource {datasource}"
                );
            }
        }

        // Every target and annotation uses every filter: cluster, location, scale set and zone
        // (through the recorded vm_info), and job and instance wherever it reads the agent's
        // own series (the recorded counts per scale set have no target).
        for query in ops::queries(&name, &json) {
            if query.variable {
                continue;
            }
            let per_target = !ops::metric_names(&query.expr).is_empty();
            for filter in [
                "cluster=~\"$cluster\"",
                "location=~\"$location\"",
                "vm_scale_set_name=~\"$scale_set\"",
                "zone=~\"$zone\"",
            ]
            .into_iter()
            .chain(
                per_target
                    .then_some(["job=~\"$job\"", "instance=~\"$instance\""])
                    .into_iter()
                    .flatten(),
            ) {
                assert!(
                    query.expr.contains(filter),
                    "{name} {}: not filtered by {filter}: {}",
                    query.place,
                    query.expr
                );
            }
            // At fleet size: no range function over an hour of every agent's vm_info at each
            // step (the recorded last known vm_info replaces it), and per-agent lines only for
            // the worst few.
            assert!(
                !query.expr.contains("azure_scheduled_events_vm_info{")
                    || !query.expr.contains("[1h]"),
                "{name} {}: reads an hour of vm_info: {}",
                query.place,
                query.expr
            );
        }
        assert_eq!(
            json["refresh"], "1m",
            "{name}: refresh more often than the rules evaluate"
        );
        let annotations = json["annotations"]["list"]
            .as_array()
            .ok_or(format!("{name}: no annotations"))?;
        // Transitions as annotations, from the per-event series (they exist only where there
        // are events) rather than a counter of every agent.
        assert!(
            annotations.iter().any(|a| a["target"]["expr"]
                .as_str()
                .is_some_and(|e| e.contains("azure_scheduled_events_event_info{")
                    && e.contains(" offset ")
                    && !e.contains("transitions_total"))),
            "{name}: transitions are not annotations"
        );

        // Panels are listed in reading order (top to bottom, left to right), ids unique.
        let panels = json["panels"]
            .as_array()
            .ok_or(format!("{name}: no panels"))?;
        let positions: Vec<(i64, i64)> = panels
            .iter()
            .map(|p| {
                (
                    p["gridPos"]["y"].as_i64().unwrap_or(-1),
                    p["gridPos"]["x"].as_i64().unwrap_or(-1),
                )
            })
            .collect();
        let mut sorted = positions.clone();
        sorted.sort();
        assert_eq!(positions, sorted, "{name}: panels out of reading order");
        let ids: BTreeSet<i64> = panels.iter().filter_map(|p| p["id"].as_i64()).collect();
        assert_eq!(
            ids.len(),
            panels.len(),
            "{name}: panel ids missing or repeated"
        );
    }
    assert_eq!(
        uids,
        UIDS.map(String::from).into(),
        "dashboard uids changed"
    );
    let docs = std::fs::read_to_string(ops::repo().join("docs/dashboards.md"))?;
    for uid in UIDS {
        assert!(docs.contains(uid), "docs/dashboards.md does not name {uid}");
    }
    Ok(())
}

#[test]
fn the_event_dashboard_picks_event_ids_from_the_metrics_and_links_each_to_its_trace() -> TestResult
{
    let dashboards = ops::dashboards()?;
    let (_, event) = dashboards
        .iter()
        .find(|(_, d)| d["uid"] == "azure-sched-events-event")
        .ok_or("no event dashboard")?;
    // Picked from the metrics, or pasted: tests/suite/prometheus.rs checks that $event_id finds the
    // exported EventId for any case, with or without dashes.
    let pick = variable(event, "event").ok_or("no $event")?;
    assert_eq!(
        pick["query"],
        "label_values(azure_scheduled_events_event_info{cluster=~\"$cluster\", job=~\"$job\", instance=~\"$instance\"}, event_id)"
    );
    assert_eq!(
        pick["allowCustomValue"], true,
        "an EventId cannot be pasted"
    );
    let event_id = variable(event, "event_id").ok_or("no $event_id")?;
    assert_eq!(event_id["hide"], 2, "$event_id is derived, not picked");
    assert!(
        event_id["query"]
            .as_str()
            .is_some_and(|q| q.contains("(?i)$event") && q.contains("[$__range]")),
        "$event_id does not match $event case-insensitively over the time range: {event_id}"
    );
    // The fleet's event tables link each EventId to this dashboard.
    let (_, fleet) = dashboards
        .iter()
        .find(|(_, d)| d["uid"] == "azure-sched-events-fleet")
        .ok_or("no fleet dashboard")?;
    let fleet_text = serde_json::to_string(fleet)?;
    assert!(
        fleet_text.contains("/d/azure-sched-events-event?var-event=${__data.fields.event_id}"),
        "the fleet dashboard does not link events to the event dashboard"
    );
    assert!(
        fleet_text.contains("${__data.fields.trace_id}"),
        "the fleet dashboard does not link events to their traces"
    );
    let text = serde_json::to_string(event)?;
    // Table rows link to Tempo's Explore with the row's trace id; the dashboard links the
    // selected event's. tests/suite/prometheus.rs checks that trace_id is the EventId without dashes.
    assert!(
        text.contains("${__data.fields.trace_id}"),
        "no per-row trace link"
    );
    assert!(text.contains("${trace_id}"), "no dashboard trace link");
    assert!(
        text.contains("%22uid%22%3A%22${tempo}%22"),
        "trace links do not use $tempo"
    );
    // Each Explore link decodes to a pane that queries ${tempo} for the trace id.
    let mut links = 0;
    for object in objects(event) {
        let Some(url) = object.get("url").and_then(Value::as_str) else {
            continue;
        };
        let Some(panes) = url.strip_prefix("/explore?schemaVersion=1&panes=") else {
            continue;
        };
        let decoded = percent_encoding::percent_decode_str(panes).decode_utf8()?;
        let pane: Value = serde_json::from_str(&decoded)?;
        let query = &pane["trace"]["queries"][0];
        assert_eq!(pane["trace"]["datasource"], "${tempo}", "{decoded}");
        assert_eq!(query["datasource"]["type"], "tempo", "{decoded}");
        assert!(
            matches!(
                query["query"].as_str(),
                Some("${trace_id}" | "${__data.fields.trace_id}")
            ),
            "{decoded}"
        );
        links += 1;
    }
    assert!(links >= 2, "only {links} trace links");
    let trace = variable(event, "trace_id").ok_or("no $trace_id")?;
    assert!(
        trace["query"]
            .as_str()
            .is_some_and(|q| q.contains("\"trace_id\", \"$1$2$3$4$5\", \"event_id\"")),
        "$trace_id does not strip the dashes: {trace}"
    );
    Ok(())
}

/// What a rule or dashboard may name: every family in a live exposition of an agent that has
/// events (so the per-event families exist), has read instance metadata (`vm_info`), and runs
/// every optional feature (approval in dry run, a hook, traces, a notification receiver, the
/// Kubernetes output), whose families exist only then, and has seen an IMDS failure and an
/// advisory (their series appear with the first).
#[cfg(feature = "kubernetes")]
async fn exported() -> Result<BTreeSet<String>, Error> {
    let dir = TempDir::new("exported")?;
    let kubeconfig = ops::down_kubeconfig(&dir.0)?;
    let imds = Imds::start().await?;
    imds.sim.inject_fault(Fault::status(503).times(1));
    // The fleet, and an advisory for this VM: advisories are counted only while one is present.
    let mut fleet = Scenario::from_file(&ops::repo().join("scenarios/fleet.yaml"))?;
    let mut advisory = ScenarioEvent::new("Freeze", &["web_0"]);
    advisory.status = InitialStatus::Advisory;
    fleet.events.push(advisory);
    imds.sim.load_scenario(fleet);
    let agent = Agent::start_traced(
        &imds,
        &[
            "--vm.name=web_0",
            "--state.file=",
            "--approve.dry-run",
            "--approve.prepare-hook=true",
            // Nothing listens there: the export counters exist all the same.
            "--otlp.endpoint=http://127.0.0.1:9",
            &format!("--notify.webhook-url={}/", ops::DOWN),
            "--kubernetes.node-name=aks-pool-12345678-vmss000000",
            &format!("--kubernetes.kubeconfig={}", kubeconfig.display()),
        ],
        &[],
    )
    .await?;
    let exposition = agent
        .wait_for("per-event series and vm_info", |e| {
            e.has("azure_scheduled_events_vm_info{")
                && e.has("azure_scheduled_events_imds_request_failures_total{")
                && e.has("azure_scheduled_events_advisories{")
                && e.has("azure_scheduled_events_event_not_before_timestamp_seconds{")
                && e.has("azure_scheduled_events_event_duration_seconds{")
        })
        .await?;
    agent.stop().await?;
    Ok(ops::exported_names(&exposition.0))
}

#[cfg(feature = "kubernetes")]
#[tokio::test]
async fn every_metric_a_dashboard_or_rule_names_is_one_the_agent_exports() -> TestResult {
    let exported = exported().await?;
    assert!(
        exported.contains("azure_scheduled_events_imds_request_duration_seconds_bucket"),
        "histogram series missing from {exported:?}"
    );
    let mut sources: Vec<(String, String)> = Vec::new();
    for path in ops::files("dashboards", ".json")?
        .into_iter()
        .chain(ops::files("alerts", ".yml")?)
    {
        sources.push((ops::file_name(&path), std::fs::read_to_string(&path)?));
    }
    let mut named = BTreeSet::new();
    let mut unknown = Vec::new();
    for (file, text) in &sources {
        for name in ops::metric_names(text) {
            if !exported.contains(&name) {
                unknown.push(format!("{file}: {name}"));
            }
            named.insert(name);
        }
    }
    assert!(
        unknown.is_empty(),
        "names the agent does not export:\n{}\nexported: {exported:?}",
        unknown.join("\n")
    );
    assert!(named.len() >= 12, "too few metric names found: {named:?}");
    Ok(())
}

#[test]
fn the_metric_name_scan_finds_misspelled_and_suffixed_names() {
    let names = ops::metric_names(
        r#"rate(azure_scheduled_events_imds_request_duration_seconds_bucket{job="x"}[5m]) / azure_scheduled_events_upp and xazure_scheduled_events_up"#,
    );
    assert_eq!(
        names,
        BTreeSet::from([
            "azure_scheduled_events_imds_request_duration_seconds_bucket".to_owned(),
            "azure_scheduled_events_upp".to_owned(),
        ])
    );
    let exported = ops::exported_names(
        "# TYPE azure_scheduled_events_up gauge\n# TYPE azure_scheduled_events_d histogram\n",
    );
    assert!(exported.contains("azure_scheduled_events_d_count"));
    assert!(!exported.contains("azure_scheduled_events_upp"));
}

#[test]
fn fleet_panels_count_vms_by_id_and_per_agent_lines_are_the_worst_few() -> TestResult {
    let mut checked = 0;
    for (name, json) in ops::dashboards()? {
        for panel in json["panels"].as_array().into_iter().flatten() {
            if !matches!(
                panel["type"].as_str(),
                Some("timeseries" | "state-timeline")
            ) {
                continue;
            }
            for target in panel["targets"].as_array().into_iter().flatten() {
                let expr = target["expr"].as_str().unwrap_or_default().trim_start();
                // One line per agent of a 10,000-VM fleet is no graph: aggregate, keep the worst
                // few, read recorded series (per cluster or scale set), or show one event's VMs.
                let bounded = ["count", "sum", "topk", "histogram_quantile", "max", "min"]
                    .iter()
                    .any(|f| expr.starts_with(f))
                    || ops::metric_names(expr).is_empty()
                    || expr.contains("event_id=\"$event_id\"");
                assert!(
                    bounded,
                    "{name} panel {:?}: one series per agent: {expr}",
                    panel["title"]
                );
                checked += 1;
            }
        }
    }
    assert!(checked >= 20, "only {checked} timeseries targets");
    // VMs are counted by their id: an agent scraped by two jobs is one VM.
    let dashboards = ops::dashboards()?;
    let (_, fleet) = dashboards
        .iter()
        .find(|(_, d)| d["uid"] == "azure-sched-events-fleet")
        .ok_or("no fleet dashboard")?;
    for query in ops::queries("fleet-overview.json", fleet) {
        if query.place.starts_with("panel \"VMs ") && query.place.contains("target A") {
            assert!(
                query.expr.contains("count by (cluster, vm_id"),
                "{}: not counted by vm_id: {}",
                query.place,
                query.expr
            );
        }
    }
    Ok(())
}

/// The panel at the top of each dashboard that says whether the recording rules are loaded.
const RULES_PANEL: &str = "Recording rules (alerts/azure-scheduled-events.yml)";

#[test]
fn every_dashboard_starts_by_saying_whether_the_recording_rules_are_loaded() -> TestResult {
    let docs = std::fs::read_to_string(ops::repo().join("docs/dashboards.md"))?;
    assert!(
        docs.contains("\n## Load the recording rules\n"),
        "docs/dashboards.md has no section for the panel's link"
    );
    let mut exprs = BTreeSet::new();
    for (name, json) in ops::dashboards()? {
        let first = &json["panels"][0];
        assert_eq!(first["title"], RULES_PANEL, "{name}: not the first panel");
        assert_eq!(first["type"], "stat", "{name}");
        assert_eq!(
            first["gridPos"]["w"], 24,
            "{name}: not the dashboard's width"
        );
        let expr = first["targets"][0]["expr"].as_str().unwrap_or_default();
        for series in [
            "azure_scheduled_events_build_info{",
            "azure_scheduled_events_vm_info{",
            "azure_scheduled_events:target_place:info{",
        ] {
            assert!(
                expr.contains(series),
                "{name}: does not read {series}: {expr}"
            );
        }
        exprs.insert(expr.to_owned());
        let defaults = &first["fieldConfig"]["defaults"];
        let mapped = &defaults["mappings"][0]["options"];
        assert_eq!(mapped["0"]["text"], "Loaded", "{name}");
        assert!(
            mapped["1"]["text"]
                .as_str()
                .is_some_and(|t| t.starts_with("Not loaded")),
            "{name}: {mapped}"
        );
        assert!(
            defaults["noValue"]
                .as_str()
                .is_some_and(|t| t.contains("agent")),
            "{name}: without agents it must not say the rules are missing"
        );
        for link in [&defaults["links"][0], &first["links"][0]] {
            assert!(
                link["url"]
                    .as_str()
                    .is_some_and(|u| u.ends_with("docs/dashboards.md#load-the-recording-rules")),
                "{name}: {link}"
            );
        }
    }
    assert_eq!(exprs.len(), 1, "the dashboards ask differently: {exprs:?}");
    Ok(())
}

// The tests that run an external tool, compiled with the feature `external-tools`.
#[cfg(feature = "external-tools")]
mod tools;
