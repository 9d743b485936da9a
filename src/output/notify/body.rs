//! What a notification says, and how each receiver format says it.
//!
//! [`Notification`] carries exactly the fields of the event's transition log line
//! ([`super::super::log`]) plus `timestamp`: it is the generic JSON body, the context of
//! templates, and what the Slack, Teams and PagerDuty bodies are built from. Absent values are
//! `null` rather than missing, so every body has the same keys.
//!
//! A receiver's template ([`Template`]) is the operator's code: it passes the startup check and
//! may still loop for hours or print gigabytes. It renders on a blocking thread, never the poll
//! loop's, within a budget of instructions and of output bytes; over either, the notification
//! fails as a template that cannot render does.

use std::sync::Arc;

use azure_scheduled_events_core::event::Event;
use azure_scheduled_events_core::subject::Subject;
use azure_scheduled_events_core::view::EventView;
use chrono::{DateTime, SecondsFormat, Utc};
use serde::Serialize;
use serde_json::{Value, json};

use crate::config::notify::{Dedup, Format, Receiver, severity, template_environment};

/// Instructions a template may run for one notification (MiniJinja's fuel): about a hundred times
/// what a template that walks every VM of a large event needs, and tens of milliseconds of CPU.
pub const TEMPLATE_FUEL: u64 = 1_000_000;

/// The most a template may write for one notification: a message, not a document.
pub const TEMPLATE_MAX_BYTES: usize = 64 * 1024;

/// A receiver's template, ready to render within its budget.
#[derive(Debug, Clone)]
pub struct Template {
    environment: Arc<minijinja::Environment<'static>>,
}

impl Template {
    const NAME: &'static str = "template";

    /// The template of `source` (checked at startup, so `None` only if it no longer parses).
    pub fn new(source: &str) -> Option<Self> {
        let mut environment = template_environment();
        environment.set_fuel(Some(TEMPLATE_FUEL));
        environment
            .add_template_owned(Self::NAME, source.to_owned())
            .ok()?;
        Some(Self {
            environment: Arc::new(environment),
        })
    }

    /// The text for `notification` to `receiver`, rendered on a blocking thread; an error says
    /// which budget ran out.
    pub async fn render(
        &self,
        receiver: &str,
        notification: &Notification,
    ) -> Result<String, String> {
        let environment = Arc::clone(&self.environment);
        let context = minijinja::context! {
            receiver => receiver,
            ..minijinja::Value::from_serialize(notification)
        };
        tokio::task::spawn_blocking(move || render(&environment, &context))
            .await
            .unwrap_or_else(|_| Err("the template panicked".into()))
    }
}

fn render(
    environment: &minijinja::Environment<'static>,
    context: &minijinja::Value,
) -> Result<String, String> {
    let template = environment
        .get_template(Template::NAME)
        .map_err(|e| e.to_string())?;
    let mut output = Capped(Vec::new());
    match template.render_captured_to(context, &mut output) {
        Ok(_) => String::from_utf8(output.0).map_err(|e| e.to_string()),
        Err(error) if error.kind() == minijinja::ErrorKind::OutOfFuel => Err(format!(
            "the template ran past its budget of {TEMPLATE_FUEL} instructions"
        )),
        Err(_) if output.0.len() >= TEMPLATE_MAX_BYTES => Err(format!(
            "the template wrote more than its budget of {TEMPLATE_MAX_BYTES} bytes"
        )),
        Err(error) => Err(error.to_string()),
    }
}

/// A buffer that refuses to grow past [`TEMPLATE_MAX_BYTES`], which stops the render.
struct Capped(Vec<u8>);

impl std::io::Write for Capped {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        if self.0.len() + bytes.len() > TEMPLATE_MAX_BYTES {
            self.0.resize(TEMPLATE_MAX_BYTES, 0);
            return Err(std::io::Error::other("over the output budget"));
        }
        self.0.extend_from_slice(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// One notification: a transition (or an approval) of one event, as this VM saw it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Notification {
    pub timestamp: String,
    pub transition: Subject,
    /// The event in one sentence, as its log line says it ([`azure_scheduled_events_core::view::summary`]).
    pub summary: String,
    /// The event, as the log line says it.
    #[serde(flatten)]
    pub event: EventView,
    pub changed: Option<String>,
    pub seen_started: Option<bool>,
    /// Whether Azure predicts a hardware failure ([`azure_scheduled_events_core::hardware_failure`]), on the
    /// notification that first reports the event (as on its log line); `None` on the others.
    pub hardware_failure_predicted: Option<bool>,
}

impl Notification {
    /// The notification of `transition` (`scheduled`, ..., `approved`) of the event `view`
    /// shows, with the details only some transitions have.
    pub fn new(
        transition: Subject,
        event: &Event,
        view: EventView,
        changed: Option<String>,
        seen_started: Option<bool>,
        at: DateTime<Utc>,
    ) -> Self {
        Self {
            timestamp: at.to_rfc3339_opts(SecondsFormat::Millis, true),
            transition,
            summary: azure_scheduled_events_core::view::summary(event, transition, at),
            event: view,
            changed,
            seen_started,
            hardware_failure_predicted: None,
        }
    }

