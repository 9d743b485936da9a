//! The agent's traces and log events as a collector that is not the project's own shows them:
//! rotel (PyPI's `rotel`, an OpenTelemetry collector in Rust), receiving OTLP on loopback and
//! printing what it received with its debug log, while the built binary polls the simulator.
//! Traces go over HTTP/protobuf and log events over gRPC, through the `_LOGS_` variables.
//!
//! `.ci/run` installs rotel into target/ci-tools and links its binary as
//! `target/ci-tools/bin/rotel-agent`; a missing rotel fails the test.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};

use azure_scheduled_events_core::trace_id::lifecycle_span_id;
use common::process::{AgentProcess, command};
use common::wait::wait;
use common::{Imds, THIS_VM, TempDir, TestResult, document};

use crate::common;
use crate::ops;

/// Upper case, as real IMDS sends it.
const EVENT: &str = "9A3F4E2C-7B1D-4C8E-A5F6-0D2B3C4E5F60";
const EVENT_TRACE: &str = "9a3f4e2c7b1d4c8ea5f60d2b3c4e5f60";

/// One span or log record as rotel's detailed debug log prints it.
#[derive(Debug, Clone, Default)]
struct Item {
    /// `Span` or `LogRecord`.
    kind: String,
    /// `Trace ID`, `ID`, `Parent ID`, `Name`, `Span ID`, `EventName`, `SeverityText`, `Body`...
    fields: BTreeMap<String, String>,
    attributes: BTreeMap<String, String>,
    /// The attributes of the resource it came with.
    resource: BTreeMap<String, String>,
}

impl Item {
    fn field(&self, name: &str) -> &str {
        self.fields.get(name).map_or("", String::as_str)
    }

    fn attribute(&self, name: &str) -> &str {
        self.attributes.get(name).map_or("", String::as_str)
    }
}

/// The spans and log records in rotel's debug output so far. Each kind takes the resource of its
/// own last header (`ResourceSpans #`, `ResourceLog #`), whichever kind the blocks printed before it
/// were.
fn items(output: &str) -> Vec<Item> {
    // rotel's header of a resource, of its scope and of an item, for each kind.
    const KINDS: [(&str, &str, &str); 2] = [
        ("ResourceSpans #", "ScopeSpans #", "Span"),
        ("ResourceLog #", "ScopeLogs #", "LogRecord"),
    ];
    let mut items = Vec::new();
    let mut resources: BTreeMap<&str, BTreeMap<String, String>> = BTreeMap::new();
    let mut current: Option<Item> = None;
    // The kind whose resource the next `-> ` lines describe.
    let mut in_resource: Option<&str> = None;
    for line in output.lines() {
        let trimmed = line.trim();
        if let Some((_, _, kind)) = KINDS.iter().find(|(r, _, _)| trimmed.starts_with(r)) {
            items.extend(current.take());
            resources.insert(kind, BTreeMap::new());
            in_resource = Some(kind);
        } else if let Some((_, _, kind)) = KINDS
            .iter()
            .find(|(_, _, kind)| trimmed.starts_with(&format!("{kind} #")))
        {
            items.extend(current.take());
            in_resource = None;
            current = Some(Item {
                kind: (*kind).to_owned(),
                resource: resources.get(kind).cloned().unwrap_or_default(),
                ..Item::default()
            });
        } else if KINDS.iter().any(|(_, scope, _)| trimmed.starts_with(scope)) {
            in_resource = None;
        } else if let Some(pair) = trimmed.strip_prefix("-> ") {
            let Some((key, value)) = pair.split_once(": ") else {
                continue;
            };
            match (&mut current, in_resource) {
                (_, Some(kind)) => {
                    resources
                        .entry(kind)
                        .or_default()
                        .insert(key.to_owned(), value.to_owned());
                }
                (Some(item), None) => {
                    item.attributes.insert(key.to_owned(), value.to_owned());
                }
                (None, None) => {}
            }
        } else if let (Some(item), Some((key, value))) = (&mut current, trimmed.split_once(':')) {
            item.fields
                .insert(key.trim().to_owned(), value.trim().to_owned());
        }
    }
    items.extend(current);
    items
}

/// rotel on two free loopback ports, its standard output gathered as it comes; killed on drop.
struct Rotel {
    _process: ops::Process,
    output: Arc<Mutex<String>>,
    grpc: u16,
    http: u16,
    _dir: TempDir,
}

