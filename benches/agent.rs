//! The agent as it runs: CPU time per poll and memory while polling a simulated IMDS at 50 Hz,
//! next to the floor measured in the same run, then `/metrics` latency under concurrent scrapes,
//! and the size of the binary.
//!
//! The floor is `../shared/tools/floor` (or `FLOOR_DIR`), built from its own manifest and lock
//! file into `target/floor`: a bare poller on a single-threaded tokio runtime, a reqwest client with
//! no proxy and a 5 s timeout, `GET` with `Metadata: true`, the body parsed with serde_json, nothing
//! else. The simulator and the agents are built binaries, each in its own process on 127.0.0.1:
//! the image's build and the VM packages', when `IMAGE_BINARY` and `VM_PACKAGE_BINARY` name them
//! (as `scripts/bench.sh` does), else this bench's own build of the agent. Each round runs the
//! floor and the agents side by side against the same unchanged one-event document and measures
//! them over the same window, so that they share whatever else the machine does; the CPU of all
//! rounds over their polls is compared, and the best round of each. An agent's polls are its own
//! counter's, the floor's the GETs the simulator counted less the agents'. CPU time is the sum
//! of every thread's `/proc/<pid>/task/<tid>/schedstat` run time (nanoseconds; `utime + stime`
//! from `/proc/<pid>/stat` is printed as a cross-check, but at 100 ticks per second it is too
//! coarse for a window of a few hundred milliseconds of CPU). Memory is `VmRSS`, `RssAnon`,
//! `RssFile` and `VmHWM` from `/proc/<pid>/status`.
//!
//! Last, five agents poll the same unchanged document side by side for one window: two without
//! traces (their difference is the noise), one exporting over OTLP/gRPC and one over OTLP/HTTP to
//! a live receiver in this process, and one with two notification webhooks on loopback, which
//! shows what configuring traces or notifications costs a poll that changes nothing.
//!
//! `cargo bench --bench agent` runs the full windows (about five minutes); without `--bench` (as
//! under `cargo test`) it runs the same steps for about a second each, to keep the bench working.

// The documents of the core's benchmarks (crates/core/benches/common).
#[path = "../crates/core/benches/common/mod.rs"]
mod common;
#[path = "../tests/suite/common/otlp.rs"]
mod otlp;

use std::error::Error;
use std::hint::black_box;
use std::io::Write;
use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use tokio::time::Instant;

type Result<T, E = Box<dyn Error>> = std::result::Result<T, E>;

const BIN: &str = env!("CARGO_BIN_EXE_azure-scheduled-events-exporter");

/// 50 Hz, fifty times Azure's recommended rate, so a window holds enough polls to divide by.
const POLL_INTERVAL: Duration = Duration::from_millis(20);

/// The counter that says how many polls the agent made.
const POLLS_SERIES: &str = "azure_scheduled_events_imds_requests_total{operation=\"events\"}";

/// How long each step runs.
#[derive(Debug)]
struct Plan {
    warm_up: Duration,
    window: Duration,
    /// Rounds of the floor and the agents side by side.
    rounds: usize,
    scrape_phase: Duration,
    concurrency: &'static [usize],
}

const FULL: Plan = Plan {
    warm_up: Duration::from_secs(3),
    window: Duration::from_secs(20),
    rounds: 5,
    scrape_phase: Duration::from_secs(5),
    concurrency: &[1, 8, 32],
};

const SMOKE: Plan = Plan {
    warm_up: Duration::from_millis(200),
    window: Duration::from_millis(500),
    rounds: 1,
    scrape_phase: Duration::from_millis(300),
    concurrency: &[1, 4],
};

macro_rules! say {
    ($($arg:tt)*) => {
        writeln!(std::io::stdout(), $($arg)*)?
    };
}

fn main() -> Result<()> {
    let plan = if std::env::args().any(|arg| arg == "--bench") {
        &FULL
    } else {
        &SMOKE
    };
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?
        .block_on(run(plan))
}

