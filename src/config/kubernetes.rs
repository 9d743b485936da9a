//! The Kubernetes node output's settings: which Node is this machine, which event types taint,
//! cordon, drain it or take it out of load balancers ([`Actions`]), and how the agent reaches the API server (`--kubernetes.kubeconfig` when given, else
//! the pod's service account, else the kubeconfig file named by `KUBECONFIG`). Resolved once at startup; anything unusable is a
//! [`ConfigError`] (one line, exit 64).

use std::path::PathBuf;
use std::time::Duration;

use clap::Args;

use super::{ConfigError, invalid};
use crate::azure::event::EventType;

/// The `--kubernetes.*` flags.
#[derive(Debug, Clone, Args)]
pub struct KubernetesArgs {
    /// This machine's Node name (a DaemonSet sets it from spec.nodeName): turns on the node
    /// condition, Events, and the taint and cordon asked for below. Off when not set.
    #[arg(
        long = "kubernetes.node-name",
        env = "AZURE_SCHEDULED_EVENTS_KUBERNETES_NODE_NAME"
    )]
    pub node_name: Option<String>,
    /// Taint the node (azure-scheduled-events/impact=<EventType>:NoSchedule) while an event of
    /// these types (comma-separated, e.g. Reboot,Redeploy,Preempt,Terminate) names this VM [default: none].
    #[arg(
        long = "kubernetes.taint-events",
        env = "AZURE_SCHEDULED_EVENTS_KUBERNETES_TAINT_EVENTS"
    )]
    pub taint_events: Option<String>,
    /// Cordon the node while an event of these types (comma-separated) names this VM [default: none].
    #[arg(
        long = "kubernetes.cordon-events",
        env = "AZURE_SCHEDULED_EVENTS_KUBERNETES_CORDON_EVENTS"
    )]
    pub cordon_events: Option<String>,
    /// Drain the node (cordon, then evict its pods through the Eviction API, honouring
    /// PodDisruptionBudgets and NotBefore) when an event of these types (comma-separated) names
    /// this VM [default: none].
    #[arg(
        long = "kubernetes.drain-events",
        env = "AZURE_SCHEDULED_EVENTS_KUBERNETES_DRAIN_EVENTS"
    )]
    pub drain_events: Option<String>,
    /// How long before NotBefore a drain stops retrying evictions that a PodDisruptionBudget
    /// refuses, and says which pods stayed.
    #[arg(long = "kubernetes.drain-margin", env = "AZURE_SCHEDULED_EVENTS_KUBERNETES_DRAIN_MARGIN", default_value = "15s", value_parser = super::duration)]
    pub drain_margin: Duration,
    /// Label the node node.kubernetes.io/exclude-from-external-load-balancers=true while an
    /// event of these types (comma-separated) names this VM [default: none].
    #[arg(
        long = "kubernetes.exclude-from-load-balancers-events",
        env = "AZURE_SCHEDULED_EVENTS_KUBERNETES_EXCLUDE_FROM_LOAD_BALANCERS_EVENTS"
    )]
    pub exclude_from_load_balancers_events: Option<String>,
    /// Taint the node azure-scheduled-events/advisory=<EventType>:PreferNoSchedule while an
    /// advisory (a Spot rebalance recommendation) names this VM.
    #[arg(
        id = "kubernetes_advisory_taint",
        long = "kubernetes.advisory-taint",
        env = "AZURE_SCHEDULED_EVENTS_KUBERNETES_ADVISORY_TAINT"
    )]
    pub advisory_taint: bool,
    /// Log and count every write to the API server (patches, Events, evictions) without sending
    /// it; reads are still sent.
    #[arg(
        id = "kubernetes_dry_run",
        long = "kubernetes.dry-run",
        env = "AZURE_SCHEDULED_EVENTS_KUBERNETES_DRY_RUN"
    )]
    pub dry_run: bool,
    /// How often the Node is read again in full and put back as the events want it; between
    /// reads, a watch on the Node delivers every change (a taint removed by hand comes back at once).
    #[arg(long = "kubernetes.resync-interval", env = "AZURE_SCHEDULED_EVENTS_KUBERNETES_RESYNC_INTERVAL", default_value = "1h", value_parser = super::duration)]
    pub resync_interval: Duration,
    /// Kubeconfig file; when given it wins over the pod's service account [default: the service
    /// account in a pod, else KUBECONFIG].
    #[arg(
        long = "kubernetes.kubeconfig",
        env = "AZURE_SCHEDULED_EVENTS_KUBERNETES_KUBECONFIG"
    )]
    pub kubeconfig: Option<PathBuf>,
    /// `KUBECONFIG`, used only outside a pod.
    #[arg(long = "kubernetes.kubeconfig-env", env = "KUBECONFIG", hide = true)]
    pub kubeconfig_env: Option<PathBuf>,
}

/// How the agent reaches the API server.
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

