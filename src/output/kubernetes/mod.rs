//! The Kubernetes output: tells the cluster, on this machine's Node, what Azure is about to do to
//! the VM (off unless `--kubernetes.node-name` is set; docs/kubernetes.md).
//!
//! `consume` only works out the wanted state ([`wanted::Wanted`], from the events naming this VM)
//! and the Kubernetes Events to create ([`wanted::Note`]); tasks of its own talk to the API
//! server: [`watch`] keeps the Node as the API server has it, [`api`] writes it and creates the
//! Events, [`drain`] evicts pods when asked to. The wanted state is a single value each task
//! reads when it is ready (a newer one replaces an older one unread), the Events wait in a
//! bounded queue whose overflow is dropped and counted, so an API server that is down, refuses
//! or hangs never delays a poll. The writer brings the Node to the wanted state on every change
//! of either ([`node::plan`]).

mod api;
pub mod drain;
pub mod node;
pub mod wanted;
mod watch;

use std::cell::Cell;
use std::sync::Arc;

use azure_scheduled_events_core::event::{Affects, Event};
use azure_scheduled_events_core::occurrence::{Context, Imds, Occurrence};
use azure_scheduled_events_core::tracker::Tracked;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use crate::config::kubernetes::KubernetesConfig;
use crate::output::metrics::Metrics;

use super::Output;
use api::{Api, KubernetesMetrics, NodeWriter};
use drain::Drainer;
use wanted::{Blind, Names, Note, Wanted};

/// Events waiting to be created at most; a document holds a handful of events, each with a few
/// transitions.
const QUEUE: usize = 64;

/// Dropped Events are logged at most once per this, with how many were dropped: a down API
/// server under a busy document must not flood the log.
const DROP_LOG_INTERVAL: std::time::Duration = std::time::Duration::from_secs(60);

#[derive(Debug)]
pub struct Kubernetes {
    config: KubernetesConfig,
    /// The last document's events; `None` until the first, so a start touches nothing on the
    /// Node before the agent knows what is pending (nor before it knows this VM's name).
    events: Option<Arc<[Tracked]>>,
    wanted: tokio::sync::watch::Sender<Option<Wanted>>,
    /// Set from the start until the first valid document, and while no valid document comes:
    /// the conditions turn `Unknown` after `--kubernetes.imds-unknown-after`.
    blind: tokio::sync::watch::Sender<Option<Blind>>,
    names: Names,
    notes: mpsc::Sender<Note>,
    metrics: Arc<KubernetesMetrics>,
    /// The Node's watch, its writer, and the drain when asked for.
    tasks: Vec<JoinHandle<()>>,
    /// When a drop was last logged, and the drops since.
    drop_logged_at: Cell<Option<tokio::time::Instant>>,
    dropped_since_log: Cell<u64>,
}

impl Kubernetes {
    /// Connects to the API server as `config` says and starts the task that writes the Node.
    pub async fn start(config: KubernetesConfig, metrics: &Metrics) -> anyhow::Result<Self> {
        let drains = !config.actions.drain_events.is_empty();
        let metrics = Arc::new(KubernetesMetrics::new(
            metrics.registry(),
            drains,
            config.dry_run,
        )?);
        let api = Api::connect(&config, Arc::clone(&metrics)).await?;
        let names = if config.aks_condition_names {
            Names::Aks
        } else {
            Names::Own
        };
        let (wanted, wanted_rx) = tokio::sync::watch::channel(None);
        // Blind from the start until the first valid document: a first request that gets no
        // answer (Azure may take minutes) does not leave an earlier agent's condition standing
        // for longer than `--kubernetes.imds-unknown-after`. A restart whose first document
        // comes before then writes nothing.
        let (blind, blind_rx) = tokio::sync::watch::channel(Some(Blind {
            from: tokio::time::Instant::now() + config.imds_unknown_after,
            conditions: names.starting(chrono::Utc::now()),
        }));
        let (seen, seen_rx) = tokio::sync::watch::channel(None);
        let (notes, notes_rx) = mpsc::channel(QUEUE);
        let mut tasks = vec![tokio::spawn(watch::run(
            api.clone(),
            config.resync_interval,
            seen,
        ))];
        if drains {
            let drainer = Drainer::new(
                api.clone(),
                config.drain_margin,
                config.drain_delay,
                config.drain_pod_selectors.clone(),
                notes.clone(),
            );
            tasks.push(tokio::spawn(
                drainer.run(wanted_rx.clone(), seen_rx.clone()),
            ));
        }
        tasks.push(tokio::spawn(
            NodeWriter::new(api).run(wanted_rx, blind_rx, notes_rx, seen_rx),
        ));
        Ok(Self {
            config,
            events: None,
            wanted,
            blind,
            names,
            notes,
            metrics,
            tasks,
            drop_logged_at: Cell::new(None),
            dropped_since_log: Cell::new(0),
        })
    }

