//! The `alertmanager` receiver: each event this VM sees is one alert, posted to every
//! Alertmanager of the receiver (`/api/v2/alerts`), as Prometheus posts its alerts.
//!
//! An alert's labels are the same for every VM of one event but `vm_name` (and the scale set
//! and node), so a route with `group_by: [event_id]` makes one notification of all the VMs a
//! host operation touches. The alert starts when the event is first seen and ends when it
//! completes or is cancelled. Active alerts are re-sent every `resend_interval` with `endsAt`
//! four intervals ahead (Prometheus' rule), so an Alertmanager that restarts or fails over gets
//! them back within an interval, and an agent that stops for good lets them expire. A resolved
//! alert is re-sent, to each Alertmanager, until that one accepts it. All of it happens in the
//! receiver's own task: polling never waits for an Alertmanager.

use std::collections::BTreeMap;
use std::time::Duration;

use chrono::{DateTime, SecondsFormat, Utc};
use reqwest::header::{CONTENT_TYPE, HeaderValue};
use serde_json::{Map, Value, json};
use tokio::sync::mpsc;
use tokio::time::{Instant, MissedTickBehavior};

use super::body::Notification;
use super::delivery::Job;
use super::metrics::NotifyMetrics;
use crate::config::notify::{Receiver, severity};

/// The alert's name: one for every event.
pub const ALERTNAME: &str = "AzureScheduledEvent";

/// Alerts kept at most (active, or resolved and not yet accepted): a VM sees a handful of
/// events at a time; beyond this, the oldest resolved ones are forgotten first.
const MAX_ALERTS: usize = 1024;

/// How long a resolved alert is offered to an Alertmanager that keeps refusing it.
const RESOLVED_KEPT: chrono::TimeDelta = chrono::TimeDelta::hours(1);

/// One event as an alert, and which Alertmanagers still have to accept its latest state.
#[derive(Debug, Clone)]
struct Alert {
    labels: Map<String, Value>,
    annotations: Map<String, Value>,
    starts_at: DateTime<Utc>,
    /// Set when the event completed or was cancelled.
    ends_at: Option<DateTime<Utc>>,
    /// Index in the receiver's URLs of each Alertmanager that has not accepted this state.
    pending: Vec<usize>,
}

impl Alert {
    fn json(&self, now: DateTime<Utc>, resend: Duration) -> Value {
        let ends_at = self.ends_at.unwrap_or_else(|| {
            now + chrono::TimeDelta::from_std(resend * 4).unwrap_or(chrono::TimeDelta::hours(1))
        });
        json!({
            "labels": self.labels,
            "annotations": self.annotations,
            "startsAt": self.starts_at.to_rfc3339_opts(SecondsFormat::Millis, true),
            "endsAt": ends_at.to_rfc3339_opts(SecondsFormat::Millis, true),
        })
    }
}

/// The scale set of a VM whose name in `Resources` is a scale-set instance's,
/// `<scale set>_<instance id>`: this VM's scale set until instance metadata says it.
pub fn scale_set(vm_name: &str) -> Option<&str> {
    let (set, instance) = vm_name.rsplit_once('_')?;
    (!set.is_empty() && !instance.is_empty() && instance.bytes().all(|b| b.is_ascii_digit()))
        .then_some(set)
}

/// This VM's identity on its alerts, besides its name.
#[derive(Debug, Clone, Copy, Default)]
pub struct Identity<'a> {
    /// The scale set instance metadata names (absent when the VM is in none).
    pub vm_scale_set_name: Option<&'a str>,
    /// The Kubernetes Node, with `--kubernetes.node-name`.
    pub node: Option<&'a str>,
}

