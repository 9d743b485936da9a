//! The exposition `/metrics` serves: encoded (and gzipped) off the poll loop's thread, once for
//! every scrape waiting at the same time.
//!
//! The agent runs on one thread. Encoding the series of 5,000 events and gzipping them takes
//! tens of milliseconds, so forty scrapers doing it each on that thread left the loop no time to
//! poll. Here at most one encoding runs at a time, on a blocking thread. A scrape waits for the
//! first encoding that starts after it arrived, so it never sees metrics older than itself and
//! the values computed at scrape time (`..._event_seconds_until_not_before`, `process_*`) stay
//! exact; every scrape waiting for the same encoding shares its bytes and its one gzip. The
//! bytes are those of the prometheus crate's text encoder, unchanged.

use std::io::Write as _;
use std::sync::{Arc, Mutex, PoisonError};

use bytes::Bytes;
use prometheus::{Encoder as _, TextEncoder};
use tokio::sync::watch;

use crate::output::metrics::Metrics;

/// Bodies smaller than this are sent as they are: compressing them saves nothing.
const GZIP_MIN_BYTES: usize = 1024;

/// One encoding of the registry.
#[derive(Debug)]
pub struct Encoded {
    /// Which encoding this is: the n-th since the agent started.
    generation: u64,
    /// The text exposition, or why it could not be encoded.
    pub text: Result<Bytes, String>,
    /// The text gzipped, when a scrape waiting for it accepts gzip and it is worth it.
    pub gzip: Option<Bytes>,
}

/// Encodings started and asked for.
#[derive(Debug, Default)]
struct Runs {
    /// Encodings started so far; the running one, when one runs, is this one.
    started: u64,
    running: bool,
    /// Scrapes waiting for the running encoding.
    waiting: usize,
    /// An encoding asked for by scrapes that arrived while one was running.
    next: Option<Next>,
    /// The encoding the channel holds and how many of its scrapes have yet to take it: the last
    /// one empties the channel, so the bytes live no longer than the answers that carry them.
    held: Option<(u64, usize)>,
    /// The length of the last exposition, to size the next one's buffer at once.
    last_len: usize,
}

#[derive(Debug, Default)]
struct Next {
    /// Whether one of its scrapes accepts gzip.
    gzip: bool,
    waiting: usize,
}

/// The shared encoder of one registry.
#[derive(Debug)]
pub struct Exposition {
    metrics: Arc<Metrics>,
    runs: Mutex<Runs>,
    /// The last encoding done, and its bytes while scrapes have yet to take them.
    done: watch::Sender<(u64, Option<Arc<Encoded>>)>,
}

impl Exposition {
    pub fn new(metrics: Arc<Metrics>) -> Arc<Self> {
        Arc::new(Self {
            metrics,
            runs: Mutex::default(),
            done: watch::Sender::new((0, None)),
        })
    }

    fn runs(&self) -> std::sync::MutexGuard<'_, Runs> {
        self.runs.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The first encoding started after this call, gzipped too when `gzip`.
    pub async fn encoded(self: &Arc<Self>, gzip: bool) -> Arc<Encoded> {
        loop {
            // Subscribed before asking, so the answer cannot be missed.
            let mut done = self.done.subscribe();
            let target = self.ask(gzip);
            let found = match done.wait_for(|(generation, _)| *generation >= target).await {
                Ok(done) => done.1.as_ref().map(Arc::clone),
                // The sender lives as long as `self`, which this call holds: never reached.
                Err(_) => {
                    return Arc::new(Encoded {
                        generation: target,
                        text: Err("the encoder stopped".into()),
                        gzip: None,
                    });
                }
            };
            match found {
                Some(encoded) => {
                    if encoded.generation == target {
                        self.taken(target);
                    }
                    return encoded;
                }
                // Seen only after the scrapes of a later encoding took theirs and emptied
                // the channel (this task was slow to run): ask for a fresh one.
                None => continue,
            }
        }
    }

    /// Asks for the first encoding that starts from now on; its generation.
    fn ask(self: &Arc<Self>, gzip: bool) -> u64 {
        let mut runs = self.runs();
        if runs.running {
            let next = runs.next.get_or_insert_with(Next::default);
            next.gzip |= gzip;
            next.waiting += 1;
            runs.started + 1
        } else {
            runs.started += 1;
            runs.running = true;
            runs.waiting = 1;
            let generation = runs.started;
            let this = Arc::clone(self);
            tokio::task::spawn_blocking(move || this.run(generation, gzip));
            generation
        }
    }

    /// One scrape of `generation` has its answer; the last one empties the channel.
    fn taken(&self, generation: u64) {
        let mut runs = self.runs();
        let Some((held, left)) = &mut runs.held else {
            return;
        };
        if *held != generation {
            return;
        }
        *left = left.saturating_sub(1);
        if *left == 0 {
            runs.held = None;
            self.done.send_if_modified(|(done, encoded)| {
                if *done == generation {
                    *encoded = None;
                }
                false
            });
        }
    }

    /// Encodes, then again as long as scrapes asked for a next encoding meanwhile.
    fn run(&self, mut generation: u64, mut gzip: bool) {
        loop {
            let size_hint = self.runs().last_len;
            let encoded = encode(&self.metrics, generation, gzip, size_hint);
            if let Err(error) = &encoded.text {
                tracing::error!(%error, "cannot encode metrics");
            }
            let mut runs = self.runs();
            if let Ok(text) = &encoded.text {
                runs.last_len = text.len();
            }
            runs.held = Some((generation, runs.waiting));
            let held = (runs.waiting > 0).then(|| Arc::new(encoded));
            self.done.send_replace((generation, held));
            match runs.next.take() {
                Some(next) => {
                    runs.started += 1;
                    runs.waiting = next.waiting;
                    generation = runs.started;
                    gzip = next.gzip;
                }
                None => {
                    runs.running = false;
                    runs.waiting = 0;
                    return;
                }
            }
        }
    }
}

