//! The log events output: keeps the resource of the OTLP log records up to date and flushes them
//! when the agent stops. The records themselves are the log output's event lines, turned into
//! records as they are written (`crate::output::telemetry::events`), so a record says exactly
//! what its line says. Wired only when log events are on.

use azure_scheduled_events_core::occurrence::{Context, Occurrence};

use crate::output::telemetry::{Logs, VmIdentity};

use super::Output;

#[derive(Debug)]
pub struct LogEvents {
    logs: Option<Logs>,
}

impl LogEvents {
    pub fn new(logs: Logs) -> Self {
        Self { logs: Some(logs) }
    }
}

#[async_trait::async_trait]
impl Output for LogEvents {
    fn consume(&mut self, context: &Context, occurrences: &[Occurrence]) {
        let Some(logs) = &self.logs else { return };
        for occurrence in occurrences {
            if let Occurrence::VmIdentified { compute, .. } = occurrence {
                logs.set_vm(VmIdentity {
                    vm_name: context.vm_name(),
                    compute: Some(compute),
                });
            }
        }
    }

    /// Exports what is queued, before the process exits.
    async fn stop(&mut self, _context: &Context) {
        if let Some(logs) = self.logs.take() {
            logs.shutdown().await;
        }
    }
}
