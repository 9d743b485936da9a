//! What the Node should say, worked out from the events naming this VM: the condition, the
//! deadline labels, the taints, the cordon, the load-balancer exclusion and the drain
//! ([`Wanted`]), and the Kubernetes Event that tells of one transition ([`Note`]).
//! Pure: the events and the time come in as arguments.

use azure_scheduled_events_core::event::{Event, EventStatus};
use azure_scheduled_events_core::tracker::Transition;
use chrono::{DateTime, Utc};

use crate::config::kubernetes::Actions;

/// A node condition's status, as Kubernetes spells it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    True,
    False,
    /// Nobody knows: the agent has had no valid document for `--kubernetes.imds-unknown-after`.
    Unknown,
}

impl Status {
    pub fn as_str(self) -> &'static str {
        match self {
            Status::True => "True",
            Status::False => "False",
            Status::Unknown => "Unknown",
        }
    }
}

/// One node condition as it should be.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Condition {
    /// The condition's type: `AzureScheduledEvent`, or AKS's names ([`Names::Aks`]).
    pub type_: &'static str,
    pub status: Status,
    pub reason: String,
    pub message: String,
}

/// Which conditions the agent writes, and in which words.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Names {
    /// `AzureScheduledEvent`, the agent's own.
    Own,
    /// AKS node-problem-detector's `VMEventScheduled` and `PreemptionScheduled`
    /// (`--kubernetes.aks-condition-names`), with its reasons and message format.
    Aks,
}

/// The condition's type. AKS's own is `VMEventScheduled`: a different name on purpose.
pub const CONDITION: &str = "AzureScheduledEvent";
/// AKS node-problem-detector's consolidated condition (AgentBaker:
/// `parts/linux/cloud-init/artifacts/node-problem-detector/custom-plugin-monitor/custom-scheduledevents-consolidated-condition-monitor.json`).
pub const AKS_CONDITION: &str = "VMEventScheduled";
/// The condition of a Spot eviction that Karpenter's Azure provider reads.
pub const AKS_PREEMPTION_CONDITION: &str = "PreemptionScheduled";
/// The link AKS's plugin puts in every message
/// (`parts/linux/cloud-init/artifacts/node-problem-detector/plugin/check_scheduledevent_consolidated.sh`).
const AKS_LINK: &str = "https://aka.ms/aks/scheduledevents";
/// The longest description AKS's plugin puts in a message, keeping it under 512 bytes.
const AKS_DESCRIPTION: usize = 400;

/// AKS's two conditions, `Unknown` with `message`, as node-problem-detector reports a plugin that
/// exits UNKNOWN: the default reasons, the plugin's output as message.
fn aks_unknown(message: String) -> Vec<Condition> {
    vec![
        Condition {
            type_: AKS_CONDITION,
            status: Status::Unknown,
            reason: "NoVMEventScheduled".into(),
            message: message.clone(),
        },
        Condition {
            type_: AKS_PREEMPTION_CONDITION,
            status: Status::Unknown,
            reason: "NoPreemptionScheduled".into(),
            message,
        },
    ]
}

impl Names {
    /// The conditions this style writes, `Unknown`: no valid document has come for a while, for
    /// the reason `kind` (a bounded error kind) with `error`, since `since`.
    pub fn blind(self, kind: &str, error: &str, since: DateTime<Utc>) -> Vec<Condition> {
        match self {
            Names::Own => vec![Condition {
                type_: CONDITION,
                status: Status::Unknown,
                reason: "ImdsUnreachable".into(),
                message: format!(
                    "No valid Scheduled Events document since {} ({kind}: {error}); whether an event is scheduled is unknown.",
                    since.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
                ),
            }],
            // As node-problem-detector reports a plugin that exits UNKNOWN: the default reason,
            // the plugin's output ("IMDS query failed, exit code: 28 ...") as message.
            Names::Aks => aks_unknown(format!("IMDS query failed, {kind}: {error}")),
        }
    }

    /// The conditions this style writes, `Unknown`, when the agent has had no valid document
    /// since its start (`since`) and no failure to tell yet (its first request still waits).
    pub fn starting(self, since: DateTime<Utc>) -> Vec<Condition> {
        match self {
            Names::Own => vec![Condition {
                type_: CONDITION,
                status: Status::Unknown,
                reason: "NoDocumentYet".into(),
                message: format!(
                    "No valid Scheduled Events document since the agent started at {} (its first request has had no answer yet); whether an event is scheduled is unknown.",
                    since.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
                ),
            }],
            Names::Aks => {
                aks_unknown("IMDS query pending: no answer to the first request yet".to_owned())
            }
        }
    }

