//! The chart's side of the Kubernetes output: the pod rights come only with the drain, and the
//! optional ValidatingAdmissionPolicy lets the agent's service account write only its own Node.

use std::process::Command;

use serde_json::{Value, json};

use crate::common::TestResult;
use crate::ops;

const CHART: &str = "deploy/helm/azure-scheduled-events-exporter";
const NAMESPACE: &str = "azure-scheduled-events";

/// `helm template` of the chart with `--set values`, parsed.
fn render(values: &str) -> Result<Vec<Value>, ops::Error> {
    ops::helm_template(&[
        "azure-scheduled-events-exporter",
        CHART,
        "--namespace",
        NAMESPACE,
        "--set",
        values,
    ])
}

#[test]
fn pod_rights_come_only_with_the_drain() -> TestResult {
    let pods = |objects: &[Value]| -> Vec<Value> {
        ops::of_kind(objects, "ClusterRole")
            .iter()
            .flat_map(|role| role["rules"].as_array().cloned().unwrap_or_default())
            .filter(|rule| {
                rule["resources"].as_array().is_some_and(|r| {
                    r.iter()
                        .any(|r| r.as_str().is_some_and(|r| r.starts_with("pods")))
                })
            })
            .collect()
    };
    assert!(pods(&render("kubernetes.enabled=true")?).is_empty());
    let drain = render("kubernetes.enabled=true,kubernetes.drainEvents=Reboot\\,Preempt")?;
    assert_eq!(
        pods(&drain),
        [
            json!({"apiGroups": [""], "resources": ["pods"], "verbs": ["list"]}),
            json!({"apiGroups": [""], "resources": ["pods/eviction"], "verbs": ["create"]}),
        ]
    );
    let daemon_set = ops::of_kind(&drain, "DaemonSet");
    let env = daemon_set
        .first()
        .and_then(|d| d["spec"]["template"]["spec"]["containers"][0]["env"].as_array())
        .ok_or("no env")?;
    assert!(env.contains(&json!({
        "name": "AZURE_SCHEDULED_EVENTS_KUBERNETES_DRAIN_EVENTS", "value": "Reboot,Preempt"
    })));
    Ok(())
}

