//! Parse and track time of one poll, for documents of 1, 100 and 1000 events naming 1, 100 and
//! 1000 resources.
//!
//! Three measurements per document:
//! - `parse`: `Document::from_json` alone (serde into the wire structs, then the domain types);
//! - `steady`: parse, then `Tracker::observe` on a tracker that already saw the same document:
//!   what the agent does every second while nothing changes;
//! - `first`: parse, then the first `observe` on an empty tracker (every event appears).
//!
//! Bodies above `limits::MAX_BODY_BYTES` are parsed anyway, to show the cost curve: the agent itself
//! would refuse them as `too_large` before parsing.
//!
//! `cargo bench -p azure-scheduled-events-core --bench parse_track`; under `cargo test` only the
//! small documents run, once.

mod common;

use std::hint::black_box;
use std::io::Write;
use std::time::Duration;

use azure_scheduled_events_core::event::Document;
use azure_scheduled_events_core::limits::MAX_BODY_BYTES;
use azure_scheduled_events_core::tracker::Tracker;
use chrono::{DateTime, Utc};
use criterion::{BatchSize, BenchmarkId, Criterion, SamplingMode, Throughput};

type BenchResult = Result<(), Box<dyn std::error::Error>>;

/// The (events, resources) grid of the issue.
const SIZES: [usize; 3] = [1, 100, 1000];

const HEADER: [&str; 3] = ["events", "resources", "body bytes"];

/// Documents this many bytes or larger are sampled flat with few samples: one iteration of the
/// 1000 x 1000 document takes a large fraction of a second.
const LARGE: usize = 1024 * 1024;

fn main() -> BenchResult {
    let benchmarking = std::env::args().any(|arg| arg == "--bench");
    // Under `cargo test` (a debug build, each benchmark run once) the big documents only cost CI time.
    let sizes: &[usize] = if benchmarking { &SIZES } else { &SIZES[..2] };
    let now: DateTime<Utc> = DateTime::from_timestamp(1_767_225_600, 0).unwrap_or_default();

    let mut documents = Vec::new();
    let mut out = std::io::stdout().lock();
    writeln!(
        out,
        "{:>7} {:>10} {:>12}  within the agent's body cap",
        HEADER[0], HEADER[1], HEADER[2]
    )?;
    for &events in sizes {
        for &resources in sizes {
            let body = common::document(events, resources)?;
            writeln!(
                out,
                "{events:>7} {resources:>10} {:>12}  {}",
                body.len(),
                if body.len() <= MAX_BODY_BYTES {
                    "yes".to_owned()
                } else {
                    format!("no: above {MAX_BODY_BYTES} bytes, the agent would answer too_large")
                }
            )?;
            documents.push((events, resources, body));
        }
    }
    drop(out);

    let mut criterion = Criterion::default()
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(3))
        .configure_from_args();

    let mut group = criterion.benchmark_group("parse_track");
    for (events, resources, body) in &documents {
        let id = format!("{events}x{resources}");
        let large = body.len() >= LARGE;
        if large {
            group.sampling_mode(SamplingMode::Flat).sample_size(10);
        } else {
            group.sampling_mode(SamplingMode::Auto).sample_size(50);
        }
        group.throughput(Throughput::Bytes(body.len() as u64));

        group.bench_with_input(BenchmarkId::new("parse", &id), body, |b, body| {
            b.iter(|| Document::from_json(black_box(body)));
        });

        let mut tracker = Tracker::new();
        tracker.observe(Document::from_json(body)?, now);
        group.bench_with_input(BenchmarkId::new("steady", &id), body, |b, body| {
            b.iter(|| {
                Document::from_json(black_box(body))
                    .map(|document| tracker.observe(document, black_box(now)))
            });
        });
        drop(tracker);

        // The filled tracker is returned so that dropping it is not timed.
        let batch = if large {
            BatchSize::PerIteration
        } else {
            BatchSize::SmallInput
        };
        group.bench_with_input(BenchmarkId::new("first", &id), body, |b, body| {
            b.iter_batched(
                Tracker::new,
                |mut tracker| {
                    let observation = Document::from_json(black_box(body))
                        .map(|document| tracker.observe(document, black_box(now)));
                    (tracker, observation)
                },
                batch,
            );
        });
    }
    group.finish();
    criterion.final_summary();
    Ok(())
}