    /// The conditions for the events naming this VM, sorted soonest first.
    fn conditions(self, ours: &[&Event]) -> Vec<Condition> {
        let impacts: Vec<&&Event> = ours.iter().filter(|e| !e.is_advisory()).collect();
        match self {
            Names::Own => vec![match impacts.first() {
                None => Condition {
                    type_: CONDITION,
                    status: Status::False,
                    reason: "NoScheduledEvents".into(),
                    message: "No scheduled event names this VM.".into(),
                },
                Some(soonest) => Condition {
                    type_: CONDITION,
                    status: Status::True,
                    reason: format!(
                        "{}{}",
                        word(soonest.event_type.as_str()),
                        word(soonest.status.as_str())
                    ),
                    message: format!(
                        "{} {} {}, NotBefore {}{}",
                        soonest.event_type,
                        soonest.id,
                        soonest.status,
                        rfc1123(soonest),
                        match impacts.len() {
                            0 | 1 => String::new(),
                            2 => " (and 1 more event)".into(),
                            n => format!(" (and {} more events)", n - 1),
                        }
                    ),
                },
            }],
            Names::Aks => {
                // The plugin reports only these types; any other leaves the condition False.
                let reported = ["Freeze", "Reboot", "Redeploy", "Terminate", "Preempt"];
                let vm_event = match impacts
                    .iter()
                    .find(|e| reported.contains(&e.event_type.as_str()))
                {
                    None => Condition {
                        type_: AKS_CONDITION,
                        status: Status::False,
                        reason: "NoVMEventScheduled".into(),
                        message: "VM has no scheduled event".into(),
                    },
                    Some(event) => {
                        let description: String = event
                            .description
                            .as_deref()
                            .unwrap_or_default()
                            .chars()
                            .take(AKS_DESCRIPTION)
                            .collect();
                        let duration = event
                            .duration
                            .map_or_else(|| "null".to_owned(), |d| d.0.to_string());
                        Condition {
                            type_: AKS_CONDITION,
                            status: Status::True,
                            reason: "VMEventScheduled".into(),
                            message: format!(
                                "{}. DurationInSeconds: {duration}. {description} For more information, see {AKS_LINK}.",
                                aks_headline(event)
                            ),
                        }
                    }
                };
                // A Spot eviction, or its advisory: the readers of this condition tell them
                // apart by the message's first words.
                let preemption = match ours.iter().find(|e| {
                    matches!(
                        e.event_type.as_str(),
                        "Preempt" | "SpotRebalanceRecommendation"
                    )
                }) {
                    None => Condition {
                        type_: AKS_PREEMPTION_CONDITION,
                        status: Status::False,
                        reason: "NoPreemptionScheduled".into(),
                        message: "VM has no scheduled Preempt event".into(),
                    },
                    Some(event) => Condition {
                        type_: AKS_PREEMPTION_CONDITION,
                        status: Status::True,
                        reason: "SpotEvictionIncoming".into(),
                        message: format!(
                            "{}. For more information, see {AKS_LINK}. EventId: {}",
                            aks_headline(event),
                            event.id
                        ),
                    },
                };
                vec![vm_event, preemption]
            }
        }
    }
}

/// `<EventType> <EventStatus>`, then `: <NotBefore>` while Scheduled (an event under way has no
/// NotBefore), as AKS's plugin begins its messages.
fn aks_headline(event: &Event) -> String {
    let mut headline = format!("{} {}", event.event_type, event.status);
    if event.status == EventStatus::Scheduled {
        headline.push_str(": ");
        headline.push_str(&rfc1123(event));
    }
    headline
}

/// What a blind agent writes: `conditions` (each `Unknown`), once `from` has come without a
/// valid document.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Blind {
    pub from: tokio::time::Instant,
    pub conditions: Vec<Condition>,
}

impl Blind {
    /// The conditions to write at `now`: these, once `from` has passed.
    pub fn conditions_at(&self, now: tokio::time::Instant) -> Option<&[Condition]> {
        (now >= self.from).then_some(self.conditions.as_slice())
    }
}