impl Rotel {
    async fn start() -> Result<Self, Box<dyn std::error::Error>> {
        let dir = TempDir::new("rotel")?;
        let (grpc, http) = (ops::free_port()?, ops::free_port()?);
        let program = ops::tool("rotel-agent");
        let mut command = Command::new(&program);
        command
            .args(["start", "--exporter", "blackhole"])
            .args(["--debug-log", "traces", "--debug-log", "logs"])
            .args(["--debug-log-verbosity", "detailed"])
            .args(["--batch-timeout", "50ms"])
            .arg(format!("--otlp-grpc-endpoint=127.0.0.1:{grpc}"))
            .arg(format!("--otlp-http-endpoint=127.0.0.1:{http}"))
            .arg(format!("--pid-file={}", dir.path("rotel.pid").display()))
            .arg(format!("--log-file={}", dir.path("rotel.log").display()))
            .env_clear()
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null());
        let mut process = ops::Process::spawn("rotel-agent", &mut command).map_err(|e| {
            format!(
                "{e}: rotel is required ({} from PyPI's rotel; .ci/run installs it)",
                program.display()
            )
        })?;
        let stdout = process.child.stdout.take().ok_or("no stdout")?;
        let output = Arc::new(Mutex::new(String::new()));
        let gathered = Arc::clone(&output);
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if let Ok(mut output) = gathered.lock() {
                    output.push_str(&line);
                    output.push('\n');
                }
            }
        });
        for port in [grpc, http] {
            wait(&format!("rotel to listen on {port}"))
                .retrying_errors()
                .until(async || {
                    tokio::net::TcpStream::connect(("127.0.0.1", port))
                        .await
                        .map(|_| true)
                })
                .await?;
        }
        Ok(Self {
            _process: process,
            output,
            grpc,
            http,
            _dir: dir,
        })
    }

    fn items(&self) -> Vec<Item> {
        self.output.lock().map(|o| items(&o)).unwrap_or_default()
    }

    /// Waits until rotel has shown an item for which `matches` holds.
    async fn shown(
        &self,
        what: &str,
        matches: impl Fn(&Item) -> bool,
    ) -> Result<Item, Box<dyn std::error::Error>> {
        Ok(wait(what)
            .until(async || self.items().into_iter().find(|item| matches(item)))
            .await?)
    }
}

fn in_ten_minutes() -> String {
    (chrono::Utc::now() + chrono::Duration::minutes(10))
        .format("%a, %d %b %Y %H:%M:%S GMT")
        .to_string()
}

/// The event, a Reboot of this VM, with `status` and `not_before`.
fn reboot(status: &str, not_before: &str) -> serde_json::Value {
    serde_json::json!({
        "EventId": EVENT, "EventStatus": status, "EventType": "Reboot",
        "ResourceType": "VirtualMachine", "Resources": [THIS_VM], "NotBefore": not_before,
        "Description": "", "EventSource": "Platform", "DurationInSeconds": -1
    })
}

