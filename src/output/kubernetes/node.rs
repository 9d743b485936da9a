//! The changes that bring a Node to what the events want ([`plan`]): the condition on the status
//! subresource, and the taints, cordon and labels on the Node itself, with the annotation that
//! records what the agent added. Pure: the Node as last read and the time come in as arguments.
//!
//! The agent removes only what it added. The annotation `azure-scheduled-events/applied` says
//! which of the taints, the cordon and the load-balancer exclusion it put there, in the same
//! write as them, so a restarted agent knows; a node cordoned (or excluded from load balancers)
//! before the agent wanted it is left as found and never undone by it. The keys under
//! `azure-scheduled-events/` are the agent's alone. Every patch carries the resourceVersion it was planned from, so the API
//! server refuses (409) a patch planned from a Node someone changed since.

use chrono::{DateTime, SecondsFormat, Utc};
use k8s_openapi::api::core::v1::{Node, NodeCondition, Taint};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

#[cfg(test)]
use super::wanted::CONDITION;
use super::wanted::{Condition, Wanted};

/// The key of the agent's taint; its value is the event type.
pub const TAINT_KEY: &str = "azure-scheduled-events/impact";
pub const TAINT_EFFECT: &str = "NoSchedule";
/// The key of the taint kept while an advisory (a Spot rebalance recommendation) names this VM;
/// its value is the event type.
pub const ADVISORY_TAINT_KEY: &str = "azure-scheduled-events/advisory";
pub const ADVISORY_TAINT_EFFECT: &str = "PreferNoSchedule";
/// The annotation recording what the agent added to the Node.
pub const APPLIED: &str = "azure-scheduled-events/applied";
/// The soonest Scheduled event's NotBefore, Unix seconds, for node affinity (`Gt`, `DoesNotExist`).
pub const NOT_BEFORE_LABEL: &str = "azure-scheduled-events/not-before";
/// The soonest Scheduled event's type.
pub const EVENT_TYPE_LABEL: &str = "azure-scheduled-events/event-type";
/// The label Azure's cloud controller manager (and Kubernetes' service controller) honour.
pub const EXCLUDE_LB_LABEL: &str = "node.kubernetes.io/exclude-from-external-load-balancers";

/// What the agent added to the Node, as the annotation records it. The later fields are written
/// only when set, so an annotation of an earlier version reads the same.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Applied {
    #[serde(default)]
    pub taint: bool,
    #[serde(default)]
    pub cordon: bool,
    #[serde(default, skip_serializing_if = "is_false")]
    pub advisory_taint: bool,
    #[serde(default, skip_serializing_if = "is_false")]
    pub exclude_from_load_balancers: bool,
}

fn is_false(value: &bool) -> bool {
    !*value
}

impl Applied {
    /// From the Node's annotation; nothing when absent or unreadable.
    pub fn of(node: &Node) -> Self {
        node.metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(APPLIED))
            .and_then(|text| serde_json::from_str(text).ok())
            .unwrap_or_default()
    }
}

/// The patches to send, status first; `None` where the Node is already as wanted.
#[derive(Debug, Clone, PartialEq)]
pub struct Plan {
    /// A strategic-merge patch of `nodes/status`: conditions merge by type.
    pub status: Option<Value>,
    /// A strategic-merge patch of the Node: `spec.taints` is replaced whole, labels and the
    /// annotation merge by key (`null` removes one).
    pub spec: Option<Value>,
}

impl Plan {
    #[cfg(test)]
    pub fn is_empty(&self) -> bool {
        self.status.is_none() && self.spec.is_none()
    }
}

/// What to change on `node` for it to be as `wanted`, at `now`.
pub fn plan(node: &Node, wanted: &Wanted, now: DateTime<Utc>) -> Plan {
    plan_with(node, &wanted.conditions, Some(wanted), now)
}

/// What to change on `node` for its conditions to be `conditions` and, when known, the rest as
/// `wanted`: a blind agent writes the conditions `Unknown` and leaves the rest as it is.
pub fn plan_with(
    node: &Node,
    conditions: &[Condition],
    wanted: Option<&Wanted>,
    now: DateTime<Utc>,
) -> Plan {
    let version = node.metadata.resource_version.clone();
    let changed: Vec<Value> = conditions
        .iter()
        .filter_map(|condition| condition_patch(node, condition, now))
        .collect();
    Plan {
        status: (!changed.is_empty()).then(|| {
            json!({
                "metadata": { "resourceVersion": version },
                "status": { "conditions": changed },
            })
        }),
        spec: wanted
            .and_then(|wanted| spec_patch(node, wanted))
            .map(|mut patch| {
                patch["metadata"]["resourceVersion"] = json!(version);
                patch
            }),
    }
}