async fn run(plan: &Plan) -> Result<()> {
    let size = std::fs::metadata(BIN)?.len();
    say!("binary: {BIN}");
    say!(
        "binary size: {size} bytes = {:.2} MiB = {:.2} MB",
        size as f64 / 1_048_576.0,
        size as f64 / 1e6
    );
    let ticks_per_second = clock_ticks();
    say!(
        "plan: warm-up {:?}, window {:?}, poll interval {:?}, scrapes {:?} per concurrency; CLK_TCK {ticks_per_second}",
        plan.warm_up,
        plan.window,
        POLL_INTERVAL,
        plan.scrape_phase
    );

    let sim_address = free_port()?;
    let simulator = Process::spawn(
        "simulator",
        &[
            "simulator".to_owned(),
            format!("--web.listen-address={sim_address}"),
            format!("--vm.name={}_0", common::SCALE_SET),
        ],
    )?;
    let control = plain_client(1)?;
    wait_for(
        &control,
        &format!("http://{sim_address}/control/state"),
        &simulator,
    )
    .await?;
    let document = common::document(1, 3)?;
    let put = control
        .put(format!("http://{sim_address}/control/document"))
        .body(document.clone())
        .send()
        .await?;
    if !put.status().is_success() {
        return Err(format!("PUT /control/document answered {}", put.status()).into());
    }
    say!(
        "document: 1 event x 3 resources, {} bytes, served verbatim by the simulator",
        document.len()
    );

    let agents = agents()?;
    let agent_ns_per_poll =
        cpu_per_poll(&control, sim_address, &agents, plan, ticks_per_second).await?;

    // The scrapes are measured on the first agent, just measured polling: its CPU per poll is
    // taken off.
    let (_, scraped) = agents.first().ok_or("no agent measured")?;
    let agent_address = free_port()?;
    let agent = Process::spawn_binary(
        "agent",
        scraped,
        &agent_args(sim_address, agent_address),
        &[],
    )?;
    let metrics_url = format!("http://{agent_address}/metrics");
    wait_for(&control, &format!("http://{agent_address}/readyz"), &agent).await?;
    tokio::time::sleep(plan.warm_up).await;
    let exposition = scrape(&control, &metrics_url).await?;
    say!("");
    say!(
        "/metrics under concurrent scrapes ({} bytes per scrape), {:?} each, while the agent polls at 50 Hz",
        exposition.len(),
        plan.scrape_phase
    );
    let header = [
        "clients",
        "scrapes",
        "scrapes/s",
        "p50 ms",
        "p99 ms",
        "max ms",
        "agent CPU %",
        "CPU µs/scrape",
        "agent polls/s",
    ];
    say!(
        "{:>7} {:>8} {:>10} {:>10} {:>10} {:>10} {:>12} {:>14} {:>14}",
        header[0],
        header[1],
        header[2],
        header[3],
        header[4],
        header[5],
        header[6],
        header[7],
        header[8]
    );
    for &clients in plan.concurrency {
        let latencies = scrape_concurrently(&metrics_url, clients, plan.scrape_phase / 5).await?;
        drop(latencies);
        let polls_before = polls(&scrape(&control, &metrics_url).await?)?;
        let cpu_before = Cpu::of(&agent.pid)?;
        let started = Instant::now();
        let mut latencies = scrape_concurrently(&metrics_url, clients, plan.scrape_phase).await?;
        let elapsed = started.elapsed();
        let cpu = Cpu::of(&agent.pid)?.since(&cpu_before);
        let polls_after = polls(&scrape(&control, &metrics_url).await?)?;
        latencies.sort_unstable();
        let ms = |q: f64| {
            let index = ((latencies.len() as f64 - 1.0) * q).round() as usize;
            latencies
                .get(index)
                .map_or(f64::NAN, |d| d.as_secs_f64() * 1000.0)
        };
        let polls = polls_after.saturating_sub(polls_before);
        // The agent's CPU minus what its polls cost in the quiet window, shared among the scrapes.
        let scrape_nanos = cpu.nanos as f64 - polls as f64 * agent_ns_per_poll;
        say!(
            "{clients:>7} {:>8} {:>10.0} {:>10.3} {:>10.3} {:>10.3} {:>11.1}% {:>14.0} {:>14.1}",
            latencies.len(),
            latencies.len() as f64 / elapsed.as_secs_f64(),
            ms(0.5),
            ms(0.99),
            ms(1.0),
            cpu.nanos as f64 / elapsed.as_nanos() as f64 * 100.0,
            scrape_nanos / 1000.0 / latencies.len().max(1) as f64,
            polls as f64 / elapsed.as_secs_f64(),
        );
    }
    let memory = Memory::of(&agent.pid)?;
    say!(
        "agent memory after the scrapes: VmRSS {} KiB ({:.2} MiB), VmHWM {} KiB ({:.2} MiB)",
        memory.rss_kib,
        memory.rss_kib as f64 / 1024.0,
        memory.hwm_kib,
        memory.hwm_kib as f64 / 1024.0
    );
    drop(agent);
    otlp_overhead(&control, sim_address, plan).await
}

