//! Every setting refused before the agent runs, naming what was meant: the built binary's usage
//! errors, unknown variables and `check-config` as users run them, and the Helm chart's values
//! schema through a real `helm template`. (That the reference, the variables' names and the
//! schema's keys follow the flags is tested where they are generated, `config::reference`.)

use std::net::TcpListener;
use std::process::Output;

use crate::common::process::{AgentProcess, command};
use crate::common::{TempDir, TestResult};
use crate::ops;

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// Runs the binary with `args` and `env` (a clean environment otherwise), expecting exit 64 with
/// one line on stderr; returns that line.
fn refused(args: &[&str], env: &[(&str, &str)]) -> Result<String, Box<dyn std::error::Error>> {
    let mut command = command(args);
    command.envs(env.iter().copied());
    let output = command.output()?;
    let text = stderr(&output);
    assert_eq!(output.status.code(), Some(64), "{args:?} {env:?}: {text}");
    assert_eq!(
        text.trim_end().lines().count(),
        1,
        "{args:?} {env:?}: one line: {text}"
    );
    Ok(text)
}

#[test]
fn an_unknown_variable_exits_64_naming_the_variable_and_flag_meant() -> TestResult {
    let line = refused(&[], &[("AZURE_SCHEDULED_EVENTS_APROVE", "true")])?;
    assert!(line.contains("AZURE_SCHEDULED_EVENTS_APROVE"), "{line}");
    assert!(
        line.contains("did you mean AZURE_SCHEDULED_EVENTS_APPROVE (--approve)?"),
        "{line}"
    );
    // Also before a subcommand runs: the demo would otherwise play with approval quietly off.
    let line = refused(&["demo"], &[("AZURE_SCHEDULED_EVENTS_POLL_INTERVL", "2s")])?;
    assert!(
        line.contains("AZURE_SCHEDULED_EVENTS_POLL_INTERVAL"),
        "{line}"
    );
    Ok(())
}

#[test]
fn variables_the_agent_reads_but_no_agent_flag_names_are_not_refused() -> TestResult {
    // The simulator's own variables, and the standard ones (KUBECONFIG, OTEL_*), next to the
    // agent's: check-config passes.
    let mut command = command(&["check-config"]);
    command.envs([
        ("AZURE_SCHEDULED_EVENTS_SIMULATOR_SCENARIO", "demo"),
        ("AZURE_SCHEDULED_EVENTS_POLL_INTERVAL", "2s"),
        ("KUBECONFIG", "/nonexistent/kubeconfig"),
        ("OTEL_SERVICE_NAME", "agent"),
    ]);
    let output = command.output()?;
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    Ok(())
}

/// A Service's port: its name (empty: unnamed), number and protocol.
type Port = (&'static str, u16, &'static str);

/// The variables the kubelet gives every pod of a namespace for a Service `name` with cluster IP
/// `ip` and `ports`, as pkg/kubelet/envvars writes them.
fn service_links(name: &str, ip: &str, ports: &[Port]) -> Vec<(String, String)> {
    let prefix = name.to_uppercase().replace('-', "_");
    let host_port = |port: u16| match ip.contains(':') {
        true => format!("[{ip}]:{port}"),
        false => format!("{ip}:{port}"),
    };
    let mut env = vec![
        (format!("{prefix}_SERVICE_HOST"), ip.to_owned()),
        (format!("{prefix}_SERVICE_PORT"), ports[0].1.to_string()),
    ];
    for (port_name, port, _) in ports.iter().filter(|p| !p.0.is_empty()) {
        let port_name = port_name.to_uppercase().replace('-', "_");
        env.push((
            format!("{prefix}_SERVICE_PORT_{port_name}"),
            port.to_string(),
        ));
    }
    for (i, (_, port, protocol)) in ports.iter().enumerate() {
        let link = format!("{}://{}", protocol.to_lowercase(), host_port(*port));
        if i == 0 {
            env.push((format!("{prefix}_PORT"), link.clone()));
        }
        let at = format!("{prefix}_PORT_{port}_{}", protocol.to_uppercase());
        env.push((format!("{at}_PROTO"), protocol.to_lowercase()));
        env.push((format!("{at}_PORT"), port.to_string()));
        env.push((format!("{at}_ADDR"), ip.to_owned()));
        env.push((at, link));
    }
    env
}

