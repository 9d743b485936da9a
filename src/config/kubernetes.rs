//! The Kubernetes node output's settings: which Node is this machine, which event types taint,
//! cordon, drain it or take it out of load balancers ([`Actions`]), and how the agent reaches the
//! API server (`--kubernetes.kubeconfig` when given, else the pod's service account, else the
//! kubeconfig file named by `KUBECONFIG`). Resolved once at startup; anything unusable is a
//! [`ConfigError`] (one line, exit 64).
//!
//! The flags are defined once, in every build: a build without the cargo feature `kubernetes`
//! (the VM packages) has no client, hides them from `--help` and refuses any of them that is
//! given, rather than ignore a setting that could do nothing.

use std::path::PathBuf;
use std::time::Duration;

#[cfg(feature = "kubernetes")]
use azure_scheduled_events_core::event::EventType;
use clap::Args;

use super::label_selector::DrainPodSelectors;
use super::values::{ConfigError, invalid};
use super::values::{EventTypes, ImpactEventTypes};

/// Default of `--kubernetes.drain-margin`.
pub const DEFAULT_DRAIN_MARGIN: Duration = Duration::from_secs(15);
/// Default of `--kubernetes.drain-delay`: the first eviction follows the cordon at once.
pub const DEFAULT_DRAIN_DELAY: Duration = Duration::ZERO;
/// Default of `--kubernetes.resync-interval`.
pub const DEFAULT_RESYNC_INTERVAL: Duration = Duration::from_secs(3600);
/// Default of `--kubernetes.imds-unknown-after`: a failed poll or two, or IMDS asking the agent
/// to back off for a few seconds, do not make the condition flap; a minute without a document is
/// an outage that controllers and alerts must see, well before the 5 to 15 minutes of notice
/// most events give.
pub const DEFAULT_IMDS_UNKNOWN_AFTER: Duration = Duration::from_secs(60);
/// The longest `--kubernetes.imds-unknown-after`: longer, and a blind agent would pass for one
/// that sees no event through a Spot eviction's 30 seconds of notice four times over.
pub const MAX_IMDS_UNKNOWN_AFTER: Duration = Duration::from_secs(120);

/// Whether this build lacks the Kubernetes output: the flags below are hidden then.
const WITHOUT_CLIENT: bool = cfg!(not(feature = "kubernetes"));

