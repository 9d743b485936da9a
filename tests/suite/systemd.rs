//! Under a `Type=notify` unit: systemd's notifications, over a real unix datagram socket that
//! stands where systemd's `NOTIFY_SOCKET` would.

use crate::common;

use azure_scheduled_events_simulator::Fault;
use common::process::{AgentProcess, command};
use common::{Imds, PATIENCE, TempDir, TestResult};
use tokio::net::UnixDatagram;

/// Notifications received until one satisfies `done`, or [`PATIENCE`] runs out.
async fn until(
    socket: &UnixDatagram,
    seen: &mut Vec<String>,
    done: impl Fn(&[String]) -> bool,
) -> Result<(), String> {
    let deadline = tokio::time::Instant::now() + PATIENCE;
    let mut buffer = vec![0u8; 4096];
    while !done(seen) {
        let received = tokio::time::timeout_at(deadline, socket.recv(&mut buffer))
            .await
            .map_err(|_| format!("timed out; received so far: {seen:?}"))?
            .map_err(|e| e.to_string())?;
        let datagram = String::from_utf8_lossy(&buffer[..received]);
        seen.extend(datagram.lines().map(str::to_owned));
    }
    Ok(())
}

/// The agent polling `imds` every 100 ms under a notify socket bound in `dir`, with a watchdog
/// period when `watchdog_usec` is given.
async fn under_systemd(
    imds: &Imds,
    dir: &TempDir,
    watchdog_usec: Option<&str>,
) -> Result<(AgentProcess, UnixDatagram), Box<dyn std::error::Error>> {
    let path = dir.path("notify.sock");
    let socket = UnixDatagram::bind(&path)?;
    let mut agent_command = command(&[
        &format!("--imds.url={}", imds.url()),
        "--web.listen-address=127.0.0.1:0",
        "--poll.interval=100ms",
    ]);
    agent_command.env("NOTIFY_SOCKET", &path);
    if let Some(usec) = watchdog_usec {
        agent_command.env("WATCHDOG_USEC", usec);
    }
    let agent = tokio::task::spawn_blocking(move || {
        AgentProcess::spawn(agent_command).map_err(|e| e.to_string())
    })
    .await??;
    Ok((agent, socket))
}

fn count(seen: &[String], line: &str) -> usize {
    seen.iter().filter(|l| *l == line).count()
}

#[tokio::test]
async fn under_systemd_the_agent_says_ready_what_it_waits_for_and_pings_the_watchdog() -> TestResult
{
    let imds = Imds::start().await?;
    let dir = TempDir::new("notify")?;
    // A 400 ms watchdog: a ping every 200 ms.
    let (agent, socket) = under_systemd(&imds, &dir, Some("400000")).await?;

    let mut seen = Vec::new();
    until(&socket, &mut seen, |seen| {
        seen.iter()
            .any(|l| l.starts_with("STATUS=polling every 100ms"))
            && count(seen, "WATCHDOG=1") >= 3
    })
    .await?;
    let ready = seen.iter().position(|l| l == "READY=1");
    assert!(ready.is_some(), "READY=1 once serving: {seen:?}");
    assert!(
        seen.iter()
            .any(|l| l.starts_with("STATUS=waiting for the first scheduled-events document")),
        "{seen:?}"
    );
    assert!(!seen.iter().any(|l| l.starts_with("STOPPING")), "{seen:?}");

    // IMDS fails: the loop goes on polling (and says so), so the watchdog goes on too.
    imds.sim.inject_fault(Fault::status(503).until_cleared());
    let pings_before = count(&seen, "WATCHDOG=1");
    until(&socket, &mut seen, |seen| {
        seen.iter()
            .any(|l| l.starts_with("STATUS=IMDS unreachable"))
            && count(seen, "WATCHDOG=1") >= pings_before + 3
    })
    .await?;
    assert!(
        seen.iter().any(|l| l.contains("next poll in")),
        "a backoff is said: {seen:?}"
    );

    let mut agent = agent;
    let status = tokio::task::spawn_blocking(move || agent.terminate()).await??;
    assert!(status.success());
    until(&socket, &mut seen, |seen| {
        seen.iter().any(|l| l == "STOPPING=1")
    })
    .await?;
    Ok(())
}

#[tokio::test]
async fn without_a_watchdog_period_nothing_pings() -> TestResult {
    let imds = Imds::start().await?;
    let dir = TempDir::new("notify-no-watchdog")?;
    let (mut agent, socket) = under_systemd(&imds, &dir, None).await?;
    let mut seen = Vec::new();
    until(&socket, &mut seen, |seen| {
        seen.iter().any(|l| l.starts_with("STATUS=polling every"))
    })
    .await?;
    // Five more polls (half a second at 100 ms), then stop: STOPPING=1 ends what the agent says.
    imds.polled(5).await?;
    let status = tokio::task::spawn_blocking(move || agent.terminate()).await??;
    assert!(status.success());
    until(&socket, &mut seen, |seen| {
        seen.iter().any(|l| l == "STOPPING=1")
    })
    .await?;
    assert_eq!(count(&seen, "WATCHDOG=1"), 0, "{seen:?}");
    Ok(())
}
