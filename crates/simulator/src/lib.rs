//! A faithful local IMDS: scheduled events, instance metadata, a control API and fault injection.
//!
//! Functional core, imperative shell. [`state::Simulator`] is the pure core (events, lifecycle,
//! incarnation, approvals; `now` is always passed in), played from a [`Scenario`] by
//! [`timeline`], with [`azure_scheduled_events_protocol::api_version`] deciding what each version shows and [`event_id`] minting
//! GUIDs. [`fault`] queues injected faults; [`journal`] records the
//! scheduled-events requests received. The shell is [`SimulatorHandle`] (the shared state
//! behind a mutex, reading the clock), `http` (the IMDS endpoints over hyper) and `control` (the
//! `/control/` API). `docs/simulator.md` is the user's guide.

mod control;
pub mod event_id;
pub mod fault;
pub mod flags;
mod http;
pub mod instance;
pub mod journal;
mod reply;
mod request;
pub mod scenario;
pub mod state;
pub mod timeline;

use std::collections::hash_map::RandomState;
use std::hash::BuildHasher;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use bytes::Bytes;
use chrono::Utc;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use azure_scheduled_events_protocol::wire::{Compute, ScheduledEventsDocument};

pub use azure_scheduled_events_protocol::api_version::ApiVersion;
pub use fault::{Fault, FaultAction, FaultCount, FaultTarget};
pub use flags::SimulatorFlags;
pub use http::serve;
pub use instance::{example_compute, vm_id_for};
pub use journal::SeenRequest;
pub use scenario::{DEMO_OTHER_VM, DEMO_VM, InitialStatus, Scenario, ScenarioError, ScenarioEvent};
pub use state::{AddEventError, Approval, Simulator};

/// The simulator shared between the HTTP server and its owner (the demo, a test, `main`).
/// Cloning is cheap; every clone sees the same state.
#[derive(Debug, Clone)]
pub struct SimulatorHandle {
    shared: Arc<Mutex<Shared>>,
}

/// Everything behind the handle's mutex.
#[derive(Debug)]
pub(crate) struct Shared {
    pub(crate) sim: Simulator,
    pub(crate) faults: fault::FaultQueue,
    pub(crate) requests: u64,
    pub(crate) journal: journal::Journal,
    pub(crate) instance: Compute,
    /// The unpublished api-version served besides the documented ones, if any.
    pub(crate) newer_api_version: Option<ApiVersion>,
}

/// The mutex was poisoned: a thread panicked while holding it.
#[derive(Debug, Clone, Copy, thiserror::Error)]
#[error("the simulator state is unavailable: a thread panicked while holding it")]
pub(crate) struct Poisoned;

impl SimulatorHandle {
    /// A simulator for the VM described by `instance`, serving an empty document at
    /// incarnation 1. Generated EventIds differ from run to run.
    pub fn new(instance: Compute) -> Self {
        Self::with_seed(instance, RandomState::new().hash_one(0u8))
    }

    /// Like [`SimulatorHandle::new`], with generated EventIds fixed by `seed`.
    pub fn with_seed(instance: Compute, seed: u64) -> Self {
        SimulatorHandle {
            shared: Arc::new(Mutex::new(Shared {
                sim: Simulator::new(seed),
                faults: fault::FaultQueue::default(),
                requests: 0,
                journal: journal::Journal::default(),
                instance,
                newer_api_version: None,
            })),
        }
    }

    /// Also serves `version`, an unpublished one later than every documented version (see
    /// [`ApiVersion::newer`]), as Azure serves Spot Plus rebalance recommendations.
    pub fn accept_api_version(&self, version: ApiVersion) {
        self.recovered().newer_api_version = Some(version);
    }

    /// Replaces the current events with `scenario`, whose timeline starts now.
    pub fn load_scenario(&self, scenario: Scenario) {
        self.recovered().sim.load_scenario(scenario, Utc::now());
    }

