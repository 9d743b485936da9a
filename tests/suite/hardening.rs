//! What an outsider or a careless operator controls cannot hang, exhaust or open the agent: file
//! inputs that are devices or FIFOs, absurd flag values, credentials in URLs, signals.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use azure_scheduled_events_simulator::{Fault, Scenario};
use common::process::{AgentProcess, command};
use common::{Agent, Imds, PATIENCE, THIS_VM, TempDir, TestResult, wait};

const EVENT: &str = "5DD55B64-45AD-49D3-BBC9-F57D4EA97BD7";

/// A directory with a FIFO (`fifo`) in it; nothing ever writes to the FIFO, so reading it would
/// block forever.
fn dir_with_fifo(name: &str) -> Result<(TempDir, PathBuf), Box<dyn std::error::Error>> {
    let dir = TempDir::new(name)?;
    let fifo = dir.path("fifo");
    let status = Command::new("mkfifo").arg(&fifo).status()?;
    assert!(status.success(), "mkfifo");
    Ok((dir, fifo))
}

/// Runs `command` to its exit; a run still going after [`PATIENCE`] is killed and is an error
/// (a hang, the very thing these tests are about).
fn run_to_exit(mut command: Command) -> Result<Output, Box<dyn std::error::Error>> {
    let mut child = command
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()?;
    if let Err(e) = wait("the exit").until_blocking(|| child.try_wait()) {
        let _ = child.kill();
        let _ = child.wait();
        return Err(format!("still running: it hung on its input ({e})").into());
    }
    Ok(child.wait_with_output()?)
}

/// A way to name a file: flags, environment variables, and the flag an error names.
type FileCase = (Vec<String>, Vec<(&'static str, String)>, &'static str);

/// The flag files whose refusal exits 64, each with the flags it needs to be read at all (the
/// kubeconfig only in a build with the Kubernetes output: another refuses its flags first).
fn flag_files(path: &Path) -> Vec<FileCase> {
    let p = path.display().to_string();
    let mut cases = vec![
        (
            vec![format!("--web.config.file={p}")],
            vec![],
            "--web.config.file",
        ),
        (
            vec![format!("--approve.policy-file={p}")],
            vec![],
            "--approve.policy-file",
        ),
        (
            vec![format!("--notify.config-file={p}")],
            vec![],
            "--notify.config-file",
        ),
    ];
    if cfg!(feature = "kubernetes") {
        cases.extend([
            (
                vec![
                    "--kubernetes.node-name=node-1".into(),
                    format!("--kubernetes.kubeconfig={p}"),
                ],
                vec![],
                "--kubernetes.kubeconfig",
            ),
            (
                vec!["--kubernetes.node-name=node-1".into()],
                vec![("KUBECONFIG", p.clone())],
                "--kubernetes.kubeconfig",
            ),
        ]);
    }
    cases
}

#[test]
fn a_flag_naming_a_device_a_fifo_or_a_directory_exits_64_at_once_naming_the_flag() -> TestResult {
    let (dir, fifo) = dir_with_fifo("flag-files")?;
    for path in [Path::new("/dev/zero"), fifo.as_path(), dir.0.as_path()] {
        for (args, env, flag) in flag_files(path) {
            let mut args: Vec<&str> = args.iter().map(String::as_str).collect();
            args.push("--imds.url=http://127.0.0.1:9/");
            let mut command = command(&args);
            command.envs(env.iter().map(|(k, v)| (k, v)));
            let output = run_to_exit(command).map_err(|e| format!("{args:?} {env:?}: {e}"))?;
            let stderr = String::from_utf8_lossy(&output.stderr);
            assert_eq!(output.status.code(), Some(64), "{args:?} {env:?}: {stderr}");
            assert_eq!(stderr.trim_end().lines().count(), 1, "one line: {stderr}");
            assert!(stderr.contains(flag), "{args:?}: names {flag}: {stderr}");
            assert!(
                stderr.contains("not a regular file"),
                "{args:?}: says why: {stderr}"
            );
        }
    }
    Ok(())
}

#[test]
fn a_flag_file_larger_than_its_cap_exits_64_naming_the_cap() -> TestResult {
    let dir = TempDir::new("flag-file-cap")?;
    let big = dir.path("big.yaml");
    // Two MiB of a comment: valid YAML, over the 1 MiB cap of every flag file but the kubeconfig.
    std::fs::write(&big, format!("#{}\n", "x".repeat(2 << 20)))?;
    for flag in [
        "--web.config.file",
        "--approve.policy-file",
        "--notify.config-file",
    ] {
        let arg = format!("{flag}={}", big.display());
        let output = run_to_exit(command(&[&arg, "--imds.url=http://127.0.0.1:9/"]))?;
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(64), "{flag}: {stderr}");
        assert!(stderr.contains(flag), "{stderr}");
        assert!(stderr.contains("larger than 1048576 bytes"), "{stderr}");
    }
    Ok(())
}