#[test]
fn the_own_node_policy_is_optional_and_binds_the_agents_account_to_its_node() -> TestResult {
    for values in [
        "kubernetes.enabled=true",
        "kubernetes.restrictToOwnNode=true",
    ] {
        let objects = render(values)?;
        assert!(
            ops::of_kind(&objects, "ValidatingAdmissionPolicy").is_empty(),
            "off by default, and nothing without the output: {values}"
        );
    }
    let objects = render("kubernetes.enabled=true,kubernetes.restrictToOwnNode=true")?;
    let [policy] = ops::of_kind(&objects, "ValidatingAdmissionPolicy")[..] else {
        return Err("one policy".into());
    };
    let [binding] = ops::of_kind(&objects, "ValidatingAdmissionPolicyBinding")[..] else {
        return Err("one binding".into());
    };
    let [account] = ops::of_kind(&objects, "ServiceAccount")[..] else {
        return Err("one service account".into());
    };
    assert_eq!(policy["apiVersion"], "admissionregistration.k8s.io/v1");
    assert_eq!(binding["spec"]["policyName"], policy["metadata"]["name"]);
    assert_eq!(binding["spec"]["validationActions"], json!(["Deny"]));
    assert_eq!(policy["spec"]["failurePolicy"], "Fail");
    assert_eq!(
        policy["spec"]["matchConstraints"]["resourceRules"],
        json!([{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["UPDATE"],
            "resources": ["nodes", "nodes/status"]}]),
        "every write of a Node or its status (a PATCH is admitted as an UPDATE)"
    );
    let condition = policy["spec"]["matchConditions"][0]["expression"]
        .as_str()
        .unwrap_or_default();
    let user = format!(
        "'system:serviceaccount:{NAMESPACE}:{}'",
        account["metadata"]["name"].as_str().unwrap_or_default()
    );
    assert!(condition.contains(&user), "{condition} names {user}");
    let rule = policy["spec"]["validations"][0]["expression"]
        .as_str()
        .unwrap_or_default();
    assert!(
        rule.contains("request.userInfo.extra['authentication.kubernetes.io/node-name']")
            && rule.contains("request.name"),
        "{rule}"
    );

    // Valid for the Kubernetes that has the API (1.30) and the newest kubernetes-validate knows.
    let dir = crate::common::TempDir::new("policy")?;
    let file = dir.path("policy.yaml");
    std::fs::write(
        &file,
        format!(
            "---\n{}---\n{}",
            serde_norway::to_string(policy)?,
            serde_norway::to_string(binding)?
        ),
    )?;
    for version in ["1.30.0", "1.33.0"] {
        let output = Command::new(ops::tool("kubernetes-validate"))
            .args(["--strict", "-k", version, &file.to_string_lossy()])
            .output()
            .map_err(|e| format!("kubernetes-validate is required (.ci/run installs it): {e}"))?;
        assert!(
            output.status.success(),
            "{version}: {}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
    }
    Ok(())
}

#[test]
fn the_drain_delay_pod_selector_unknown_time_and_aks_names_reach_the_agent() -> TestResult {
    let objects = ops::helm_template(&[
        "azure-scheduled-events-exporter",
        CHART,
        "--namespace",
        NAMESPACE,
        "--set",
        "kubernetes.enabled=true,kubernetes.drainEvents=Freeze\\,Reboot,kubernetes.drainDelay=1m,kubernetes.imdsUnknownAfter=30s,kubernetes.aksConditionNames=true",
        "--set-string",
        "kubernetes.drainPodSelector=Freeze:example.com/evict-on-freeze=true",
    ])?;
    let daemon_set = ops::of_kind(&objects, "DaemonSet");
    let env = daemon_set
        .first()
        .and_then(|d| d["spec"]["template"]["spec"]["containers"][0]["env"].as_array())
        .ok_or("no env")?;
    for (name, value) in [
        ("AZURE_SCHEDULED_EVENTS_KUBERNETES_DRAIN_DELAY", "1m"),
        (
            "AZURE_SCHEDULED_EVENTS_KUBERNETES_DRAIN_POD_SELECTOR",
            "Freeze:example.com/evict-on-freeze=true",
        ),
        (
            "AZURE_SCHEDULED_EVENTS_KUBERNETES_IMDS_UNKNOWN_AFTER",
            "30s",
        ),
        (
            "AZURE_SCHEDULED_EVENTS_KUBERNETES_AKS_CONDITION_NAMES",
            "true",
        ),
    ] {
        assert!(
            env.contains(&json!({"name": name, "value": value})),
            "{name}={value} in {env:#?}"
        );
    }
    let defaults = render("kubernetes.enabled=true")?;
    let env = ops::of_kind(&defaults, "DaemonSet")
        .first()
        .and_then(|d| {
            d["spec"]["template"]["spec"]["containers"][0]["env"]
                .as_array()
                .cloned()
        })
        .ok_or("no env")?;
    assert!(
        !env.iter().any(|e| e["name"]
            .as_str()
            .is_some_and(|n| n.ends_with("DRAIN_DELAY") || n.ends_with("AKS_CONDITION_NAMES"))),
        "unset values leave the agent's defaults"
    );
    Ok(())
}

#[test]
fn no_pod_of_the_chart_gets_the_namespaces_services_as_variables() -> TestResult {
    // enableServiceLinks defaults to true: every Service of the namespace would become variables,
    // with the agent's prefix for a Service named like it.
    let objects = render("windows.enabled=true")?;
    let daemon_sets = ops::of_kind(&objects, "DaemonSet");
    assert_eq!(daemon_sets.len(), 2, "the Linux and the Windows DaemonSet");
    for daemon_set in daemon_sets {
        assert_eq!(
            daemon_set["spec"]["template"]["spec"]["enableServiceLinks"],
            json!(false),
            "{}",
            daemon_set["metadata"]["name"]
        );
    }
    Ok(())
}
