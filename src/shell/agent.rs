//! The imperative shell's wiring: settings, telemetry, the state file, the outputs in the order
//! they see each batch, the HTTP server, and the poll loop (`poll_loop.rs`) that drives
//! them.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use azure_scheduled_events_core::approval::Mode;
use azure_scheduled_events_core::boot;
use azure_scheduled_events_core::observer::Observer;
use azure_scheduled_events_core::occurrence::Occurrence;
use chrono::Utc;
use tokio::net::TcpListener;
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;

use crate::azure::imds::{ImdsClient, RecordRequest};
use crate::config::Config;
use crate::http::health::Health;
use crate::http::server::Endpoints;
use crate::output::approval::Approval;
use crate::output::hooks::Hooks;
#[cfg(feature = "kubernetes")]
use crate::output::kubernetes::Kubernetes;
use crate::output::log::Log;
use crate::output::log_events::LogEvents;
use crate::output::metrics::MetricsOutput;
use crate::output::metrics::{Families, Metrics};
use crate::output::notify::Notify;
use crate::output::notify::metrics::NotifyMetrics;
use crate::output::spans::Spans;
use crate::output::state::StateFile;
use crate::output::state::store::{Opened, StateStore};
use crate::output::telemetry::{Started, Telemetry, VmIdentity};
use crate::output::{Outputs, Reports};
use crate::shell::poll_loop::{Poller, until_stopped};

/// A running agent.
#[derive(Debug)]
pub struct RunningAgent {
    address: SocketAddr,
    stop: watch::Sender<bool>,
    server: JoinHandle<std::io::Result<()>>,
    poller: JoinHandle<()>,
}

/// Binds the HTTP listener and starts the poll loop and the server, without traces.
pub async fn start(config: Config) -> anyhow::Result<RunningAgent> {
    start_with(config, Telemetry::disabled()).await
}

/// As [`start`], exporting traces as `telemetry` says.
pub async fn start_with(config: Config, telemetry: Telemetry) -> anyhow::Result<RunningAgent> {
    let policy = &config.approval;
    let families = Families {
        approval: policy.mode != Mode::Off,
        hooks: policy.runs_hooks(),
        process: config.exporter_metrics,
    };
    let metrics = Arc::new(Metrics::new(
        &config.api_version,
        config.event_series,
        families,
    )?);
    let health = Arc::new(Health::new());
    // Records its own requests: the poll's GET, instance metadata and approval POSTs.
    let client = ImdsClient::with_connect_timeout(
        &config.imds_url,
        &config.api_version,
        config.imds_connect_timeout,
    )?
    .recording(Arc::clone(&metrics) as Arc<dyn RecordRequest>);
    let listener = TcpListener::bind(config.listen_address)
        .await
        .with_context(|| format!("cannot listen on {}", config.listen_address))?;
    let address = listener.local_addr()?;
    tracing::info!(
        version = env!("CARGO_PKG_VERSION"),
        revision = env!("BUILD_REVISION"),
        imds_url = %client.events_url(),
        poll_interval = ?config.poll_interval,
        imds_timeout = ?config.imds_timeout,
        imds_first_timeout = ?config.imds_first_timeout,
        imds_connect_timeout = ?config.imds_connect_timeout,
        imds_max_backoff = ?config.imds_max_backoff,
        listen_address = %address,
        telemetry_path = %config.telemetry_path,
        vm_name = config.vm_name.as_deref().unwrap_or("(from instance metadata)"),
        event_series = ?config.event_series,
        "starting"
    );
    if config.poll_interval < Duration::from_millis(200) {
        tracing::warn!(poll_interval = ?config.poll_interval, "polling faster than 5 requests per second: Azure IMDS answers 429 beyond that");
    }
    metrics.set_approval_mode(config.approval.mode);
    if config.approval.mode == Mode::Off {
        // Installing the agent enabled Scheduled Events on this VM: from now on Azure holds a
        // restart or redeploy started from the portal or CLI until it is approved or NotBefore
        // passes.
        tracing::info!(
            approve_with = "--approve",
            "approval is off: a restart or redeploy of this VM started from the portal, CLI or API waits until its NotBefore, up to 15 minutes; --approve lets user-initiated events start at once"
        );
    }
    if let Some(otlp) = telemetry.config() {
        tracing::info!(
            endpoint = %otlp.endpoint,
            protocol = otlp.protocol.as_str(),
            timeout = ?otlp.timeout,
            "exporting traces over OTLP"
        );
    }
    if let Some(otlp) = telemetry.logs_config() {
        tracing::info!(
            endpoint = %otlp.endpoint,
            protocol = otlp.protocol.as_str(),
            timeout = ?otlp.timeout,
            "exporting log events over OTLP"
        );
    }
    let exports = telemetry.start(
        metrics.registry(),
        VmIdentity {
            vm_name: config.vm_name.as_deref(),
            compute: None,
        },
    );
    if config.approval.mode != Mode::Off {
        let approval = &config.approval;
        tracing::info!(
            mode = approval.mode.as_str(),
            policy = %crate::shell::describe::policy(&approval.policy),
            hook = approval.hook.as_ref().map(|h| h.argv().join(" ")),
            hook_timeout = ?approval.hook_timeout,
            "approval enabled"
        );
    }
    let (store, restart) = open_state(&config);
    let observer = Observer::new(
        config.approval.settings(),
        &config.notify.recipients(),
        store.state(),
        &host_name(),
    );
    let (reports_tx, reports) = mpsc::unbounded_channel();
    let outputs = outputs(&config, &metrics, exports, store, &client, reports_tx).await?;

    let web = config.web.clone();
    let telemetry_path = config.telemetry_path.clone();
    let mut poller = Poller::new(
        config,
        client,
        Arc::clone(&metrics),
        Arc::clone(&health),
        observer,
        outputs,
        reports,
    );
    poller.dispatch(Utc::now(), vec![Occurrence::Restarted(restart)]);

    let (stop, stopped) = watch::channel(false);
    let endpoints = Arc::new(Endpoints {
        metrics,
        health,
        telemetry_path,
    });
    let server = tokio::spawn(crate::http::web::serve(
        listener,
        endpoints,
        web,
        until_stopped(stopped.clone()),
    ));
    poller.tell_systemd_ready();
    let poller = tokio::spawn(poller.run(stopped));
    Ok(RunningAgent {
        address,
        stop,
        server,
        poller,
    })
}

