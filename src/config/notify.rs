//! The notification settings: receivers from `--notify.webhook-url` and the receivers file
//! (`--notify.config-file`, YAML), each with its URL (or a file holding it), format, template,
//! headers and filters, resolved and checked at startup. A template that does not parse, or
//! that names a field a notification does not have, is an invalid setting like any other.
//!
//! Settings only: sending is [`crate::output::notify`]'s job.

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use clap::Args;
use reqwest::Url;
use reqwest::header::{HeaderName, HeaderValue};
use serde::Deserialize;

use azure_scheduled_events_core::event::{EventSource, EventType};
use azure_scheduled_events_core::notices::{Filter, Recipient};
use azure_scheduled_events_core::subject::Subject;
use azure_scheduled_events_core::view::EVENT_FIELDS;

use super::values::{ConfigError, duration, invalid, one_line};
use super::values::{EventTypes, list};
use crate::config::file_input;

/// Where PagerDuty's Events API v2 takes events.
pub const PAGERDUTY_URL: &str = "https://events.pagerduty.com/v2/enqueue";

/// How often an Alertmanager receiver re-sends its active alerts unless it says otherwise:
/// Prometheus' resend delay.
pub const DEFAULT_RESEND_INTERVAL: Duration = Duration::from_secs(60);

/// Where an alert's `runbook_url` points unless a receiver says otherwise: the runbook's section
/// on the agent's own alerts, at the base the monitoring mixin uses (`runbookUrlBase`).
pub const DEFAULT_RUNBOOK_URL: &str = concat!(
    env!("CARGO_PKG_REPOSITORY"),
    "/blob/main/docs/runbook.md#azurescheduledevent"
);

/// Time one delivery attempt has, unless a receiver says otherwise.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(5);

/// The fields of every notification: the event's view, as in the event's log line
/// ([`EVENT_FIELDS`]), with `timestamp`, `transition` and `summary` before it and `changed`,
/// `seen_started` and `hardware_failure_predicted` after. A template may use these and
/// `receiver`, nothing else.
pub const FIELDS: [&str; 22] = notification_fields();

const fn notification_fields() -> [&'static str; 22] {
    let mut fields = [""; 22];
    fields[0] = "timestamp";
    fields[1] = "transition";
    fields[2] = "summary";
    let mut i = 0;
    while i < EVENT_FIELDS.len() {
        fields[3 + i] = EVENT_FIELDS[i];
        i += 1;
    }
    fields[19] = "changed";
    fields[20] = "seen_started";
    fields[21] = "hardware_failure_predicted";
    fields
}

/// Transitions sent when a receiver lists none: the lifecycle without `updated` (a NotBefore
/// moving is news for dashboards, not for a chat channel) and without approvals.
const DEFAULT_TRANSITIONS: [Subject; 4] = [
    Subject::Scheduled,
    Subject::Started,
    Subject::Completed,
    Subject::Cancelled,
];

/// What an `alertmanager` receiver gets, always: the whole lifecycle, `updated` included (the
/// alert's annotations follow the event); an approval is no alert.
const ALERT_TRANSITIONS: [Subject; 5] = [
    Subject::Scheduled,
    Subject::Started,
    Subject::Updated,
    Subject::Completed,
    Subject::Cancelled,
];

fn default_transitions(format: Format) -> Vec<Subject> {
    match format {
        Format::Alertmanager => ALERT_TRANSITIONS.to_vec(),
        _ => DEFAULT_TRANSITIONS.to_vec(),
    }
}

