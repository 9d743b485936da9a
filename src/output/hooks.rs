//! The hooks output: runs the operator's prepare, recover and approval hooks.
//!
//! The core decides when a hook starts ([`Outcome::HookStarted`]); this output runs it in a task
//! of its own, so the poll loop goes on while a drain script takes minutes, and reports the run
//! back ([`Report::HookFinished`]). At most one run per event and kind is under way: the core
//! starts one per appearance, end, or approval.

use std::time::Duration;

use azure_scheduled_events_core::approval::{HookKind, Outcome};
use azure_scheduled_events_core::event::Event;
use azure_scheduled_events_core::occurrence::{Context, Occurrence, Report};

use crate::config::approval::HookCommand;

use super::{Output, Reports};

mod run;

#[derive(Debug)]
pub struct Hooks {
    approve: Option<HookCommand>,
    prepare: Option<HookCommand>,
    recover: Option<HookCommand>,
    timeout: Duration,
    reports: Reports,
}

impl Hooks {
    pub fn new(
        approve: Option<HookCommand>,
        prepare: Option<HookCommand>,
        recover: Option<HookCommand>,
        timeout: Duration,
        reports: Reports,
    ) -> Self {
        Self {
            approve,
            prepare,
            recover,
            timeout,
            reports,
        }
    }

    fn start(&self, kind: HookKind, event: &Event, context: &Context) {
        let command = match kind {
            HookKind::Approve => &self.approve,
            HookKind::Prepare => &self.prepare,
            HookKind::Recover => &self.recover,
        };
        let Some(command) = command.clone() else {
            return;
        };
        let (event, view) = (event.clone(), context.view(event));
        let (timeout, reports) = (self.timeout, self.reports.clone());
        tokio::spawn(async move {
            let run = run::run(&command, kind, &event, &view, timeout).await;
            // The receiver lives as long as the agent; after it stops nobody needs the result.
            let _ = reports.send(Report::HookFinished { event, run });
        });
    }
}

impl Output for Hooks {
    fn consume(&mut self, context: &Context, occurrences: &[Occurrence]) {
        for occurrence in occurrences {
            if let Occurrence::Decision(decision) = occurrence
                && let Outcome::HookStarted(kind) = decision.outcome
            {
                self.start(kind, &decision.event, context);
            }
        }
    }
}