    /// Serves `body` byte for byte for every scheduled-events GET, until a scenario is loaded,
    /// an event is added or removed, or [`SimulatorHandle::clear_document`] is called.
    pub fn set_document(&self, body: Bytes) {
        self.recovered().sim.set_document(body);
    }

    /// Goes back to serving the simulated document after [`SimulatorHandle::set_document`].
    pub fn clear_document(&self) {
        self.recovered().sim.clear_document();
    }

    /// Adds one event, appearing `event.at` from now; returns its EventId.
    pub fn add_event(&self, event: ScenarioEvent) -> Result<String, AddEventError> {
        self.recovered().sim.add_event(event, Utc::now())
    }

    /// Removes an event now. `false` if it is not in the document.
    pub fn remove_event(&self, event_id: &str) -> bool {
        self.recovered().sim.remove_event(event_id, Utc::now())
    }

    /// Queues a fault behind those already injected.
    pub fn inject_fault(&self, fault: Fault) {
        self.recovered().faults.push(fault);
    }

    pub fn clear_faults(&self) {
        self.recovered().faults.clear();
    }

    /// Faults still waiting, with their remaining counts.
    pub fn faults(&self) -> Vec<Fault> {
        self.recovered().faults.pending()
    }

    /// Every EventId POSTed for approval, in order, with the time and whether it was known.
    pub fn approvals(&self) -> Vec<Approval> {
        self.recovered().sim.approvals().to_vec()
    }

    /// Scheduled-events requests received so far, whatever the answer (faults and dropped
    /// connections included).
    pub fn requests(&self) -> u64 {
        self.recovered().requests
    }

    /// The newest scheduled-events requests (up to [`journal::KEPT`]), oldest first: method,
    /// arrival time, `Metadata` header, the fault that answered, and an approval's body.
    pub fn request_log(&self) -> Vec<SeenRequest> {
        self.recovered().journal.records()
    }

    /// The simulated document as of now, as served for the newest api-version it accepts (a
    /// verbatim document set with [`SimulatorHandle::set_document`] is not consulted).
    pub fn document(&self) -> ScheduledEventsDocument {
        let mut shared = self.recovered();
        shared.sim.advance(Utc::now());
        let version = shared.newer_api_version.unwrap_or(ApiVersion::LATEST);
        shared.sim.document(version)
    }

    /// The shared state for the HTTP layer, which answers 500 when it is poisoned.
    pub(crate) fn lock(&self) -> Result<MutexGuard<'_, Shared>, Poisoned> {
        self.shared.lock().map_err(|_| Poisoned)
    }

    /// The shared state for Rust callers, whose methods cannot fail. Recovering is sound here:
    /// the core only changes plain data and does not panic halfway through a change.
    fn recovered(&self) -> MutexGuard<'_, Shared> {
        self.shared.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// A simulator serving on `127.0.0.1` with a port of its own, for tests and the demo. Dropping
/// it stops the server.
#[derive(Debug)]
pub struct RunningSimulator {
    addr: SocketAddr,
    handle: SimulatorHandle,
    stop: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<std::io::Result<()>>>,
}

impl RunningSimulator {
    /// Binds `127.0.0.1:0` and serves `handle` in a background task.
    pub async fn start(handle: SimulatorHandle) -> std::io::Result<Self> {
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", 0)).await?;
        let addr = listener.local_addr()?;
        let (stop, stopped) = oneshot::channel::<()>();
        let shutdown = async move {
            // A dropped sender means stop as well.
            let _ = stopped.await;
        };
        let task = tokio::spawn(serve(listener, handle.clone(), shutdown));
        Ok(RunningSimulator {
            addr,
            handle,
            stop: Some(stop),
            task: Some(task),
        })
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://127.0.0.1:<port>`, to use as the IMDS base URL.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    pub fn handle(&self) -> &SimulatorHandle {
        &self.handle
    }

    /// Stops the server and waits for open connections to finish.
    pub async fn stop(mut self) -> std::io::Result<()> {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        match self.task.take() {
            Some(task) => task.await.map_err(std::io::Error::other)?,
            None => Ok(()),
        }
    }
}

impl Drop for RunningSimulator {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}