/// CPU per poll of agents without and with OTLP export, polling the same unchanged document in
/// the same window so that they share whatever else the machine is doing.
async fn otlp_overhead(
    control: &reqwest::Client,
    sim_address: SocketAddr,
    plan: &Plan,
) -> Result<()> {
    let receiver = otlp::Receiver::start().await?;
    let grpc = receiver.grpc_url();
    let http = receiver.http_url();
    let webhook = webhook_receiver().await?;
    let webhooks = format!("http://{webhook}/first,http://{webhook}/second");
    // Two agents without traces: their difference is the noise the OTLP figures sit in. The
    // exporting agents start first and third, so no setup always has the same place.
    let setups: [(&str, Vec<(&str, &str)>); 5] = [
        (
            "OTLP HTTP",
            vec![("OTEL_EXPORTER_OTLP_ENDPOINT", http.as_str())],
        ),
        ("no OTLP", vec![]),
        (
            "OTLP gRPC",
            vec![
                ("OTEL_EXPORTER_OTLP_ENDPOINT", grpc.as_str()),
                ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"),
            ],
        ),
        ("no OTLP 2", vec![]),
        (
            "2 webhooks",
            vec![(
                "AZURE_SCHEDULED_EVENTS_NOTIFY_WEBHOOK_URL",
                webhooks.as_str(),
            )],
        ),
    ];
    let mut agents = Vec::new();
    for (name, env) in &setups {
        let address = free_port()?;
        let agent = Process::spawn_with_env(
            "agent",
            &[
                format!("--poll.interval={}ms", POLL_INTERVAL.as_millis()),
                format!("--imds.url=http://{sim_address}"),
                format!("--web.listen-address={address}"),
                "--log.level=warn".to_owned(),
                // Each its own state, in memory: with a shared file, all but the first would
                // resume the events, already announced, and send no `scheduled` span.
                "--state.file=".to_owned(),
            ],
            env,
        )?;
        wait_for(control, &format!("http://{address}/readyz"), &agent).await?;
        agents.push((*name, agent, format!("http://{address}/metrics")));
    }
    // Each exporting agent sends the event's `scheduled` span once, at its first document.
    let expected = 2;
    receiver
        .wait_for("the first spans", |spans| spans.len() >= expected)
        .await?;
    tokio::time::sleep(plan.warm_up).await;
    let spans_before = receiver.spans().len();
    let mut before = Vec::new();
    for (_, agent, metrics) in &agents {
        before.push((
            polls(&scrape(control, metrics).await?)?,
            Cpu::of(&agent.pid)?,
        ));
    }
    let started = Instant::now();
    tokio::time::sleep(plan.window).await;
    let mut windows = Vec::new();
    for ((_, agent, metrics), (polls_before, cpu_before)) in agents.iter().zip(&before) {
        let cpu = Cpu::of(&agent.pid)?.since(cpu_before);
        let polls_after = polls(&scrape(control, metrics).await?)?;
        windows.push(Window {
            polls: polls_after.saturating_sub(*polls_before),
            elapsed: started.elapsed(),
            cpu,
        });
    }
    say!("");
    say!(
        "OTLP or two notification receivers configured, document unchanged: five agents side by side at 50 Hz over {:?}",
        plan.window
    );
    say!(
        "{:<10} {:>6} {:>12} {:>26} {:>10}",
        "",
        "polls",
        "CPU ns/poll",
        "vs no OTLP (mean of both)",
        "VmRSS KiB"
    );
    let baseline = (windows[1].ns_per_poll() + windows[3].ns_per_poll()) / 2.0;
    for ((name, agent, _), window) in agents.iter().zip(&windows) {
        say!(
            "{name:<10} {:>6} {:>12.0} {:>25.1}% {:>10}",
            window.polls,
            window.ns_per_poll(),
            (window.ns_per_poll() / baseline - 1.0) * 100.0,
            Memory::of(&agent.pid)?.rss_kib
        );
    }
    say!(
        "spans received during the window: {} (target 0); extra CPU per poll target at most 10%",
        receiver.spans().len() - spans_before
    );
    Ok(())
}

