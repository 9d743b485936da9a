//! The outputs: each consumer of the occurrence stream behind one small interface.
//!
//! After every poll the loop hands the same [`Occurrence`]s, with their [`Context`], to each
//! [`Output`] in the order they were wired ([`Outputs`]): [`log`] (one line per occurrence
//! worth one, its event lines also OTLP log records when [`log_events`] is on), [`metrics`], [`spans`] (OpenTelemetry, queued for export), [`state`] (the file
//! that survives restarts), [`hooks`] (prepare, recover and approval hooks) and [`approval`] (the
//! POSTs), [`notify`] (webhooks, Slack, Teams, PagerDuty), and [`kubernetes`] (the Node's
//! condition, Events, taint and cordon, only with `--kubernetes.node-name`). The state output is
//! the state file's only writer and comes before the approval and notification outputs, so that
//! an approval attempt or a notification is on disk before it leaves; an attempt it could not
//! write is not sent ([`state::Persisted`]). `consume` never waits on
//! the network: an output that does network I/O or runs programs hands the work to a task of its
//! own, behind a bounded queue whose overflow is dropped and counted, and reports results back as
//! [`Report`]s, which the loop takes in at its next poll. Each output is whole in its room here
//! (a file, or a folder for one with parts: its spans builder, store, runner, metric families);
//! adding one is a room here and one line in the agent's wiring.

pub mod approval;
pub mod hooks;
#[cfg(feature = "kubernetes")]
pub mod kubernetes;
pub mod limited_log;
pub mod log;
pub mod log_events;
pub mod metrics;
pub mod notify;
pub mod spans;
pub mod state;
pub mod telemetry;

use async_trait::async_trait;
use tokio::sync::mpsc;

use azure_scheduled_events_core::occurrence::{Context, Occurrence, Report};

/// Where outputs that act send what they report back.
pub type Reports = mpsc::UnboundedSender<Report>;

/// One consumer of the occurrence stream.
#[async_trait]
pub trait Output: Send + std::fmt::Debug {
    /// Takes in one batch of occurrences, without waiting on the network.
    fn consume(&mut self, context: &Context, occurrences: &[Occurrence]);

    /// Finishes what is pending before the agent exits, within the output's own bound.
    async fn stop(&mut self, _context: &Context) {}
}

/// Every output, in wiring order.
#[derive(Debug, Default)]
pub struct Outputs(Vec<Box<dyn Output>>);

impl Outputs {
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds `output` after those already wired.
    pub fn with(mut self, output: impl Output + 'static) -> Self {
        self.0.push(Box::new(output));
        self
    }

    pub fn consume(&mut self, context: &Context, occurrences: &[Occurrence]) {
        if occurrences.is_empty() {
            return;
        }
        for output in &mut self.0 {
            output.consume(context, occurrences);
        }
    }

    pub async fn stop(&mut self, context: &Context) {
        for output in &mut self.0 {
            output.stop(context).await;
        }
    }
}
