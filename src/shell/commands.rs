//! The subcommands around the agent: `demo` (the agent against an in-process simulator),
//! `simulator` (the simulated IMDS alone) and `prepare-state-dir`, plus the shutdown signal they
//! wait for.

use std::net::SocketAddr;

use anyhow::Context;
use reqwest::Url;
use tokio::net::TcpListener;

use crate::config::{Config, PrepareStateDirArgs, SimulatorArgs};
use crate::output::telemetry::Telemetry;
use crate::shell::agent;
use azure_scheduled_events_simulator::{
    DEMO_OTHER_VM, DEMO_VM, RunningSimulator, Scenario, SimulatorHandle, example_compute,
};

/// Completes on SIGTERM, SIGINT (Ctrl-C) or SIGQUIT (SIGHUP and SIGUSR1 are logged and ignored); on
/// Windows on Ctrl-C, Ctrl-Break, the console closing or the system shutting down (a service's
/// stop comes from `service.rs` instead). On Unix the signals are taken over when this is
/// called, not when the future is first polled: call it before starting anything, so that a
/// signal during startup is handled too (a SIGHUP's default would kill the agent).
pub fn shutdown_signal() -> impl std::future::Future<Output = ()> {
    #[cfg(unix)]
    let stop = unix_signals();
    #[cfg(windows)]
    let stop = async {
        tokio::select! {
            () = ctrl_c() => {}
            () = windows_console_close() => {}
        }
    };
    #[cfg(not(any(unix, windows)))]
    let stop = ctrl_c();
    async move {
        stop.await;
        tracing::info!("shutting down");
    }
}

/// Completes on Ctrl-C; never if it cannot be listened for.
#[cfg(not(unix))]
async fn ctrl_c() {
    if tokio::signal::ctrl_c().await.is_err() {
        std::future::pending::<()>().await;
    }
}

/// Listens, from now on, for SIGTERM, SIGINT and SIGQUIT (whose default would dump core and skip
/// the span flush), and completes on the first. SIGHUP (a closed terminal, or an operator
/// expecting a reload) and SIGUSR1 would kill the agent by default; there is nothing to reload
/// (the web config is read at every request), so each is logged and ignored.
#[cfg(unix)]
fn unix_signals() -> impl std::future::Future<Output = ()> {
    use tokio::signal::unix::{SignalKind, signal};
    let listen = |kind: SignalKind| signal(kind).ok();
    async fn recv(signal: &mut Option<tokio::signal::unix::Signal>) {
        let received = match signal {
            Some(signal) => signal.recv().await,
            None => None,
        };
        if received.is_none() {
            std::future::pending::<()>().await;
        }
    }
    let (mut terminate, mut interrupt, mut quit) = (
        listen(SignalKind::terminate()),
        listen(SignalKind::interrupt()),
        listen(SignalKind::quit()),
    );
    let (mut hangup, mut user1) = (
        listen(SignalKind::hangup()),
        listen(SignalKind::user_defined1()),
    );
    async move {
        loop {
            tokio::select! {
                _ = recv(&mut terminate) => return,
                _ = recv(&mut interrupt) => return,
                _ = recv(&mut quit) => return,
                _ = recv(&mut hangup) => {
                    tracing::info!(signal = "SIGHUP", "ignoring the signal: nothing to reload, the web config is read at every request");
                }
                _ = recv(&mut user1) => {
                    tracing::info!(signal = "SIGUSR1", "ignoring the signal");
                }
            }
        }
    }
}

/// Completes on Ctrl-Break, the console closing, or the system shutting down.
#[cfg(windows)]
async fn windows_console_close() {
    use tokio::signal::windows;
    let (Ok(mut ctrl_break), Ok(mut close), Ok(mut shutdown)) = (
        windows::ctrl_break(),
        windows::ctrl_close(),
        windows::ctrl_shutdown(),
    ) else {
        return std::future::pending().await;
    };
    tokio::select! {
        _ = ctrl_break.recv() => {}
        _ = close.recv() => {}
        _ = shutdown.recv() => {}
    }
}

