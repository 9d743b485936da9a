//! What the agent saw happen, as plain values: the one stream every output consumes.
//!
//! A poll yields a list of [`Occurrence`]s, built by pure code ([`crate::observer`]): IMDS became
//! reachable or not, an event moved in its lifecycle, the document's events changed, an approval
//! was decided or a hook finished. Each output ([`crate::output`]) turns the same list into its
//! own signal (a log line, counters, spans, the state file, a POST). [`Context`] says which VM saw
//! it, in which document, when. An output that tells occurrences apart matches every variant, so
//! a new kind of occurrence is a compile error in each; what only the log tells apart (news of
//! IMDS itself, [`Imds`]) is one variant the others pass over in one arm.

use std::sync::Arc;

use azure_scheduled_events_protocol::wire;
use chrono::{DateTime, Utc};

use crate::approval::{Decision, HookRun, PostFailure, Rule};
use crate::boot::Restart;
use crate::event::{Affects, Event, EventId};
use crate::tracker::{IncarnationChange, Tracked, Transition};
use crate::view::{EventView, SpanIds, span_id_hex};

/// Where and when a batch of occurrences was seen.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Context {
    /// This VM's name in `Resources` (`--vm.name`, else `compute.name`), once known.
    pub vm_name: Option<Arc<str>>,
    /// DocumentIncarnation of the last valid document.
    pub incarnation: Option<u64>,
    pub at: DateTime<Utc>,
    /// This VM's lifecycle span id of each event, as first given ([`crate::view`]).
    pub span_ids: Arc<SpanIds>,
}

impl Context {
    pub fn vm_name(&self) -> Option<&str> {
        self.vm_name.as_deref()
    }

    /// This VM's lifecycle span id of `event`, the one it was first given.
    pub fn span_id(&self, event: &EventId) -> u64 {
        self.span_ids.get(event, self.vm_name())
    }

    /// [`Context::span_id`] as 16 hex digits.
    pub fn span_id_hex(&self, event: &EventId) -> String {
        span_id_hex(self.span_id(event))
    }

    /// Whether `event` names this VM, as its view says: for outputs that need only that.
    pub fn affects(&self, event: &Event) -> Affects {
        event.affects(self.vm_name())
    }

    /// What every output says about `event` in this batch.
    pub fn view(&self, event: &Event) -> EventView {
        EventView::new(
            event,
            self.vm_name(),
            self.incarnation,
            self.span_id(&event.id),
        )
    }
}

/// One thing that happened, reported once.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Occurrence {
    /// The agent started: how this start relates to the previous one (state file, boot id).
    Restarted(Restart),
    /// Instance metadata was read, after `failed_attempts` failures.
    VmIdentified {
        compute: Arc<wire::Compute>,
        failed_attempts: u64,
    },
    /// Instance metadata could not be read, for the first time since start; it is tried again
    /// every `retry_every`.
    VmUnidentified {
        reason: &'static str,
        error: String,
        retry_every: std::time::Duration,
    },
    /// What the agent learned of IMDS itself and of its documents, apart from their events.
    Imds(Imds),
    /// An event's lifecycle moved.
    Transition(Transition),
    /// An event the previous run knew left the document while the agent was down (reported with
    /// the first document after a start).
    EndedWhileDown(Tracked),
    /// The document's events, after a document that changed them or the incarnation.
    Events(Arc<[Tracked]>),
    /// An approval decision, or a hook started or finished.
    Decision(Decision),
    /// An approval is to be sent: its attempt is recorded before the POST leaves.
    ApprovalSending {
        event: Event,
        rule: Rule,
        attempts: u32,
    },
    /// A notification is to be sent to some receivers: recorded in the state file, when it is
    /// one a restart would report again, before it is queued.
    Notify(Notice),
}