#[test]
fn the_agent_starts_next_to_a_service_of_each_of_its_names() -> TestResult {
    // kubectl expose names a Service after what it exposes (the DaemonSet, or one of its pods);
    // the chart's objects are named after the release, the chart's name appended when the
    // release's does not contain it. Ports as kubectl expose copies them (one unnamed), as the
    // chart's ServiceMonitor Service has them (named), and a second protocol on IPv6.
    let services: [(&str, &str, &[Port]); 4] = [
        (
            "azure-scheduled-events-exporter",
            "10.0.0.11",
            &[("", 10188, "TCP")],
        ),
        (
            "azure-scheduled-events-exporter-7bq2x",
            "10.0.0.12",
            &[("", 10188, "TCP")],
        ),
        (
            "azure-scheduled-events-azure-scheduled-events-exporter",
            "10.0.0.13",
            &[("metrics", 10188, "TCP")],
        ),
        (
            "azure-scheduled-events",
            "fd00::14",
            &[("metrics", 10188, "TCP"), ("otlp-udp", 4317, "UDP")],
        ),
    ];
    let env: Vec<(String, String)> = services
        .iter()
        .flat_map(|(name, ip, ports)| service_links(name, ip, ports))
        .collect();
    assert!(env.len() >= 30, "{env:?}");
    let mut command = command(&[
        "demo",
        "--log.format=json",
        "--web.listen-address=127.0.0.1:0",
    ]);
    command.envs(env.iter().map(|(n, v)| (n, v)));
    let mut agent = AgentProcess::spawn(command)?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime.block_on(agent.wait_for_series("azure_scheduled_events_up 1"))?;
    assert!(agent.exited()?.is_none());
    agent.terminate()?;
    // The same names with a value no Service gives are still refused: a setting, mistyped.
    let line = refused(&[], &[("AZURE_SCHEDULED_EVENTS_EXPORTER_PORT", "10188")])?;
    assert!(
        line.contains("AZURE_SCHEDULED_EVENTS_EXPORTER_PORT"),
        "{line}"
    );
    Ok(())
}

#[test]
fn a_mistyped_flag_exits_64_with_the_tip_naming_the_flag_meant() -> TestResult {
    let line = refused(&["--poll.intervl=1s"], &[])?;
    assert!(line.contains("'--poll.intervl'"), "{line}");
    assert!(
        line.contains("a similar argument exists: '--poll.interval'"),
        "{line}"
    );
    Ok(())
}

#[test]
fn a_value_outside_a_closed_set_exits_64_listing_the_possible_values() -> TestResult {
    let line = refused(&["--log.format=yaml"], &[])?;
    assert!(
        line.contains("--log.format") && line.contains("[possible values: json, text]"),
        "{line}"
    );
    let line = refused(&[], &[("AZURE_SCHEDULED_EVENTS_APPROVE", "yes")])?;
    assert!(
        line.contains("--approve") && line.contains("[possible values: true, false]"),
        "{line}"
    );
    let line = refused(&["--kubernetes.taint-events=Reboot,Rebot"], &[])?;
    assert!(
        line.contains("--kubernetes.taint-events") && line.contains("did you mean Reboot?"),
        "{line}"
    );
    Ok(())
}

/// `check-config`'s summary line for `args` and `env`, expecting success.
fn checked(args: &[&str], env: &[(&str, &str)]) -> Result<String, Box<dyn std::error::Error>> {
    let mut command = command(&[&["check-config"][..], args].concat());
    command.envs(env.iter().copied());
    let output = command.output()?;
    assert_eq!(
        output.status.code(),
        Some(0),
        "{args:?} {env:?}: {}",
        stderr(&output)
    );
    let out = stdout(&output);
    assert_eq!(out.lines().count(), 1, "{out}");
    Ok(out)
}

