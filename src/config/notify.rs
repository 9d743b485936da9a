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

use super::{ConfigError, duration, invalid, one_line};
use crate::event::{EventSource, EventType};
use crate::view::EventView;

/// Where PagerDuty's Events API v2 takes events.
pub const PAGERDUTY_URL: &str = "https://events.pagerduty.com/v2/enqueue";

/// Time one delivery attempt has, unless a receiver says otherwise.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(5);

/// The fields of every notification: the event's view, as in the event's log line
/// ([`EventView::FIELDS`]), with `timestamp` and `transition` before it and `changed` and
/// `seen_started` after. A template may use these and `receiver`, nothing else.
pub const FIELDS: [&str; 18] = notification_fields();

const fn notification_fields() -> [&'static str; 18] {
    let mut fields = [""; 18];
    fields[0] = "timestamp";
    fields[1] = "transition";
    let mut i = 0;
    while i < EventView::FIELDS.len() {
        fields[2 + i] = EventView::FIELDS[i];
        i += 1;
    }
    fields[16] = "changed";
    fields[17] = "seen_started";
    fields
}

/// What a notification can be about: the lifecycle transitions, and approvals.
pub const TRANSITIONS: [&str; 6] = [
    "scheduled",
    "started",
    "updated",
    "completed",
    "cancelled",
    "approved",
];

/// Transitions sent when a receiver lists none: the lifecycle without `updated` (a NotBefore
/// moving is news for dashboards, not for a chat channel) and without approvals.
const DEFAULT_TRANSITIONS: [&str; 4] = ["scheduled", "started", "completed", "cancelled"];

/// The `--notify.*` flags.
#[derive(Debug, Clone, Args)]
pub struct NotifyArgs {
    /// POST each transition of this VM's events as generic JSON to this URL; repeatable.
    #[arg(
        long = "notify.webhook-url",
        env = "AZURE_SCHEDULED_EVENTS_NOTIFY_WEBHOOK_URL",
        value_delimiter = ','
    )]
    pub webhook_urls: Vec<String>,
    /// Receivers file (YAML): named receivers with format (json, slack, teams, pagerduty), URL or
    /// url_file, template, headers and filters (docs/notifications.md).
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
}

impl Format {
    pub fn as_str(self) -> &'static str {
        match self {
            Format::Json => "json",
            Format::Slack => "slack",
            Format::Teams => "teams",
            Format::Pagerduty => "pagerduty",
        }
    }
}

/// Which notifications a receiver gets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Filter {
    /// Values of [`TRANSITIONS`].
    pub transitions: Vec<&'static str>,
    /// Empty: every type.
    pub event_types: Vec<EventType>,
    /// Empty: every source.
    pub event_sources: Vec<EventSource>,
    /// Only events whose `Resources` name this VM (the default).
    pub this_vm_only: bool,
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
}

impl Receiver {
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
    url_file: Option<PathBuf>,
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
        for (index, url) in self.webhook_urls.iter().enumerate() {
            let url = url.trim();
            if url.is_empty() {
                continue;
            }
            receivers.push(Receiver {
                name: format!("webhook-{}", index + 1),
                format: Format::Json,
                url: parse_url(url).map_err(|reason| invalid("notify.webhook-url", reason))?,
                headers: Vec::new(),
                template: None,
                routing_key: None,
                ca_pem: None,
                timeout: DEFAULT_TIMEOUT,
                filter: Filter {
                    transitions: DEFAULT_TRANSITIONS.to_vec(),
                    event_types: Vec::new(),
                    event_sources: Vec::new(),
                    this_vm_only: true,
                },
            });
        }
        if let Some(path) = &self.config_file {
            let text = std::fs::read_to_string(path)
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
        let url = match (self.url, &self.url_file, self.format) {
            (Some(_), Some(_), _) => return Err("give url or url_file, not both".into()),
            (Some(url), None, _) => url,
            (None, Some(path), _) => read_secret(path)?,
            (None, None, Format::Pagerduty) => PAGERDUTY_URL.to_owned(),
            (None, None, _) => return Err("url or url_file is required".into()),
        };
        let url = parse_url(&url)?;
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
            (Format::Json | Format::Slack | Format::Teams, Some(_)) => {
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
                let text = std::fs::read_to_string(&path)
                    .map_err(|e| format!("template_file {}: {e}", path.display()))?;
                check_template(&text)
                    .map_err(|problem| format!("template_file {}: {problem}", path.display()))?;
                Ok::<_, String>(TemplateSource { path, text })
            })
            .transpose()?;
        let ca_pem = self
            .ca_file
            .map(|path| {
                let pem =
                    std::fs::read(&path).map_err(|e| format!("ca_file {}: {e}", path.display()))?;
                reqwest::Certificate::from_pem(&pem)
                    .map_err(|e| format!("ca_file {}: {e}", path.display()))?;
                Ok::<_, String>(pem)
            })
            .transpose()?;
        let timeout = match self.timeout {
            None => DEFAULT_TIMEOUT,
            Some(text) => match duration(&text) {
                Ok(value) if !value.is_zero() => value,
                Ok(_) => return Err("timeout must be greater than zero".into()),
                Err(e) => return Err(format!("timeout: {e}")),
            },
        };
        let transitions = match self.transitions {
            None => DEFAULT_TRANSITIONS.to_vec(),
            Some(listed) => listed
                .iter()
                .map(|t| {
                    TRANSITIONS
                        .iter()
                        .find(|known| known.eq_ignore_ascii_case(t.trim()))
                        .copied()
                        .ok_or_else(|| {
                            format!("transition {t:?} is not one of {}", TRANSITIONS.join(", "))
                        })
                })
                .collect::<Result<_, _>>()?,
        };
        let event_types = self
            .event_types
            .iter()
            .map(|name| EventType::parse_known(name).map_err(|e| format!("event type {e}")))
            .collect::<Result<_, _>>()?;
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
            },
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

/// A file's content without the trailing newline that editors add.
fn read_secret(path: &Path) -> Result<String, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
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
    fn loop_variables_are_not_unknown_fields() {
        assert_eq!(
            check_template("{% for r in resources.split(',') %}{{ r }}{% endfor %}"),
            Ok(())
        );
    }
}
