//! Traces and log events can never stop the metrics. An `OTEL_*` variable is often set fleet-wide (an image, a
//! DaemonSet, a configuration tool), and the systemd unit does not restart an agent that exits
//! 64: a value this agent cannot use must not blind every VM. So a bad `OTEL_*` value is a
//! warning: the setting falls back to its default where one exists (timeout, batching, resource
//! attributes, compression), and the signal (traces, or log events over OTLP) is off where none
//! does (endpoint, protocol, headers, certificates, `OTEL_LOGS_EXPORTER`); everything else goes on. A bad `--otlp.*` flag (or its
//! `AZURE_SCHEDULED_EVENTS_OTLP_*` variable) is what the operator typed for this agent, and still
//! exits 64.

use std::collections::HashMap;

use super::ConfigError;
use super::otlp::{EnvSource, OtlpArgs, OtlpConfig, OtlpError, Signal};

/// Variables of `signal` whose bad value falls back to the default.
fn defaultable(signal: Signal) -> [&'static str; 8] {
    let names = signal.variables();
    [
        names.compression[0],
        names.compression[1],
        names.timeout[0],
        names.timeout[1],
        "OTEL_RESOURCE_ATTRIBUTES",
        names.max_queue_size,
        names.max_export_batch_size,
        names.schedule_delay,
    ]
}

/// One signal as resolved, with what was wrong in the environment.
#[derive(Debug, Default)]
pub struct Resolved {
    pub config: Option<OtlpConfig>,
    /// One line per ignored value, to log once at start.
    pub warnings: Vec<String>,
}

/// The environment with some variables hidden.
struct Masked<'a, E> {
    env: &'a E,
    hidden: Vec<&'static str>,
}

impl<E: EnvSource> EnvSource for Masked<'_, E> {
    fn var(&self, name: &str) -> Option<String> {
        if self.hidden.contains(&name) {
            None
        } else {
            self.env.var(name)
        }
    }
}

/// Resolves the flags and the `OTEL_*` variables for traces; only a bad flag is an error.
pub fn resolve(args: &OtlpArgs, env: &impl EnvSource) -> Result<Resolved, ConfigError> {
    resolve_signal(args, Signal::Traces, env)
}