/// The labels of `notification`'s alert: the same for every VM of the event but this VM's
/// identity.
pub fn labels(
    receiver: &Receiver,
    notification: &Notification,
    identity: Identity,
) -> Map<String, Value> {
    let event = &notification.event;
    let mut labels = Map::new();
    labels.insert("alertname".into(), ALERTNAME.into());
    labels.insert("event_id".into(), event.event_id.clone().into());
    labels.insert("event_type".into(), event.event_type.clone().into());
    if let Some(source) = &event.event_source {
        labels.insert("event_source".into(), source.clone().into());
    }
    labels.insert(
        "severity".into(),
        severity(&receiver.severities, &event.event_type, event.advisory).into(),
    );
    if let Some(vm) = event.vm_name.as_deref().filter(|vm| !vm.is_empty()) {
        labels.insert("vm_name".into(), vm.into());
    }
    if let Some(set) = identity.vm_scale_set_name.filter(|set| !set.is_empty()) {
        labels.insert("vm_scale_set_name".into(), set.into());
    }
    if let Some(node) = identity.node.filter(|node| !node.is_empty()) {
        labels.insert("node".into(), node.into());
    }
    labels
}

/// The annotations of `notification`'s alert: what people read.
pub fn annotations(receiver: &Receiver, notification: &Notification) -> Map<String, Value> {
    let event = &notification.event;
    let mut annotations = Map::new();
    annotations.insert("summary".into(), notification.headline().into());
    annotations.insert(
        "description".into(),
        event
            .description
            .clone()
            .filter(|d| !d.is_empty())
            .unwrap_or_else(|| format!("{} {}", event.event_type, event.event_status))
            .into(),
    );
    annotations.insert("event_status".into(), event.event_status.clone().into());
    annotations.insert("transition".into(), notification.transition.as_str().into());
    annotations.insert("resources".into(), event.resources.clone().into());
    annotations.insert("not_before".into(), event.not_before.clone().into());
    if let Some(duration) = event.duration_in_seconds {
        annotations.insert("duration_in_seconds".into(), duration.to_string().into());
    }
    annotations.insert("trace_id".into(), event.trace_id.clone().into());
    annotations.insert("runbook_url".into(), receiver.runbook_url.clone().into());
    annotations
}

/// The alerts of one receiver, by EventId.
#[derive(Debug, Default)]
struct Alerts {
    by_event: BTreeMap<String, Alert>,
}

impl Alerts {
    /// Folds in one notification seen at `at`.
    fn apply(
        &mut self,
        receiver: &Receiver,
        identity: Identity,
        notification: &Notification,
        at: DateTime<Utc>,
    ) {
        let all: Vec<usize> = (0..receiver.urls.len()).collect();
        let id = notification.event.event_id.clone();
        let ended = notification.transition.is_end();
        let labels = labels(receiver, notification, identity);
        let annotations = annotations(receiver, notification);
        match self.by_event.get_mut(&id) {
            // The same alert, if this VM's identity did not change meanwhile.
            Some(alert) if alert.labels == labels || ended => {
                alert.annotations = annotations;
                if ended {
                    alert.ends_at.get_or_insert(at);
                } else {
                    alert.ends_at = None;
                }
                alert.pending = all;
            }
            known => {
                // An event seen again after it ended (or under a new identity) is a new alert;
                // the old one expires by its own endsAt.
                let starts_at = known
                    .filter(|alert| alert.ends_at.is_none())
                    .map_or(at, |alert| alert.starts_at);
                if ended {
                    // Never active here: nothing to resolve.
                    return;
                }
                self.by_event.insert(
                    id,
                    Alert {
                        labels,
                        annotations,
                        starts_at,
                        ends_at: None,
                        pending: all,
                    },
                );
            }
        }
        self.trim(at);
    }

    /// Forgets resolved alerts that every Alertmanager accepted, those refused for too long,
    /// and the oldest resolved ones beyond [`MAX_ALERTS`].
    fn trim(&mut self, now: DateTime<Utc>) {
        self.by_event.retain(|_, alert| match alert.ends_at {
            None => true,
            Some(ended) => !alert.pending.is_empty() && now - ended < RESOLVED_KEPT,
        });
        while self.by_event.len() > MAX_ALERTS {
            let oldest = self
                .by_event
                .iter()
                .min_by_key(|(_, alert)| (alert.ends_at.is_none(), alert.ends_at, alert.starts_at))
                .map(|(id, _)| id.clone());
            match oldest {
                Some(id) => self.by_event.remove(&id),
                None => break,
            };
        }
    }

