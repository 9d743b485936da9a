//! The log output: one structured line per occurrence worth one, never one per poll.
//!
//! Event lines carry `event_id`, `trace_id` (the EventId as the exported traces' trace id),
//! `span_id` (this VM's lifecycle span of the event), the event's fields, `affects_this_vm`,
//! `vm_name` and `document_incarnation`, so a search for one EventId finds every VM that saw it,
//! and a `summary` that says the event in one sentence, which the text format puts first.
//! Events that do not name this VM are logged at debug level unless `--report.neighbours`, as
//! their series are only exported then. The lines of an event's transitions (and of its approval,
//! its end while the agent was down, and the resumption after a restart) have the target
//! [`events::TARGET`] (or a child of it): when log events are on, each is also an OTLP log record.

use azure_scheduled_events_core::approval::Mode;
use azure_scheduled_events_core::approval::{Decision, HookKind, Outcome, PostReason, SkipReason};
use azure_scheduled_events_core::boot::Restart;
use azure_scheduled_events_core::event::{Affects, EventSource};
use azure_scheduled_events_core::occurrence::{Context, Imds, Occurrence};
use azure_scheduled_events_core::trace_id::trace_id;
use azure_scheduled_events_core::tracker::{IncarnationChange, Kind, Tracked, Transition};
use azure_scheduled_events_core::view::{summary, until};

use crate::azure::wire;
use crate::config::EventSeries;
use crate::output::telemetry::events;

use super::Output;

#[derive(Debug)]
pub struct Log {
    /// `--vm.name` as given, to warn when instance metadata names this VM otherwise.
    configured_vm: Option<String>,
    approval: Mode,
    events: EventSeries,
}

impl Log {
    pub fn new(configured_vm: Option<String>, approval: Mode, events: EventSeries) -> Self {
        Self {
            configured_vm,
            approval,
            events,
        }
    }

    fn vm_identified(&self, context: &Context, compute: &wire::Compute, failed_attempts: u64) {
        let vm_name = context.vm_name();
        if let Some(name) = self.configured_vm.as_deref()
            && !compute.name.is_empty()
            && !name.eq_ignore_ascii_case(&compute.name)
        {
            // Approval acts for the VM this name designates: a wrong name approves another
            // VM's events.
            tracing::warn!(
                vm_name = name,
                compute_name = %compute.name,
                approval = self.approval.as_str(),
                "--vm.name differs from compute.name in instance metadata: events are matched, and approved, as --vm.name"
            );
        }
        tracing::info!(
            vm_name,
            compute_name = %compute.name,
            vm_id = %compute.vm_id,
            location = %compute.location,
            zone = %compute.zone,
            vm_scale_set_name = %compute.vm_scale_set_name,
            resource_group = %compute.resource_group_name,
            vm_size = %compute.vm_size,
            failed_attempts,
            "read instance metadata"
        );
        if vm_name.is_none() {
            tracing::warn!(
                "instance metadata has no compute.name and --vm.name is not set: affects_this_vm is unknown"
            );
        }
    }
}