fn record_named<'a>(name: &'a str) -> impl Fn(&Item) -> bool + 'a {
    move |item| {
        item.kind == "LogRecord"
            && item.field("EventName") == name
            && item.attribute("event_id") == format!("Str({EVENT})")
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_collector_shows_the_events_log_records_and_spans_under_one_trace_id() -> TestResult {
    let rotel = Rotel::start().await?;
    let imds = Imds::start().await?;
    imds.sim
        .set_document(document(1, &[reboot("Scheduled", &in_ten_minutes())]));
    let url = format!("--imds.url={}", imds.url());
    let vm = format!("--vm.name={THIS_VM}");
    let mut command = command(&[
        &url,
        &vm,
        "--web.listen-address=127.0.0.1:0",
        "--poll.interval=50ms",
    ]);
    let traces = format!("http://127.0.0.1:{}", rotel.http);
    let logs = format!("http://127.0.0.1:{}", rotel.grpc);
    command.envs([
        ("OTEL_EXPORTER_OTLP_ENDPOINT", traces.as_str()),
        ("OTEL_LOGS_EXPORTER", "otlp"),
        ("OTEL_EXPORTER_OTLP_LOGS_ENDPOINT", logs.as_str()),
        ("OTEL_EXPORTER_OTLP_LOGS_PROTOCOL", "grpc"),
        ("OTEL_BSP_SCHEDULE_DELAY", "50"),
        ("OTEL_BLRP_SCHEDULE_DELAY", "50"),
    ]);
    let mut agent = AgentProcess::spawn(command)?;

    let scheduled = rotel
        .shown(
            "the record of the event scheduled",
            record_named("azure.scheduled_event.scheduled"),
        )
        .await?;
    imds.sim.set_document(document(2, &[reboot("Started", "")]));
    rotel
        .shown(
            "the record of the event started",
            record_named("azure.scheduled_event.started"),
        )
        .await?;
    // The event leaves the document: it completed, and its lifecycle span ends.
    imds.sim.set_document(document(3, &[]));
    let completed = rotel
        .shown(
            "the record of the event completed",
            record_named("azure.scheduled_event.completed"),
        )
        .await?;
    let lifecycle = rotel
        .shown("the event's lifecycle span", |item| {
            item.kind == "Span"
                && item.field("Trace ID") == EVENT_TRACE
                && item.field("Name") == "Reboot"
        })
        .await?;
    let transition = rotel
        .shown("the span of the event scheduled", |item| {
            item.kind == "Span" && item.field("Name") == "Reboot scheduled"
        })
        .await?;
    tokio::task::spawn_blocking(move || agent.terminate()).await??;

    // One trace id: the EventId's, on the records and on the spans.
    for item in [&scheduled, &completed, &lifecycle, &transition] {
        assert_eq!(item.field("Trace ID"), EVENT_TRACE, "{item:?}");
    }
    // Both ways: the record names this VM's lifecycle span of the event, the parent of the
    // transition spans.
    let span_id = format!("{:016x}", lifecycle_span_id(EVENT, THIS_VM));
    assert_eq!(scheduled.field("Span ID"), span_id);
    assert_eq!(completed.field("Span ID"), span_id);
    assert_eq!(lifecycle.field("ID"), span_id);
    assert_eq!(transition.field("Parent ID"), span_id);

    // The line's fields as attributes, its level as severity, its message as body.
    assert_eq!(scheduled.field("SeverityText"), "INFO");
    assert_eq!(scheduled.field("Body"), "Str(event scheduled)");
    for (key, value) in [
        ("transition", "Str(scheduled)".to_owned()),
        ("event_type", "Str(Reboot)".to_owned()),
        ("event_status", "Str(Scheduled)".to_owned()),
        ("affects_this_vm", "Str(true)".to_owned()),
        ("vm_name", format!("Str({THIS_VM})")),
        ("trace_id", format!("Str({EVENT_TRACE})")),
        ("span_id", format!("Str({span_id})")),
        ("document_incarnation", "Int(1)".to_owned()),
        ("advisory", "Bool(false)".to_owned()),
    ] {
        assert_eq!(scheduled.attribute(key), value, "{key} of {scheduled:?}");
    }
    assert_eq!(completed.attribute("transition"), "Str(completed)");
    // The resource the traces carry.
    for item in [&scheduled, &lifecycle] {
        assert_eq!(
            item.resource.get("service.instance.id").map(String::as_str),
            Some(format!("Str({THIS_VM})").as_str()),
            "{item:?}"
        );
        assert_eq!(
            item.resource.get("cloud.provider").map(String::as_str),
            Some("Str(azure)")
        );
    }
    Ok(())
}

#[test]
fn the_debug_output_is_read_into_spans_and_records_with_their_resource() {
    let output = "\
ResourceLog #0
Resource attributes:
     -> service.name: Str(agent)
ScopeLogs #0
LogRecord #0
SeverityText: INFO
EventName: azure.scheduled_event.scheduled
Body: Str(event scheduled)
Attributes:
     -> event_id: Str(A)
    Trace ID       : 0102
    Span ID        : 03
ResourceSpans #0
Resource attributes:
     -> service.name: Str(other)
ScopeSpans #0
Span #0
    Trace ID       : 0102
    Name           : Reboot scheduled
Attributes:
     -> azure.scheduled_event.id: Str(A)
ResourceLog #0
Resource attributes:
     -> service.name: Str(agent)
ScopeLogs #0
LogRecord #0
Body: Str(event completed)
";
    let items = items(output);
    assert_eq!(items.len(), 3);
    assert_eq!(items[0].kind, "LogRecord");
    assert_eq!(
        items[0].field("EventName"),
        "azure.scheduled_event.scheduled"
    );
    assert_eq!(items[0].field("Span ID"), "03");
    assert_eq!(items[0].attribute("event_id"), "Str(A)");
    assert_eq!(items[0].resource["service.name"], "Str(agent)");
    assert_eq!(items[1].kind, "Span");
    assert_eq!(items[1].field("Name"), "Reboot scheduled");
    assert_eq!(items[1].resource["service.name"], "Str(other)");
    // A record after spans of another resource has its own, as the first had before any span.
    assert_eq!(items[2].field("Body"), "Str(event completed)");
    assert_eq!(items[2].resource["service.name"], "Str(agent)");
}
