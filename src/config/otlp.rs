//! Where traces and log events go: the `--otlp.*` flags and the standard `OTEL_*` variables,
//! resolved for one [`Signal`] into one [`OtlpConfig`] (or none: each signal is off unless
//! configured).
//!
//! The variables are read through an [`EnvSource`], so tests resolve from a map and never touch
//! the process environment. Precedence, highest first: `OTEL_SDK_DISABLED=true` (off, whatever
//! else is set); a flag (or its `AZURE_SCHEDULED_EVENTS_OTLP_*` variable); the signal's own
//! `OTEL_EXPORTER_OTLP_TRACES_*` or `OTEL_EXPORTER_OTLP_LOGS_*` variable; the generic
//! `OTEL_EXPORTER_OTLP_*` one; the default. An empty variable counts as unset, as the
//! OpenTelemetry specification requires.
//!
//! Traces are on once an endpoint is configured. Log events are on only when asked for by name
//! (`OTEL_LOGS_EXPORTER=otlp`, or `OTEL_EXPORTER_OTLP_LOGS_ENDPOINT`): the shared endpoint alone
//! does not turn them on, so that an upgrade does not add a second stream to every collector
//! already receiving the traces.

use std::collections::HashMap;
use std::time::Duration;

use clap::{Args, ValueEnum};
use reqwest::Url;

use super::values::{ConfigError, invalid};

/// Default of `--otlp.timeout` (and of `OTEL_EXPORTER_OTLP_TIMEOUT`): the specification's 10 s.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);
/// Default of `--otlp.protocol` (and of `OTEL_EXPORTER_OTLP_PROTOCOL`): the specification's.
pub const DEFAULT_PROTOCOL: Protocol = Protocol::HttpProtobuf;
/// The longest `--otlp.timeout` (or `OTEL_EXPORTER_OTLP_TIMEOUT`).
pub const MAX_TIMEOUT: Duration = Duration::from_secs(300);
/// Spans (or log records) held while the collector is slow or down; beyond this they are dropped
/// and counted.
pub const DEFAULT_MAX_QUEUE_SIZE: usize = 2048;
/// Bytes of log records held while the collector is slow or down (their attributes' keys and
/// values as the agent holds them); beyond this they are dropped and counted.
pub const MAX_LOG_QUEUE_BYTES: usize = 1 << 20;
/// Spans (or log records) per export request.
pub const DEFAULT_MAX_EXPORT_BATCH_SIZE: usize = 512;
/// How long a span waits for others to share its export request. Shorter than the
/// specification's 5 s because every span here is a transition someone may be watching for.
pub const DEFAULT_SCHEDULE_DELAY: Duration = Duration::from_secs(1);
/// `service.name` unless `OTEL_SERVICE_NAME` or `OTEL_RESOURCE_ATTRIBUTES` says otherwise.
pub const DEFAULT_SERVICE_NAME: &str = "azure-scheduled-events-exporter";

/// The OpenTelemetry signal a configuration is for: each has its own variables.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Signal {
    Traces,
    /// Log-based events: each transition's log line as a LogRecord with an event name.
    Logs,
}