/// A webhook receiver on loopback that answers 200 to everything, for the agent with
/// notification receivers (it notifies each event's `scheduled` once, before the window).
async fn webhook_receiver() -> Result<SocketAddr> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let address = listener.local_addr()?;
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut request = Vec::new();
                let mut chunk = [0u8; 4096];
                // The agent's bodies are small: the head and body arrive before it waits.
                while let Ok(read) = stream.read(&mut chunk).await {
                    if read == 0 {
                        break;
                    }
                    request.extend_from_slice(&chunk[..read]);
                    if let Some(end) = request.windows(4).position(|w| w == b"\r\n\r\n") {
                        let head = String::from_utf8_lossy(&request[..end]).to_lowercase();
                        let length = head
                            .lines()
                            .find_map(|l| l.strip_prefix("content-length:"))
                            .and_then(|v| v.trim().parse::<usize>().ok())
                            .unwrap_or(0);
                        if request.len() >= end + 4 + length {
                            break;
                        }
                    }
                }
                let _ = stream
                    .write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
                    .await;
            });
        }
    });
    Ok(address)
}

/// CPU time of one measured loop.
#[derive(Debug)]
struct Window {
    polls: u64,
    elapsed: Duration,
    cpu: Cpu,
}

impl Window {
    fn ns_per_poll(&self) -> f64 {
        self.cpu.nanos as f64 / self.polls.max(1) as f64
    }
}

/// The arguments of an agent polling the simulator at 50 Hz and serving on `web`.
fn agent_args(sim_address: SocketAddr, web: SocketAddr) -> Vec<String> {
    vec![
        format!("--poll.interval={}ms", POLL_INTERVAL.as_millis()),
        format!("--imds.url=http://{sim_address}"),
        format!("--web.listen-address={web}"),
        "--log.level=warn".to_owned(),
        // State in memory: a bench's agents neither share nor touch the machine's state file.
        "--state.file=".to_owned(),
    ]
}

/// What is measured against the floor: the image's build when `IMAGE_BINARY` names it (as
/// `scripts/bench.sh` does), else this bench's own build of the agent (whose dependencies carry
/// the features the dev-dependencies add: it is not a binary that ships), and the VM packages'
/// when `VM_PACKAGE_BINARY` names it. Two agents and the floor, no more: with a third agent side
/// by side on two cores, the same binary measured up to 0.16x apart in two places of the round.
fn agents() -> Result<Vec<(&'static str, PathBuf)>> {
    let mut agents = vec![match std::env::var_os("IMAGE_BINARY") {
        Some(path) => ("image", PathBuf::from(path)),
        None => {
            say!(
                "image: not measured (IMAGE_BINARY unset; scripts/bench.sh builds and names it): this bench's build instead"
            );
            ("agent", PathBuf::from(BIN))
        }
    }];
    match std::env::var_os("VM_PACKAGE_BINARY") {
        Some(path) => agents.push(("VM package", PathBuf::from(path))),
        None => say!(
            "VM package: not measured (VM_PACKAGE_BINARY unset; scripts/bench.sh builds and names it)"
        ),
    }
    Ok(agents)
}

