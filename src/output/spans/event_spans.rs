//! Each VM's view of an event as OpenTelemetry spans, built from the tracker's transitions.
//!
//! The trace id is the EventId ([`azure_scheduled_events_core::trace_id`]), so every VM that sees an event writes into
//! the same trace. Per VM and event there is one **lifecycle span** (span id from EventId and VM
//! name, the same after a restart) from the moment this agent first saw the event until it left
//! the document, carrying the event's last fields and its outcome. Because it is only exported
//! when it ends, every **transition** is also exported at once as a short child span of it.
//! Approval decisions and hook runs ([`azure_scheduled_events_core::approval::Decision`]) are child spans of it too.
//! Unchanged polls produce no transitions and so no spans. Pure: the caller passes the time and
//! gets finished spans back to queue.

use std::collections::HashMap;
use std::time::SystemTime;

use azure_scheduled_events_core::approval::{Decision, Outcome};
use azure_scheduled_events_core::event::Event;
use azure_scheduled_events_core::hardware_failure;
use azure_scheduled_events_core::occurrence::Context;
use azure_scheduled_events_core::trace_id::trace_id_u128;
use azure_scheduled_events_core::tracker::{Kind, Tracked, Transition};
use chrono::{DateTime, Utc};
use opentelemetry::trace::{
    SpanContext, SpanId, SpanKind, Status, TraceFlags, TraceId, TraceState,
};
use opentelemetry::{InstrumentationScope, KeyValue, StringValue, Value};
use opentelemetry_sdk::trace::{IdGenerator, RandomIdGenerator, SpanData, SpanEvents, SpanLinks};

use crate::output::telemetry::SCOPE;

/// The namespace of every span attribute of ours.
pub const NAMESPACE: &str = "azure.scheduled_event";

#[derive(Debug, Clone)]
struct Open {
    span_id: SpanId,
    first_seen: DateTime<Utc>,
    seen_started: bool,
    /// The event as last seen.
    event: Event,
    /// The last approval decision (`approved`, `waiting`, ...), if any.
    approval: Option<&'static str>,
}

/// The lifecycle spans still open, one per event in the document.
#[derive(Debug, Default)]
pub struct EventSpans {
    open: HashMap<String, Open>,
    ids: RandomIdGenerator,
}

impl EventSpans {
    pub fn new() -> Self {
        Self::default()
    }

    /// The spans one transition finishes: its own child span, and the lifecycle span when the
    /// event left the document. An event resumed after a restart has its lifecycle span start
    /// at the first sight of the earlier run, and no child span when the earlier run already
    /// exported the one of its present status.
    pub fn record(&mut self, transition: &Transition, seen: &Context) -> Vec<SpanData> {
        let event = transition.event();
        let key = event.id.as_str();
        let trace_id = TraceId::from(trace_id_u128(key));
        let span_id = SpanId::from(seen.span_id(&event.id));
        let started = transition.kind() == Kind::Started;
        let mut spans = Vec::with_capacity(2);
        let (first_seen, seen_started) = match transition {
            Transition::Resumed {
                first_seen,
                seen_started,
                ..
            } => (*first_seen.min(&seen.at), *seen_started),
            Transition::Appeared(_)
            | Transition::Started(_)
            | Transition::Updated { .. }
            | Transition::Completed { .. }
            | Transition::Cancelled(_) => (seen.at, false),
        };
        let open = self.open.entry(key.to_owned()).or_insert_with(|| Open {
            span_id,
            first_seen,
            seen_started,
            event: event.clone(),
            approval: None,
        });
        open.seen_started |= started;
        open.event = event.clone();
        if transition.already_announced() {
            return spans;
        }
        let parent = open.span_id;
        let first_seen = open.first_seen;

        let mut attributes = event_attributes(event, seen);
        attributes.push(predicted_attribute(event, first_seen));
        attributes.push(KeyValue::new(
            format!("{NAMESPACE}.transition"),
            transition.kind().as_str(),
        ));
        if let Transition::Updated { changed, .. } = transition {
            let names: Vec<StringValue> = changed.iter().map(|f| f.as_str().into()).collect();
            attributes.push(KeyValue::new(
                format!("{NAMESPACE}.changed"),
                Value::Array(names.into()),
            ));
        }
        let at = SystemTime::from(seen.at);
        spans.push(span(
            SpanContext::new(
                trace_id,
                self.ids.new_span_id(),
                TraceFlags::SAMPLED,
                false,
                TraceState::default(),
            ),
            parent,
            format!("{} {}", event.event_type, transition.kind()),
            (at, at),
            attributes,
        ));

        let outcome = match transition {
            Transition::Completed { .. } => Some("completed"),
            Transition::Cancelled(_) => Some("cancelled"),
            _ => None,
        };
        if let Some(outcome) = outcome
            && let Some(open) = self.open.remove(key)
        {
            spans.push(lifecycle(trace_id, open, outcome, seen));
        }
        spans
    }

