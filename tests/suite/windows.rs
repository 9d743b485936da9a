//! The Windows build as a Windows VM runs it, under Wine (Debian's wine64): the zip that
//! `scripts/dist-windows.sh` builds is unpacked, and its `.exe` polls this test's simulator over
//! loopback, serves `/metrics`, tracks an event through scheduled, started and completed, runs its
//! hooks within a timeout (a timed-out hook's Job object kills what the hook started), writes its
//! state file and reads it again after a restart, and stops cleanly on Ctrl-C.
//!
//! Wine, mingw-w64 (which builds the test's hook and the `ProcessPrng` that Debian 12's Wine 8
//! lacks, into the test's own Wine prefix) and the zip must be there: without one the tests fail,
//! naming what to install or run (`.ci/run` installs and builds them). What Wine cannot show is
//! named in docs/install.md.

use crate::common;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{OnceLock, mpsc};
use std::time::{Duration, Instant};

use azure_scheduled_events_simulator::ScenarioEvent;
use azure_scheduled_events_simulator::scenario::HumanDuration;
use common::process::scrape;
use common::{Imds, THIS_VM, TempDir, TestResult, wait};

const NAME: &str = "azure-scheduled-events-exporter";

/// Wine starts slowly the first time: its waits are longer than the other tests'.
const WINE_PATIENCE: Duration = Duration::from_secs(90);

/// What every test needs: the unpacked zip, the hook, and a Wine prefix with `ProcessPrng`.
#[derive(Debug)]
struct Wine {
    exe: PathBuf,
    hookprobe: PathBuf,
    prefix: PathBuf,
    unpacked: PathBuf,
}

fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn zip_name() -> String {
    format!("{NAME}-{}-x86_64-windows.zip", env!("CARGO_PKG_VERSION"))
}

/// Prepared once for all tests of this binary; every test fails with the same message if it
/// cannot be.
fn wine() -> Result<&'static Wine, String> {
    static WINE: OnceLock<Result<Wine, String>> = OnceLock::new();
    WINE.get_or_init(prepare).as_ref().map_err(Clone::clone)
}

fn prepare() -> Result<Wine, String> {
    for (tool, package) in [
        ("wine", "wine64 (and wine)"),
        ("x86_64-w64-mingw32-gcc", "gcc-mingw-w64-x86-64"),
        ("unzip", "unzip"),
    ] {
        let found = Command::new(tool)
            .arg("--version")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .env("WINEDEBUG", "-all")
            .status()
            .is_ok();
        if !found {
            return Err(format!(
                "{tool} is missing: apt-get install {package} (.ci/run installs it)"
            ));
        }
    }
    let zip = repo().join("target/dist").join(zip_name());
    if !zip.is_file() {
        return Err(format!(
            "{} is missing: run scripts/dist.sh (or scripts/dist-windows.sh) first; .ci/run does",
            zip.display()
        ));
    }
    let work = Path::new(env!("CARGO_TARGET_TMPDIR")).join("windows");
    let unpacked = work.join("unpacked");
    let _ = std::fs::remove_dir_all(&unpacked);
    std::fs::create_dir_all(&unpacked).map_err(|e| e.to_string())?;
    run(Command::new("unzip")
        .arg("-q")
        .arg(&zip)
        .arg("-d")
        .arg(&unpacked))?;
    let stem = zip_name().trim_end_matches(".zip").to_owned();
    let exe = unpacked.join(&stem).join(format!("{NAME}.exe"));

    let hookprobe = work.join("hookprobe.exe");
    run(Command::new("x86_64-w64-mingw32-gcc")
        .args(["-O2", "-o"])
        .arg(&hookprobe)
        .arg(repo().join("tests/windows/hookprobe.c")))?;
    let shim = work.join("bcryptprimitives.dll");
    run(Command::new("x86_64-w64-mingw32-gcc")
        .args(["-shared", "-O2", "-o"])
        .arg(&shim)
        .arg(repo().join("tests/windows/processprng.c"))
        .arg(repo().join("tests/windows/processprng.def"))
        .arg("-ladvapi32"))?;

    let prefix = work.join("prefix");
    let wine = Wine {
        exe,
        hookprobe,
        prefix,
        unpacked,
    };
    if !wine.prefix.join("system.reg").is_file() {
        run(&mut wine.command("wine", &["wineboot", "--init"]))?;
        run(&mut wine.command("wineserver", &["-w"]))?;
    }
    let system32 = wine.prefix.join("drive_c/windows/system32");
    std::fs::copy(&shim, system32.join("bcryptprimitives.dll"))
        .map_err(|e| format!("cannot install the ProcessPrng shim: {e}"))?;
    Ok(wine)
}