/// The `--kubernetes.*` flags.
#[derive(Debug, Clone, Default, Args)]
pub struct KubernetesArgs {
    /// This machine's Node name (a DaemonSet sets it from spec.nodeName): turns on the node
    /// condition `AzureScheduledEvent`, one Event per transition of an event naming this VM, and
    /// the taint, cordon and drain asked for below (docs/kubernetes.md) [default: none: off].
    #[arg(
        long = "kubernetes.node-name",
        env = "AZURE_SCHEDULED_EVENTS_KUBERNETES_NODE_NAME",
        hide = WITHOUT_CLIENT
    )]
    pub node_name: Option<String>,
    /// Taint the node `azure-scheduled-events/impact=<EventType>:NoSchedule` while an event of
    /// these types (comma-separated, e.g. Reboot,Redeploy,Preempt,Terminate) names this VM
    /// [default: none].
    #[arg(
        long = "kubernetes.taint-events",
        env = "AZURE_SCHEDULED_EVENTS_KUBERNETES_TAINT_EVENTS",
        value_name = "EVENT_TYPES",
        value_parser = EventTypes::parse,
        hide = WITHOUT_CLIENT
    )]
    pub taint_events: Option<EventTypes>,
    /// Cordon the node while an event of these types (comma-separated) names this VM; a node an
    /// operator cordoned is never uncordoned [default: none].
    #[arg(
        long = "kubernetes.cordon-events",
        env = "AZURE_SCHEDULED_EVENTS_KUBERNETES_CORDON_EVENTS",
        value_name = "EVENT_TYPES",
        value_parser = EventTypes::parse,
        hide = WITHOUT_CLIENT
    )]
    pub cordon_events: Option<EventTypes>,
    /// Drain the node when an event of these types (comma-separated) names this VM: cordon it,
    /// then evict its pods (but DaemonSet and mirror pods) through the Eviction API, honouring
    /// PodDisruptionBudgets and NotBefore [default: none].
    #[arg(
        long = "kubernetes.drain-events",
        env = "AZURE_SCHEDULED_EVENTS_KUBERNETES_DRAIN_EVENTS",
        value_name = "EVENT_TYPES",
        value_parser = ImpactEventTypes::parse,
        hide = WITHOUT_CLIENT
    )]
    pub drain_events: Option<ImpactEventTypes>,
    /// How long before NotBefore a drain stops retrying evictions that a PodDisruptionBudget
    /// refuses, and names the pods that stayed; at most 1h [default: 15s].
    #[arg(
        long = "kubernetes.drain-margin",
        env = "AZURE_SCHEDULED_EVENTS_KUBERNETES_DRAIN_MARGIN",
        value_parser = super::values::duration,
        hide = WITHOUT_CLIENT
    )]
    pub drain_margin: Option<Duration>,
    /// How long a drain waits, once the node is cordoned and labelled
    /// `exclude-from-external-load-balancers`, before its first eviction, so that load balancers
    /// stop sending it new connections first; never past NotBefore minus the drain margin. At
    /// most 1h [default: 0s: at once].
    #[arg(
        long = "kubernetes.drain-delay",
        env = "AZURE_SCHEDULED_EVENTS_KUBERNETES_DRAIN_DELAY",
        value_parser = super::values::duration,
        hide = WITHOUT_CLIENT
    )]
    pub drain_delay: Option<Duration>,
    /// Evict only the pods this label selector selects (as `kubectl get -l` takes it); one for
    /// every drain, or per event type as `[EventType:]selector` entries separated by `;`, e.g.
    /// `Freeze:example.com/evict-on-freeze=true` [default: none: every pod].
    #[arg(
        long = "kubernetes.drain-pod-selector",
        env = "AZURE_SCHEDULED_EVENTS_KUBERNETES_DRAIN_POD_SELECTOR",
        value_name = "SELECTOR",
        value_parser = DrainPodSelectors::parse,
        hide = WITHOUT_CLIENT
    )]
    pub drain_pod_selector: Option<DrainPodSelectors>,
    /// Label the node `node.kubernetes.io/exclude-from-external-load-balancers=true` while an
    /// event of these types (comma-separated) names this VM; lifted after, only if the agent set
    /// it [default: none].
    #[arg(
        long = "kubernetes.exclude-from-load-balancers-events",
        env = "AZURE_SCHEDULED_EVENTS_KUBERNETES_EXCLUDE_FROM_LOAD_BALANCERS_EVENTS",
        value_name = "EVENT_TYPES",
        value_parser = ImpactEventTypes::parse,
        hide = WITHOUT_CLIENT
    )]
    pub exclude_from_load_balancers_events: Option<ImpactEventTypes>,
    /// Taint the node `azure-scheduled-events/advisory=<EventType>:PreferNoSchedule` while an
    /// advisory (a Spot rebalance recommendation) names this VM.
    #[arg(
        id = "kubernetes_advisory_taint",
        long = "kubernetes.advisory-taint",
        env = "AZURE_SCHEDULED_EVENTS_KUBERNETES_ADVISORY_TAINT",
        hide = WITHOUT_CLIENT
    )]
    pub advisory_taint: bool,
    /// Log and count every write to the API server (patches, Events, evictions) without sending
    /// it; reads are still sent.
    #[arg(
        id = "kubernetes_dry_run",
        long = "kubernetes.dry-run",
        env = "AZURE_SCHEDULED_EVENTS_KUBERNETES_DRY_RUN",
        hide = WITHOUT_CLIENT
    )]
    pub dry_run: bool,
    /// How often the Node is read again in full and put back as the events want it; between
    /// reads, a watch on the Node delivers every change (a taint removed by hand comes back at
    /// once). From 1s to 1h [default: 1h].
    #[arg(
        long = "kubernetes.resync-interval",
        env = "AZURE_SCHEDULED_EVENTS_KUBERNETES_RESYNC_INTERVAL",
        value_parser = super::values::duration,
        hide = WITHOUT_CLIENT
    )]
    pub resync_interval: Option<Duration>,
    /// How long without a valid Scheduled Events document before the node condition turns
    /// `Unknown` (reason `ImdsUnreachable`); it turns back with the next document. Taints,
    /// cordons and drains stay as the last document wanted. The time counts from the start too
    /// (reason `NoDocumentYet` while the first request has had no answer). From 1s to 2m
    /// [default: 1m].
    #[arg(
        long = "kubernetes.imds-unknown-after",
        env = "AZURE_SCHEDULED_EVENTS_KUBERNETES_IMDS_UNKNOWN_AFTER",
        value_parser = super::values::duration,
        hide = WITHOUT_CLIENT
    )]
    pub imds_unknown_after: Option<Duration>,
    /// Write the node conditions as AKS's node-problem-detector does (`VMEventScheduled`, and
    /// `PreemptionScheduled` for Spot evictions, with its reasons and message format) instead of
    /// `AzureScheduledEvent`, for consumers written for AKS on other clusters; leave it off on
    /// AKS, where the platform writes them itself (docs/kubernetes.md).
    #[arg(
        id = "kubernetes_aks_condition_names",
        long = "kubernetes.aks-condition-names",
        env = "AZURE_SCHEDULED_EVENTS_KUBERNETES_AKS_CONDITION_NAMES",
        hide = WITHOUT_CLIENT
    )]
    pub aks_condition_names: bool,
    /// Kubeconfig file; when given it wins over the pod's service account [default: the service
    /// account in a pod, else KUBECONFIG].
    #[arg(
        long = "kubernetes.kubeconfig",
        env = "AZURE_SCHEDULED_EVENTS_KUBERNETES_KUBECONFIG",
        hide = WITHOUT_CLIENT
    )]
    pub kubeconfig: Option<PathBuf>,
    /// `KUBECONFIG`, used only outside a pod: the standard variable, read as kubectl reads it,
    /// not a setting of this agent's.
    #[arg(long = "kubernetes.kubeconfig-env", env = "KUBECONFIG", hide = true)]
    pub kubeconfig_env: Option<PathBuf>,
}