fn condition_patch(node: &Node, wanted: &Condition, now: DateTime<Utc>) -> Option<Value> {
    let status = wanted.status.as_str();
    let current: Option<&NodeCondition> = node
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|conditions| conditions.iter().find(|c| c.type_ == wanted.type_));
    if let Some(current) = current
        && current.status == status
        && current.reason.as_deref() == Some(wanted.reason.as_str())
        && current.message.as_deref() == Some(wanted.message.as_str())
    {
        return None;
    }
    let now = now.to_rfc3339_opts(SecondsFormat::Secs, true);
    let transition = match current {
        Some(current) if current.status == status => current
            .last_transition_time
            .as_ref()
            .map_or_else(|| now.clone(), |t| t.0.to_string()),
        _ => now.clone(),
    };
    Some(json!({
        "type": wanted.type_,
        "status": status,
        "reason": wanted.reason,
        "message": wanted.message,
        "lastHeartbeatTime": now,
        "lastTransitionTime": transition,
    }))
}

fn spec_patch(node: &Node, wanted: &Wanted) -> Option<Value> {
    let applied = Applied::of(node);
    let spec = node.spec.as_ref();
    let taints: Vec<Taint> = spec.and_then(|s| s.taints.clone()).unwrap_or_default();
    let cordoned = spec.and_then(|s| s.unschedulable).unwrap_or(false);
    let labels = node.metadata.labels.clone().unwrap_or_default();

    let mut new_applied = applied;
    let new_taints = taint(
        &taints,
        TAINT_KEY,
        TAINT_EFFECT,
        wanted.taint.as_deref(),
        applied.taint,
    );
    new_applied.taint = wanted.taint.is_some();
    let new_taints = taint(
        &new_taints,
        ADVISORY_TAINT_KEY,
        ADVISORY_TAINT_EFFECT,
        wanted.advisory_taint.as_deref(),
        applied.advisory_taint,
    );
    new_applied.advisory_taint = wanted.advisory_taint.is_some();
    let (new_cordoned, ours) = owned(wanted.cordon, applied.cordon, cordoned);
    new_applied.cordon = ours;
    let excluded = labels.get(EXCLUDE_LB_LABEL).is_some_and(|v| v == "true");
    let (new_excluded, ours) = owned(
        wanted.exclude_from_load_balancers,
        applied.exclude_from_load_balancers,
        labels.contains_key(EXCLUDE_LB_LABEL),
    );
    new_applied.exclude_from_load_balancers = ours;

    let mut spec_changes = serde_json::Map::new();
    if !same_taints(&taints, &new_taints) {
        spec_changes.insert("taints".into(), json!(new_taints));
    }
    if new_cordoned != cordoned {
        spec_changes.insert("unschedulable".into(), json!(new_cordoned));
    }
    let mut label_changes = serde_json::Map::new();
    let mut label = |key: &str, value: Option<String>| {
        if labels.get(key) != value.as_ref() {
            label_changes.insert(key.into(), value.map_or(Value::Null, Value::String));
        }
    };
    let deadline = wanted.deadline.as_ref();
    label(
        NOT_BEFORE_LABEL,
        deadline.and_then(|d| d.not_before).map(|t| t.to_string()),
    );
    label(
        EVENT_TYPE_LABEL,
        deadline.map(|d| label_value(&d.event_type)),
    );
    if new_applied.exclude_from_load_balancers && !excluded {
        label(EXCLUDE_LB_LABEL, Some("true".into()));
    } else if applied.exclude_from_load_balancers && !new_excluded {
        label(EXCLUDE_LB_LABEL, None);
    }
    let annotated = node
        .metadata
        .annotations
        .as_ref()
        .is_some_and(|a| a.contains_key(APPLIED));
    let annotation = if new_applied == Applied::default() {
        annotated.then_some(Value::Null)
    } else if new_applied != applied || !annotated {
        Some(json!(
            serde_json::to_string(&new_applied).unwrap_or_default()
        ))
    } else {
        None
    };
    if spec_changes.is_empty() && label_changes.is_empty() && annotation.is_none() {
        return None;
    }
    let mut patch = json!({ "metadata": {} });
    if let Some(annotation) = annotation {
        patch["metadata"]["annotations"] = json!({ APPLIED: annotation });
    }
    if !label_changes.is_empty() {
        patch["metadata"]["labels"] = Value::Object(label_changes);
    }
    if !spec_changes.is_empty() {
        patch["spec"] = Value::Object(spec_changes);
    }
    Some(patch)
}

