//! The notification metrics, registered only when receivers are configured, with every
//! receiver's series created at 0.

use prometheus::{HistogramOpts, HistogramVec, IntCounterVec, Opts, Registry};

use crate::output::metrics::NAMESPACE;

/// Every `result` of a notification.
pub const RESULTS: [&str; 3] = ["delivered", "failed", "rejected"];

/// Buckets of `..._notification_duration_seconds`: a second is the goal, retries take longer.
const BUCKETS: &[f64] = &[
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0,
];

/// Handles to the notification metrics.
#[derive(Debug, Clone)]
pub struct NotifyMetrics {
    notifications: IntCounterVec,
    durations: HistogramVec,
    dropped: IntCounterVec,
}

impl NotifyMetrics {
    /// Registers the families in `registry`, with the series of `receivers` at 0.
    pub fn register(registry: &Registry, receivers: &[&str]) -> Result<Self, prometheus::Error> {
        let notifications = IntCounterVec::new(
            Opts::new(
                "notifications_total",
                "Notifications that reached an end, by receiver and result: delivered (2xx), rejected (a 4xx other than 429, not retried) or failed (retries exhausted: timeouts, connection errors, 5xx, 429).",
            )
            .namespace(NAMESPACE),
            &["receiver", "result"],
        )?;
        let durations = HistogramVec::new(
            HistogramOpts::new(
                "notification_duration_seconds",
                "Time from the transition being seen to the receiver's last answer, retries included, by receiver.",
            )
            .namespace(NAMESPACE)
            .buckets(BUCKETS.to_vec()),
            &["receiver"],
        )?;
        let dropped = IntCounterVec::new(
            Opts::new(
                "notifications_dropped_total",
                "Notifications not sent because the receiver's queue was full (it was slow or down for long), by receiver.",
            )
            .namespace(NAMESPACE),
            &["receiver"],
        )?;
        for receiver in receivers {
            for result in RESULTS {
                notifications.with_label_values(&[receiver, result]);
            }
            durations.with_label_values(&[receiver]);
            dropped.with_label_values(&[receiver]);
        }
        registry.register(Box::new(notifications.clone()))?;
        registry.register(Box::new(durations.clone()))?;
        registry.register(Box::new(dropped.clone()))?;
        Ok(Self {
            notifications,
            durations,
            dropped,
        })
    }

    pub fn record(&self, receiver: &str, result: &str, elapsed: std::time::Duration) {
        self.notifications
            .with_label_values(&[receiver, result])
            .inc();
        self.durations
            .with_label_values(&[receiver])
            .observe(elapsed.as_secs_f64());
    }

    pub fn record_drop(&self, receiver: &str) {
        self.dropped.with_label_values(&[receiver]).inc();
    }
}