/// The `--notify.*` flags.
#[derive(Debug, Clone, Args)]
pub struct NotifyArgs {
    /// POST each transition of this VM's events as generic JSON to this URL; repeatable or
    /// comma-separated.
    ///
    /// The transitions scheduled, started, completed and cancelled (docs/notifications.md).
    #[arg(
        long = "notify.webhook-url",
        env = "AZURE_SCHEDULED_EVENTS_NOTIFY_WEBHOOK_URL",
        value_name = "URLS"
    )]
    pub webhook_urls: Vec<String>,
    /// Receivers file (YAML): named receivers with format (json, slack, teams, pagerduty,
    /// alertmanager), URL or url_file, template, headers and filters (docs/notifications.md).
    ///
    /// `teams` is a Workflows webhook (Adaptive Card), `pagerduty` Events v2 (one incident per
    /// EventId), `alertmanager` its API v2 (one alert per event and VM, `urls` for an HA
    /// cluster).
    #[arg(
        id = "notify.config-file",
        long = "notify.config-file",
        env = "AZURE_SCHEDULED_EVENTS_NOTIFY_CONFIG_FILE"
    )]
    pub config_file: Option<PathBuf>,
}

/// How a receiver wants its body.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Format {
    /// The generic body: the log line's fields.
    Json,
    /// A Slack incoming webhook: `text` and `blocks`.
    Slack,
    /// A Microsoft Teams Workflows webhook: a message with an Adaptive Card.
    Teams,
    /// PagerDuty Events API v2: trigger, then resolve.
    Pagerduty,
    /// Alertmanager's API (`/api/v2/alerts`): one alert per event and VM, re-sent while active.
    Alertmanager,
}

impl Format {
    pub fn as_str(self) -> &'static str {
        match self {
            Format::Json => "json",
            Format::Slack => "slack",
            Format::Teams => "teams",
            Format::Pagerduty => "pagerduty",
            Format::Alertmanager => "alertmanager",
        }
    }
}

/// PagerDuty's and Alertmanager's severities, in their order.
pub const SEVERITIES: [&str; 4] = ["critical", "error", "warning", "info"];

/// The severity of an event of `event_type` for a receiver whose `severities` override the
/// paging policy (docs/runbook.md): one VM's event is never `critical`; a Spot eviction (Preempt)
/// is `info`, as is an `advisory` ([`azure_scheduled_events_core::event::Event::is_advisory`]) whatever is configured;
/// every other type is `warning`.
pub fn severity(
    severities: &BTreeMap<String, &'static str>,
    event_type: &str,
    advisory: bool,
) -> &'static str {
    if advisory {
        return "info";
    }
    if let Some(severity) = severities
        .iter()
        .find(|(name, _)| name.eq_ignore_ascii_case(event_type))
        .map(|(_, severity)| *severity)
    {
        return severity;
    }
    match EventType::parse(event_type) {
        EventType::Preempt => "info",
        _ => "warning",
    }
}

/// PagerDuty's `dedup_key`: one incident per event (all its VMs), or one per event and VM.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Dedup {
    #[default]
    Event,
    EventAndVm,
}

/// A template, checked at startup.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TemplateSource {
    pub path: PathBuf,
    pub text: String,
}

/// One receiver, resolved.
#[derive(Clone)]
pub struct Receiver {
    pub name: String,
    pub format: Format,
    /// May hold a secret (Slack's and Teams' URLs do): never logged whole.
    pub url: Url,
    pub headers: Vec<(HeaderName, HeaderValue)>,
    /// For `json`, the whole body; for the others, the message text.
    pub template: Option<TemplateSource>,
    /// PagerDuty's integration key.
    pub routing_key: Option<String>,
    /// Extra certificate authority (PEM) trusted for this receiver.
    pub ca_pem: Option<Vec<u8>>,
    pub timeout: Duration,
    pub filter: Filter,
    /// `alertmanager`: every Alertmanager of the cluster (`url` is the first); each gets every
    /// alert.
    pub urls: Vec<Url>,
    /// `alertmanager`: how often active alerts are re-sent.
    pub resend_interval: Duration,
    /// `alertmanager`: the alerts' `runbook_url`.
    pub runbook_url: String,
    /// `alertmanager`, `pagerduty`: severity by event type, over the paging policy's.
    pub severities: BTreeMap<String, &'static str>,
    /// `pagerduty`: one incident per event (the default) or per event and VM.
    pub dedup_key: Dedup,
}

