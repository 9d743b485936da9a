//! The built binary as users run it: exit codes, environment, signals, the log and promtool.

use crate::common;

use azure_scheduled_events_simulator::Scenario;
use common::process::{AgentProcess, command};
use common::{Imds, THIS_VM, TestResult};

const EVENT: &str = "5DD55B64-45AD-49D3-BBC9-F57D4EA97BD7";

/// Waits, off the async runtime, for the log line whose `message` is `message`.
async fn wait_for_message(
    process: AgentProcess,
    message: &'static str,
) -> Result<(AgentProcess, serde_json::Value), Box<dyn std::error::Error>> {
    wait_for_line(process, move |l| l["message"] == message).await
}

/// Waits, off the async runtime, for the log line whose `message` starts with `start`.
async fn wait_for_message_starting(
    process: AgentProcess,
    start: &'static str,
) -> Result<(AgentProcess, serde_json::Value), Box<dyn std::error::Error>> {
    wait_for_line(process, move |l| {
        l["message"].as_str().is_some_and(|m| m.starts_with(start))
    })
    .await
}

async fn wait_for_line(
    process: AgentProcess,
    matches: impl Fn(&serde_json::Value) -> bool + Send + 'static,
) -> Result<(AgentProcess, serde_json::Value), Box<dyn std::error::Error>> {
    let (process, line) = tokio::task::spawn_blocking(move || {
        let line = process.next_line_where(matches);
        (process, line)
    })
    .await?;
    Ok((process, line?))
}

fn agent_args(imds: &Imds) -> Vec<String> {
    vec![
        format!("--imds.url={}", imds.url()),
        "--web.listen-address=127.0.0.1:0".into(),
        "--poll.interval=50ms".into(),
    ]
}

/// The agent polling `imds` every 50 ms, with a clean environment.
fn spawn_agent(imds: &Imds) -> Result<AgentProcess, Box<dyn std::error::Error>> {
    AgentProcess::spawn(command(
        &agent_args(imds)
            .iter()
            .map(String::as_str)
            .collect::<Vec<_>>(),
    ))
}

async fn imds_with_one_event() -> Result<Imds, Box<dyn std::error::Error>> {
    let imds = Imds::start().await?;
    imds.sim.load_scenario(Scenario::parse(&format!(
        "events:\n  - {{ id: \"{EVENT}\", type: Reboot, source: User, resources: [{THIS_VM}], notice: 10m }}\n"
    ))?);
    Ok(imds)
}

#[test]
fn a_bad_flag_exits_64_with_one_line_naming_it() -> TestResult {
    for (args, flag) in [
        (&["--poll.interval=fast"][..], "--poll.interval"),
        (&["--imds.url=not a url"], "--imds.url"),
        (&["--web.listen-address=everywhere"], "--web.listen-address"),
        (&["--no-such-flag"], "--no-such-flag"),
        (&["--log.level=loud["], "--log.level"),
    ] {
        let output = command(args).output()?;
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(64), "{args:?}: {stderr}");
        assert_eq!(
            stderr.trim_end().lines().count(),
            1,
            "{args:?}: one line: {stderr}"
        );
        assert!(stderr.contains(flag), "{args:?}: {stderr}");
    }
    Ok(())
}

#[test]
fn a_bad_environment_variable_exits_64() -> TestResult {
    let output = command(&[])
        .env("AZURE_SCHEDULED_EVENTS_POLL_INTERVAL", "often")
        .output()?;
    assert_eq!(output.status.code(), Some(64));
    assert!(String::from_utf8_lossy(&output.stderr).contains("--poll.interval"));
    Ok(())
}

