//! How the agent is installed: the Dockerfile under hadolint, the systemd unit under
//! systemd-analyze and its environment file, the Kubernetes DaemonSet against what the agent and
//! IMDS need, and the one licence every place states.

use crate::common;
use crate::ops;

use common::{Agent, Imds, TempDir};
use ops::Error;
use serde::Deserialize;
use serde_json::Value;
use std::process::{Command, Output, Stdio};

type TestResult = Result<(), Error>;

const BIN: &str = env!("CARGO_BIN_EXE_azure-scheduled-events-exporter");
const UNIT: &str = "deploy/systemd/azure-scheduled-events-exporter.service";

fn report(output: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

#[test]
fn the_dockerfile_builds_in_stages_and_runs_the_agent_unprivileged_on_its_port() -> TestResult {
    let dockerfile = std::fs::read_to_string(ops::repo().join("Dockerfile"))?;
    let from: Vec<&str> = dockerfile
        .lines()
        .filter(|l| l.starts_with("FROM "))
        .collect();
    assert_eq!(from.len(), 2, "a build stage and a final stage: {from:?}");
    assert!(
        from[0].contains("rust:") && from[0].contains("bookworm"),
        "{}",
        from[0]
    );
    assert!(
        from[1].contains("distroless") && from[1].contains(":nonroot"),
        "{}",
        from[1]
    );
    // Both base images by digest: a tag can point at other bytes tomorrow.
    let digest = |line: &str| -> Option<String> {
        let image = line.split_whitespace().nth(1)?;
        let (_, digest) = image.split_once("@sha256:")?;
        (digest.len() == 64
            && digest
                .bytes()
                .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase()))
        .then(|| format!("sha256:{digest}"))
    };
    for line in &from {
        assert!(digest(line).is_some(), "not pinned by digest: {line}");
    }
    let base = digest(from[1]).unwrap_or_default();
    assert!(
        dockerfile.contains(&format!("org.opencontainers.image.base.digest=\"{base}\"")),
        "the base.digest label is not the final stage's digest {base}"
    );
    let last_user = dockerfile
        .lines()
        .filter_map(|l| l.strip_prefix("USER "))
        .next_back()
        .ok_or("no USER")?;
    assert!(
        !last_user.starts_with("0") && !last_user.starts_with("root"),
        "USER {last_user}"
    );
    assert!(
        dockerfile.contains("\nEXPOSE 10188\n"),
        "EXPOSE 10188 (the default listen port)"
    );
    assert!(
        dockerfile.contains("\nENTRYPOINT [\"/usr/local/bin/azure-scheduled-events-exporter\"]\n"),
        "exec-form ENTRYPOINT"
    );
    for label in ["title", "description", "licenses", "revision"] {
        assert!(
            dockerfile.contains(&format!("org.opencontainers.image.{label}=")),
            "OCI label {label}"
        );
    }
    let help = String::from_utf8(Command::new(BIN).arg("--help").output()?.stdout)?;
    assert!(
        help.contains(":10188"),
        "the agent's default port is no longer 10188"
    );
    Ok(())
}

/// `docker build .` sends only what .dockerignore admits: every file the build stage copies must be
/// admitted and exist, or the image does not build.
#[test]
fn the_build_context_holds_every_file_the_build_stage_copies() -> TestResult {
    let ignore = std::fs::read_to_string(ops::repo().join(".dockerignore"))?;
    let patterns: Vec<&str> = ignore
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .collect();
    // Docker's last matching pattern decides. This reads the two forms the file uses: `*` (everything
    // out) and `!PATH` (PATH, and what is under it, back in).
    let admitted = |path: &str| -> Result<bool, Error> {
        let mut admitted = true;
        for pattern in &patterns {
            match pattern.strip_prefix('!') {
                None if *pattern == "*" => admitted = false,
                Some(back) if !back.contains(['*', '?', '[']) => {
                    let back = back.trim_end_matches('/');
                    if path == back || path.starts_with(&format!("{back}/")) {
                        admitted = true;
                    }
                }
                _ => {
                    return Err(format!(
                        ".dockerignore: a pattern this test does not read: {pattern}"
                    )
                    .into());
                }
            }
        }
        Ok(admitted)
    };
    let dockerfile = std::fs::read_to_string(ops::repo().join("Dockerfile"))?;
    let mut copied = Vec::new();
    // COPY's sources, but those of another stage (`--from=`): every word but the destination.
    for line in dockerfile.lines().filter_map(|l| l.strip_prefix("COPY ")) {
        if line.contains("--from=") {
            continue;
        }
        let words: Vec<&str> = line
            .split_whitespace()
            .filter(|w| !w.starts_with("--"))
            .collect();
        copied.extend(words[..words.len().saturating_sub(1)].iter().copied());
    }
    for needed in [
        "Cargo.toml",
        "Cargo.lock",
        "src",
        "crates",
        ".cargo/image.toml",
    ] {
        assert!(
            copied.contains(&needed),
            "the build stage does not copy {needed}: {copied:?}"
        );
    }
    for source in &copied {
        assert!(
            ops::repo().join(source).exists(),
            "the Dockerfile copies {source}, which does not exist"
        );
        assert!(
            admitted(source)?,
            ".dockerignore keeps {source} out of the build context"
        );
    }
    // The same reading does keep out what the file leaves out.
    assert!(
        !admitted("target")? && !admitted("docs")?,
        ".dockerignore admits target/ or docs/"
    );
    Ok(())
}