/// What the agent learned of IMDS itself and of its documents, apart from their events: told by
/// the log alone, so the other outputs pass over the whole group with one arm.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Imds {
    /// IMDS gave a valid document after failing, or for the first time.
    Reachable {
        failed_polls: u64,
        since: Option<DateTime<Utc>>,
    },
    /// IMDS stopped giving valid documents (or never gave one yet).
    Unreachable { reason: &'static str, error: String },
    /// The incarnation jumped or went down: documents were missed or the service was reset.
    Incarnation(IncarnationChange),
    /// An EventId appeared twice in one document; the first was kept.
    DuplicateEventId(EventId),
}

/// What one occurrence says of an event's lifecycle on this VM: the one place that tells which
/// occurrences move an event, for the rules that follow lifecycles (span ids, prepare and
/// recover hooks, notifications).
#[derive(Debug, Clone, Copy)]
pub enum Lifecycle<'a> {
    /// A transition seen in the document.
    Transition(&'a Transition),
    /// An event the earlier run knew left the document while the agent was down.
    EndedWhileDown(&'a Tracked),
}

impl<'a> Lifecycle<'a> {
    pub fn event(self) -> &'a Event {
        match self {
            Lifecycle::Transition(transition) => transition.event(),
            Lifecycle::EndedWhileDown(tracked) => &tracked.event,
        }
    }

    /// Whether the event is new to this agent: it appeared (not resumed after a restart).
    pub fn appeared(self) -> bool {
        matches!(self, Lifecycle::Transition(Transition::Appeared(_)))
    }

    /// Whether the event left the document.
    pub fn ended(self) -> bool {
        match self {
            Lifecycle::Transition(transition) => match transition {
                Transition::Completed { .. } | Transition::Cancelled(_) => true,
                Transition::Appeared(_)
                | Transition::Resumed { .. }
                | Transition::Started(_)
                | Transition::Updated { .. } => false,
            },
            Lifecycle::EndedWhileDown(_) => true,
        }
    }
}

impl Occurrence {
    /// What the occurrence says of an event's lifecycle, if it says anything.
    pub fn lifecycle(&self) -> Option<Lifecycle<'_>> {
        match self {
            Occurrence::Transition(transition) => Some(Lifecycle::Transition(transition)),
            Occurrence::EndedWhileDown(tracked) => Some(Lifecycle::EndedWhileDown(tracked)),
            Occurrence::Restarted(_)
            | Occurrence::VmIdentified { .. }
            | Occurrence::VmUnidentified { .. }
            | Occurrence::Imds(_)
            | Occurrence::Events(_)
            | Occurrence::Decision(_)
            | Occurrence::ApprovalSending { .. }
            | Occurrence::Notify(_) => None,
        }
    }
}

/// One notification to send: a transition (or an approval) of one event, and who gets it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Notice {
    /// `scheduled`, `started`, `updated`, `completed`, `cancelled` or `approved`.
    pub transition: crate::subject::Subject,
    pub event: Event,
    /// `updated`: the fields that changed, comma-separated.
    pub changed: Option<String>,
    /// `completed`: whether a document showed the event `Started`.
    pub seen_started: Option<bool>,
    /// On the notice that first reports the event (it appeared, or was resumed after a
    /// restart): whether Azure predicts a hardware failure ([`crate::hardware_failure`]).
    pub hardware_failure_predicted: Option<bool>,
    /// The receivers it goes to, by name, in the order they are configured.
    pub receivers: Vec<Arc<str>>,
    /// Whether it is a transition a restart reports again ([`crate::notices::REPLAYABLE`]), which the state file records as sent to
    /// `receivers`.
    pub recorded: bool,
}

/// What an output that acts (runs a hook, sends an approval) reports back once it is done. The
/// poll loop takes reports in at its next poll and turns them into occurrences.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Report {
    HookFinished {
        event: Event,
        run: HookRun,
    },
    Posted {
        event: Event,
        rule: Rule,
        attempts: u32,
        result: Result<(), PostFailure>,
    },
}