impl RunningAgent {
    /// The address the HTTP server listens on.
    pub fn address(&self) -> SocketAddr {
        self.address
    }

    /// Runs until `shutdown` completes, then stops gracefully. Returns an error if the server or
    /// the loop ends on its own.
    pub async fn run_until(
        mut self,
        shutdown: impl std::future::Future<Output = ()>,
    ) -> anyhow::Result<()> {
        tokio::select! {
            () = shutdown => {}
            result = &mut self.server => anyhow::bail!("the HTTP server stopped: {result:?}"),
            result = &mut self.poller => anyhow::bail!("the poll loop stopped: {result:?}"),
        }
        self.stop().await
    }

    /// Stops the loop and lets in-flight scrapes finish.
    pub async fn stop(self) -> anyhow::Result<()> {
        let _ = self.stop.send(true);
        self.poller.await.context("the poll loop failed")?;
        self.server.await.context("the HTTP server failed")??;
        tracing::info!("stopped");
        Ok(())
    }
}

/// The outputs, each behind its own setting, in the order they see each batch of occurrences.
/// The state file comes before the approval POSTs, so that an attempt is on disk before it leaves.
async fn outputs(
    config: &Config,
    metrics: &Arc<Metrics>,
    exports: Started,
    store: StateStore,
    client: &ImdsClient,
    reports: Reports,
) -> anyhow::Result<Outputs> {
    let approval = &config.approval;
    let mut outputs = Outputs::new()
        .with(Log::new(
            config.vm_name.clone(),
            approval.mode,
            config.event_series,
        ))
        .with(MetricsOutput::new(Arc::clone(metrics)));
    if let Some(traces) = exports.traces {
        outputs = outputs.with(Spans::new(traces));
    }
    if let Some(logs) = exports.logs {
        outputs = outputs.with(LogEvents::new(logs));
    }
    let state = StateFile::new(store, metrics.registry())?;
    let persisted = state.persisted();
    outputs = outputs.with(state);
    if approval.runs_hooks() {
        outputs = outputs.with(Hooks::new(
            approval.hook.clone(),
            approval.prepare_hook.clone(),
            approval.recover_hook.clone(),
            approval.hook_timeout,
            reports.clone(),
        ));
    }
    if approval.mode == Mode::On {
        outputs = outputs.with(Approval::start(
            client.clone(),
            config.imds_timeout,
            persisted,
            reports,
        ));
    }
    if config.notify.is_enabled() {
        let receivers: Vec<&str> = config
            .notify
            .receivers
            .iter()
            .map(|r| r.name.as_str())
            .collect();
        for receiver in &config.notify.receivers {
            tracing::info!(
                receiver = receiver.name.as_str(),
                format = receiver.format.as_str(),
                endpoint = %receiver.endpoint(),
                transitions = receiver.filter.transitions.iter().map(|t| t.as_str()).collect::<Vec<_>>().join(","),
                template = receiver.template.as_ref().map(|t| t.path.display().to_string()),
                "notifications enabled"
            );
        }
        let notify_metrics = NotifyMetrics::register(metrics.registry(), &receivers)?;
        #[cfg(feature = "kubernetes")]
        let node = config.kubernetes.as_ref().map(|k| k.node_name.as_str());
        #[cfg(not(feature = "kubernetes"))]
        let node = None;
        outputs = outputs.with(
            Notify::start(&config.notify, node, notify_metrics)
                .context("cannot set up a notification receiver")?,
        );
    }
    #[cfg(feature = "kubernetes")]
    if let Some(kubernetes) = config.kubernetes.clone() {
        outputs = outputs.with(Kubernetes::start(kubernetes, metrics).await?);
    }
    Ok(outputs)
}

