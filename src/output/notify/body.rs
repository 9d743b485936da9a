//! What a notification says, and how each receiver format says it.
//!
//! [`Notification`] carries exactly the fields of the event's transition log line
//! ([`super::super::log`]) plus `timestamp`: it is the generic JSON body, the context of
//! templates, and what the Slack, Teams and PagerDuty bodies are built from. Absent values are
//! `null` rather than missing, so every body has the same keys.

use chrono::{DateTime, SecondsFormat, Utc};
use serde::Serialize;
use serde_json::{Value, json};

use crate::config::notify::Format;
use crate::event::EventType;
use crate::view::EventView;

/// One notification: a transition (or an approval) of one event, as this VM saw it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Notification {
    pub timestamp: String,
    pub transition: &'static str,
    /// The event, as the log line says it.
    #[serde(flatten)]
    pub event: EventView,
    pub changed: Option<String>,
    pub seen_started: Option<bool>,
}

impl Notification {
    /// The notification of `transition` (`scheduled`, ..., `approved`) of the event `view`
    /// shows, with the details only some transitions have.
    pub fn new(
        transition: &'static str,
        view: EventView,
        changed: Option<String>,
        seen_started: Option<bool>,
        at: DateTime<Utc>,
    ) -> Self {
        Self {
            timestamp: at.to_rfc3339_opts(SecondsFormat::Millis, true),
            transition,
            event: view,
            changed,
            seen_started,
        }
    }

    /// One line for people: what happens to which VMs, and when.
    pub fn summary(&self) -> String {
        let resources = if self.event.resources.is_empty() {
            "(no resources)"
        } else {
            &self.event.resources
        };
        let mut text = format!(
            "{} {}: {}",
            self.event.event_type, self.transition, resources
        );
        if !self.event.not_before.is_empty() && matches!(self.transition, "scheduled" | "updated") {
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
pub fn body(
    format: Format,
    notification: &Notification,
    text: Option<String>,
    routing_key: Option<&str>,
) -> Value {
    let summary = notification.summary();
    match format {
        Format::Json => serde_json::to_value(notification).unwrap_or(Value::Null),
        Format::Slack => slack(notification, &summary, text.as_deref()),
        Format::Teams => teams(notification, &summary, text.as_deref()),
        Format::Pagerduty => pagerduty(
            notification,
            text.as_deref().unwrap_or(&summary),
            routing_key.unwrap_or_default(),
        ),
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
fn teams(notification: &Notification, summary: &str, text: Option<&str>) -> Value {
    let facts: Vec<Value> = notification
        .facts()
        .into_iter()
        .map(|(title, value)| json!({"title": title, "value": value}))
        .collect();
    let color = match severity(notification) {
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

/// The PagerDuty severity of an event: what it does to the VM.
fn severity(notification: &Notification) -> &'static str {
    match notification.transition {
        "completed" | "cancelled" => "info",
        _ => match EventType::parse(&notification.event.event_type) {
            EventType::Preempt | EventType::Terminate => "critical",
            EventType::Reboot | EventType::Redeploy => "error",
            EventType::Freeze | EventType::Other(_) => "warning",
        },
    }
}

/// PagerDuty's `dedup_key`: one incident per event and VM.
pub fn dedup_key(notification: &Notification) -> String {
    format!(
        "{}/{}",
        notification.event.event_id,
        notification.event.vm_name.as_deref().unwrap_or("unknown")
    )
}

/// A PagerDuty Events API v2 event: the incident opens when the event is scheduled (or starts)
/// and resolves itself when it completes or is cancelled.
fn pagerduty(notification: &Notification, summary: &str, routing_key: &str) -> Value {
    let action = match notification.transition {
        "completed" | "cancelled" => "resolve",
        _ => "trigger",
    };
    json!({
        "routing_key": routing_key,
        "event_action": action,
        "dedup_key": dedup_key(notification),
        "payload": {
            "summary": clip(summary, 1024),
            "source": notification.vm(),
            "severity": severity(notification),
            "timestamp": notification.timestamp,
            "component": notification.event.resources,
            "group": notification.event.resource_type,
            "class": notification.event.event_type,
            "custom_details": notification,
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::notify::FIELDS;
    use crate::event::{Document, Event};

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

    fn notification(transition: &'static str) -> Option<Notification> {
        let event = freeze()?;
        Some(Notification::new(
            transition,
            EventView::new(&event, Some("vm_0"), Some(2), 1),
            None,
            None,
            DateTime::UNIX_EPOCH,
        ))
    }

    #[test]
    fn the_generic_body_has_exactly_the_documented_fields() -> Result<(), String> {
        let body = body(
            Format::Json,
            &notification("scheduled").ok_or("no event")?,
            None,
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
        let trigger = body(
            Format::Pagerduty,
            &notification("scheduled").ok_or("no event")?,
            None,
            Some("key"),
        );
        let resolve = body(
            Format::Pagerduty,
            &notification("completed").ok_or("no event")?,
            None,
            Some("key"),
        );
        assert_eq!(trigger["event_action"], "trigger");
        assert_eq!(resolve["event_action"], "resolve");
        assert_eq!(trigger["dedup_key"], resolve["dedup_key"]);
        assert_eq!(trigger["payload"]["severity"], "warning");
        Ok(())
    }

    #[test]
    fn slack_texts_are_clipped_to_slacks_limits() {
        let long = "x".repeat(200);
        assert_eq!(clip(&long, 150).chars().count(), 150);
        assert_eq!(clip("short", 150), "short");
    }
}