#[test]
fn help_and_version_exit_0() -> TestResult {
    for flag in ["--help", "--version"] {
        let output = command(&[flag]).output()?;
        assert_eq!(output.status.code(), Some(0), "{flag}");
    }
    let version = String::from_utf8(command(&["--version"]).output()?.stdout)?;
    for part in ["revision: ", "build date: ", "target: ", "features: "] {
        assert!(version.contains(part), "--version says {part}: {version}");
    }
    let help = String::from_utf8(command(&["--help"]).output()?.stdout)?;
    for flag in [
        "--imds.url",
        "--poll.interval",
        "--web.listen-address",
        "--web.telemetry-path",
        "--vm.name",
        "AZURE_SCHEDULED_EVENTS_POLL_INTERVAL",
    ] {
        assert!(help.contains(flag), "--help mentions {flag}");
    }
    Ok(())
}

#[tokio::test]
async fn proxy_variables_pointing_at_a_dead_proxy_are_ignored() -> TestResult {
    let imds = imds_with_one_event().await?;
    let dead = "http://127.0.0.1:9"; // discard port: nothing listens
    let mut command = command(
        &agent_args(&imds)
            .iter()
            .map(String::as_str)
            .collect::<Vec<_>>(),
    );
    for variable in [
        "HTTP_PROXY",
        "http_proxy",
        "HTTPS_PROXY",
        "https_proxy",
        "ALL_PROXY",
        "all_proxy",
    ] {
        command.env(variable, dead);
    }
    let (process, line) =
        wait_for_message(AgentProcess::spawn(command)?, "event scheduled").await?;
    assert_eq!(line["event_id"], EVENT);
    let metrics = process.metrics()?;
    assert!(metrics.contains("azure_scheduled_events_up 1"), "{metrics}");
    assert!(metrics.contains(&format!(r#"event_id="{EVENT}""#)));
    Ok(())
}

#[tokio::test]
async fn logs_one_json_line_per_change_never_one_per_poll() -> TestResult {
    let imds = imds_with_one_event().await?;
    let process = spawn_agent(&imds)?;
    let (process, scheduled) = wait_for_message(process, "event scheduled").await?;
    for field in [
        "timestamp",
        "level",
        "vm_name",
        "event_id",
        "trace_id",
        "event_type",
        "event_status",
        "event_source",
        "resources",
        "not_before",
        "duration_in_seconds",
        "affects_this_vm",
        "document_incarnation",
    ] {
        assert!(
            scheduled.get(field).is_some(),
            "field {field} in {scheduled}"
        );
    }
    assert_eq!(scheduled["trace_id"], "5dd55b6445ad49d3bbc9f57d4ea97bd7");
    assert_eq!(scheduled["vm_name"], THIS_VM);
    assert_eq!(scheduled["affects_this_vm"], "true");
    assert_eq!(scheduled["event_source"], "User");
    assert!(
        scheduled["summary"]
            .as_str()
            .is_some_and(|s| s.starts_with(&format!("Reboot of {THIS_VM} in "))),
        "{scheduled}"
    );
    // Approval is off: this user-initiated event of this VM waits for NotBefore, and the agent
    // says so once, with the flag that lets it start at once.
    let (process, waits) =
        wait_for_message_starting(process, "this Reboot was started by a user").await?;
    assert_eq!(waits["event_id"], EVENT);
    assert_eq!(waits["approve_with"], "--approve");

    // Twenty more polls of an unchanged document: not one more line.
    imds.polled(20).await?;
    let extra: Vec<serde_json::Value> = process.lines_so_far()?;
    assert!(extra.is_empty(), "unchanged polls logged: {extra:?}");
    Ok(())
}

#[tokio::test]
async fn sigterm_stops_the_agent_cleanly() -> TestResult {
    let imds = imds_with_one_event().await?;
    let process = spawn_agent(&imds)?;
    let (mut process, _) = wait_for_message(process, "IMDS reachable").await?;
    let status = tokio::task::spawn_blocking(move || {
        let status = process.terminate();
        let stopped = process.next_line_where(|l| l["message"] == "stopped");
        (status.map_err(|e| e.to_string()), stopped)
    })
    .await?;
    assert!(status.0?.success(), "exit status 0 on SIGTERM");
    assert!(status.1.is_ok(), "logged that it stopped");
    Ok(())
}

/// Names of the metric families in an exposition, from its `# TYPE` lines.
fn family_names(exposition: &str) -> Vec<&str> {
    exposition
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| l.split_whitespace().next())
        .collect()
}

#[tokio::test]
async fn disable_exporter_metrics_leaves_out_the_process_metrics_and_nothing_else() -> TestResult {
    let imds = imds_with_one_event().await?;
    let default = spawn_agent(&imds)?;
    let (default, _) = wait_for_message(default, "event scheduled").await?;
    let full = default.metrics()?;
    // The flag, and the variable the chart or a unit file would set.
    let mut flag_args = agent_args(&imds);
    flag_args.push("--web.disable-exporter-metrics".into());
    let flag = AgentProcess::spawn(command(
        &flag_args.iter().map(String::as_str).collect::<Vec<_>>(),
    ))?;
    let mut variable = command(
        &agent_args(&imds)
            .iter()
            .map(String::as_str)
            .collect::<Vec<_>>(),
    );
    variable.env(
        "AZURE_SCHEDULED_EVENTS_WEB_DISABLE_EXPORTER_METRICS",
        "true",
    );
    let variable = AgentProcess::spawn(variable)?;
    let full_families = family_names(&full);
    assert!(
        full_families.contains(&"process_resident_memory_bytes"),
        "the default exposition has the process metrics:\n{full}"
    );
    for (how, process) in [("flag", flag), ("variable", variable)] {
        let (process, _) = wait_for_message(process, "event scheduled").await?;
        let without = process.metrics()?;
        let families = family_names(&without);
        assert!(
            families.iter().all(|f| !f.starts_with("process_")),
            "{how}: process metrics left in:\n{without}"
        );
        let expected: Vec<&str> = full_families
            .iter()
            .copied()
            .filter(|f| !f.starts_with("process_"))
            .collect();
        assert_eq!(families, expected, "{how}: only the process metrics go");
        assert!(
            without.contains("azure_scheduled_events_build_info{"),
            "{how}: build_info stays:\n{without}"
        );
    }
    Ok(())
}

/// A neighbour's event (a scale set delivers every VM's events to every VM) and one of this VM,
/// in one document.
async fn imds_with_a_neighbours_event() -> Result<Imds, Box<dyn std::error::Error>> {
    let imds = Imds::start().await?;
    imds.sim.load_scenario(Scenario::parse(&format!(
        "events:\n  \
         - {{ id: \"{NEIGHBOUR_EVENT}\", type: Freeze, resources: [test-vmss_7], notice: 10m }}\n  \
         - {{ id: \"{EVENT}\", type: Reboot, source: User, resources: [{THIS_VM}], notice: 10m }}\n"
    ))?);
    Ok(imds)
}

const NEIGHBOUR_EVENT: &str = "0E1F2A3B-4C5D-4E6F-8091-A2B3C4D5E6F7";

/// The first `event scheduled` line of an agent started with `args`.
async fn first_scheduled_line(
    mut args: Vec<String>,
) -> Result<serde_json::Value, Box<dyn std::error::Error>> {
    let imds = imds_with_a_neighbours_event().await?;
    args.extend(agent_args(&imds));
    let process = AgentProcess::spawn(command(
        &args.iter().map(String::as_str).collect::<Vec<_>>(),
    ))?;
    let (_, line) = wait_for_message(process, "event scheduled").await?;
    Ok(line)
}

#[tokio::test]
async fn a_neighbours_event_is_logged_only_with_report_neighbours() -> TestResult {
    // Events are told in the document's order, where the neighbour's comes first: the first
    // line is the neighbour's when it is logged at all.
    let default = first_scheduled_line(Vec::new()).await?;
    assert_eq!(
        default["event_id"], EVENT,
        "a neighbour's event logged by default: {default}"
    );
    let neighbours = first_scheduled_line(vec!["--report.neighbours".into()]).await?;
    assert_eq!(neighbours["event_id"], NEIGHBOUR_EVENT, "{neighbours}");
    assert_eq!(neighbours["affects_this_vm"], "false", "{neighbours}");
    Ok(())
}

#[tokio::test]
async fn a_text_log_line_reads_as_a_sentence_first_with_the_ids_after() -> TestResult {
    let imds = imds_with_one_event().await?;
    let mut args = agent_args(&imds);
    args.push("--log.format=text".into());
    let mut child = command(&args.iter().map(String::as_str).collect::<Vec<_>>())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()?;
    let stdout = child.stdout.take().ok_or("no stdout")?;
    let (send, lines) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        use std::io::BufRead;
        for line in std::io::BufReader::new(stdout)
            .lines()
            .map_while(Result::ok)
        {
            if send.send(line).is_err() {
                break;
            }
        }
    });
    let line = tokio::task::spawn_blocking(move || {
        lines
            .iter()
            .find(|l| l.contains("event scheduled"))
            .ok_or("no event scheduled line")
    })
    .await?;
    child.kill()?;
    child.wait()?;
    let line = line?;
    let sentence = format!("INFO event scheduled: Reboot of {THIS_VM} in ");
    let at = line
        .find(&sentence)
        .ok_or_else(|| format!("no sentence first: {line}"))?;
    let id = line
        .find(&format!("event_id=\"{EVENT}\""))
        .ok_or_else(|| format!("no event_id: {line}"))?;
    assert!(at < id, "the ids come after the sentence: {line}");
    Ok(())
}