    /// The child span of one approval decision or hook run. Its parent is this VM's lifecycle
    /// span of the event, also when the event has already left the document (a hook that
    /// finished after it). A hook run spans the hook's run time.
    pub fn decision(&mut self, decision: &Decision, seen: &Context) -> SpanData {
        let event = &decision.event;
        let key = event.id.as_str();
        let parent = SpanId::from(seen.span_id(&event.id));
        let at = SystemTime::from(seen.at);
        let name = |what: &str| format!("{NAMESPACE}.{what}");
        let mut attributes = event_attributes(event, seen);
        let mut start = at;
        let mut failed = false;
        let label = match &decision.outcome {
            Outcome::HookStarted(kind) => {
                attributes.push(KeyValue::new(name("hook.kind"), kind.as_str()));
                format!("{} hook {} started", event.event_type, kind.as_str())
            }
            Outcome::HookFinished(run) if decision.outcome.decision().is_none() => {
                attributes.push(KeyValue::new(name("hook.kind"), run.kind.as_str()));
                attributes.push(KeyValue::new(
                    name("hook.elapsed_seconds"),
                    run.elapsed.as_secs_f64(),
                ));
                start = at.checked_sub(run.elapsed).unwrap_or(at);
                let result = match &run.result {
                    Ok(()) => "succeeded",
                    Err(failure) => {
                        failed = true;
                        attributes.push(KeyValue::new(name("hook.error"), failure.to_string()));
                        "failed"
                    }
                };
                format!("{} hook {} {result}", event.event_type, run.kind.as_str())
            }
            outcome => {
                let (what, reason) = outcome.decision().unwrap_or(("", ""));
                attributes.push(KeyValue::new(name("approval.decision"), what));
                attributes.push(KeyValue::new(name("approval.reason"), reason));
                match outcome {
                    Outcome::Approved { attempts, .. } => attributes.push(KeyValue::new(
                        name("approval.attempts"),
                        i64::from(*attempts),
                    )),
                    Outcome::Waiting { until, .. } => {
                        attributes.push(KeyValue::new(name("approval.until"), until.to_rfc3339()))
                    }
                    Outcome::HookFinished(run) => {
                        start = at.checked_sub(run.elapsed).unwrap_or(at);
                        attributes.push(KeyValue::new(name("hook.kind"), run.kind.as_str()));
                        if let Err(failure) = &run.result {
                            attributes.push(KeyValue::new(name("hook.error"), failure.to_string()));
                        }
                    }
                    Outcome::PostFailed {
                        error, retry_at, ..
                    } => {
                        attributes.push(KeyValue::new(name("approval.error"), error.clone()));
                        if let Some(at) = retry_at {
                            attributes
                                .push(KeyValue::new(name("approval.retry_at"), at.to_rfc3339()));
                        }
                    }
                    Outcome::DryRun { .. } | Outcome::Skipped(_) | Outcome::HookStarted(_) => {}
                }
                failed = outcome.failure().is_some();
                if let Some(open) = self.open.get_mut(key) {
                    open.approval = Some(what);
                }
                format!("{} approval {what}", event.event_type)
            }
        };
        let mut span = span(
            SpanContext::new(
                TraceId::from(trace_id_u128(key)),
                self.ids.new_span_id(),
                TraceFlags::SAMPLED,
                false,
                TraceState::default(),
            ),
            parent,
            label,
            (start, at),
            attributes,
        );
        if failed {
            span.status = Status::error("");
        }
        span
    }

