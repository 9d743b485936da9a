//! The changes that bring a Node to what the events want ([`plan`]): the condition on the status
//! subresource, and the taint and cordon on the Node itself, with the annotation that records
//! what the agent added. Pure: the Node as last read and the time come in as arguments.
//!
//! The agent removes only what it added. The annotation `azure-scheduled-events/applied` says
//! which of the taint and the cordon it put there, in the same write as them, so a restarted
//! agent knows; a node cordoned before the agent wanted it cordoned is left as found and never
//! uncordoned by it. Every patch carries the resourceVersion it was planned from, so the API
//! server refuses (409) a patch planned from a Node someone changed since.

use chrono::{DateTime, SecondsFormat, Utc};
use k8s_openapi::api::core::v1::{Node, NodeCondition, Taint};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::wanted::Wanted;

/// The node condition's type. AKS's own is `VMEventScheduled`: a different name on purpose.
pub const CONDITION: &str = "AzureScheduledEvent";
/// The key of the agent's taint; its value is the event type.
pub const TAINT_KEY: &str = "azure-scheduled-events/impact";
pub const TAINT_EFFECT: &str = "NoSchedule";
/// The annotation recording what the agent added to the Node.
pub const APPLIED: &str = "azure-scheduled-events/applied";

/// What the agent added to the Node, as the annotation records it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Applied {
    #[serde(default)]
    pub taint: bool,
    #[serde(default)]
    pub cordon: bool,
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
    /// A strategic-merge patch of the Node: `spec.taints` is replaced whole.
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
    let version = node.metadata.resource_version.clone();
    Plan {
        status: condition_patch(node, wanted, now).map(|condition| {
            json!({
                "metadata": { "resourceVersion": version },
                "status": { "conditions": [condition] },
            })
        }),
        spec: spec_patch(node, wanted).map(|mut patch| {
            patch["metadata"]["resourceVersion"] = json!(version);
            patch
        }),
    }
}

fn condition_patch(node: &Node, wanted: &Wanted, now: DateTime<Utc>) -> Option<Value> {
    let status = if wanted.condition.status {
        "True"
    } else {
        "False"
    };
    let current: Option<&NodeCondition> = node
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|conditions| conditions.iter().find(|c| c.type_ == CONDITION));
    if let Some(current) = current
        && current.status == status
        && current.reason.as_deref() == Some(wanted.condition.reason.as_str())
        && current.message.as_deref() == Some(wanted.condition.message.as_str())
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
        "type": CONDITION,
        "status": status,
        "reason": wanted.condition.reason,
        "message": wanted.condition.message,
        "lastHeartbeatTime": now,
        "lastTransitionTime": transition,
    }))
}

fn spec_patch(node: &Node, wanted: &Wanted) -> Option<Value> {
    let applied = Applied::of(node);
    let spec = node.spec.as_ref();
    let taints: Vec<Taint> = spec.and_then(|s| s.taints.clone()).unwrap_or_default();
    let cordoned = spec.and_then(|s| s.unschedulable).unwrap_or(false);

    let mut new_applied = applied;
    let new_taints: Vec<Taint> = match (&wanted.taint, applied.taint) {
        (Some(value), _) => {
            new_applied.taint = true;
            let mut kept: Vec<Taint> = taints.iter().filter(|t| !is_ours(t)).cloned().collect();
            kept.push(Taint {
                key: TAINT_KEY.into(),
                value: Some(value.clone()),
                effect: TAINT_EFFECT.into(),
                time_added: None,
            });
            kept
        }
        (None, true) => {
            new_applied.taint = false;
            taints.iter().filter(|t| !is_ours(t)).cloned().collect()
        }
        (None, false) => taints.clone(),
    };
    let new_cordoned = match (wanted.cordon, applied.cordon) {
        // Ours: put back if someone uncordoned while the event is pending.
        (true, true) => true,
        // An operator's cordon: left as found, and not recorded as ours.
        (true, false) if cordoned => true,
        (true, false) => {
            new_applied.cordon = true;
            true
        }
        (false, true) => {
            new_applied.cordon = false;
            false
        }
        (false, false) => cordoned,
    };

    let mut spec_changes = serde_json::Map::new();
    if !same_taints(&taints, &new_taints) {
        spec_changes.insert("taints".into(), json!(new_taints));
    }
    if new_cordoned != cordoned {
        spec_changes.insert("unschedulable".into(), json!(new_cordoned));
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
    if spec_changes.is_empty() && annotation.is_none() {
        return None;
    }
    let mut patch = json!({ "metadata": {} });
    if let Some(annotation) = annotation {
        patch["metadata"]["annotations"] = json!({ APPLIED: annotation });
    }
    if !spec_changes.is_empty() {
        patch["spec"] = Value::Object(spec_changes);
    }
    Some(patch)
}

fn is_ours(taint: &Taint) -> bool {
    taint.key == TAINT_KEY && taint.effect == TAINT_EFFECT
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
    use super::super::wanted::Condition;
    use super::*;

    fn node(value: Value) -> Node {
        serde_json::from_value(value).unwrap_or_default()
    }

    fn wanted(taint: Option<&str>, cordon: bool) -> Wanted {
        Wanted {
            condition: Condition {
                status: taint.is_some() || cordon,
                reason: if taint.is_some() || cordon {
                    "RebootScheduled"
                } else {
                    "NoScheduledEvents"
                }
                .into(),
                message: "m".into(),
            },
            taint: taint.map(str::to_owned),
            cordon,
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
}
