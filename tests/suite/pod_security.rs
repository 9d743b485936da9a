//! The chart's pods against the Pod Security Standards, as the built-in Pod Security admission
//! applies them to a namespace labelled `pod-security.kubernetes.io/enforce: <level>`: the
//! `baseline` and `restricted` rules written out from the standard's documented fields
//! (<https://kubernetes.io/docs/concepts/security/pod-security-standards/>), checked first against
//! pods that break each rule, then applied to every pod `helm template` renders, with the values the
//! docs give for each way of running the chart.

use crate::ops;

use ops::Error;
use serde_json::Value;

type TestResult = Result<(), Error>;

/// The two levels that restrict anything (`privileged` allows everything).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Level {
    Baseline,
    Restricted,
}

/// Capabilities `baseline` lets a container add (the standard's "Capabilities" row).
const BASELINE_CAPABILITIES: &[&str] = &[
    "AUDIT_WRITE",
    "CHOWN",
    "DAC_OVERRIDE",
    "FOWNER",
    "FSETID",
    "KILL",
    "MKNOD",
    "NET_BIND_SERVICE",
    "SETFCAP",
    "SETGID",
    "SETPCAP",
    "SETUID",
    "SYS_CHROOT",
];

/// The sysctls `baseline` allows (the "Sysctls" row, as of Kubernetes 1.29).
const SAFE_SYSCTLS: &[&str] = &[
    "kernel.shm_rmid_forced",
    "net.ipv4.ip_local_port_range",
    "net.ipv4.ip_unprivileged_port_start",
    "net.ipv4.tcp_syncookies",
    "net.ipv4.ping_group_range",
    "net.ipv4.ip_local_reserved_ports",
    "net.ipv4.tcp_keepalive_time",
    "net.ipv4.tcp_fin_timeout",
    "net.ipv4.tcp_keepalive_intvl",
    "net.ipv4.tcp_keepalive_probes",
];

/// SELinux types `baseline` allows (besides none).
const SELINUX_TYPES: &[&str] = &[
    "container_t",
    "container_init_t",
    "container_kvm_t",
    "container_engine_t",
];

/// Volume types `restricted` allows.
const RESTRICTED_VOLUMES: &[&str] = &[
    "configMap",
    "csi",
    "downwardAPI",
    "emptyDir",
    "ephemeral",
    "persistentVolumeClaim",
    "projected",
    "secret",
];

fn truthy(value: &Value) -> bool {
    value.as_bool() == Some(true)
}

/// Every container of a pod spec, init and ephemeral ones included, with its kind and name.
fn containers(spec: &Value) -> Vec<(String, &Value)> {
    ["containers", "initContainers", "ephemeralContainers"]
        .iter()
        .flat_map(|kind| {
            spec[*kind]
                .as_array()
                .into_iter()
                .flatten()
                .map(move |c| (format!("{kind}[{}]", c["name"].as_str().unwrap_or("?")), c))
        })
        .collect()
}

