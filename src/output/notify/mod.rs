//! The notification output: each transition (and, when asked, each approval) pushed to the
//! configured receivers: generic JSON webhooks, Slack, Microsoft Teams, PagerDuty.
//!
//! In the loop it only decides: which receivers want the occurrence ([`Filter`]), and whether
//! that receiver already got that transition of that event. What goes out is recorded in the
//! state file, and the file written, before it is queued, so a restart never sends it again (at
//! most once, as for approvals). Sending happens in one task per receiver ([`delivery`]) behind
//! a bounded queue; a notification that does not fit is dropped and counted.

pub mod body;
pub mod delivery;
pub mod metrics;

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::approval::Outcome;
use crate::config::notify::{Filter, NotifyConfig};
use crate::event::{Affects, Event};
use crate::occurrence::{Context, Occurrence};
use crate::state::StateStore;

use self::body::Notification;
use self::delivery::Job;
use self::metrics::NotifyMetrics;
use super::Output;

/// Notifications waiting per receiver at most: a document holds a handful of events, each with
/// a few transitions, so a full queue means the receiver has been failing for minutes.
const QUEUE: usize = 256;

/// Time the receivers get to finish what is queued when the agent stops.
const STOP_GRACE: Duration = Duration::from_secs(5);

#[derive(Debug)]
struct Route {
    name: String,
    filter: Filter,
    queue: Option<mpsc::Sender<Job>>,
    task: Option<JoinHandle<()>>,
}

impl Route {
    fn wants(&self, transition: &str, event: &Event, vm_name: Option<&str>) -> bool {
        let filter = &self.filter;
        filter.transitions.contains(&transition)
            // An advisory reaches only receivers that asked for advisories.
            && (!event.is_advisory() || filter.transitions.contains(&"advisory"))
            && (filter.event_types.is_empty() || filter.event_types.contains(&event.event_type))
            && (filter.event_sources.is_empty()
                || event
                    .source
                    .as_ref()
                    .is_some_and(|s| filter.event_sources.contains(s)))
            // While this VM's name is unknown, every event may be this VM's.
            && (!filter.this_vm_only || event.affects(vm_name) != Affects::No)
    }
}

#[derive(Debug)]
pub struct Notify {
    routes: Vec<Route>,
    store: Arc<Mutex<StateStore>>,
    metrics: NotifyMetrics,
}

impl Notify {
    /// Starts one sending task per receiver on the current runtime.
    pub fn start(
        config: &NotifyConfig,
        store: Arc<Mutex<StateStore>>,
        metrics: NotifyMetrics,
    ) -> Result<Self, reqwest::Error> {
        let mut routes = Vec::new();
        for receiver in &config.receivers {
            let client = delivery::client(receiver)?;
            let (queue, jobs) = mpsc::channel(QUEUE);
            let task = tokio::spawn(delivery::run(
                receiver.clone(),
                client,
                jobs,
                metrics.clone(),
            ));
            routes.push(Route {
                name: receiver.name.clone(),
                filter: receiver.filter.clone(),
                queue: Some(queue),
                task: Some(task),
            });
        }
        Ok(Self {
            routes,
            store,
            metrics,
        })
    }
}

/// The transitions a restart reports again: an event still in the document is resumed as
/// `advisory`, `scheduled` or `started`. Only these are recorded in the state file, so a restart never sends
/// them twice; every other transition happens once (an event is updated as often as it changes).
/// The records of an event go with it when it leaves the document.
const REPLAYABLE: [&str; 3] = ["advisory", "scheduled", "started"];

/// The notifications a batch holds, before filtering.
fn notifications<'a>(
    context: &Context,
    occurrences: &'a [Occurrence],
) -> Vec<(Notification, &'a Event)> {
    let vm_name = context.vm_name();
    let mut found = Vec::new();
    for occurrence in occurrences {
        match occurrence {
            Occurrence::Transition(transition) => found.push((
                Notification::of_transition(transition, vm_name, context.incarnation, context.at),
                transition.event(),
            )),
            // It completed (or was cancelled) while the agent was down: closing it now is what
            // lets a PagerDuty incident resolve itself.
            Occurrence::EndedWhileDown(tracked) => found.push((
                Notification::new(
                    "completed",
                    &tracked.event,
                    None,
                    Some(tracked.seen_started),
                    vm_name,
                    context.incarnation,
                    context.at,
                ),
                &tracked.event,
            )),
            Occurrence::Decision(decision) => match &decision.outcome {
                Outcome::Approved { .. } => found.push((
                    Notification::new(
                        "approved",
                        &decision.event,
                        None,
                        None,
                        vm_name,
                        context.incarnation,
                        context.at,
                    ),
                    &decision.event,
                )),
                Outcome::DryRun { .. }
                | Outcome::Waiting { .. }
                | Outcome::Skipped(_)
                | Outcome::HookStarted(_)
                | Outcome::HookFinished(_)
                | Outcome::PostFailed { .. } => {}
            },
            Occurrence::Restarted(_)
            | Occurrence::VmIdentified { .. }
            | Occurrence::VmUnidentified { .. }
            | Occurrence::Reachable { .. }
            | Occurrence::Unreachable { .. }
            | Occurrence::Incarnation(_)
            | Occurrence::DuplicateEventId(_)
            | Occurrence::Events(_)
            | Occurrence::ApprovalSending { .. } => {}
        }
    }
    found
}

