//! `check-imds`: a first look at a real VM in a minute. Reads instance metadata and the scheduled
//! events document once, with the agent's own settings and client, and says what the agent would
//! report: the VM it finds, each event and how the agent would treat it (reported or not, approved
//! or not, and when), or, when IMDS does not answer, what is wrong and what fixes it. Sends no
//! approval, opens no port, writes nothing.

use std::fmt::Write as _;
use std::time::Instant;

use chrono::{DateTime, Utc};

use azure_scheduled_events_core::approval::{Mode, Verdict, WaitReason};
use azure_scheduled_events_core::event::{Affects, Document, Event, Polled};
use azure_scheduled_events_protocol::wire::Compute;

use crate::azure::imds::{ImdsClient, ImdsError};
use crate::config::{Config, EventSeries};
use crate::shell::describe;

/// Exit code when IMDS did not answer (sysexits' EX_UNAVAILABLE).
pub const EXIT_UNAVAILABLE: u8 = 69;

/// What the check found: the text to print and whether IMDS answered with a document.
#[derive(Debug)]
pub struct Report {
    pub text: String,
    pub answered: bool,
}

/// Reads IMDS once with `config`'s URL, api-version and timeouts.
pub async fn check(config: &Config) -> Report {
    let mut text = String::new();
    let client = match ImdsClient::with_connect_timeout(
        &config.imds_url,
        &config.api_version,
        config.imds_connect_timeout,
    ) {
        Ok(client) => client,
        Err(error) => {
            let _ = writeln!(text, "cannot build the IMDS client: {error}");
            return Report {
                text,
                answered: false,
            };
        }
    };
    let _ = writeln!(text, "IMDS: {}", client.events_url());

    let started = Instant::now();
    let compute = client.instance(config.imds_timeout).await;
    let instance_took = started.elapsed();
    let vm_name = match &compute {
        Ok(compute) => {
            let _ = writeln!(
                text,
                "instance metadata: answered in {} ms",
                instance_took.as_millis()
            );
            let _ = writeln!(text, "  this VM: {}", identity(compute));
            config
                .vm_name
                .clone()
                .or_else(|| (!compute.name.is_empty()).then(|| compute.name.clone()))
        }
        Err(error) => {
            let _ = writeln!(text, "instance metadata: no answer: {error}");
            config.vm_name.clone()
        }
    };
    if let Some(name) = &config.vm_name {
        let _ = writeln!(text, "  --vm.name {name} is taken as this VM's name");
    }

    // Azure may take up to 2 minutes to answer the first request of a VM.
    let started = Instant::now();
    let mut last = Vec::new();
    let polled = client
        .scheduled_events(config.imds_first_timeout, &mut last)
        .await;
    let took = started.elapsed();
    let document = match polled {
        Ok(Polled::Changed(document)) => document,
        Ok(Polled::Unchanged) => Document {
            incarnation: azure_scheduled_events_core::event::DocumentIncarnation(0),
            events: Vec::new(),
        },
        Err(error) => {
            let _ = writeln!(text, "scheduled events: no answer: {error}");
            let _ = writeln!(text, "  what to do: {}", remedy(&error));
            return Report {
                text,
                answered: false,
            };
        }
    };
    let _ = writeln!(
        text,
        "scheduled events: answered in {} ms, DocumentIncarnation {}, {} event{}",
        took.as_millis(),
        document.incarnation,
        document.events.len(),
        if document.events.len() == 1 { "" } else { "s" }
    );
    let now = Utc::now();
    for event in &document.events {
        let _ = writeln!(text, "  {}", summary(event, now));
        for line in treatment(event, vm_name.as_deref(), config, now) {
            let _ = writeln!(text, "    {line}");
        }
    }
    let policy = describe::policy(&config.approval.policy);
    match config.approval.mode {
        Mode::Off => {
            let _ = writeln!(
                text,
                "approval: off (--approve turns it on; its policy {policy})"
            );
        }
        Mode::DryRun => {
            let _ = writeln!(
                text,
                "approval: dry run (decides and logs, sends nothing); {policy}"
            );
        }
        Mode::On => {
            let _ = writeln!(text, "approval: on; {policy}");
        }
    }
    if compute.is_err() && vm_name.is_none() {
        let _ = writeln!(
            text,
            "this VM's name is unknown (no instance metadata, no --vm.name): no event can be told as this VM's, and none is approved"
        );
    }
    Report {
        text,
        answered: true,
    }
}