    /// Ends every open lifecycle span with outcome `open` (the agent is stopping while the
    /// events are still in the document), so that an event that reboots this VM still has its
    /// span. A later agent that sees the event end exports the span again, same id, final outcome.
    pub fn close_all(&mut self, seen: &Context) -> Vec<SpanData> {
        self.open
            .drain()
            .map(|(key, open)| lifecycle(TraceId::from(trace_id_u128(&key)), open, "open", seen))
            .collect()
    }

    /// The lifecycle span of an event this VM saw `Started` before the agent stopped and that
    /// left the document while it was down, typically the Reboot that restarted it: it ended, so
    /// it completed. An event last seen `Scheduled` may have completed or been cancelled while
    /// nobody watched; it keeps only the span that ended as `open`, and this returns `None`.
    pub fn ended_while_down(&self, remembered: &Tracked, seen: &Context) -> Option<SpanData> {
        if !remembered.seen_started {
            return None;
        }
        let event = &remembered.event;
        let key = event.id.as_str();
        let open = Open {
            span_id: SpanId::from(seen.span_id(&event.id)),
            first_seen: remembered.first_seen,
            seen_started: true,
            event: event.clone(),
            approval: None,
        };
        Some(lifecycle(
            TraceId::from(trace_id_u128(key)),
            open,
            "completed",
            seen,
        ))
    }

    /// How many lifecycle spans are open.
    #[cfg(test)]
    pub fn open_count(&self) -> usize {
        self.open.len()
    }
}

fn lifecycle(trace_id: TraceId, open: Open, outcome: &'static str, seen: &Context) -> SpanData {
    let mut attributes = event_attributes(&open.event, seen);
    attributes.push(predicted_attribute(&open.event, open.first_seen));
    attributes.push(KeyValue::new(format!("{NAMESPACE}.outcome"), outcome));
    attributes.push(KeyValue::new(
        format!("{NAMESPACE}.seen_started"),
        open.seen_started,
    ));
    if let Some(decision) = open.approval {
        attributes.push(KeyValue::new(
            format!("{NAMESPACE}.approval.decision"),
            decision,
        ));
    }
    span(
        SpanContext::new(
            trace_id,
            open.span_id,
            TraceFlags::SAMPLED,
            false,
            TraceState::default(),
        ),
        SpanId::INVALID,
        open.event.event_type.to_string(),
        (SystemTime::from(open.first_seen), SystemTime::from(seen.at)),
        attributes,
    )
}

/// Whether Azure predicts a hardware failure, judged from this VM's first sight of the event.
fn predicted_attribute(event: &Event, first_seen: DateTime<Utc>) -> KeyValue {
    KeyValue::new(
        format!("{NAMESPACE}.hardware_failure_predicted"),
        hardware_failure::predicted(event, Some(first_seen)),
    )
}

