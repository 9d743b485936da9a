//! What an outsider or a careless operator controls cannot hang, exhaust or open the agent: file
//! inputs that are devices or FIFOs, absurd flag values, credentials in URLs, signals.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::process::{AgentProcess, command};
use common::{Imds, PATIENCE, TempDir, TestResult};

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
    let deadline = Instant::now() + PATIENCE;
    while child.try_wait()?.is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            return Err("still running: it hung on its input".into());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Ok(child.wait_with_output()?)
}

/// The flag files whose refusal exits 64, each with the flags it needs to be read at all.
fn flag_files(path: &Path) -> Vec<(Vec<String>, Vec<(&'static str, String)>, &'static str)> {
    let p = path.display().to_string();
    vec![
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
    ]
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

/// Scrapes until the exposition has `needle` (waiting at most [`PATIENCE`]).
async fn wait_for_metric(process: AgentProcess, needle: &'static str) -> TestResult {
    tokio::task::spawn_blocking(move || {
        let deadline = Instant::now() + PATIENCE;
        loop {
            let metrics = process.metrics().map_err(|e| e.to_string())?;
            if metrics.contains(needle) {
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err(format!("no {needle:?} in {metrics}"));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    })
    .await??;
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
        wait_for_metric(process, "azure_scheduled_events_state_up 0").await?;
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
        wait_for_metric(process, "azure_scheduled_events_up 1").await?;
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
            wait_for_metric(process, "azure_scheduled_events_up 1").await?;
        }
    }
    Ok(())
}