/// Resolves the flags and the `OTEL_*` variables for `signal`; only a bad flag is an error.
pub fn resolve_signal(
    args: &OtlpArgs,
    signal: Signal,
    env: &impl EnvSource,
) -> Result<Resolved, ConfigError> {
    // The flags alone, with an endpoint so that every flag is checked even when the endpoint
    // comes from a variable.
    let flags_only = OtlpArgs {
        endpoint: Some(
            args.endpoint
                .clone()
                .filter(|e| !e.trim().is_empty())
                .unwrap_or_else(|| "http://localhost:4318".to_owned()),
        ),
        ..args.clone()
    };
    match flags_only.resolve(&HashMap::<&str, &str>::new()) {
        Ok(_) => {}
        Err(OtlpError::Flag(error)) => return Err(error),
        // No variable is read from an empty environment.
        Err(OtlpError::Variable { message, .. }) => {
            return Err(ConfigError {
                flag: "otlp.endpoint",
                reason: message,
            });
        }
    }

    let mut masked = Masked {
        env,
        hidden: Vec::new(),
    };
    let mut warnings = Vec::new();
    let defaultable = defaultable(signal);
    loop {
        match args.resolve_signal(signal, &masked) {
            Ok(config) => return Ok(Resolved { config, warnings }),
            Err(OtlpError::Flag(error)) => return Err(error),
            Err(OtlpError::Variable { variable, message }) => {
                match defaultable
                    .iter()
                    .find(|name| **name == variable)
                    .filter(|name| !masked.hidden.contains(name))
                {
                    Some(name) => {
                        warnings.push(format!("{message}; {name} is ignored"));
                        masked.hidden.push(name);
                    }
                    None => {
                        warnings.push(format!("{message}; {}", signal.off()));
                        return Ok(Resolved {
                            config: None,
                            warnings,
                        });
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn env(pairs: &[(&'static str, &'static str)]) -> HashMap<&'static str, &'static str> {
        let mut env: HashMap<&str, &str> = pairs.iter().copied().collect();
        env.entry("OTEL_EXPORTER_OTLP_ENDPOINT")
            .or_insert("http://collector:4318");
        env
    }

    #[test]
    fn a_bad_setting_with_a_default_falls_back_to_it_with_a_warning() -> Result<(), ConfigError> {
        let resolved = resolve(
            &OtlpArgs::default(),
            &env(&[
                ("OTEL_EXPORTER_OTLP_TIMEOUT", "10s"),
                ("OTEL_EXPORTER_OTLP_COMPRESSION", "zstd"),
                ("OTEL_BSP_MAX_QUEUE_SIZE", "0"),
            ]),
        )?;
        let config = resolved.config.ok_or(ConfigError {
            flag: "test",
            reason: "traces off".into(),
        })?;
        assert_eq!(config.timeout, Duration::from_secs(10));
        assert!(!config.gzip);
        assert_eq!(
            config.max_queue_size,
            crate::config::otlp::DEFAULT_MAX_QUEUE_SIZE
        );
        assert_eq!(resolved.warnings.len(), 3, "{:?}", resolved.warnings);
        assert!(resolved.warnings[0].contains("OTEL_EXPORTER_OTLP_COMPRESSION"));
        Ok(())
    }

    #[test]
    fn a_zero_timeout_falls_back_to_the_default() -> Result<(), ConfigError> {
        for name in [
            "OTEL_EXPORTER_OTLP_TIMEOUT",
            "OTEL_EXPORTER_OTLP_TRACES_TIMEOUT",
        ] {
            let resolved = resolve(&OtlpArgs::default(), &env(&[(name, "0")]))?;
            let config = resolved.config.ok_or(ConfigError {
                flag: "test",
                reason: format!("{name}=0 turned traces off"),
            })?;
            assert_eq!(config.timeout, Duration::from_secs(10));
            assert_eq!(resolved.warnings.len(), 1, "{:?}", resolved.warnings);
            assert!(
                resolved.warnings[0].contains(name),
                "{:?}",
                resolved.warnings
            );
        }
        Ok(())
    }

    #[test]
    fn a_bad_setting_without_a_default_turns_traces_off() -> Result<(), ConfigError> {
        for pairs in [
            &[("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json")][..],
            &[("OTEL_EXPORTER_OTLP_ENDPOINT", "ftp://collector")],
            &[("OTEL_EXPORTER_OTLP_HEADERS", "novalue")],
            &[("OTEL_EXPORTER_OTLP_CLIENT_KEY", "/etc/key.pem")],
        ] {
            let resolved = resolve(&OtlpArgs::default(), &env(pairs))?;
            assert!(resolved.config.is_none(), "{pairs:?}");
            assert_eq!(resolved.warnings.len(), 1, "{pairs:?}");
            assert!(resolved.warnings[0].contains("traces are off"), "{pairs:?}");
        }
        Ok(())
    }

    #[test]
    fn a_bad_logs_setting_turns_only_log_events_off() -> Result<(), ConfigError> {
        let env = env(&[
            ("OTEL_LOGS_EXPORTER", "otlp"),
            ("OTEL_EXPORTER_OTLP_LOGS_HEADERS", "novalue"),
            ("OTEL_EXPORTER_OTLP_LOGS_COMPRESSION", "zstd"),
        ]);
        let logs = resolve_signal(&OtlpArgs::default(), Signal::Logs, &env)?;
        assert!(logs.config.is_none());
        assert_eq!(logs.warnings.len(), 2, "{:?}", logs.warnings);
        assert!(logs.warnings[0].contains("OTEL_EXPORTER_OTLP_LOGS_COMPRESSION is ignored"));
        assert!(logs.warnings[1].contains("log events over OTLP are off"));
        let traces = resolve(&OtlpArgs::default(), &env)?;
        assert!(traces.config.is_some() && traces.warnings.is_empty());
        Ok(())
    }

    #[test]
    fn gzip_and_certificates_are_read() -> Result<(), ConfigError> {
        let resolved = resolve(
            &OtlpArgs::default(),
            &env(&[
                ("OTEL_EXPORTER_OTLP_COMPRESSION", "GZIP"),
                ("OTEL_EXPORTER_OTLP_CERTIFICATE", "/etc/ca.pem"),
                (
                    "OTEL_EXPORTER_OTLP_TRACES_CERTIFICATE",
                    "/etc/traces-ca.pem",
                ),
                ("OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE", "/etc/client.pem"),
                ("OTEL_EXPORTER_OTLP_CLIENT_KEY", "/etc/client.key"),
            ]),
        )?;
        let config = resolved.config.ok_or(ConfigError {
            flag: "test",
            reason: "traces off".into(),
        })?;
        assert!(config.gzip);
        assert_eq!(
            config.tls.certificate.as_deref(),
            Some(std::path::Path::new("/etc/traces-ca.pem")),
            "the traces form wins"
        );
        assert_eq!(
            config.tls.client_key.as_deref(),
            Some(std::path::Path::new("/etc/client.key"))
        );
        assert!(resolved.warnings.is_empty());
        Ok(())
    }

    #[test]
    fn a_bad_flag_is_still_an_error() {
        for args in [
            OtlpArgs {
                endpoint: Some("collector:4318".into()),
                ..OtlpArgs::default()
            },
            OtlpArgs {
                headers: Some("novalue".into()),
                ..OtlpArgs::default()
            },
            OtlpArgs {
                timeout: Some(Duration::ZERO),
                ..OtlpArgs::default()
            },
        ] {
            assert!(resolve(&args, &env(&[])).is_err(), "{args:?}");
        }
    }
}