/// The event's fields, as this VM saw them: its [`azure_scheduled_events_core::view::EventView`], with `Resources` as a list and
/// NotBefore also as a Unix time.
fn event_attributes(event: &Event, seen: &Context) -> Vec<KeyValue> {
    let view = seen.view(event);
    let key = |name: &str| format!("{NAMESPACE}.{name}");
    let mut attributes = vec![
        KeyValue::new(key("id"), view.event_id),
        KeyValue::new(key("type"), view.event_type),
        KeyValue::new(key("status"), view.event_status),
        KeyValue::new(key("advisory"), view.advisory),
        KeyValue::new(key("cause"), view.cause),
        KeyValue::new(key("resource_type"), view.resource_type),
        KeyValue::new(
            key("resources"),
            Value::Array(
                event
                    .resources
                    .iter()
                    .map(|r| StringValue::from(r.to_owned()))
                    .collect::<Vec<_>>()
                    .into(),
            ),
        ),
        KeyValue::new(key("not_before"), view.not_before),
        KeyValue::new(key("affects_this_vm"), view.affects_this_vm.as_str()),
    ];
    if let Some(at) = event.not_before.at() {
        attributes.push(KeyValue::new(key("not_before_unix"), at.timestamp()));
    }
    if let Some(source) = view.event_source {
        attributes.push(KeyValue::new(key("source"), source));
    }
    if let Some(duration) = view.duration_in_seconds {
        attributes.push(KeyValue::new(key("duration_in_seconds"), duration));
    }
    if let Some(description) = view.description {
        attributes.push(KeyValue::new(key("description"), description));
    }
    if let Some(vm) = view.vm_name {
        attributes.push(KeyValue::new(key("vm_name"), vm));
    }
    if let Some(incarnation) = view.document_incarnation {
        attributes.push(KeyValue::new(
            key("document_incarnation"),
            i64::try_from(incarnation).unwrap_or(i64::MAX),
        ));
    }
    attributes
}