/// The variables of one signal, by setting: its own form first where there is one.
#[derive(Debug)]
pub struct Variables {
    /// `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`: the whole URL, used as given.
    pub endpoint: &'static str,
    /// The path appended to a base URL for http/protobuf.
    pub path: &'static str,
    pub protocol: [&'static str; 2],
    pub headers: [&'static str; 2],
    pub timeout: [&'static str; 2],
    pub compression: [&'static str; 2],
    pub certificate: [&'static str; 2],
    pub client_certificate: [&'static str; 2],
    pub client_key: [&'static str; 2],
    /// The batch processor's: `OTEL_BSP_*` for spans, `OTEL_BLRP_*` for log records.
    pub max_queue_size: &'static str,
    pub max_export_batch_size: &'static str,
    pub schedule_delay: &'static str,
}

const TRACES: Variables = Variables {
    endpoint: "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
    path: "/v1/traces",
    protocol: [
        "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
        "OTEL_EXPORTER_OTLP_PROTOCOL",
    ],
    headers: [
        "OTEL_EXPORTER_OTLP_TRACES_HEADERS",
        "OTEL_EXPORTER_OTLP_HEADERS",
    ],
    timeout: [
        "OTEL_EXPORTER_OTLP_TRACES_TIMEOUT",
        "OTEL_EXPORTER_OTLP_TIMEOUT",
    ],
    compression: [
        "OTEL_EXPORTER_OTLP_TRACES_COMPRESSION",
        "OTEL_EXPORTER_OTLP_COMPRESSION",
    ],
    certificate: [
        "OTEL_EXPORTER_OTLP_TRACES_CERTIFICATE",
        "OTEL_EXPORTER_OTLP_CERTIFICATE",
    ],
    client_certificate: [
        "OTEL_EXPORTER_OTLP_TRACES_CLIENT_CERTIFICATE",
        "OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE",
    ],
    client_key: [
        "OTEL_EXPORTER_OTLP_TRACES_CLIENT_KEY",
        "OTEL_EXPORTER_OTLP_CLIENT_KEY",
    ],
    max_queue_size: "OTEL_BSP_MAX_QUEUE_SIZE",
    max_export_batch_size: "OTEL_BSP_MAX_EXPORT_BATCH_SIZE",
    schedule_delay: "OTEL_BSP_SCHEDULE_DELAY",
};

const LOGS: Variables = Variables {
    endpoint: "OTEL_EXPORTER_OTLP_LOGS_ENDPOINT",
    path: "/v1/logs",
    protocol: [
        "OTEL_EXPORTER_OTLP_LOGS_PROTOCOL",
        "OTEL_EXPORTER_OTLP_PROTOCOL",
    ],
    headers: [
        "OTEL_EXPORTER_OTLP_LOGS_HEADERS",
        "OTEL_EXPORTER_OTLP_HEADERS",
    ],
    timeout: [
        "OTEL_EXPORTER_OTLP_LOGS_TIMEOUT",
        "OTEL_EXPORTER_OTLP_TIMEOUT",
    ],
    compression: [
        "OTEL_EXPORTER_OTLP_LOGS_COMPRESSION",
        "OTEL_EXPORTER_OTLP_COMPRESSION",
    ],
    certificate: [
        "OTEL_EXPORTER_OTLP_LOGS_CERTIFICATE",
        "OTEL_EXPORTER_OTLP_CERTIFICATE",
    ],
    client_certificate: [
        "OTEL_EXPORTER_OTLP_LOGS_CLIENT_CERTIFICATE",
        "OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE",
    ],
    client_key: [
        "OTEL_EXPORTER_OTLP_LOGS_CLIENT_KEY",
        "OTEL_EXPORTER_OTLP_CLIENT_KEY",
    ],
    max_queue_size: "OTEL_BLRP_MAX_QUEUE_SIZE",
    max_export_batch_size: "OTEL_BLRP_MAX_EXPORT_BATCH_SIZE",
    schedule_delay: "OTEL_BLRP_SCHEDULE_DELAY",
};

/// `OTEL_LOGS_EXPORTER`: `otlp` turns log events on, `none` off.
pub const LOGS_EXPORTER: &str = "OTEL_LOGS_EXPORTER";

impl Signal {
    pub fn variables(self) -> &'static Variables {
        match self {
            Signal::Traces => &TRACES,
            Signal::Logs => &LOGS,
        }
    }

    /// What is off when its settings are unusable, for messages.
    pub fn what(self) -> &'static str {
        match self {
            Signal::Traces => "traces",
            Signal::Logs => "log events over OTLP",
        }
    }

    /// What the agent says when the signal's settings cannot be used.
    pub fn off(self) -> &'static str {
        match self {
            Signal::Traces => "traces are off; metrics and logs go on",
            Signal::Logs => "log events over OTLP are off; metrics, traces and log lines go on",
        }
    }

    /// `_TRACES_` or `_LOGS_`, for messages that name a variable's signal-specific form.
    pub fn infix(self) -> &'static str {
        match self {
            Signal::Traces => "_TRACES_",
            Signal::Logs => "_LOGS_",
        }
    }

    /// Whether the environment asks for this signal (an endpoint aside): traces always do; log
    /// events when `OTEL_LOGS_EXPORTER` names `otlp`, or unset, when their own endpoint is set.
    fn wanted(self, env: &impl EnvSource) -> Result<bool, OtlpError> {
        if self == Signal::Traces {
            return Ok(true);
        }
        let Some(value) = env.var(LOGS_EXPORTER) else {
            return Ok(env.var(LOGS.endpoint).is_some());
        };
        let names: Vec<String> = value
            .split(',')
            .map(|name| name.trim().to_ascii_lowercase())
            .filter(|name| !name.is_empty())
            .collect();
        if names.iter().any(|name| name == "otlp") {
            Ok(true)
        } else if names.iter().all(|name| name == "none") {
            Ok(false)
        } else {
            Err(OtlpError::Variable {
                variable: LOGS_EXPORTER,
                message: format!("{LOGS_EXPORTER}={value:?}: use otlp or none"),
            })
        }
    }
}

/// Why the export settings cannot be used, naming the setting that holds the bad value.
#[derive(Debug, thiserror::Error)]
pub enum OtlpError {
    /// A `--otlp.*` flag (or its `AZURE_SCHEDULED_EVENTS_OTLP_*` variable): what the operator set
    /// for this agent.
    #[error(transparent)]
    Flag(#[from] ConfigError),
    /// A standard `OTEL_*` variable, often set fleet-wide: `variable` is its name.
    #[error("{message}")]
    Variable {
        variable: &'static str,
        message: String,
    },
}

/// The error of a value read from `source`, a flag (`--otlp.*`, reported as `flag`) or a variable.
fn at(source: &'static str, flag: &'static str, message: String) -> OtlpError {
    if source.starts_with("--") {
        OtlpError::Flag(invalid(flag, message))
    } else {
        OtlpError::Variable {
            variable: source,
            message,
        }
    }
}

/// The process environment, or a map in tests.
pub trait EnvSource {
    /// The value of `name`; `None` when unset or empty.
    fn var(&self, name: &str) -> Option<String>;
}

/// Reads the real process environment.
#[derive(Debug, Clone, Copy, Default)]
pub struct ProcessEnv;

impl EnvSource for ProcessEnv {
    fn var(&self, name: &str) -> Option<String> {
        std::env::var(name).ok().filter(|v| !v.trim().is_empty())
    }
}

impl EnvSource for HashMap<&str, &str> {
    fn var(&self, name: &str) -> Option<String> {
        self.get(name)
            .filter(|v| !v.trim().is_empty())
            .map(|v| (*v).to_owned())
    }
}

/// OTLP wire protocol.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Protocol {
    /// OTLP over gRPC (collectors listen on 4317).
    #[value(name = "grpc")]
    Grpc,
    /// OTLP over HTTP with protobuf bodies (collectors listen on 4318).
    #[value(name = "http/protobuf")]
    HttpProtobuf,
}

impl Protocol {
    fn parse(text: &str) -> Option<Self> {
        match text.trim() {
            "grpc" => Some(Protocol::Grpc),
            "http/protobuf" => Some(Protocol::HttpProtobuf),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Protocol::Grpc => "grpc",
            Protocol::HttpProtobuf => "http/protobuf",
        }
    }
}

/// The `--otlp.*` flags; each overrides the matching `OTEL_*` variable.
#[derive(Debug, Clone, Default, Args)]
pub struct OtlpArgs {
    /// OTLP collector base URL, as OTEL_EXPORTER_OTLP_ENDPOINT (`/v1/traces` is appended for
    /// http/protobuf). Traces are off unless this or an OTEL_EXPORTER_OTLP_*ENDPOINT is set
    /// [default: none: traces off].
    ///
    /// `http://collector:4318` for http/protobuf, `http://collector:4317` for grpc; it wins over
    /// OTEL_EXPORTER_OTLP_ENDPOINT and OTEL_EXPORTER_OTLP_TRACES_ENDPOINT (docs/traces.md). Log
    /// events go there too (`/v1/logs`) only when OTEL_LOGS_EXPORTER=otlp asks for them
    /// (docs/logs.md); the `--otlp.*` flags apply to both.
    #[arg(long = "otlp.endpoint", env = "AZURE_SCHEDULED_EVENTS_OTLP_ENDPOINT")]
    pub endpoint: Option<String>,
    /// OTLP protocol [default: OTEL_EXPORTER_OTLP_PROTOCOL, else http/protobuf].
    #[arg(long = "otlp.protocol", env = "AZURE_SCHEDULED_EVENTS_OTLP_PROTOCOL")]
    pub protocol: Option<Protocol>,
    /// Headers sent with every export, `key=value,key2=value2` (values percent-encoded), as
    /// OTEL_EXPORTER_OTLP_HEADERS.
    #[arg(long = "otlp.headers", env = "AZURE_SCHEDULED_EVENTS_OTLP_HEADERS")]
    pub headers: Option<String>,
    /// Timeout of one export, retries included; at most 5m [default: OTEL_EXPORTER_OTLP_TIMEOUT,
    /// else 10s].
    #[arg(long = "otlp.timeout", env = "AZURE_SCHEDULED_EVENTS_OTLP_TIMEOUT", value_parser = super::values::duration)]
    pub timeout: Option<Duration>,
    /// Resource attributes as semantic conventions named them before 1.43 (`cloud.platform`
    /// `azure_vm`/`azure_aks`, no `azure.resource_group.name`), for queries not yet moved; kept
    /// for one release [default: none: conventions 1.43].
    ///
    /// The only value is `pre-1.43` (docs/traces.md).
    #[arg(
        long = "otlp.semconv-compat",
        env = "AZURE_SCHEDULED_EVENTS_OTLP_SEMCONV_COMPAT"
    )]
    pub semconv_compat: Option<SemconvCompat>,
}

/// The older semantic conventions `--otlp.semconv-compat` can name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum SemconvCompat {
    /// `cloud.platform` `azure_vm` and `azure_aks`, and no `azure.resource_group.name`: the
    /// Resource as this agent sent it before it followed conventions 1.43.
    #[value(name = "pre-1.43")]
    Pre1_43,
}