impl KubernetesArgs {
    /// The flags given besides `--kubernetes.node-name`, which do nothing without it.
    /// (`KUBECONFIG` is the environment's, not a setting: it is not among them.)
    fn given(&self) -> Vec<&'static str> {
        [
            ("kubernetes.taint-events", self.taint_events.is_some()),
            ("kubernetes.cordon-events", self.cordon_events.is_some()),
            ("kubernetes.drain-events", self.drain_events.is_some()),
            ("kubernetes.drain-margin", self.drain_margin.is_some()),
            ("kubernetes.drain-delay", self.drain_delay.is_some()),
            (
                "kubernetes.drain-pod-selector",
                self.drain_pod_selector.is_some(),
            ),
            (
                "kubernetes.exclude-from-load-balancers-events",
                self.exclude_from_load_balancers_events.is_some(),
            ),
            ("kubernetes.advisory-taint", self.advisory_taint),
            ("kubernetes.dry-run", self.dry_run),
            ("kubernetes.resync-interval", self.resync_interval.is_some()),
            (
                "kubernetes.imds-unknown-after",
                self.imds_unknown_after.is_some(),
            ),
            ("kubernetes.aks-condition-names", self.aks_condition_names),
            ("kubernetes.kubeconfig", self.kubeconfig.is_some()),
        ]
        .into_iter()
        .filter_map(|(flag, given)| given.then_some(flag))
        .collect()
    }

    /// In a build without the client: the first `--kubernetes.*` setting given, as an error.
    #[cfg(not(feature = "kubernetes"))]
    pub(super) fn validate(self) -> Result<Option<KubernetesConfig>, ConfigError> {
        self.durations()?;
        let first = self
            .node_name
            .is_some()
            .then_some("kubernetes.node-name")
            .or_else(|| self.given().first().copied());
        match first {
            Some(flag) => Err(invalid(
                flag,
                "this build has no Kubernetes output (built without the cargo feature `kubernetes`; the container image has it)",
            )),
            None => Ok(None),
        }
    }
}

/// How the agent reaches the API server.
#[cfg(feature = "kubernetes")]
#[derive(Debug, Clone)]
pub enum ApiServer {
    /// In a pod: its service account's token and CA, `KUBERNETES_SERVICE_HOST`.
    InCluster(Box<kube::Config>),
    /// The current context of a kubeconfig file, already read and parsed.
    Kubeconfig {
        path: PathBuf,
        file: Box<kube::config::Kubeconfig>,
    },
}

/// Without the client there is nothing to configure: no value of this type exists, and
/// [`super::Config::kubernetes`] is always `None`.
#[cfg(not(feature = "kubernetes"))]
#[derive(Debug, Clone)]
pub enum KubernetesConfig {}