/// The node as the events naming this VM want it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Wanted {
    /// The conditions, soonest event first ([`Names`]).
    pub conditions: Vec<Condition>,
    /// The value (an event type) of the `azure-scheduled-events/impact` taint, if one is wanted.
    pub taint: Option<String>,
    pub cordon: bool,
    /// The value (an event type) of the `azure-scheduled-events/advisory` taint, if one is wanted.
    pub advisory_taint: Option<String>,
    /// `node.kubernetes.io/exclude-from-external-load-balancers=true` wanted.
    pub exclude_from_load_balancers: bool,
    /// The deadline labels, while an event naming this VM is Scheduled.
    pub deadline: Option<Deadline>,
    /// The drain asked for, if any.
    pub drain: Option<DrainTarget>,
}

/// The soonest Scheduled event naming this VM, as the labels `azure-scheduled-events/not-before`
/// and `azure-scheduled-events/event-type` say it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Deadline {
    /// NotBefore as Unix seconds; `None` when it is not a date.
    pub not_before: Option<i64>,
    pub event_type: String,
}

/// The event a drain hands the node over for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DrainTarget {
    pub event_id: String,
    pub event_type: String,
    /// NotBefore, when it names a time: evictions that a budget refuses are retried until a
    /// margin before it, and no pod is given longer than it to stop.
    pub not_before: Option<DateTime<Utc>>,
    /// The event is under way: there is no time left to wait for.
    pub started: bool,
}

impl Wanted {
    /// The first condition: the only one of [`Names::Own`].
    #[cfg(test)]
    pub fn condition(&self) -> &Condition {
        &self.conditions[0]
    }

    /// From the document's events that name this VM (as the core's view of each says): the
    /// soonest event names the reason, message and taint value. An advisory never sets the
    /// condition, the labels nor a drain; it taints or cordons only when its type is listed, and
    /// sets the advisory taint when asked.
    pub fn from_events(ours: &[&Event], actions: &Actions, names: Names) -> Self {
        let mut ours = ours.to_vec();
        // Under way first, then by NotBefore, unknown NotBefore last; EventId breaks ties so the
        // message does not flap between polls.
        ours.sort_by_key(|event| {
            let started = event.status == EventStatus::Started;
            (
                !started,
                event.not_before.at().is_none(),
                event.not_before.at(),
                event.id.clone(),
            )
        });
        let conditions = names.conditions(&ours);
        let listed = |list: &[azure_scheduled_events_core::event::EventType], event: &Event| {
            list.contains(&event.event_type)
        };
        let drain = ours
            .iter()
            .find(|event| !event.is_advisory() && listed(&actions.drain_events, event))
            .map(|event| DrainTarget {
                event_id: event.id.as_str().to_owned(),
                event_type: event.event_type.as_str().to_owned(),
                not_before: event.not_before.at(),
                started: event.status == EventStatus::Started,
            });
        Self {
            conditions,
            taint: ours
                .iter()
                .find(|event| listed(&actions.taint_events, event))
                .map(|event| event.event_type.as_str().to_owned()),
            // A drain cordons first, so that what it evicts is not scheduled back.
            cordon: drain.is_some()
                || ours
                    .iter()
                    .any(|event| listed(&actions.cordon_events, event)),
            advisory_taint: ours
                .iter()
                .find(|event| actions.advisory_taint && event.is_advisory())
                .map(|event| event.event_type.as_str().to_owned()),
            exclude_from_load_balancers: ours.iter().any(|event| {
                !event.is_advisory() && listed(&actions.exclude_from_load_balancers_events, event)
            }),
            deadline: ours
                .iter()
                .find(|event| !event.is_advisory() && event.status == EventStatus::Scheduled)
                .map(|event| Deadline {
                    not_before: event.not_before.at().map(|at| at.timestamp()),
                    event_type: event.event_type.as_str().to_owned(),
                }),
            drain,
        }
    }
}

/// NotBefore in RFC 1123, as Azure writes it and AKS's node-problem-detector repeats it, also when
/// Azure sent another form; as sent when it is not a date, `none` when empty.
fn rfc1123(event: &Event) -> String {
    match event.not_before.at() {
        Some(at) => at.format("%a, %d %b %Y %H:%M:%S GMT").to_string(),
        None => not_before(event).to_owned(),
    }
}

