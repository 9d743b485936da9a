//! Entry point: parse the command line, start logging, run, map errors to exit codes.

use std::ffi::OsString;
use std::io::Write as _;
use std::process::ExitCode;

use azure_scheduled_events_exporter::config::lenient;
use azure_scheduled_events_exporter::config::{
    AgentArgs, Cli, Command, Config, ConfigError, DEFAULT_LOG_FORMAT, DEFAULT_LOG_LEVEL,
    DEMO_LOG_FORMAT, EXIT_USAGE, LogFormat, environment, usage,
};
use azure_scheduled_events_exporter::output::telemetry::{ProcessEnv, Signal, Telemetry};
use azure_scheduled_events_exporter::shell::{agent, check_config, check_imds, commands, logging};
use clap::error::ErrorKind;
use clap::{CommandFactory as _, Parser as _};

fn main() -> ExitCode {
    let args: Vec<OsString> = std::env::args_os().collect();
    let (cli, usage_errors) = match Cli::try_parse_from(&args) {
        Ok(cli) => (Some(cli), Vec::new()),
        Err(error)
            if matches!(
                error.kind(),
                ErrorKind::DisplayHelp | ErrorKind::DisplayVersion
            ) =>
        {
            let _ = error.print();
            return ExitCode::SUCCESS;
        }
        // check-config reports every usage error, and checks what the rest of the command line
        // holds.
        Err(_) if args.get(1).is_some_and(|a| a == "check-config") => {
            usage::parse_all::<Cli>(&args)
        }
        Err(error) => return usage_error(&usage::one_line(&error)),
    };
    let unknown = environment::unknown_variables(&Cli::command(), std::env::vars_os());
    // One thread is plenty for one request a second and a few scrapes, and keeps the agent small.
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("error: cannot start the async runtime: {error}");
            return ExitCode::FAILURE;
        }
    };
    let cli = match cli {
        Some(Cli {
            command: Some(Command::CheckConfig(args)),
            ..
        }) => return check(&runtime, Some(args.agent), usage_errors, &unknown),
        Some(cli) => cli,
        None => return check(&runtime, None, usage_errors, &unknown),
    };
    if let Some(variable) = unknown.first() {
        return usage_error(&variable.to_string());
    }
    let result = match cli.command {
        // Answered above.
        Some(Command::CheckConfig(_)) => Ok(()),
        Some(Command::CheckImds(args)) => {
            return match args.agent.validate(LogFormat::Text) {
                Ok(config) => {
                    let report = runtime.block_on(check_imds::check(&config));
                    let _ = write!(std::io::stdout(), "{}", report.text);
                    if report.answered {
                        ExitCode::SUCCESS
                    } else {
                        ExitCode::from(check_imds::EXIT_UNAVAILABLE)
                    }
                }
                Err(error) => usage_error(&error.to_string()),
            };
        }
        None => match prepare(cli.agent, DEFAULT_LOG_FORMAT) {
            Ok((config, telemetry)) => {
                logging::init(config.log_format, &config.log_level, telemetry.bridges());
                runtime.block_on(async {
                    let shutdown = commands::shutdown_signal();
                    agent::start_with(config, telemetry)
                        .await?
                        .run_until(shutdown)
                        .await
                })
            }
            Err(error) => return usage_error(&error.to_string()),
        },
        Some(Command::Demo(args)) => match prepare(args.into_agent(), DEMO_LOG_FORMAT) {
            Ok((config, telemetry)) => {
                logging::init(config.log_format, &config.log_level, telemetry.bridges());
                runtime.block_on(commands::demo(config, telemetry))
            }
            Err(error) => return usage_error(&error.to_string()),
        },
        // The command line the Windows service control manager runs (install-service.ps1).
        #[cfg(windows)]
        Some(Command::Service(args)) => match prepare(args.agent, DEFAULT_LOG_FORMAT) {
            Ok((config, telemetry)) => {
                azure_scheduled_events_exporter::shell::service::run(runtime, config, telemetry)
            }
            Err(error) => return usage_error(&error.to_string()),
        },
        Some(Command::Simulator(args)) => {
            logging::init(
                args.log_format,
                DEFAULT_LOG_LEVEL,
                logging::Bridges::default(),
            );
            runtime.block_on(commands::simulator(args))
        }
        Some(Command::PrepareStateDir(args)) => {
            logging::init(
                DEFAULT_LOG_FORMAT,
                DEFAULT_LOG_LEVEL,
                logging::Bridges::default(),
            );
            commands::prepare_state_dir(&args)
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            tracing::error!(error = format!("{error:#}"), "exiting");
            eprintln!("error: {error:#}");
            ExitCode::FAILURE
        }
    }
}

/// Validates the flags and resolves traces and log events from them and the `OTEL_*` variables (a bad variable
/// is a warning, not an exit: see `config::lenient`).
fn prepare(args: AgentArgs, default_format: LogFormat) -> Result<(Config, Telemetry), ConfigError> {
    let config = args.validate(default_format)?;
    let traces = lenient::resolve_signal(&config.otlp, Signal::Traces, &ProcessEnv)?;
    let logs = lenient::resolve_signal(&config.otlp, Signal::Logs, &ProcessEnv)?;
    Ok((config, Telemetry::resolved(traces, logs)))
}

/// `check-config`: the usage errors, then what checking the rest finds (`agent`: the agent's flags,
/// unless the command line could not be read at all).
fn check(
    runtime: &tokio::runtime::Runtime,
    agent: Option<AgentArgs>,
    usage_errors: Vec<String>,
    unknown: &[environment::UnknownVariable],
) -> ExitCode {
    let mut checked = match agent {
        Some(agent) => runtime.block_on(async { check_config::check(agent, &ProcessEnv, unknown) }),
        None => check_config::Checked {
            problems: unknown.iter().map(ToString::to_string).collect(),
            ..check_config::Checked::default()
        },
    };
    if !usage_errors.is_empty() {
        checked.summary = None;
        checked.problems.splice(0..0, usage_errors);
    }
    report(&checked)
}

/// `check-config`'s answer: every problem and warning on stderr, or the summary on stdout.
fn report(checked: &check_config::Checked) -> ExitCode {
    for problem in &checked.problems {
        eprintln!("error: {problem}");
    }
    for warning in &checked.warnings {
        eprintln!("warning: {warning}");
    }
    if let Some(summary) = &checked.summary {
        let _ = writeln!(std::io::stdout(), "{summary}");
    }
    if checked.passed() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(EXIT_USAGE as u8)
    }
}

fn usage_error(line: &str) -> ExitCode {
    let line = line.strip_prefix("error: ").unwrap_or(line);
    eprintln!("error: {line}");
    ExitCode::from(EXIT_USAGE as u8)
}