impl Output for Log {
    fn consume(&mut self, context: &Context, occurrences: &[Occurrence]) {
        let vm_name = context.vm_name();
        // Events the state file holds that are still in the document, and of them those whose
        // status changed while the agent was down (news, logged as such): said once, below.
        let (mut resumed, mut changed_while_down) = (0_usize, 0_usize);
        for occurrence in occurrences {
            if let Occurrence::Transition(transition @ Transition::Resumed { .. }) = occurrence {
                resumed += 1;
                changed_while_down += usize::from(!transition.already_announced());
            }
            match occurrence {
                // Reported by the earlier run as it is now.
                Occurrence::Transition(transition) if transition.already_announced() => {}
                Occurrence::Restarted(restart) => restarted(restart, vm_name),
                Occurrence::VmIdentified {
                    compute,
                    failed_attempts,
                } => self.vm_identified(context, compute, *failed_attempts),
                Occurrence::VmUnidentified {
                    reason,
                    error,
                    retry_every,
                } => tracing::warn!(
                    reason,
                    error = error.as_str(),
                    retry_every = ?retry_every,
                    "cannot read instance metadata; vm_info is missing until it can"
                ),
                Occurrence::Transition(transition) => {
                    log_transition(transition, context, self.events);
                    if self.approval == Mode::Off {
                        waits_for_not_before(transition, context);
                    }
                }
                Occurrence::Imds(Imds::Incarnation(IncarnationChange::Jumped { from, to })) => {
                    tracing::info!(
                        vm_name,
                        from = from.0,
                        to = to.0,
                        "document incarnation jumped: some documents were never seen by this agent"
                    )
                }
                Occurrence::Imds(Imds::Incarnation(IncarnationChange::Restarted { from, to })) => {
                    tracing::warn!(
                        vm_name,
                        from = from.0,
                        to = to.0,
                        "document incarnation went down: the service was reset or re-enabled"
                    )
                }
                Occurrence::Imds(Imds::Incarnation(
                    IncarnationChange::First(_)
                    | IncarnationChange::Unchanged
                    | IncarnationChange::Next,
                )) => {}
                Occurrence::Imds(Imds::DuplicateEventId(id)) => tracing::warn!(
                    vm_name,
                    event_id = %id,
                    trace_id = %trace_id(id.as_str()),
                    "an EventId appears twice in the document; the first is kept"
                ),
                Occurrence::Imds(Imds::Unreachable { reason, error }) => {
                    tracing::warn!(
                        vm_name,
                        reason,
                        error = error.as_str(),
                        "IMDS unreachable: the last known events are kept until it answers again"
                    );
                    if *reason == "connect_timeout" {
                        tracing::warn!(
                            vm_name,
                            reason,
                            likely_causes = "a pod without host network where AKS's IMDS restriction (--enable-imds-restriction) lets only host-network pods reach IMDS; a NetworkPolicy or a pod-identity agent dropping traffic to 169.254.169.254; a container outside the host network on a plain VM",
                            fix = "with the Helm chart, set its value hostNetwork=true (helm upgrade RELEASE CHART --reuse-values --set hostNetwork=true), which runs the agent on the node's network, where IMDS answers; with docker, --network host; or allow egress to 169.254.169.254:80",
                            "the connection to IMDS never completes: its traffic is dropped before it reaches IMDS"
                        );
                    }
                }
                Occurrence::Imds(Imds::Reachable {
                    failed_polls,
                    since,
                }) => tracing::info!(
                    vm_name,
                    failed_polls,
                    unreachable_seconds =
                        since.map(|s| (context.at - s).num_milliseconds() as f64 / 1000.0),
                    document_incarnation = context.incarnation,
                    "IMDS reachable"
                ),
                Occurrence::Decision(decision) => log_decision(decision, context),
                Occurrence::EndedWhileDown(tracked) => {
                    ended_while_down(tracked, context, self.events)
                }
                // Said by the lines of the decisions and hooks they lead to.
                Occurrence::Events(_)
                | Occurrence::ApprovalSending { .. }
                | Occurrence::Notify(_) => {}
            }
        }
        if resumed > 0 {
            tracing::info!(
                target: events::RESUMED,
                vm_name,
                resumed,
                changed_while_down,
                document_incarnation = context.incarnation,
                "resumed the events the state file holds: those reported before the restart are not announced again"
            );
        }
    }
}