/// The registry in the text format, written as the prometheus crate writes it, into a buffer
/// sized for the last exposition so a large one is not copied as it grows.
fn encode(metrics: &Metrics, generation: u64, gzip: bool, size_hint: usize) -> Encoded {
    // A collector that panicked must not leave every later scrape waiting.
    let text = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let families = metrics.registry().gather();
        let mut buffer = Vec::with_capacity(size_hint + size_hint / 8);
        TextEncoder::new().encode(&families, &mut buffer)?;
        Ok::<_, prometheus::Error>(buffer)
    }))
    .map_err(|_| "encoding panicked".to_owned())
    .and_then(|result| result.map_err(|e| e.to_string()))
    .map(Bytes::from);
    let gzip = match &text {
        Ok(text) if gzip && text.len() >= GZIP_MIN_BYTES => compress(text),
        _ => None,
    };
    Encoded {
        generation,
        text,
        gzip,
    }
}

fn compress(text: &[u8]) -> Option<Bytes> {
    let mut encoder = flate2::write::GzEncoder::new(
        Vec::with_capacity(text.len() / 4),
        flate2::Compression::fast(),
    );
    encoder.write_all(text).ok()?;
    encoder.finish().ok().map(Bytes::from)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::output::metrics::{EventSeries, Families};

    fn exposition() -> Result<Arc<Exposition>, prometheus::Error> {
        let families = Families {
            process: false,
            ..Families::DEFAULT
        };
        Ok(Exposition::new(Arc::new(Metrics::new(
            "2020-07-01",
            EventSeries::ThisVm,
            families,
        )?)))
    }

    #[tokio::test]
    async fn the_bytes_are_the_encoders_own() -> Result<(), Box<dyn std::error::Error>> {
        let exposition = exposition()?;
        let encoded = exposition.encoded(true).await;
        let text = encoded.text.clone()?;
        assert_eq!(text, exposition.metrics.encode()?.as_bytes());
        let gzip = encoded.gzip.clone().ok_or("no gzip")?;
        let mut plain = Vec::new();
        std::io::Read::read_to_end(&mut flate2::read::GzDecoder::new(&gzip[..]), &mut plain)?;
        assert_eq!(plain, text);
        assert!(exposition.encoded(false).await.gzip.is_none());
        Ok(())
    }

    #[tokio::test]
    async fn a_scrape_never_sees_metrics_older_than_itself()
    -> Result<(), Box<dyn std::error::Error>> {
        let exposition = exposition()?;
        let counter = prometheus::IntCounter::new("scrape_test_total", "A test counter.")?;
        exposition
            .metrics
            .registry()
            .register(Box::new(counter.clone()))?;
        let before = exposition.encoded(false).await;
        counter.inc();
        let after = exposition.encoded(false).await;
        assert!(after.generation > before.generation);
        let text = String::from_utf8(after.text.clone()?.to_vec())?;
        assert!(text.contains("scrape_test_total 1\n"), "{text}");
        Ok(())
    }

    #[tokio::test]
    async fn scrapes_arriving_during_an_encoding_share_the_next_one()
    -> Result<(), Box<dyn std::error::Error>> {
        let exposition = exposition()?;
        {
            let mut runs = exposition.runs();
            runs.started = 1;
            runs.running = true;
        }
        let scrapes: Vec<_> = (0..40)
            .map(|i| {
                let exposition = Arc::clone(&exposition);
                tokio::spawn(async move { exposition.encoded(i == 7).await })
            })
            .collect();
        while exposition.done.receiver_count() < 40 {
            tokio::task::yield_now().await;
        }
        let next = exposition
            .runs()
            .next
            .as_ref()
            .map(|next| (next.gzip, next.waiting));
        assert_eq!(next, Some((true, 40)));
        let running = Arc::clone(&exposition);
        tokio::task::spawn_blocking(move || running.run(1, false)).await?;
        for scrape in scrapes {
            let encoded = scrape.await?;
            assert_eq!(encoded.generation, 2, "the first encoding after it arrived");
            assert!(encoded.gzip.is_some(), "one scrape accepted gzip");
        }
        let runs = exposition.runs();
        assert_eq!(runs.started, 2, "40 scrapes, one encoding of their own");
        assert!(!runs.running);
        assert!(
            exposition.done.borrow().1.is_none(),
            "the bytes live no longer than the answers that carry them"
        );
        Ok(())
    }

    #[tokio::test]
    async fn a_scrape_that_finds_its_encoding_gone_asks_for_a_fresh_one()
    -> Result<(), Box<dyn std::error::Error>> {
        let exposition = exposition()?;
        {
            let mut runs = exposition.runs();
            runs.started = 2;
            runs.running = true;
        }
        let waiter = Arc::clone(&exposition);
        let scrape = tokio::spawn(async move { waiter.encoded(false).await });
        while exposition.runs().next.is_none() {
            tokio::task::yield_now().await;
        }
        // Encoding 3 ran, and its scrapes took its bytes before this one looked.
        {
            let mut runs = exposition.runs();
            runs.started = 3;
            runs.next = None;
        }
        exposition.done.send_replace((3, None));
        while exposition.runs().next.is_none() {
            tokio::task::yield_now().await;
        }
        let running = Arc::clone(&exposition);
        tokio::task::spawn_blocking(move || running.run(3, false)).await?;
        let encoded = scrape.await?;
        assert_eq!(encoded.generation, 4);
        assert!(encoded.text.is_ok());
        Ok(())
    }
}