fn manifests(file: &str) -> Result<Vec<Value>, Error> {
    let text = std::fs::read_to_string(ops::repo().join("deploy/kubernetes").join(file))?;
    let mut docs = Vec::new();
    for document in serde_norway::Deserializer::from_str(&text) {
        docs.push(Value::deserialize(document).map_err(|e| format!("{file}: {e}"))?);
    }
    Ok(docs)
}

fn daemonset() -> Result<Value, Error> {
    manifests("daemonset.yaml")?
        .into_iter()
        .find(|d| d["kind"] == "DaemonSet")
        .ok_or_else(|| "no DaemonSet in daemonset.yaml".into())
}

#[test]
fn the_daemonset_reaches_imds_and_runs_locked_down_with_limits() -> TestResult {
    let ds = daemonset()?;
    let pod = &ds["spec"]["template"]["spec"];
    // The pod's own network reaches IMDS where AKS lets pods reach it (its default): no host access,
    // and the namespace the manifest creates enforces Pod Security "restricted".
    assert_eq!(pod["hostNetwork"], false, "host networking by default");
    assert!(pod.get("initContainers").is_none(), "a root init container");
    assert!(
        pod["volumes"]
            .as_array()
            .into_iter()
            .flatten()
            .all(|v| v.get("hostPath").is_none()),
        "a hostPath volume"
    );
    let namespace = manifests("daemonset.yaml")?
        .into_iter()
        .find(|d| d["kind"] == "Namespace")
        .ok_or("no Namespace in daemonset.yaml")?;
    assert_eq!(
        namespace["metadata"]["labels"]["pod-security.kubernetes.io/enforce"],
        "restricted"
    );
    assert_eq!(pod["automountServiceAccountToken"], false);
    assert_eq!(pod["securityContext"]["runAsNonRoot"], true);
    let containers = pod["containers"].as_array().ok_or("no containers")?;
    assert_eq!(containers.len(), 1);
    let c = &containers[0];
    let security = &c["securityContext"];
    assert_eq!(security["runAsNonRoot"], true);
    assert_eq!(security["allowPrivilegeEscalation"], false);
    assert_eq!(security["readOnlyRootFilesystem"], true);
    assert_eq!(security["capabilities"]["drop"], serde_json::json!(["ALL"]));
    for kind in ["requests", "limits"] {
        for resource in ["cpu", "memory"] {
            assert!(
                c["resources"][kind][resource].is_string(),
                "no {kind}.{resource}"
            );
        }
    }
    assert_eq!(c["ports"][0]["containerPort"], 10188);
    let mounts: Vec<&str> = c["volumeMounts"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|m| m["mountPath"].as_str())
        .collect();
    assert!(
        mounts.contains(&"/var/lib/azure-scheduled-events-exporter"),
        "no writable state directory: {mounts:?}"
    );
    let annotations = &ds["spec"]["template"]["metadata"]["annotations"];
    assert_eq!(annotations["prometheus.io/scrape"], "true");
    assert_eq!(annotations["prometheus.io/port"], "10188");
    assert_eq!(annotations["prometheus.io/path"], "/metrics");

    let monitor = manifests("podmonitor.yaml")?;
    assert_eq!(monitor[0]["kind"], "PodMonitor");
    assert_eq!(
        monitor[0]["spec"]["selector"]["matchLabels"], ds["spec"]["selector"]["matchLabels"],
        "the PodMonitor selects the DaemonSet's pods"
    );
    assert_eq!(
        monitor[0]["spec"]["podMetricsEndpoints"][0]["port"],
        "metrics"
    );
    Ok(())
}