/// Runs the agent against the built-in simulator playing the demo scenario on a loop.
/// Traces go wherever `telemetry` says (the `OTEL_*` variables or `--otlp.*` flags).
pub async fn demo(mut config: Config, telemetry: Telemetry) -> anyhow::Result<()> {
    let shutdown = shutdown_signal();
    // The demo plays a Spot eviction (Preempt) on its VM: a Spot VM, as instance metadata says
    // (vm_info's priority), like every VM Azure evicts.
    let mut compute = example_compute(DEMO_VM);
    compute.priority = "Spot".to_owned();
    let sim = SimulatorHandle::new(compute);
    sim.load_scenario(Scenario::demo(DEMO_VM, DEMO_OTHER_VM));
    // The banner announces the neighbour's Reboot: report neighbours' events, so that its lines
    // (affects_this_vm false) are in the log as announced.
    config.event_series = crate::config::EventSeries::All;
    let imds = RunningSimulator::start(sim)
        .await
        .context("cannot start the simulator")?;
    config.imds_url = Url::parse(&imds.url())?;
    let agent = agent::start_with(config.clone(), telemetry).await?;
    let metrics = format!("http://{}{}", local(agent.address()), config.telemetry_path);
    let sim_url = imds.url();
    eprintln!(
        "\n  The agent is polling a simulated IMDS that plays maintenance on VM {DEMO_VM} every 3 minutes:\n  \
         a Freeze shared with {DEMO_OTHER_VM}, a user Reboot, a Spot Preempt with 30 s notice, a Redeploy that\n  \
         is cancelled, and a Reboot of {DEMO_OTHER_VM} only (a neighbour's event: affects_this_vm false).\n  \
         {DEMO_VM} is a Spot VM. Each change is one log line below.\n\n  \
         metrics:         {metrics}\n  \
         watch events:    watch -n1 \"curl -s {metrics} | grep -E '^azure_scheduled_events_(event_|pending.* [1-9])'\"\n  \
         simulator state: curl -s {sim_url}/control/state\n  \
         Ctrl-C to stop.\n"
    );
    let result = agent.run_until(shutdown).await;
    imds.stop().await?;
    result
}

/// Serves the simulator alone until SIGTERM or Ctrl-C.
pub async fn simulator(args: SimulatorArgs) -> anyhow::Result<()> {
    let args = args.flags;
    let sim = SimulatorHandle::new(example_compute(&args.vm_name));
    if let Some(version) = args.api_version {
        sim.accept_api_version(version);
    }
    match args.scenario.as_deref() {
        Some(path) if path.as_os_str() == "demo" => {
            sim.load_scenario(Scenario::demo(&args.vm_name, DEMO_OTHER_VM));
        }
        Some(path) => {
            let scenario = Scenario::from_file(path)
                .with_context(|| format!("cannot load scenario {}", path.display()))?;
            sim.load_scenario(scenario);
        }
        None => {}
    }
    let listen = args.web_listen_address;
    let listener = TcpListener::bind(listen)
        .await
        .with_context(|| format!("cannot listen on {listen}"))?;
    let address = listener.local_addr()?;
    tracing::info!(
        %address,
        vm_name = %args.vm_name,
        api_version = args.api_version.map(|v| v.to_string()),
        scenario = args.scenario.as_ref().map(|p| p.display().to_string()),
        "simulated IMDS listening: point --imds.url at http://{address}; control API at /control/state"
    );
    azure_scheduled_events_simulator::serve(listener, sim, shutdown_signal()).await?;
    Ok(())
}

/// An address a browser can open: the unspecified address becomes loopback.
fn local(address: SocketAddr) -> SocketAddr {
    if address.ip().is_unspecified() {
        SocketAddr::new(std::net::Ipv4Addr::LOCALHOST.into(), address.port())
    } else {
        address
    }
}

/// Creates the state directory if missing (0700) and gives it to `--owner`, unless it is theirs
/// already: a hostPath directory the kubelet made belongs to root, and the agent does not run as root.
pub fn prepare_state_dir(args: &PrepareStateDirArgs) -> anyhow::Result<()> {
    let dir = &args.dir;
    crate::output::state::store::create_private_dir(dir)
        .with_context(|| format!("cannot create {}", dir.display()))?;
    let Some(owner) = args.owner else {
        tracing::info!(dir = %dir.display(), "state directory ready");
        return Ok(());
    };
    #[cfg(unix)]
    {
        use std::os::unix::fs::{MetadataExt, PermissionsExt};
        let metadata = std::fs::metadata(dir).with_context(|| format!("{}", dir.display()))?;
        if (metadata.uid(), metadata.gid()) != (owner.uid, owner.gid) {
            // The mode first: once the directory is the agent's, root without CAP_FOWNER cannot change it.
            std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
                .with_context(|| format!("cannot make {} private", dir.display()))?;
            std::os::unix::fs::chown(dir, Some(owner.uid), Some(owner.gid)).with_context(|| {
                format!(
                    "cannot give {} to {}:{} (CAP_CHOWN needed)",
                    dir.display(),
                    owner.uid,
                    owner.gid
                )
            })?;
        }
        tracing::info!(dir = %dir.display(), uid = owner.uid, gid = owner.gid, "state directory ready");
        Ok(())
    }
    #[cfg(not(unix))]
    anyhow::bail!(
        "--owner {}:{}: ownership by numeric ids is Unix only",
        owner.uid,
        owner.gid
    )
}