/// Where and how to export traces, once resolved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OtlpConfig {
    /// The URL the exporter sends to: for http/protobuf the full traces URL, for gRPC the
    /// collector's address.
    pub endpoint: String,
    pub protocol: Protocol,
    /// Header names and their values as written (still percent-encoded).
    pub headers: Vec<(String, String)>,
    pub timeout: Duration,
    /// `OTEL_SERVICE_NAME`.
    pub service_name: Option<String>,
    /// `OTEL_RESOURCE_ATTRIBUTES`, decoded, in order.
    pub resource_attributes: Vec<(String, String)>,
    pub max_queue_size: usize,
    pub max_export_batch_size: usize,
    pub schedule_delay: Duration,
    /// `OTEL_EXPORTER_OTLP_(TRACES_|LOGS_)COMPRESSION=gzip`.
    pub gzip: bool,
    /// `OTEL_EXPORTER_OTLP_(TRACES_|LOGS_)CERTIFICATE`, `..._CLIENT_CERTIFICATE`, `..._CLIENT_KEY`.
    pub tls: TlsFiles,
    /// `--otlp.semconv-compat`: `None` sends conventions 1.43.
    pub semconv_compat: Option<SemconvCompat>,
}

/// PEM files for TLS to the collector: a private CA, and a client certificate for mutual TLS.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TlsFiles {
    /// CA certificates trusted besides the public roots.
    pub certificate: Option<std::path::PathBuf>,
    pub client_certificate: Option<std::path::PathBuf>,
    pub client_key: Option<std::path::PathBuf>,
}