/// The agent with `args` and `env`, polling a simulator.
fn spawn(
    imds: &Imds,
    args: &[&str],
    env: &[(&str, &str)],
) -> Result<AgentProcess, Box<dyn std::error::Error>> {
    let url = format!("--imds.url={}", imds.url());
    let mut all = vec![
        url.as_str(),
        "--web.listen-address=127.0.0.1:0",
        "--poll.interval=50ms",
    ];
    all.extend_from_slice(args);
    let mut command = command(&all);
    command.envs(env.iter().copied());
    AgentProcess::spawn(command)
}

#[tokio::test]
async fn a_state_file_that_is_a_device_or_a_fifo_keeps_state_in_memory_and_is_left_alone()
-> TestResult {
    let imds = Imds::start().await?;
    let (_dir, fifo) = dir_with_fifo("state-file")?;
    for path in [Path::new("/dev/zero"), fifo.as_path()] {
        let path_text = path.display().to_string();
        let process = spawn(
            &imds,
            &[],
            &[("AZURE_SCHEDULED_EVENTS_STATE_FILE", &path_text)],
        )?;
        let line = tokio::task::spawn_blocking(move || {
            let line = process
                .next_line_where(|l| l["message"] == "state file not usable: starting fresh");
            (process, line)
        })
        .await?;
        let (process, line) = line;
        let line = line?;
        assert!(
            line["error"]
                .as_str()
                .is_some_and(|e| e.contains("not a regular file")),
            "{line}"
        );
        process
            .wait_for_series("azure_scheduled_events_state_up 0")
            .await?;
        let kind = std::fs::metadata(path)?.file_type();
        assert!(!kind.is_file(), "{path_text} was not replaced by a file");
    }
    Ok(())
}

#[tokio::test]
async fn a_boot_id_file_that_is_a_device_or_a_fifo_is_unknown_and_polling_goes_on() -> TestResult {
    let imds = Imds::start().await?;
    let (_dir, fifo) = dir_with_fifo("boot-id")?;
    for path in [Path::new("/dev/zero"), fifo.as_path()] {
        let arg = format!("--state.boot-id-file={}", path.display());
        let process = spawn(&imds, &[&arg], &[])?;
        process
            .wait_for_series("azure_scheduled_events_up 1")
            .await?;
    }
    Ok(())
}

#[tokio::test]
async fn an_otlp_certificate_or_key_that_is_a_device_or_a_fifo_turns_traces_off_with_a_warning()
-> TestResult {
    let imds = Imds::start().await?;
    let (dir, fifo) = dir_with_fifo("otlp-pem")?;
    let pem = dir.path("ok.pem");
    std::fs::write(&pem, "")?;
    let pem = pem.display().to_string();
    for path in [Path::new("/dev/zero"), fifo.as_path()] {
        let bad = path.display().to_string();
        for (variables, named) in [
            (
                vec![("OTEL_EXPORTER_OTLP_CERTIFICATE", bad.as_str())],
                "OTEL_EXPORTER_OTLP_CERTIFICATE",
            ),
            (
                vec![
                    ("OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE", bad.as_str()),
                    ("OTEL_EXPORTER_OTLP_CLIENT_KEY", pem.as_str()),
                ],
                "OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE",
            ),
            (
                vec![
                    ("OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE", pem.as_str()),
                    ("OTEL_EXPORTER_OTLP_CLIENT_KEY", bad.as_str()),
                ],
                "OTEL_EXPORTER_OTLP_CLIENT_KEY",
            ),
        ] {
            let mut env = vec![("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:9")];
            env.extend(variables);
            let process = spawn(&imds, &[], &env)?;
            let (process, line) = tokio::task::spawn_blocking(move || {
                let line = process
                    .next_line_where(|l| l["message"] == "traces are off; metrics and logs go on");
                (process, line)
            })
            .await?;
            let line = line?;
            let error = line["error"].as_str().unwrap_or_default();
            assert!(error.contains(named), "names {named}: {error}");
            assert!(error.contains("not a regular file"), "{error}");
            process
                .wait_for_series("azure_scheduled_events_up 1")
                .await?;
        }
    }
    Ok(())
}