impl Receiver {
    /// A receiver of `format` at `url` with every other setting at its default.
    pub fn new(name: &str, format: Format, url: Url) -> Self {
        Self {
            name: name.to_owned(),
            format,
            urls: vec![url.clone()],
            url,
            headers: Vec::new(),
            template: None,
            routing_key: None,
            ca_pem: None,
            timeout: DEFAULT_TIMEOUT,
            filter: Filter {
                transitions: default_transitions(format),
                event_types: Vec::new(),
                event_sources: Vec::new(),
                this_vm_only: true,
                replay: format == Format::Alertmanager,
            },
            resend_interval: DEFAULT_RESEND_INTERVAL,
            runbook_url: DEFAULT_RUNBOOK_URL.to_owned(),
            severities: BTreeMap::new(),
            dedup_key: Dedup::Event,
        }
    }

    /// The URL without path, query or credentials: what logs may show.
    pub fn endpoint(&self) -> String {
        format!(
            "{}://{}{}",
            self.url.scheme(),
            self.url.host_str().unwrap_or(""),
            self.url.port().map(|p| format!(":{p}")).unwrap_or_default()
        )
    }
}

impl fmt::Debug for Receiver {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Receiver")
            .field("name", &self.name)
            .field("format", &self.format)
            .field("endpoint", &self.endpoint())
            .field("headers", &self.headers.len())
            .field("template", &self.template.as_ref().map(|t| &t.path))
            .field("timeout", &self.timeout)
            .field("filter", &self.filter)
            .finish_non_exhaustive()
    }
}

/// Every receiver; empty when notifications are off.
#[derive(Debug, Clone, Default)]
pub struct NotifyConfig {
    pub receivers: Vec<Receiver>,
}

impl NotifyConfig {
    pub fn is_enabled(&self) -> bool {
        !self.receivers.is_empty()
    }

    /// The receivers as the core knows them: each one's name and filter.
    pub fn recipients(&self) -> Vec<Recipient> {
        self.receivers
            .iter()
            .map(|receiver| Recipient {
                name: receiver.name.clone(),
                filter: receiver.filter.clone(),
            })
            .collect()
    }
}

/// The receivers file.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    #[serde(default)]
    receivers: Vec<FileReceiver>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileReceiver {
    name: String,
    #[serde(default = "json")]
    format: Format,
    url: Option<String>,
    urls: Option<Vec<String>>,
    url_file: Option<PathBuf>,
    resend_interval: Option<String>,
    runbook_url: Option<String>,
    #[serde(default)]
    severities: BTreeMap<String, String>,
    dedup_key: Option<Dedup>,
    template_file: Option<PathBuf>,
    #[serde(default)]
    headers: BTreeMap<String, HeaderSource>,
    routing_key: Option<String>,
    routing_key_file: Option<PathBuf>,
    ca_file: Option<PathBuf>,
    timeout: Option<String>,
    transitions: Option<Vec<String>>,
    #[serde(default)]
    event_types: Vec<String>,
    #[serde(default)]
    event_sources: Vec<String>,
    #[serde(default = "yes")]
    this_vm_only: bool,
}

fn json() -> Format {
    Format::Json
}

fn yes() -> bool {
    true
}

/// A header's value, given or read from a file.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum HeaderSource {
    Value(String),
    File { value_file: PathBuf },
}

const FILE_FLAG: &str = "notify.config-file";