/// The probes and variables the DaemonSet and the unit use are ones the agent answers and reads.
#[tokio::test]
async fn the_agent_answers_the_probes_and_reads_the_variables_the_service_files_set() -> TestResult
{
    let ds = daemonset()?;
    let container = &ds["spec"]["template"]["spec"]["containers"][0];
    let imds = Imds::start().await?;
    let agent = Agent::start(&imds, &["--state.file="]).await?;
    agent
        .wait_for("a first document", |e| e.up() == Some(1.0))
        .await?;
    for probe in ["livenessProbe", "readinessProbe"] {
        let path = container[probe]["httpGet"]["path"]
            .as_str()
            .ok_or(format!("no {probe} path"))?;
        let (status, body) = agent.get(path).await?;
        assert_eq!(status, 200, "{probe} {path}: {body}");
    }
    agent.stop().await?;

    let help = String::from_utf8(Command::new(BIN).arg("--help").output()?.stdout)?;
    let mut variables: Vec<String> = container["env"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|e| e["name"].as_str().map(str::to_owned))
        .collect();
    let unit = std::fs::read_to_string(ops::repo().join(UNIT))?;
    variables.extend(
        unit.lines()
            .filter_map(|l| l.strip_prefix("Environment="))
            .filter_map(|l| l.split('=').next().map(str::to_owned)),
    );
    assert!(!variables.is_empty());
    // Besides its own variables, the DaemonSet sets OTEL_RESOURCE_ATTRIBUTES (standard, read by
    // the OpenTelemetry configuration) from downward-API variables that only it refers to.
    let attributes = container["env"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|e| e["name"] == "OTEL_RESOURCE_ATTRIBUTES")
        .and_then(|e| e["value"].as_str())
        .unwrap_or_default()
        .to_owned();
    for variable in variables {
        if variable == "OTEL_RESOURCE_ATTRIBUTES" {
            continue;
        }
        if variable.starts_with("K8S_") {
            assert!(
                attributes.contains(&format!("$({variable})")),
                "{variable} is set but never used"
            );
            continue;
        }
        assert!(
            help.contains(&format!("[env: {variable}=")),
            "the agent does not read {variable}"
        );
    }
    Ok(())
}

/// The effective user id of this process, from /proc.
fn effective_uid() -> Result<u32, Error> {
    let status = std::fs::read_to_string("/proc/self/status")?;
    let uids = status
        .lines()
        .find_map(|l| l.strip_prefix("Uid:"))
        .ok_or("no Uid: line in /proc/self/status")?;
    Ok(uids
        .split_whitespace()
        .nth(1)
        .ok_or("no effective uid")?
        .parse()?)
}

/// What the chart's init container runs, from the agent's own image: the state directory made,
/// private, and given to the agent's user; again, it changes nothing.
#[test]
fn prepare_state_dir_makes_a_private_directory_and_gives_it_to_the_agents_user() -> TestResult {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let dir = TempDir::new("prepare-state-dir")?;
    let state = dir.path("var/lib/azure-scheduled-events-exporter");
    let prepare = |owner: &str| {
        Command::new(BIN)
            .args(["prepare-state-dir", owner, &state.to_string_lossy()])
            .env_clear()
            .stdin(Stdio::null())
            .output()
    };
    let root = effective_uid()? == 0;
    let output = prepare("--owner=65532:65532")?;
    let metadata = std::fs::metadata(&state)?;
    assert!(metadata.is_dir(), "{}", report(&output));
    assert_eq!(metadata.permissions().mode() & 0o777, 0o700);
    if root {
        assert!(output.status.success(), "{}", report(&output));
        assert_eq!((metadata.uid(), metadata.gid()), (65532, 65532));
        assert!(report(&output).contains("state directory ready"));
        // Run again (every pod start): already the agent's, nothing to do, and no CAP_FOWNER needed.
        let again = prepare("--owner=65532:65532")?;
        assert!(again.status.success(), "{}", report(&again));
    } else {
        // Without CAP_CHOWN the directory cannot be given away: a failure naming it, never a
        // directory that only looks ready.
        assert_eq!(output.status.code(), Some(1), "{}", report(&output));
        assert!(
            report(&output).contains(&format!("cannot give {}", state.display())),
            "{}",
            report(&output)
        );
    }
    let bad = prepare("--owner=agent")?;
    assert_eq!(bad.status.code(), Some(64), "{}", report(&bad));
    Ok(())
}

