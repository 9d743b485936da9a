//! Hook commands: run an operator's program for an event, without a shell, within a timeout.
//!
//! The command is an argv (a JSON array, or words separated by spaces); it is executed directly,
//! so event fields are never interpreted by a shell unless the operator's command is itself a
//! shell (`["sh","-c","..."]`). The event goes to the hook as Azure's JSON on stdin and as
//! `EVENT_*` environment variables. Its output is captured (up to a cap) for the log. A hook that
//! does not exit 0 within the timeout has failed. Each hook runs in a process group of its own,
//! and on timeout the whole group is killed, so a drain script that timed out does not go on
//! draining in the background after the agent has given up on it. On Windows a Job object plays
//! the process group's part (see `job` below).

use std::process::Stdio;
use std::time::{Duration, Instant};

use azure_scheduled_events_core::approval::{HookFailure, HookKind, HookRun};
use azure_scheduled_events_core::event::Event;
use azure_scheduled_events_core::view::EventView;
use tokio::io::AsyncWriteExt;
use tokio::process::Command;

use crate::azure::wire;
use crate::config::approval::HookCommand;

/// Output kept from each of stdout and stderr, for the log line.
const OUTPUT_CAP: usize = 4096;

/// Runs `command` for `event`, which `view` shows, and waits for it, at most `timeout`.
pub async fn run(
    command: &HookCommand,
    kind: HookKind,
    event: &Event,
    view: &EventView,
    timeout: Duration,
) -> HookRun {
    let started = Instant::now();
    let finish = |result, stdout: &[u8], stderr: &[u8]| HookRun {
        kind,
        result,
        elapsed: started.elapsed(),
        stdout: capped(stdout),
        stderr: capped(stderr),
    };
    let (program, args) = match command.argv().split_first() {
        Some(split) => split,
        None => return finish(Err(HookFailure::Spawn("no program".into())), b"", b""),
    };
    let mut command = Command::new(program);
    command
        .args(args)
        .envs(environment(kind, view))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    // Its own process group, so that a timeout kills everything the hook started (Unix only).
    #[cfg(unix)]
    command.process_group(0);
    let mut child = match command.spawn() {
        Ok(child) => child,
        Err(error) => {
            return finish(
                Err(HookFailure::Spawn(format!("{program}: {error}"))),
                b"",
                b"",
            );
        }
    };
    let group = child.id();
    #[cfg(windows)]
    let job = job::hold(&child);
    let stdin = child.stdin.take();
    let body = serde_json::to_vec(&wire_event(event)).unwrap_or_default();
    let exchange = async move {
        if let Some(mut stdin) = stdin {
            // A hook that ignores stdin may exit before reading it: that is not a failure.
            let _ = stdin.write_all(&body).await;
            let _ = stdin.shutdown().await;
        }
        // Both pipes are drained to their end, so the hook never blocks on a full pipe, but
        // only what the log line shows is kept: a hook printing gigabytes costs no memory.
        let stdout = read_capped(child.stdout.take());
        let stderr = read_capped(child.stderr.take());
        let (stdout, stderr, status) = tokio::join!(stdout, stderr, child.wait());
        status.map(|status| std::process::Output {
            status,
            stdout,
            stderr,
        })
    };
    // On timeout the future, and with it the child, is dropped: kill_on_drop kills it, and
    // kill_group what it started.
    match tokio::time::timeout(timeout, exchange).await {
        Err(_) => {
            kill_group(group);
            #[cfg(windows)]
            drop(job);
            finish(Err(HookFailure::Timeout(timeout)), b"", b"")
        }
        Ok(Err(error)) => finish(Err(HookFailure::Spawn(error.to_string())), b"", b""),
        Ok(Ok(output)) => {
            #[cfg(windows)]
            job::release(job);
            let result = if output.status.success() {
                Ok(())
            } else {
                Err(HookFailure::Exit(output.status.to_string()))
            };
            finish(result, &output.stdout, &output.stderr)
        }
    }
}

/// Kills the process group a hook leads (its id is the hook's pid: `process_group(0)`).
#[cfg(not(unix))]
fn kill_group(_leader: Option<u32>) {}

/// Kills the process group a hook leads (its id is the hook's pid: `process_group(0)`).
#[cfg(unix)]
fn kill_group(leader: Option<u32>) {
    let Some(pid) = leader.and_then(|pid| i32::try_from(pid).ok()) else {
        return;
    };
    // The group may already be gone; there is nothing left to do then.
    let _ = nix::sys::signal::killpg(
        nix::unistd::Pid::from_raw(pid),
        nix::sys::signal::Signal::SIGKILL,
    );
}

