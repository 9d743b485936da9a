//! Traces as a collector receives them: the built binary, configured by the standard `OTEL_*`
//! variables or its flags, exporting to a real OTLP receiver (gRPC and HTTP/protobuf) while
//! polling the simulator.

use crate::common;
use crate::otlp;

use std::collections::{BTreeMap, BTreeSet};

use azure_scheduled_events_core::trace_id::{lifecycle_span_id, trace_id};
use azure_scheduled_events_simulator::example_compute;
use common::process::{AgentProcess, command, scrape};
use common::{Exposition, Imds, THIS_VM, TestResult, document};
use otlp::{ReceivedSpan, Receiver};

/// Upper case, as real IMDS sends it.
const EVENT: &str = "5DD55B64-45AD-49D3-BBC9-F57D4EA97BD7";
const EVENT_TRACE: &str = "5dd55b6445ad49d3bbc9f57d4ea97bd7";

/// The agent as a child process with a clean environment plus `env`.
struct Agent(AgentProcess);

impl Agent {
    fn spawn(args: &[&str], env: &[(&str, &str)]) -> Result<Self, Box<dyn std::error::Error>> {
        let mut command = command(args);
        command.envs(env.iter().copied());
        Ok(Self(AgentProcess::spawn(command)?))
    }

    /// The agent polling `imds` every 50 ms as `vm_name`.
    fn polling(
        imds: &Imds,
        vm_name: &str,
        env: &[(&str, &str)],
        extra: &[&str],
    ) -> Result<Self, Box<dyn std::error::Error>> {
        let url = format!("--imds.url={}", imds.url());
        let vm = format!("--vm.name={vm_name}");
        let mut args = vec![
            url.as_str(),
            vm.as_str(),
            "--web.listen-address=127.0.0.1:0",
            "--poll.interval=50ms",
            // No state file: each agent of these tests starts afresh.
            "--state.file=",
        ];
        args.extend_from_slice(extra);
        Self::spawn(&args, env)
    }

    fn next_line_where(
        &self,
        matches: impl Fn(&serde_json::Value) -> bool,
    ) -> Result<serde_json::Value, String> {
        self.0.next_line_where(matches)
    }

    /// `GET /metrics`, off the async runtime.
    async fn metrics(&self) -> Result<Exposition, Box<dyn std::error::Error>> {
        let address = self.0.address().to_owned();
        let body = tokio::task::spawn_blocking(move || scrape(&address)).await??;
        Ok(Exposition(body))
    }

    /// Scrapes until `condition` holds.
    async fn wait_for_metrics(
        &self,
        what: &str,
        condition: impl Fn(&Exposition) -> bool,
    ) -> Result<Exposition, String> {
        let text = self
            .0
            .wait_for_metrics(what, |text| condition(&Exposition(text.to_owned())))
            .await?;
        Ok(Exposition(text))
    }

    /// SIGTERM, then waits for the exit.
    async fn terminate(mut self) -> Result<std::process::ExitStatus, Box<dyn std::error::Error>> {
        Ok(tokio::task::spawn_blocking(move || self.0.terminate()).await??)
    }
}

fn polls(exposition: &Exposition) -> f64 {
    exposition.get(r#"azure_scheduled_events_imds_requests_total{operation="events"}"#)
}

fn dropped(exposition: &Exposition, reason: &str) -> f64 {
    exposition.get(&format!(
        r#"azure_scheduled_events_otlp_spans_dropped_total{{reason="{reason}"}}"#
    ))
}

fn event(
    id: &str,
    event_type: &str,
    status: &str,
    resources: &[&str],
    not_before: &str,
) -> serde_json::Value {
    serde_json::json!({
        "EventId": id, "EventStatus": status, "EventType": event_type, "ResourceType": "VirtualMachine",
        "Resources": resources, "NotBefore": not_before, "Description": "", "EventSource": "Platform",
        "DurationInSeconds": -1
    })
}

/// NotBefore ten minutes from now, RFC 1123.
fn in_ten_minutes() -> String {
    (chrono::Utc::now() + chrono::Duration::minutes(10))
        .format("%a, %d %b %Y %H:%M:%S GMT")
        .to_string()
}

/// The simulator serving one `event_type` of this VM, Scheduled ten minutes ahead.
async fn imds_with_one_event(event_type: &str) -> Result<Imds, Box<dyn std::error::Error>> {
    let imds = Imds::start().await?;
    imds.sim.set_document(document(
        1,
        &[event(
            EVENT,
            event_type,
            "Scheduled",
            &[THIS_VM],
            &in_ten_minutes(),
        )],
    ));
    Ok(imds)
}

fn named<'a>(spans: &'a [ReceivedSpan], name: &str) -> Vec<&'a ReceivedSpan> {
    spans.iter().filter(|s| s.name == name).collect()
}

