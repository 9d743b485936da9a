//! The agent's rules, pure: the event model and the functional core that turns each poll into a
//! list of occurrences. No sockets, clocks or files: the caller passes the time, the documents,
//! the boot id and the settings this crate decides by, and the agent's edges do the rest.
//!
//! The event model: [`event`] and [`not_before`] turn a document (the protocol crate's wire
//! types) into domain types, [`cause`] reads what `Description` says and [`hardware_failure`]
//! marks a predicted failure; [`limits`] bounds the documents the agent takes in.
//!
//! The core: [`observer`] with [`monitor`] takes a poll's outcome and the time; [`tracker`]
//! follows each event's lifecycle (resumed after a restart from [`state`]), [`view`] gives one
//! view of each event with its span id, [`approval`] decides (policy, takeover order, the
//! decision machine), [`notices`] says who is notified of what, and [`occurrence`] is the list
//! every output consumes; [`subject`] is the one spelling of each transition's word. [`boot`]
//! tells an expected reboot from an unexpected one; [`trace_id`] maps an EventId to its trace id.

pub mod cause;
pub mod event;
pub mod hardware_failure;
pub mod limits;
pub mod not_before;

pub mod approval;
pub mod boot;
pub mod monitor;
pub mod notices;
pub mod observer;
pub mod occurrence;
pub mod state;
pub mod subject;
pub mod trace_id;
pub mod tracker;
pub mod view;
