//! The state file: never fatal, never half-written, and what a restart makes of it (reboots).

use crate::common;

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use azure_scheduled_events_exporter::core::state::{ApprovalRecord, ApprovalStatus, State};
use azure_scheduled_events_exporter::state_file::{Opened, StateStore};
use azure_scheduled_events_simulator::{Scenario, ScenarioEvent};
use chrono::{DateTime, Utc};
use common::{Agent, Exposition, Imds, THIS_VM, TempDir, TestResult};

const BIN: &str = env!("CARGO_BIN_EXE_azure-scheduled-events-exporter");
const REBOOT: &str = "B0000000-0000-4000-8000-000000000001";

fn sample_state() -> State {
    let mut state = State::new();
    state.boot_id = Some("4a3c2b1d-0000-4000-8000-00000000beef".into());
    state.document_incarnation = Some(42);
    let at = DateTime::from_timestamp(1_700_000_000, 0).unwrap_or_default();
    for (i, id) in ["A", "B", "C"].iter().enumerate() {
        state.approvals.insert(
            format!("{id}0000000-0000-4000-8000-00000000000{i}"),
            ApprovalRecord {
                event_type: "Freeze".into(),
                at,
                status: ApprovalStatus::Sent,
                attempts: 1,
            },
        );
    }
    state
}

#[test]
fn a_state_file_truncated_at_every_byte_offset_is_set_aside_or_read_never_a_crash() -> TestResult {
    let dir = TempDir::new("truncated")?;
    let path = dir.path("state.json");
    let full = sample_state().to_bytes();
    let mut replaced = 0;
    for cut in 0..full.len() {
        let truncated = &full[..cut];
        std::fs::write(&path, truncated)?;
        let _ = std::fs::remove_file(dir.path("state.json.corrupt"));
        let (store, opened) = StateStore::open(Some(&path));
        match opened {
            Opened::Loaded => {
                assert_eq!(
                    *store.state(),
                    sample_state(),
                    "a cut that loads may only have removed trailing whitespace (cut at {cut})"
                );
            }
            Opened::Replaced { aside, .. } => {
                replaced += 1;
                assert_eq!(*store.state(), State::new(), "cut at {cut}: starts fresh");
                let aside = aside.ok_or("the corrupt file was not set aside")?;
                assert_eq!(
                    std::fs::read(&aside)?,
                    truncated,
                    "cut at {cut}: the copy aside"
                );
                assert!(
                    !path.exists(),
                    "cut at {cut}: the corrupt file is out of the way"
                );
            }
            Opened::Fresh => panic!("cut at {cut}: a present file read as missing"),
        }
    }
    assert!(
        replaced >= full.len() - 1,
        "only the cut of the final newline may load"
    );
    Ok(())
}

