//! The built binary as a child process, as users run it: a clean environment, its JSON log lines
//! on a channel, its metrics over a plain socket, and SIGTERM to stop it.

use std::io::{BufRead, BufReader, Read, Write};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::time::Instant;

use super::{PATIENCE, wait};

pub const BIN: &str = env!("CARGO_BIN_EXE_azure-scheduled-events-exporter");

/// A command for the binary with a clean environment: no inherited proxies or settings, and state
/// in memory, so a test never touches the machine's state file.
pub fn command(args: &[&str]) -> Command {
    let mut command = Command::new(BIN);
    command.args(args).env_clear().stdin(Stdio::null());
    command.env("AZURE_SCHEDULED_EVENTS_STATE_FILE", "");
    if let Some(path) = std::env::var_os("PATH") {
        command.env("PATH", path);
    }
    command
}

/// The agent as a child process. Every line it prints must be JSON: reading a line that is not is
/// an error naming it.
pub struct AgentProcess {
    child: Child,
    lines: mpsc::Receiver<Result<serde_json::Value, String>>,
    address: String,
    starting: serde_json::Value,
}

impl AgentProcess {
    /// Spawns `command` and waits for its `starting` line, which names the listen address.
    pub fn spawn(mut command: Command) -> Result<Self, Box<dyn std::error::Error>> {
        let mut child = command
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()?;
        let stdout = child.stdout.take().ok_or("no stdout")?;
        let (send, lines) = mpsc::channel();
        std::thread::spawn(move || {
            // Reads to the end even when nobody looks, so the agent never blocks on a full pipe.
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                let parsed = serde_json::from_str(&line)
                    .map_err(|_| format!("a log line is not JSON: {line}"));
                if send.send(parsed).is_err() {
                    break;
                }
            }
        });
        let mut process = Self {
            child,
            lines,
            address: String::new(),
            starting: serde_json::Value::Null,
        };
        let starting = process.next_line_where(|l| l["message"] == "starting")?;
        process.address = starting["listen_address"]
            .as_str()
            .ok_or("no listen_address")?
            .to_owned();
        process.starting = starting;
        Ok(process)
    }

    /// The `starting` line.
    pub fn starting(&self) -> &serde_json::Value {
        &self.starting
    }

    /// The process id, to signal it.
    pub fn id(&self) -> u32 {
        self.child.id()
    }

    /// Whether the process has exited, without waiting.
    pub fn exited(&mut self) -> Result<Option<ExitStatus>, String> {
        self.child.try_wait().map_err(|e| e.to_string())
    }

    /// `host:port` of the agent's HTTP server.
    pub fn address(&self) -> &str {
        &self.address
    }

    /// The next log line for which `matches` holds, waiting at most [`PATIENCE`].
    pub fn next_line_where(
        &self,
        matches: impl Fn(&serde_json::Value) -> bool,
    ) -> Result<serde_json::Value, String> {
        self.lines_until(matches)?
            .pop()
            .ok_or_else(|| "no matching log line".to_owned())
    }

    /// The log lines from the next one up to the first for which `done` holds, that one
    /// included, waiting at most [`PATIENCE`]. Each line is waited for as it comes (a blocking
    /// receive), not polled for.
    pub fn lines_until(
        &self,
        done: impl Fn(&serde_json::Value) -> bool,
    ) -> Result<Vec<serde_json::Value>, String> {
        let deadline = Instant::now() + PATIENCE;
        let mut lines = Vec::new();
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(Ok(line)) => {
                    let finished = done(&line);
                    lines.push(line);
                    if finished {
                        return Ok(lines);
                    }
                }
                Ok(Err(not_json)) => return Err(not_json),
                Err(e) => return Err(format!("no matching log line ({e}); got {lines:#?}")),
            }
        }
    }

    /// The lines printed since the last read, without waiting.
    pub fn lines_so_far(&self) -> Result<Vec<serde_json::Value>, String> {
        self.lines.try_iter().collect()
    }

    /// The body of `GET /metrics`.
    pub fn metrics(&self) -> std::io::Result<String> {
        scrape(&self.address)
    }

    /// Scrapes (off the async runtime) until `condition` holds on the exposition; that exposition.
    /// Fails with the last one.
    pub async fn wait_for_metrics(
        &self,
        what: &str,
        condition: impl Fn(&str) -> bool,
    ) -> Result<String, String> {
        let mut last = String::new();
        wait(what)
            .until(async || {
                let address = self.address.clone();
                let text = tokio::task::spawn_blocking(move || scrape(&address))
                    .await
                    .map_err(|e| e.to_string())?
                    .map_err(|e| e.to_string())?;
                if condition(&text) {
                    return Ok::<_, String>(Some(text));
                }
                last = text;
                Ok(None)
            })
            .await
            .map_err(|e| format!("{e}; last scrape:\n{last}"))
    }

    /// As [`Self::wait_for_metrics`], until the exposition contains `needle` (a series with its
    /// value, say).
    pub async fn wait_for_series(&self, needle: &str) -> Result<String, String> {
        self.wait_for_metrics(needle, |text| text.contains(needle))
            .await
    }

    /// SIGTERM, then waits at most [`PATIENCE`] for the exit.
    pub fn terminate(&mut self) -> Result<ExitStatus, String> {
        let pid = self.child.id().to_string();
        Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .map_err(|e| e.to_string())?;
        wait("the exit after SIGTERM").until_blocking(|| self.child.try_wait())
    }
}

impl Drop for AgentProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The body of `GET /metrics` at `address`, over a plain blocking socket (the agent is another
/// process; call it off the async runtime).
pub fn scrape(address: &str) -> std::io::Result<String> {
    let mut stream = std::net::TcpStream::connect(address)?;
    write!(
        stream,
        "GET /metrics HTTP/1.1\r\nHost: {address}\r\nConnection: close\r\n\r\n"
    )?;
    let mut response = String::new();
    stream.read_to_string(&mut response)?;
    Ok(response
        .split_once("\r\n\r\n")
        .map(|(_, body)| body.to_owned())
        .unwrap_or_default())
}
