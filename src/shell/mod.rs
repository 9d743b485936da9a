//! The imperative shell: where the layers below are wired and run.
//!
//! [`agent`] builds every part from the resolved settings, [`poll_loop`] runs the one poll loop
//! (a single request in flight) and hands each poll's occurrences to the outputs, [`commands`]
//! runs `demo` and `simulator`, [`check_config`] checks a configuration without starting it,
//! [`logging`] installs the log subscriber, [`boot_id`] reads this boot's identity, [`systemd`]
//! speaks systemd's notify protocol and `service` the Windows service control manager.

pub mod agent;
pub mod boot_id;
pub mod check_config;
pub mod commands;
pub mod logging;
pub(crate) mod poll_loop;
#[cfg(windows)]
pub mod service;
pub(crate) mod systemd;