/// Rounds of the floor and the agents side by side against the same document, so that they
/// share whatever else the machine does; prints each window and each one's best against the
/// floor's best, and returns the first agent's best CPU per poll.
async fn cpu_per_poll(
    control: &reqwest::Client,
    sim_address: SocketAddr,
    agents: &[(&'static str, PathBuf)],
    plan: &Plan,
    ticks_per_second: u64,
) -> Result<f64> {
    let floor = floor_binary()?;
    say!("floor: {}", floor.display());
    for (name, path) in agents {
        let size = std::fs::metadata(path)?.len();
        say!("{name}: {} ({size} bytes)", path.display());
    }
    say!("");
    say!(
        "CPU per poll at 50 Hz, {} round(s) of {:?}, the floor and the agents side by side",
        plan.rounds,
        plan.window
    );
    say!(
        "{:<12} {:>5} {:>6} {:>8} {:>12} {:>8} {:>6} {:>14} {:>9} {:>9} {:>9}",
        "",
        "round",
        "polls",
        "polls/s",
        "CPU ns/poll",
        "CPU %",
        "ticks",
        "ticks ns/poll",
        "RSS KiB",
        "anon KiB",
        "file KiB"
    );
    let names: Vec<&str> = std::iter::once("floor")
        .chain(agents.iter().map(|(name, _)| *name))
        .collect();
    // Every round's CPU and polls summed per process: side by side, every process met the same
    // rounds, so the ratio of the sums is the steadiest figure; the best rounds are printed too.
    let mut sums = vec![(0u64, 0u64); names.len()];
    let mut best: Vec<Option<(Window, Memory)>> = names.iter().map(|_| None).collect();
    for round in 1..=plan.rounds {
        let measured = side_by_side(control, sim_address, &floor, agents, round, plan).await?;
        for (i, (window, memory)) in measured.into_iter().enumerate() {
            let name = names[i];
            say!(
                "{name:<12} {round:>5} {:>6} {:>8.1} {:>12.0} {:>7.2}% {:>6} {:>14.0} {:>9} {:>9} {:>9}",
                window.polls,
                window.polls as f64 / window.elapsed.as_secs_f64(),
                window.ns_per_poll(),
                window.cpu.nanos as f64 / window.elapsed.as_nanos() as f64 * 100.0,
                window.cpu.ticks,
                window.cpu.ticks as f64 * 1e9
                    / ticks_per_second as f64
                    / window.polls.max(1) as f64,
                memory.rss_kib,
                memory.anon_kib,
                memory.file_kib,
            );
            sums[i].0 += window.cpu.nanos;
            sums[i].1 += window.polls;
            if best[i]
                .as_ref()
                .is_none_or(|(kept, _)| window.ns_per_poll() < kept.ns_per_poll())
            {
                best[i] = Some((window, memory));
            }
        }
    }
    let best: Vec<(Window, Memory)> = best.into_iter().flatten().collect();
    let per_poll = |(nanos, polls): (u64, u64)| nanos as f64 / polls.max(1) as f64;
    let ((floor_window, floor_memory), floor_all) =
        (best.first().ok_or("no round")?, per_poll(sums[0]));
    say!("");
    for ((name, (window, memory)), sum) in names.iter().zip(&best).zip(&sums).skip(1) {
        say!(
            "{name} / floor CPU per poll: {:.2}x over the {} rounds ({:.1} µs vs {:.1} µs; target at most 1.0x), {:.2}x best against best ({:.1} µs vs {:.1} µs); VmRSS {:.2} MiB vs the floor's {:.2} MiB",
            per_poll(*sum) / floor_all,
            plan.rounds,
            per_poll(*sum) / 1000.0,
            floor_all / 1000.0,
            window.ns_per_poll() / floor_window.ns_per_poll(),
            window.ns_per_poll() / 1000.0,
            floor_window.ns_per_poll() / 1000.0,
            memory.rss_kib as f64 / 1024.0,
            floor_memory.rss_kib as f64 / 1024.0,
        );
    }
    Ok(best.get(1).ok_or("no agent measured")?.0.ns_per_poll())
}

/// One round: the floor and every agent polling at once (started in an order that moves each
/// round), measured over the same window; the floor first, then the agents as given. An agent's
/// polls are its own counter's; the floor's are the GETs the simulator counted less the agents'.
async fn side_by_side(
    control: &reqwest::Client,
    sim_address: SocketAddr,
    floor: &Path,
    agents: &[(&str, PathBuf)],
    round: usize,
    plan: &Plan,
) -> Result<Vec<(Window, Memory)>> {
    let hz = (1.0 / POLL_INTERVAL.as_secs_f64()).to_string();
    // It stops by itself once the window is over; dropping the process ends it sooner.
    let seconds = (plan.warm_up + plan.window + Duration::from_secs(10)).as_secs_f64();
    let floor_args = [format!("http://{sim_address}"), hz, seconds.to_string()];
    // Index 0 is the floor, i the agent i - 1; each with the URL of its metrics (none for the floor).
    let mut order: Vec<usize> = (0..=agents.len()).collect();
    order.rotate_left(round % (agents.len() + 1));
    let mut running: Vec<(usize, Process, Option<String>)> = Vec::new();
    for i in order {
        if i == 0 {
            let process = Process::spawn_binary("floor", floor, &floor_args, &[])?;
            running.push((i, process, None));
        } else {
            let web = free_port()?;
            let agent = Process::spawn_binary(
                "agent",
                &agents[i - 1].1,
                &agent_args(sim_address, web),
                &[],
            )?;
            wait_for(control, &format!("http://{web}/readyz"), &agent).await?;
            running.push((i, agent, Some(format!("http://{web}/metrics"))));
        }
    }
    running.sort_by_key(|(i, ..)| *i);
    tokio::time::sleep(plan.warm_up).await;
    let state_url = format!("http://{sim_address}/control/state");
    let requests = || async {
        let body = control.get(&state_url).send().await?.bytes().await?;
        let state: serde_json::Value = serde_json::from_slice(&body)?;
        state["requests"]
            .as_u64()
            .ok_or_else(|| Box::<dyn Error>::from("no request count in /control/state"))
    };
    // Each agent's own count of its polls; 0 for the floor, whose polls are derived below.
    let counted = |metrics: Option<String>| async move {
        match metrics {
            Some(url) => polls(&scrape(control, &url).await?),
            None => Ok(0),
        }
    };
    let mut polls_before = Vec::new();
    for (_, process, metrics) in &running {
        process.check_running()?;
        polls_before.push(counted(metrics.clone()).await?);
    }
    let served_before = requests().await?;
    let cpu_before = running
        .iter()
        .map(|(_, p, _)| Cpu::of(&p.pid))
        .collect::<Result<Vec<_>>>()?;
    let started = Instant::now();
    tokio::time::sleep(plan.window).await;
    let cpu_after = running
        .iter()
        .map(|(_, p, _)| Cpu::of(&p.pid))
        .collect::<Result<Vec<_>>>()?;
    let elapsed = started.elapsed();
    let served = requests().await?.saturating_sub(served_before);
    let mut measured = Vec::new();
    for (((_, process, metrics), before), (cpu_after, cpu_before)) in running
        .iter()
        .zip(&polls_before)
        .zip(cpu_after.iter().zip(&cpu_before))
    {
        let window = Window {
            polls: counted(metrics.clone()).await?.saturating_sub(*before),
            elapsed,
            cpu: cpu_after.since(cpu_before),
        };
        measured.push((window, Memory::of(&process.pid)?));
    }
    let agent_polls: u64 = measured.iter().skip(1).map(|(w, _)| w.polls).sum();
    if let Some((floor, _)) = measured.first_mut() {
        floor.polls = served.saturating_sub(agent_polls);
    }
    Ok(measured)
}

/// `../shared/tools/floor` (or `FLOOR_DIR`), built from its own manifest and lock file.
fn floor_binary() -> Result<PathBuf> {
    let dir = std::env::var_os("FLOOR_DIR").map_or_else(
        || Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/tools/floor"),
        PathBuf::from,
    );
    let manifest = dir.join("Cargo.toml");
    if !manifest.is_file() {
        return Err(format!(
            "no floor at {}: the floor is ../shared/tools/floor beside this checkout, or set FLOOR_DIR",
            dir.display()
        )
        .into());
    }
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map_or_else(
            || Path::new(env!("CARGO_MANIFEST_DIR")).join("target"),
            PathBuf::from,
        )
        .join("floor");
    let status = Command::new(option_env!("CARGO").unwrap_or("cargo"))
        .args([
            "build",
            "--release",
            "--locked",
            "--quiet",
            "--manifest-path",
        ])
        .arg(&manifest)
        .arg("--target-dir")
        .arg(&target)
        .stdin(Stdio::null())
        .status()?;
    if !status.success() {
        return Err(format!(
            "building the floor from {} failed: {status}",
            manifest.display()
        )
        .into());
    }
    Ok(target.join("release/floor"))
}

/// `clients` tasks scraping `url` back to back for `phase`; the latency of every scrape.
async fn scrape_concurrently(url: &str, clients: usize, phase: Duration) -> Result<Vec<Duration>> {
    let client = plain_client(clients)?;
    let deadline = Instant::now() + phase;
    let tasks: Vec<_> = (0..clients)
        .map(|_| {
            let (client, url) = (client.clone(), url.to_owned());
            tokio::spawn(async move {
                let mut latencies = Vec::new();
                while Instant::now() < deadline {
                    let started = Instant::now();
                    let body = client
                        .get(&url)
                        .send()
                        .await?
                        .error_for_status()?
                        .bytes()
                        .await?;
                    latencies.push(started.elapsed());
                    black_box(body);
                }
                Ok::<_, reqwest::Error>(latencies)
            })
        })
        .collect();
    let mut all = Vec::new();
    for task in tasks {
        all.extend(task.await??);
    }
    Ok(all)
}

fn plain_client(connections: usize) -> Result<reqwest::Client> {
    Ok(reqwest::Client::builder()
        .no_proxy()
        .pool_max_idle_per_host(connections)
        .build()?)
}

async fn scrape(client: &reqwest::Client, url: &str) -> Result<String> {
    Ok(client
        .get(url)
        .send()
        .await?
        .error_for_status()?
        .text()
        .await?)
}

/// The agent's poll count, from its own exposition.
fn polls(exposition: &str) -> Result<u64> {
    let value = exposition
        .lines()
        .find_map(|line| line.strip_prefix(POLLS_SERIES)?.strip_prefix(' '))
        .ok_or("no poll counter in /metrics")?;
    Ok(value.trim().parse::<f64>()? as u64)
}

/// Waits until `url` answers 2xx, or fails if `process` exits or 30 s pass.
async fn wait_for(client: &reqwest::Client, url: &str, process: &Process) -> Result<()> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Ok(response) = client.get(url).send().await
            && response.status().is_success()
        {
            return Ok(());
        }
        process.check_running()?;
        if Instant::now() > deadline {
            return Err(format!("{url} did not answer within 30 s").into());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A loopback address with a port that was free a moment ago.
fn free_port() -> Result<SocketAddr> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?)
}

fn clock_ticks() -> u64 {
    Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|output| String::from_utf8(output.stdout).ok())
        .and_then(|text| text.trim().parse().ok())
        .unwrap_or(100)
}