fn has(name: &'static str) -> impl Fn(&[ReceivedSpan]) -> bool {
    move |spans| spans.iter().any(|s| s.name == name)
}

fn span_id_hex(event_id: &str, vm_name: &str) -> String {
    format!("{:016x}", lifecycle_span_id(event_id, vm_name))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_grpc_each_transition_arrives_in_the_event_trace_from_this_vm() -> TestResult {
    let receiver = Receiver::start().await?;
    let imds = imds_with_one_event("Reboot").await?;
    let endpoint = receiver.grpc_url();
    let agent = Agent::polling(
        &imds,
        THIS_VM,
        &[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", &endpoint),
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"),
            (
                "OTEL_RESOURCE_ATTRIBUTES",
                "deployment.environment.name=test,cloud.region=from-attributes,service.name=from-attributes",
            ),
            ("OTEL_SERVICE_NAME", "se-test"),
            (
                "OTEL_EXPORTER_OTLP_HEADERS",
                "authorization=Bearer%20t0ken,x-scope-orgid=ops",
            ),
        ],
        &[],
    )?;
    let line = agent.next_line_where(|l| l["message"] == "event scheduled")?;

    let spans = receiver
        .wait_for("the scheduled transition", has("Reboot scheduled"))
        .await?;
    let scheduled = named(&spans, "Reboot scheduled")[0];
    assert_eq!(scheduled.via, "grpc");
    assert_eq!(
        scheduled.trace_id, EVENT_TRACE,
        "the trace id is the EventId"
    );
    assert_eq!(
        line["trace_id"], EVENT_TRACE,
        "the log line names the same trace"
    );
    assert_eq!(scheduled.parent_span_id, span_id_hex(EVENT, THIS_VM));
    assert_eq!(scheduled.event("id"), Some(EVENT));
    assert_eq!(scheduled.event("transition"), Some("scheduled"));
    assert_eq!(scheduled.event("status"), Some("Scheduled"));
    assert_eq!(scheduled.event("affects_this_vm"), Some("true"));
    assert_eq!(scheduled.event("document_incarnation"), Some("1"));
    assert_eq!(scheduled.event("vm_name"), Some(THIS_VM));
    assert_eq!(
        scheduled.headers.get("authorization").map(String::as_str),
        Some("Bearer t0ken"),
        "header values are percent-decoded"
    );
    assert_eq!(
        scheduled.headers.get("x-scope-orgid").map(String::as_str),
        Some("ops")
    );

    let compute = example_compute(THIS_VM);
    let resource = &scheduled.resource;
    let expected: BTreeMap<&str, &str> = [
        ("service.name", "se-test"),
        ("service.version", env!("CARGO_PKG_VERSION")),
        ("service.instance.id", THIS_VM),
        ("cloud.provider", "azure"),
        ("cloud.platform", "azure.vm"),
        ("cloud.region", "from-attributes"),
        ("cloud.availability_zone", compute.zone.as_str()),
        ("cloud.account.id", compute.subscription_id.as_str()),
        ("host.id", compute.vm_id.as_str()),
        ("host.name", THIS_VM),
        ("host.type", compute.vm_size.as_str()),
        ("azure.vm.scaleset.name", compute.vm_scale_set_name.as_str()),
        (
            "azure.resource_group.name",
            compute.resource_group_name.as_str(),
        ),
        (
            "azure.resourcegroup.name",
            compute.resource_group_name.as_str(),
        ),
        ("azure.vm.platform_fault_domain", "0"),
        ("azure.vm.platform_update_domain", "0"),
        ("deployment.environment.name", "test"),
    ]
    .into_iter()
    .collect();
    for (key, value) in expected {
        assert_eq!(
            resource.get(key).map(String::as_str),
            Some(value),
            "resource {key}"
        );
    }

    imds.sim.set_document(document(
        2,
        &[event(EVENT, "Reboot", "Started", &[THIS_VM], "")],
    ));
    let spans = receiver
        .wait_for("the started transition", has("Reboot started"))
        .await?;
    let started = named(&spans, "Reboot started")[0];
    assert_eq!(started.trace_id, EVENT_TRACE);
    assert_eq!(started.parent_span_id, scheduled.parent_span_id);
    assert_eq!(started.event("document_incarnation"), Some("2"));
    assert!(
        named(&spans, "Reboot").is_empty(),
        "the lifecycle span is exported only when the event ends"
    );

    imds.sim.set_document(document(3, &[]));
    let spans = receiver
        .wait_for("the lifecycle span", has("Reboot"))
        .await?;
    let lifecycle = named(&spans, "Reboot")[0];
    assert_eq!(lifecycle.trace_id, EVENT_TRACE);
    assert_eq!(lifecycle.span_id, span_id_hex(EVENT, THIS_VM));
    assert_eq!(
        line["span_id"],
        lifecycle.span_id.as_str(),
        "the log line names the span"
    );
    assert_eq!(lifecycle.parent_span_id, "");
    assert_eq!(lifecycle.event("outcome"), Some("completed"));
    assert_eq!(lifecycle.event("seen_started"), Some("true"));
    assert_eq!(lifecycle.event("document_incarnation"), Some("3"));
    assert!(lifecycle.start_unix_nano <= scheduled.start_unix_nano);
    assert!(lifecycle.end_unix_nano >= started.end_unix_nano);
    let completed = named(&spans, "Reboot completed");
    assert_eq!(completed.len(), 1);
    assert_eq!(completed[0].parent_span_id, lifecycle.span_id);

    assert!(agent.terminate().await?.success());
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_semconv_switch_sends_the_resource_named_as_before_1_43() -> TestResult {
    let receiver = Receiver::start().await?;
    let imds = imds_with_one_event("Freeze").await?;
    let endpoint = receiver.http_url();
    let agent = Agent::polling(
        &imds,
        THIS_VM,
        &[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", &endpoint),
            ("AZURE_SCHEDULED_EVENTS_OTLP_SEMCONV_COMPAT", "pre-1.43"),
        ],
        &[],
    )?;
    let spans = receiver
        .wait_for("the scheduled transition", has("Freeze scheduled"))
        .await?;
    let resource = &named(&spans, "Freeze scheduled")[0].resource;
    let compute = example_compute(THIS_VM);
    assert_eq!(
        resource.get("cloud.platform").map(String::as_str),
        Some("azure_vm")
    );
    assert_eq!(resource.get("azure.resource_group.name"), None);
    assert_eq!(
        resource.get("azure.resourcegroup.name"),
        Some(&compute.resource_group_name)
    );
    assert!(agent.terminate().await?.success());
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_http_protobuf_set_by_flag_a_cancelled_event_ends_its_span_as_cancelled() -> TestResult
{
    let receiver = Receiver::start().await?;
    let imds = Imds::start().await?;
    let lower = EVENT.to_lowercase();
    let other = "not-a-guid-42";
    imds.sim.set_document(document(
        5,
        &[
            event(
                &lower,
                "Freeze",
                "Scheduled",
                &["test-vmss_1"],
                &in_ten_minutes(),
            ),
            event(
                other,
                "Redeploy",
                "Scheduled",
                &[THIS_VM],
                &in_ten_minutes(),
            ),
        ],
    ));
    let endpoint = format!("--otlp.endpoint={}", receiver.http_url());
    let agent = Agent::polling(
        &imds,
        THIS_VM,
        // Flags win over the variables; the variable's endpoint points at nothing.
        &[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:9"),
            ("OTEL_EXPORTER_OTLP_HEADERS", "x-scope-orgid=from-variable"),
        ],
        &[&endpoint, "--otlp.headers=x-scope-orgid=from-flag"],
    )?;
    receiver
        .wait_for("both scheduled transitions", |s| {
            s.iter().any(|s| s.name == "Freeze scheduled")
                && s.iter().any(|s| s.name == "Redeploy scheduled")
        })
        .await?;
    imds.sim.set_document(document(6, &[]));
    let spans = receiver
        .wait_for("both lifecycle spans", |s| {
            s.iter().filter(|s| s.is_lifecycle()).count() == 2
        })
        .await?;
    let freeze = named(&spans, "Freeze")[0];
    assert_eq!(freeze.via, "http");
    assert_eq!(
        freeze.headers.get("x-scope-orgid").map(String::as_str),
        Some("from-flag")
    );
    assert_eq!(
        freeze.trace_id, EVENT_TRACE,
        "a lower-case GUID gives the same trace"
    );
    assert_eq!(freeze.event("outcome"), Some("cancelled"));
    assert_eq!(freeze.event("affects_this_vm"), Some("false"));
    assert_eq!(freeze.event("seen_started"), Some("false"));
    assert_eq!(
        freeze.resource.get("service.name").map(String::as_str),
        Some("azure-scheduled-events-exporter")
    );
    let redeploy = named(&spans, "Redeploy")[0];
    assert_eq!(
        redeploy.trace_id,
        trace_id(other),
        "a non-GUID id is hashed"
    );
    assert_eq!(redeploy.trace_id.len(), 32);
    assert_eq!(redeploy.event("outcome"), Some("cancelled"));
    assert_eq!(
        named(&spans, "Redeploy cancelled")[0].parent_span_id,
        redeploy.span_id
    );
    let exposition = agent
        .wait_for_metrics("the exported count", |e| {
            e.get("azure_scheduled_events_otlp_spans_exported_total") >= 6.0
        })
        .await?;
    assert_eq!(dropped(&exposition, "export_failed"), 0.0);
    assert!(agent.terminate().await?.success());
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unchanged_polls_export_nothing_and_shutdown_flushes_the_open_span() -> TestResult {
    let receiver = Receiver::start().await?;
    let imds = imds_with_one_event("Freeze").await?;
    let endpoint = receiver.http_url();
    let agent = Agent::polling(
        &imds,
        THIS_VM,
        &[
            (
                "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
                &format!("{endpoint}/v1/traces"),
            ),
            ("OTEL_BSP_SCHEDULE_DELAY", "100"),
        ],
        &[],
    )?;
    receiver
        .wait_for("the scheduled transition", has("Freeze scheduled"))
        .await?;
    let before = agent.metrics().await?;
    // At least 40 more polls of the same document.
    let after = agent
        .wait_for_metrics("40 unchanged polls", |e| polls(e) >= polls(&before) + 40.0)
        .await?;
    assert_eq!(
        after.get("azure_scheduled_events_otlp_spans_exported_total"),
        1.0
    );
    assert_eq!(receiver.spans().len(), 1, "{:#?}", receiver.spans());

    assert!(agent.terminate().await?.success());
    let spans = receiver.spans();
    let names: Vec<&str> = spans.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(
        names,
        ["Freeze scheduled", "Freeze"],
        "only the lifecycle span, flushed at shutdown"
    );
    assert_eq!(spans[1].event("outcome"), Some("open"));
    assert_eq!(spans[1].span_id, spans[0].parent_span_id);
    Ok(())
}

/// An `http://` URL of a loopback port nobody listens on, with `path`.
fn closed_endpoint(path: &str) -> Result<String, std::io::Error> {
    let closed = std::net::TcpListener::bind("127.0.0.1:0")?;
    Ok(format!("http://{}{path}", closed.local_addr()?))
}

/// A simulated IMDS whose document holds five Freezes of this VM, ten minutes ahead: five spans
/// (or log events) in one poll.
async fn five_freezes_of_this_vm() -> Result<Imds, Box<dyn std::error::Error>> {
    let imds = Imds::start().await?;
    let events: Vec<serde_json::Value> = (0..5)
        .map(|n| {
            event(
                &format!("5DD55B64-45AD-49D3-BBC9-F57D4EA97BD{n}"),
                "Freeze",
                "Scheduled",
                &[THIS_VM],
                &in_ten_minutes(),
            )
        })
        .collect();
    imds.sim.set_document(document(1, &events));
    Ok(imds)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_collector_that_is_down_neither_stops_polling_nor_queues_without_bound() -> TestResult {
    let endpoint = closed_endpoint("")?;
    let imds = five_freezes_of_this_vm().await?;
    let agent = Agent::polling(
        &imds,
        THIS_VM,
        &[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", &endpoint),
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"),
            ("OTEL_EXPORTER_OTLP_TIMEOUT", "2000"),
            ("OTEL_BSP_MAX_QUEUE_SIZE", "2"),
        ],
        &[],
    )?;
    // Five spans in one poll, two fit in the queue: three dropped, then a failed export.
    let exposition = agent
        .wait_for_metrics("three spans dropped and a failed export", |e| {
            dropped(e, "export_failed") >= 1.0 && dropped(e, "queue_full") == 3.0
        })
        .await?;
    assert_eq!(
        exposition.get("azure_scheduled_events_otlp_spans_exported_total"),
        0.0
    );
    assert_eq!(exposition.up(), Some(1.0));
    let polled = polls(&exposition);
    imds.sim.set_document(document(2, &[]));
    let exposition = agent
        .wait_for_metrics("polls going on and the events cancelled", |e| {
            polls(e) >= polled + 20.0 && e.transitions("Freeze", "cancelled") == 5.0
        })
        .await?;
    assert_eq!(exposition.up(), Some(1.0));
    assert!(agent.terminate().await?.success());
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_collector_that_is_down_costs_log_events_a_bounded_queue_and_counts_every_record_lost()
-> TestResult {
    let endpoint = closed_endpoint("/v1/logs")?;
    let imds = five_freezes_of_this_vm().await?;
    let agent = Agent::polling(
        &imds,
        THIS_VM,
        &[
            ("OTEL_EXPORTER_OTLP_LOGS_ENDPOINT", &endpoint),
            ("OTEL_EXPORTER_OTLP_TIMEOUT", "2000"),
            ("OTEL_BLRP_MAX_QUEUE_SIZE", "2"),
        ],
        &[],
    )?;
    let lost = |e: &Exposition, reason: &str| {
        e.get(&format!(
            r#"azure_scheduled_events_otlp_log_records_dropped_total{{reason="{reason}"}}"#
        ))
    };
    // Five event lines, five records: a queue of two (and the batch in flight, two) cannot hold
    // them all; each is lost either to the full queue or to the failed export.
    let exposition = agent
        .wait_for_metrics("the five records counted as lost", |e| {
            lost(e, "queue_full") + lost(e, "export_failed") == 5.0
        })
        .await?;
    assert!(lost(&exposition, "queue_full") >= 1.0);
    assert_eq!(
        exposition.get("azure_scheduled_events_otlp_log_records_exported_total"),
        0.0
    );
    assert!(
        !exposition.has("azure_scheduled_events_otlp_spans_"),
        "log events alone, no traces"
    );
    let polled = polls(&exposition);
    agent
        .wait_for_metrics("polls going on", |e| {
            polls(e) >= polled + 20.0 && e.up() == Some(1.0)
        })
        .await?;
    assert!(agent.terminate().await?.success());
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fleet_of_five_agents_writes_one_trace_with_one_lifecycle_span_per_vm() -> TestResult {
    let receiver = Receiver::start().await?;
    let imds = Imds::start().await?;
    let vms = ["vmss_0", "vmss_1", "vmss_2", "vmss_3", "vmss_4"];
    let grpc = receiver.grpc_url();
    let http = receiver.http_url();
    let mut agents = Vec::new();
    for (n, vm) in vms.iter().enumerate() {
        // Some over gRPC, some over HTTP: one trace whatever the protocol.
        let env: Vec<(&str, &str)> = if n % 2 == 0 {
            vec![
                ("OTEL_EXPORTER_OTLP_ENDPOINT", grpc.as_str()),
                ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"),
            ]
        } else {
            vec![("OTEL_EXPORTER_OTLP_ENDPOINT", http.as_str())]
        };
        agents.push(Agent::polling(&imds, vm, &env, &[])?);
    }
    imds.sim.set_document(document(
        1,
        &[event(
            EVENT,
            "Freeze",
            "Scheduled",
            &["vmss_0", "VMSS_1"],
            &in_ten_minutes(),
        )],
    ));
    receiver
        .wait_for("every VM's scheduled transition", |s| {
            s.iter().filter(|s| s.name == "Freeze scheduled").count() == vms.len()
        })
        .await?;
    imds.sim.set_document(document(2, &[]));
    let spans = receiver
        .wait_for("every VM's lifecycle span", |s| {
            s.iter().filter(|s| s.is_lifecycle()).count() == vms.len()
        })
        .await?;

    assert!(spans.iter().all(|s| s.trace_id == EVENT_TRACE), "one trace");
    let lifecycles: Vec<&ReceivedSpan> = spans.iter().filter(|s| s.is_lifecycle()).collect();
    let by_vm: BTreeMap<&str, &ReceivedSpan> = lifecycles
        .iter()
        .map(|s| (s.event("vm_name").unwrap_or_default(), *s))
        .collect();
    assert_eq!(
        by_vm.keys().copied().collect::<Vec<_>>(),
        vms,
        "one lifecycle span per VM"
    );
    let span_ids: BTreeSet<&str> = lifecycles.iter().map(|s| s.span_id.as_str()).collect();
    assert_eq!(span_ids.len(), vms.len());
    for vm in vms {
        let lifecycle = by_vm[vm];
        assert_eq!(lifecycle.span_id, span_id_hex(EVENT, vm));
        assert_eq!(
            lifecycle
                .resource
                .get("service.instance.id")
                .map(String::as_str),
            Some(vm)
        );
        assert_eq!(lifecycle.event("outcome"), Some("cancelled"));
        let affects = if matches!(vm, "vmss_0" | "vmss_1") {
            "true"
        } else {
            "false"
        };
        assert_eq!(lifecycle.event("affects_this_vm"), Some(affects), "{vm}");
        let children: Vec<&str> = spans
            .iter()
            .filter(|s| s.parent_span_id == lifecycle.span_id)
            .map(|s| s.name.as_str())
            .collect();
        assert_eq!(children, ["Freeze scheduled", "Freeze cancelled"], "{vm}");
    }
    for agent in agents {
        assert!(agent.terminate().await?.success());
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_approval_is_a_child_span_of_the_lifecycle_span_and_its_outcome() -> TestResult {
    let receiver = Receiver::start().await?;
    let imds = Imds::start().await?;
    imds.sim.load_scenario(azure_scheduled_events_simulator::Scenario::parse(
        &format!(
            "events:\n  - {{ id: \"{EVENT}\", type: Reboot, source: User, resources: [{THIS_VM}], notice: 10m }}\n"
        ),
    )?);
    let endpoint = receiver.grpc_url();
    let agent = Agent::polling(
        &imds,
        THIS_VM,
        &[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", &endpoint),
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"),
        ],
        &["--approve"],
    )?;
    let spans = receiver
        .wait_for("the approval and the start", |s| {
            s.iter().any(|s| s.name == "Reboot approval approved")
                && s.iter().any(|s| s.name == "Reboot started")
        })
        .await?;
    let approved = named(&spans, "Reboot approval approved")[0];
    assert_eq!(approved.trace_id, EVENT_TRACE);
    assert_eq!(approved.parent_span_id, span_id_hex(EVENT, THIS_VM));
    assert_eq!(approved.event("approval.decision"), Some("approved"));
    assert_eq!(approved.event("approval.reason"), Some("user_event"));
    assert_eq!(approved.event("approval.attempts"), Some("1"));
    assert_eq!(imds.sim.approvals().len(), 1);
    assert!(imds.sim.remove_event(EVENT));
    let spans = receiver
        .wait_for("the lifecycle span", has("Reboot"))
        .await?;
    let lifecycle = named(&spans, "Reboot")[0];
    assert_eq!(lifecycle.event("approval.decision"), Some("approved"));
    assert_eq!(lifecycle.event("outcome"), Some("completed"));
    assert_eq!(
        named(&spans, "Reboot approval approved").len(),
        1,
        "one span per decision, not per poll"
    );
    assert!(agent.terminate().await?.success());
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_agent_ends_the_same_lifecycle_span_from_the_same_first_sight() -> TestResult {
    let receiver = Receiver::start().await?;
    let imds = Imds::start().await?;
    imds.sim.set_document(document(
        1,
        &[event(EVENT, "Reboot", "Started", &[THIS_VM], "")],
    ));
    let dir = std::env::temp_dir().join(format!("ase-traces-restart-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let state = format!("--state.file={}", dir.join("state.json").display());
    let endpoint = receiver.http_url();
    let env = [("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint.as_str())];

    let first = Agent::polling(&imds, THIS_VM, &env, &[&state])?;
    receiver
        .wait_for("the started transition", has("Reboot started"))
        .await?;
    first
        .wait_for_metrics("the state file written", |e| {
            e.get("azure_scheduled_events_state_up") == 1.0 && dir.join("state.json").exists()
        })
        .await?;
    assert!(first.terminate().await?.success());
    let spans = receiver
        .wait_for("the open lifecycle span", has("Reboot"))
        .await?;
    let open = named(&spans, "Reboot")[0].clone();
    assert_eq!(open.event("outcome"), Some("open"));

    // The restarted agent resumes the event: its `started` was exported by the first run and is
    // not exported again.
    let second = Agent::polling(&imds, THIS_VM, &env, &[&state])?;
    second
        .wait_for_metrics("the second run's first document", |e| e.up() == Some(1.0))
        .await?;
    imds.polled(5).await?;
    assert_eq!(named(&receiver.spans(), "Reboot started").len(), 1);
    imds.sim.set_document(document(2, &[]));
    let spans = receiver
        .wait_for("the final lifecycle span", |s| {
            named(s, "Reboot").len() == 2
        })
        .await?;
    let last = named(&spans, "Reboot")[1];
    assert_eq!(last.event("outcome"), Some("completed"));
    assert_eq!(
        named(&spans, "Reboot started").len(),
        1,
        "exported before the final span, had there been one"
    );
    assert_eq!(last.span_id, open.span_id, "the same span after a restart");
    assert_eq!(last.event("seen_started"), Some("true"));
    let drift = last.start_unix_nano.abs_diff(open.start_unix_nano);
    assert!(
        drift < 1_000_000,
        "both start at the first run's first sight: {} vs {}",
        last.start_unix_nano,
        open.start_unix_nano
    );
    assert!(second.terminate().await?.success());
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_event_seen_started_that_ended_while_the_agent_was_down_completes_its_span() -> TestResult
{
    const FREEZE: &str = "6E6E6E6E-0000-4000-8000-000000000001";
    let receiver = Receiver::start().await?;
    let imds = Imds::start().await?;
    imds.sim.set_document(document(
        1,
        &[
            event(EVENT, "Reboot", "Started", &[THIS_VM], ""),
            event(FREEZE, "Freeze", "Scheduled", &[THIS_VM], &in_ten_minutes()),
        ],
    ));
    let dir = common::TempDir::new("traces-down")?;
    let state = format!("--state.file={}", dir.path("state.json").display());
    let endpoint = receiver.http_url();
    let env = [("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint.as_str())];

    let first = Agent::polling(&imds, THIS_VM, &env, &[&state])?;
    receiver
        .wait_for("both transitions", |s| {
            named(s, "Reboot started").len() == 1 && named(s, "Freeze scheduled").len() == 1
        })
        .await?;
    first
        .wait_for_metrics("the state file written", |e| {
            e.get("azure_scheduled_events_state_up") == 1.0 && dir.path("state.json").exists()
        })
        .await?;
    assert!(first.terminate().await?.success());
    let spans = receiver
        .wait_for("both open lifecycle spans", |s| {
            named(s, "Reboot").len() == 1 && named(s, "Freeze").len() == 1
        })
        .await?;
    let open = named(&spans, "Reboot")[0].clone();
    assert_eq!(open.event("outcome"), Some("open"));

    // The Reboot ran and ended, and the Freeze went, while no agent was running.
    imds.sim.set_document(document(3, &[]));
    let second = Agent::polling(&imds, THIS_VM, &env, &[&state])?;
    let spans = receiver
        .wait_for("the Reboot's final lifecycle span", |s| {
            named(s, "Reboot").len() == 2
        })
        .await?;
    let last = named(&spans, "Reboot")[1];
    assert_eq!(last.event("outcome"), Some("completed"));
    assert_eq!(last.span_id, open.span_id, "the same span after a restart");
    assert_eq!(last.trace_id, EVENT_TRACE);
    assert_eq!(last.event("seen_started"), Some("true"));
    assert!(
        last.start_unix_nano.abs_diff(open.start_unix_nano) < 1_000_000,
        "it starts at the first run's first sight"
    );
    assert_eq!(
        named(&spans, "Freeze").len(),
        1,
        "a Scheduled event that went while nobody watched may have been cancelled: no outcome is made up"
    );
    assert!(second.terminate().await?.success());
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn at_debug_level_each_poll_is_a_client_span_of_its_own() -> TestResult {
    let receiver = Receiver::start().await?;
    let imds = Imds::start().await?;
    imds.sim.set_document(document(1, &[]));
    let endpoint = receiver.http_url();
    let agent = Agent::polling(
        &imds,
        THIS_VM,
        &[("OTEL_EXPORTER_OTLP_ENDPOINT", &endpoint)],
        &["--log.level=debug"],
    )?;
    let spans = receiver
        .wait_for("three IMDS request spans", |spans| {
            named(spans, "GET /metadata/scheduledevents").len() >= 3
        })
        .await?;
    let polls = named(&spans, "GET /metadata/scheduledevents");
    assert_eq!(
        polls[0]
            .attributes
            .get("http.response.status_code")
            .map(String::as_str),
        Some("200")
    );
    assert_eq!(polls[0].parent_span_id, "");
    assert_ne!(polls[0].trace_id, polls[1].trace_id, "a trace per poll");
    assert!(
        spans
            .iter()
            .all(|s| s.name == "GET /metadata/scheduledevents"),
        "only the agent's own spans, never the HTTP or gRPC libraries'"
    );
    assert!(agent.terminate().await?.success());
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_demo_exports_when_the_variables_are_set() -> TestResult {
    let receiver = Receiver::start().await?;
    let endpoint = receiver.http_url();
    let agent = Agent::spawn(
        &[
            "demo",
            "--web.listen-address=127.0.0.1:0",
            "--log.format=json",
        ],
        &[("OTEL_EXPORTER_OTLP_ENDPOINT", &endpoint)],
    )?;
    let spans = receiver
        .wait_for("the demo's first Freeze", has("Freeze scheduled"))
        .await?;
    let freeze = named(&spans, "Freeze scheduled")[0];
    assert_eq!(
        freeze.resource.get("host.name").map(String::as_str),
        Some("demo-vmss_0")
    );
    assert_eq!(freeze.event("affects_this_vm"), Some("true"));
    assert!(agent.terminate().await?.success());
    Ok(())
}