#[test]
fn absurd_operator_values_exit_64_with_one_line_naming_the_flag() -> TestResult {
    let dir = TempDir::new("absurd-values")?;
    let policy = dir.path("policy.yaml");
    std::fs::write(&policy, "takeover_delay: 18446744073709551615s\n")?;
    let policy = format!("--approve.policy-file={}", policy.display());
    let receivers = dir.path("receivers.yaml");
    std::fs::write(
        &receivers,
        "receivers:\n  - name: r\n    url: http://127.0.0.1:9/\n    timeout: 18446744073709551615s\n",
    )?;
    let receivers = format!("--notify.config-file={}", receivers.display());
    let huge = "18446744073709551615s";
    let mut cases: Vec<(Vec<String>, &str)> = vec![
        (vec!["--log.level=warning".into()], "--log.level"),
        (vec!["--log.level=inf".into()], "--log.level"),
        (vec!["--log.level=".into()], "--log.level"),
        (vec!["--log.level=info,hyper=loud".into()], "--log.level"),
        (vec!["--imds.max-backoff=6m".into()], "--imds.max-backoff"),
        (vec!["--poll.interval=1h".into()], "--poll.interval"),
        (vec!["--imds.timeout=6m".into()], "--imds.timeout"),
        (
            vec!["--imds.first-timeout=11m".into()],
            "--imds.first-timeout",
        ),
        (
            vec!["--approve.hook-timeout=2h".into()],
            "--approve.hook-timeout",
        ),
        (vec!["--otlp.timeout=6m".into()], "--otlp.timeout"),
        (vec![policy], "--approve.takeover-delay"),
        (vec![receivers], "--notify.config-file"),
        (
            vec![
                "--kubernetes.node-name=node-1".into(),
                "--kubernetes.resync-interval=2h".into(),
            ],
            "--kubernetes.resync-interval",
        ),
    ];
    for flag in [
        "--poll.interval",
        "--imds.timeout",
        "--imds.first-timeout",
        "--imds.max-backoff",
        "--approve.hook-timeout",
        "--approve.takeover-delay",
        "--approve.freeze-max-duration",
        "--otlp.timeout",
        "--kubernetes.resync-interval",
    ] {
        cases.push((vec![format!("{flag}={huge}")], flag));
    }
    for (args, flag) in &cases {
        let mut args: Vec<&str> = args.iter().map(String::as_str).collect();
        args.push("--imds.url=http://127.0.0.1:9/");
        let output = run_to_exit(command(&args))?;
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(64), "{args:?}: {stderr}");
        assert_eq!(
            stderr.trim_end().lines().count(),
            1,
            "{args:?}: one line: {stderr}"
        );
        assert!(stderr.contains(flag), "{args:?}: names {flag}: {stderr}");
        assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
    }
    Ok(())
}

