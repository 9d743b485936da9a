//! The integration suite: one test binary, so the helpers compile once and every test shares one
//! pool of test threads. `cargo test --test suite MODULE::` runs one part, e.g.
//! `cargo test --test suite approval::`.
//!
//! What each module covers:
//!
//! | module | covers |
//! |---|---|
//! | `alertmanager` | the `alertmanager` receiver against a real Alertmanager: one grouped notification for the VMs of one event, a restart mid-event, a down Alertmanager never holds up polling; one PagerDuty incident per event |
//! | `agent` | the agent against the simulator over loopback: the lifecycle on /metrics, every fault kind, health, real-world documents |
//! | `approval` | approval: off by default, the default policy, once per EventId across restarts, shared events, hooks, failed POSTs retried or not |
//! | `binary` | the built binary as users run it: exit codes, environment, signals, the log, promtool |
//! | `configuration` | every setting refused before the agent runs, naming what was meant: usage errors, unknown variables, `check-config`, the chart's values schema through `helm template` and its test hook |
//! | `dashboards` | the Grafana dashboards against Grafana's schema, import and provisioning, and the exported metrics |
//! | `deploy` | the Dockerfile (hadolint), the systemd unit (systemd-analyze), the Kubernetes DaemonSet |
//! | `exposition` | the exposition as a contract: the golden files and docs/metrics.md |
//! | `footprint` | the series the built binary exports at idle, per configuration, against docs/metrics.md and the budget |
//! | `hardening` | what an outsider or careless operator controls: file inputs that are devices, FIFOs or too large, absurd flag values, credentials in --imds.url, signals, unknown event types, a hook's huge output |
//! | `kubernetes` | the Kubernetes output against a stand-in API server (feature `kubernetes`) |
//! | `mixin` | the monitoring mixin: alerts/ and dashboards/ are its rendering, its config, the Alertmanager example |
//! | `notify` | notifications as receivers get them: schemas, retries, refusals, hangs, restarts, an HTTPS proxy |
//! | `packaging` | what `scripts/dist.sh` leaves in target/dist (tarball, .deb) and the Helm chart |
//! | `release` | the release workflows (actionlint, zizmor), what a release publishes, one version and one home for the binary, the chart and the image |
//! | `prometheus` | the alert rules and dashboards against promtool and a real Prometheus scraping real agents |
//! | `signals` | what Azure sends beyond 2020-07-01: Spot rebalance advisories (never pending, never approved), a newer api-version, a blocked connect, the cause of an event, predicted hardware failure |
//! | `span_ids` | one lifecycle span id per event in every log line, notification and span, also when instance metadata fails at first, and across a restart |
//! | `state` | the state file: never fatal, never half-written, and what a restart makes of it |
//! | `systemd` | systemd's notify protocol over a real unix datagram socket |
//! | `telemetry` | bad `OTEL_*` values never stop the metrics; OTLP over TLS with a client certificate |
//! | `traces` | traces as a collector receives them, over gRPC and HTTP/protobuf |
//! | `web` | the listener: gzip, TLS, basic auth, certificate rotation, the scrape limit, idle connections |
//! | `windows` | the Windows zip's `.exe` under Wine against the simulator: metrics, an event's life, hooks and their Job object, the state file across a restart, a clean stop |
//!
//! Shared helpers, used by the modules above:
//!
//! | module | what |
//! |---|---|
//! | `common` | a simulator and an in-process agent wired together, readers of the exposition; `common::process` runs the built binary, `common::pki` makes a private CA |
//! | `otlp` | a real OTLP receiver (gRPC and HTTP), also used by the benchmarks |
//! | `ops` | what on-call imports: dashboards' PromQL, alert rules, the binary as a separate process |
//! | `apiserver` | a stand-in Kubernetes API server |

#[cfg(feature = "kubernetes")]
mod apiserver;
mod common;
mod ops;
#[path = "common/otlp.rs"]
mod otlp;

mod agent;
mod alertmanager;
mod approval;
mod binary;
mod configuration;
mod dashboards;
mod deploy;
mod exposition;
mod footprint;
mod hardening;
mod kubernetes;
mod mixin;
mod notify;
mod packaging;
mod prometheus;
mod release;
mod signals;
mod span_ids;
mod state;
mod systemd;
mod telemetry;
mod traces;
mod web;
mod windows;