/// One Kubernetes Event about the Node: a transition of an event naming this VM.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Note {
    /// The Event's name: the same transition always gets the same name, so that one reported
    /// again (a retry, a restart without a state file) is refused as existing, never doubled.
    pub name: String,
    pub reason: String,
    pub note: String,
    /// `Warning` for what is about to happen or under way, `Normal` for what ended.
    pub warning: bool,
    /// What the Event says was done: `ScheduledEvent` for a transition, `Drain` for a drain.
    pub action: &'static str,
    pub at: DateTime<Utc>,
}

impl Note {
    /// The Event for `transition`; `None` for an event resumed after a restart, which the
    /// earlier run reported.
    pub fn of_transition(
        node: &str,
        transition: &Transition,
        incarnation: Option<u64>,
        at: DateTime<Utc>,
    ) -> Option<Self> {
        let what = transition.kind().as_str();
        // An event is updated as often as it changes: each update's Event has a name of its own.
        let (warning, suffix) = match transition {
            Transition::Resumed { .. } => return None,
            // An advisory announces nothing about to happen: a Normal Event.
            Transition::Appeared(event) if event.is_advisory() => (false, what.to_owned()),
            Transition::Appeared(_) | Transition::Started(_) => (true, what.to_owned()),
            Transition::Updated { .. } => {
                (true, format!("{what}-{}", incarnation.unwrap_or_default()))
            }
            Transition::Completed { .. } | Transition::Cancelled(_) => (false, what.to_owned()),
        };
        Some(Self::new(
            node,
            transition.event(),
            what,
            &suffix,
            warning,
            at,
        ))
    }

    /// The Event for an event that left the document while the agent was down.
    pub fn ended_while_down(node: &str, event: &Event, at: DateTime<Utc>) -> Self {
        Self::new(node, event, "ended_while_down", "ended", false, at)
    }

    fn new(
        node: &str,
        event: &Event,
        what: &str,
        suffix: &str,
        warning: bool,
        at: DateTime<Utc>,
    ) -> Self {
        let duration = match event.duration {
            None => "not given".to_owned(),
            Some(d) if d.0 < 0 => format!("{} (unknown)", d.0),
            Some(d) => format!("{}s", d.0),
        };
        Self {
            name: event_name(node, event.id.as_str(), suffix),
            reason: format!("{}{}", word(event.event_type.as_str()), word(what)),
            note: format!(
                "Scheduled event {} ({} {}, {}): EventType {}, NotBefore {}, DurationInSeconds {}",
                event.id,
                event.event_type,
                event.status,
                what.replace('_', " "),
                event.event_type,
                not_before(event),
                duration
            ),
            warning,
            action: "ScheduledEvent",
            at,
        }
    }
}

fn not_before(event: &Event) -> &str {
    match event.not_before.raw() {
        "" => "none",
        raw => raw,
    }
}

/// `scheduled` -> `Scheduled`, `ended_while_down` -> `EndedWhileDown`; anything but ASCII
/// letters and digits is dropped, as Kubernetes wants reasons in UpperCamelCase.
fn word(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut upper = true;
    for c in text.chars() {
        if c.is_ascii_alphanumeric() {
            out.push(if upper { c.to_ascii_uppercase() } else { c });
            upper = false;
        } else {
            upper = true;
        }
    }
    if out.is_empty() { "Event".into() } else { out }
}

/// `<node>.<event id>.<suffix>`, lower-case, within the 253 characters of a DNS subdomain.
pub fn event_name(node: &str, id: &str, suffix: &str) -> String {
    let id: String = id
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_lowercase()
            } else {
                '-'
            }
        })
        .collect();
    let tail = format!(".{}.{}", id.trim_matches('-'), suffix.replace('_', "-"));
    let room = 253usize.saturating_sub(tail.len());
    let head = node.get(..room.min(node.len())).unwrap_or(node);
    format!("{}{tail}", head.trim_end_matches(['.', '-']))
}

#[cfg(test)]
mod tests {
    use super::*;
    use azure_scheduled_events_core::event::{Affects, DurationInSeconds, EventId, EventType};
    use azure_scheduled_events_core::tracker::Tracked;