    /// The title chat formats and Alertmanager show: what happens to which VMs, and when.
    pub fn headline(&self) -> String {
        let resources = if self.event.resources.is_empty() {
            "(no resources)"
        } else {
            &self.event.resources
        };
        let mut text = format!(
            "{} {}: {}",
            self.event.event_type, self.transition, resources
        );
        if !self.event.not_before.is_empty()
            && matches!(self.transition, Subject::Scheduled | Subject::Updated)
        {
            text.push_str(&format!(", not before {}", self.event.not_before));
        }
        text
    }

    fn vm(&self) -> &str {
        self.event.vm_name.as_deref().unwrap_or("unknown VM")
    }

    /// `Name: value` pairs shown by chat formats.
    fn facts(&self) -> Vec<(&'static str, String)> {
        let mut facts = vec![
            (
                "Event",
                format!("{} ({})", self.event.event_type, self.event.event_status),
            ),
            ("Resources", self.event.resources.clone()),
            ("Seen by", self.vm().to_owned()),
            ("EventId", self.event.event_id.clone()),
        ];
        if !self.event.not_before.is_empty() {
            facts.push(("NotBefore", self.event.not_before.clone()));
        }
        if let Some(duration) = self.event.duration_in_seconds.filter(|d| *d >= 0) {
            facts.push(("Duration", format!("{duration} s")));
        }
        if let Some(source) = &self.event.event_source {
            facts.push(("Source", source.clone()));
        }
        if let Some(description) = self.event.description.as_deref().filter(|d| !d.is_empty()) {
            facts.push(("Description", description.to_owned()));
        }
        facts
    }
}

/// The body for `format`; `text`, when a template rendered one, replaces the summary line
/// (for `json`, the template is the whole body and this is not called).
pub fn body(receiver: &Receiver, notification: &Notification, text: Option<String>) -> Value {
    let summary = notification.headline();
    match receiver.format {
        Format::Json => serde_json::to_value(notification).unwrap_or(Value::Null),
        Format::Slack => slack(notification, &summary, text.as_deref()),
        Format::Teams => teams(receiver, notification, &summary, text.as_deref()),
        Format::Pagerduty => pagerduty(receiver, notification, text.as_deref().unwrap_or(&summary)),
        // Sent as alerts by its own task ([`super::alertmanager`]), never as one body.
        Format::Alertmanager => Value::Null,
    }
}

/// Slack's limits: a header's text is at most 150 characters, a section's 3000, a field's 2000.
fn clip(text: &str, limit: usize) -> String {
    if text.chars().count() <= limit {
        return text.to_owned();
    }
    let mut clipped: String = text.chars().take(limit.saturating_sub(1)).collect();
    clipped.push('…');
    clipped
}

/// A Slack incoming-webhook message: `text` (the notification's fallback: the template's text,
/// else the summary) and Block Kit blocks: the summary as header, the template's text, the facts.
fn slack(notification: &Notification, summary: &str, text: Option<&str>) -> Value {
    let fields: Vec<Value> = notification
        .facts()
        .into_iter()
        .take(10)
        .map(|(name, value)| json!({"type": "mrkdwn", "text": clip(&format!("*{name}*\n{value}"), 2000)}))
        .collect();
    let mut blocks =
        vec![json!({"type": "header", "text": {"type": "plain_text", "text": clip(summary, 150)}})];
    if let Some(text) = text.filter(|t| !t.trim().is_empty()) {
        blocks
            .push(json!({"type": "section", "text": {"type": "mrkdwn", "text": clip(text, 3000)}}));
    }
    blocks.push(json!({"type": "section", "fields": fields}));
    json!({
        "text": text.unwrap_or(summary),
        "blocks": blocks,
    })
}

/// A Teams Workflows webhook message: one Adaptive Card (schema 1.4) as its attachment: the
/// summary, the template's text, the facts.
fn teams(
    receiver: &Receiver,
    notification: &Notification,
    summary: &str,
    text: Option<&str>,
) -> Value {
    let facts: Vec<Value> = notification
        .facts()
        .into_iter()
        .map(|(title, value)| json!({"title": title, "value": value}))
        .collect();
    let color = match event_severity(receiver, notification) {
        "critical" | "error" => "Attention",
        "warning" => "Warning",
        _ => "Good",
    };
    let mut elements = vec![
        json!({"type": "TextBlock", "text": summary, "weight": "Bolder",
        "size": "Medium", "color": color, "wrap": true}),
    ];
    if let Some(text) = text.filter(|t| !t.trim().is_empty()) {
        elements.push(json!({"type": "TextBlock", "text": text, "wrap": true}));
    }
    elements.push(json!({"type": "FactSet", "facts": facts}));
    json!({
        "type": "message",
        "attachments": [{
            "contentType": "application/vnd.microsoft.card.adaptive",
            "contentUrl": null,
            "content": {
                "$schema": "http://adaptivecards.io/schemas/adaptive-card.json",
                "type": "AdaptiveCard",
                "version": "1.4",
                "body": elements,
            },
        }],
    })
}

/// The severity of an event per the paging policy and the receiver's `severities`: one VM's
/// event is `warning` (a Spot eviction and an advisory `info`); an end is `info`.
fn event_severity(receiver: &Receiver, notification: &Notification) -> &'static str {
    match notification.transition {
        Subject::Completed | Subject::Cancelled | Subject::Advisory => "info",
        _ => severity(
            &receiver.severities,
            &notification.event.event_type,
            notification.event.advisory,
        ),
    }
}