    fn note(&self, note: Option<Note>) {
        if let Some(note) = note
            && let Err(error) = self.notes.try_send(note)
        {
            self.metrics.dropped();
            let dropped = self.dropped_since_log.get() + 1;
            self.dropped_since_log.set(dropped);
            let now = tokio::time::Instant::now();
            if self
                .drop_logged_at
                .get()
                .is_none_or(|at| now.duration_since(at) >= DROP_LOG_INTERVAL)
            {
                tracing::warn!(
                    event = error.into_inner().name,
                    dropped,
                    "Kubernetes Events not created: {QUEUE} already waiting for the API server (logged at most once a minute; dropped counts those since the last line)"
                );
                self.drop_logged_at.set(Some(now));
                self.dropped_since_log.set(0);
            }
        }
    }
}

#[async_trait::async_trait]
impl Output for Kubernetes {
    fn consume(&mut self, context: &Context, occurrences: &[Occurrence]) {
        let known_vm = context.vm_name().is_some();
        let node = self.config.node_name.as_str();
        let mut changed = false;
        for occurrence in occurrences {
            match occurrence {
                Occurrence::Events(events) => {
                    self.events = Some(Arc::clone(events));
                    changed = true;
                }
                // The VM's name may become known after the document that names it.
                Occurrence::VmIdentified { .. } => changed = true,
                Occurrence::Transition(transition) => {
                    if context.affects(transition.event()) == Affects::Yes {
                        self.note(Note::of_transition(
                            node,
                            transition,
                            context.incarnation,
                            context.at,
                        ));
                    }
                }
                Occurrence::EndedWhileDown(tracked) => {
                    if context.affects(&tracked.event) == Affects::Yes {
                        self.note(Some(Note::ended_while_down(
                            node,
                            &tracked.event,
                            context.at,
                        )));
                    }
                }
                // The agent is blind from the first failed poll on; the conditions say so once
                // that has lasted (the writer keeps the time). Blind since its start, it has
                // been for as long as it has run: the time counts from the start.
                Occurrence::Imds(Imds::Unreachable { reason, error }) => {
                    let from = self.blind.borrow().as_ref().map_or_else(
                        || tokio::time::Instant::now() + self.config.imds_unknown_after,
                        |blind| blind.from,
                    );
                    self.blind.send_replace(Some(Blind {
                        from,
                        conditions: self.names.blind(reason, error, context.at),
                    }));
                }
                Occurrence::Imds(Imds::Reachable { .. }) => {
                    self.blind.send_replace(None);
                }
                Occurrence::Restarted(_)
                | Occurrence::VmUnidentified { .. }
                | Occurrence::Imds(_)
                | Occurrence::Decision(_)
                | Occurrence::ApprovalSending { .. }
                | Occurrence::Notify(_) => {}
            }
        }
        // Until this VM's name is known no event can be told to name it: wanting nothing then
        // would lift, after a restart, a taint or cordon that a pending event still wants.
        if changed
            && known_vm
            && let Some(events) = &self.events
        {
            let ours: Vec<&Event> = events
                .iter()
                .map(|tracked| &tracked.event)
                .filter(|event| context.affects(event) == Affects::Yes)
                .collect();
            let wanted = Wanted::from_events(&ours, &self.config.actions, self.names);
            self.wanted.send_if_modified(|current| {
                let modified = current.as_ref() != Some(&wanted);
                *current = Some(wanted);
                modified
            });
        }
    }

    async fn stop(&mut self, _context: &Context) {
        // What the Node says stays: a restarted agent takes over from the annotation (and drains
        // again what an event still pending asks for).
        for task in &self.tasks {
            task.abort();
        }
    }
}