/// What the output does to the Node beyond the condition, the Events and the deadline labels,
/// each for the event types listed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Actions {
    pub taint_events: Vec<EventType>,
    pub cordon_events: Vec<EventType>,
    pub drain_events: Vec<EventType>,
    pub exclude_from_load_balancers_events: Vec<EventType>,
    pub advisory_taint: bool,
}

/// The Kubernetes output's resolved settings; absent unless `--kubernetes.node-name` is set.
#[derive(Debug, Clone)]
pub struct KubernetesConfig {
    pub node_name: String,
    pub actions: Actions,
    pub drain_margin: Duration,
    pub dry_run: bool,
    pub resync_interval: Duration,
    pub api_server: ApiServer,
}

impl KubernetesArgs {
    pub(super) fn validate(self) -> Result<Option<KubernetesConfig>, ConfigError> {
        let Some(node_name) = self.node_name else {
            for (flag, given) in [
                ("kubernetes.taint-events", self.taint_events.is_some()),
                ("kubernetes.cordon-events", self.cordon_events.is_some()),
                ("kubernetes.drain-events", self.drain_events.is_some()),
                (
                    "kubernetes.exclude-from-load-balancers-events",
                    self.exclude_from_load_balancers_events.is_some(),
                ),
                ("kubernetes.advisory-taint", self.advisory_taint),
                ("kubernetes.dry-run", self.dry_run),
            ] {
                if given {
                    return Err(invalid(flag, "needs --kubernetes.node-name"));
                }
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
        if self.resync_interval < Duration::from_secs(1) {
            return Err(invalid("kubernetes.resync-interval", "must be at least 1s"));
        }
        super::bounded(
            "kubernetes.resync-interval",
            self.resync_interval,
            Duration::from_secs(3600),
        )?;
        super::bounded(
            "kubernetes.drain-margin",
            self.drain_margin,
            Duration::from_secs(3600),
        )?;
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
        Ok(Some(KubernetesConfig {
            node_name,
            actions: Actions {
                taint_events: event_types("kubernetes.taint-events", self.taint_events)?,
                cordon_events: event_types("kubernetes.cordon-events", self.cordon_events)?,
                drain_events: impact_types("kubernetes.drain-events", self.drain_events)?,
                exclude_from_load_balancers_events: impact_types(
                    "kubernetes.exclude-from-load-balancers-events",
                    self.exclude_from_load_balancers_events,
                )?,
                advisory_taint: self.advisory_taint,
            },
            drain_margin: self.drain_margin,
            dry_run: self.dry_run,
            resync_interval: self.resync_interval,
            api_server,
        }))
    }
}

/// A kubeconfig file, read and parsed.
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

/// A comma-separated list of known event types.
fn event_types(flag: &'static str, text: Option<String>) -> Result<Vec<EventType>, ConfigError> {
    let mut types = Vec::new();
    for name in text.iter().flat_map(|t| t.split(',')).map(str::trim) {
        if name.is_empty() {
            continue;
        }
        let known = EventType::parse_known(name).map_err(|e| invalid(flag, e))?;
        if !types.contains(&known) {
            types.push(known);
        }
    }
    Ok(types)
}

/// A comma-separated list of known event types that announce an impact: an advisory never drains
/// nor takes a node out of load balancers.
fn impact_types(flag: &'static str, text: Option<String>) -> Result<Vec<EventType>, ConfigError> {
    let types = event_types(flag, text)?;
    match types.iter().find(|t| t.is_advisory()) {
        Some(advisory) => Err(invalid(
            flag,
            format!(
                "{advisory} is an advisory, which announces no impact (--kubernetes.advisory-taint acts on it)"
            ),
        )),
        None => Ok(types),
    }
}

/// A DNS subdomain, as Kubernetes requires of node names.
fn is_node_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 253
        && name.split('.').all(|label| {
            !label.is_empty()
                && !label.starts_with('-')
                && !label.ends_with('-')
                && label
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn node_names_are_dns_subdomains() {
        assert!(is_node_name("aks-pool-12345678-vmss000000"));
        assert!(is_node_name("node-1.example.internal"));
        for bad in ["", "Node", "node_1", "-node", "node..1", &"a".repeat(254)] {
            assert!(!is_node_name(bad), "{bad:?}");
        }
    }

    #[test]
    fn event_type_lists_are_known_types_once() -> Result<(), ConfigError> {
        assert_eq!(
            event_types("f", Some("reboot, Redeploy,,Reboot".into()))?,
            [EventType::Reboot, EventType::Redeploy]
        );
        assert_eq!(event_types("f", None)?, []);
        assert!(event_types("f", Some("Reboot,Hibernate".into())).is_err());
        assert!(impact_types("f", Some("Preempt,SpotRebalanceRecommendation".into())).is_err());
        assert_eq!(
            impact_types("f", Some("Preempt".into()))?,
            [EventType::Preempt]
        );
        Ok(())
    }
}