/// `taints` with the agent's taint of `key` and `effect` set to `value`, or removed when no value
/// is wanted and the annotation says the agent added it.
fn taint(
    taints: &[Taint],
    key: &str,
    effect: &str,
    value: Option<&str>,
    applied: bool,
) -> Vec<Taint> {
    let others = || {
        taints
            .iter()
            .filter(|t| !(t.key == key && t.effect == effect))
            .cloned()
    };
    match (value, applied) {
        (Some(value), _) => others()
            .chain(std::iter::once(Taint {
                key: key.into(),
                value: Some(value.into()),
                effect: effect.into(),
                time_added: None,
            }))
            .collect(),
        (None, true) => others().collect(),
        (None, false) => taints.to_vec(),
    }
}

/// Whether a switch the agent shares with others (the cordon, the load-balancer exclusion) should
/// be on, and whether it is then the agent's: `wanted` now, `ours` as the annotation says, `on`
/// as the Node is.
fn owned(wanted: bool, ours: bool, on: bool) -> (bool, bool) {
    match (wanted, ours) {
        // Ours: put back if someone took it away while the event is pending.
        (true, true) => (true, true),
        // Someone else's: left as found, and not recorded as ours.
        (true, false) if on => (true, false),
        (true, false) => (true, true),
        (false, true) => (false, false),
        (false, false) => (on, false),
    }
}