/// PagerDuty's `dedup_key`: the EventId, so every VM of a host operation adds to one incident;
/// `<EventId>/<vm>` when the receiver asks for one incident per VM.
pub fn dedup_key(receiver: &Receiver, notification: &Notification) -> String {
    match receiver.dedup_key {
        Dedup::Event => notification.event.event_id.clone(),
        Dedup::EventAndVm => format!(
            "{}/{}",
            notification.event.event_id,
            notification.event.vm_name.as_deref().unwrap_or("unknown")
        ),
    }
}

/// The VMs an event names (`Resources`).
fn affected_vms(notification: &Notification) -> Vec<&str> {
    notification
        .event
        .resources
        .split(',')
        .map(str::trim)
        .filter(|vm| !vm.is_empty())
        .collect()
}

/// A PagerDuty Events API v2 event: the incident opens when the event is scheduled (or starts)
/// and resolves itself when it completes or is cancelled.
fn pagerduty(receiver: &Receiver, notification: &Notification, summary: &str) -> Value {
    let action = if notification.transition.is_end() {
        "resolve"
    } else {
        "trigger"
    };
    let mut details = serde_json::to_value(notification).unwrap_or(Value::Null);
    if let Some(details) = details.as_object_mut() {
        details.insert("affected_vms".into(), json!(affected_vms(notification)));
    }
    json!({
        "routing_key": receiver.routing_key.as_deref().unwrap_or_default(),
        "event_action": action,
        "dedup_key": dedup_key(receiver, notification),
        "payload": {
            "summary": clip(summary, 1024),
            "source": notification.vm(),
            "severity": event_severity(receiver, notification),
            "timestamp": notification.timestamp,
            "component": notification.event.resources,
            "group": notification.event.resource_type,
            "class": notification.event.event_type,
            "custom_details": details,
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::notify::FIELDS;

    fn receiver(format: Format) -> Receiver {
        let mut receiver = Receiver::new(
            "r",
            format,
            reqwest::Url::parse("http://127.0.0.1:9/").unwrap_or_else(|e| panic!("{e}")),
        );
        receiver.routing_key = Some("key".into());
        receiver
    }
    use azure_scheduled_events_core::event::Document;

    fn freeze() -> Option<Event> {
        let document = Document::from_json(
            br#"{"DocumentIncarnation": 2, "Events": [{"EventId": "C7061BAC-AFDC-4513-B24B-AA5F13A16123",
              "EventStatus": "Scheduled", "EventType": "Freeze", "ResourceType": "VirtualMachine",
              "Resources": ["vm_0", "vm_1"], "NotBefore": "Mon, 11 Apr 2022 22:26:58 GMT",
              "Description": "Live Migration", "EventSource": "Platform", "DurationInSeconds": 5}]}"#,
        )
        .ok()?;
        document.events.into_iter().next()
    }

    fn notification(transition: Subject) -> Option<Notification> {
        let event = freeze()?;
        Some(Notification::new(
            transition,
            &event,
            EventView::new(&event, Some("vm_0"), Some(2), 1),
            None,
            None,
            DateTime::UNIX_EPOCH,
        ))
    }

    #[test]
    fn the_generic_body_has_exactly_the_documented_fields() -> Result<(), String> {
        let body = body(
            &receiver(Format::Json),
            &notification(Subject::Scheduled).ok_or("no event")?,
            None,
        );
        let keys: Vec<&str> = body
            .as_object()
            .ok_or("not an object")?
            .keys()
            .map(String::as_str)
            .collect();
        let mut expected = FIELDS.to_vec();
        expected.sort_unstable();
        let mut keys = keys;
        keys.sort_unstable();
        assert_eq!(keys, expected);
        assert_eq!(body["affects_this_vm"], "true");
        assert_eq!(body["resources"], "vm_0,vm_1");
        Ok(())
    }

    #[test]
    fn pagerduty_resolves_what_it_triggered() -> Result<(), String> {
        let pagerduty = receiver(Format::Pagerduty);
        let trigger = body(
            &pagerduty,
            &notification(Subject::Scheduled).ok_or("no event")?,
            None,
        );
        let resolve = body(
            &pagerduty,
            &notification(Subject::Completed).ok_or("no event")?,
            None,
        );
        assert_eq!(trigger["event_action"], "trigger");
        assert_eq!(resolve["event_action"], "resolve");
        assert_eq!(trigger["dedup_key"], resolve["dedup_key"]);
        assert_eq!(
            trigger["dedup_key"], "C7061BAC-AFDC-4513-B24B-AA5F13A16123",
            "one incident per host operation, whichever VM sends"
        );
        assert_eq!(trigger["payload"]["severity"], "warning");
        assert_eq!(
            trigger["payload"]["custom_details"]["affected_vms"],
            json!(["vm_0", "vm_1"])
        );
        Ok(())
    }

    #[test]
    fn pagerduty_can_open_one_incident_per_vm_and_never_pages_for_one_vms_eviction_by_default()
    -> Result<(), String> {
        let mut pagerduty = receiver(Format::Pagerduty);
        pagerduty.dedup_key = Dedup::EventAndVm;
        let trigger = body(
            &pagerduty,
            &notification(Subject::Scheduled).ok_or("no event")?,
            None,
        );
        assert_eq!(
            trigger["dedup_key"],
            "C7061BAC-AFDC-4513-B24B-AA5F13A16123/vm_0"
        );
        let mut eviction = notification(Subject::Scheduled).ok_or("no event")?;
        for (event_type, expected) in [
            ("Preempt", "info"),
            ("Terminate", "warning"),
            ("Reboot", "warning"),
        ] {
            eviction.event.event_type = event_type.into();
            assert_eq!(
                body(&pagerduty, &eviction, None)["payload"]["severity"],
                expected,
                "{event_type}"
            );
        }
        pagerduty.severities.insert("Reboot".into(), "error");
        assert_eq!(
            body(&pagerduty, &eviction, None)["payload"]["severity"],
            "error"
        );
        Ok(())
    }

    #[test]
    fn slack_texts_are_clipped_to_slacks_limits() {
        let long = "x".repeat(200);
        assert_eq!(clip(&long, 150).chars().count(), 150);
        assert_eq!(clip("short", 150), "short");
    }

    #[tokio::test]
    async fn a_template_renders_within_its_budget() -> Result<(), String> {
        let notification = notification(Subject::Scheduled).ok_or("no event")?;
        let template = Template::new("{{ event_type }} on {{ vm_name }} for {{ receiver }}: {% for i in range(2) %}{{ resources }} {% endfor %}")
            .ok_or("does not parse")?;
        assert_eq!(
            template.render("ops", &notification).await?,
            "Freeze on vm_0 for ops: vm_0,vm_1 vm_0,vm_1 "
        );
        Ok(())
    }

    #[tokio::test]
    async fn a_template_over_its_budget_stops_and_names_the_budget() -> Result<(), String> {
        let notification = notification(Subject::Scheduled).ok_or("no event")?;
        for (source, budget) in [
            // Loops that write nothing: the instruction budget stops them.
            (
                "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}",
                "budget of 1000000 instructions",
            ),
            // Few instructions, much text: the output budget stops it.
            (
                "{% for i in range(2000) %}{{ event_id }}{{ description }}{% endfor %}",
                "budget of 65536 bytes",
            ),
        ] {
            let template = Template::new(source).ok_or("does not parse")?;
            let error = template
                .render("ops", &notification)
                .await
                .err()
                .ok_or("rendered")?;
            assert!(error.contains(budget), "{source}: {error}");
        }
        Ok(())
    }
}