/// Opens the state file, classifies this start (reboot or not) against it, and records the
/// current boot. Never fails: an unusable file leaves state in memory.
fn open_state(config: &Config) -> (StateStore, boot::Restart) {
    let (mut store, opened) = StateStore::open(config.state_file.as_deref());
    let state_file = config
        .state_file
        .as_ref()
        .map_or_else(|| "(in memory)".to_owned(), |p| p.display().to_string());
    let previous = match &opened {
        Opened::Fresh if config.state_file.is_none() => {
            tracing::info!(
                "state kept in memory (--state.file is empty): approvals are once per EventId until the agent restarts"
            );
            None
        }
        Opened::Fresh => {
            tracing::info!(%state_file, "no state file yet: starting fresh");
            None
        }
        Opened::Loaded => Some(store.state()),
        Opened::Partly {
            newer,
            dropped,
            aside,
        } => {
            tracing::warn!(
                %state_file,
                written_by_format = newer,
                dropped = dropped.join("; "),
                approvals_kept = store.state().approvals.len(),
                set_aside = aside.as_ref().map(|p| p.display().to_string()),
                "state file read in part: every approval it names is kept (counted as sent when unreadable), the rest is dropped"
            );
            newer.is_none().then(|| store.state())
        }
        Opened::Replaced { error, aside } => {
            tracing::warn!(
                %state_file,
                %error,
                set_aside = aside.as_ref().map(|p| p.display().to_string()),
                "state file not usable: starting fresh"
            );
            None
        }
    };
    let boot_id = crate::shell::boot_id::read_boot_id(&config.boot_id_file);
    let restart = boot::classify(previous, boot_id.as_deref());
    if restart == boot::Restart::Unknown {
        tracing::info!(
            vm_name = config.vm_name.as_deref(),
            boot_id_file = %config.boot_id_file.display(),
            "cannot tell whether the machine rebooted: boot id unknown now or in the state file"
        );
    }
    store.state_mut().boot_id = boot_id;
    // Running again: until this run stops cleanly, a reboot is not a clean one. Written with the
    // first batch (the restart's), before anything else can happen.
    store.state_mut().clean_stop = None;
    (store, restart)
}

/// The machine's host name: this VM's identity for lifecycle span ids of events seen before
/// its name is known (instance metadata not read yet). Empty when the system does not say.
fn host_name() -> String {
    ["/proc/sys/kernel/hostname", "/etc/hostname"]
        .iter()
        .find_map(|path| {
            std::fs::read_to_string(path)
                .ok()
                .map(|name| name.trim().to_owned())
                .filter(|name| !name.is_empty())
        })
        .unwrap_or_default()
}