/// A label value (at most 63 of letters, digits, `-`, `_`, `.`, alphanumeric at both ends) from
/// an event type, which Azure may send in any form.
fn label_value(text: &str) -> String {
    let kept: String = text
        .chars()
        .filter(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        .take(63)
        .collect();
    kept.trim_matches(|c: char| !c.is_ascii_alphanumeric())
        .to_owned()
}

/// Equal as sets of (key, value, effect): the order the API server keeps is not a change.
fn same_taints(a: &[Taint], b: &[Taint]) -> bool {
    let key = |t: &Taint| (t.key.clone(), t.value.clone(), t.effect.clone());
    let mut a: Vec<_> = a.iter().map(key).collect();
    let mut b: Vec<_> = b.iter().map(key).collect();
    a.sort();
    b.sort();
    a == b
}

#[cfg(test)]
mod tests {
    use super::super::wanted::{Condition, Deadline, Status};
    use super::*;

    fn node(value: Value) -> Node {
        serde_json::from_value(value).unwrap_or_default()
    }

    fn wanted(taint: Option<&str>, cordon: bool) -> Wanted {
        Wanted {
            conditions: vec![Condition {
                type_: CONDITION,
                status: if taint.is_some() || cordon {
                    Status::True
                } else {
                    Status::False
                },
                reason: if taint.is_some() || cordon {
                    "RebootScheduled"
                } else {
                    "NoScheduledEvents"
                }
                .into(),
                message: "m".into(),
            }],
            taint: taint.map(str::to_owned),
            cordon,
            advisory_taint: None,
            exclude_from_load_balancers: false,
            deadline: None,
            drain: None,
        }
    }

    fn now() -> DateTime<Utc> {
        DateTime::UNIX_EPOCH
    }

    #[test]
    fn a_matching_condition_is_not_written_again() {
        let n = node(json!({
            "metadata": {"name": "n", "resourceVersion": "7"},
            "status": {"conditions": [{"type": CONDITION, "status": "False", "reason": "NoScheduledEvents", "message": "m",
                "lastTransitionTime": "2020-01-01T00:00:00Z"}]}
        }));
        assert!(plan(&n, &wanted(None, false), now()).is_empty());
        let status = plan(&n, &wanted(Some("Reboot"), false), now()).status;
        let Some(status) = status else {
            panic!("the condition changes")
        };
        assert_eq!(status["metadata"]["resourceVersion"], "7");
        assert_eq!(status["status"]["conditions"][0]["status"], "True");
        assert_eq!(
            status["status"]["conditions"][0]["lastTransitionTime"],
            "1970-01-01T00:00:00Z"
        );
    }

    #[test]
    fn a_blind_plan_writes_the_condition_unknown_and_nothing_else() {
        let tainted = node(json!({
            "metadata": {"name": "n", "resourceVersion": "2", "annotations": {APPLIED: r#"{"taint":true,"cordon":true}"#}},
            "spec": {"unschedulable": true, "taints": [{"key": TAINT_KEY, "value": "Reboot", "effect": "NoSchedule"}]},
            "status": {"conditions": [{"type": CONDITION, "status": "True", "reason": "RebootScheduled", "message": "m"}]}
        }));
        let blind = Condition {
            type_: CONDITION,
            status: Status::Unknown,
            reason: "ImdsUnreachable".into(),
            message: "no document".into(),
        };
        let plan = plan_with(&tainted, &[blind], None, now());
        assert_eq!(plan.spec, None, "no taint nor cordon lifted");
        let Some(status) = plan.status else {
            panic!("the condition changes")
        };
        assert_eq!(status["status"]["conditions"][0]["status"], "Unknown");
    }

    #[test]
    fn the_transition_time_stays_while_the_status_does() {
        let n = node(json!({
            "metadata": {"name": "n", "resourceVersion": "7"},
            "status": {"conditions": [{"type": CONDITION, "status": "True", "reason": "FreezeScheduled", "message": "x",
                "lastTransitionTime": "2020-01-01T00:00:00Z"}]}
        }));
        let status = plan(&n, &wanted(Some("Reboot"), false), now()).status;
        let Some(status) = status else {
            panic!("the reason changes")
        };
        assert_eq!(
            status["status"]["conditions"][0]["lastTransitionTime"],
            "2020-01-01T00:00:00Z"
        );
    }

    #[test]
    fn the_taint_is_added_beside_other_owners_taints_and_removed_alone() {
        let other = json!({"key": "dedicated", "value": "gpu", "effect": "NoSchedule"});
        let n = node(
            json!({"metadata": {"name": "n", "resourceVersion": "1"}, "spec": {"taints": [other]}}),
        );
        let Some(spec) = plan(&n, &wanted(Some("Reboot"), false), now()).spec else {
            panic!("tainted")
        };
        assert_eq!(
            spec["spec"]["taints"],
            json!([other, {"key": TAINT_KEY, "value": "Reboot", "effect": "NoSchedule"}])
        );
        assert_eq!(
            spec["metadata"]["annotations"][APPLIED],
            r#"{"taint":true,"cordon":false}"#
        );
        assert!(spec["spec"].get("unschedulable").is_none());

        let tainted = node(json!({
            "metadata": {"name": "n", "resourceVersion": "2", "annotations": {APPLIED: r#"{"taint":true,"cordon":false}"#}},
            "spec": {"taints": [other, {"key": TAINT_KEY, "value": "Reboot", "effect": "NoSchedule"}]}
        }));
        assert_eq!(
            plan(&tainted, &wanted(Some("Reboot"), false), now()).spec,
            None
        );
        let Some(spec) = plan(&tainted, &wanted(None, false), now()).spec else {
            panic!("untainted")
        };
        assert_eq!(spec["spec"]["taints"], json!([other]));
        assert_eq!(spec["metadata"]["annotations"][APPLIED], Value::Null);
    }

    #[test]
    fn an_operators_cordon_is_never_lifted() {
        let n = node(
            json!({"metadata": {"name": "n", "resourceVersion": "1"}, "spec": {"unschedulable": true}}),
        );
        assert_eq!(
            plan(&n, &wanted(None, true), now()).spec,
            None,
            "not recorded as ours"
        );
        assert_eq!(plan(&n, &wanted(None, false), now()).spec, None);
    }

    #[test]
    fn the_agents_cordon_is_put_back_and_lifted_when_the_event_is_gone() {
        let n = node(json!({"metadata": {"name": "n", "resourceVersion": "1"}}));
        let Some(spec) = plan(&n, &wanted(None, true), now()).spec else {
            panic!("cordoned")
        };
        assert_eq!(spec["spec"]["unschedulable"], true);
        let uncordoned_by_hand = node(json!({
            "metadata": {"name": "n", "resourceVersion": "2", "annotations": {APPLIED: r#"{"taint":false,"cordon":true}"#}},
            "spec": {"unschedulable": false}
        }));
        let Some(spec) = plan(&uncordoned_by_hand, &wanted(None, true), now()).spec else {
            panic!("back")
        };
        assert_eq!(spec["spec"]["unschedulable"], true);
        let Some(spec) = plan(&uncordoned_by_hand, &wanted(None, false), now()).spec else {
            panic!("record")
        };
        assert_eq!(
            spec["metadata"]["annotations"][APPLIED],
            Value::Null,
            "only the record goes"
        );
        assert!(spec.get("spec").is_none());
    }

    #[test]
    fn deadline_labels_come_and_go_and_other_labels_stay() {
        let n = node(json!({"metadata": {"name": "n", "resourceVersion": "1",
            "labels": {"kubernetes.io/hostname": "n"}}}));
        let mut w = wanted(None, false);
        w.deadline = Some(Deadline {
            not_before: Some(2_000_000_000),
            event_type: "Reboot".into(),
        });
        let Some(spec) = plan(&n, &w, now()).spec else {
            panic!("labelled")
        };
        assert_eq!(
            spec["metadata"]["labels"],
            json!({NOT_BEFORE_LABEL: "2000000000", EVENT_TYPE_LABEL: "Reboot"})
        );
        assert_eq!(spec["metadata"]["resourceVersion"], "1");
        assert!(
            spec["metadata"].get("annotations").is_none(),
            "our own keys"
        );
        let labelled = node(json!({"metadata": {"name": "n", "resourceVersion": "2",
            "labels": {"kubernetes.io/hostname": "n", NOT_BEFORE_LABEL: "2000000000", EVENT_TYPE_LABEL: "Reboot"}}}));
        assert_eq!(plan(&labelled, &w, now()).spec, None);
        let Some(spec) = plan(&labelled, &wanted(None, false), now()).spec else {
            panic!("unlabelled")
        };
        assert_eq!(
            spec["metadata"]["labels"],
            json!({NOT_BEFORE_LABEL: null, EVENT_TYPE_LABEL: null})
        );
    }

    #[test]
    fn the_load_balancer_exclusion_is_lifted_only_when_the_agent_set_it() {
        let mut w = wanted(None, false);
        w.exclude_from_load_balancers = true;
        let bare = node(json!({"metadata": {"name": "n", "resourceVersion": "1"}}));
        let Some(spec) = plan(&bare, &w, now()).spec else {
            panic!("excluded")
        };
        assert_eq!(spec["metadata"]["labels"][EXCLUDE_LB_LABEL], "true");
        assert_eq!(
            spec["metadata"]["annotations"][APPLIED],
            r#"{"taint":false,"cordon":false,"exclude_from_load_balancers":true}"#
        );
        let ours = node(json!({"metadata": {"name": "n", "resourceVersion": "2",
            "labels": {EXCLUDE_LB_LABEL: "true"},
            "annotations": {APPLIED: r#"{"exclude_from_load_balancers":true}"#}}}));
        let Some(spec) = plan(&ours, &wanted(None, false), now()).spec else {
            panic!("lifted")
        };
        assert_eq!(spec["metadata"]["labels"][EXCLUDE_LB_LABEL], Value::Null);
        assert_eq!(spec["metadata"]["annotations"][APPLIED], Value::Null);

        let operators = node(json!({"metadata": {"name": "n", "resourceVersion": "1",
            "labels": {EXCLUDE_LB_LABEL: "true"}}}));
        assert_eq!(
            plan(&operators, &w, now()).spec,
            None,
            "not recorded as ours"
        );
        assert_eq!(plan(&operators, &wanted(None, false), now()).spec, None);
    }

    #[test]
    fn the_advisory_taint_prefers_no_schedule_and_leaves_the_impact_taint_alone() {
        let mut w = wanted(Some("Reboot"), false);
        w.advisory_taint = Some("SpotRebalanceRecommendation".into());
        let bare = node(json!({"metadata": {"name": "n", "resourceVersion": "1"}}));
        let Some(spec) = plan(&bare, &w, now()).spec else {
            panic!("tainted")
        };
        assert_eq!(
            spec["spec"]["taints"],
            json!([
                {"key": TAINT_KEY, "value": "Reboot", "effect": "NoSchedule"},
                {"key": ADVISORY_TAINT_KEY, "value": "SpotRebalanceRecommendation", "effect": "PreferNoSchedule"}
            ])
        );
        let tainted = node(json!({
            "metadata": {"name": "n", "resourceVersion": "2", "annotations": {APPLIED: r#"{"taint":true,"cordon":false,"advisory_taint":true}"#}},
            "spec": {"taints": [
                {"key": TAINT_KEY, "value": "Reboot", "effect": "NoSchedule"},
                {"key": ADVISORY_TAINT_KEY, "value": "SpotRebalanceRecommendation", "effect": "PreferNoSchedule"}
            ]}
        }));
        assert_eq!(plan(&tainted, &w, now()).spec, None);
        let Some(spec) = plan(&tainted, &wanted(Some("Reboot"), false), now()).spec else {
            panic!("lifted")
        };
        assert_eq!(
            spec["spec"]["taints"],
            json!([{"key": TAINT_KEY, "value": "Reboot", "effect": "NoSchedule"}])
        );
    }

    #[test]
    fn label_values_are_what_kubernetes_accepts() {
        assert_eq!(label_value("Reboot"), "Reboot");
        assert_eq!(label_value("-Hot Patch!-"), "HotPatch");
        assert_eq!(label_value(&"x".repeat(100)).len(), 63);
    }
}
