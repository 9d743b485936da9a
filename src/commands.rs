//! The subcommands around the agent: `demo` (the agent against an in-process simulator) and
//! `simulator` (the simulated IMDS alone), plus the shutdown signal they all wait for.

use std::net::SocketAddr;

use anyhow::Context;
use reqwest::Url;
use tokio::net::TcpListener;

use crate::agent;
use crate::config::{Config, SimulatorArgs};
use crate::simulator::{
    self, DEMO_OTHER_VM, DEMO_VM, RunningSimulator, Scenario, SimulatorHandle, example_compute,
};
use crate::telemetry::Telemetry;

/// Completes on SIGTERM or SIGINT (Ctrl-C); on Windows on Ctrl-C, Ctrl-Break, the console
/// closing or the system shutting down (a service's stop comes from `service.rs` instead).
pub async fn shutdown_signal() {
    let ctrl_c = async {
        if tokio::signal::ctrl_c().await.is_err() {
            std::future::pending::<()>().await;
        }
    };
    #[cfg(unix)]
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(windows)]
    let terminate = windows_console_close();
    #[cfg(not(any(unix, windows)))]
    let terminate = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => {}
        () = terminate => {}
    }
    tracing::info!("shutting down");
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
    let sim = SimulatorHandle::new(example_compute(DEMO_VM));
    sim.load_scenario(Scenario::demo(DEMO_VM, DEMO_OTHER_VM));
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
         is cancelled, and a Reboot of {DEMO_OTHER_VM} only. Each change is one log line below.\n\n  \
         metrics:         {metrics}\n  \
         watch events:    watch -n1 \"curl -s {metrics} | grep -E '^azure_scheduled_events_(event_|pending.* [1-9])'\"\n  \
         simulator state: curl -s {sim_url}/control/state\n  \
         Ctrl-C to stop.\n"
    );
    let result = agent.run_until(shutdown_signal()).await;
    imds.stop().await?;
    result
}

/// Serves the simulator alone until SIGTERM or Ctrl-C.
pub async fn simulator(args: SimulatorArgs) -> anyhow::Result<()> {
    let sim = SimulatorHandle::new(example_compute(&args.vm_name));
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
        scenario = args.scenario.as_ref().map(|p| p.display().to_string()),
        "simulated IMDS listening: point --imds.url at http://{address}; control API at /control/state"
    );
    simulator::serve(listener, sim, shutdown_signal()).await?;
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