    /// [`Wanted::from_events`] of the events that name `vm`, as the output picks them.
    fn wanted_for(events: &[Tracked], vm: Option<&str>, actions: &Actions) -> Wanted {
        let ours: Vec<&Event> = events
            .iter()
            .map(|tracked| &tracked.event)
            .filter(|event| event.affects(vm) == Affects::Yes)
            .collect();
        Wanted::from_events(&ours, actions, Names::Own)
    }
    use azure_scheduled_events_core::not_before::NotBefore;

    const VM: &str = "aks-pool-12345678-vmss_0";

    fn acts(taint: &[EventType], cordon: &[EventType]) -> Actions {
        Actions {
            taint_events: taint.to_vec(),
            cordon_events: cordon.to_vec(),
            ..Actions::default()
        }
    }

    fn event(
        id: &str,
        kind: EventType,
        status: EventStatus,
        not_before: &str,
        vm: &str,
    ) -> Tracked {
        Tracked {
            event: Event {
                id: EventId::new(id),
                event_type: kind,
                status,
                resource_type: "VirtualMachine".into(),
                resources: serde_json::from_str(&format!("[\"{vm}\"]")).unwrap_or_default(),
                not_before: NotBefore::parse(Some(not_before)),
                description: None,
                source: None,
                duration: Some(DurationInSeconds(-1)),
            },
            first_seen: DateTime::UNIX_EPOCH,
            seen_started: false,
        }
    }

    #[test]
    fn no_event_of_this_vm_is_false_with_no_taint_nor_cordon() {
        let events = [event(
            "B",
            EventType::Reboot,
            EventStatus::Scheduled,
            "Mon, 11 Apr 2022 23:00:00 GMT",
            "other_1",
        )];
        let wanted = wanted_for(
            &events,
            Some(VM),
            &acts(&[EventType::Reboot], &[EventType::Reboot]),
        );
        assert_eq!(wanted.condition().status, Status::False);
        assert_eq!(wanted.condition().reason, "NoScheduledEvents");
        assert_eq!(wanted.taint, None);
        assert!(!wanted.cordon);
    }

    #[test]
    fn an_advisory_never_sets_the_condition_and_taints_only_when_listed() {
        let events = [event(
            "REBALANCE",
            EventType::SpotRebalanceRecommendation,
            EventStatus::Advisory,
            "",
            VM,
        )];
        let wanted = wanted_for(&events, Some(VM), &acts(&[EventType::Preempt], &[]));
        assert_eq!(wanted.condition().status, Status::False);
        assert_eq!(wanted.condition().reason, "NoScheduledEvents");
        assert_eq!((wanted.taint, wanted.cordon), (None, false));
        let asked = wanted_for(
            &events,
            Some(VM),
            &acts(&[EventType::SpotRebalanceRecommendation], &[]),
        );
        assert_eq!(
            asked.condition().status,
            Status::False,
            "listing it taints, never pages"
        );
        assert_eq!(asked.taint.as_deref(), Some("SpotRebalanceRecommendation"));
    }

    #[test]
    fn the_soonest_event_names_reason_message_and_taint() {
        let events = [
            event(
                "LATE",
                EventType::Redeploy,
                EventStatus::Scheduled,
                "Mon, 11 Apr 2022 23:00:00 GMT",
                VM,
            ),
            event(
                "SOON",
                EventType::Reboot,
                EventStatus::Scheduled,
                "Mon, 11 Apr 2022 22:26:58 GMT",
                VM,
            ),
            event(
                "OTHER",
                EventType::Freeze,
                EventStatus::Started,
                "",
                "other_1",
            ),
        ];
        let wanted = wanted_for(
            &events,
            Some(VM),
            &acts(
                &[EventType::Reboot, EventType::Redeploy],
                &[EventType::Redeploy],
            ),
        );
        assert_eq!(wanted.condition().status, Status::True);
        assert_eq!(wanted.condition().reason, "RebootScheduled");
        assert_eq!(
            wanted.condition().message,
            "Reboot SOON Scheduled, NotBefore Mon, 11 Apr 2022 22:26:58 GMT (and 1 more event)"
        );
        assert_eq!(wanted.taint.as_deref(), Some("Reboot"));
        assert!(wanted.cordon, "the later Redeploy cordons");
    }

