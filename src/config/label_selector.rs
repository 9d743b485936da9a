//! `--kubernetes.drain-pod-selector`: which pods a drain evicts, as Kubernetes label selectors
//! ([`LabelSelector`]), one for every drain or one per event type ([`DrainPodSelectors`]).
//!
//! The API server does the selecting (the selector goes out as the list's `labelSelector`): the
//! agent only checks the syntax at startup, so that a typo is one clear line and exit 64 rather
//! than a drain that the API server refuses with 400 when a VM is about to go.

use azure_scheduled_events_core::event::EventType;

/// The longest label name (the part after the prefix) and value, as Kubernetes allows.
const MAX_NAME: usize = 63;
/// The longest label key prefix (a DNS subdomain).
const MAX_PREFIX: usize = 253;

/// A label selector as `kubectl get -l` takes it: requirements separated by commas, each
/// `key`, `!key`, `key=value`, `key==value`, `key!=value`, `key in (v1,v2)` or
/// `key notin (v1,v2)`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LabelSelector(String);

impl LabelSelector {
    pub fn parse(text: &str) -> Result<Self, String> {
        let text = text.trim();
        if text.is_empty() {
            return Err("an empty label selector selects every pod: leave the flag unset".into());
        }
        for requirement in requirements(text)? {
            requirement_syntax(requirement.trim())
                .map_err(|e| format!("{:?}: {e}", requirement.trim()))?;
        }
        Ok(Self(text.to_owned()))
    }

