//! Approval against the simulator over real HTTP: off by default, the default policy, once per
//! EventId across restarts, shared events, hooks, and how failed POSTs are retried or not.

use crate::common;

use std::path::{Path, PathBuf};
use std::time::Duration;

use azure_scheduled_events_simulator::{Approval, Fault, FaultTarget, Scenario, SeenRequest};
use common::{Agent, Exposition, Imds, THIS_VM, TempDir, TestResult, document, wait};

const USER_REBOOT: &str = "A0000000-0000-4000-8000-000000000001";
const SHORT_FREEZE: &str = "A0000000-0000-4000-8000-000000000002";
const LONG_FREEZE: &str = "A0000000-0000-4000-8000-000000000003";
const PLATFORM_REBOOT: &str = "A0000000-0000-4000-8000-000000000004";
const OTHER_VM_USER_REBOOT: &str = "A0000000-0000-4000-8000-000000000005";
const HARDWARE: &str = "A0000000-0000-4000-8000-000000000006";
const UNKNOWN_FREEZE: &str = "A0000000-0000-4000-8000-000000000007";
const OTHER_VM: &str = "test-vmss_1";

impl TempDir {
    /// `--state.file=...` and `--state.boot-id-file=...` inside this directory.
    fn state_flags(&self) -> Result<[String; 2], std::io::Error> {
        let boot = self.path("boot_id");
        if !boot.exists() {
            std::fs::write(&boot, "boot-1\n")?;
        }
        Ok([
            format!("--state.file={}", self.path("state.json").display()),
            format!("--state.boot-id-file={}", boot.display()),
        ])
    }
}

async fn start(imds: &Imds, flags: &[String]) -> Result<Agent, Box<dyn std::error::Error>> {
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    Agent::start(imds, &flags).await
}

fn flags(dir: &TempDir, extra: &[&str]) -> Result<Vec<String>, std::io::Error> {
    let mut flags: Vec<String> = dir.state_flags()?.into();
    flags.extend(extra.iter().map(|s| (*s).to_owned()));
    Ok(flags)
}

/// One event of a verbatim document, which stays exactly as written whatever is POSTed.
fn event_json(
    id: &str,
    status: &str,
    event_type: &str,
    source: &str,
    resources: &[&str],
    duration: i64,
) -> serde_json::Value {
    let not_before = if status == "Started" {
        String::new()
    } else {
        (chrono::Utc::now() + chrono::TimeDelta::minutes(15))
            .format("%a, %d %b %Y %H:%M:%S GMT")
            .to_string()
    };
    serde_json::json!({
        "EventId": id, "EventStatus": status, "EventType": event_type, "ResourceType": "VirtualMachine",
        "Resources": resources, "NotBefore": not_before, "Description": "", "EventSource": source,
        "DurationInSeconds": duration
    })
}

/// A simulator whose verbatim document holds one user-initiated Reboot of this VM, Scheduled.
async fn imds_with_user_reboot() -> Result<Imds, Box<dyn std::error::Error>> {
    let imds = Imds::start().await?;
    imds.sim.set_document(document(
        2,
        &[event_json(
            USER_REBOOT,
            "Scheduled",
            "Reboot",
            "User",
            &[THIS_VM],
            -1,
        )],
    ));
    Ok(imds)
}

/// The seven kinds of event the default policy must tell apart, all Scheduled for 15 minutes
/// except the hardware failure, which appears Started.
fn mixed_scenario() -> Result<Scenario, Box<dyn std::error::Error>> {
    Ok(Scenario::parse(&format!(
        r#"
events:
  - {{ id: "{USER_REBOOT}", type: Reboot, source: User, resources: [{THIS_VM}], notice: 15m, runs_for: 1h }}
  - {{ id: "{SHORT_FREEZE}", type: Freeze, duration_in_seconds: 5, resources: [{THIS_VM}], notice: 15m, runs_for: 1h }}
  - {{ id: "{LONG_FREEZE}", type: Freeze, duration_in_seconds: 9, resources: [{THIS_VM}], notice: 15m }}
  - {{ id: "{UNKNOWN_FREEZE}", type: Freeze, duration_in_seconds: -1, resources: [{THIS_VM}], notice: 15m }}
  - {{ id: "{PLATFORM_REBOOT}", type: Reboot, resources: [{THIS_VM}], notice: 15m }}
  - {{ id: "{OTHER_VM_USER_REBOOT}", type: Reboot, source: User, resources: [{OTHER_VM}], notice: 15m }}
  - {{ id: "{HARDWARE}", type: Reboot, source: User, status: Started, resources: [{THIS_VM}], runs_for: 1h }}
"#
    ))?)
}

fn decisions(m: &Exposition, decision: &str, reason: &str) -> f64 {
    m.get(&format!(
        r#"azure_scheduled_events_approval_decisions_total{{decision="{decision}",reason="{reason}"}}"#
    ))
}

fn approvals(m: &Exposition, event_type: &str) -> f64 {
    m.get(&format!(
        r#"azure_scheduled_events_approvals_total{{event_type="{event_type}"}}"#
    ))
}