#[async_trait::async_trait]
impl Output for Notify {
    fn consume(&mut self, context: &Context, occurrences: &[Occurrence]) {
        let found = notifications(context, occurrences);
        if found.is_empty() {
            return;
        }
        let seen = Instant::now();
        let vm_name = context.vm_name();
        let mut jobs = Vec::new();
        {
            let mut store = self.store.lock().unwrap_or_else(PoisonError::into_inner);
            let state = store.state_mut();
            let mut recorded = false;
            for (notification, event) in &found {
                let replayable = REPLAYABLE.contains(&notification.transition);
                for (index, route) in self.routes.iter().enumerate() {
                    if !route.wants(notification.transition, event, vm_name) {
                        continue;
                    }
                    if replayable {
                        if !state.record_notification(
                            &notification.event_id,
                            &route.name,
                            notification.transition,
                        ) {
                            continue;
                        }
                        recorded = true;
                    }
                    jobs.push((index, notification.clone()));
                }
            }
            // On disk before the first POST leaves.
            if recorded {
                store.flush();
            }
        }
        for (index, notification) in jobs {
            let Some(route) = self.routes.get(index) else {
                continue;
            };
            let Some(queue) = &route.queue else {
                continue;
            };
            if let Err(error) = queue.try_send(Job { notification, seen }) {
                let Job { notification, .. } = error.into_inner();
                self.metrics.record_drop(&route.name);
                tracing::warn!(
                    receiver = route.name.as_str(),
                    event_id = notification.event_id.as_str(),
                    transition = notification.transition,
                    queue = QUEUE,
                    "notification dropped: the receiver's queue is full"
                );
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::Document;
    use crate::tracker::{Tracker, Transition};
    use chrono::Utc;

    fn route(transitions: &[&'static str]) -> Route {
        Route {
            name: "r".into(),
            filter: Filter {
                transitions: transitions.to_vec(),
                event_types: Vec::new(),
                event_sources: Vec::new(),
                this_vm_only: true,
            },
            queue: None,
            task: None,
        }
    }

    /// The transitions of an advisory that appears and then leaves the document.
    fn advisory_transitions() -> Vec<Transition> {
        let mut tracker = Tracker::new();
        let appear =
            br#"{"DocumentIncarnation":1,"Events":[{"EventId":"A","EventStatus":"Advisory",
            "EventType":"SpotRebalanceRecommendation","Resources":["spot_0"],"NotBefore":""}]}"#;
        let leave = br#"{"DocumentIncarnation":2,"Events":[]}"#;
        let mut transitions = Vec::new();
        for body in [&appear[..], &leave[..]] {
            match Document::from_json(body) {
                Ok(document) => {
                    transitions.extend(tracker.observe(document, Utc::now()).transitions)
                }
                Err(e) => panic!("{e}"),
            }
        }
        transitions
    }

    #[test]
    fn an_advisory_reaches_only_receivers_that_list_advisory() {
        let transitions = advisory_transitions();
        let kinds: Vec<&str> = transitions.iter().map(Transition::kind).collect();
        assert_eq!(kinds, ["advisory", "cancelled"]);
        let default = route(&["scheduled", "started", "completed", "cancelled"]);
        let every_lifecycle = route(&["scheduled", "started", "updated", "completed", "cancelled"]);
        let asked = route(&["advisory", "cancelled"]);
        let only_advisory = route(&["advisory"]);
        for transition in &transitions {
            let (kind, event) = (transition.kind(), transition.event());
            assert!(!default.wants(kind, event, Some("spot_0")), "{kind}");
            assert!(
                !every_lifecycle.wants(kind, event, Some("spot_0")),
                "{kind}"
            );
            assert!(asked.wants(kind, event, Some("spot_0")), "{kind}");
            assert_eq!(
                only_advisory.wants(kind, event, Some("spot_0")),
                kind == "advisory"
            );
        }
    }
}
