//! The functional core: pure code that turns each poll into a list of occurrences.
//!
//! [`observer`] with [`monitor`] takes a poll's outcome and the time; [`tracker`] follows each
//! event's lifecycle (resumed after a restart from [`state`]), [`view`] gives one view of each
//! event with its span id, [`approval`] decides (policy, takeover order, the decision machine),
//! [`notices`] says who is notified of what, and [`occurrence`] is the list every output
//! consumes. [`boot`] tells an expected reboot from an unexpected one; [`trace_id`] maps an
//! EventId to its trace id. No sockets, clocks or files: only [`crate::azure`]'s types and the
//! resolved settings of [`crate::config`] come in.

pub(crate) mod approval;
pub(crate) mod boot;
pub(crate) mod monitor;
pub(crate) mod notices;
pub(crate) mod observer;
pub(crate) mod occurrence;
pub mod state;
pub mod trace_id;
pub mod tracker;
pub(crate) mod view;