/// What the output does to the Node beyond the condition, the Events and the deadline labels,
/// each for the event types listed.
#[cfg(feature = "kubernetes")]
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Actions {
    pub taint_events: Vec<EventType>,
    pub cordon_events: Vec<EventType>,
    pub drain_events: Vec<EventType>,
    pub exclude_from_load_balancers_events: Vec<EventType>,
    pub advisory_taint: bool,
}

/// The Kubernetes output's resolved settings; absent unless `--kubernetes.node-name` is set.
#[cfg(feature = "kubernetes")]
#[derive(Debug, Clone)]
pub struct KubernetesConfig {
    pub node_name: String,
    pub actions: Actions,
    pub drain_margin: Duration,
    pub drain_delay: Duration,
    /// Which pods a drain evicts; none given: every pod.
    pub drain_pod_selectors: DrainPodSelectors,
    pub dry_run: bool,
    pub resync_interval: Duration,
    pub imds_unknown_after: Duration,
    pub aks_condition_names: bool,
    pub api_server: ApiServer,
}

/// The durations of the `--kubernetes.*` flags, each checked against its bounds.
#[derive(Debug, Clone, Copy)]
#[cfg_attr(
    not(feature = "kubernetes"),
    expect(dead_code, reason = "without the client, the values are only checked")
)]
struct Durations {
    resync_interval: Duration,
    drain_margin: Duration,
    drain_delay: Duration,
    imds_unknown_after: Duration,
}

impl KubernetesArgs {
    /// Checked whether or not `--kubernetes.node-name` is given, as every `--kubernetes.*`
    /// value is: a fleet that sets them everywhere learns of a bad one on every machine.
    fn durations(&self) -> Result<Durations, ConfigError> {
        let at_least_a_second = |flag: &'static str, value: Duration, max: Duration| {
            if value < Duration::from_secs(1) {
                return Err(invalid(flag, "must be at least 1s"));
            }
            super::values::bounded(flag, value, max)
        };
        let hour = Duration::from_secs(3600);
        let drain_delay = self.drain_delay.unwrap_or(DEFAULT_DRAIN_DELAY);
        if drain_delay > hour {
            return Err(invalid(
                "kubernetes.drain-delay",
                format!("{drain_delay:?} is longer than 1h, its maximum"),
            ));
        }
        Ok(Durations {
            resync_interval: at_least_a_second(
                "kubernetes.resync-interval",
                self.resync_interval.unwrap_or(DEFAULT_RESYNC_INTERVAL),
                hour,
            )?,
            drain_margin: super::values::bounded(
                "kubernetes.drain-margin",
                self.drain_margin.unwrap_or(DEFAULT_DRAIN_MARGIN),
                hour,
            )?,
            drain_delay,
            imds_unknown_after: at_least_a_second(
                "kubernetes.imds-unknown-after",
                self.imds_unknown_after
                    .unwrap_or(DEFAULT_IMDS_UNKNOWN_AFTER),
                MAX_IMDS_UNKNOWN_AFTER,
            )?,
        })
    }
}

#[cfg(feature = "kubernetes")]
impl KubernetesArgs {
    pub(super) fn validate(self) -> Result<Option<KubernetesConfig>, ConfigError> {
        let durations = self.durations()?;
        let Some(node_name) = self.node_name.clone() else {
            // The settings that act on the Node do nothing without it. (The durations, the pod
            // selector and the kubeconfig are harmless alone, and a fleet may set them
            // everywhere.)
            let acting = [
                "kubernetes.taint-events",
                "kubernetes.cordon-events",
                "kubernetes.drain-events",
                "kubernetes.exclude-from-load-balancers-events",
                "kubernetes.advisory-taint",
                "kubernetes.dry-run",
                "kubernetes.aks-condition-names",
            ];
            if let Some(flag) = self.given().into_iter().find(|f| acting.contains(f)) {
                return Err(invalid(flag, "needs --kubernetes.node-name"));
            }
            return Ok(None);
        };
        let node_name = node_name.trim().to_owned();
        if !is_node_name(&node_name) {
            return Err(invalid(
                "kubernetes.node-name",
                format!(
                    "{node_name:?} is not a Kubernetes node name (lower-case letters, digits, '-' and '.', at most 253)"
                ),
            ));
        }
        let api_server = match (self.kubeconfig, kube::Config::incluster()) {
            (Some(path), _) => kubeconfig(path)?,
            (None, Ok(config)) => ApiServer::InCluster(Box::new(config)),
            (None, Err(in_cluster)) => match self.kubeconfig_env {
                Some(path) => kubeconfig(path)?,
                None => {
                    return Err(invalid(
                        "kubernetes.node-name",
                        format!(
                            "not in a pod with a service account ({in_cluster}) and KUBECONFIG is not set"
                        ),
                    ));
                }
            },
        };
        let types = |set: Option<EventTypes>| set.map(EventTypes::into_vec).unwrap_or_default();
        let impacts =
            |set: Option<ImpactEventTypes>| set.map(ImpactEventTypes::into_vec).unwrap_or_default();
        Ok(Some(KubernetesConfig {
            node_name,
            actions: Actions {
                taint_events: types(self.taint_events),
                cordon_events: types(self.cordon_events),
                drain_events: impacts(self.drain_events),
                exclude_from_load_balancers_events: impacts(
                    self.exclude_from_load_balancers_events,
                ),
                advisory_taint: self.advisory_taint,
            },
            drain_margin: durations.drain_margin,
            drain_delay: durations.drain_delay,
            drain_pod_selectors: self.drain_pod_selector.unwrap_or_default(),
            dry_run: self.dry_run,
            resync_interval: durations.resync_interval,
            imds_unknown_after: durations.imds_unknown_after,
            aks_condition_names: self.aks_condition_names,
            api_server,
        }))
    }
}

