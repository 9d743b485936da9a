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
use tokio::sync::watch;

use crate::metrics::Metrics;

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
    /// An encoding asked for by scrapes that arrived while one was running, and whether one of
    /// them accepts gzip.
    next: Option<bool>,
}

/// The shared encoder of one registry.
#[derive(Debug)]
pub struct Exposition {
    metrics: Arc<Metrics>,
    runs: Mutex<Runs>,
    done: watch::Sender<Option<Arc<Encoded>>>,
}

impl Exposition {
    pub fn new(metrics: Arc<Metrics>) -> Arc<Self> {
        Arc::new(Self {
            metrics,
            runs: Mutex::default(),
            done: watch::Sender::new(None),
        })
    }

    fn runs(&self) -> std::sync::MutexGuard<'_, Runs> {
        self.runs.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The first encoding started after this call, gzipped too when `gzip`.
    pub async fn encoded(self: &Arc<Self>, gzip: bool) -> Arc<Encoded> {
        // Subscribed before asking, so the answer cannot be missed.
        let mut done = self.done.subscribe();
        let target = {
            let mut runs = self.runs();
            if runs.running {
                let next = runs.next.get_or_insert(false);
                *next |= gzip;
                runs.started + 1
            } else {
                runs.started += 1;
                runs.running = true;
                let generation = runs.started;
                let this = Arc::clone(self);
                tokio::task::spawn_blocking(move || this.run(generation, gzip));
                generation
            }
        };
        let found = done
            .wait_for(|encoded| encoded.as_ref().is_some_and(|e| e.generation >= target))
            .await;
        match found {
            Ok(encoded) => encoded.as_ref().map(Arc::clone),
            // The sender lives as long as `self`, which this call holds: never reached.
            Err(_) => None,
        }
        .unwrap_or_else(|| {
            Arc::new(Encoded {
                generation: target,
                text: Err("the encoder stopped".into()),
                gzip: None,
            })
        })
    }

    /// Encodes, then again as long as scrapes asked for a next encoding meanwhile.
    fn run(&self, mut generation: u64, mut gzip: bool) {
        loop {
            let encoded = encode(&self.metrics, generation, gzip);
            if let Err(error) = &encoded.text {
                tracing::error!(%error, "cannot encode metrics");
            }
            self.done.send_replace(Some(Arc::new(encoded)));
            let mut runs = self.runs();
            match runs.next.take() {
                Some(next_gzip) => {
                    runs.started += 1;
                    generation = runs.started;
                    gzip = next_gzip;
                }
                None => {
                    runs.running = false;
                    return;
                }
            }
        }
    }
}

fn encode(metrics: &Metrics, generation: u64, gzip: bool) -> Encoded {
    // A collector that panicked must not leave every later scrape waiting.
    let text = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| metrics.encode()))
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
    use crate::metrics::{EventSeries, Families};

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
        let before = exposition.encoded(false).await;
        exposition.metrics.set_state_up(true);
        let after = exposition.encoded(false).await;
        assert!(after.generation > before.generation);
        let text = String::from_utf8(after.text.clone()?.to_vec())?;
        assert!(
            text.contains("azure_scheduled_events_state_up 1\n"),
            "{text}"
        );
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
        assert_eq!(exposition.runs().next, Some(true));
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
        Ok(())
    }
}
