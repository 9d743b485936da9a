//! The simulator's own flags, which the agent's `simulator` subcommand takes (env
//! `AZURE_SCHEDULED_EVENTS_SIMULATOR_*`): where it listens, what it plays, the VM it simulates
//! and an extra api-version.

use std::net::SocketAddr;
use std::path::PathBuf;

use azure_scheduled_events_protocol::api_version::ApiVersion;
use azure_scheduled_events_protocol::http::listen_address;

use crate::scenario::DEMO_VM;

/// Default of `--web.listen-address`: loopback only, as a stand-in for IMDS on this machine.
pub const DEFAULT_LISTEN_ADDRESS: &str = "127.0.0.1:8080";

/// How the simulator is run.
#[derive(Debug, Clone, clap::Args)]
pub struct SimulatorFlags {
    /// Address the simulated IMDS listens on.
    #[arg(long = "web.listen-address", env = "AZURE_SCHEDULED_EVENTS_SIMULATOR_LISTEN_ADDRESS", default_value = DEFAULT_LISTEN_ADDRESS, value_parser = listen_address)]
    pub web_listen_address: SocketAddr,
    /// Scenario file (YAML or JSON) to play; `demo` for the built-in one. Without it the document
    /// is empty until the control API changes it.
    #[arg(long = "scenario", env = "AZURE_SCHEDULED_EVENTS_SIMULATOR_SCENARIO")]
    pub scenario: Option<PathBuf>,
    /// compute.name of the simulated VM (what the agent takes as this VM's name); by default the
    /// VM of the demo scenario.
    #[arg(
        long = "vm.name",
        env = "AZURE_SCHEDULED_EVENTS_SIMULATOR_VM_NAME",
        default_value = DEMO_VM
    )]
    pub vm_name: String,
    /// Also serve this unpublished scheduled-events api-version (YYYY-MM-DD, later than
    /// 2020-07-01), as Azure serves Spot Plus rebalance recommendations; only it shows
    /// SpotRebalanceRecommendation events. The documented versions are always served.
    #[arg(
        long = "api-version",
        env = "AZURE_SCHEDULED_EVENTS_SIMULATOR_API_VERSION",
        value_parser = ApiVersion::newer
    )]
    pub api_version: Option<ApiVersion>,
}