fn restarted(restart: &Restart, vm_name: Option<&str>) {
    match restart {
        // Said where the boot id file is read, which knows its path.
        Restart::FirstStart | Restart::Unknown => {}
        Restart::SameBoot => {
            tracing::info!(vm_name, "agent restarted; the machine did not reboot")
        }
        Restart::Reboot {
            expected_by: Some(impact),
            clean,
        } => tracing::info!(
            vm_name,
            expected = true,
            clean,
            event_id = %impact.event_id,
            trace_id = %trace_id(&impact.event_id),
            event_type = %impact.event_type,
            started_seen = %impact.started_seen.to_rfc3339(),
            "the machine rebooted, as expected after an event of this VM that started"
        ),
        Restart::Reboot {
            expected_by: None,
            clean: true,
        } => tracing::info!(
            vm_name,
            expected = false,
            clean = true,
            "the machine rebooted cleanly: the agent was stopped before it (a reboot of the OS), with no event of this VM Started"
        ),
        Restart::Reboot {
            expected_by: None,
            clean: false,
        } => tracing::warn!(
            vm_name,
            expected = false,
            clean = false,
            "the machine rebooted unexpectedly: no event of this VM was seen Started before, and the agent was not stopped cleanly"
        ),
    }
}

fn log_transition(transition: &Transition, context: &Context, events: EventSeries) {
    let view = context.view(transition.event());
    let changed = transition.changed_fields();
    let seen_started = transition.seen_started();
    // Told on the line that reports the event first (or again after a restart), where its
    // first sight is known.
    let first_seen = match transition {
        Transition::Appeared(_) => Some(context.at),
        Transition::Resumed { first_seen, .. } => Some(*first_seen),
        Transition::Started(_)
        | Transition::Updated { .. }
        | Transition::Completed { .. }
        | Transition::Cancelled(_) => None,
    };
    let hardware_failure_predicted = first_seen.map(|seen| {
        azure_scheduled_events_core::hardware_failure::predicted(transition.event(), Some(seen))
    });
    let summary = summary(transition.event(), transition.kind().subject(), context.at);
    macro_rules! line {
        ($level:ident) => {
            tracing::$level!(
                target: events::TARGET,
                vm_name = view.vm_name,
                transition = transition.kind().as_str(),
                summary,
                event_id = view.event_id,
                trace_id = view.trace_id,
                span_id = view.span_id,
                event_type = view.event_type,
                event_status = view.event_status,
                advisory = view.advisory,
                event_source = view.event_source,
                resource_type = view.resource_type,
                resources = view.resources,
                not_before = view.not_before,
                duration_in_seconds = view.duration_in_seconds,
                description = view.description,
                cause = view.cause,
                affects_this_vm = view.affects_this_vm.as_str(),
                document_incarnation = view.document_incarnation,
                changed,
                seen_started,
                hardware_failure_predicted,
                "event {}",
                transition.kind()
            )
        };
    }
    // A scale set delivers every VM's events to every VM: a neighbour's event is reported as
    // its series are, only when asked for.
    if events == EventSeries::ThisVm && view.affects_this_vm == Affects::No {
        line!(debug);
    } else {
        line!(info);
    }
}

/// An event the earlier run reported that left the document while the agent was down: its end
/// is news, told once, with the status last seen (it completed, or was called off unseen).
fn ended_while_down(tracked: &Tracked, context: &Context, events: EventSeries) {
    let view = context.view(&tracked.event);
    macro_rules! line {
        ($level:ident) => {
            tracing::$level!(
                target: events::ENDED_WHILE_DOWN,
                vm_name = view.vm_name,
                event_id = view.event_id,
                trace_id = view.trace_id,
                span_id = view.span_id,
                event_type = view.event_type,
                event_status = view.event_status,
                affects_this_vm = view.affects_this_vm.as_str(),
                seen_started = tracked.seen_started,
                first_seen = %tracked.first_seen.to_rfc3339(),
                document_incarnation = view.document_incarnation,
                "event ended while the agent was down"
            )
        };
    }
    if events == EventSeries::ThisVm && view.affects_this_vm == Affects::No {
        line!(debug);
    } else {
        line!(info);
    }
}