    /// What Alertmanager `index` is sent: every active alert when `all`, else only the alerts
    /// it has not accepted yet; resolved ones until it accepts them.
    fn batch(
        &self,
        index: usize,
        all: bool,
        now: DateTime<Utc>,
        resend: Duration,
    ) -> Vec<(String, Value)> {
        self.by_event
            .iter()
            .filter(|(_, alert)| alert.pending.contains(&index) || (all && alert.ends_at.is_none()))
            .map(|(id, alert)| (id.clone(), alert.json(now, resend)))
            .collect()
    }

    fn accepted(&mut self, index: usize, ids: &[String]) {
        for id in ids {
            if let Some(alert) = self.by_event.get_mut(id) {
                alert.pending.retain(|&i| i != index);
            }
        }
    }
}

/// Sends the alerts `jobs` brings to every Alertmanager of `receiver`, and re-sends them,
/// until the queue closes.
pub async fn run(
    receiver: Receiver,
    node: Option<String>,
    client: reqwest::Client,
    mut jobs: mpsc::Receiver<Job>,
    metrics: NotifyMetrics,
) {
    let name = receiver.name.as_str();
    let mut alerts = Alerts::default();
    let mut resend = tokio::time::interval_at(
        Instant::now() + receiver.resend_interval,
        receiver.resend_interval,
    );
    resend.set_missed_tick_behavior(MissedTickBehavior::Delay);
    // Alerts not accepted are retried sooner than the resend interval, but not in a loop.
    let retry = receiver.resend_interval.min(Duration::from_secs(5));
    let mut next_retry: Option<Instant> = None;
    loop {
        let (all, seen) = tokio::select! {
            job = jobs.recv() => match job {
                Some(first) => {
                    // Whatever else is queued goes in the same POST.
                    let mut seen_first = first.seen;
                    let mut next = Some(first);
                    while let Some(job) = next {
                        let identity = Identity {
                            vm_scale_set_name: job.vm_scale_set_name.as_deref(),
                            node: node.as_deref(),
                        };
                        alerts.apply(&receiver, identity, &job.notification, Utc::now());
                        seen_first = seen_first.min(job.seen);
                        next = jobs.try_recv().ok();
                    }
                    (false, Some(seen_first))
                }
                None => break,
            },
            _ = resend.tick() => (true, None),
            () = sleep_until(next_retry) => (false, None),
        };
        next_retry = None;
        let now = Utc::now();
        for (index, url) in receiver.urls.iter().enumerate() {
            let batch = alerts.batch(index, all, now, receiver.resend_interval);
            if batch.is_empty() {
                continue;
            }
            let (ids, bodies): (Vec<String>, Vec<Value>) = batch.into_iter().unzip();
            match post(&client, &receiver, url, &bodies).await {
                Ok(()) => {
                    alerts.accepted(index, &ids);
                    if let Some(seen) = seen {
                        metrics.record(name, "delivered", seen.elapsed());
                    }
                    tracing::debug!(
                        receiver = name,
                        alertmanager = index,
                        alerts = ids.len(),
                        "alerts sent to Alertmanager"
                    );
                }
                Err(error) => {
                    if let Some(seen) = seen {
                        metrics.record(name, "failed", seen.elapsed());
                    }
                    next_retry = Some(Instant::now() + retry);
                    tracing::warn!(
                        receiver = name,
                        alertmanager = %endpoint(url),
                        alerts = ids.len(),
                        error = %error,
                        retry_in = ?retry,
                        "alerts not accepted by Alertmanager yet, sending again"
                    );
                }
            }
        }
        alerts.trim(now);
    }
    // Stopping: one last try for what is not accepted (resolves, above all).
    let now = Utc::now();
    for (index, url) in receiver.urls.iter().enumerate() {
        let batch = alerts.batch(index, false, now, receiver.resend_interval);
        if batch.is_empty() {
            continue;
        }
        let bodies: Vec<Value> = batch.into_iter().map(|(_, body)| body).collect();
        if let Err(error) = post(&client, &receiver, url, &bodies).await {
            tracing::warn!(
                receiver = name,
                alertmanager = %endpoint(url),
                error = %error,
                "alerts not accepted by Alertmanager when the agent stopped"
            );
        }
    }
}