/// A kubeconfig file, read and parsed.
#[cfg(feature = "kubernetes")]
fn kubeconfig(path: PathBuf) -> Result<ApiServer, ConfigError> {
    // kube reads the file itself (it resolves the relative paths inside), once it is checked.
    crate::config::file_input::check(&path, crate::config::file_input::KUBECONFIG)
        .map_err(|e| invalid("kubernetes.kubeconfig", format!("{}: {e}", path.display())))?;
    let file = kube::config::Kubeconfig::read_from(&path)
        .map_err(|e| invalid("kubernetes.kubeconfig", format!("{}: {e}", path.display())))?;
    Ok(ApiServer::Kubeconfig {
        path,
        file: Box::new(file),
    })
}

/// A DNS subdomain, as Kubernetes requires of node names.
#[cfg(feature = "kubernetes")]
fn is_node_name(name: &str) -> bool {
    super::label_selector::is_dns_subdomain(name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[cfg(feature = "kubernetes")]
    #[test]
    fn node_names_are_dns_subdomains() {
        assert!(is_node_name("aks-pool-12345678-vmss000000"));
        assert!(is_node_name("node-1.example.internal"));
        for bad in ["", "Node", "node_1", "-node", "node..1", &"a".repeat(254)] {
            assert!(!is_node_name(bad), "{bad:?}");
        }
    }

    /// Without the client, each flag of the one definition above is refused by name (a new flag
    /// that [`KubernetesArgs::given`] forgets fails here).
    #[cfg(not(feature = "kubernetes"))]
    #[test]
    fn a_build_without_the_client_refuses_every_kubernetes_flag() -> Result<(), clap::Error> {
        use clap::{Args as _, FromArgMatches as _};
        use std::any::TypeId;

        let command = KubernetesArgs::augment_args(clap::Command::new("x"))
            .mut_args(super::super::values::boolean_style);
        let mut tried = 0;
        for arg in command
            .get_arguments()
            .filter(|a| !a.is_hide_set() || a.get_env().is_some_and(|e| e != "KUBECONFIG"))
        {
            let Some(long) = arg.get_long() else { continue };
            let parser = arg.get_value_parser().type_id();
            let value = if parser == TypeId::of::<bool>() {
                "true"
            } else if parser == TypeId::of::<Duration>() {
                "30s"
            } else if parser == TypeId::of::<EventTypes>()
                || parser == TypeId::of::<ImpactEventTypes>()
            {
                "Reboot"
            } else {
                "node-1"
            };
            let matches = command
                .clone()
                .try_get_matches_from(["x", &format!("--{long}={value}")])?;
            let error = KubernetesArgs::from_arg_matches(&matches)?
                .validate()
                .err()
                .map(|e| e.to_string())
                .unwrap_or_default();
            assert!(
                error.contains(&format!("--{long}"))
                    && error.contains("cargo feature `kubernetes`"),
                "--{long}={value}: {error:?}"
            );
            tried += 1;
        }
        assert_eq!(tried, 14, "every flag but KUBECONFIG's was tried");
        Ok(())
    }
}