#[test]
fn every_boolean_takes_one_style_as_a_flag_and_as_a_variable() -> TestResult {
    assert!(checked(&[], &[])?.contains("approval off"));
    assert!(checked(&["--approve"], &[])?.contains("approval on"));
    assert!(checked(&["--approve=true"], &[])?.contains("approval on"));
    assert!(checked(&["--approve=false"], &[])?.contains("approval off"));
    let env = [("AZURE_SCHEDULED_EVENTS_APPROVE", "TRUE")];
    assert!(checked(&[], &env)?.contains("approval on"));
    assert!(
        checked(&["--approve=false"], &env)?.contains("approval off"),
        "the flag wins over its variable"
    );
    // As for every flag, the value may be the next word; one that is neither is refused.
    assert!(checked(&["--approve", "false"], &[])?.contains("approval off"));
    let line = refused(&["--approve", "maybe"], &[])?;
    assert!(line.contains("[possible values: true, false]"), "{line}");
    // A setting on by default is turned off the same way (it used to take a value only).
    checked(
        &["--approve.user-events=false", "--approve.user-events"],
        &[],
    )?;
    Ok(())
}

#[test]
fn check_config_reads_every_file_and_passes_a_valid_setup_with_one_line() -> TestResult {
    let dir = TempDir::new("check-config-valid")?;
    let receivers = dir.path("receivers.yaml");
    std::fs::write(
        &receivers,
        format!(
            "receivers:\n  - name: ops\n    format: slack\n    url: {}/hooks/ops\n",
            ops::DOWN
        ),
    )?;
    let web = dir.path("web.yml");
    std::fs::write(
        &web,
        "basic_auth_users:\n  prometheus: $2y$10$QOauhQNbBCuQDKes6eFzPeMqBSjb7Mr5DUmpZ/VcEd00UAV/LDeSi\n",
    )?;
    let kubeconfig = ops::down_kubeconfig(&dir.0)?;
    let policy = ops::repo().join("examples/approval-policy.yaml");
    let state = dir.path("state.json");
    let args = [
        "--approve".to_owned(),
        format!("--approve.policy-file={}", policy.display()),
        format!("--notify.config-file={}", receivers.display()),
        format!("--web.config.file={}", web.display()),
        format!("--state.file={}", state.display()),
    ];
    let mut args: Vec<&str> = args.iter().map(String::as_str).collect();
    let kubernetes = [
        "--kubernetes.node-name=aks-pool-12345678-vmss000000".to_owned(),
        format!("--kubernetes.kubeconfig={}", kubeconfig.display()),
        "--kubernetes.taint-events=Reboot,Redeploy".to_owned(),
    ];
    if cfg!(feature = "kubernetes") {
        args.extend(kubernetes.iter().map(String::as_str));
    }
    let line = checked(&args, &[])?;
    assert!(
        line.starts_with("configuration OK: polls http://169.254.169.254/ every 1s"),
        "{line}"
    );
    for said in [
        "approval on",
        "1 notification receiver",
        "traces off",
        &format!("state in {}", state.display()),
    ] {
        assert!(line.contains(said), "{said}: {line}");
    }
    if cfg!(feature = "kubernetes") {
        assert!(
            line.contains("Kubernetes node aks-pool-12345678-vmss000000"),
            "{line}"
        );
    }
    assert!(!state.exists(), "check-config wrote the state file");
    Ok(())
}

#[test]
fn check_config_prints_every_problem_and_exits_64() -> TestResult {
    let dir = TempDir::new("check-config-problems")?;
    let policy = dir.path("policy.yaml");
    std::fs::write(&policy, "user_event: false\n")?;
    let receivers = dir.path("receivers.yaml");
    std::fs::write(
        &receivers,
        "receivers:\n  - name: ops\n    url_file: /nonexistent/url\n",
    )?;
    let web = dir.path("web.yml");
    std::fs::write(&web, "tls_server_config:\n  cert_file: /nonexistent.crt\n")?;
    let args = [
        format!("--approve.policy-file={}", policy.display()),
        format!("--notify.config-file={}", receivers.display()),
        format!("--web.config.file={}", web.display()),
        "--imds.url=ftp://169.254.169.254".to_owned(),
        "--web.telemetry-path=/healthz".to_owned(),
    ];
    let mut all = vec!["check-config"];
    all.extend(args.iter().map(String::as_str));
    let mut command = command(&all);
    command.env("AZURE_SCHEDULED_EVENTS_APROVE", "true");
    let output = command.output()?;
    let text = stderr(&output);
    assert_eq!(output.status.code(), Some(64), "{text}");
    assert_eq!(stdout(&output), "", "no summary with problems");
    for named in [
        "AZURE_SCHEDULED_EVENTS_APROVE",
        "--imds.url",
        "--web.telemetry-path",
        "--approve.policy-file",
        "user_event",
        "--notify.config-file",
        "--web.config.file",
    ] {
        assert!(
            text.lines()
                .any(|l| l.starts_with("error: ") && l.contains(named)),
            "{named} is not named:\n{text}"
        );
    }
    assert_eq!(text.lines().count(), 6, "one line each:\n{text}");
    Ok(())
}