/// `--state.file` in a directory that does not exist yet: the agent makes it, for itself alone;
/// where it cannot, it says so and keeps state in memory, as for any state file it cannot write.
#[tokio::test]
async fn the_agent_makes_a_missing_state_directory_or_keeps_state_in_memory_saying_so() -> TestResult
{
    use std::os::unix::fs::PermissionsExt;
    let imds = Imds::start().await?;
    let dir = TempDir::new("state-dir")?;
    let file = dir.path("new/state/state.json");
    let url = format!("--imds.url={}", imds.url());
    let flag = format!("--state.file={}", file.display());
    let run = |flag: &str| {
        common::process::AgentProcess::spawn(common::process::command(&[
            &url,
            "--web.listen-address=127.0.0.1:0",
            "--poll.interval=100ms",
            flag,
        ]))
    };
    let mut agent = run(&flag)?;
    common::wait(&format!("a state file at {}", file.display()))
        .until(async || file.exists())
        .await?;
    agent.terminate()?;
    let made = std::fs::metadata(dir.path("new/state"))?
        .permissions()
        .mode()
        & 0o777;
    assert_eq!(made, 0o700, "the state directory is {made:o}");

    // No directory can be made in /proc, whoever runs the test (root included).
    let mut agent = run("--state.file=/proc/azure-scheduled-events-exporter/state.json")?;
    let warning = agent.next_line_where(|l| {
        l["message"]
            .as_str()
            .is_some_and(|m| m.starts_with("cannot write the state file: keeping state in memory"))
    })?;
    assert_eq!(warning["level"], "WARN", "{warning}");
    agent.terminate()?;
    Ok(())
}

#[test]
fn the_environment_file_names_only_variables_the_agent_reads() -> TestResult {
    let text = std::fs::read_to_string(
        ops::repo().join("deploy/systemd/azure-scheduled-events-exporter.default"),
    )?;
    let help = String::from_utf8(Command::new(BIN).arg("--help").output()?.stdout)?;
    let mut named = 0;
    for line in text.lines() {
        let setting = line.trim_start_matches('#');
        let Some((variable, _)) = setting.split_once('=') else {
            continue;
        };
        if !variable.starts_with("AZURE_SCHEDULED_EVENTS_") {
            continue;
        }
        named += 1;
        assert!(
            help.contains(&format!("[env: {variable}=")),
            "the agent does not read {variable}"
        );
    }
    assert!(named >= 5, "only {named} variables documented");
    Ok(())
}

#[test]
fn every_place_states_the_same_license() -> TestResult {
    let license = env!("CARGO_PKG_LICENSE");
    assert_eq!(license, "Apache-2.0");
    let text = std::fs::read_to_string(ops::repo().join("LICENSE"))?;
    assert!(
        text.contains("Apache License") && text.contains("Version 2.0, January 2004"),
        "LICENSE is not the Apache-2.0 text"
    );
    assert!(
        text.contains("END OF TERMS AND CONDITIONS"),
        "LICENSE is cut short"
    );
    let chart =
        ops::yaml(&ops::repo().join("deploy/helm/azure-scheduled-events-exporter/Chart.yaml"))?;
    assert_eq!(chart["annotations"]["artifacthub.io/license"], license);
    let dockerfile = std::fs::read_to_string(ops::repo().join("Dockerfile"))?;
    assert!(dockerfile.contains(&format!("org.opencontainers.image.licenses=\"{license}\"")));
    let copyright = std::fs::read_to_string(ops::repo().join("deploy/debian/copyright"))?;
    assert!(copyright.contains(&format!("\nLicense: {license}\n")));
    Ok(())
}

// The tests that run an external tool, compiled with the feature `external-tools`.
#[cfg(feature = "external-tools")]
mod tools;
