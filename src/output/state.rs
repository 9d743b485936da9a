//! The state file output: what must survive a restart, written when it changes.
//!
//! It folds the document's events (first-seen times, lifecycle span ids, the impact expected for
//! this VM), every approval attempt and answer, and the notifications a restart would send
//! again into [`azure_scheduled_events_core::state::State`], then writes the file once per batch if anything changed,
//! and says in `..._state_up` whether that worked. It is the file's only writer. It runs before
//! the approval and notification outputs, so an attempt or a notification is on disk before it
//! leaves; after a restart an attempt found `sending` counts as sent. What it could not write it
//! tells the approval output ([`Persisted`]), which then sends nothing.

use std::sync::Arc;

use prometheus::Registry;
use tokio::sync::watch;

use azure_scheduled_events_core::approval::Outcome;
use azure_scheduled_events_core::event::EventId;
use azure_scheduled_events_core::occurrence::{Context, Occurrence};
use azure_scheduled_events_core::state::{ApprovalRecord, ApprovalStatus, stored};
use azure_scheduled_events_core::tracker::Tracked;

use self::store::StateStore;
use self::up::StateUp;
use super::Output;

pub mod store;
pub mod up;

/// Whether the attempts recorded so far are on disk, as the state output found at its last
/// batch: `None` when they are (or state is in memory by choice), else why not. The outputs see
/// each batch in turn, the state output first, so the approval output reads what became of the
/// batch's own attempts.
pub type Persisted = watch::Receiver<Option<Arc<str>>>;

#[derive(Debug)]
pub struct StateFile {
    store: StateStore,
    up: StateUp,
    persisted: watch::Sender<Option<Arc<str>>>,
    /// The document's events as last seen, to work out again which affect this VM once its
    /// name is known.
    events: Arc<[Tracked]>,
}

impl StateFile {
    /// The output writing `store`, with `..._state_up` registered in `registry`.
    pub fn new(store: StateStore, registry: &Registry) -> Result<Self, prometheus::Error> {
        let up = StateUp::register(registry)?;
        up.set(store.is_healthy());
        let (persisted, _) = watch::channel(store.unwritten().cloned());
        Ok(Self {
            store,
            up,
            persisted,
            events: Arc::from([]),
        })
    }

    /// What the approval output reads before sending.
    pub fn persisted(&self) -> Persisted {
        self.persisted.subscribe()
    }

    fn flush(&mut self) {
        self.store.flush();
        self.up.set(self.store.is_healthy());
        self.persisted.send_replace(self.store.unwritten().cloned());
    }

    fn observe(&mut self, context: &Context) {
        let state = self.store.state_mut();
        state.observe(
            context.incarnation,
            &self.events,
            context.vm_name(),
            context.at,
        );
        state.keep_span_ids(|id| context.span_id_hex(&EventId::new(id)));
    }

    fn set_approval(&mut self, id: &str, status: ApprovalStatus) {
        if let Some(record) = self
            .store
            .state_mut()
            .approvals
            .get_mut(stored(id).as_ref())
        {
            record.status = status;
        }
    }
}

#[async_trait::async_trait]
impl Output for StateFile {
    fn consume(&mut self, context: &Context, occurrences: &[Occurrence]) {
        for occurrence in occurrences {
            match occurrence {
                Occurrence::Events(events) => {
                    self.events = Arc::clone(events);
                    self.observe(context);
                }
                Occurrence::VmIdentified { .. } if !self.events.is_empty() => self.observe(context),
                Occurrence::ApprovalSending {
                    event, attempts, ..
                } => {
                    self.store.state_mut().approvals.insert(
                        stored(event.id.as_str()).into_owned(),
                        ApprovalRecord {
                            event_type: stored(event.event_type.as_str()).into_owned(),
                            at: context.at,
                            status: ApprovalStatus::Sending,
                            attempts: *attempts,
                        },
                    );
                }
                Occurrence::Decision(decision) => {
                    let id = decision.event.id.as_str();
                    match &decision.outcome {
                        Outcome::Approved { .. } => self.set_approval(id, ApprovalStatus::Sent),
                        Outcome::PostFailed { retry_at: None, .. } => {
                            self.set_approval(id, ApprovalStatus::Rejected)
                        }
                        Outcome::PostFailed {
                            retry_at: Some(_), ..
                        } => self.set_approval(id, ApprovalStatus::Failed),
                        Outcome::DryRun { .. }
                        | Outcome::Waiting { .. }
                        | Outcome::Skipped(_)
                        | Outcome::HookStarted(_)
                        | Outcome::HookFinished(_) => {}
                    }
                }
                Occurrence::Notify(notice) if notice.recorded => {
                    let state = self.store.state_mut();
                    for receiver in &notice.receivers {
                        state.record_notification(
                            notice.event.id.as_str(),
                            receiver,
                            notice.transition.as_str(),
                        );
                    }
                }
                Occurrence::Restarted(_)
                | Occurrence::Notify(_)
                | Occurrence::VmIdentified { .. }
                | Occurrence::VmUnidentified { .. }
                | Occurrence::Imds(_)
                | Occurrence::Transition(_)
                | Occurrence::EndedWhileDown(_) => {}
            }
        }
        self.flush();
    }

    /// The agent stops cleanly (SIGTERM, Ctrl-C): says so in the file, so that a reboot found at
    /// the next start counts as clean.
    async fn stop(&mut self, context: &Context) {
        self.store.state_mut().clean_stop = Some(context.at);
        self.flush();
    }
}