#[test]
fn check_config_reports_every_usage_error_and_checks_the_rest() -> TestResult {
    let mut command = command(&[
        "check-config",
        "--log.format=yaml",
        "--poll.intervl=1s",
        "--imds.url=ftp://169.254.169.254",
    ]);
    command.env("AZURE_SCHEDULED_EVENTS_IMDS_TIMEOUT", "often");
    let output = command.output()?;
    let text = stderr(&output);
    assert_eq!(output.status.code(), Some(64), "{text}");
    for named in [
        "[possible values: json, text]",
        "a similar argument exists: '--poll.interval'",
        "'often' for '--imds.timeout",
        "invalid value for --imds.url",
    ] {
        assert!(text.contains(named), "{named}:\n{text}");
    }
    assert_eq!(text.lines().count(), 4, "one line each:\n{text}");
    Ok(())
}

#[test]
fn check_config_says_an_older_agents_large_state_file_is_read_and_kept() -> TestResult {
    // Over the 4 MiB cap, as an agent that wrote without one left it: the agent reads it once
    // under the larger cap and keeps its approvals; check-config must say so, not "start fresh".
    let dir = TempDir::new("check-config-legacy")?;
    let state = dir.path("state.json");
    let mut legacy =
        br#"{"version":1,"approvals":{"A1B2C3D4-0000-4000-8000-000000000001":{}}}"#.to_vec();
    legacy.resize(5 << 20, b' ');
    std::fs::write(&state, &legacy)?;
    let mut command = command(&["check-config", &format!("--state.file={}", state.display())]);
    let output = command.output()?;
    let text = stderr(&output);
    assert_eq!(output.status.code(), Some(0), "{text}");
    let warning = text
        .lines()
        .find(|l| l.starts_with("warning: state file"))
        .ok_or_else(|| format!("no state file warning: {text}"))?;
    for said in [
        "larger than 4194304 bytes",
        "keep every approval it names (1)",
        "copy it to",
        "replace it at its first write",
    ] {
        assert!(warning.contains(said), "{said}: {warning}");
    }
    assert!(!warning.contains("fresh"), "{warning}");
    assert_eq!(std::fs::read(&state)?, legacy, "left as it is");
    assert!(!dir.path("state.json.corrupt").exists(), "nothing copied");
    Ok(())
}

#[test]
fn what_the_agent_would_run_on_is_a_warning_that_passes_the_check() -> TestResult {
    let dir = TempDir::new("check-config-warnings")?;
    let state = dir.path("state.json");
    std::fs::write(&state, "not json")?;
    let mut command = command(&["check-config", &format!("--state.file={}", state.display())]);
    command.env("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4318");
    command.env("OTEL_EXPORTER_OTLP_TIMEOUT", "10s");
    let output = command.output()?;
    let text = stderr(&output);
    assert_eq!(output.status.code(), Some(0), "{text}");
    assert!(
        text.lines()
            .any(|l| l.starts_with("warning: ") && l.contains("OTEL_EXPORTER_OTLP_TIMEOUT")),
        "{text}"
    );
    assert!(
        text.lines().any(|l| l.starts_with("warning: ")
            && l.contains("read in part")
            && l.contains("copy it to")
            && l.contains("state.json.corrupt")),
        "{text}"
    );
    assert_eq!(
        std::fs::read_to_string(&state)?,
        "not json",
        "the state file is left as it is"
    );
    assert!(stdout(&output).contains("traces to http://collector:4318/v1/traces"));
    Ok(())
}

#[test]
fn check_config_sends_no_request_and_opens_no_port() -> TestResult {
    // One socket plays IMDS and holds the listen address: an agent that started would connect
    // to it, or fail to listen on its port.
    let imds = TcpListener::bind("127.0.0.1:0")?;
    imds.set_nonblocking(true)?;
    let address = imds.local_addr()?;
    let line = checked(
        &[
            &format!("--imds.url=http://{address}"),
            &format!("--web.listen-address={address}"),
            "--state.file=",
        ],
        &[],
    )?;
    assert!(
        line.contains(&format!("serves /metrics on {address}")),
        "{line}"
    );
    match imds.accept() {
        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => Ok(()),
        Err(e) => Err(e.into()),
        Ok((_, peer)) => Err(format!("check-config connected to IMDS from {peer}").into()),
    }
}