impl NotifyArgs {
    pub(super) fn validate(self) -> Result<NotifyConfig, ConfigError> {
        let mut receivers = Vec::new();
        let urls = self.webhook_urls.iter().flat_map(|given| list(given));
        for (index, url) in urls.enumerate() {
            receivers.push(Receiver::new(
                &format!("webhook-{}", index + 1),
                Format::Json,
                parse_url(url).map_err(|reason| invalid("notify.webhook-url", reason))?,
            ));
        }
        if let Some(path) = &self.config_file {
            let text = file_input::read_to_string(path, file_input::NOTIFY_RECEIVERS)
                .map_err(|e| invalid(FILE_FLAG, format!("{}: {e}", path.display())))?;
            let file: File = serde_norway::from_str(&text)
                .map_err(|e| invalid(FILE_FLAG, one_line(&format!("{}: {e}", path.display()))))?;
            for receiver in file.receivers {
                let name = receiver.name.clone();
                let resolved = receiver.resolve().map_err(|reason| {
                    invalid(
                        FILE_FLAG,
                        one_line(&format!("{}: receiver {name:?}: {reason}", path.display())),
                    )
                })?;
                receivers.push(resolved);
            }
        }
        let mut names: Vec<&str> = receivers.iter().map(|r| r.name.as_str()).collect();
        names.sort_unstable();
        if let Some(pair) = names.windows(2).find(|pair| pair[0] == pair[1]) {
            return Err(invalid(
                FILE_FLAG,
                format!("two receivers are named {:?}", pair[0]),
            ));
        }
        Ok(NotifyConfig { receivers })
    }
}