/// What in a pod (its spec and its annotations) `level` refuses, one line per field, naming the
/// field as the standard does. Empty: the pod is admitted at `level`.
pub fn violations(spec: &Value, annotations: &Value, level: Level) -> Vec<String> {
    let mut found = Vec::new();
    let pod_security = &spec["securityContext"];
    let containers = containers(spec);
    let windows = spec["os"]["name"] == "windows";

    // ---- baseline ----
    if truthy(&pod_security["windowsOptions"]["hostProcess"]) {
        found.push("spec.securityContext.windowsOptions.hostProcess: true (HostProcess)".into());
    }
    for field in ["hostNetwork", "hostPID", "hostIPC"] {
        if truthy(&spec[field]) {
            found.push(format!("spec.{field}: true (host namespaces)"));
        }
    }
    for volume in spec["volumes"].as_array().into_iter().flatten() {
        if volume.get("hostPath").is_some() {
            found.push(format!(
                "spec.volumes[{}].hostPath (HostPath volumes)",
                volume["name"].as_str().unwrap_or("?")
            ));
        }
    }
    for sysctl in pod_security["sysctls"].as_array().into_iter().flatten() {
        let name = sysctl["name"].as_str().unwrap_or_default();
        if !SAFE_SYSCTLS.contains(&name) {
            found.push(format!("spec.securityContext.sysctls: {name} (Sysctls)"));
        }
    }
    let mut contexts = vec![("spec".to_owned(), pod_security)];
    for (at, container) in &containers {
        let security = &container["securityContext"];
        contexts.push((at.clone(), security));
        if truthy(&security["windowsOptions"]["hostProcess"]) {
            found.push(format!(
                "{at}.securityContext.windowsOptions.hostProcess: true (HostProcess)"
            ));
        }
        if truthy(&security["privileged"]) {
            found.push(format!(
                "{at}.securityContext.privileged: true (Privileged Containers)"
            ));
        }
        for added in security["capabilities"]["add"]
            .as_array()
            .into_iter()
            .flatten()
        {
            let name = added.as_str().unwrap_or_default();
            if !BASELINE_CAPABILITIES.contains(&name) {
                found.push(format!(
                    "{at}.securityContext.capabilities.add: {name} (Capabilities)"
                ));
            }
        }
        for port in container["ports"].as_array().into_iter().flatten() {
            if port["hostPort"].as_u64().is_some_and(|p| p != 0) {
                found.push(format!(
                    "{at}.ports[*].hostPort: {} (Host Ports)",
                    port["hostPort"]
                ));
            }
        }
        if let Some(mount) = security["procMount"].as_str()
            && mount != "Default"
        {
            found.push(format!(
                "{at}.securityContext.procMount: {mount} (/proc Mount Type)"
            ));
        }
    }
    for (at, security) in &contexts {
        let at = if at == "spec" {
            "spec.securityContext".to_owned()
        } else {
            format!("{at}.securityContext")
        };
        if security["seccompProfile"]["type"] == "Unconfined" {
            found.push(format!("{at}.seccompProfile.type: Unconfined (Seccomp)"));
        }
        if let Some(kind) = security["appArmorProfile"]["type"].as_str()
            && !["RuntimeDefault", "Localhost"].contains(&kind)
        {
            found.push(format!("{at}.appArmorProfile.type: {kind} (AppArmor)"));
        }
        let selinux = &security["seLinuxOptions"];
        if let Some(kind) = selinux["type"].as_str()
            && !kind.is_empty()
            && !SELINUX_TYPES.contains(&kind)
        {
            found.push(format!("{at}.seLinuxOptions.type: {kind} (SELinux)"));
        }
        for field in ["user", "role"] {
            if selinux[field].as_str().is_some_and(|v| !v.is_empty()) {
                found.push(format!("{at}.seLinuxOptions.{field} (SELinux)"));
            }
        }
    }
    for (key, value) in annotations.as_object().into_iter().flatten() {
        if key.starts_with("container.apparmor.security.beta.kubernetes.io/") {
            let value = value.as_str().unwrap_or_default();
            if value != "runtime/default" && !value.starts_with("localhost/") {
                found.push(format!("metadata.annotations[{key}]: {value} (AppArmor)"));
            }
        }
    }
    if level == Level::Baseline {
        return found;
    }

    // ---- restricted ----
    for volume in spec["volumes"].as_array().into_iter().flatten() {
        let kinds: Vec<&String> = volume
            .as_object()
            .into_iter()
            .flatten()
            .map(|(k, _)| k)
            .filter(|k| *k != "name")
            .collect();
        for kind in kinds {
            if !RESTRICTED_VOLUMES.contains(&kind.as_str()) {
                found.push(format!(
                    "spec.volumes[{}].{kind} (Volume Types)",
                    volume["name"].as_str().unwrap_or("?")
                ));
            }
        }
    }
    let pod_non_root = truthy(&pod_security["runAsNonRoot"]);
    if pod_security["runAsUser"].as_i64() == Some(0) {
        found.push("spec.securityContext.runAsUser: 0 (Running as Non-root user)".into());
    }
    let pod_seccomp = pod_security["seccompProfile"]["type"].as_str();
    let pod_seccomp_ok = matches!(pod_seccomp, Some("RuntimeDefault" | "Localhost"));
    for (at, container) in &containers {
        let security = &container["securityContext"];
        if !windows && security["allowPrivilegeEscalation"] != Value::Bool(false) {
            found.push(format!(
                "{at}.securityContext.allowPrivilegeEscalation is not false (Privilege Escalation)"
            ));
        }
        match security["runAsNonRoot"].as_bool() {
            Some(false) => found.push(format!(
                "{at}.securityContext.runAsNonRoot: false (Running as Non-root)"
            )),
            None if !pod_non_root => found.push(format!(
                "{at}: runAsNonRoot set neither here nor for the pod (Running as Non-root)"
            )),
            _ => {}
        }
        if security["runAsUser"].as_i64() == Some(0) {
            found.push(format!(
                "{at}.securityContext.runAsUser: 0 (Running as Non-root user)"
            ));
        }
        match security["seccompProfile"]["type"].as_str() {
            Some("RuntimeDefault" | "Localhost") => {}
            None if pod_seccomp_ok => {}
            other => found.push(format!(
                "{at}.securityContext.seccompProfile.type: {other:?}, and none for the pod (Seccomp)"
            )),
        }
        if windows {
            continue;
        }
        let drops_all = security["capabilities"]["drop"]
            .as_array()
            .is_some_and(|d| d.iter().any(|c| c == "ALL"));
        if !drops_all {
            found.push(format!(
                "{at}.securityContext.capabilities.drop lacks ALL (Capabilities)"
            ));
        }
        for added in security["capabilities"]["add"]
            .as_array()
            .into_iter()
            .flatten()
        {
            if added != "NET_BIND_SERVICE" {
                found.push(format!(
                    "{at}.securityContext.capabilities.add: {} (Capabilities)",
                    added.as_str().unwrap_or("?")
                ));
            }
        }
    }
    found
}