// ---- The chart ----

/// The chart's refusals and its test hook, through a real `helm template`.
#[cfg(feature = "external-tools")]
mod chart {
    use serde_json::Value;

    use super::*;

    const CHART: &str = "deploy/helm/azure-scheduled-events-exporter";

    /// `helm template` of the chart with `--set values`, expecting a refusal; returns helm's error.
    fn chart_refuses(set: &str) -> Result<String, Box<dyn std::error::Error>> {
        match ops::helm_template(&["x", CHART, "--set", set]) {
            Ok(_) => Err(format!("--set {set} rendered").into()),
            Err(error) => Ok(error.to_string()),
        }
    }

    #[test]
    fn a_mistyped_flag_in_the_chart_fails_helm_template_naming_the_flag_meant() -> TestResult {
        let error = chart_refuses(r"flags.poll\.intervl=1s")?;
        assert!(error.contains("'poll.intervl' not allowed"), "{error}");
        assert!(error.contains("value must be 'poll.interval'"), "{error}");
        // A typo in the group lists every flag, the one meant among them.
        let error = chart_refuses("flags.aprove=true")?;
        assert!(
            error.contains("'aprove'") && error.contains("'approve'"),
            "{error}"
        );
        Ok(())
    }

    #[test]
    fn a_value_outside_a_flags_syntax_fails_helm_template() -> TestResult {
        for (set, named) in [
            (r"flags.log\.format=yaml", "'json', 'text'"),
            (r"flags.poll\.interval=fast", "/flags/poll.interval"),
            ("flags.approve=maybe", "/flags/approve"),
            (
                r"flags.approve\.event-types=Reboot\,Rebot",
                "/flags/approve.event-types",
            ),
            (r"flags.web\.max-requests=-1", "/flags/web.max-requests"),
            ("kubernetes.taintEvents=Rebot", "/kubernetes/taintEvents"),
            (
                "kubernetes.drainEvents=SpotRebalanceRecommendation",
                "/kubernetes/drainEvents",
            ),
            (
                "kubernetes.resyncInterval=hourly",
                "/kubernetes/resyncInterval",
            ),
        ] {
            let error = chart_refuses(set)?;
            assert!(error.contains(named), "--set {set}: {error}");
        }
        // The same syntaxes as the agent's: any case, blanks, every unit of a duration.
        ops::helm_template(&[
            "x",
            CHART,
            "--set",
            r"kubernetes.taintEvents=reboot\, Redeploy,kubernetes.drainMargin=1m30s,flags.approve\.before-not-before=immediately,flags.approve\.user-events=false,flags.web\.max-requests=0",
        ])?;
        Ok(())
    }

    #[test]
    fn a_resource_name_kubernetes_refuses_fails_helm_template() -> TestResult {
        for set in [
            "resources.limits.memroy=1Gi",
            "state.init.resources.requests.cpus=1m",
            "test.resources.limits.memory=1GB",
        ] {
            let error = chart_refuses(set)?;
            assert!(
                error.contains("memroy")
                    || error.contains("cpus")
                    || error.contains("/test/resources/limits/memory"),
                "--set {set}: {error}"
            );
        }
        let error = chart_refuses("resources.limits.memroy=1Gi")?;
        assert!(
            error.contains("'cpu', 'memory', 'ephemeral-storage'"),
            "the standard names are listed: {error}"
        );
        ops::helm_template(&[
            "x",
            CHART,
            "--set",
            r"resources.limits.nvidia\.com/gpu=1,resources.limits.hugepages-2Mi=64Mi,resources.requests.ephemeral-storage=100Mi",
        ])?;
        Ok(())
    }