async fn sleep_until(deadline: Option<Instant>) {
    match deadline {
        Some(deadline) => tokio::time::sleep_until(deadline).await,
        None => std::future::pending().await,
    }
}

/// The URL without path, query or credentials: what logs may show.
fn endpoint(url: &reqwest::Url) -> String {
    format!(
        "{}://{}{}",
        url.scheme(),
        url.host_str().unwrap_or(""),
        url.port().map(|p| format!(":{p}")).unwrap_or_default()
    )
}

/// One POST of `alerts`; a 2xx answer is acceptance.
async fn post(
    client: &reqwest::Client,
    receiver: &Receiver,
    url: &reqwest::Url,
    alerts: &[Value],
) -> Result<(), String> {
    let body = serde_json::to_vec(alerts).map_err(|e| e.to_string())?;
    let mut request = client
        .post(url.clone())
        .header(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    for (header, value) in &receiver.headers {
        request = request.header(header, value);
    }
    let response = request
        .body(body)
        .send()
        .await
        .map_err(|e| e.without_url().to_string())?;
    let status = response.status();
    if status.is_success() {
        return Ok(());
    }
    let answer = response.text().await.unwrap_or_default();
    let answer: String = answer.chars().take(512).collect();
    Err(format!(
        "HTTP {status}: {}",
        answer.split_whitespace().collect::<Vec<_>>().join(" ")
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::notify::Format;
    use azure_scheduled_events_core::event::Document;
    use azure_scheduled_events_core::subject::Subject;
    use azure_scheduled_events_core::view::EventView;

    fn receiver(urls: usize) -> Receiver {
        let url = |port: usize| {
            reqwest::Url::parse(&format!("http://127.0.0.1:{port}/api/v2/alerts"))
                .unwrap_or_else(|e| panic!("{e}"))
        };
        let mut receiver = Receiver::new("am", Format::Alertmanager, url(9));
        receiver.urls = (0..urls).map(|i| url(9 + i)).collect();
        receiver
    }

    fn notification(transition: Subject, vm: &str, event_type: &str, status: &str) -> Notification {
        let document = Document::from_json(
            format!(
                r#"{{"DocumentIncarnation":1,"Events":[{{"EventId":"E1","EventStatus":"{status}","EventType":"{event_type}",
                "ResourceType":"VirtualMachine","Resources":["pool_1","pool_2"],"NotBefore":"",
                "EventSource":"Platform","DurationInSeconds":9}}]}}"#
            )
            .as_bytes(),
        )
        .unwrap_or_else(|e| panic!("{e}"));
        let event = document
            .events
            .into_iter()
            .next()
            .unwrap_or_else(|| panic!("no event"));
        Notification::new(
            transition,
            &event,
            EventView::new(&event, Some(vm), Some(1), 1),
            None,
            None,
            Utc::now(),
        )
    }

    #[test]
    fn vms_of_one_event_differ_only_in_their_identity() {
        let r = receiver(1);
        let mut one = labels(
            &r,
            &notification(Subject::Scheduled, "pool_1", "Reboot", "Scheduled"),
            Identity {
                vm_scale_set_name: Some("pool"),
                node: Some("node-a"),
            },
        );
        let mut two = labels(
            &r,
            &notification(Subject::Scheduled, "pool_2", "Reboot", "Scheduled"),
            Identity {
                vm_scale_set_name: Some("pool"),
                node: None,
            },
        );
        assert_eq!(one["vm_scale_set_name"], "pool");
        assert_eq!(one["severity"], "warning", "one VM's reboot does not page");
        assert_eq!(one["node"], "node-a");
        for identity in ["vm_name", "node"] {
            one.remove(identity);
            two.remove(identity);
        }
        assert_eq!(one, two);
    }

    #[test]
    fn severities_follow_the_paging_policy_and_an_advisory_is_info_whatever_is_configured() {
        let mut r = receiver(1);
        let of = |r: &Receiver, event_type: &str, status: &str| {
            labels(
                r,
                &notification(Subject::Scheduled, "pool_1", event_type, status),
                Identity::default(),
            )["severity"]
                .clone()
        };
        assert_eq!(of(&r, "Preempt", "Scheduled"), "info");
        assert_eq!(of(&r, "Terminate", "Scheduled"), "warning");
        r.severities.insert("Reboot".into(), "critical");
        r.severities
            .insert("SpotRebalanceRecommendation".into(), "critical");
        assert_eq!(of(&r, "Reboot", "Scheduled"), "critical");
        assert_eq!(of(&r, "SpotRebalanceRecommendation", "Advisory"), "info");
    }

    #[test]
    fn an_alert_starts_when_first_seen_ends_when_completed_and_is_resent_until_accepted() {
        let r = receiver(2);
        let mut alerts = Alerts::default();
        let t0 = Utc::now();
        let t1 = t0 + chrono::TimeDelta::seconds(30);
        let resend = Duration::from_secs(60);
        alerts.apply(
            &r,
            Identity::default(),
            &notification(Subject::Scheduled, "pool_1", "Reboot", "Scheduled"),
            t0,
        );
        alerts.apply(
            &r,
            Identity::default(),
            &notification(Subject::Started, "pool_1", "Reboot", "Started"),
            t1,
        );
        let sent = alerts.batch(0, false, t1, resend);
        assert_eq!(sent.len(), 1);
        let alert = &sent[0].1;
        assert_eq!(
            alert["startsAt"],
            t0.to_rfc3339_opts(SecondsFormat::Millis, true)
        );
        assert_eq!(alert["annotations"]["event_status"], "Started");
        assert_eq!(
            alert["endsAt"],
            (t1 + chrono::TimeDelta::minutes(4)).to_rfc3339_opts(SecondsFormat::Millis, true),
            "an active alert ends four resend intervals ahead unless sent again"
        );
        alerts.accepted(0, &["E1".to_owned()]);
        assert!(alerts.batch(0, false, t1, resend).is_empty());
        assert_eq!(
            alerts.batch(0, true, t1, resend).len(),
            1,
            "active: re-sent on the interval"
        );
        assert_eq!(
            alerts.batch(1, false, t1, resend).len(),
            1,
            "the second one has not accepted"
        );

        let t2 = t1 + chrono::TimeDelta::seconds(30);
        alerts.apply(
            &r,
            Identity::default(),
            &notification(Subject::Completed, "pool_1", "Reboot", "Started"),
            t2,
        );
        for index in [0, 1] {
            let sent = alerts.batch(index, false, t2, resend);
            assert_eq!(sent.len(), 1);
            assert_eq!(
                sent[0].1["endsAt"],
                t2.to_rfc3339_opts(SecondsFormat::Millis, true)
            );
        }
        alerts.accepted(0, &["E1".to_owned()]);
        alerts.trim(t2);
        assert!(
            alerts.batch(0, true, t2, resend).is_empty(),
            "resolved and accepted: not re-sent"
        );
        assert_eq!(
            alerts.batch(1, true, t2, resend).len(),
            1,
            "the resolve is sent until accepted"
        );
        alerts.accepted(1, &["E1".to_owned()]);
        alerts.trim(t2);
        assert!(alerts.by_event.is_empty());
    }

    #[test]
    fn scale_sets_are_read_from_instance_names_only() {
        assert_eq!(scale_set("aks-nodepool1-123_7"), Some("aks-nodepool1-123"));
        assert_eq!(scale_set("web01"), None);
        assert_eq!(scale_set("my_vm_name"), None);
        assert_eq!(scale_set("_7"), None);
    }
}