/// The strictest level that admits every pod of `pods` (spec, annotations): `Some(level)`, or `None`
/// for `privileged`.
pub fn strictest(pods: &[(Value, Value)]) -> Option<Level> {
    [Level::Restricted, Level::Baseline]
        .into_iter()
        .find(|level| {
            pods.iter()
                .all(|(spec, annotations)| violations(spec, annotations, *level).is_empty())
        })
}

/// A pod that `restricted` admits, to break one rule at a time.
fn locked_down() -> Value {
    serde_json::json!({
        "securityContext": {"runAsNonRoot": true, "runAsUser": 65532, "seccompProfile": {"type": "RuntimeDefault"}},
        "containers": [{
            "name": "agent",
            "ports": [{"containerPort": 10188}],
            "securityContext": {"allowPrivilegeEscalation": false, "capabilities": {"drop": ["ALL"]}},
        }],
        "volumes": [{"name": "state", "emptyDir": {}}],
    })
}

/// Each rule of both levels refuses the pod that breaks it, naming the field, and admits the pod
/// that keeps it: the checks the chart's tests rely on cannot pass by checking nothing.
#[test]
fn each_pod_security_rule_refuses_the_pod_that_breaks_it_and_names_the_field() -> TestResult {
    let none = Value::Null;
    let pod = locked_down();
    assert_eq!(
        violations(&pod, &none, Level::Restricted),
        Vec::<String>::new()
    );
    // (a change to the locked-down pod, the level that first refuses it, a word of the refusal)
    let cases: &[(&str, Value, Level, &str)] = &[
        (
            "/hostNetwork",
            Value::Bool(true),
            Level::Baseline,
            "spec.hostNetwork",
        ),
        (
            "/hostPID",
            Value::Bool(true),
            Level::Baseline,
            "spec.hostPID",
        ),
        (
            "/hostIPC",
            Value::Bool(true),
            Level::Baseline,
            "spec.hostIPC",
        ),
        (
            "/volumes/0",
            serde_json::json!({"name": "state", "hostPath": {"path": "/var/lib/x"}}),
            Level::Baseline,
            "hostPath",
        ),
        (
            "/securityContext/windowsOptions",
            serde_json::json!({"hostProcess": true}),
            Level::Baseline,
            "hostProcess",
        ),
        (
            "/containers/0/securityContext/privileged",
            Value::Bool(true),
            Level::Baseline,
            "privileged",
        ),
        (
            "/containers/0/securityContext/capabilities/add",
            serde_json::json!(["SYS_ADMIN"]),
            Level::Baseline,
            "SYS_ADMIN",
        ),
        (
            "/containers/0/ports/0/hostPort",
            serde_json::json!(10188),
            Level::Baseline,
            "hostPort",
        ),
        (
            "/securityContext/seccompProfile/type",
            serde_json::json!("Unconfined"),
            Level::Baseline,
            "Unconfined",
        ),
        (
            "/securityContext/sysctls",
            serde_json::json!([{"name": "kernel.msgmax", "value": "1"}]),
            Level::Baseline,
            "kernel.msgmax",
        ),
        (
            "/containers/0/securityContext/seLinuxOptions",
            serde_json::json!({"type": "spc_t"}),
            Level::Baseline,
            "spc_t",
        ),
        (
            "/containers/0/securityContext/procMount",
            serde_json::json!("Unmasked"),
            Level::Baseline,
            "procMount",
        ),
        (
            "/containers/0/securityContext/capabilities/add",
            serde_json::json!(["CHOWN"]),
            Level::Restricted,
            "CHOWN",
        ),
        (
            "/containers/0/securityContext/capabilities/drop",
            serde_json::json!([]),
            Level::Restricted,
            "drop lacks ALL",
        ),
        (
            "/containers/0/securityContext/allowPrivilegeEscalation",
            Value::Bool(true),
            Level::Restricted,
            "allowPrivilegeEscalation",
        ),
        (
            "/securityContext/runAsNonRoot",
            Value::Bool(false),
            Level::Restricted,
            "runAsNonRoot",
        ),
        (
            "/containers/0/securityContext/runAsUser",
            serde_json::json!(0),
            Level::Restricted,
            "runAsUser: 0",
        ),
        (
            "/securityContext/seccompProfile",
            Value::Null,
            Level::Restricted,
            "seccompProfile",
        ),
        (
            "/volumes/0",
            serde_json::json!({"name": "state", "nfs": {"server": "x", "path": "/"}}),
            Level::Restricted,
            "nfs",
        ),
    ];
    for (pointer, value, level, named) in cases {
        let mut broken = pod.clone();
        let slot = broken
            .pointer_mut(pointer)
            .map(|slot| *slot = value.clone());
        if slot.is_none() {
            // A field the locked-down pod does not have: add it to its parent object.
            let (parent, key) = pointer.rsplit_once('/').ok_or("pointer")?;
            let parent = broken
                .pointer_mut(parent)
                .ok_or_else(|| format!("no {parent}"))?;
            parent[key] = value.clone();
        }
        let refused = violations(&broken, &none, *level);
        assert!(
            refused.iter().any(|v| v.contains(named)),
            "{pointer} = {value} is not refused at {level:?} naming {named}: {refused:?}"
        );
        if *level == Level::Restricted {
            assert!(
                violations(&broken, &none, Level::Baseline).is_empty(),
                "{pointer} = {value}: baseline allows it"
            );
        }
    }
    // An AppArmor annotation that unconfines a container.
    let annotations =
        serde_json::json!({"container.apparmor.security.beta.kubernetes.io/agent": "unconfined"});
    assert!(!violations(&pod, &annotations, Level::Baseline).is_empty());
    assert_eq!(
        strictest(&[(pod.clone(), none.clone())]),
        Some(Level::Restricted)
    );
    Ok(())
}

// ---- The chart ----

// The tests that run an external tool, compiled with the feature `external-tools`.
#[cfg(feature = "external-tools")]
mod tools;