fn failures(m: &Exposition, event_type: &str, reason: &str) -> f64 {
    m.get(&format!(
        r#"azure_scheduled_events_approval_failures_total{{event_type="{event_type}",reason="{reason}"}}"#
    ))
}

fn events_requests(m: &Exposition) -> f64 {
    m.get(r#"azure_scheduled_events_imds_requests_total{operation="events"}"#)
}

fn ids(approvals: &[Approval]) -> Vec<&str> {
    approvals.iter().map(|a| a.event_id.as_str()).collect()
}

/// Lets the agent poll `polls` more times.
async fn more_polls(agent: &Agent, polls: f64) -> Result<(), String> {
    let now = events_requests(&agent.metrics().await.map_err(|e| e.to_string())?);
    agent
        .wait_for("more polls", |m| events_requests(m) >= now + polls)
        .await
        .map(drop)
}

#[tokio::test]
async fn nothing_is_posted_by_default() -> TestResult {
    let imds = Imds::start().await?;
    imds.sim.load_scenario(mixed_scenario()?);
    let dir = TempDir::new("default")?;
    let agent = start(&imds, &flags(&dir, &[])?).await?;
    agent
        .wait_for("every event, approval off", |m| {
            m.event_info(HARDWARE).is_some()
                && m.event_info(USER_REBOOT).is_some()
                && m.get(r#"azure_scheduled_events_approval_mode{mode="off"}"#) == 1.0
        })
        .await?;
    more_polls(&agent, 20.0).await?;
    assert!(
        imds.sim.approvals().is_empty(),
        "{:?}",
        imds.sim.approvals()
    );
    let m = agent.metrics().await?;
    assert_eq!(
        m.get(r#"azure_scheduled_events_imds_requests_total{operation="approve"}"#),
        0.0
    );
    assert_eq!(
        decisions(&m, "skipped", "not_allowed"),
        0.0,
        "approval off decides nothing"
    );
    assert!(
        !m.has("azure_scheduled_events_approval_decisions_total"),
        "approval off exports no approval families"
    );
    agent.stop().await
}

#[tokio::test]
async fn dry_run_decides_and_counts_but_never_posts() -> TestResult {
    let imds = Imds::start().await?;
    imds.sim.load_scenario(mixed_scenario()?);
    let dir = TempDir::new("dry-run")?;
    let agent = start(&imds, &flags(&dir, &["--approve", "--approve.dry-run"])?).await?;
    agent
        .wait_for("the dry-run decisions", |m| {
            decisions(m, "dry_run", "user_event") == 1.0
                && decisions(m, "dry_run", "short_freeze") == 1.0
                && m.get(r#"azure_scheduled_events_approval_mode{mode="dry_run"}"#) == 1.0
        })
        .await?;
    more_polls(&agent, 20.0).await?;
    let m = agent.metrics().await?;
    assert!(
        imds.sim.approvals().is_empty(),
        "{:?}",
        imds.sim.approvals()
    );
    assert_eq!(
        decisions(&m, "dry_run", "user_event"),
        1.0,
        "once per event, not per poll"
    );
    assert_eq!(approvals(&m, "Reboot") + approvals(&m, "Freeze"), 0.0);
    agent.stop().await
}

#[tokio::test]
async fn the_default_policy_approves_exactly_the_user_reboot_and_the_short_freeze_once()
-> TestResult {
    let imds = Imds::start().await?;
    imds.sim.load_scenario(mixed_scenario()?);
    let dir = TempDir::new("default-policy")?;
    let agent = start(&imds, &flags(&dir, &["--approve"])?).await?;
    let m = agent
        .wait_for("two approvals", |m| {
            approvals(m, "Reboot") + approvals(m, "Freeze") >= 2.0
        })
        .await?;
    assert_eq!(approvals(&m, "Reboot"), 1.0);
    assert_eq!(approvals(&m, "Freeze"), 1.0);
    agent
        .wait_for("the approved events to start", |m| {
            [USER_REBOOT, SHORT_FREEZE].iter().all(|id| {
                m.event_info(id)
                    .is_some_and(|l| l.contains(r#"event_status="Started""#))
            })
        })
        .await?;
    more_polls(&agent, 20.0).await?;
    let posted = imds.sim.approvals();
    let mut posted_ids = ids(&posted);
    posted_ids.sort_unstable();
    assert_eq!(posted_ids, [USER_REBOOT, SHORT_FREEZE], "{posted:?}");
    assert!(posted.iter().all(|a| a.known));
    let m = agent.metrics().await?;
    for reason in [
        "freeze_too_long",
        "freeze_duration_unknown",
        "not_allowed",
        "not_this_vm",
        "started",
    ] {
        assert!(decisions(&m, "skipped", reason) >= 1.0, "skipped {reason}");
    }
    for id in [LONG_FREEZE, UNKNOWN_FREEZE, PLATFORM_REBOOT] {
        assert!(
            m.event_info(id)
                .is_some_and(|l| l.contains(r#"event_status="Scheduled""#)),
            "{id} is left for NotBefore"
        );
    }
    agent.stop().await
}

#[tokio::test]
async fn another_vms_event_and_a_started_event_are_never_approved_even_when_every_type_is_allowed()
-> TestResult {
    let imds = Imds::start().await?;
    imds.sim.set_document(document(
        3,
        &[
            event_json(
                OTHER_VM_USER_REBOOT,
                "Scheduled",
                "Reboot",
                "User",
                &[OTHER_VM, "test-vmss_2"],
                -1,
            ),
            event_json(HARDWARE, "Started", "Reboot", "User", &[THIS_VM], -1),
            event_json(PLATFORM_REBOOT, "Scheduled", "Reboot", "Platform", &[], -1),
        ],
    ));
    let dir = TempDir::new("never")?;
    let agent = start(
        &imds,
        &flags(
            &dir,
            &[
                "--approve",
                "--approve.event-types=Freeze,Reboot,Redeploy,Preempt,Terminate",
                "--approve.takeover-delay=0s",
            ],
        )?,
    )
    .await?;
    let m = agent
        .wait_for("the decisions", |m| {
            decisions(m, "skipped", "not_this_vm") == 2.0
                && decisions(m, "skipped", "started") == 1.0
        })
        .await?;
    assert_eq!(decisions(&m, "approved", "event_type"), 0.0);
    more_polls(&agent, 20.0).await?;
    assert!(
        imds.sim.approvals().is_empty(),
        "{:?}",
        imds.sim.approvals()
    );
    let m = agent.metrics().await?;
    assert_eq!(
        decisions(&m, "skipped", "not_this_vm"),
        2.0,
        "one decision per event, not per poll"
    );
    agent.stop().await
}

#[tokio::test]
async fn with_a_lead_time_an_event_waits_until_that_long_before_not_before() -> TestResult {
    // NotBefore is 15 minutes away: a 10-minute lead waits, a 16-minute lead approves now.
    let imds = imds_with_user_reboot().await?;
    let dir = TempDir::new("lead-wait")?;
    let agent = start(
        &imds,
        &flags(&dir, &["--approve", "--approve.before-not-before=10m"])?,
    )
    .await?;
    agent
        .wait_for("the waiting decision", |m| {
            decisions(m, "waiting", "before_not_before") == 1.0
        })
        .await?;
    more_polls(&agent, 20.0).await?;
    assert!(
        imds.sim.approvals().is_empty(),
        "{:?}",
        imds.sim.approvals()
    );
    agent.stop().await?;

    let dir = TempDir::new("lead-approve")?;
    let agent = start(
        &imds,
        &flags(&dir, &["--approve", "--approve.before-not-before=16m"])?,
    )
    .await?;
    let m = agent
        .wait_for("the approval", |m| approvals(m, "Reboot") == 1.0)
        .await?;
    assert_eq!(decisions(&m, "waiting", "before_not_before"), 0.0);
    assert_eq!(ids(&imds.sim.approvals()), [USER_REBOOT]);
    agent.stop().await
}

#[tokio::test]
async fn a_restart_with_the_same_state_file_does_not_approve_again() -> TestResult {
    // A verbatim document stays Scheduled after the approval, so only the state file can stop a
    // second POST.
    let imds = imds_with_user_reboot().await?;
    let dir = TempDir::new("restart")?;
    let agent = start(&imds, &flags(&dir, &["--approve"])?).await?;
    agent
        .wait_for("the approval", |m| approvals(m, "Reboot") == 1.0)
        .await?;
    more_polls(&agent, 20.0).await?;
    assert_eq!(
        ids(&imds.sim.approvals()),
        [USER_REBOOT],
        "not once per poll"
    );
    agent.stop().await?;

    let again = start(&imds, &flags(&dir, &["--approve"])?).await?;
    again
        .wait_for("the already-approved decision", |m| {
            decisions(m, "skipped", "already_approved") == 1.0
        })
        .await?;
    more_polls(&again, 20.0).await?;
    assert_eq!(
        ids(&imds.sim.approvals()),
        [USER_REBOOT],
        "approved before the restart"
    );
    assert_eq!(approvals(&again.metrics().await?, "Reboot"), 0.0);
    again.stop().await?;

    let fresh_dir = TempDir::new("restart-fresh")?;
    let fresh = start(&imds, &flags(&fresh_dir, &["--approve"])?).await?;
    fresh
        .wait_for("an approval", |m| approvals(m, "Reboot") == 1.0)
        .await?;
    assert_eq!(
        ids(&imds.sim.approvals()),
        [USER_REBOOT, USER_REBOOT],
        "without the state file the same event is approved again: the file is what prevents it"
    );
    fresh.stop().await
}

#[tokio::test]
async fn a_shared_event_is_approved_by_the_leader_at_once_and_by_the_second_vm_only_after_its_delay()
-> TestResult {
    // Each VM reaches an IMDS of its own, as on Azure, serving the same verbatim document (which
    // approvals do not change), so each says when its VM POSTed.
    let shared = document(
        2,
        &[event_json(
            SHORT_FREEZE,
            "Scheduled",
            "Freeze",
            "Platform",
            &[THIS_VM, OTHER_VM],
            5,
        )],
    );
    let (leader_imds, second_imds) = (Imds::start().await?, Imds::start().await?);
    leader_imds.sim.set_document(shared.clone());
    second_imds.sim.set_document(shared);
    let delay = chrono::TimeDelta::seconds(2);
    let (leader_dir, second_dir) = (TempDir::new("leader")?, TempDir::new("second")?);
    let second_started = chrono::Utc::now();
    let second_flags = flags(
        &second_dir,
        &[
            "--approve",
            "--approve.takeover-delay=2s",
            "--vm.name=test-vmss_1",
        ],
    )?;
    let second = start(&second_imds, &second_flags).await?;
    let waiting = second
        .wait_for("the second VM to wait its turn", |m| {
            decisions(m, "waiting", "takeover") == 1.0
        })
        .await?;
    assert_eq!(approvals(&waiting, "Freeze"), 0.0);
    let leader_flags = flags(&leader_dir, &["--approve", "--approve.takeover-delay=2s"])?;
    let leader = start(&leader_imds, &leader_flags).await?;
    let led = leader
        .wait_for("the leader's approval", |m| {
            approvals(m, "Freeze") == 1.0 && decisions(m, "approved", "short_freeze") == 1.0
        })
        .await?;
    assert_eq!(
        decisions(&led, "waiting", "takeover"),
        0.0,
        "the leader approves at once, without waiting a turn"
    );
    second
        .wait_for("the second VM's approval", |m| {
            approvals(m, "Freeze") == 1.0
        })
        .await?;
    assert_eq!(posts(&leader_imds).len(), 1);
    let second_posts = posts(&second_imds);
    assert_eq!(second_posts.len(), 1, "{second_posts:?}");
    assert!(
        second_posts[0].at - second_started >= delay,
        "the second VM approves no earlier than its delay after it first saw the event: {:?}",
        second_posts[0].at - second_started
    );
    assert_eq!(ids(&leader_imds.sim.approvals()), [SHORT_FREEZE]);
    assert_eq!(ids(&second_imds.sim.approvals()), [SHORT_FREEZE]);
    leader.stop().await?;
    second.stop().await
}

#[tokio::test]
async fn the_second_vm_never_approves_an_event_the_leader_already_started() -> TestResult {
    let imds = Imds::start().await?;
    imds.sim.load_scenario(Scenario::parse(&format!(
        r#"
events:
  - {{ id: "{SHORT_FREEZE}", type: Freeze, duration_in_seconds: 5, resources: [{THIS_VM}, {OTHER_VM}], notice: 15m, runs_for: 1h }}
"#
    ))?);
    let (leader_dir, second_dir) = (
        TempDir::new("started-leader")?,
        TempDir::new("started-second")?,
    );
    let leader = start(
        &imds,
        &flags(&leader_dir, &["--approve", "--approve.takeover-delay=1s"])?,
    )
    .await?;
    let second = start(
        &imds,
        &flags(
            &second_dir,
            &[
                "--approve",
                "--approve.takeover-delay=1s",
                "--vm.name=test-vmss_1",
            ],
        )?,
    )
    .await?;
    leader
        .wait_for("the leader's approval", |m| approvals(m, "Freeze") == 1.0)
        .await?;
    second
        .wait_for("the second VM to see it started", |m| {
            decisions(m, "skipped", "started") == 1.0
        })
        .await?;
    // Forty polls of the second VM (1.5 s and ten polls before): past its 1 s takeover delay.
    more_polls(&second, 40.0).await?;
    assert_eq!(ids(&imds.sim.approvals()), [SHORT_FREEZE]);
    assert_eq!(approvals(&second.metrics().await?, "Freeze"), 0.0);
    leader.stop().await?;
    second.stop().await
}

#[tokio::test]
async fn a_hook_that_fails_or_times_out_prevents_approval() -> TestResult {
    for (hook, timeout, reason) in [
        (
            r#"["sh","-c","echo draining failed >&2; exit 3"]"#,
            "5s",
            "hook_failed",
        ),
        (r#"["sleep","30"]"#, "300ms", "hook_timeout"),
        ("/nonexistent/drain", "5s", "hook_error"),
    ] {
        let imds = imds_with_user_reboot().await?;
        let dir = TempDir::new(reason)?;
        let hook_flag = format!("--approve.hook={hook}");
        let timeout_flag = format!("--approve.hook-timeout={timeout}");
        let agent = start(
            &imds,
            &flags(&dir, &["--approve", &hook_flag, &timeout_flag])?,
        )
        .await?;
        // The three counters of one finished hook are raised one after the other: a scrape
        // may fall between them, so all three are waited for.
        let hook_runs = format!(
            r#"azure_scheduled_events_hook_runs_total{{hook="approve",result="{reason}"}}"#
        );
        agent
            .wait_for(reason, |m| {
                failures(m, "Reboot", reason) == 1.0
                    && decisions(m, "hook_failed", reason) == 1.0
                    && m.get(&hook_runs) == 1.0
            })
            .await?;
        more_polls(&agent, 20.0).await?;
        assert!(
            imds.sim.approvals().is_empty(),
            "{reason}: {:?}",
            imds.sim.approvals()
        );
        assert_eq!(
            failures(&agent.metrics().await?, "Reboot", reason),
            1.0,
            "{reason}: not retried in a loop"
        );
        agent.stop().await?;
    }
    Ok(())
}

#[tokio::test]
async fn a_hook_that_times_out_is_killed_with_every_process_it_started() -> TestResult {
    let imds = imds_with_user_reboot().await?;
    let dir = TempDir::new("hook-group")?;
    let pid_file = dir.path("background.pid");
    // A drain that starts a background worker, writes its pid, and hangs.
    let hook_flag = format!(
        r#"--approve.hook=["sh","-c","sleep 300 & echo $! > \"$0\"; wait","{}"]"#,
        pid_file.display()
    );
    let agent = start(
        &imds,
        &flags(
            &dir,
            &["--approve", &hook_flag, "--approve.hook-timeout=3s"],
        )?,
    )
    .await?;
    agent
        .wait_for("the hook timed out", |m| {
            failures(m, "Reboot", "hook_timeout") == 1.0
        })
        .await?;
    let pid = std::fs::read_to_string(&pid_file)?.trim().to_owned();
    wait(&format!("the hook's background process {pid} to be gone"))
        .until(async || !is_running(&pid))
        .await
        .map_err(|e| format!("{e}: it outlived the hook's timeout"))?;
    assert!(imds.sim.approvals().is_empty());
    agent.stop().await
}

/// Whether process `pid` exists and is not a zombie waiting to be reaped.
fn is_running(pid: &str) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|stat| {
            let state = stat.rsplit_once(") ")?.1.chars().next()?;
            Some(state != 'Z' && state != 'X')
        })
        .unwrap_or(false)
}

#[tokio::test]
async fn a_hook_gets_the_event_and_the_loop_keeps_polling_until_it_exits_0() -> TestResult {
    let imds = imds_with_user_reboot().await?;
    let dir = TempDir::new("slow-hook")?;
    let out = dir.path("hook-out");
    // The hook reports what it got, then waits until the test releases it.
    let hook = format!(
        r#"--approve.hook=["sh","-c","cat > \"$0.json\"; printf '%s %s %s' \"$EVENT_ID\" \"$EVENT_TYPE\" \"$EVENT_RESOURCES\" > \"$0.env\"; while [ ! -e \"$0.release\" ]; do sleep 0.05; done","{}"]"#,
        out.display()
    );
    let agent = start(&imds, &flags(&dir, &["--approve", &hook])?).await?;
    wait("the hook to run")
        .until(async || with_suffix(&out, "env").exists())
        .await?;
    let running = agent.metrics().await?;
    let during = agent
        .wait_for("polls while the hook runs", |m| {
            events_requests(m) >= events_requests(&running) + 5.0
        })
        .await?;
    assert_eq!(
        approvals(&during, "Reboot"),
        0.0,
        "not before the hook exits 0"
    );
    assert!(imds.sim.approvals().is_empty());
    std::fs::write(with_suffix(&out, "release"), b"")?;
    agent
        .wait_for("the approval after the hook's success", |m| {
            approvals(m, "Reboot") == 1.0
                && m.get(r#"azure_scheduled_events_hook_runs_total{hook="approve",result="ok"}"#)
                    == 1.0
        })
        .await?;
    assert_eq!(ids(&imds.sim.approvals()), [USER_REBOOT]);
    let stdin: serde_json::Value =
        serde_json::from_slice(&std::fs::read(with_suffix(&out, "json"))?)?;
    assert_eq!(stdin["EventId"], USER_REBOOT);
    assert_eq!(stdin["Resources"], serde_json::json!([THIS_VM]));
    assert_eq!(
        std::fs::read_to_string(with_suffix(&out, "env"))?,
        format!("{USER_REBOOT} Reboot {THIS_VM}")
    );
    agent.stop().await
}

#[tokio::test]
async fn prepare_and_recover_hooks_run_for_this_vms_events_only() -> TestResult {
    let imds = Imds::start().await?;
    imds.sim.load_scenario(Scenario::parse(&format!(
        r#"
events:
  - {{ id: "{PLATFORM_REBOOT}", type: Reboot, resources: [{THIS_VM}], notice: 1s, runs_for: 1s }}
  - {{ id: "{OTHER_VM_USER_REBOOT}", type: Reboot, resources: [{OTHER_VM}], notice: 1s, runs_for: 1s }}
"#
    ))?);
    let dir = TempDir::new("prepare-recover")?;
    let log = dir.path("hooks.log");
    let hook = |kind: &str| {
        format!(
            r#"--approve.{kind}-hook=["sh","-c","echo \"$EVENT_HOOK $EVENT_ID $EVENT_STATUS\" >> \"$0\"","{}"]"#,
            log.display()
        )
    };
    let agent = start(&imds, &flags(&dir, &[&hook("prepare"), &hook("recover")])?).await?;
    agent
        .wait_for("both hooks", |m| {
            m.get(r#"azure_scheduled_events_hook_runs_total{hook="recover",result="ok"}"#) == 1.0
                && m.get(r#"azure_scheduled_events_hook_runs_total{hook="prepare",result="ok"}"#)
                    == 1.0
        })
        .await?;
    assert_eq!(
        std::fs::read_to_string(&log)?,
        format!("prepare {PLATFORM_REBOOT} Scheduled\nrecover {PLATFORM_REBOOT} Started\n")
    );
    assert!(imds.sim.approvals().is_empty(), "hooks alone never approve");
    agent.stop().await
}

#[tokio::test]
async fn across_restarts_an_event_is_prepared_once_and_recovered_when_it_ended_while_away()
-> TestResult {
    let imds = Imds::start().await?;
    imds.sim.load_scenario(Scenario::parse(&format!(
        r#"
events:
  - {{ id: "{PLATFORM_REBOOT}", type: Reboot, resources: [{THIS_VM}], notice: 15m }}
"#
    ))?);
    let dir = TempDir::new("hooks-restart")?;
    let log = dir.path("hooks.log");
    let hook = |kind: &str| {
        format!(
            r#"--approve.{kind}-hook=["sh","-c","echo \"$EVENT_HOOK $EVENT_ID $EVENT_TYPE $EVENT_RESOURCES\" >> \"$0\"","{}"]"#,
            log.display()
        )
    };
    let hook_flags = flags(&dir, &[&hook("prepare"), &hook("recover")])?;
    let prepared = |m: &Exposition| {
        m.get(r#"azure_scheduled_events_hook_runs_total{hook="prepare",result="ok"}"#) == 1.0
    };
    let agent = start(&imds, &hook_flags).await?;
    agent.wait_for("the prepare hook", prepared).await?;
    agent.stop().await?;

    let again = start(&imds, &hook_flags).await?;
    again
        .wait_for("the event", |m| m.event_info(PLATFORM_REBOOT).is_some())
        .await?;
    more_polls(&again, 20.0).await?;
    again.stop().await?;
    assert_eq!(
        std::fs::read_to_string(&log)?,
        format!("prepare {PLATFORM_REBOOT} Reboot {THIS_VM}\n"),
        "an event known before the restart is not prepared again"
    );

    assert!(imds.sim.remove_event(PLATFORM_REBOOT));
    let after = start(&imds, &hook_flags).await?;
    after
        .wait_for("the recover hook", |m| {
            m.get(r#"azure_scheduled_events_hook_runs_total{hook="recover",result="ok"}"#) == 1.0
        })
        .await?;
    more_polls(&after, 20.0).await?;
    after.stop().await?;
    assert_eq!(
        std::fs::read_to_string(&log)?,
        format!(
            "prepare {PLATFORM_REBOOT} Reboot {THIS_VM}\nrecover {PLATFORM_REBOOT} Reboot {THIS_VM}\n"
        ),
        "the event that ended while the agent was away is recovered, once"
    );
    Ok(())
}

/// The built binary's JSON log lines after its `starting` line until one matches `done` (waiting
/// at most [`common::PATIENCE`]); the process is killed.
fn binary_log_lines(
    imds_url: &str,
    args: &[String],
    done: impl Fn(&serde_json::Value) -> bool,
) -> Result<Vec<serde_json::Value>, Box<dyn std::error::Error>> {
    let url = format!("--imds.url={imds_url}");
    let mut all = vec![
        url.as_str(),
        "--web.listen-address=127.0.0.1:0",
        "--poll.interval=50ms",
    ];
    all.extend(args.iter().map(String::as_str));
    let agent = common::process::AgentProcess::spawn(common::process::command(&all))?;
    Ok(agent.lines_until(done)?)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_decision_is_one_json_log_line_with_the_event_id_trace_id_and_vm_name() -> TestResult
{
    let imds = Imds::start().await?;
    imds.sim.set_document(document(
        2,
        &[
            event_json(USER_REBOOT, "Scheduled", "Reboot", "User", &[THIS_VM], -1),
            event_json(
                LONG_FREEZE,
                "Scheduled",
                "Freeze",
                "Platform",
                &[THIS_VM],
                30,
            ),
        ],
    ));
    let dir = TempDir::new("log-lines")?;
    let args = flags(&dir, &["--approve"])?;
    let url = imds.url();
    let lines = tokio::task::spawn_blocking(move || {
        binary_log_lines(&url, &args, |l| {
            l["fields"]["message"] == "event approved" || l["message"] == "event approved"
        })
        .map_err(|e| e.to_string())
    })
    .await??;
    let field = |line: &serde_json::Value, name: &str| {
        line.get(name)
            .or_else(|| line["fields"].get(name))
            .cloned()
            .unwrap_or_default()
    };
    let about = |id: &str| -> Vec<&serde_json::Value> {
        lines
            .iter()
            .filter(|l| field(l, "event_id") == id && !field(l, "decision").is_null())
            .collect()
    };
    let approved = about(USER_REBOOT);
    assert_eq!(approved.len(), 1, "{approved:#?}");
    let line = approved[0];
    assert_eq!(field(line, "message"), "event approved");
    assert_eq!(field(line, "decision"), "approved");
    assert_eq!(field(line, "reason"), "user_event");
    assert_eq!(field(line, "vm_name"), THIS_VM);
    assert_eq!(field(line, "event_type"), "Reboot");
    assert_eq!(field(line, "trace_id"), "a0000000000040008000000000000001");
    let skipped = about(LONG_FREEZE);
    assert_eq!(skipped.len(), 1, "{skipped:#?}");
    assert_eq!(field(skipped[0], "decision"), "skipped");
    assert_eq!(field(skipped[0], "reason"), "freeze_too_long");
    Ok(())
}

fn with_suffix(path: &Path, suffix: &str) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(".");
    name.push(suffix);
    PathBuf::from(name)
}

/// The approval POSTs the simulator received, in order, whatever it answered.
fn posts(imds: &Imds) -> Vec<SeenRequest> {
    imds.sim
        .request_log()
        .into_iter()
        .filter(SeenRequest::is_post)
        .collect()
}

#[tokio::test]
async fn the_approval_post_carries_metadata_true_and_exactly_the_event_id() -> TestResult {
    let imds = imds_with_user_reboot().await?;
    let dir = TempDir::new("metadata")?;
    let agent = start(&imds, &flags(&dir, &["--approve"])?).await?;
    agent
        .wait_for("the approval", |m| approvals(m, "Reboot") == 1.0)
        .await?;
    let posts = posts(&imds);
    assert_eq!(posts.len(), 1, "{posts:?}");
    assert_eq!(posts[0].metadata.as_deref(), Some("true"));
    let body: serde_json::Value =
        serde_json::from_str(posts[0].body.as_deref().unwrap_or_default())?;
    assert_eq!(
        body,
        serde_json::json!({"StartRequests":[{"EventId": USER_REBOOT}]})
    );
    assert_eq!(ids(&imds.sim.approvals()), [USER_REBOOT]);
    agent.stop().await
}

#[tokio::test]
async fn many_events_due_at_once_are_all_approved_once_a_few_per_poll() -> TestResult {
    let imds = Imds::start().await?;
    let ids: Vec<String> = (1..=7)
        .map(|i| format!("C0000000-0000-4000-8000-00000000000{i}"))
        .collect();
    let events: Vec<serde_json::Value> = ids
        .iter()
        .map(|id| event_json(id, "Scheduled", "Reboot", "User", &[THIS_VM], -1))
        .collect();
    imds.sim.set_document(document(2, &events));
    let dir = TempDir::new("many")?;
    let agent = start(&imds, &flags(&dir, &["--approve"])?).await?;
    agent
        .wait_for("seven approvals", |m| approvals(m, "Reboot") == 7.0)
        .await?;
    more_polls(&agent, 20.0).await?;
    let mut posted: Vec<String> = imds
        .sim
        .approvals()
        .into_iter()
        .map(|a| a.event_id)
        .collect();
    posted.sort();
    assert_eq!(posted, ids, "each once");
    assert_eq!(posts(&imds).len(), 7);
    let sequence: String = imds
        .sim
        .request_log()
        .iter()
        .map(|r| if r.is_post() { 'P' } else { 'G' })
        .collect();
    let longest = sequence.split('G').map(str::len).max().unwrap_or(0);
    assert!(
        longest <= 3,
        "at most 3 POSTs between two polls: {sequence}"
    );
    // That three, and not one, are sent per document is a unit test of approval::decide: here
    // the POSTs leave from a task of their own, beside the GETs.
    agent.stop().await
}

#[tokio::test]
async fn polling_goes_on_while_imds_takes_seconds_to_answer_an_approval() -> TestResult {
    let imds = imds_with_user_reboot().await?;
    let hold = Duration::from_secs(5);
    imds.sim
        .inject_fault(Fault::delay(hold).on(FaultTarget::Approvals));
    let dir = TempDir::new("slow-post")?;
    let agent = start(
        &imds,
        &flags(
            &dir,
            &["--approve", "--imds.timeout=10s", "--poll.interval=250ms"],
        )?,
    )
    .await?;
    agent
        .wait_for("the approval", |m| approvals(m, "Reboot") == 1.0)
        .await?;
    assert_eq!(ids(&imds.sim.approvals()), [USER_REBOOT], "delivered once");
    let log = imds.sim.request_log();
    let post = log.iter().find(|r| r.is_post()).ok_or("no POST")?;
    assert_eq!(post.fault.as_deref(), Some("delay"), "the POST was held");
    let (posted, held_until) = (post.at, post.at + chrono::TimeDelta::from_std(hold)?);
    // GETs that arrived while the POST was held: the POST leaves from a task of its own.
    let during: Vec<_> = log
        .iter()
        .filter(|r| r.is_get() && r.at > posted && r.at < held_until)
        .map(|r| r.at)
        .collect();
    let longest_gap = during
        .windows(2)
        .filter_map(|w| (w[1] - w[0]).to_std().ok())
        .max()
        .unwrap_or_default();
    eprintln!(
        "GETs while the POST was held {hold:?}: {} (250 ms interval), longest gap {longest_gap:?}",
        during.len()
    );
    assert!(
        during.len() >= 10,
        "a 250 ms poll makes about 20 GETs in {hold:?}; the POST held the loop: {} GETs",
        during.len()
    );
    agent.stop().await
}

#[tokio::test]
async fn a_500_on_post_is_retried_with_backoff_until_it_succeeds() -> TestResult {
    let imds = imds_with_user_reboot().await?;
    imds.sim
        .inject_fault(Fault::status(500).on(FaultTarget::Approvals));
    imds.sim
        .inject_fault(Fault::status(503).on(FaultTarget::Approvals));
    let dir = TempDir::new("retry")?;
    let agent = start(&imds, &flags(&dir, &["--approve"])?).await?;
    agent
        .wait_for("the approval after two failures", |m| {
            approvals(m, "Reboot") == 1.0
                && failures(m, "Reboot", "http_5xx") == 2.0
                && decisions(m, "post_failed", "http_5xx") == 2.0
        })
        .await?;
    assert_eq!(posts(&imds).len(), 3, "two failures, then the success");
    assert_eq!(ids(&imds.sim.approvals()), [USER_REBOOT]);
    imds.polled(20).await?;
    assert_eq!(posts(&imds).len(), 3, "nothing after the success");
    agent.stop().await
}

#[tokio::test]
async fn a_400_on_post_is_logged_and_never_sent_again() -> TestResult {
    let imds = imds_with_user_reboot().await?;
    imds.sim
        .inject_fault(Fault::status(400).times(50).on(FaultTarget::Approvals));
    let dir = TempDir::new("400")?;
    let agent = start(&imds, &flags(&dir, &["--approve"])?).await?;
    agent
        .wait_for("the refusal", |m| failures(m, "Reboot", "http_4xx") == 1.0)
        .await?;
    // Eighty polls, at least 4 s: a retry (after 1 s, then 2 s) would have come.
    imds.polled(80).await?;
    let m = agent.metrics().await?;
    assert_eq!(posts(&imds).len(), 1, "a 400 is not retried");
    assert_eq!(failures(&m, "Reboot", "http_4xx"), 1.0);
    assert_eq!(approvals(&m, "Reboot"), 0.0);
    agent.stop().await?;

    let again = start(&imds, &flags(&dir, &["--approve"])?).await?;
    again
        .wait_for("the remembered refusal", |m| {
            decisions(m, "skipped", "rejected") == 1.0
        })
        .await?;
    imds.polled(20).await?;
    assert_eq!(posts(&imds).len(), 1, "nor after a restart");
    again.stop().await
}

#[tokio::test]
async fn polls_go_on_while_posts_fail() -> TestResult {
    let imds = imds_with_user_reboot().await?;
    imds.sim.inject_fault(
        Fault::status(500)
            .until_cleared()
            .on(FaultTarget::Approvals),
    );
    let dir = TempDir::new("failing")?;
    let agent = start(&imds, &flags(&dir, &["--approve"])?).await?;
    agent
        .wait_for("two failed attempts", |m| {
            failures(m, "Reboot", "http_5xx") >= 2.0
        })
        .await?;
    let m = agent
        .wait_for("more polls", |m| events_requests(m) >= 30.0)
        .await?;
    assert_eq!(m.up(), Some(1.0));
    assert!(
        failures(&m, "Reboot", "http_5xx") < 10.0,
        "retries back off instead of following the 50 ms poll: {}",
        failures(&m, "Reboot", "http_5xx")
    );
    agent.stop().await
}

/// The start line says the approval policy in words a person reads (what it approves, what never,
/// when), not as a Rust value.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_start_line_says_the_approval_policy_in_words() -> TestResult {
    let imds = Imds::start().await?;
    let dir = TempDir::new("policy-line")?;
    let args = flags(
        &dir,
        &[
            "--approve",
            "--approve.deny-event-types=Terminate",
            "--approve.freeze-max-duration=5s",
        ],
    )?;
    let url = imds.url();
    let lines = binary_log_lines(&url, &args, |l| l["message"] == "approval enabled")?;
    let line = lines
        .iter()
        .find(|l| l["message"] == "approval enabled")
        .ok_or("no approval line")?;
    let policy = line["policy"].as_str().ok_or("policy is not a string")?;
    assert_eq!(
        policy,
        "approves events a user started (EventSource User) and Freezes shorter than 5s; never Terminate; as soon as seen; a shared event by each next VM of its Resources 30s after the one before; only events naming this VM, never once Started"
    );
    Ok(())
}