impl OtlpArgs {
    /// Resolves the flags and the `OTEL_*` variables for traces; `None` when they are off.
    pub fn resolve(&self, env: &impl EnvSource) -> Result<Option<OtlpConfig>, OtlpError> {
        self.resolve_signal(Signal::Traces, env)
    }

    /// Resolves the flags and the `OTEL_*` variables for `signal`; `None` when it is off.
    pub fn resolve_signal(
        &self,
        signal: Signal,
        env: &impl EnvSource,
    ) -> Result<Option<OtlpConfig>, OtlpError> {
        if env
            .var("OTEL_SDK_DISABLED")
            .is_some_and(|v| v.trim().eq_ignore_ascii_case("true"))
            || !signal.wanted(env)?
        {
            return Ok(None);
        }
        let names = signal.variables();
        let protocol = match self.protocol {
            Some(protocol) => protocol,
            None => match first(env, &names.protocol) {
                Some((name, value)) => Protocol::parse(&value).ok_or_else(|| {
                    at(
                        name,
                        "otlp.protocol",
                        format!("{name}={value:?}: use grpc or http/protobuf"),
                    )
                })?,
                None => DEFAULT_PROTOCOL,
            },
        };
        // A flag and the generic variable name a base URL; the signal's variable the whole URL.
        let (source, base, is_base) = match (&self.endpoint, env) {
            (Some(flag), _) if !flag.trim().is_empty() => ("--otlp.endpoint", flag.clone(), true),
            _ => match env.var(names.endpoint) {
                Some(value) => (names.endpoint, value, false),
                None => match env.var("OTEL_EXPORTER_OTLP_ENDPOINT") {
                    Some(value) => ("OTEL_EXPORTER_OTLP_ENDPOINT", value, true),
                    // Log events asked for by name without an endpoint: the specification's
                    // default, a collector on this machine.
                    None if signal == Signal::Logs => (
                        "OTEL_EXPORTER_OTLP_ENDPOINT",
                        default_endpoint(protocol),
                        true,
                    ),
                    None => return Ok(None),
                },
            },
        };
        let url = Url::parse(base.trim())
            .map_err(|e| at(source, "otlp.endpoint", format!("{source}={base:?}: {e}")))?;
        if !matches!(url.scheme(), "http" | "https") || url.host().is_none() {
            return Err(at(
                source,
                "otlp.endpoint",
                format!("{source}={base:?} is not an http:// or https:// URL"),
            ));
        }
        let endpoint = match protocol {
            Protocol::HttpProtobuf if is_base => {
                format!("{}{}", base.trim().trim_end_matches('/'), names.path)
            }
            _ => base.trim().to_owned(),
        };
        // The specification requires gzip and none.
        let gzip = match first(env, &names.compression) {
            None => false,
            Some((_, value)) if value.trim().eq_ignore_ascii_case("gzip") => true,
            Some((_, value)) if value.trim().eq_ignore_ascii_case("none") => false,
            Some((name, value)) => {
                return Err(at(
                    name,
                    "otlp.protocol",
                    format!("{name}={value:?}: compression is gzip or none"),
                ));
            }
        };
        let file = |names: &[&'static str]| {
            first(env, names).map(|(name, v)| (name, std::path::PathBuf::from(v.trim())))
        };
        let client_certificate = file(&names.client_certificate);
        let client_key = file(&names.client_key);
        if let Some((alone, _)) = match (&client_certificate, &client_key) {
            (Some(certificate), None) => Some(certificate),
            (None, Some(key)) => Some(key),
            _ => None,
        } {
            return Err(OtlpError::Variable {
                variable: alone,
                message: format!(
                    "OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE and OTEL_EXPORTER_OTLP_CLIENT_KEY (or their {} forms) go together",
                    signal.infix()
                ),
            });
        }
        let tls = TlsFiles {
            certificate: file(&names.certificate).map(|(_, path)| path),
            client_certificate: client_certificate.map(|(_, path)| path),
            client_key: client_key.map(|(_, path)| path),
        };
        let headers_text = match &self.headers {
            Some(text) => Some(("--otlp.headers", text.clone())),
            None => first(env, &names.headers),
        };
        let headers = match headers_text {
            Some((source, text)) => {
                let headers = key_values(&text, false)
                    .map_err(|e| at(source, "otlp.headers", format!("{source}: {e}")))?;
                if let Some((name, _)) = headers.iter().find(|(name, value)| {
                    reqwest::header::HeaderName::from_bytes(name.as_bytes()).is_err()
                        || reqwest::header::HeaderValue::from_str(&decode_header(value)).is_err()
                }) {
                    return Err(at(
                        source,
                        "otlp.headers",
                        format!("{source}: {name:?} is not a valid header name and value"),
                    ));
                }
                headers
            }
            None => Vec::new(),
        };
        let timeout = match self.timeout {
            Some(timeout) => super::values::bounded("otlp.timeout", timeout, MAX_TIMEOUT)?,
            None => match first(env, &names.timeout) {
                Some((name, value)) => millis(&value)
                    .map_err(|e| at(name, "otlp.timeout", format!("{name}={value:?}: {e}")))?,
                None => DEFAULT_TIMEOUT,
            },
        };
        let resource_attributes = match env.var("OTEL_RESOURCE_ATTRIBUTES") {
            Some(text) => key_values(&text, true).map_err(|e| OtlpError::Variable {
                variable: "OTEL_RESOURCE_ATTRIBUTES",
                message: format!("OTEL_RESOURCE_ATTRIBUTES={text:?}: {e}"),
            })?,
            None => Vec::new(),
        };
        let max_queue_size = count(env, names.max_queue_size, DEFAULT_MAX_QUEUE_SIZE)?;
        let max_export_batch_size = count(
            env,
            names.max_export_batch_size,
            DEFAULT_MAX_EXPORT_BATCH_SIZE,
        )?
        .min(max_queue_size);
        let schedule_delay = match env.var(names.schedule_delay) {
            Some(value) => millis(&value).map_err(|e| OtlpError::Variable {
                variable: names.schedule_delay,
                message: format!("{}={value:?}: {e}", names.schedule_delay),
            })?,
            None => DEFAULT_SCHEDULE_DELAY,
        };
        Ok(Some(OtlpConfig {
            endpoint,
            protocol,
            headers,
            timeout,
            service_name: env.var("OTEL_SERVICE_NAME").map(|s| s.trim().to_owned()),
            resource_attributes,
            max_queue_size,
            max_export_batch_size,
            schedule_delay,
            gzip,
            tls,
            semconv_compat: self.semconv_compat,
        }))
    }
}