/// With approval off, a user-initiated event of this VM (a restart or redeploy started from the
/// portal or CLI) waits until its NotBefore: said when it appears, with the flag that lets such
/// events start at once.
fn waits_for_not_before(transition: &Transition, context: &Context) {
    let event = transition.event();
    // Appeared, Scheduled and not an advisory; not again when a restart resumes it.
    if transition.kind() != Kind::Scheduled
        || !matches!(transition, Transition::Appeared(_))
        || event.source != Some(EventSource::User)
        || event.affects(context.vm_name()) != Affects::Yes
    {
        return;
    }
    let view = context.view(event);
    tracing::info!(
        vm_name = view.vm_name,
        event_id = view.event_id,
        trace_id = view.trace_id,
        event_type = view.event_type,
        not_before = view.not_before,
        approve_with = "--approve",
        "this {} was started by a user (portal, CLI or API) and waits until NotBefore ({}) because approval is off; --approve lets user-initiated events start at once",
        view.event_type,
        until(event.not_before.seconds_from(context.at)),
    );
}

/// The decision's one log line. Skips of other VMs' events are at debug level: a scale set
/// delivers every VM's events to every VM.
fn log_decision(decision: &Decision, context: &Context) {
    let view = context.view(&decision.event);
    let (event_id, trace_id, span_id) = (&view.event_id, &view.trace_id, &view.span_id);
    let (event_type, event_status) = (&view.event_type, &view.event_status);
    let (affects_this_vm, not_before) = (view.affects_this_vm.as_str(), &view.not_before);
    let vm_name = view.vm_name.as_deref();
    let (decision_label, reason) = decision.outcome.decision().unwrap_or(("", ""));
    macro_rules! line {
        (target: $target:expr, $level:ident, $($rest:tt)*) => {
            tracing::$level!(
                target: $target,
                event_id, trace_id, span_id, event_type, event_status, not_before,
                affects_this_vm, vm_name, decision = decision_label, reason, $($rest)*
            )
        };
        ($level:ident, $($rest:tt)*) => {
            tracing::$level!(
                event_id, trace_id, span_id, event_type, event_status, not_before,
                affects_this_vm, vm_name, decision = decision_label, reason, $($rest)*
            )
        };
    }
    match &decision.outcome {
        Outcome::Approved { attempts, .. } => {
            line!(target: events::APPROVED, info, attempts, "event approved")
        }
        Outcome::DryRun { .. } => line!(info, "dry run: event would be approved now"),
        Outcome::Waiting { until, .. } => {
            line!(info, until = %until.to_rfc3339(), "event allowed for approval, waiting")
        }
        Outcome::Skipped(SkipReason::NotThisVm) => {
            line!(debug, "event not approved: it does not name this VM")
        }
        Outcome::Skipped(skip) => line!(info, "event not approved: {}", skip.as_str()),
        Outcome::HookStarted(kind) => line!(info, hook = kind.as_str(), "hook started"),
        Outcome::HookFinished(run) => {
            let hook = run.kind.as_str();
            let elapsed_seconds = run.elapsed.as_secs_f64();
            let (stdout, stderr) = (run.stdout.as_str(), run.stderr.as_str());
            match &run.result {
                Ok(()) => line!(
                    info,
                    hook,
                    elapsed_seconds,
                    stdout,
                    stderr,
                    "hook succeeded"
                ),
                Err(failure) if run.kind == HookKind::Approve => line!(
                    warn,
                    hook,
                    elapsed_seconds,
                    stdout,
                    stderr,
                    error = %failure,
                    "approval hook failed: event not approved, left for NotBefore"
                ),
                Err(failure) => line!(
                    warn,
                    hook,
                    elapsed_seconds,
                    stdout,
                    stderr,
                    error = %failure,
                    "hook failed"
                ),
            }
        }
        Outcome::PostFailed {
            reason: PostReason::StateUnwritable,
            error,
            ..
        } => line!(
            warn,
            error = error.as_str(),
            "approval not sent: its attempt cannot be written to the state file, so a restart could not tell it was sent; the event waits for its NotBefore"
        ),
        Outcome::PostFailed {
            error, retry_at, ..
        } => match retry_at {
            Some(at) => line!(
                warn,
                error = error.as_str(),
                retry_at = %at.to_rfc3339(),
                "approval POST failed, retrying while the event is Scheduled"
            ),
            None => line!(
                error,
                error = error.as_str(),
                "approval POST refused: not sent again"
            ),
        },
    }
}
