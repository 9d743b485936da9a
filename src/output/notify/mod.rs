//! The notification output: each transition (and, when asked, each approval) pushed to the
//! configured receivers: generic JSON webhooks, Slack, Microsoft Teams, PagerDuty, and
//! Alertmanager ([`alertmanager`]: alerts kept and re-sent, rather than messages).
//!
//! Who gets what is decided in the core ([`azure_scheduled_events_core::notices`]), which says it as
//! [`Occurrence::Notify`]; the state output has recorded it in the state file by the time this
//! output sees it, so a restart never sends it again (at most once, as for approvals). Here each
//! notice becomes one body ([`body`], from the batch's view of the event) queued to each of its
//! receivers. Sending happens in one task per receiver ([`delivery`]) behind a bounded queue; a
//! notification that does not fit is dropped and counted.

pub mod alertmanager;
pub mod body;
pub mod delivery;
pub mod metrics;

use std::sync::Arc;
use std::time::Duration;

use azure_scheduled_events_core::occurrence::{Context, Occurrence};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::config::notify::{Format, NotifyConfig};

use self::body::Notification;
use self::delivery::Job;
use self::metrics::NotifyMetrics;
use super::Output;
use super::limited_log::{self, Limited};

/// Notifications waiting per receiver at most: a document holds a handful of events, each with
/// a few transitions, so a full queue means the receiver has been failing for minutes.
const QUEUE: usize = 256;

/// Time the receivers get to finish what is queued when the agent stops.
const STOP_GRACE: Duration = Duration::from_secs(5);

#[derive(Debug)]
struct Route {
    name: String,
    queue: Option<mpsc::Sender<Job>>,
    task: Option<JoinHandle<()>>,
    /// The warning of a dropped notification, once a minute.
    dropped: Limited,
}

#[derive(Debug)]
pub struct Notify {
    routes: Vec<Route>,
    metrics: NotifyMetrics,
    /// This VM's scale set as instance metadata names it (`Some(None)`: in none), once read.
    vm_scale_set_name: Option<Option<Arc<str>>>,
}

impl Notify {
    /// Starts one sending task per receiver on the current runtime; `node` is this machine's
    /// Kubernetes Node, when known (a label of Alertmanager alerts).
    pub fn start(
        config: &NotifyConfig,
        node: Option<&str>,
        metrics: NotifyMetrics,
    ) -> Result<Self, reqwest::Error> {
        let mut routes = Vec::new();
        for receiver in &config.receivers {
            let client = delivery::client(receiver)?;
            let (queue, jobs) = mpsc::channel(QUEUE);
            let task = match receiver.format {
                Format::Alertmanager => tokio::spawn(alertmanager::run(
                    receiver.clone(),
                    node.map(str::to_owned),
                    client,
                    jobs,
                    metrics.clone(),
                )),
                _ => tokio::spawn(delivery::run(
                    receiver.clone(),
                    client,
                    jobs,
                    metrics.clone(),
                )),
            };
            routes.push(Route {
                name: receiver.name.clone(),
                queue: Some(queue),
                dropped: Limited::new(limited_log::EVERY),
                task: Some(task),
            });
        }
        Ok(Self {
            routes,
            metrics,
            vm_scale_set_name: None,
        })
    }
}

#[async_trait::async_trait]
impl Output for Notify {
    fn consume(&mut self, context: &Context, occurrences: &[Occurrence]) {
        let seen = Instant::now();
        for occurrence in occurrences {
            let notice = match occurrence {
                Occurrence::Notify(notice) => notice,
                Occurrence::VmIdentified { compute, .. } => {
                    let set = compute.vm_scale_set_name.as_str();
                    self.vm_scale_set_name = Some((!set.is_empty()).then(|| Arc::from(set)));
                    continue;
                }
                _ => continue,
            };
            // Until instance metadata is read, a scale-set instance's name says its scale set.
            let vm_scale_set_name = match &self.vm_scale_set_name {
                Some(known) => known.clone(),
                None => context
                    .vm_name()
                    .and_then(alertmanager::scale_set)
                    .map(Arc::from),
            };
            let notification = Notification {
                hardware_failure_predicted: notice.hardware_failure_predicted,
                ..Notification::new(
                    notice.transition,
                    &notice.event,
                    context.view(&notice.event),
                    notice.changed.clone(),
                    notice.seen_started,
                    context.at,
                )
            };
            for name in &notice.receivers {
                let Some(route) = self.routes.iter().find(|r| *r.name == **name) else {
                    continue;
                };
                let Some(queue) = &route.queue else {
                    continue;
                };
                let job = Job {
                    notification: notification.clone(),
                    seen,
                    vm_scale_set_name: vm_scale_set_name.clone(),
                };
                if let Err(error) = queue.try_send(job) {
                    let Job { notification, .. } = error.into_inner();
                    self.metrics.record_drop(&route.name);
                    if let Some(suppressed) = route.dropped.admit() {
                        tracing::warn!(
                            receiver = route.name.as_str(),
                            event_id = notification.event.event_id.as_str(),
                            transition = notification.transition.as_str(),
                            queue = QUEUE,
                            suppressed,
                            "notification dropped: the receiver's queue is full (logged at most once a minute per receiver, suppressed counts the drops left out; azure_scheduled_events_notifications_dropped_total counts them all)"
                        );
                    }
                }
            }
        }
    }

    async fn stop(&mut self, _context: &Context) {
        for route in &mut self.routes {
            route.queue = None;
        }
        let deadline = Instant::now() + STOP_GRACE;
        for route in &mut self.routes {
            if let Some(task) = route.task.take() {
                let mut task = task;
                if tokio::time::timeout_at(deadline, &mut task).await.is_err() {
                    task.abort();
                    tracing::warn!(
                        receiver = route.name.as_str(),
                        "notifications still queued when the agent stopped were not sent"
                    );
                }
            }
        }
    }
}