impl FileReceiver {
    fn resolve(self) -> Result<Receiver, String> {
        let name = self.name.trim().to_owned();
        if name.is_empty()
            || !name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        {
            return Err("name must be letters, digits, '-', '_' or '.'".into());
        }
        let alertmanager = self.format == Format::Alertmanager;
        let urls = match (self.url, self.urls, &self.url_file, self.format) {
            (Some(_), Some(_), _, _) | (Some(_), _, Some(_), _) | (_, Some(_), Some(_), _) => {
                return Err("give one of url, urls and url_file".into());
            }
            (None, Some(_), None, format) if format != Format::Alertmanager => {
                return Err("urls is for format alertmanager only".into());
            }
            (None, Some(urls), None, _) if urls.is_empty() => {
                return Err("urls is empty".into());
            }
            (None, Some(urls), None, _) => urls,
            (Some(url), None, None, _) => vec![url],
            (None, None, Some(path), _) => vec![read_secret(path)?],
            (None, None, None, Format::Pagerduty) => vec![PAGERDUTY_URL.to_owned()],
            (None, None, None, _) => return Err("url or url_file is required".into()),
        };
        let urls = urls
            .iter()
            .map(|url| parse_url(url))
            .collect::<Result<Vec<_>, _>>()?;
        let urls = if alertmanager {
            urls.into_iter()
                .map(alerts_endpoint)
                .collect::<Result<Vec<_>, _>>()?
        } else {
            urls
        };
        let Some(url) = urls.first().cloned() else {
            return Err("url or url_file is required".into());
        };
        if !alertmanager && (self.resend_interval.is_some() || self.runbook_url.is_some()) {
            return Err("resend_interval and runbook_url are for format alertmanager only".into());
        }
        if self.format != Format::Pagerduty && self.dedup_key.is_some() {
            return Err("dedup_key is for format pagerduty only".into());
        }
        if !matches!(self.format, Format::Pagerduty | Format::Alertmanager)
            && !self.severities.is_empty()
        {
            return Err("severities is for formats pagerduty and alertmanager only".into());
        }
        if alertmanager && (self.template_file.is_some() || self.transitions.is_some()) {
            return Err(
                "an alertmanager receiver takes no template_file nor transitions: its alerts follow the whole lifecycle".into(),
            );
        }
        let mut severities = BTreeMap::new();
        for (event_type, severity) in &self.severities {
            let event_type = EventType::parse_known(event_type)
                .map_err(|e| format!("severities: event type {e}"))?;
            let severity = SEVERITIES
                .iter()
                .find(|known| known.eq_ignore_ascii_case(severity.trim()))
                .copied()
                .ok_or_else(|| {
                    format!(
                        "severities: {severity:?} is not one of {}",
                        SEVERITIES.join(", ")
                    )
                })?;
            severities.insert(event_type.as_str().to_owned(), severity);
        }
        let resend_interval = match self.resend_interval {
            None => DEFAULT_RESEND_INTERVAL,
            Some(text) => match duration(&text) {
                Ok(value) if !value.is_zero() => value,
                Ok(_) => return Err("resend_interval must be greater than zero".into()),
                Err(e) => return Err(format!("resend_interval: {e}")),
            },
        };
        let runbook_url = match self.runbook_url {
            None => DEFAULT_RUNBOOK_URL.to_owned(),
            Some(text) => parse_url(&text)
                .map_err(|reason| format!("runbook_url: {reason}"))?
                .to_string(),
        };
        let routing_key = match (self.routing_key, &self.routing_key_file) {
            (Some(_), Some(_)) => {
                return Err("give routing_key or routing_key_file, not both".into());
            }
            (Some(key), None) => Some(key),
            (None, Some(path)) => Some(read_secret(path)?),
            (None, None) => None,
        };
        match (self.format, &routing_key) {
            (Format::Pagerduty, None) => {
                return Err("format pagerduty needs routing_key or routing_key_file".into());
            }
            (Format::Pagerduty, Some(key)) if key.trim().is_empty() => {
                return Err("routing_key is empty".into());
            }
            (Format::Json | Format::Slack | Format::Teams | Format::Alertmanager, Some(_)) => {
                return Err("routing_key is for format pagerduty only".into());
            }
            _ => {}
        }
        let mut headers = Vec::new();
        for (header, source) in self.headers {
            let value = match source {
                HeaderSource::Value(value) => value,
                HeaderSource::File { value_file } => read_secret(&value_file)?,
            };
            let header_name = HeaderName::from_bytes(header.as_bytes())
                .map_err(|_| format!("{header:?} is not a header name"))?;
            let mut header_value = HeaderValue::from_str(&value)
                .map_err(|_| format!("the value of header {header:?} is not valid in HTTP"))?;
            header_value.set_sensitive(true);
            headers.push((header_name, header_value));
        }
        let template = self
            .template_file
            .map(|path| {
                let text = file_input::read_to_string(&path, file_input::NOTIFY_RECEIVERS)
                    .map_err(|e| format!("template_file {}: {e}", path.display()))?;
                check_template(&text)
                    .map_err(|problem| format!("template_file {}: {problem}", path.display()))?;
                Ok::<_, String>(TemplateSource { path, text })
            })
            .transpose()?;
        let ca_pem = self
            .ca_file
            .map(|path| {
                let pem = file_input::read(&path, file_input::NOTIFY_RECEIVERS)
                    .map_err(|e| format!("ca_file {}: {e}", path.display()))?;
                reqwest::Certificate::from_pem(&pem)
                    .map_err(|e| format!("ca_file {}: {e}", path.display()))?;
                Ok::<_, String>(pem)
            })
            .transpose()?;
        let timeout = match self.timeout {
            None => DEFAULT_TIMEOUT,
            Some(text) => match duration(&text) {
                Ok(value) if value > Duration::from_secs(300) => {
                    return Err("timeout must be at most 5m".into());
                }
                Ok(value) if !value.is_zero() => value,
                Ok(_) => return Err("timeout must be greater than zero".into()),
                Err(e) => return Err(format!("timeout: {e}")),
            },
        };
        let transitions = match self.transitions {
            None => default_transitions(self.format),
            Some(listed) => listed
                .iter()
                .map(|t| {
                    Subject::ALL
                        .into_iter()
                        .find(|known| known.as_str().eq_ignore_ascii_case(t.trim()))
                        .ok_or_else(|| {
                            let known: Vec<&str> = Subject::ALL.map(Subject::as_str).to_vec();
                            format!("transition {t:?} is not one of {}", known.join(", "))
                        })
                })
                .collect::<Result<_, _>>()?,
        };
        let event_types = EventTypes::from_names(self.event_types.iter().map(String::as_str))
            .map_err(|e| format!("event type {e}"))?
            .into_vec();
        let event_sources = self
            .event_sources
            .iter()
            .map(|name| EventSource::parse_known(name).map_err(|e| format!("event source {e}")))
            .collect::<Result<_, _>>()?;
        Ok(Receiver {
            name,
            format: self.format,
            url,
            headers,
            template,
            routing_key,
            ca_pem,
            timeout,
            filter: Filter {
                transitions,
                event_types,
                event_sources,
                this_vm_only: self.this_vm_only,
                replay: alertmanager,
            },
            urls,
            resend_interval,
            runbook_url,
            severities,
            dedup_key: self.dedup_key.unwrap_or_default(),
        })
    }
}