/// One event as IMDS lists it, NotBefore an hour ahead while Scheduled.
fn listed(id: &str, event_type: &str, status: &str) -> serde_json::Value {
    let not_before = (chrono::Utc::now() + chrono::TimeDelta::hours(1))
        .format("%a, %d %b %Y %H:%M:%S GMT")
        .to_string();
    serde_json::json!({
        "EventId": id,
        "EventStatus": status,
        "EventType": event_type,
        "ResourceType": "VirtualMachine",
        "Resources": [THIS_VM],
        "NotBefore": if status == "Scheduled" { not_before } else { String::new() },
        "Description": "",
        "EventSource": "Platform",
        "DurationInSeconds": -1,
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_with_the_state_file_announces_nothing_twice_and_says_it_resumed() -> TestResult {
    const FREEZE: &str = "0E1C5A6B-8A2E-4D63-9D5F-2B0C2F9E7A11";
    let imds = Imds::start().await?;
    imds.sim.set_document(common::document(
        2,
        &[
            listed(EVENT, "Reboot", "Scheduled"),
            listed(FREEZE, "Freeze", "Scheduled"),
        ],
    ));
    let dir = common::TempDir::new("restart-announces")?;
    let state = format!("--state.file={}", dir.path("state.json").display());
    let mut args = agent_args(&imds);
    args.push(state);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let scheduled = |l: &serde_json::Value| l["message"] == "event scheduled";
    let resumed_line = |l: &serde_json::Value| {
        l["message"]
            .as_str()
            .is_some_and(|m| m.starts_with("resumed the events"))
    };

    let mut first = AgentProcess::spawn(command(&args))?;
    let first = tokio::task::spawn_blocking(move || {
        first.lines_until(scheduled)?;
        first.lines_until(scheduled)?;
        first.terminate().map(|_| ())
    })
    .await?;
    first?;

    // While the agent is down the Freeze starts; the Reboot is as it was.
    imds.sim.set_document(common::document(
        3,
        &[
            listed(EVENT, "Reboot", "Scheduled"),
            listed(FREEZE, "Freeze", "Started"),
        ],
    ));
    let second = AgentProcess::spawn(command(&args))?;
    let (second, lines) = tokio::task::spawn_blocking(move || {
        let lines = second.lines_until(resumed_line);
        (second, lines)
    })
    .await?;
    let lines = lines?;
    imds.polled(10).await?;
    let later = second.lines_so_far()?;
    let all: Vec<&serde_json::Value> = lines.iter().chain(&later).collect();
    let about = |message: &str| -> Vec<&serde_json::Value> {
        all.iter()
            .copied()
            .filter(|l| l["message"] == message)
            .collect()
    };
    assert_eq!(about("event scheduled"), Vec::<&serde_json::Value>::new());
    let started = about("event started");
    assert_eq!(started.len(), 1, "{all:#?}");
    assert_eq!(started[0]["event_id"], FREEZE);
    let resumed: Vec<_> = all.iter().filter(|l| resumed_line(l)).collect();
    assert_eq!(resumed.len(), 1, "{all:#?}");
    assert_eq!(resumed[0]["level"], "INFO");
    assert_eq!(resumed[0]["resumed"], 2);
    assert_eq!(resumed[0]["changed_while_down"], 1, "the Freeze started");
    let metrics = second.metrics()?;
    assert!(
        metrics.contains(
            r#"azure_scheduled_events_transitions_total{event_type="Reboot",transition="scheduled"} 0"#
        ),
        "not counted twice either"
    );
    Ok(())
}

/// `demo` shows what its banner announces: its VM, which plays a Spot Preempt, is a Spot VM in
/// instance metadata (vm_info's priority), and the neighbour's Reboot is in the log as a
/// neighbour's event.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_demos_vm_is_spot_and_its_log_shows_the_neighbours_reboot_it_announces() -> TestResult {
    let mut agent = AgentProcess::spawn(command(&[
        "demo",
        "--log.format=json",
        "--web.listen-address=127.0.0.1:0",
    ]))?;
    let metrics = agent
        .wait_for_series("azure_scheduled_events_vm_info{")
        .await?;
    let info = metrics
        .lines()
        .find(|l| l.starts_with("azure_scheduled_events_vm_info{"))
        .ok_or("no vm_info")?;
    assert!(info.contains("vm_name=\"demo-vmss_0\""), "{info}");
    assert!(info.contains("priority=\"Spot\""), "{info}");
    // The neighbour's Reboot appears 30 s into the demo's loop.
    let mut seen = Vec::new();
    let mut found = None;
    common::wait("the neighbour's Reboot in the demo's log")
        .within(std::time::Duration::from_secs(90))
        .until(async || {
            seen.extend(agent.lines_so_far()?);
            found = seen
                .iter()
                .find(|l| {
                    l["event_type"] == "Reboot"
                        && l["resources"]
                            .as_str()
                            .is_some_and(|r| r.contains("demo-vmss_1"))
                })
                .cloned();
            Ok::<bool, String>(found.is_some())
        })
        .await?;
    let line = found.ok_or("no line")?;
    assert_eq!(line["affects_this_vm"], "false", "{line}");
    assert_eq!(line["level"], "INFO", "{line}");
    agent.terminate()?;
    Ok(())
}

/// `check-imds` run against `imds` (the built binary, a clean environment): exit code and stdout.
fn check_imds(imds_url: &str, extra: &[&str]) -> Result<(Option<i32>, String), String> {
    let url = format!("--imds.url={imds_url}");
    let mut args = vec!["check-imds", url.as_str()];
    args.extend_from_slice(extra);
    let output = command(&args).output().map_err(|e| e.to_string())?;
    Ok((
        output.status.code(),
        String::from_utf8_lossy(&output.stdout).into_owned(),
    ))
}

/// A first check on a VM: `check-imds` reads IMDS once and prints the VM it finds (name, vmId,
/// scale set, priority), each event with its NotBefore and how the agent would treat it (reported
/// or a neighbour's; approved or not, by which rule), and the approval policy; exit 0.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_imds_prints_the_vm_its_events_and_how_each_would_be_treated() -> TestResult {
    let imds = Imds::start().await?;
    let user_reboot = "0C5E2F4A-1B3D-4E6F-8A9B-0C1D2E3F4A5B";
    let neighbours = "9A4E7B2C-6D1F-4A38-8C5B-2E9F1D7A3B64";
    let soon = (chrono::Utc::now() + chrono::Duration::minutes(12))
        .format("%a, %d %b %Y %H:%M:%S GMT")
        .to_string();
    let event = |id: &str, source: &str, vm: &str| {
        serde_json::json!({
            "EventId": id, "EventStatus": "Scheduled", "EventType": "Reboot",
            "ResourceType": "VirtualMachine", "Resources": [vm], "NotBefore": soon,
            "Description": "", "EventSource": source, "DurationInSeconds": -1,
        })
    };
    imds.sim.set_document(common::document(
        7,
        &[
            event(user_reboot, "User", THIS_VM),
            event(neighbours, "Platform", "test-vmss_1"),
        ],
    ));
    let url = imds.url();
    let (code, out) = tokio::task::spawn_blocking(move || check_imds(&url, &[])).await??;
    assert_eq!(code, Some(0), "{out}");
    let vm_id = azure_scheduled_events_simulator::vm_id_for(THIS_VM);
    for said in [
        format!("this VM: {THIS_VM} (vmId {vm_id}), scale set test-vmss"),
        "priority Regular".to_owned(),
        "DocumentIncarnation 7, 2 events".to_owned(),
        format!("{user_reboot} Reboot Scheduled, NotBefore {soon} (in 1"),
        "source User".to_owned(),
        "names this VM: reported".to_owned(),
        "approval off, so the agent approves nothing; with --approve: approved at once (rule user_event)".to_owned(),
        format!("{neighbours} Reboot Scheduled"),
        "a neighbour's event: logged at debug level only".to_owned(),
        "approval: off (--approve turns it on; its policy approves events a user started".to_owned(),
    ] {
        assert!(out.contains(&said), "no {said:?} in:\n{out}");
    }
    // With the agent's approval flags, the same verdicts as the agent's, and nothing sent.
    let url = imds.url();
    let (code, out) = tokio::task::spawn_blocking(move || {
        check_imds(&url, &["--approve", "--approve.deny-event-types=Reboot"])
    })
    .await??;
    assert_eq!(code, Some(0), "{out}");
    assert!(
        out.contains("approval on: not approved (denied_type)"),
        "{out}"
    );
    assert!(
        imds.sim.approvals().is_empty(),
        "check-imds sent an approval"
    );
    Ok(())
}

/// When IMDS does not answer, `check-imds` says so, what is wrong and what to do, and exits 69.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_imds_says_what_is_wrong_when_imds_does_not_answer() -> TestResult {
    // Nothing listens.
    let closed = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
        format!("http://{}", listener.local_addr()?)
    };
    let (code, out) = tokio::task::spawn_blocking(move || check_imds(&closed, &[])).await??;
    assert_eq!(code, Some(69), "{out}");
    assert!(
        out.contains("scheduled events: no answer: cannot connect"),
        "{out}"
    );
    assert!(
        out.contains("what to do: nothing answers at the IMDS address"),
        "{out}"
    );
    // IMDS failing: its own 503s.
    let imds = Imds::start().await?;
    imds.sim
        .inject_fault(azure_scheduled_events_simulator::Fault::status(503).until_cleared());
    let url = imds.url();
    let (code, out) =
        tokio::task::spawn_blocking(move || check_imds(&url, &["--imds.first-timeout=2s"]))
            .await??;
    assert_eq!(code, Some(69), "{out}");
    assert!(out.contains("HTTP 503"), "{out}");
    assert!(out.contains("what to do: IMDS itself is failing"), "{out}");
    Ok(())
}

// The tests that run an external tool, compiled with the feature `external-tools`.
#[cfg(feature = "external-tools")]
mod tools;