    #[test]
    fn an_event_under_way_comes_first() {
        let events = [
            event(
                "SOON",
                EventType::Reboot,
                EventStatus::Scheduled,
                "Mon, 11 Apr 2022 22:26:58 GMT",
                VM,
            ),
            event("NOW", EventType::Freeze, EventStatus::Started, "", VM),
        ];
        let wanted = wanted_for(&events, Some(VM), &Actions::default());
        assert_eq!(wanted.condition().reason, "FreezeStarted");
        assert_eq!(wanted.taint, None);
    }

    #[test]
    fn an_unknown_vm_name_names_nothing() {
        let events = [event(
            "A",
            EventType::Reboot,
            EventStatus::Scheduled,
            "",
            VM,
        )];
        assert_eq!(
            wanted_for(&events, None, &Actions::default())
                .condition()
                .status,
            Status::False
        );
    }

    #[test]
    fn the_soonest_scheduled_event_names_the_deadline_and_a_drain_cordons() {
        let events = [
            event(
                "LATE",
                EventType::Redeploy,
                EventStatus::Scheduled,
                "Mon, 11 Apr 2022 23:00:00 GMT",
                VM,
            ),
            event(
                "SOON",
                EventType::Reboot,
                EventStatus::Scheduled,
                "2022-04-11T22:26:58Z",
                VM,
            ),
        ];
        let actions = Actions {
            drain_events: vec![EventType::Redeploy],
            exclude_from_load_balancers_events: vec![EventType::Reboot],
            ..Actions::default()
        };
        let wanted = wanted_for(&events, Some(VM), &actions);
        assert_eq!(
            wanted.deadline,
            Some(Deadline {
                not_before: Some(1_649_716_018),
                event_type: "Reboot".into()
            })
        );
        assert!(
            wanted
                .condition()
                .message
                .contains("SOON Scheduled, NotBefore Mon, 11 Apr 2022 22:26:58 GMT"),
            "RFC 1123 whatever form Azure sent: {}",
            wanted.condition().message
        );
        let Some(drain) = &wanted.drain else {
            panic!("the Redeploy drains")
        };
        assert_eq!(drain.event_id, "LATE");
        assert!(!drain.started);
        assert!(wanted.cordon, "a drain cordons");
        assert!(wanted.exclude_from_load_balancers);
        assert_eq!(wanted.taint, None);
    }

    #[test]
    fn an_advisory_sets_only_the_advisory_taint_and_only_when_asked() {
        let events = [event(
            "REBALANCE",
            EventType::SpotRebalanceRecommendation,
            EventStatus::Advisory,
            "",
            VM,
        )];
        let everything = Actions {
            drain_events: EventType::impacts().cloned().collect(),
            exclude_from_load_balancers_events: EventType::impacts().cloned().collect(),
            advisory_taint: true,
            ..Actions::default()
        };
        let wanted = wanted_for(&events, Some(VM), &everything);
        assert_eq!(
            wanted.advisory_taint.as_deref(),
            Some("SpotRebalanceRecommendation")
        );
        assert_eq!(wanted.drain, None);
        assert_eq!(wanted.deadline, None);
        assert!(!wanted.cordon && !wanted.exclude_from_load_balancers);
        let not_asked = Actions {
            advisory_taint: false,
            ..everything
        };
        assert_eq!(
            wanted_for(&events, Some(VM), &not_asked).advisory_taint,
            None
        );
    }

    #[test]
    fn notes_are_named_per_transition_and_resumed_events_are_not_reported_again() {
        let tracked = event(
            "C7061BAC-AFDC-4513",
            EventType::Reboot,
            EventStatus::Scheduled,
            "Mon, 11 Apr 2022 22:26:58 GMT",
            VM,
        );
        let at = DateTime::UNIX_EPOCH;
        let appeared = Note::of_transition(
            "node-0",
            &Transition::Appeared(tracked.event.clone()),
            Some(2),
            at,
        );
        let Some(appeared) = appeared else {
            panic!("an appeared event is reported");
        };
        assert_eq!(appeared.name, "node-0.c7061bac-afdc-4513.scheduled");
        assert_eq!(appeared.reason, "RebootScheduled");
        assert!(appeared.warning);
        assert!(
            appeared.note.contains("C7061BAC-AFDC-4513"),
            "{}",
            appeared.note
        );
        assert!(
            appeared
                .note
                .contains("NotBefore Mon, 11 Apr 2022 22:26:58 GMT"),
            "{}",
            appeared.note
        );
        assert!(
            appeared.note.contains("DurationInSeconds -1 (unknown)"),
            "{}",
            appeared.note
        );
        let resumed = Transition::Resumed {
            event: tracked.event.clone(),
            first_seen: at,
            seen_started: false,
            announced: false,
        };
        assert_eq!(Note::of_transition("node-0", &resumed, Some(2), at), None);
        let completed = Transition::Completed {
            event: tracked.event.clone(),
            seen_started: true,
        };
        let completed = Note::of_transition("node-0", &completed, Some(3), at);
        assert_eq!(
            completed.map(|n| (n.reason, n.warning)),
            Some(("RebootCompleted".into(), false))
        );
        let gone = Note::ended_while_down("node-0", &tracked.event, at);
        assert_eq!(gone.reason, "RebootEndedWhileDown");
    }