/// An http:// or https:// URL with a host. The URL itself is not repeated: it may be a secret.
fn parse_url(text: &str) -> Result<Url, String> {
    let url = Url::parse(text.trim()).map_err(|e| format!("not a URL: {e}"))?;
    if !matches!(url.scheme(), "http" | "https") || url.host().is_none() {
        return Err("not an http:// or https:// URL".into());
    }
    Ok(url)
}

/// Alertmanager's alerts endpoint under the base URL `base` (which may have a path prefix, as
/// behind a proxy or with `--web.route-prefix`).
fn alerts_endpoint(base: Url) -> Result<Url, String> {
    let mut url = base;
    if url.query().is_some() || url.fragment().is_some() {
        return Err("an Alertmanager URL has no query nor fragment".into());
    }
    let path = format!("{}/api/v2/alerts", url.path().trim_end_matches('/'));
    url.set_path(&path);
    Ok(url)
}

/// A file's content without the trailing newline that editors add.
fn read_secret(path: &Path) -> Result<String, String> {
    let text = file_input::read_to_string(path, file_input::NOTIFY_RECEIVERS)
        .map_err(|e| format!("{}: {e}", path.display()))?;
    let text = text.trim();
    if text.is_empty() {
        return Err(format!("{} is empty", path.display()));
    }
    Ok(text.to_owned())
}

/// The template engine as notifications use it: an undefined value is an error, not an empty
/// string, so a misspelt field never sends a blank message.
pub fn template_environment() -> minijinja::Environment<'static> {
    let mut environment = minijinja::Environment::new();
    environment.set_undefined_behavior(minijinja::UndefinedBehavior::Strict);
    environment
}