/// The VM as instance metadata describes it.
fn identity(compute: &Compute) -> String {
    let or_none = |s: &str| {
        if s.is_empty() {
            "none".to_owned()
        } else {
            s.to_owned()
        }
    };
    format!(
        "{} (vmId {}), scale set {}, resource group {}, {} zone {}, {}, priority {}",
        or_none(&compute.name),
        or_none(&compute.vm_id),
        or_none(&compute.vm_scale_set_name),
        or_none(&compute.resource_group_name),
        or_none(&compute.location),
        or_none(&compute.zone),
        or_none(&compute.vm_size),
        or_none(&compute.priority),
    )
}

/// One event as Azure gives it, with the time left to its NotBefore.
fn summary(event: &Event, now: DateTime<Utc>) -> String {
    let when = match event.not_before.at() {
        Some(at) => {
            let left = at - now;
            if left.num_seconds() > 0 {
                format!(
                    "NotBefore {} (in {})",
                    event.not_before.raw(),
                    humantime::format_duration(std::time::Duration::from_secs(
                        left.num_seconds().unsigned_abs()
                    ))
                )
            } else {
                format!("NotBefore {} (passed)", event.not_before.raw())
            }
        }
        None if event.not_before.raw().is_empty() => "no NotBefore".to_owned(),
        None => format!("NotBefore {:?} (not a date)", event.not_before.raw()),
    };
    let source = event
        .source
        .as_ref()
        .map_or("no EventSource".to_owned(), |s| {
            format!("source {}", s.as_str())
        });
    format!(
        "{} {} {}, {when}, {source}, Resources [{}]",
        event.id,
        event.event_type.as_str(),
        event.status.as_str(),
        event.resources
    )
}

/// How the agent would treat `event`: reported or not, and the approval policy's verdict.
fn treatment(event: &Event, vm: Option<&str>, config: &Config, now: DateTime<Utc>) -> Vec<String> {
    let mut lines = Vec::new();
    let affects = event.affects(vm);
    lines.push(match affects {
        Affects::Yes => "names this VM: reported in the metrics, the log and traces".to_owned(),
        Affects::No if config.event_series == EventSeries::All => {
            "a neighbour's event: reported (--report.neighbours), never approved".to_owned()
        }
        Affects::No => {
            "a neighbour's event: logged at debug level only (--report.neighbours reports it), never approved".to_owned()
        }
        Affects::Unknown => {
            "this VM's name is unknown: affects_this_vm unknown, never approved".to_owned()
        }
    });
    if affects != Affects::Yes {
        return lines;
    }
    let verdict = match config.approval.policy.verdict(event, vm, now, now) {
        Verdict::Approve(rule) => format!("approved at once (rule {})", rule.as_str()),
        Verdict::Wait {
            rule,
            until,
            reason,
        } => {
            let why = match reason {
                WaitReason::BeforeNotBefore => "--approve.before-not-before".to_owned(),
                WaitReason::Takeover { rank } => {
                    format!(
                        "a shared event: this VM is number {} of its Resources",
                        rank + 1
                    )
                }
            };
            format!(
                "approved at {} (rule {}; {why})",
                until.to_rfc3339(),
                rule.as_str()
            )
        }
        Verdict::Skip(reason) => format!("not approved ({})", reason.as_str()),
    };
    lines.push(match config.approval.mode {
        Mode::Off => {
            format!("approval off, so the agent approves nothing; with --approve: {verdict}")
        }
        Mode::DryRun => format!("approval dry run (logged, never sent): {verdict}"),
        Mode::On => format!("approval on: {verdict}"),
    });
    lines
}

/// What to do about a failed read, by its cause.
fn remedy(error: &ImdsError) -> &'static str {
    match error {
        ImdsError::ConnectTimeout(_) => {
            "the connection to 169.254.169.254 never completes: its traffic is dropped before IMDS. In a Kubernetes pod where AKS's IMDS restriction is on, the Helm chart's value hostNetwork=true runs the agent on the node's network; in docker, --network host; otherwise allow egress to 169.254.169.254:80 (NetworkPolicy, host firewall)"
        }
        ImdsError::Connect(_) => {
            "nothing answers at the IMDS address: not an Azure VM, or --imds.url points elsewhere"
        }
        ImdsError::Timeout(_) => {
            "IMDS accepted the connection but did not answer in time: the first request of a VM can take up to 2 minutes while Azure enables Scheduled Events; run the check again, or raise --imds.first-timeout"
        }
        ImdsError::Status { status, .. } if status.as_u16() == 429 => {
            "IMDS refused more than 5 requests a second from this VM: another client polls it too"
        }
        ImdsError::Status { status, .. } if status.is_client_error() => {
            "IMDS refused the request: check --imds.api-version, and that nothing between here and IMDS adds X-Forwarded-For (a proxy)"
        }
        ImdsError::Status { .. } => {
            "IMDS itself is failing: try again; if it lasts, Azure Service Health for the region"
        }
        _ => {
            "IMDS answered with something that is not a scheduled-events document: check --imds.url"
        }
    }
}