fn span(
    context: SpanContext,
    parent: SpanId,
    name: String,
    (start_time, end_time): (SystemTime, SystemTime),
    attributes: Vec<KeyValue>,
) -> SpanData {
    SpanData {
        span_context: context,
        parent_span_id: parent,
        parent_span_is_remote: false,
        span_kind: SpanKind::Internal,
        name: name.into(),
        start_time,
        end_time,
        attributes,
        dropped_attributes_count: 0,
        events: SpanEvents::default(),
        links: SpanLinks::default(),
        status: Status::Unset,
        instrumentation_scope: InstrumentationScope::builder(SCOPE)
            .with_version(env!("CARGO_PKG_VERSION"))
            .build(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use azure_scheduled_events_core::event::Document;
    use azure_scheduled_events_core::trace_id::lifecycle_span_id;
    use azure_scheduled_events_core::tracker::Tracker;
    use chrono::TimeZone;

    const ID: &str = "C7061BAC-AFDC-4513-B24B-AA5F13A16123";

    fn t(s: i64) -> DateTime<Utc> {
        Utc.timestamp_opt(1_700_000_000 + s, 0)
            .single()
            .unwrap_or_default()
    }

    fn doc(incarnation: u64, status: Option<&str>) -> Document {
        let events = match status {
            Some(status) => format!(
                r#"[{{"EventId":"{ID}","EventStatus":"{status}","EventType":"Reboot","ResourceType":"VirtualMachine",
                "Resources":["vmss_0","vmss_1"],"NotBefore":"","EventSource":"Platform","DurationInSeconds":-1}}]"#
            ),
            None => "[]".to_owned(),
        };
        Document::from_json(
            format!(r#"{{"DocumentIncarnation":{incarnation},"Events":{events}}}"#).as_bytes(),
        )
        .unwrap_or_else(|e| panic!("{e}"))
    }

    fn ctx(vm: &str, incarnation: u64, at: i64) -> Context {
        Context {
            vm_name: Some(vm.into()),
            incarnation: Some(incarnation),
            at: t(at),
            span_ids: Default::default(),
        }
    }

    fn at(seen: &Context, at: i64) -> Context {
        Context {
            at: t(at),
            ..seen.clone()
        }
    }

    fn attr<'a>(span: &'a SpanData, name: &str) -> Option<&'a Value> {
        span.attributes
            .iter()
            .find(|kv| kv.key.as_str() == format!("{NAMESPACE}.{name}"))
            .map(|kv| &kv.value)
    }

    /// Feeds documents through a tracker into the span model, as the poll loop does.
    fn play(vm: &str, docs: &[(i64, Document)]) -> Vec<SpanData> {
        let mut tracker = Tracker::new();
        let mut spans = EventSpans::new();
        let mut out = Vec::new();
        for (at, doc) in docs {
            let incarnation = doc.incarnation.0;
            for transition in tracker.observe(doc.clone(), t(*at)).transitions {
                out.extend(spans.record(&transition, &ctx(vm, incarnation, *at)));
            }
        }
        out
    }

    #[test]
    fn spans_carry_the_advisory_the_cause_and_a_predicted_hardware_failure() {
        let body = |not_before: &str, status: &str, event_type: &str| {
            Document::from_json(
                format!(
                    r#"{{"DocumentIncarnation":1,"Events":[{{"EventId":"{ID}","EventStatus":"{status}",
                    "EventType":"{event_type}","Resources":["vmss_0"],"NotBefore":"{not_before}",
                    "Description":"Host server is undergoing maintenance."}}]}}"#
                )
                .as_bytes(),
            )
            .unwrap_or_else(|e| panic!("{e}"))
        };
        let three_days = (t(0) + chrono::TimeDelta::days(3))
            .format("%a, %d %b %Y %H:%M:%S GMT")
            .to_string();
        let spans = play(
            "vmss_0",
            &[
                (0, body(&three_days, "Scheduled", "Redeploy")),
                (
                    10,
                    Document {
                        incarnation: azure_scheduled_events_core::event::DocumentIncarnation(2),
                        events: vec![],
                    },
                ),
            ],
        );
        let names: Vec<&str> = spans.iter().map(|s| s.name.as_ref()).collect();
        assert_eq!(
            names,
            ["Redeploy scheduled", "Redeploy cancelled", "Redeploy"]
        );
        for span in &spans {
            assert_eq!(
                attr(span, "hardware_failure_predicted"),
                Some(&Value::Bool(true)),
                "{}",
                span.name
            );
            assert_eq!(attr(span, "cause"), Some(&Value::from("host_maintenance")));
            assert_eq!(attr(span, "advisory"), Some(&Value::Bool(false)));
        }
        let advisory = play(
            "vmss_0",
            &[(0, body("", "Advisory", "SpotRebalanceRecommendation"))],
        );
        assert_eq!(advisory[0].name, "SpotRebalanceRecommendation advisory");
        assert_eq!(attr(&advisory[0], "advisory"), Some(&Value::Bool(true)));
        assert_eq!(
            attr(&advisory[0], "hardware_failure_predicted"),
            Some(&Value::Bool(false))
        );
    }

    #[test]
    fn each_transition_is_a_child_of_the_lifecycle_span_in_the_event_trace() {
        let spans = play(
            "vmss_0",
            &[
                (0, doc(1, Some("Scheduled"))),
                (1, doc(1, Some("Scheduled"))),
                (60, doc(2, Some("Started"))),
                (600, doc(3, None)),
            ],
        );
        let names: Vec<&str> = spans.iter().map(|s| s.name.as_ref()).collect();
        assert_eq!(
            names,
            [
                "Reboot scheduled",
                "Reboot started",
                "Reboot completed",
                "Reboot"
            ],
            "nothing for the unchanged second document"
        );
        let lifecycle = &spans[3];
        let trace = format!("{:032x}", lifecycle.span_context.trace_id());
        assert_eq!(trace, "c7061bacafdc4513b24baa5f13a16123");
        assert_eq!(
            u64::from_be_bytes(lifecycle.span_context.span_id().to_bytes()),
            lifecycle_span_id(ID, "vmss_0")
        );
        assert_eq!(lifecycle.parent_span_id, SpanId::INVALID);
        for child in &spans[..3] {
            assert_eq!(
                child.span_context.trace_id(),
                lifecycle.span_context.trace_id()
            );
            assert_eq!(child.parent_span_id, lifecycle.span_context.span_id());
        }
        assert_eq!(lifecycle.start_time, SystemTime::from(t(0)));
        assert_eq!(lifecycle.end_time, SystemTime::from(t(600)));
        assert_eq!(attr(lifecycle, "outcome"), Some(&Value::from("completed")));
        assert_eq!(attr(lifecycle, "seen_started"), Some(&Value::from(true)));
        assert_eq!(
            attr(lifecycle, "document_incarnation"),
            Some(&Value::from(3_i64))
        );
        assert_eq!(
            attr(lifecycle, "affects_this_vm"),
            Some(&Value::from("true"))
        );
        assert_eq!(attr(lifecycle, "id"), Some(&Value::from(ID)));
        assert_eq!(attr(&spans[1], "status"), Some(&Value::from("Started")));
        assert_eq!(
            attr(&spans[1], "document_incarnation"),
            Some(&Value::from(2_i64))
        );
        assert_eq!(
            attr(&spans[0], "duration_in_seconds"),
            Some(&Value::from(-1_i64))
        );
    }

    #[test]
    fn a_cancelled_event_ends_its_span_as_cancelled() {
        let future = Utc::now() + chrono::Duration::days(1);
        let scheduled = Document::from_json(format!(
            r#"{{"DocumentIncarnation":1,"Events":[{{"EventId":"{ID}","EventStatus":"Scheduled","EventType":"Freeze",
            "Resources":["vmss_1"],"NotBefore":"{}"}}]}}"#,
            future.format("%a, %d %b %Y %H:%M:%S GMT")
        ).as_bytes()).unwrap_or_else(|e| panic!("{e}"));
        let spans = play("vmss_0", &[(0, scheduled), (5, doc(2, None))]);
        assert_eq!(spans.len(), 3);
        assert_eq!(attr(&spans[2], "outcome"), Some(&Value::from("cancelled")));
        assert_eq!(
            attr(&spans[2], "affects_this_vm"),
            Some(&Value::from("false"))
        );
        assert_eq!(attr(&spans[2], "seen_started"), Some(&Value::from(false)));
    }

    #[test]
    fn every_vm_writes_into_one_trace_with_its_own_lifecycle_span() {
        let ids: Vec<(TraceId, SpanId)> = ["vmss_0", "vmss_1", "vmss_2"]
            .iter()
            .map(|vm| {
                let spans = play(vm, &[(0, doc(1, Some("Started"))), (9, doc(2, None))]);
                let last = spans
                    .last()
                    .map(|s| s.span_context.clone())
                    .unwrap_or_else(SpanContext::empty_context);
                (last.trace_id(), last.span_id())
            })
            .collect();
        assert!(ids.iter().all(|(trace, _)| *trace == ids[0].0));
        assert_ne!(ids[0].1, ids[1].1);
        assert_ne!(ids[1].1, ids[2].1);
        let again = play(
            "vmss_0",
            &[(100, doc(7, Some("Started"))), (109, doc(8, None))],
        );
        assert_eq!(
            again.last().map(|s| s.span_context.span_id()),
            Some(ids[0].1),
            "a restarted agent ends the same span"
        );
    }

    #[test]
    fn approval_decisions_are_children_of_the_lifecycle_span_and_the_last_one_is_kept_on_it() {
        use azure_scheduled_events_core::approval::{
            HookFailure, HookKind, HookRun, Rule, WaitReason,
        };
        let mut tracker = Tracker::new();
        let mut spans = EventSpans::new();
        let seen = ctx("vmss_0", 1, 0);
        let transitions = tracker.observe(doc(1, Some("Scheduled")), t(0)).transitions;
        for transition in &transitions {
            spans.record(transition, &seen);
        }
        let event = transitions[0].event().clone();
        let decide = |spans: &mut EventSpans, outcome: Outcome, when: i64| {
            spans.decision(
                &Decision {
                    event: event.clone(),
                    outcome,
                },
                &at(&seen, when),
            )
        };
        let waiting = decide(
            &mut spans,
            Outcome::Waiting {
                rule: Rule::UserEvent,
                until: t(30),
                reason: WaitReason::BeforeNotBefore,
            },
            1,
        );
        let hook = decide(
            &mut spans,
            Outcome::HookFinished(HookRun {
                kind: HookKind::Approve,
                result: Err(HookFailure::Timeout(std::time::Duration::from_secs(5))),
                elapsed: std::time::Duration::from_secs(5),
                stdout: String::new(),
                stderr: String::new(),
            }),
            40,
        );
        let approved = decide(
            &mut spans,
            Outcome::Approved {
                rule: Rule::UserEvent,
                attempts: 1,
            },
            41,
        );
        let lifecycle_id = SpanId::from(lifecycle_span_id(ID, "vmss_0"));
        for span in [&waiting, &hook, &approved] {
            assert_eq!(span.parent_span_id, lifecycle_id);
            assert_eq!(
                format!("{:032x}", span.span_context.trace_id()),
                "c7061bacafdc4513b24baa5f13a16123"
            );
        }
        assert_eq!(waiting.name, "Reboot approval waiting");
        assert_eq!(
            attr(&waiting, "approval.reason"),
            Some(&Value::from("before_not_before"))
        );
        assert_eq!(hook.name, "Reboot approval hook_failed");
        assert_eq!(
            hook.start_time,
            SystemTime::from(t(35)),
            "the hook's run time"
        );
        assert!(matches!(hook.status, Status::Error { .. }));
        assert_eq!(approved.name, "Reboot approval approved");
        assert_eq!(
            attr(&approved, "approval.attempts"),
            Some(&Value::from(1_i64))
        );
        assert_eq!(approved.status, Status::Unset);
        let closed = spans.close_all(&at(&seen, 50));
        assert_eq!(
            attr(&closed[0], "approval.decision"),
            Some(&Value::from("approved"))
        );
    }

    #[test]
    fn after_a_restart_the_lifecycle_span_starts_at_the_remembered_first_sight() {
        let mut tracker = Tracker::new();
        let mut spans = EventSpans::new();
        let seen = ctx("vmss_0", 4, 100);
        tracker.resume(vec![Tracked {
            event: doc(3, Some("Scheduled")).events.remove(0),
            first_seen: t(10),
            seen_started: true,
        }]);
        for transition in tracker.observe(doc(4, Some("Started")), t(100)).transitions {
            spans.record(&transition, &seen);
        }
        let mut out = Vec::new();
        for transition in tracker.observe(doc(5, None), t(160)).transitions {
            out.extend(spans.record(&transition, &at(&seen, 160)));
        }
        let lifecycle = out.last().cloned().unwrap_or_else(|| panic!("no span"));
        assert_eq!(lifecycle.start_time, SystemTime::from(t(10)));
        assert_eq!(attr(&lifecycle, "seen_started"), Some(&Value::from(true)));
    }

    #[test]
    fn only_an_event_seen_started_completes_when_it_ended_while_the_agent_was_down() {
        let spans = EventSpans::new();
        let seen = ctx("web_0", 3, 100);
        let event = doc(1, Some("Started")).events.remove(0);
        let started = Tracked {
            event: event.clone(),
            first_seen: t(10),
            seen_started: true,
        };
        let span = spans
            .ended_while_down(&started, &seen)
            .unwrap_or_else(|| panic!("no span for an event seen Started"));
        assert_eq!(
            span.span_context.span_id(),
            SpanId::from(lifecycle_span_id(event.id.as_str(), "web_0"))
        );
        assert_eq!(span.start_time, SystemTime::from(t(10)));
        assert_eq!(attr(&span, "outcome"), Some(&Value::from("completed")));
        let scheduled = Tracked {
            seen_started: false,
            ..started
        };
        assert!(spans.ended_while_down(&scheduled, &seen).is_none());
    }

    #[test]
    fn stopping_ends_open_spans_as_open() {
        let mut tracker = Tracker::new();
        let mut spans = EventSpans::new();
        let seen = ctx("vmss_0", 1, 0);
        for transition in tracker.observe(doc(1, Some("Scheduled")), t(0)).transitions {
            spans.record(&transition, &seen);
        }
        assert_eq!(spans.open_count(), 1);
        let closed = spans.close_all(&at(&seen, 30));
        assert_eq!(closed.len(), 1);
        assert_eq!(attr(&closed[0], "outcome"), Some(&Value::from("open")));
        assert_eq!(spans.open_count(), 0);
    }
}