#[tokio::test]
async fn one_429_with_a_huge_retry_after_does_not_stop_polling() -> TestResult {
    let imds = Imds::start().await?;
    let agent = Agent::start(&imds, &["--imds.max-backoff=1s"]).await?;
    agent
        .wait_for("a first document", |m| m.up() == Some(1.0))
        .await?;
    imds.sim.inject_fault(
        Fault::status(429)
            .with_retry_after(u64::from(u32::MAX))
            .times(1),
    );
    agent
        .wait_for("the 429 counted", |m| m.failures("http_429") >= 1.0)
        .await?;
    imds.sim.load_scenario(Scenario::parse(&format!(
        "events:\n  - {{ id: \"{EVENT}\", type: Reboot, source: User, resources: [{THIS_VM}], notice: 10m }}\n"
    ))?);
    agent
        .wait_for("an event seen after the 429", |m| {
            m.event_info(EVENT).is_some()
        })
        .await?;
    agent.stop().await
}

#[tokio::test]
async fn credentials_in_the_imds_url_are_never_printed() -> TestResult {
    let imds = Imds::start().await?;
    let reachable = imds.url().replacen("http://", "http://agent:s3cret-pw@", 1);
    // A reachable IMDS (the startup line, polls) and a dead one (connection errors).
    for url in [reachable.as_str(), "http://agent:s3cret-pw@127.0.0.1:9"] {
        let arg = format!("--imds.url={url}");
        let process = AgentProcess::spawn(command(&[
            &arg,
            "--web.listen-address=127.0.0.1:0",
            "--poll.interval=50ms",
            "--imds.max-backoff=50ms",
            "--log.level=debug",
        ]))?;
        let starting = process.starting();
        assert!(
            starting.to_string().contains("redacted@"),
            "the URL is shown, its user redacted: {starting}"
        );
        // Polls answered, or failed three times: then every line printed so far.
        let needle = if url == reachable {
            "azure_scheduled_events_up 1"
        } else {
            "operation=\"events\",reason=\"connect\"} 3"
        };
        process.wait_for_series(needle).await?;
        for line in process.lines_so_far()? {
            assert!(!line.to_string().contains("s3cret"), "{line}");
        }
        let output = run_to_exit(command(&[&arg, "--poll.interval=fast"]))?;
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(64), "{stderr}");
        assert!(
            !stderr.contains("s3cret"),
            "a config error does not repeat the URL: {stderr}"
        );
    }
    let output = run_to_exit(command(&["--imds.url=http://agent:s3cret-pw@[::1"]))?;
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(64), "{stderr}");
    assert!(!stderr.contains("s3cret"), "{stderr}");
    Ok(())
}

fn send(process: &AgentProcess, signal: &str) -> TestResult {
    let status = Command::new("kill")
        .args([&format!("-{signal}"), &process.id().to_string()])
        .status()?;
    assert!(status.success(), "kill -{signal}");
    Ok(())
}

#[cfg(unix)]
#[tokio::test]
async fn sighup_and_sigusr1_are_ignored_and_sigquit_stops_gracefully() -> TestResult {
    let imds = Imds::start().await?;
    let process = spawn(&imds, &[], &[])?;
    let mut process = tokio::task::spawn_blocking(move || -> Result<AgentProcess, String> {
        for signal in ["HUP", "USR1"] {
            send(&process, signal).map_err(|e| e.to_string())?;
            let line = process.next_line_where(|l| {
                l["message"]
                    .as_str()
                    .is_some_and(|m| m.starts_with("ignoring the signal"))
            })?;
            assert_eq!(line["signal"], format!("SIG{signal}"), "{line}");
        }
        Ok(process)
    })
    .await??;
    assert_eq!(
        process.exited()?,
        None,
        "still running after SIGHUP and SIGUSR1"
    );
    process
        .wait_for_series("azure_scheduled_events_up 1")
        .await?;
    send(&process, "QUIT")?;
    let (mut process, stopped) = tokio::task::spawn_blocking(move || {
        let line = process.next_line_where(|l| l["message"] == "stopped");
        (process, line)
    })
    .await?;
    stopped?;
    let status = wait("the exit after SIGQUIT")
        .until(async || process.exited())
        .await?;
    assert_eq!(status.code(), Some(0), "a graceful stop: {status:?}");
    Ok(())
}