    #[test]
    fn aks_names_write_node_problem_detectors_conditions_and_messages() {
        let mut preempt = event(
            "40B7BD88-C56E-44E4-93F6-75CEDACE2869",
            EventType::Preempt,
            EventStatus::Scheduled,
            "2026-08-01T05:41:02Z",
            VM,
        );
        preempt.event.description = Some("Spot eviction.".into());
        let wanted = Wanted::from_events(&[&preempt.event], &Actions::default(), Names::Aks);
        let [vm_event, preemption] = wanted.conditions.as_slice() else {
            panic!("two conditions: {:?}", wanted.conditions)
        };
        assert_eq!(
            (vm_event.type_, vm_event.status, vm_event.reason.as_str()),
            ("VMEventScheduled", Status::True, "VMEventScheduled")
        );
        assert_eq!(
            vm_event.message,
            "Preempt Scheduled: Sat, 01 Aug 2026 05:41:02 GMT. DurationInSeconds: -1. Spot eviction. For more information, see https://aka.ms/aks/scheduledevents."
        );
        assert_eq!(
            (
                preemption.type_,
                preemption.status,
                preemption.reason.as_str()
            ),
            ("PreemptionScheduled", Status::True, "SpotEvictionIncoming")
        );
        assert_eq!(
            preemption.message,
            "Preempt Scheduled: Sat, 01 Aug 2026 05:41:02 GMT. For more information, see https://aka.ms/aks/scheduledevents. EventId: 40B7BD88-C56E-44E4-93F6-75CEDACE2869"
        );
        let started = event("F", EventType::Freeze, EventStatus::Started, "", VM);
        let wanted = Wanted::from_events(&[&started.event], &Actions::default(), Names::Aks);
        assert_eq!(
            wanted.conditions[0].message,
            "Freeze Started. DurationInSeconds: -1.  For more information, see https://aka.ms/aks/scheduledevents.",
            "no NotBefore under way; an empty description leaves two spaces, as the plugin does"
        );
        assert_eq!(wanted.conditions[1].status, Status::False);
        let none = Wanted::from_events(&[], &Actions::default(), Names::Aks);
        assert_eq!(
            (
                none.conditions[0].reason.as_str(),
                none.conditions[0].message.as_str()
            ),
            ("NoVMEventScheduled", "VM has no scheduled event")
        );
    }

    #[test]
    fn a_blind_agent_names_the_failure_in_either_style() {
        let since = DateTime::UNIX_EPOCH;
        let own = Names::Own.blind("timeout", "no answer in 30s", since);
        assert_eq!(
            (own[0].type_, own[0].status, own[0].reason.as_str()),
            (CONDITION, Status::Unknown, "ImdsUnreachable")
        );
        assert!(
            own[0]
                .message
                .contains("since 1970-01-01T00:00:00Z (timeout: no answer in 30s)"),
            "{}",
            own[0].message
        );
        let aks = Names::Aks.blind("connect", "refused", since);
        assert_eq!(aks.len(), 2);
        assert!(
            aks.iter().all(|c| c.status == Status::Unknown
                && c.message == "IMDS query failed, connect: refused")
        );
    }

    #[test]
    fn event_names_fit_a_dns_subdomain() {
        let name = event_name(&"n".repeat(253), "ID", "updated-7");
        assert_eq!(name.len(), 253);
        assert!(name.ends_with(".id.updated-7"));
    }
}
