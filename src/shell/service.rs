//! The agent as a Windows service: `azure-scheduled-events-exporter.exe service [FLAGS]`, the
//! command line `install-service.ps1` registers. The service control manager starts it, and its
//! Stop and Shutdown requests stop it gracefully, as SIGTERM does on Linux (the state file
//! written, spans flushed, the listener closed). A service has no console, so its log lines go to
//! `%ProgramData%\azure-scheduled-events-exporter\agent.log` (the file of the previous start is
//! kept as `agent.log.1` once it passes [`LOG_ROTATE_BYTES`]). From a console the agent runs
//! without `service`, as everywhere else: logs on stdout, until Ctrl-C.
//!
//! The subcommand says it is a service, rather than a guess: the dispatcher that connects to the
//! service control manager fails at once in a console on Windows, but Wine ends the process.

use std::ffi::OsString;
use std::fs;
use std::path::Path;
use std::sync::Mutex;
use std::time::Duration;

use anyhow::Context;
use tokio::runtime::Runtime;
use windows_service::service::{
    ServiceControl, ServiceControlAccept, ServiceExitCode, ServiceState, ServiceStatus, ServiceType,
};
use windows_service::service_control_handler::{self, ServiceControlHandlerResult};
use windows_service::{define_windows_service, service_dispatcher};

use crate::config::{Config, default_data_dir};
use crate::output::telemetry::Telemetry;
use crate::shell::{agent, logging};

/// The name the install script gives the service. The dispatcher of a service that runs in a
/// process of its own ignores it, so a service installed under another name works the same.
pub const SERVICE_NAME: &str = "azure-scheduled-events-exporter";

/// The log file of the previous start is kept once it is this large, and replaced by the next.
pub const LOG_ROTATE_BYTES: u64 = 10 * 1024 * 1024;

/// What the dispatcher answers a process the service control manager did not start.
const ERROR_FAILED_SERVICE_CONTROLLER_CONNECT: i32 = 1063;

/// How long the service control manager is told a stop may take: the agent's shutdown flushes
/// spans within its own export timeout.
const STOP_WAIT_HINT: Duration = Duration::from_secs(30);

/// The agent, handed from `run` to the thread the dispatcher starts for the service.
struct Pending {
    runtime: Runtime,
    config: Config,
    telemetry: Telemetry,
}

static PENDING: Mutex<Option<Pending>> = Mutex::new(None);
static OUTCOME: Mutex<Option<anyhow::Result<()>>> = Mutex::new(None);

define_windows_service!(ffi_service_main, service_main);

/// Runs the agent as a service, under the service control manager. Returns when it stopped.
pub fn run(runtime: Runtime, config: Config, telemetry: Telemetry) -> anyhow::Result<()> {
    put(
        &PENDING,
        Pending {
            runtime,
            config,
            telemetry,
        },
    );
    match service_dispatcher::start(SERVICE_NAME, ffi_service_main) {
        Ok(()) => take(&OUTCOME)
            .unwrap_or_else(|| Err(anyhow::anyhow!("the service stopped before the agent ran"))),
        Err(windows_service::Error::Winapi(error))
            if error.raw_os_error() == Some(ERROR_FAILED_SERVICE_CONTROLLER_CONNECT) =>
        {
            Err(anyhow::anyhow!(
                "`service` is for the service control manager: from a console, run the agent without it"
            ))
        }
        Err(error) => Err(error).context("cannot reach the service control manager"),
    }
}

async fn until(
    config: Config,
    telemetry: Telemetry,
    shutdown: impl std::future::Future<Output = ()>,
) -> anyhow::Result<()> {
    agent::start_with(config, telemetry)
        .await?
        .run_until(shutdown)
        .await
}

/// The service's thread: started by the dispatcher, returns when the service has stopped.
fn service_main(_arguments: Vec<OsString>) {
    put(&OUTCOME, serve());
}

fn serve() -> anyhow::Result<()> {
    let Pending {
        runtime,
        config,
        telemetry,
    } = take(&PENDING).context("the agent was handed to the service")?;
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let status = service_control_handler::register(SERVICE_NAME, move |control| match control {
        ServiceControl::Stop | ServiceControl::Shutdown => {
            stop.send_replace(true);
            ServiceControlHandlerResult::NoError
        }
        ServiceControl::Interrogate => ServiceControlHandlerResult::NoError,
        _ => ServiceControlHandlerResult::NotImplemented,
    })
    .context("cannot register with the service control manager")?;
    let report = |state, controls_accepted, exit_code, wait_hint| {
        // The service control manager keeps its last word if this one is lost: nothing to mend.
        let _ = status.set_service_status(ServiceStatus {
            service_type: ServiceType::OWN_PROCESS,
            current_state: state,
            controls_accepted,
            exit_code,
            checkpoint: 0,
            wait_hint,
            process_id: None,
        });
    };
    log_to_file(&config, &telemetry);
    report(
        ServiceState::Running,
        ServiceControlAccept::STOP | ServiceControlAccept::SHUTDOWN,
        ServiceExitCode::NO_ERROR,
        Duration::ZERO,
    );
    let mut stopped = stopped;
    let outcome = runtime.block_on(until(config, telemetry, async move {
        let _ = stopped.wait_for(|stop| *stop).await;
        tracing::info!("stop requested by the service control manager");
    }));
    report(
        ServiceState::StopPending,
        ServiceControlAccept::empty(),
        ServiceExitCode::NO_ERROR,
        STOP_WAIT_HINT,
    );
    drop(runtime);
    if let Err(error) = &outcome {
        tracing::error!(error = format!("{error:#}"), "exiting");
    }
    // A non-zero exit lets the service's recovery actions (restart on failure) apply.
    let exit_code = match outcome {
        Ok(()) => ServiceExitCode::NO_ERROR,
        Err(_) => ServiceExitCode::ServiceSpecific(1),
    };
    report(
        ServiceState::Stopped,
        ServiceControlAccept::empty(),
        exit_code,
        Duration::ZERO,
    );
    outcome
}

/// Log lines to `agent.log` in the data directory; to nowhere if it cannot be opened (the
/// service still runs, and `/metrics` still tells what it does).
fn log_to_file(config: &Config, telemetry: &Telemetry) {
    let dir = default_data_dir();
    let file = fs::create_dir_all(&dir).and_then(|()| open_log(&dir.join("agent.log")));
    match file {
        Ok(file) => logging::init_with_writer(
            config.log_format,
            &config.log_level,
            telemetry.bridges(),
            Mutex::new(file),
            false,
        ),
        Err(_) => logging::init_with_writer(
            config.log_format,
            &config.log_level,
            telemetry.bridges(),
            std::io::sink,
            false,
        ),
    }
}

/// Opens the log for appending, first setting a large one aside as `agent.log.1`.
fn open_log(path: &Path) -> std::io::Result<fs::File> {
    if fs::metadata(path).is_ok_and(|meta| meta.len() > LOG_ROTATE_BYTES) {
        let _ = fs::rename(path, path.with_extension("log.1"));
    }
    fs::OpenOptions::new().create(true).append(true).open(path)
}

fn put<T>(slot: &Mutex<Option<T>>, value: T) {
    *slot
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(value);
}

fn take<T>(slot: &Mutex<Option<T>>) -> Option<T> {
    slot.lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .take()
}