#[tokio::test]
async fn six_hundred_unknown_event_types_add_one_transitions_series_not_six_hundred() -> TestResult
{
    let imds = Imds::start().await?;
    let agent = Agent::start(&imds, &[]).await?;
    agent
        .wait_for("a first document", |m| m.up() == Some(1.0))
        .await?;
    let event = |i: usize| {
        format!(
            r#"{{"EventId":"C0000000-0000-4000-8000-{i:012}","EventStatus":"Scheduled","EventType":"Invented{i}","ResourceType":"VirtualMachine","Resources":["{THIS_VM}"],"NotBefore":"Mon, 11 Apr 2050 22:26:58 GMT","Description":"","EventSource":"Platform","DurationInSeconds":-1}}"#
        )
    };
    // Six documents of 100 types each, one after the other: each type appears and goes.
    for batch in 0..6 {
        let events: Vec<String> = (batch * 100..(batch + 1) * 100).map(event).collect();
        imds.sim.set_document(
            format!(
                r#"{{"DocumentIncarnation":{},"Events":[{}]}}"#,
                batch + 2,
                events.join(",")
            )
            .into(),
        );
        let scheduled = (batch as f64 + 1.0) * 100.0;
        agent
            .wait_for("the batch scheduled", |m| {
                m.transitions("other", "scheduled") == scheduled
            })
            .await?;
    }
    let m = agent.metrics().await?;
    let types: std::collections::BTreeSet<&str> =
        m.0.lines()
            .filter(|l| l.starts_with("azure_scheduled_events_transitions_total{"))
            .filter_map(|l| l.split("event_type=\"").nth(1)?.split('"').next())
            .collect();
    assert!(
        types.iter().all(|t| !t.starts_with("Invented")),
        "no series per unknown type: {types:?}"
    );
    assert!(types.contains("other"), "{types:?}");
    assert_eq!(
        m.transitions("other", "cancelled"),
        500.0,
        "the first 500 left the document before their NotBefore"
    );
    agent.stop().await
}

/// The peak resident memory of process `pid`, in kB (Linux).
fn peak_rss_kb(pid: u32) -> Result<u64, Box<dyn std::error::Error>> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    let line = status
        .lines()
        .find(|l| l.starts_with("VmHWM:"))
        .ok_or("no VmHWM")?;
    Ok(line.split_whitespace().nth(1).ok_or("no value")?.parse()?)
}