impl Wine {
    /// `program` with this prefix and a clean environment (no settings of the machine's agent).
    fn command(&self, program: &str, args: &[&str]) -> Command {
        let mut command = Command::new(program);
        command.args(args).env_clear().stdin(Stdio::null());
        for name in ["PATH", "HOME"] {
            if let Some(value) = std::env::var_os(name) {
                command.env(name, value);
            }
        }
        command
            .env("WINEPREFIX", &self.prefix)
            .env("WINEDEBUG", "-all")
            // No .NET or HTML engine to install, and the test's own bcryptprimitives.dll.
            .env("WINEDLLOVERRIDES", "mscoree,mshtml=;bcryptprimitives=n,b");
        command
    }

    /// The Windows agent, with `args`.
    fn agent(&self, args: &[String]) -> Command {
        let mut command = self.command("wine", &[]);
        command.arg(&self.exe).args(args);
        command
    }
}

/// Runs `command` to its end; an error names it and carries its stderr.
fn run(command: &mut Command) -> Result<(), String> {
    let output = command.output().map_err(|e| format!("{command:?}: {e}"))?;
    if output.status.success() {
        Ok(())
    } else {
        Err(format!(
            "{command:?}: {}\n{}",
            output.status,
            String::from_utf8_lossy(&output.stderr)
        ))
    }
}

/// Whether a process of this machine runs `hookprobe.exe` with a command line (its arguments
/// joined by spaces) that contains each of `needles`.
fn running(needles: &[&str]) -> std::io::Result<bool> {
    for entry in std::fs::read_dir("/proc")? {
        let Ok(command_line) = std::fs::read(entry?.path().join("cmdline")) else {
            continue;
        };
        let command_line = String::from_utf8_lossy(&command_line).replace('\0', " ");
        if command_line.contains("hookprobe.exe")
            && needles.iter().all(|n| command_line.contains(n))
        {
            return Ok(true);
        }
    }
    Ok(false)
}

/// A path as the Windows program sees it: Wine's drive Z: is the Unix root.
fn windows_path(path: &Path) -> String {
    format!("Z:{}", path.display()).replace('/', "\\")
}

/// The Windows agent under Wine: its JSON log lines on a channel, its metrics over a socket.
struct WindowsAgent {
    child: Child,
    lines: mpsc::Receiver<String>,
    address: String,
}

impl WindowsAgent {
    fn spawn(mut command: Command) -> Result<Self, String> {
        let mut child = command
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| format!("cannot start wine: {e}"))?;
        let stdout = child.stdout.take().ok_or("no stdout")?;
        let (send, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if send.send(line).is_err() {
                    break;
                }
            }
        });
        let mut agent = Self {
            child,
            lines,
            address: String::new(),
        };
        let starting = agent.next_line_where(|l| l["message"] == "starting")?;
        agent.address = starting["listen_address"]
            .as_str()
            .ok_or("no listen_address")?
            .to_owned();
        Ok(agent)
    }

    /// The next log line for which `matches` holds. Every line must be JSON.
    fn next_line_where(
        &self,
        matches: impl Fn(&serde_json::Value) -> bool,
    ) -> Result<serde_json::Value, String> {
        let mut lines = self.lines_until(matches)?;
        lines.pop().ok_or_else(|| "no log line".to_owned())
    }

    /// The log lines from the next one to the first for which `matches` holds, that one last.
    fn lines_until(
        &self,
        matches: impl Fn(&serde_json::Value) -> bool,
    ) -> Result<Vec<serde_json::Value>, String> {
        let deadline = Instant::now() + WINE_PATIENCE;
        let mut seen = Vec::new();
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let line = self.lines.recv_timeout(left).map_err(|e| {
                let seen: Vec<String> = seen.iter().map(ToString::to_string).collect();
                eprintln!("lines seen while waiting:\n{}", seen.join("\n"));
                format!("no matching log line ({e}): see the lines above")
            })?;
            let parsed: serde_json::Value = serde_json::from_str(&line)
                .map_err(|_| format!("a log line is not JSON: {line}"))?;
            let found = matches(&parsed);
            seen.push(parsed);
            if found {
                return Ok(seen);
            }
        }
    }

    fn metrics(&self) -> String {
        scrape(&self.address).unwrap_or_default()
    }

    /// Waits until the exposition has `series` at `value`.
    fn wait_for_series(&self, series: &str, value: f64) -> Result<String, String> {
        let mut last = (None, String::new());
        wait(&format!("{series} at {value}"))
            .within(WINE_PATIENCE)
            .until_blocking(|| {
                let metrics = self.metrics();
                let found = metrics.lines().find_map(|line| {
                    line.strip_prefix(series)?
                        .strip_prefix(' ')?
                        .trim()
                        .parse::<f64>()
                        .ok()
                });
                if found == Some(value) {
                    return Some(metrics);
                }
                last = (found, metrics);
                None
            })
            .map_err(|e| format!("{e}: {series} is {:?}:\n{}", last.0, last.1))
    }

    /// Ctrl-C (Wine turns SIGINT into the console's CTRL_C_EVENT), then waits for the exit.
    fn interrupt(&mut self) -> Result<ExitStatus, String> {
        let pid = self.child.id().to_string();
        Command::new("kill")
            .args(["-INT", &pid])
            .status()
            .map_err(|e| e.to_string())?;
        wait("the exit after Ctrl-C")
            .within(WINE_PATIENCE)
            .until_blocking(|| self.child.try_wait())
    }
}

