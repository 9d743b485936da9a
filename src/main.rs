//! Entry point: parse the command line, start logging, run, map errors to exit codes.

use std::process::ExitCode;

use azure_scheduled_events_exporter::config::{Cli, Command, EXIT_USAGE, LogFormat};
use azure_scheduled_events_exporter::{agent, commands, logging};
use clap::Parser;
use clap::error::ErrorKind;

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(error)
            if matches!(
                error.kind(),
                ErrorKind::DisplayHelp | ErrorKind::DisplayVersion
            ) =>
        {
            let _ = error.print();
            return ExitCode::SUCCESS;
        }
        Err(error) => {
            return usage_error(
                error
                    .render()
                    .to_string()
                    .lines()
                    .next()
                    .unwrap_or("invalid arguments"),
            );
        }
    };
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
    let result = match cli.command {
        None => match cli.agent.validate(LogFormat::Json) {
            Ok(config) => {
                logging::init(config.log_format, &config.log_level);
                runtime.block_on(async {
                    agent::start(config)
                        .await?
                        .run_until(commands::shutdown_signal())
                        .await
                })
            }
            Err(error) => return usage_error(&error.to_string()),
        },
        Some(Command::Demo(args)) => match args.agent.validate(LogFormat::Text) {
            Ok(config) => {
                logging::init(config.log_format, &config.log_level);
                runtime.block_on(commands::demo(config))
            }
            Err(error) => return usage_error(&error.to_string()),
        },
        Some(Command::Simulator(args)) => {
            logging::init(args.log_format, "info");
            runtime.block_on(commands::simulator(args))
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

fn usage_error(line: &str) -> ExitCode {
    let line = line.strip_prefix("error: ").unwrap_or(line);
    eprintln!("error: {line}");
    ExitCode::from(EXIT_USAGE as u8)
}
