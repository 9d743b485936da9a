//! The tests of this module that run promtool.

use super::*;

use std::process::{Command, Stdio};

#[tokio::test]
async fn promtool_accepts_the_live_exposition() -> TestResult {
    let imds = Imds::start().await?;
    imds.sim.load_scenario(Scenario::parse(&format!(
        r#"
events:
  - {{ type: Freeze, resources: [{THIS_VM}, other_1], notice: 10m, duration_in_seconds: 5 }}
  - {{ type: Hibernate, status: Started, resources: [{THIS_VM}] }}
  - {{ type: Preempt, resources: [{THIS_VM}], notice: 30s }}
"#
    ))?);
    let process = spawn_agent(&imds)?;
    let (process, _) = wait_for_message(process, "event started").await?;
    let exposition = process.metrics()?;
    assert!(
        exposition.contains("azure_scheduled_events_event_seconds_until_not_before{"),
        "{exposition}"
    );

    let mut promtool = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("promtool is required (Debian package prometheus): {e}"))?;
    std::io::Write::write_all(
        promtool.stdin.as_mut().ok_or("stdin")?,
        exposition.as_bytes(),
    )?;
    let output = promtool.wait_with_output()?;
    let report = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(
        output.status.success(),
        "promtool check metrics failed:\n{report}"
    );
    assert!(
        report.trim().is_empty(),
        "promtool found problems:\n{report}"
    );
    Ok(())
}
