//! The state file: never fatal, never half-written, and what a restart makes of it (reboots).

use crate::common;

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use azure_scheduled_events_core::state::{ApprovalRecord, ApprovalStatus, State};
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
fn a_state_file_cut_at_every_byte_offset_keeps_every_approval_it_names_in_full() -> TestResult {
    let dir = TempDir::new("truncated")?;
    let path = dir.path("state.json");
    let sample = sample_state();
    let full = sample.to_bytes();
    let text = String::from_utf8(full.clone())?;
    let approvals_at = text.find("\"approvals\"").ok_or("no approvals")?;
    // Where each approval's key ends: a cut past it names the approval in full.
    let key_ends: Vec<(&String, usize)> = sample
        .approvals
        .keys()
        .filter_map(|id| {
            let quoted = format!("\"{id}\"");
            let start = approvals_at + text[approvals_at..].find(&quoted)?;
            Some((id, start + quoted.len()))
        })
        .collect();
    assert_eq!(key_ends.len(), sample.approvals.len());
    let mut partly = 0;
    for cut in 0..full.len() {
        let truncated = &full[..cut];
        std::fs::write(&path, truncated)?;
        let _ = std::fs::remove_file(dir.path("state.json.corrupt"));
        let (mut store, opened) = StateStore::open(Some(&path));
        match opened {
            Opened::Loaded => {
                assert_eq!(
                    *store.state(),
                    sample,
                    "a cut that loads may only have removed trailing whitespace (cut at {cut})"
                );
            }
            Opened::Partly {
                newer: None, aside, ..
            } => {
                partly += 1;
                let aside = aside.ok_or("the file was not copied aside")?;
                assert_eq!(std::fs::read(&aside)?, truncated, "cut at {cut}: the copy");
                let kept = &store.state().approvals;
                for (id, end) in &key_ends {
                    if cut >= *end {
                        assert!(
                            kept.get(*id).is_some_and(|r| r.status.is_final()),
                            "cut at {cut}: {id} is named in full, so it counts as sent"
                        );
                    }
                }
                assert!(
                    kept.keys().all(|id| sample.approvals.contains_key(id)),
                    "cut at {cut}: nothing invented: {kept:?}"
                );
                let kept = kept.len();
                store.flush();
                let rewritten = State::parse(&std::fs::read(&path)?)?;
                assert_eq!(
                    rewritten.approvals.len(),
                    kept,
                    "cut at {cut}: replaced by what was kept"
                );
            }
            other => panic!("cut at {cut}: {other:?}"),
        }
    }
    assert!(
        partly >= full.len() - 1,
        "only the cut of the final newline may load"
    );
    Ok(())
}