#[cfg(target_os = "linux")]
#[tokio::test]
async fn a_hook_printing_200_mb_is_read_only_as_far_as_its_log_excerpt() -> TestResult {
    let imds = Imds::start().await?;
    imds.sim.load_scenario(Scenario::parse(&format!(
        "events:\n  - {{ id: \"{EVENT}\", type: Reboot, source: User, resources: [{THIS_VM}], notice: 10m }}\n"
    ))?);
    let hook = r#"--approve.hook=["sh","-c","head -c 200000000 /dev/zero; head -c 200000000 /dev/zero >&2; exit 0"]"#;
    let process = spawn(&imds, &["--approve", hook], &[])?;
    let pid = process.id();
    process
        .wait_for_series(r#"azure_scheduled_events_hook_runs_total{hook="approve",result="ok"} 1"#)
        .await?;
    let peak = peak_rss_kb(pid)?;
    drop(process);
    assert!(
        peak < 100_000,
        "400 MB of hook output took the agent to {peak} kB at its peak"
    );
    Ok(())
}

/// The first log line of an agent started on the state file `path` whose message is `message`.
async fn state_file_line(
    imds: &Imds,
    path: &std::path::Path,
    message: &'static str,
) -> Result<serde_json::Value, Box<dyn std::error::Error>> {
    let path_text = path.display().to_string();
    let process = spawn(
        imds,
        &[],
        &[("AZURE_SCHEDULED_EVENTS_STATE_FILE", &path_text)],
    )?;
    let (_process, line) = tokio::task::spawn_blocking(move || {
        let line = process.next_line_where(|l| l["message"] == message);
        (process, line)
    })
    .await?;
    Ok(line?)
}

#[tokio::test]
async fn a_state_file_over_its_cap_is_read_once_under_a_larger_one_and_set_aside() -> TestResult {
    let imds = Imds::start().await?;
    let dir = TempDir::new("state-cap")?;
    // Over the 4 MiB cap (only an older agent wrote such files): read for its approvals, copied
    // aside, replaced at the first write.
    let path = dir.path("state.json");
    std::fs::write(&path, vec![b' '; 5 << 20])?;
    let line = state_file_line(
        &imds,
        &path,
        "state file read in part: every approval it names is kept (counted as sent when unreadable), the rest is dropped",
    )
    .await?;
    assert!(
        line["dropped"]
            .as_str()
            .is_some_and(|e| e.contains("larger than 4194304 bytes")),
        "{line}"
    );
    assert!(dir.path("state.json.corrupt").exists(), "set aside: {line}");

    // Over the 16 MiB read once: never read, never written over.
    let path = dir.path("huge.json");
    std::fs::write(&path, vec![b' '; 17 << 20])?;
    let line = state_file_line(&imds, &path, "state file not usable: starting fresh").await?;
    assert!(
        line["error"]
            .as_str()
            .is_some_and(|e| e.contains("larger than 16777216 bytes")),
        "{line}"
    );
    assert_eq!(std::fs::metadata(&path)?.len(), 17 << 20, "written over");
    Ok(())
}

#[tokio::test]
async fn an_older_agents_16_mib_state_file_of_small_values_is_read_within_the_memory_limit()
-> TestResult {
    // Under the 16 MiB read once: millions of small values (what no agent writes, but a file may
    // hold) must not each become a JSON value in memory at once: the unit and the chart allow
    // 128 MiB.
    let imds = Imds::start().await?;
    let dir = TempDir::new("state-small-values")?;
    let path = dir.path("state.json");
    let mut legacy = br#"{"version":1,"approvals":{"A1B2C3D4-0000-4000-8000-000000000001":{"status":"sent"}},"events":[0"#.to_vec();
    while legacy.len() < (16 << 20) - 8 {
        legacy.extend_from_slice(b",0");
    }
    legacy.extend_from_slice(b"]}");
    std::fs::write(&path, &legacy)?;
    let path_text = path.display().to_string();
    let process = spawn(
        &imds,
        &[],
        &[("AZURE_SCHEDULED_EVENTS_STATE_FILE", &path_text)],
    )?;
    let pid = process.id();
    let (_process, line) = tokio::task::spawn_blocking(move || {
        let line = process.next_line_where(|l| {
            l["message"]
                == "state file read in part: every approval it names is kept (counted as sent when unreadable), the rest is dropped"
        });
        (process, line)
    })
    .await?;
    let line = line?;
    let peak = peak_rss_kb(pid)?;
    assert_eq!(line["approvals_kept"], 1, "{line}");
    assert!(
        peak < 128 * 1024,
        "a 16 MiB state file of small values took the agent to {peak} kB at its peak"
    );
    Ok(())
}

/// Sends `GET path` to `address` as Prometheus does (gzip accepted) and reads the whole answer;
/// the status code.
fn get_status(address: &str, path: &str) -> std::io::Result<u16> {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(address)?;
    stream.set_read_timeout(Some(PATIENCE))?;
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: {address}\r\nAccept-Encoding: gzip\r\nConnection: close\r\n\r\n"
    )?;
    let mut response = Vec::new();
    stream.read_to_end(&mut response)?;
    let head = String::from_utf8_lossy(&response[..response.len().min(12)]).into_owned();
    head.get(9..12)
        .and_then(|code| code.parse().ok())
        .ok_or_else(|| std::io::Error::other(format!("not an HTTP answer: {head:?}")))
}