    /// As the API server's `labelSelector` takes it.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// The requirements of `text`, split at the commas outside parentheses.
fn requirements(text: &str) -> Result<Vec<&str>, String> {
    let mut parts = Vec::new();
    let mut depth = 0u32;
    let mut start = 0;
    for (i, c) in text.char_indices() {
        match c {
            '(' if depth == 0 => depth = 1,
            '(' => return Err("nested parentheses".into()),
            ')' if depth == 1 => depth = 0,
            ')' => return Err("a ')' without its '('".into()),
            ',' if depth == 0 => {
                parts.push(&text[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    if depth != 0 {
        return Err("a '(' without its ')'".into());
    }
    parts.push(&text[start..]);
    Ok(parts)
}

fn requirement_syntax(requirement: &str) -> Result<(), String> {
    if let Some(key) = requirement.strip_prefix('!') {
        return key_syntax(key.trim());
    }
    for op in ["==", "!=", "="] {
        if let Some((key, value)) = requirement.split_once(op) {
            key_syntax(key.trim())?;
            return value_syntax(value.trim());
        }
    }
    let mut words = requirement.splitn(2, char::is_whitespace);
    let key = words.next().unwrap_or_default();
    key_syntax(key)?;
    let Some(rest) = words.next().map(str::trim) else {
        return Ok(());
    };
    let values = ["notin", "in"]
        .iter()
        .find_map(|op| rest.strip_prefix(op))
        .map(str::trim_start)
        .and_then(|v| v.strip_prefix('('))
        .and_then(|v| v.strip_suffix(')'))
        .ok_or("expected =, ==, !=, in (...) or notin (...) after the key")?;
    if values.trim().is_empty() {
        return Err("in and notin need at least one value".into());
    }
    values.split(',').try_for_each(|v| value_syntax(v.trim()))
}

/// `[prefix/]name`: the prefix a DNS subdomain, the name at most 63 of letters, digits, `-`, `_`
/// and `.`, beginning and ending with a letter or digit.
fn key_syntax(key: &str) -> Result<(), String> {
    let name = match key.split_once('/') {
        Some((prefix, name)) => {
            if !is_dns_subdomain(prefix) {
                return Err(format!(
                    "{prefix:?} is not a DNS subdomain (a label key prefix)"
                ));
            }
            name
        }
        None => key,
    };
    if name.is_empty() {
        return Err("a requirement names no label key".into());
    }
    value_syntax(name).map_err(|_| format!("{key:?} is not a label key"))
}

/// A DNS subdomain (RFC 1123), as Kubernetes requires of node names and label key prefixes: at
/// most 253 bytes of dot-separated labels of lower-case letters, digits and `-`, neither
/// beginning nor ending with `-`.
pub(super) fn is_dns_subdomain(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= MAX_PREFIX
        && name.split('.').all(|label| {
            !label.is_empty()
                && !label.starts_with('-')
                && !label.ends_with('-')
                && label
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        })
}

fn value_syntax(value: &str) -> Result<(), String> {
    let alnum = |c: Option<char>| c.is_none_or(|c| c.is_ascii_alphanumeric());
    if value.len() <= MAX_NAME
        && value
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        && alnum(value.chars().next())
        && alnum(value.chars().last())
    {
        Ok(())
    } else {
        Err(format!(
            "{value:?} is not a label value (at most 63 of letters, digits, '-', '_' and '.', beginning and ending with a letter or digit)"
        ))
    }
}

/// The pods each drain evicts: a selector for every event type, or one per type, as
/// `[EventType:]selector` entries separated by `;` (an entry without a type is for the types
/// without one of their own). Label keys and values have no `:` nor `;`, so the form is
/// unambiguous.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DrainPodSelectors {
    every: Option<LabelSelector>,
    by_type: Vec<(EventType, LabelSelector)>,
}

impl DrainPodSelectors {
    pub fn parse(text: &str) -> Result<Self, String> {
        let mut selectors = Self::default();
        for entry in text.split(';').map(str::trim).filter(|e| !e.is_empty()) {
            match entry.split_once(':') {
                Some((name, selector)) => {
                    let event_type = EventType::parse_known(name.trim())
                        .map_err(|_| format!("{:?} is not an event type", name.trim()))?;
                    if selectors.by_type.iter().any(|(t, _)| *t == event_type) {
                        return Err(format!("{event_type} has two selectors"));
                    }
                    selectors
                        .by_type
                        .push((event_type, LabelSelector::parse(selector)?));
                }
                None if selectors.every.is_some() => {
                    return Err("two selectors without an event type".into());
                }
                None => selectors.every = Some(LabelSelector::parse(entry)?),
            }
        }
        if selectors == Self::default() {
            return Err("no selector given".into());
        }
        Ok(selectors)
    }

    /// The selector of a drain for `event_type`, if any: then only the pods it selects go.
    pub fn for_type(&self, event_type: &str) -> Option<&LabelSelector> {
        self.by_type
            .iter()
            .find(|(t, _)| t.as_str() == event_type)
            .map(|(_, selector)| selector)
            .or(self.every.as_ref())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn selectors_as_kubectl_takes_them_are_accepted() {
        for good in [
            "app=web",
            "app==web,tier!=db",
            "example.com/evict-on-freeze=true",
            "!critical",
            "env in (prod, staging),team notin (infra)",
            "opt-in",
            "app=",
        ] {
            assert!(LabelSelector::parse(good).is_ok(), "{good:?}");
        }
        for bad in [
            "",
            "app=web!",
            "Example.com/x=y",
            "env in prod",
            "env in ()",
            "env in (a,(b))",
            "a b",
            "=web",
            &format!("x={}", "v".repeat(64)),
        ] {
            assert!(LabelSelector::parse(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn a_drain_takes_its_types_selector_else_the_common_one() -> Result<(), String> {
        let selectors =
            DrainPodSelectors::parse("Freeze: example.com/evict-on-freeze=true; app notin (db)")?;
        assert_eq!(
            selectors.for_type("Freeze").map(LabelSelector::as_str),
            Some("example.com/evict-on-freeze=true")
        );
        assert_eq!(
            selectors.for_type("Reboot").map(LabelSelector::as_str),
            Some("app notin (db)")
        );
        let only_freeze = DrainPodSelectors::parse("Freeze:opt-in")?;
        assert_eq!(only_freeze.for_type("Reboot"), None);
        for bad in ["Frieze:a=b", "a=b;c=d", "Freeze:a;Freeze:b", ";", "Reboot:"] {
            assert!(DrainPodSelectors::parse(bad).is_err(), "{bad:?}");
        }
        Ok(())
    }
}