#[test]
fn a_state_file_from_a_newer_version_keeps_only_its_approvals() -> TestResult {
    let dir = TempDir::new("newer")?;
    let path = dir.path("state.json");
    let newer = br#"{"version": 99, "boot_id": "b", "approvals": {"X": "?"}}"#;
    std::fs::write(&path, newer)?;
    let (store, opened) = StateStore::open(Some(&path));
    assert!(
        matches!(opened, Opened::Partly { newer: Some(99), aside: Some(ref p), .. } if p.ends_with("state.json.newer")),
        "{opened:?}"
    );
    assert_eq!(std::fs::read(dir.path("state.json.newer"))?, newer);
    assert_eq!(store.state().boot_id, None, "nothing else is read");
    assert!(
        store
            .state()
            .approvals
            .get("X")
            .is_some_and(|r| r.status == ApprovalStatus::Sent)
    );
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

#[cfg(unix)]
#[test]
fn a_link_at_the_temporary_file_is_never_followed() -> TestResult {
    let dir = TempDir::new("tmp-link")?;
    let outside = TempDir::new("tmp-link-target")?;
    let (target, absent) = (outside.path("precious"), outside.path("absent"));
    std::fs::write(&target, b"precious\n")?;
    let path = dir.path("state.json");
    let temp = dir.path("state.json.tmp");
    let (mut store, _) = StateStore::open(Some(&path));
    for (link_to, incarnation) in [(&target, 1), (&absent, 2)] {
        std::os::unix::fs::symlink(link_to, &temp)?;
        store.state_mut().document_incarnation = Some(incarnation);
        store.flush();
        assert!(store.is_healthy());
        assert_eq!(
            State::parse(&std::fs::read(&path)?)?.document_incarnation,
            Some(incarnation)
        );
        assert!(
            std::fs::symlink_metadata(&temp).is_err(),
            "the link is gone, nothing is left at its name"
        );
    }
    assert_eq!(
        std::fs::read(&target)?,
        b"precious\n",
        "the target is untouched"
    );
    assert!(
        !absent.exists(),
        "nothing is created through a dangling link"
    );
    assert!(!path.is_symlink());
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
async fn without_its_directory_the_agent_keeps_state_in_memory_and_sends_no_approval() -> TestResult
{
    let imds = Imds::start().await?;
    imds.sim.load_scenario(user_reboot_scenario()?);
    // A directory no one can create, root included (the agent makes a missing one it can:
    // tests/suite/deploy.rs).
    let missing = std::path::Path::new("/proc/azure-scheduled-events-exporter-test");
    let state_flag = format!("--state.file={}", missing.join("state.json").display());
    for run in ["first", "restarted"] {
        let agent = Agent::start(&imds, &["--approve", &state_flag]).await?;
        let m = agent
            .wait_for("the approval not sent, the state file down", |m| {
                not_written(m) == 1.0 && m.value("azure_scheduled_events_state_up") == Some(0.0)
            })
            .await?;
        assert_eq!(m.up(), Some(1.0));
        assert_eq!(approvals(&m), 0.0, "{run} run");
        assert_eq!(imds.sim.approvals().len(), 0, "{run} run: nothing POSTed");
        agent.stop().await?;
    }
    assert!(!missing.exists(), "a directory appeared in /proc");
    Ok(())
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
    agent
        .wait_for("the approval, the state file written", |m| {
            approvals(m) == 1.0 && m.value("azure_scheduled_events_state_up") == Some(1.0)
        })
        .await?;
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

/// The EventId of the approvals the odd state files below name.
const ATTEMPTED: &str = "A0000000-0000-4000-8000-00000000000a";

/// A user-initiated Reboot of this VM, Scheduled in 15 minutes, as a verbatim document holds it:
/// approvals leave it as it is, so only the state file can stop a second POST.
fn user_reboot_json(id: &str) -> serde_json::Value {
    let not_before = (Utc::now() + chrono::TimeDelta::minutes(15))
        .format("%a, %d %b %Y %H:%M:%S GMT")
        .to_string();
    serde_json::json!({
        "EventId": id, "EventStatus": "Scheduled", "EventType": "Reboot",
        "ResourceType": "VirtualMachine", "Resources": [THIS_VM], "NotBefore": not_before,
        "Description": "", "EventSource": "User", "DurationInSeconds": -1
    })
}

fn decided(m: &Exposition, decision: &str, reason: &str) -> f64 {
    m.get(&format!(
        r#"azure_scheduled_events_approval_decisions_total{{decision="{decision}",reason="{reason}"}}"#
    ))
}

fn not_written(m: &Exposition) -> f64 {
    m.get(r#"azure_scheduled_events_approval_failures_total{event_type="Reboot",reason="state_unwritable"}"#)
}

/// Runs an approving agent on `dir`'s state file until `done` holds; returns the last scrape.
async fn approving_run(
    imds: &Imds,
    dir: &TempDir,
    done: impl Fn(&Exposition) -> bool,
) -> Result<Exposition, Box<dyn std::error::Error>> {
    let boot = dir.path("boot_id");
    if !boot.exists() {
        std::fs::write(&boot, "boot-1\n")?;
    }
    let state_flag = format!("--state.file={}", dir.path("state.json").display());
    let boot_flag = format!("--state.boot-id-file={}", boot.display());
    let agent = Agent::start(imds, &["--approve", &state_flag, &boot_flag]).await?;
    let m = agent.wait_for("the approval decided", done).await?;
    agent.stop().await?;
    Ok(m)
}

/// How many POSTs each EventId got, most first.
fn posts_per_id(imds: &Imds) -> Vec<(String, usize)> {
    let mut counts = std::collections::BTreeMap::<String, usize>::new();
    for approval in imds.sim.approvals() {
        *counts.entry(approval.event_id).or_default() += 1;
    }
    let mut counts: Vec<(String, usize)> = counts.into_iter().collect();
    counts.sort_by_key(|(_, posts)| std::cmp::Reverse(*posts));
    counts
}

#[tokio::test]
async fn sixty_approvals_of_the_longest_event_ids_accepted_are_sent_once_across_three_restarts()
-> TestResult {
    // The longest ids a document may carry (longer ones refuse it as too large), stored hashed in
    // the state file: the digest must lead back to the id at every restart.
    let longest = azure_scheduled_events_core::limits::MAX_LABEL_BYTES;
    let ids: Vec<String> = (0..60)
        .map(|i| format!("{i:02}{}", "E".repeat(longest - 2)))
        .collect();
    let events: Vec<serde_json::Value> = ids.iter().map(|id| user_reboot_json(id)).collect();
    let imds = Imds::start().await?;
    imds.sim.set_document(common::document(2, &events));
    let dir = TempDir::new("long-ids")?;
    let mut posts_after_each_run = Vec::new();
    for _ in 0..4 {
        approving_run(&imds, &dir, |m| {
            approvals(m) + decided(m, "skipped", "already_approved") >= 60.0
        })
        .await?;
        posts_after_each_run.push(imds.sim.approvals().len());
    }
    let per_id = posts_per_id(&imds);
    let most = per_id.first().map_or(0, |(_, n)| *n);
    eprintln!(
        "60 EventIds of {longest} characters, a start and 3 restarts: POSTs in all after each run {posts_after_each_run:?}, most POSTs of one EventId {most}, state file {} bytes",
        std::fs::metadata(dir.path("state.json")).map_or(0, |m| m.len())
    );
    assert_eq!(per_id.len(), 60, "every event approved");
    assert_eq!(most, 1, "no EventId approved twice");
    assert!(
        !dir.path("state.json.corrupt").exists(),
        "the agent read back what it wrote"
    );
    Ok(())
}

#[tokio::test]
async fn an_approval_whose_attempt_cannot_be_written_is_not_sent_nor_after_restarts() -> TestResult
{
    let imds = Imds::start().await?;
    imds.sim
        .set_document(common::document(2, &[user_reboot_json(ATTEMPTED)]));
    let dir = TempDir::new("unwritable")?;
    // A readable state file that cannot be replaced, even by root: a directory (not empty) where
    // the temporary file goes, which removing a file never removes.
    std::fs::write(dir.path("state.json"), br#"{"version":1}"#)?;
    std::fs::create_dir(dir.path("state.json.tmp"))?;
    std::fs::write(dir.path("state.json.tmp").join("keep"), b"")?;
    let mut posts_after_each_run = Vec::new();
    for _ in 0..3 {
        let m = approving_run(&imds, &dir, |m| approvals(m) + not_written(m) >= 1.0).await?;
        assert_eq!(m.value("azure_scheduled_events_state_up"), Some(0.0));
        posts_after_each_run.push(imds.sim.approvals().len());
    }
    // Once the file can be written again, the event is approved once.
    std::fs::remove_dir_all(dir.path("state.json.tmp"))?;
    for _ in 0..2 {
        approving_run(&imds, &dir, |m| {
            approvals(m) + decided(m, "skipped", "already_approved") >= 1.0
        })
        .await?;
        posts_after_each_run.push(imds.sim.approvals().len());
    }
    eprintln!(
        "an unwritable state file for 3 runs, then a writable one for 2: POSTs after each run {posts_after_each_run:?}"
    );
    assert_eq!(posts_after_each_run, [0, 0, 0, 1, 1]);
    Ok(())
}

/// State files the agent never writes but may find, each naming [`ATTEMPTED`] as approved.
fn odd_state_files() -> Vec<(&'static str, Vec<u8>)> {
    let id = ATTEMPTED;
    let at = "2026-11-22T11:13:38Z";
    let record = |fields: &str| format!(r#"{{"version":1,"approvals":{{"{id}":{{{fields}}}}}}}"#);
    let sent = format!(r#""event_type":"Reboot","at":"{at}","status":"sent","attempts":1"#);
    let whole = record(&sent);
    let with = |field: &str| {
        record(&format!(
            r#""event_type":"Reboot","at":"{at}","attempts":1,{field}"#
        ))
    };
    let status = |status: &str| with(&format!(r#""status":{status}"#));
    let other =
        |field: &str| format!(r#"{{"version":1,{field},"approvals":{{"{id}":{{{sent}}}}}}}"#);
    let files: Vec<(&'static str, String)> = vec![
        ("a status of a newer agent", status(r#""acknowledged""#)),
        ("status null", status("null")),
        ("status a number", status("7")),
        (
            "no status",
            record(r#""event_type":"Reboot","at":"2026-11-22T11:13:38Z","attempts":1"#),
        ),
        ("the record null", record("").replace("{}", "null")),
        ("the record a string", record("").replace("{}", r#""sent""#)),
        (
            "attempts -1",
            record(&sent.replace(r#""attempts":1"#, r#""attempts":-1"#)),
        ),
        (
            "attempts past u64",
            record(&sent.replace(r#""attempts":1"#, r#""attempts":18446744073709551616"#)),
        ),
        (
            "attempts 1e400",
            record(&sent.replace(r#""attempts":1"#, r#""attempts":1e400"#)),
        ),
        ("at not a time", record(&sent.replace(at, "yesterday"))),
        (
            "event_type a number",
            record(&sent.replace(r#""Reboot""#, "5")),
        ),
        (
            "status twice, sent then failed",
            status(r#""sent","status":"failed""#),
        ),
        (
            "the approval twice, sent then failed",
            format!(
                r#"{{"version":1,"approvals":{{"{id}":{{{sent}}},"{id}":{{{}}}}}}}"#,
                sent.replace("sent", "failed")
            ),
        ),
        (
            "approvals twice, the second empty",
            format!(r#"{{"version":1,"approvals":{{"{id}":{{{sent}}}}},"approvals":{{}}}}"#),
        ),
        ("a byte order mark", format!("\u{feff}{whole}")),
        ("trailing bytes", format!("{whole}\0\0garbage")),
        (
            "a second document after it",
            format!(r#"{whole}{{"version":1,"approvals":{{}}}}"#),
        ),
        (
            "cut short in the record",
            whole[..whole.find("attempts").unwrap_or(0)].to_owned(),
        ),
        ("no version", whole.replace(r#""version":1,"#, "")),
        (
            "version a string",
            whole.replace(r#""version":1"#, r#""version":"1""#),
        ),
        (
            "version 0",
            whole.replace(r#""version":1"#, r#""version":0"#),
        ),
        (
            "a newer format",
            whole
                .replace(r#""version":1"#, r#""version":2"#)
                .replace(r#""sent""#, r#""confirmed""#),
        ),
        ("events not a list", other(r#""events":7"#)),
        ("an event null", other(r#""events":[null]"#)),
        (
            "boot_id a number, document_incarnation -5",
            other(r#""boot_id":42,"document_incarnation":-5"#),
        ),
        (
            "clean_stop and notifications of the wrong shape",
            other(r#""clean_stop":"later","notifications":[1]"#),
        ),
        (
            "over the 4 MiB read cap, as an older agent wrote it",
            other(&format!(
                r#""events":[{{"event_id":"{}"}}]"#,
                "E".repeat(5 << 20)
            )),
        ),
    ];
    files
        .into_iter()
        .map(|(name, text)| (name, text.into_bytes()))
        .collect()
}

#[tokio::test]
async fn no_odd_state_file_gets_an_attempted_approval_sent_again() -> TestResult {
    let imds = Imds::start().await?;
    imds.sim
        .set_document(common::document(2, &[user_reboot_json(ATTEMPTED)]));
    let files = odd_state_files();
    assert_eq!(files.len(), 27);
    let mut sent_again = Vec::new();
    for (name, bytes) in &files {
        let dir = TempDir::new("odd")?;
        std::fs::write(dir.path("state.json"), bytes)?;
        let before = imds.sim.approvals().len();
        approving_run(&imds, &dir, |m| {
            approvals(m)
                + decided(m, "skipped", "already_approved")
                + decided(m, "skipped", "rejected")
                >= 1.0
        })
        .await?;
        let posts = imds.sim.approvals().len() - before;
        eprintln!("{name:<50} POSTs {posts}");
        if posts > 0 {
            sent_again.push(*name);
        }
    }
    eprintln!(
        "{} of {} odd state files got the attempted approval sent again",
        sent_again.len(),
        files.len()
    );
    assert!(sent_again.is_empty(), "sent again: {sent_again:?}");
    Ok(())
}