/// Parses `text` and checks that it names only the fields a notification has.
fn check_template(text: &str) -> Result<(), String> {
    let environment = template_environment();
    let template = environment
        .template_from_str(text)
        .map_err(|e| one_line(&e.to_string()))?;
    let globals: Vec<String> = environment
        .globals()
        .map(|(name, _)| name.to_string())
        .collect();
    let mut unknown: Vec<String> = template
        .undeclared_variables(false)
        .into_iter()
        .filter(|name| {
            name != "receiver" && !FIELDS.contains(&name.as_str()) && !globals.contains(name)
        })
        .collect();
    unknown.sort();
    match unknown.first() {
        Some(name) => Err(format!(
            "unknown field {name:?} (fields: receiver, {})",
            FIELDS.join(", ")
        )),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn webhook_urls_are_a_list_given_once_or_repeated() -> Result<(), ConfigError> {
        let args = NotifyArgs {
            webhook_urls: vec![
                "http://a.example/, ,http://b.example/".into(),
                "http://c.example/".into(),
            ],
            config_file: None,
        };
        let names: Vec<String> = args
            .validate()?
            .receivers
            .into_iter()
            .map(|r| format!("{} {}", r.name, r.url))
            .collect();
        assert_eq!(
            names,
            [
                "webhook-1 http://a.example/",
                "webhook-2 http://b.example/",
                "webhook-3 http://c.example/"
            ]
        );
        Ok(())
    }

    #[test]
    fn a_template_may_name_only_notification_fields() {
        assert_eq!(
            check_template("{{ event_type }} on {{ vm_name }} ({{ receiver }}) {{ range(2) }}"),
            Ok(())
        );
        let unknown = check_template("{{ event_typ }}").err().unwrap_or_default();
        assert!(unknown.contains("unknown field \"event_typ\""), "{unknown}");
        let broken = check_template("{{ event_type ").err().unwrap_or_default();
        assert!(broken.contains("syntax error"), "{broken}");
        assert!(!broken.contains('\n'), "{broken}");
    }

    #[test]
    fn the_documented_templates_are_valid() {
        let docs = include_str!("../../docs/notifications.md");
        let templates: Vec<&str> = docs
            .split("```jinja\n")
            .skip(1)
            .filter_map(|block| block.split("```").next())
            .collect();
        assert_eq!(templates.len(), 2);
        for template in templates {
            assert_eq!(check_template(template), Ok(()), "{template}");
        }
    }

    #[test]
    fn the_default_runbook_url_is_the_mixins_base_and_a_runbook_section() {
        let mixin = include_str!("../../mixin/config.libsonnet");
        let (base, section) = DEFAULT_RUNBOOK_URL
            .split_once('#')
            .unwrap_or((DEFAULT_RUNBOOK_URL, ""));
        assert!(
            mixin.contains(&format!("runbookUrlBase: '{base}#'")),
            "{base} is not the mixin's runbookUrlBase"
        );
        let runbook = include_str!("../../docs/runbook.md");
        assert!(
            runbook
                .lines()
                .filter_map(|l| l.strip_prefix("## "))
                .any(|heading| heading.to_ascii_lowercase().replace(' ', "-") == section),
            "docs/runbook.md has no section #{section}"
        );
    }

    #[test]
    fn alertmanager_and_pagerduty_settings_are_checked() {
        let resolve = |yaml: &str| {
            serde_norway::from_str::<FileReceiver>(yaml)
                .map_err(|e| e.to_string())
                .and_then(FileReceiver::resolve)
        };
        let am = resolve(
            "name: am\nformat: alertmanager\nurls: [http://a:9093, 'http://b:9093/am/']\nseverities: {reboot: Critical}",
        );
        let am = am.unwrap_or_else(|e| panic!("{e}"));
        let urls: Vec<&str> = am.urls.iter().map(|u| u.as_str()).collect();
        assert_eq!(
            urls,
            [
                "http://a:9093/api/v2/alerts",
                "http://b:9093/am/api/v2/alerts"
            ]
        );
        assert_eq!(am.severities.get("Reboot"), Some(&"critical"));
        assert_eq!(am.resend_interval, DEFAULT_RESEND_INTERVAL);
        assert!(am.filter.replay);
        assert!(am.filter.transitions.contains(&Subject::Updated));
        for (yaml, problem) in [
            (
                "name: x\nformat: slack\nurls: [http://a]",
                "urls is for format alertmanager only",
            ),
            (
                "name: x\nformat: alertmanager\nurl: http://a\ntransitions: [scheduled]",
                "no template_file nor transitions",
            ),
            (
                "name: x\nformat: alertmanager\nurl: http://a\nresend_interval: 0s",
                "greater than zero",
            ),
            ("name: x\nformat: alertmanager\nurls: []", "urls is empty"),
            (
                "name: x\nformat: pagerduty\nrouting_key: k\nseverities: {Reboot: loud}",
                "not one of critical",
            ),
            (
                "name: x\nformat: json\nurl: http://a\ndedup_key: event",
                "pagerduty only",
            ),
        ] {
            let error = resolve(yaml).err().unwrap_or_default();
            assert!(error.contains(problem), "{yaml}: {error}");
        }
        let pd = resolve("name: pd\nformat: pagerduty\nrouting_key: k")
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(pd.dedup_key, Dedup::Event);
        assert!(
            !pd.filter.transitions.contains(&Subject::Advisory),
            "an advisory never opens an incident by default"
        );
    }

    #[test]
    fn loop_variables_are_not_unknown_fields() {
        assert_eq!(
            check_template("{% for r in resources.split(',') %}{{ r }}{% endfor %}"),
            Ok(())
        );
    }
}