/// The specification's endpoint when none is set: a collector on this machine.
fn default_endpoint(protocol: Protocol) -> String {
    match protocol {
        Protocol::Grpc => "http://localhost:4317".to_owned(),
        Protocol::HttpProtobuf => "http://localhost:4318".to_owned(),
    }
}

/// The first of `names` that is set, with its name.
fn first(env: &impl EnvSource, names: &[&'static str]) -> Option<(&'static str, String)> {
    names
        .iter()
        .find_map(|name| env.var(name).map(|value| (*name, value)))
}

fn millis(text: &str) -> Result<Duration, String> {
    match text.trim().parse::<u64>() {
        Ok(0) => Err("must be greater than zero".to_owned()),
        Ok(ms) if Duration::from_millis(ms) > MAX_TIMEOUT => {
            Err("longer than 300000 ms (5m), the most allowed".to_owned())
        }
        Ok(ms) => Ok(Duration::from_millis(ms)),
        Err(_) => Err("not a whole number of milliseconds".to_owned()),
    }
}

fn count(env: &impl EnvSource, name: &'static str, default: usize) -> Result<usize, OtlpError> {
    match env.var(name) {
        None => Ok(default),
        Some(value) => match value.trim().parse::<usize>() {
            Ok(n) if n > 0 => Ok(n),
            _ => Err(OtlpError::Variable {
                variable: name,
                message: format!("{name}={value:?} is not a positive whole number"),
            }),
        },
    }
}

/// `key1=value1,key2=value2` as the W3C Baggage-like format of `OTEL_EXPORTER_OTLP_HEADERS` and
/// `OTEL_RESOURCE_ATTRIBUTES`. Values are percent-decoded when `decode` is set.
fn key_values(text: &str, decode: bool) -> Result<Vec<(String, String)>, String> {
    let mut pairs = Vec::new();
    for item in text.split(',').filter(|item| !item.trim().is_empty()) {
        let Some((key, value)) = item.split_once('=') else {
            return Err(format!("{:?} is not key=value", item.trim()));
        };
        let key = key.trim();
        if key.is_empty() {
            return Err(format!("{:?} has an empty key", item.trim()));
        }
        let value = value.trim();
        let value = if decode {
            percent_encoding::percent_decode_str(value)
                .decode_utf8()
                .map_err(|_| format!("the value of {key} is not UTF-8 once decoded"))?
                .into_owned()
        } else {
            value.to_owned()
        };
        pairs.push((key.to_owned(), value));
    }
    Ok(pairs)
}

/// The headers as HTTP types: names lower case, values percent-decoded. [`OtlpArgs::resolve`]
/// checked that each one is valid.
pub fn http_headers(
    headers: &[(String, String)],
) -> Vec<(reqwest::header::HeaderName, reqwest::header::HeaderValue)> {
    headers
        .iter()
        .filter_map(|(name, value)| {
            Some((
                reqwest::header::HeaderName::from_bytes(name.to_ascii_lowercase().as_bytes())
                    .ok()?,
                reqwest::header::HeaderValue::from_str(&decode_header(value)).ok()?,
            ))
        })
        .collect()
}

/// Percent-decodes a header value, keeping it as written when it does not decode.
pub fn decode_header(value: &str) -> String {
    percent_encoding::percent_decode_str(value)
        .decode_utf8()
        .map(|v| v.into_owned())
        .unwrap_or_else(|_| value.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn resolve(
        args: OtlpArgs,
        env: &[(&'static str, &'static str)],
    ) -> Result<Option<OtlpConfig>, String> {
        let env: HashMap<&str, &str> = env.iter().copied().collect();
        args.resolve(&env).map_err(|e| e.to_string())
    }

    fn flag_endpoint(url: &str) -> OtlpArgs {
        OtlpArgs {
            endpoint: Some(url.to_owned()),
            ..OtlpArgs::default()
        }
    }

    #[test]
    fn traces_are_off_without_an_endpoint() -> Result<(), String> {
        assert_eq!(resolve(OtlpArgs::default(), &[])?, None);
        assert_eq!(
            resolve(
                OtlpArgs::default(),
                &[
                    ("OTEL_SERVICE_NAME", "x"),
                    ("OTEL_EXPORTER_OTLP_ENDPOINT", "")
                ]
            )?,
            None,
            "an empty variable is unset"
        );
        Ok(())
    }

    fn resolve_logs(env: &[(&'static str, &'static str)]) -> Result<Option<OtlpConfig>, String> {
        let env: HashMap<&str, &str> = env.iter().copied().collect();
        OtlpArgs::default()
            .resolve_signal(Signal::Logs, &env)
            .map_err(|e| e.to_string())
    }

    #[test]
    fn the_shared_endpoint_alone_does_not_turn_log_events_on() -> Result<(), String> {
        assert_eq!(
            resolve_logs(&[("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4318")])?,
            None
        );
        assert_eq!(resolve_logs(&[])?, None);
        Ok(())
    }

    #[test]
    fn otel_logs_exporter_otlp_sends_log_events_to_the_shared_endpoint() -> Result<(), String> {
        let config = resolve_logs(&[
            ("OTEL_LOGS_EXPORTER", "otlp"),
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4318/"),
            ("OTEL_EXPORTER_OTLP_TRACES_TIMEOUT", "999"),
            ("OTEL_EXPORTER_OTLP_LOGS_TIMEOUT", "2500"),
            ("OTEL_BSP_MAX_QUEUE_SIZE", "7"),
            ("OTEL_BLRP_MAX_QUEUE_SIZE", "100"),
        ])?
        .ok_or("off")?;
        assert_eq!(config.endpoint, "http://collector:4318/v1/logs");
        assert_eq!(config.timeout, Duration::from_millis(2500));
        assert_eq!(config.max_queue_size, 100, "OTEL_BLRP_*, not OTEL_BSP_*");
        Ok(())
    }

    #[test]
    fn the_logs_endpoint_turns_log_events_on_unless_the_exporter_is_none() -> Result<(), String> {
        let config = resolve_logs(&[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://generic:4318"),
            (
                "OTEL_EXPORTER_OTLP_LOGS_ENDPOINT",
                "https://loki.example/otlp/v1/logs",
            ),
            ("OTEL_EXPORTER_OTLP_LOGS_PROTOCOL", "http/protobuf"),
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"),
        ])?
        .ok_or("off")?;
        assert_eq!(config.endpoint, "https://loki.example/otlp/v1/logs");
        assert_eq!(config.protocol, Protocol::HttpProtobuf);
        assert_eq!(
            resolve_logs(&[
                ("OTEL_LOGS_EXPORTER", "none"),
                ("OTEL_EXPORTER_OTLP_LOGS_ENDPOINT", "http://c:4318/v1/logs"),
            ])?,
            None
        );
        Ok(())
    }

    #[test]
    fn log_events_asked_for_without_an_endpoint_go_to_a_local_collector() -> Result<(), String> {
        let http = resolve_logs(&[("OTEL_LOGS_EXPORTER", "otlp")])?.ok_or("off")?;
        assert_eq!(http.endpoint, "http://localhost:4318/v1/logs");
        let grpc = resolve_logs(&[
            ("OTEL_LOGS_EXPORTER", "otlp"),
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"),
        ])?
        .ok_or("off")?;
        assert_eq!(grpc.endpoint, "http://localhost:4317");
        Ok(())
    }

    #[test]
    fn an_unknown_logs_exporter_is_an_error_of_that_variable() {
        let env: HashMap<&str, &str> = [("OTEL_LOGS_EXPORTER", "console")].into_iter().collect();
        assert!(matches!(
            OtlpArgs::default().resolve_signal(Signal::Logs, &env),
            Err(OtlpError::Variable {
                variable: "OTEL_LOGS_EXPORTER",
                ..
            })
        ));
    }

    #[test]
    fn the_generic_endpoint_gets_the_traces_path_for_http() -> Result<(), String> {
        let config = resolve(
            OtlpArgs::default(),
            &[("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4318/")],
        )?
        .ok_or("off")?;
        assert_eq!(config.endpoint, "http://collector:4318/v1/traces");
        assert_eq!(config.protocol, Protocol::HttpProtobuf);
        assert_eq!(config.timeout, DEFAULT_TIMEOUT);
        Ok(())
    }

    #[test]
    fn the_traces_endpoint_is_used_as_given_and_beats_the_generic_one() -> Result<(), String> {
        let config = resolve(
            OtlpArgs::default(),
            &[
                ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://generic:4318"),
                (
                    "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
                    "https://tempo.example/otlp/traces",
                ),
            ],
        )?
        .ok_or("off")?;
        assert_eq!(config.endpoint, "https://tempo.example/otlp/traces");
        Ok(())
    }

    #[test]
    fn a_flag_beats_every_variable() -> Result<(), String> {
        let args = OtlpArgs {
            endpoint: Some("http://flag:4317".into()),
            protocol: Some(Protocol::Grpc),
            headers: Some("a=1".into()),
            timeout: Some(Duration::from_secs(3)),
            semconv_compat: None,
        };
        let config = resolve(
            args,
            &[
                (
                    "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
                    "http://env:4318/v1/traces",
                ),
                ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf"),
                ("OTEL_EXPORTER_OTLP_HEADERS", "b=2"),
                ("OTEL_EXPORTER_OTLP_TIMEOUT", "500"),
            ],
        )?
        .ok_or("off")?;
        assert_eq!(config.endpoint, "http://flag:4317");
        assert_eq!(config.protocol, Protocol::Grpc);
        assert_eq!(config.headers, [("a".to_owned(), "1".to_owned())]);
        assert_eq!(config.timeout, Duration::from_secs(3));
        Ok(())
    }

    #[test]
    fn traces_specific_variables_beat_generic_ones() -> Result<(), String> {
        let config = resolve(
            flag_endpoint("http://c:4317"),
            &[
                ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf"),
                ("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "grpc"),
                ("OTEL_EXPORTER_OTLP_HEADERS", "generic=1"),
                (
                    "OTEL_EXPORTER_OTLP_TRACES_HEADERS",
                    "authorization=Basic%20abc, x-scope-orgid=ops",
                ),
                ("OTEL_EXPORTER_OTLP_TIMEOUT", "500"),
                ("OTEL_EXPORTER_OTLP_TRACES_TIMEOUT", "2500"),
            ],
        )?
        .ok_or("off")?;
        assert_eq!(config.protocol, Protocol::Grpc);
        assert_eq!(config.endpoint, "http://c:4317", "no path for gRPC");
        assert_eq!(
            config.headers,
            [
                ("authorization".to_owned(), "Basic%20abc".to_owned()),
                ("x-scope-orgid".to_owned(), "ops".to_owned())
            ]
        );
        assert_eq!(decode_header(&config.headers[0].1), "Basic abc");
        assert_eq!(config.timeout, Duration::from_millis(2500));
        Ok(())
    }

    #[test]
    fn otel_sdk_disabled_wins_over_everything() -> Result<(), String> {
        assert_eq!(
            resolve(
                flag_endpoint("http://c:4318"),
                &[("OTEL_SDK_DISABLED", "TRUE")]
            )?,
            None
        );
        assert!(
            resolve(
                flag_endpoint("http://c:4318"),
                &[("OTEL_SDK_DISABLED", "false")]
            )?
            .is_some()
        );
        Ok(())
    }

    #[test]
    fn resource_attributes_and_service_name_are_read_and_decoded() -> Result<(), String> {
        let config = resolve(
            flag_endpoint("http://c:4318"),
            &[
                (
                    "OTEL_RESOURCE_ATTRIBUTES",
                    "deployment.environment.name=prod,team=sre%2Con-call",
                ),
                ("OTEL_SERVICE_NAME", "se-agent"),
            ],
        )?
        .ok_or("off")?;
        assert_eq!(
            config.resource_attributes,
            [
                ("deployment.environment.name".to_owned(), "prod".to_owned()),
                ("team".to_owned(), "sre,on-call".to_owned())
            ]
        );
        assert_eq!(config.service_name.as_deref(), Some("se-agent"));
        Ok(())
    }

    #[test]
    fn a_bad_variable_is_an_error_of_that_variable_and_a_bad_flag_one_of_the_flag() {
        let env: HashMap<&str, &str> = [
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c"),
            ("OTEL_EXPORTER_OTLP_TRACES_TIMEOUT", "soon"),
        ]
        .into_iter()
        .collect();
        assert!(matches!(
            OtlpArgs::default().resolve(&env),
            Err(OtlpError::Variable {
                variable: "OTEL_EXPORTER_OTLP_TRACES_TIMEOUT",
                ..
            })
        ));
        assert!(matches!(
            flag_endpoint("collector:4318").resolve(&env),
            Err(OtlpError::Flag(ConfigError {
                flag: "otlp.endpoint",
                ..
            }))
        ));
    }

    #[test]
    fn invalid_values_name_their_source() {
        for (args, env, needle) in [
            (flag_endpoint("collector:4318"), vec![], "--otlp.endpoint"),
            (
                OtlpArgs::default(),
                vec![("OTEL_EXPORTER_OTLP_ENDPOINT", "ftp://c")],
                "OTEL_EXPORTER_OTLP_ENDPOINT",
            ),
            (
                flag_endpoint("http://c"),
                vec![("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json")],
                "OTEL_EXPORTER_OTLP_PROTOCOL",
            ),
            (
                flag_endpoint("http://c"),
                vec![("OTEL_EXPORTER_OTLP_HEADERS", "novalue")],
                "OTEL_EXPORTER_OTLP_HEADERS",
            ),
            (
                flag_endpoint("http://c"),
                vec![("OTEL_EXPORTER_OTLP_HEADERS", "bad name=1")],
                "OTEL_EXPORTER_OTLP_HEADERS",
            ),
            (
                flag_endpoint("http://c"),
                vec![("OTEL_EXPORTER_OTLP_TRACES_HEADERS", "novalue")],
                "OTEL_EXPORTER_OTLP_TRACES_HEADERS",
            ),
            (
                flag_endpoint("http://c"),
                vec![("OTEL_EXPORTER_OTLP_TIMEOUT", "10s")],
                "OTEL_EXPORTER_OTLP_TIMEOUT",
            ),
            (
                flag_endpoint("http://c"),
                vec![("OTEL_RESOURCE_ATTRIBUTES", "=x")],
                "OTEL_RESOURCE_ATTRIBUTES",
            ),
            (
                flag_endpoint("http://c"),
                vec![("OTEL_BSP_MAX_QUEUE_SIZE", "0")],
                "OTEL_BSP_MAX_QUEUE_SIZE",
            ),
            (
                flag_endpoint("http://c"),
                vec![("OTEL_EXPORTER_OTLP_COMPRESSION", "zstd")],
                "OTEL_EXPORTER_OTLP_COMPRESSION",
            ),
            (
                flag_endpoint("http://c"),
                vec![("OTEL_EXPORTER_OTLP_TRACES_COMPRESSION", "brotli")],
                "OTEL_EXPORTER_OTLP_TRACES_COMPRESSION",
            ),
        ] {
            match resolve(args, &env) {
                Ok(config) => panic!("{env:?} accepted: {config:?}"),
                Err(e) => assert!(e.contains(needle), "{env:?}: {e}"),
            }
        }
    }
}