/// Windows has no process groups: a Job object holds the hook, and every process it starts joins
/// the job. The job kills them all when it is dropped (on timeout, and if the agent itself goes),
/// unless the hook exited in time: then what it left running goes on, as on Unix. The hook joins
/// its job just after it starts, so a process it started in that first instant is not held.
#[cfg(windows)]
mod job {
    use win32job::{ExtendedLimitInfo, Job};

    /// A job holding `child`; `None`, after a warning, when Windows refuses one.
    pub fn hold(child: &tokio::process::Child) -> Option<Job> {
        let handle = child.raw_handle()?;
        let mut limits = ExtendedLimitInfo::new();
        limits.limit_kill_on_job_close();
        let held = Job::create_with_limit_info(&limits)
            .and_then(|job| job.assign_process(handle as isize).map(|()| job));
        match held {
            Ok(job) => Some(job),
            Err(error) => {
                tracing::warn!(
                    %error,
                    "cannot hold the hook in a Job object: a timeout kills the hook, not what it started"
                );
                None
            }
        }
    }

    /// The hook exited in time: closing the job no longer kills what it left running.
    pub fn release(job: Option<Job>) {
        if let Some(job) = job {
            let _ = job.set_extended_limit_info(&ExtendedLimitInfo::new());
        }
    }
}

/// The `EVENT_*` variables a hook receives: the event's view, as the log line says it.
pub fn environment(kind: HookKind, view: &EventView) -> Vec<(&'static str, String)> {
    let text = |value: &Option<String>| value.clone().unwrap_or_default();
    vec![
        ("EVENT_HOOK", kind.as_str().to_owned()),
        ("EVENT_ID", view.event_id.clone()),
        ("EVENT_TRACE_ID", view.trace_id.clone()),
        ("EVENT_TYPE", view.event_type.clone()),
        ("EVENT_STATUS", view.event_status.clone()),
        ("EVENT_SOURCE", text(&view.event_source)),
        ("EVENT_RESOURCE_TYPE", view.resource_type.clone()),
        ("EVENT_RESOURCES", view.resources.clone()),
        ("EVENT_NOT_BEFORE", view.not_before.clone()),
        (
            "EVENT_DURATION_IN_SECONDS",
            view.duration_in_seconds
                .map(|d| d.to_string())
                .unwrap_or_default(),
        ),
        ("EVENT_DESCRIPTION", text(&view.description)),
        (
            "EVENT_AFFECTS_THIS_VM",
            view.affects_this_vm.as_str().to_owned(),
        ),
        ("EVENT_VM_NAME", text(&view.vm_name)),
    ]
}

/// The event as Azure's JSON, as the hook's stdin.
pub fn wire_event(event: &Event) -> wire::ScheduledEvent {
    wire::ScheduledEvent {
        event_id: event.id.as_str().to_owned(),
        event_status: event.status.as_str().to_owned(),
        event_type: event.event_type.as_str().to_owned(),
        resource_type: Some(event.resource_type.clone()),
        resources: Some(event.resources.clone()),
        not_before: Some(event.not_before.raw().to_owned()),
        description: event.description.clone(),
        event_source: event.source.as_ref().map(|s| s.as_str().to_owned()),
        duration_in_seconds: event.duration.map(|d| d.0),
    }
}

/// The start of what `pipe` gives until it closes: enough for [`capped`] to show
/// [`OUTPUT_CAP`] bytes and tell that there was more.
async fn read_capped(pipe: Option<impl tokio::io::AsyncRead + Unpin>) -> Vec<u8> {
    use tokio::io::AsyncReadExt as _;
    const KEPT: usize = OUTPUT_CAP + 64;
    let mut kept = Vec::new();
    let Some(mut pipe) = pipe else {
        return kept;
    };
    let mut buffer = [0u8; 8192];
    while let Ok(n @ 1..) = pipe.read(&mut buffer).await {
        let room = KEPT.saturating_sub(kept.len());
        kept.extend_from_slice(&buffer[..n.min(room)]);
    }
    kept
}

fn capped(bytes: &[u8]) -> String {
    let text = String::from_utf8_lossy(bytes);
    let text = text.trim_end();
    if text.len() <= OUTPUT_CAP {
        return text.to_owned();
    }
    let mut end = OUTPUT_CAP;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}...", &text[..end])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_output_is_cut_at_a_character_boundary() {
        let text = "é".repeat(OUTPUT_CAP);
        let cut = capped(text.as_bytes());
        assert!(cut.len() <= OUTPUT_CAP + 3 && cut.ends_with("..."));
        assert_eq!(capped(b"ok\n"), "ok");
    }
}