#[tokio::test]
async fn forty_scrapers_of_five_thousand_events_never_delay_a_poll() -> TestResult {
    let imds = Imds::start().await?;
    let events = common::freeze_events(5000);
    imds.sim.set_document(common::document(2, &events));
    let url = format!("--imds.url={}", imds.url());
    let process = AgentProcess::spawn(command(&[
        &url,
        "--web.listen-address=127.0.0.1:0",
        "--poll.interval=1s",
    ]))?;
    process.wait_for_series(r#"azure_scheduled_events_pending{affects_this_vm="true",event_status="Scheduled",event_type="Freeze"} 5000"#).await?;
    let address = process.address().to_owned();
    let mark = imds.sim.requests();
    let scraping = Duration::from_secs(8);
    let until = Instant::now() + scraping;
    // The default --web.max-requests: every scraper gets in.
    let scrapers: Vec<_> = (0..40)
        .map(|_| {
            let address = address.clone();
            std::thread::spawn(move || -> Result<usize, String> {
                let mut scrapes = 0;
                while Instant::now() < until {
                    let status = get_status(&address, "/metrics")
                        .map_err(|e| format!("GET /metrics: {e}"))?;
                    if status != 200 {
                        return Err(format!("a scrape got {status}"));
                    }
                    scrapes += 1;
                }
                Ok(scrapes)
            })
        })
        .collect();
    let health_address = address.clone();
    let health = tokio::task::spawn_blocking(move || -> Result<Vec<u16>, String> {
        let mut answers = Vec::new();
        while Instant::now() < until {
            answers.push(
                get_status(&health_address, "/healthz")
                    .map_err(|e| format!("GET /healthz: {e}"))?,
            );
            std::thread::sleep(Duration::from_millis(500));
        }
        Ok(answers)
    })
    .await??;
    let mut scrapes = 0;
    for scraper in scrapers {
        scrapes += scraper.join().map_err(|_| "a scraper panicked")??;
    }
    assert!(
        scrapes >= 40,
        "every scraper was answered: {scrapes} scrapes"
    );
    assert!(
        health.iter().all(|status| *status == 200),
        "/healthz during the scrapes: {health:?}"
    );
    let gets: Vec<_> = imds
        .sim
        .request_log()
        .into_iter()
        .filter(|r| r.number > mark && r.is_get())
        .map(|r| r.at)
        .collect();
    let longest = gets
        .windows(2)
        .map(|pair| pair[1] - pair[0])
        .max()
        .ok_or(format!("{} polls while scraping", gets.len()))?;
    assert!(
        gets.len() >= 5 && longest <= chrono::TimeDelta::seconds(5),
        "polling kept its 1 s interval: {} GETs in {scraping:?}, longest gap {longest}",
        gets.len()
    );
    let metrics = tokio::task::spawn_blocking(move || process.metrics()).await??;
    let timeouts = metrics
        .lines()
        .filter(|l| l.starts_with("azure_scheduled_events_imds_request_failures_total{"))
        .filter(|l| l.contains(r#"reason="timeout""#))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum::<f64>();
    assert_eq!(timeouts, 0.0, "no false timeouts");
    assert!(
        metrics.contains("azure_scheduled_events_up 1\n"),
        "still up after the scrapes"
    );
    Ok(())
}

#[tokio::test]
async fn a_document_of_more_than_five_thousand_events_is_refused_as_too_large() -> TestResult {
    let imds = Imds::start().await?;
    imds.sim.load_scenario(Scenario::parse(&format!(
        "events:\n  - {{ id: \"{EVENT}\", type: Reboot, source: User, resources: [{THIS_VM}], notice: 10m }}\n"
    ))?);
    let agent = Agent::start(&imds, &[]).await?;
    let known = agent
        .wait_for("the Reboot", |m| m.event_info(EVENT).is_some())
        .await?;
    let events: Vec<serde_json::Value> = (0..5001)
        .map(|i| {
            serde_json::json!({
                "EventId": format!("F0000000-0000-4000-8000-{i:012}"),
                "EventStatus": "Scheduled",
                "EventType": "Freeze",
                "Resources": [THIS_VM],
            })
        })
        .collect();
    imds.sim.set_document(common::document(3, &events));
    let m = agent
        .wait_for("a too_large failure", |m| {
            m.up() == Some(0.0) && m.failures("too_large") >= 1.0
        })
        .await?;
    assert_eq!(
        m.event_info(EVENT),
        known.event_info(EVENT),
        "the last valid document still stands"
    );
    assert_eq!(m.pending("Freeze", "Scheduled", "true"), 0.0);
    assert_eq!(m.transitions("Reboot", "cancelled"), 0.0);
    agent.stop().await
}