/// The built binary as a child process, killed when dropped.
#[derive(Debug)]
struct Process {
    name: &'static str,
    child: std::process::Child,
    pid: String,
}

impl Process {
    fn spawn(name: &'static str, args: &[String]) -> Result<Self> {
        Self::spawn_with_env(name, args, &[])
    }

    fn spawn_with_env(name: &'static str, args: &[String], env: &[(&str, &str)]) -> Result<Self> {
        Self::spawn_binary(name, Path::new(BIN), args, env)
    }

    fn spawn_binary(
        name: &'static str,
        binary: &Path,
        args: &[String],
        env: &[(&str, &str)],
    ) -> Result<Self> {
        let mut command = Command::new(binary);
        // No inherited proxies or AZURE_SCHEDULED_EVENTS_* settings.
        command
            .args(args)
            .env_clear()
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit());
        if let Some(path) = std::env::var_os("PATH") {
            command.env("PATH", path);
        }
        command.envs(env.iter().copied());
        let child = command.spawn()?;
        let pid = child.id().to_string();
        Ok(Self { name, child, pid })
    }

    fn check_running(&self) -> Result<()> {
        match std::fs::read_to_string(format!("/proc/{}/stat", self.pid)) {
            // State is the field after the parenthesised command name; Z is an exited child.
            Ok(stat)
                if !stat
                    .rsplit_once(") ")
                    .is_some_and(|(_, rest)| rest.starts_with('Z')) =>
            {
                Ok(())
            }
            _ => Err(format!("the {} exited early", self.name).into()),
        }
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// CPU time a process has used so far.
#[derive(Debug)]
struct Cpu {
    /// Sum of every live thread's run time from `schedstat`.
    nanos: u64,
    /// `utime + stime` from `stat`, in clock ticks, including exited threads.
    ticks: u64,
}

impl Cpu {
    fn of(pid: &str) -> Result<Self> {
        let mut nanos = 0;
        for task in std::fs::read_dir(format!("/proc/{pid}/task"))? {
            let schedstat = std::fs::read_to_string(task?.path().join("schedstat"))?;
            nanos += schedstat
                .split_whitespace()
                .next()
                .ok_or("empty schedstat")?
                .parse::<u64>()?;
        }
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
        let (_, rest) = stat.rsplit_once(") ").ok_or("unreadable stat")?;
        // After the command name: state is field 3 of stat, utime 14 and stime 15.
        let fields: Vec<&str> = rest.split_whitespace().collect();
        let field = |n: usize| -> Result<u64> {
            Ok(fields.get(n - 3).ok_or("short stat")?.parse::<u64>()?)
        };
        Ok(Self {
            nanos,
            ticks: field(14)? + field(15)?,
        })
    }

    fn since(&self, before: &Cpu) -> Cpu {
        Cpu {
            nanos: self.nanos.saturating_sub(before.nanos),
            ticks: self.ticks.saturating_sub(before.ticks),
        }
    }
}

/// Resident memory of a process, from `/proc/<pid>/status`.
#[derive(Debug)]
struct Memory {
    rss_kib: u64,
    hwm_kib: u64,
    /// Of the resident memory: the heap and stacks.
    anon_kib: u64,
    /// Of the resident memory: pages of files mapped, the binary's code and data above all.
    file_kib: u64,
}

impl Memory {
    fn of(pid: &str) -> Result<Self> {
        let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
        let kib = |key: &str| -> Result<u64> {
            let line = status
                .lines()
                .find_map(|line| line.strip_prefix(key))
                .ok_or_else(|| format!("no {key} in status"))?;
            Ok(line.trim().trim_end_matches("kB").trim().parse()?)
        };
        Ok(Self {
            rss_kib: kib("VmRSS:")?,
            hwm_kib: kib("VmHWM:")?,
            anon_kib: kib("RssAnon:")?,
            file_kib: kib("RssFile:")?,
        })
    }
}