impl Drop for WindowsAgent {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn event(event_type: &str, notice: u64, runs_for: u64) -> ScenarioEvent {
    let mut event = ScenarioEvent::new(event_type, &[THIS_VM]);
    event.notice = Some(HumanDuration(Duration::from_secs(notice)));
    event.runs_for = Some(HumanDuration(Duration::from_secs(runs_for)));
    event
}

#[test]
fn the_windows_zip_holds_the_exe_the_license_the_readme_and_the_service_script() -> TestResult {
    let wine = wine()?;
    let stem = zip_name().trim_end_matches(".zip").to_owned();
    let mut files: Vec<String> = std::fs::read_dir(wine.unpacked.join(&stem))?
        .filter_map(Result::ok)
        .map(|entry| entry.file_name().to_string_lossy().into_owned())
        .collect();
    files.sort();
    assert_eq!(
        files,
        [
            "LICENSE",
            "README.md",
            &format!("{NAME}.exe"),
            "install-service.ps1"
        ]
    );
    let script = std::fs::read_to_string(wine.unpacked.join(&stem).join("install-service.ps1"))?;
    for needle in ["New-Service", "New-NetFirewallRule", "10188", "-Remove"] {
        assert!(
            script.contains(needle),
            "install-service.ps1 lacks {needle}"
        );
    }
    let check = Command::new("sha256sum")
        .args(["--check", "--strict", &format!("{}.sha256", zip_name())])
        .current_dir(repo().join("target/dist"))
        .output()?;
    assert!(
        check.status.success(),
        "{}",
        String::from_utf8_lossy(&check.stdout)
    );
    Ok(())
}

#[test]
fn the_windows_agent_refuses_a_bad_flag_with_exit_code_64_and_names_it() -> TestResult {
    let wine = wine()?;
    let output = wine
        .agent(&["--poll.interval=soon".to_owned()])
        .stdout(Stdio::null())
        .output()?;
    assert_eq!(output.status.code(), Some(64));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("poll.interval"), "{stderr}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_windows_agent_tracks_an_event_runs_its_hooks_and_keeps_its_state_across_a_restart()
-> TestResult {
    let wine = wine()?;
    let imds = Imds::start().await?;
    let dir = TempDir::new("windows-agent")?;
    let state = dir.path("state.json");
    let lingered = dir.path("lingered");
    std::fs::create_dir_all(&lingered)?;
    let recorded = dir.path("recover.txt");
    let hook = |mode: &str, path: &Path| {
        serde_json::to_string(&[&windows_path(&wine.hookprobe), mode, &windows_path(path)])
    };
    let args = vec![
        format!("--imds.url={}", imds.url()),
        "--web.listen-address=127.0.0.1:0".to_owned(),
        "--poll.interval=100ms".to_owned(),
        "--imds.first-timeout=10s".to_owned(),
        format!("--state.file={}", windows_path(&state)),
        // Starts a process that outlives it, and never exits in time.
        format!("--approve.prepare-hook={}", hook("linger", &lingered)?),
        format!("--approve.recover-hook={}", hook("record", &recorded)?),
        "--approve.hook-timeout=2s".to_owned(),
    ];
    let mut agent = WindowsAgent::spawn(wine.agent(&args))?;

    // One event through its whole life, and one that stays Scheduled for the state file.
    let id = imds.sim.add_event(event("Reboot", 4, 4))?;
    let waiting = imds.sim.add_event(event("Freeze", 3600, 5))?;
    let is = |message: &'static str, id: String| {
        move |line: &serde_json::Value| {
            line["message"] == message && line["event_id"] == id.as_str()
        }
    };
    agent.next_line_where(is("event scheduled", id.clone()))?;
    let metrics = agent.metrics();
    assert!(
        metrics
            .lines()
            .any(|l| l.starts_with("azure_scheduled_events_event_info{")
                && l.contains(&format!(r#"event_id="{id}""#))),
        "/metrics lacks the event:\n{metrics}"
    );
    agent.next_line_where(is("event started", id.clone()))?;
    agent.next_line_where(is("event completed", id.clone()))?;
    agent.wait_for_series(
        r#"azure_scheduled_events_transitions_total{event_type="Reboot",transition="completed"}"#,
        1.0,
    )?;

    // The prepare hook timed out; the process it left behind went with it.
    let metrics = agent.wait_for_series(
        r#"azure_scheduled_events_hook_runs_total{hook="prepare",result="hook_timeout"}"#,
        2.0,
    )?;
    assert!(
        lingered.join("started").is_file(),
        "the hook's own process never ran"
    );
    // It would have written `survived` 6 s after it started, had it outlived the hook: it has not
    // once no process of this machine runs it (Wine names a Windows process by its command line).
    let marking = [" mark ", &windows_path(&lingered)];
    wait("the process the hook started to be gone")
        .within(WINE_PATIENCE)
        .until_blocking(|| running(&marking).map(|running| !running))?;
    assert!(
        !lingered.join("survived").exists(),
        "a process started by a timed-out hook outlived it"
    );
    // The recover hook ran for the completed event, with the event on stdin and in EVENT_*.
    agent.wait_for_series(
        r#"azure_scheduled_events_hook_runs_total{hook="recover",result="ok"}"#,
        1.0,
    )?;
    let record = std::fs::read_to_string(&recorded)?;
    for needle in [
        "EVENT_HOOK=recover".to_owned(),
        format!("EVENT_ID={id}"),
        "EVENT_TYPE=Reboot".to_owned(),
        format!("EVENT_VM_NAME={THIS_VM}"),
        format!(r#""EventId":"{id}""#),
    ] {
        assert!(
            record.contains(&needle),
            "the recover hook got no {needle}:\n{record}"
        );
    }
    assert!(metrics.contains("azure_scheduled_events_up 1"), "{metrics}");

    // Ctrl-C: a clean stop, and the state file holds the waiting event and the Windows boot time.
    assert!(
        metrics.contains(&format!(r#"event_id="{waiting}""#)),
        "/metrics lacks the waiting event:\n{metrics}"
    );
    let status = agent.interrupt()?;
    assert!(status.success(), "exit after Ctrl-C: {status}");
    let saved: serde_json::Value = serde_json::from_slice(&std::fs::read(&state)?)?;
    assert!(
        saved["boot_id"]
            .as_str()
            .is_some_and(|b| b.starts_with("boot-time:")),
        "{saved}"
    );
    let first_seen = |state: &serde_json::Value| {
        state["events"].as_array().and_then(|events| {
            events
                .iter()
                .find(|e| e["event_id"] == waiting.as_str())
                .map(|e| e["first_seen"].clone())
        })
    };
    let seen = first_seen(&saved).ok_or(format!("{waiting} is not in the state file: {saved}"))?;

    // Started again, it reads the file back: the same boot, the waiting event keeps the time it
    // was first seen by the first run, and what the first run announced is not announced again.
    let mut agent = WindowsAgent::spawn(wine.agent(&args))?;
    agent.next_line_where(|l| l["message"] == "agent restarted; the machine did not reboot")?;
    let lines = agent.lines_until(|l| {
        l["message"]
            .as_str()
            .is_some_and(|m| m.starts_with("resumed the events"))
    })?;
    let again: Vec<_> = lines
        .iter()
        .filter(|l| l["event_id"] == waiting.as_str() && l["message"] == "event scheduled")
        .collect();
    assert!(
        again.is_empty(),
        "announced again after a restart: {again:#?}"
    );
    let resumed = lines.last().ok_or("no resumed line")?;
    assert_eq!(resumed["resumed"], 1, "{resumed}");
    assert_eq!(resumed["changed_while_down"], 0, "{resumed}");
    let status = agent.interrupt()?;
    assert!(status.success(), "exit after Ctrl-C: {status}");
    let saved: serde_json::Value = serde_json::from_slice(&std::fs::read(&state)?)?;
    assert_eq!(first_seen(&saved), Some(seen), "{saved}");
    Ok(())
}