#[test]
fn a_state_file_from_a_newer_version_is_set_aside_and_not_read() -> TestResult {
    let dir = TempDir::new("newer")?;
    let path = dir.path("state.json");
    std::fs::write(&path, br#"{"version": 99, "approvals": {"X": "?"}}"#)?;
    let (store, opened) = StateStore::open(Some(&path));
    assert!(
        matches!(opened, Opened::Replaced { aside: Some(ref p), .. } if p.ends_with("state.json.newer"))
    );
    assert_eq!(*store.state(), State::new());
    Ok(())
}

#[test]
fn the_state_is_written_only_when_it_changes() -> TestResult {
    let dir = TempDir::new("changes")?;
    let path = dir.path("state.json");
    let (mut store, opened) = StateStore::open(Some(&path));
    assert!(matches!(opened, Opened::Fresh));
    *store.state_mut() = sample_state();
    store.flush();
    let written = std::fs::metadata(&path)?.modified()?;
    std::fs::remove_file(&path)?;
    store.flush();
    assert!(!path.exists(), "an unchanged state is not written again");
    store.state_mut().document_incarnation = Some(43);
    store.flush();
    assert!(path.exists() && std::fs::metadata(&path)?.modified()? >= written);
    assert_eq!(
        State::parse(&std::fs::read(&path)?)?.document_incarnation,
        Some(43)
    );
    assert!(
        !dir.path("state.json.tmp").exists(),
        "no temporary file is left"
    );
    Ok(())
}

fn user_reboot_scenario() -> Result<Scenario, Box<dyn std::error::Error>> {
    Ok(Scenario::parse(&format!(
        r#"
events:
  - {{ id: "{REBOOT}", type: Reboot, source: User, resources: [{THIS_VM}], notice: 15m, runs_for: 1h }}
"#
    ))?)
}

fn approvals(m: &Exposition) -> f64 {
    m.get(r#"azure_scheduled_events_approvals_total{event_type="Reboot"}"#)
}

#[tokio::test]
async fn without_its_directory_the_agent_keeps_state_in_memory_and_still_approves_once()
-> TestResult {
    let imds = Imds::start().await?;
    imds.sim.load_scenario(user_reboot_scenario()?);
    // A directory no one can create (the agent makes a missing one it can: tests/suite/deploy.rs).
    let missing = std::path::Path::new("/proc/azure-scheduled-events-exporter-test");
    let state_flag = format!("--state.file={}", missing.join("state.json").display());
    let agent = Agent::start(&imds, &["--approve", &state_flag]).await?;
    let m = agent
        .wait_for("the approval", |m| approvals(m) == 1.0)
        .await?;
    assert_eq!(m.value("azure_scheduled_events_state_up"), Some(0.0));
    assert_eq!(m.up(), Some(1.0));
    assert_eq!(imds.sim.approvals().len(), 1);
    assert!(!missing.exists(), "a directory appeared in /proc");
    agent.stop().await
}

#[tokio::test]
async fn a_corrupt_state_file_is_set_aside_and_replaced_and_the_agent_runs_on() -> TestResult {
    let imds = Imds::start().await?;
    imds.sim.load_scenario(user_reboot_scenario()?);
    let dir = TempDir::new("corrupt")?;
    let path = dir.path("state.json");
    std::fs::write(&path, b"{\"version\":1,\"approvals\":{\"")?;
    let state_flag = format!("--state.file={}", path.display());
    let agent = Agent::start(&imds, &["--approve", &state_flag]).await?;
    let m = agent
        .wait_for("the approval", |m| approvals(m) == 1.0)
        .await?;
    assert_eq!(m.value("azure_scheduled_events_state_up"), Some(1.0));
    agent.stop().await?;
    assert_eq!(
        std::fs::read(dir.path("state.json.corrupt"))?,
        b"{\"version\":1,\"approvals\":{\""
    );
    let state = State::parse(&std::fs::read(&path)?)?;
    assert_eq!(
        state.approvals.get(REBOOT).map(|r| r.status),
        Some(ApprovalStatus::Sent)
    );
    assert!(
        state
            .events
            .iter()
            .any(|e| e.event_id == REBOOT && e.affects_this_vm)
    );
    Ok(())
}

/// Reboots counted `expected`, clean or not.
fn reboots(m: &Exposition, expected: &str) -> f64 {
    ["true", "false"]
        .iter()
        .map(|clean| {
            m.get(&format!(
                r#"azure_scheduled_events_reboots_total{{clean="{clean}",expected="{expected}"}}"#
            ))
        })
        .sum()
}

/// Reboots counted clean (the agent had stopped cleanly before), expected or not.
fn clean_reboots(m: &Exposition) -> f64 {
    ["true", "false"]
        .iter()
        .map(|expected| {
            m.get(&format!(
                r#"azure_scheduled_events_reboots_total{{clean="true",expected="{expected}"}}"#
            ))
        })
        .sum()
}

/// Runs an agent on `dir`'s state file with boot id `boot` until `ready` holds; returns the first
/// scrape.
async fn run_on_boot(
    imds: &Imds,
    dir: &TempDir,
    boot: &str,
    ready: impl Fn(&Exposition) -> bool,
) -> Result<Exposition, Box<dyn std::error::Error>> {
    std::fs::write(dir.path("boot_id"), format!("{boot}\n"))?;
    let state_flag = format!("--state.file={}", dir.path("state.json").display());
    let boot_flag = format!("--state.boot-id-file={}", dir.path("boot_id").display());
    let agent = Agent::start(imds, &[&state_flag, &boot_flag]).await?;
    let first = agent.metrics().await?;
    agent.wait_for("the agent to be ready", ready).await?;
    agent.stop().await?;
    Ok(first)
}

#[tokio::test]
async fn a_reboot_after_this_vms_reboot_started_is_expected_and_any_other_is_not() -> TestResult {
    let imds = Imds::start().await?;
    let dir = TempDir::new("reboots")?;
    let up = |m: &Exposition| m.up() == Some(1.0);

    let first = run_on_boot(&imds, &dir, "boot-1", up).await?;
    assert_eq!(
        (reboots(&first, "true"), reboots(&first, "false")),
        (0.0, 0.0),
        "nothing to compare with"
    );

    let same = run_on_boot(&imds, &dir, "boot-1", up).await?;
    assert_eq!(
        (reboots(&same, "true"), reboots(&same, "false")),
        (0.0, 0.0),
        "a restart of the agent only"
    );

    let unexpected = run_on_boot(&imds, &dir, "boot-2", up).await?;
    assert_eq!(
        (reboots(&unexpected, "true"), reboots(&unexpected, "false")),
        (0.0, 1.0)
    );
    // Every run here ends with a clean stop (as SIGTERM at shutdown): the reboot is clean.
    assert_eq!(
        clean_reboots(&unexpected),
        1.0,
        "a reboot after a clean stop"
    );

    imds.sim.load_scenario(Scenario::parse(&format!(
        r#"
events:
  - {{ id: "{REBOOT}", type: Reboot, status: Started, resources: [{THIS_VM}], runs_for: 1h }}
"#
    ))?);
    run_on_boot(&imds, &dir, "boot-2", |m| m.event_info(REBOOT).is_some()).await?;
    let expected = run_on_boot(&imds, &dir, "boot-3", up).await?;
    assert_eq!(
        (reboots(&expected, "true"), reboots(&expected, "false")),
        (1.0, 0.0)
    );

    imds.sim.load_scenario(Scenario::parse("events: []")?);
    run_on_boot(&imds, &dir, "boot-3", |m| {
        m.event_info(REBOOT).is_none() && m.up() == Some(1.0)
    })
    .await?;
    let after_it_ended = run_on_boot(&imds, &dir, "boot-4", up).await?;
    assert_eq!(
        (
            reboots(&after_it_ended, "true"),
            reboots(&after_it_ended, "false")
        ),
        (0.0, 1.0),
        "once the event has completed without a reboot, the next reboot is unexpected again"
    );
    Ok(())
}

/// A small deterministic generator for kill times; the seed is printed so a failure can be replayed.
struct XorShift(u64);

impl XorShift {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

fn spawn_agent(imds_url: &str, state: &Path, boot: &Path) -> std::io::Result<Child> {
    let mut command = Command::new(BIN);
    command
        .args([
            &format!("--imds.url={imds_url}"),
            "--web.listen-address=127.0.0.1:0",
            "--poll.interval=10ms",
            "--imds.timeout=1s",
            "--approve",
            "--approve.event-types=Freeze",
            &format!("--state.file={}", state.display()),
            &format!("--state.boot-id-file={}", boot.display()),
        ])
        .env_clear()
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    command.spawn()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killing_the_agent_at_random_points_never_leaves_an_unreadable_state_file() -> TestResult {
    let imds = Imds::start().await?;
    let dir = TempDir::new("sigkill")?;
    let (state, boot) = (dir.path("state.json"), dir.path("boot_id"));
    std::fs::write(&boot, "boot-1\n")?;
    // Events come and go every few milliseconds, so the state changes at nearly every poll.
    let sim = imds.sim.clone();
    let churn = tokio::spawn(async move {
        loop {
            // Approved at once (a write before and after each POST), then over 50 ms later;
            // cancelled if the agent is not running to approve it.
            let event: Result<ScenarioEvent, _> = serde_json::from_value(serde_json::json!({
                "type": "Freeze", "resources": [THIS_VM], "duration_in_seconds": 5,
                "notice": "15m", "runs_for": "50ms", "cancel_after": "60ms"
            }));
            if let Ok(event) = event {
                let _ = sim.add_event(event);
            }
            tokio::time::sleep(Duration::from_millis(15)).await;
        }
    });
    let seed = Utc::now().timestamp_nanos_opt().unwrap_or(1) as u64 | 1;
    eprintln!("kill-time seed: {seed}");
    let mut random = XorShift(seed);
    let url = imds.url();
    let kills = 25;
    let mut versions = std::collections::HashSet::new();
    for round in 0..kills {
        let mut child = spawn_agent(&url, &state, &boot)?;
        // Wait for the agent to be running (its first log line), then kill it 0-400 ms later.
        let stdout = child.stdout.take().ok_or("no stdout")?;
        let (first_line, started) = tokio::sync::oneshot::channel();
        std::thread::spawn(move || {
            let mut lines = BufReader::new(stdout).lines();
            let _ = first_line.send(lines.next().is_some());
            // Keep reading so the agent never blocks on a full pipe.
            for _ in lines {}
        });
        assert!(started.await?, "round {round}: the agent did not start");
        tokio::time::sleep(Duration::from_millis(random.next() % 400)).await;
        child.kill()?;
        child.wait()?;
        if state.exists() {
            let bytes = std::fs::read(&state)?;
            let parsed = State::parse(&bytes)
                .map_err(|e| format!("round {round} (seed {seed}): unreadable state file: {e}"))?;
            versions.insert(parsed.document_incarnation);
        }
        assert!(
            !dir.path("state.json.corrupt").exists(),
            "round {round} (seed {seed}): a restart found the file unreadable"
        );
    }
    churn.abort();
    assert!(state.exists(), "the agent wrote its state");
    eprintln!(
        "{kills} kills, {} distinct incarnations saved",
        versions.len()
    );
    assert!(
        versions.len() > 3,
        "the state really changed between kills: {versions:?}"
    );
    Ok(())
}
