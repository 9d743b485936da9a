//! `..._state_up`: whether the state output keeps its promise, in its own family.

use prometheus::{IntGauge, Opts, Registry};

use crate::output::metrics::NAMESPACE;

/// The `..._state_up` gauge.
#[derive(Debug, Clone)]
pub struct StateUp(IntGauge);

impl StateUp {
    /// Registers the gauge in `registry`, at 1 until a write fails.
    pub fn register(registry: &Registry) -> Result<Self, prometheus::Error> {
        let up = IntGauge::with_opts(
            Opts::new(
                "state_up",
                "1 if the state file was read and the last write of it succeeded (or state is in memory by choice), 0 if the agent keeps state in memory because the file cannot be written.",
            )
            .namespace(NAMESPACE),
        )?;
        up.set(1);
        registry.register(Box::new(up.clone()))?;
        Ok(Self(up))
    }

    pub fn set(&self, up: bool) {
        self.0.set(i64::from(up));
    }
}