    /// The object of `kind` whose `helm.sh/hook` annotation is `hook` (none: not a hook).
    fn object<'a>(
        objects: &'a [Value],
        kind: &str,
        hook: Option<&str>,
    ) -> Result<&'a Value, String> {
        let found: Vec<&Value> = ops::of_kind(objects, kind)
            .into_iter()
            .filter(|o| o["metadata"]["annotations"]["helm.sh/hook"].as_str() == hook)
            .collect();
        match found.as_slice() {
            [one] => Ok(one),
            other => Err(format!("{} {kind} objects (hook {hook:?})", other.len())),
        }
    }

    #[test]
    fn the_charts_test_hook_runs_check_config_as_the_daemonset_runs_the_agent() -> TestResult {
        let objects = ops::helm_template(&[
            "x",
            CHART,
            "--values",
            &format!("{CHART}/ci/all-on-values.yaml"),
        ])?;
        let daemon_set = object(&objects, "DaemonSet", None)?;
        let pod = object(&objects, "Pod", Some("test"))?;
        let agent = &daemon_set["spec"]["template"]["spec"];
        let test = &pod["spec"];
        let (agent_container, test_container) = (&agent["containers"][0], &test["containers"][0]);
        let agent_args = agent_container["args"].as_array().ok_or("no args")?;
        let test_args = test_container["args"].as_array().ok_or("no args")?;
        assert_eq!(test_args[0], "check-config");
        assert_eq!(&test_args[1..], &agent_args[..]);
        for same in ["image", "env", "envFrom"] {
            assert_eq!(test_container[same], agent_container[same], "{same}");
        }
        // The same volumes but the agent's state directory, which is not the check's to touch.
        let but_state = |list: &Value| -> Vec<Value> {
            list.as_array()
                .into_iter()
                .flatten()
                .filter(|v| v["name"] != "state")
                .cloned()
                .collect()
        };
        assert_eq!(
            but_state(&test_container["volumeMounts"]),
            but_state(&agent_container["volumeMounts"])
        );
        assert_eq!(but_state(&test["volumes"]), but_state(&agent["volumes"]));
        for same in [
            "serviceAccountName",
            "automountServiceAccountToken",
            "securityContext",
            "nodeSelector",
            "tolerations",
            "imagePullSecrets",
        ] {
            assert_eq!(test[same], agent[same], "{same}");
        }
        assert_eq!(test["restartPolicy"], "Never");
        // Not one of the agent's pods for the DaemonSet's controller, Service or monitors.
        let selector = daemon_set["spec"]["selector"]["matchLabels"]
            .as_object()
            .ok_or("no selector")?;
        let labels = &pod["metadata"]["labels"];
        assert!(
            selector.iter().any(|(key, value)| &labels[key] != value),
            "the test pod matches the DaemonSet's selector: {labels}"
        );
        // Off on request; never among the objects applied by the plain manifests.
        let off = ops::helm_template(&["x", CHART, "--set", "test.enabled=false"])?;
        assert!(object(&off, "Pod", Some("test")).is_err());
        let plain = std::fs::read_to_string(ops::repo().join("deploy/kubernetes/daemonset.yaml"))?;
        assert!(!plain.contains("helm.sh/hook"));
        Ok(())
    }

    /// The hook's command line, run by the built binary with the environment the chart gives it (the
    /// downward API answered as the kubelet would), passes with the chart's defaults: no variable of
    /// the chart's is unknown to the agent, no flag refused.
    #[test]
    fn the_charts_test_hook_passes_with_the_charts_defaults() -> TestResult {
        let objects = ops::helm_template(&["x", CHART])?;
        let pod = object(&objects, "Pod", Some("test"))?;
        let container = &pod["spec"]["containers"][0];
        let args: Vec<&str> = container["args"]
            .as_array()
            .ok_or("no args")?
            .iter()
            .filter_map(Value::as_str)
            .collect();
        let mut env: Vec<(String, String)> = Vec::new();
        for variable in container["env"].as_array().ok_or("no env")? {
            let name = variable["name"]
                .as_str()
                .ok_or("a variable without a name")?;
            let value = match variable["valueFrom"]["fieldRef"]["fieldPath"].as_str() {
                Some("spec.nodeName") => "aks-pool-12345678-vmss000000".to_owned(),
                Some(_) => "x".to_owned(),
                None => variable["value"].as_str().unwrap_or_default().to_owned(),
            };
            env.push((name.to_owned(), value));
        }
        let mut command = command(&args);
        command.envs(env);
        let output = command.output()?;
        assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
        assert!(
            stdout(&output).starts_with("configuration OK"),
            "{}",
            stdout(&output)
        );
        Ok(())
    }
}
