//! The agent's listener, with what Prometheus exporters built on the exporter-toolkit offer:
//! TLS and basic authentication from `--web.config.file` ([`crate::config::web`]), gzip when the
//! scraper accepts it, at most `--web.max-requests` concurrent scrapes (beyond it a 503, as in
//! node_exporter), and at most `--web.max-connections` open connections. Scrapes are answered
//! from [`crate::http::exposition`]: encoded off the poll loop's thread, once for all the scrapes that
//! wait at the same time.
//!
//! The connection bound is what keeps a flood of idle connections from taking every file
//! descriptor of the agent (and with them the sockets it polls IMDS with): when it is reached, a
//! connection is closed to make room for the new one: the oldest that has not been served an
//! authenticated request (without authentication: that has sent no request), else the oldest
//! idle one, else the oldest. A scraper therefore always gets in, and a stream of new connections
//! from a client that cannot authenticate pushes out its own connections before a scraper's.
//!
//! Authentication comes before everything but `rate_limit`, on every path, through
//! [`crate::http::auth`]'s budget of password checks; a scrape takes one of
//! `--web.max-requests`'s places only once it is authenticated, so a client without the password
//! can never refuse a scraper who has it.

use std::collections::VecDeque;
use std::future::Future;
use std::net::IpAddr;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::header::{
    ACCEPT_ENCODING, AUTHORIZATION, CONTENT_ENCODING, HeaderValue, VARY, WWW_AUTHENTICATE,
};
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::{GracefulShutdown, Watcher};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;
use tokio::task::AbortHandle;

use crate::config::web::{Loaded, WebConfigFile, WebSettings};
use crate::http::auth::{CheckBudget, RateBucket, Refusal};
use crate::http::exposition::{Encoded, Exposition};
use crate::output::limited_log::{self, Limited};
use azure_scheduled_events_protocol::http::{accept, drain, respond};

use crate::http::server::{EXPOSITION, Endpoints};

/// How long a client has to send a request's headers (hyper's timer) and, with TLS, to finish
/// its handshake. Scrapers send at once; a connection that sends nothing is closed.
const HEADER_TIMEOUT: Duration = Duration::from_secs(10);

/// What every connection's task shares.
#[derive(Debug)]
struct Shared {
    endpoints: Arc<Endpoints>,
    exposition: Arc<Exposition>,
    config: Option<Arc<WebConfigFile>>,
    scrapes: Option<Semaphore>,
    checks: CheckBudget,
    rate: RateBucket,
    connections: Mutex<Connections>,
    /// The warning about closed connections, once a minute.
    eviction_warning: Limited,
}

/// Open connections, oldest first.
#[derive(Debug, Default)]
struct Connections {
    next_id: u64,
    open: VecDeque<Connection>,
}

#[derive(Debug)]
struct Connection {
    id: u64,
    handle: Option<AbortHandle>,
    /// It has been served a request that passed authentication (any request, without it).
    trusted: bool,
    /// It is answering such a request now.
    busy: bool,
}

impl Connections {
    /// Which connection to close for a new one: the oldest not trusted, else the oldest idle,
    /// else the oldest.
    fn to_close(&self) -> Option<usize> {
        let position = |which: fn(&Connection) -> bool| self.open.iter().position(which);
        position(|c| !c.trusted)
            .or_else(|| position(|c| !c.busy))
            .or_else(|| (!self.open.is_empty()).then_some(0))
    }

    fn get(&mut self, id: u64) -> Option<&mut Connection> {
        self.open.iter_mut().find(|c| c.id == id)
    }
}

/// Marks its connection busy while it answers an authenticated request.
struct Serving<'a> {
    id: u64,
    shared: &'a Shared,
}

impl Drop for Serving<'_> {
    fn drop(&mut self) {
        if let Some(connection) = self.shared.connections().get(self.id) {
            connection.busy = false;
        }
    }
}

/// Removes its connection from [`Connections`] when the connection's task ends or is aborted.
struct Registration {
    id: u64,
    shared: Arc<Shared>,
}

impl Drop for Registration {
    fn drop(&mut self) {
        let mut connections = self.shared.connections();
        if let Some(index) = connections.open.iter().position(|c| c.id == self.id) {
            connections.open.remove(index);
        }
    }
}

impl Shared {
    fn connections(&self) -> std::sync::MutexGuard<'_, Connections> {
        self.connections
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Registers a new connection, closing others ([`Connections::to_close`]) while there are
    /// too many.
    fn register(self: &Arc<Self>, max: usize) -> Registration {
        let mut connections = self.connections();
        let mut evicted = 0;
        while connections.open.len() >= max {
            let Some(closed) = connections
                .to_close()
                .and_then(|index| connections.open.remove(index))
            else {
                break;
            };
            if let Some(handle) = closed.handle {
                handle.abort();
            }
            evicted += 1;
        }
        let id = connections.next_id;
        connections.next_id += 1;
        connections.open.push_back(Connection {
            id,
            handle: None,
            trusted: false,
            busy: false,
        });
        drop(connections);
        if evicted > 0 {
            self.warn_eviction(max);
        }
        Registration {
            id,
            shared: Arc::clone(self),
        }
    }

    fn set_handle(&self, id: u64, handle: AbortHandle) {
        if let Some(connection) = self.connections().get(id) {
            connection.handle = Some(handle);
        }
    }

    /// Marks connection `id` trusted, and busy until the guard is dropped.
    fn serving(&self, id: u64) -> Serving<'_> {
        if let Some(connection) = self.connections().get(id) {
            connection.trusted = true;
            connection.busy = true;
        }
        Serving { id, shared: self }
    }

    fn warn_eviction(&self, max: usize) {
        if let Some(suppressed) = self.eviction_warning.admit() {
            tracing::warn!(
                max_connections = max,
                suppressed,
                "too many open connections: closing the oldest ones, unauthenticated and idle ones first (logged at most once a minute, suppressed counts the lines left out)"
            );
        }
    }
}

/// Serves the agent's endpoints until `shutdown` completes.
pub async fn serve(
    listener: TcpListener,
    endpoints: Arc<Endpoints>,
    settings: WebSettings,
    shutdown: impl Future<Output = ()>,
) -> std::io::Result<()> {
    let shared = Arc::new(Shared {
        exposition: Exposition::new(Arc::clone(&endpoints.metrics)),
        endpoints,
        config: settings.config,
        scrapes: settings.max_requests.map(Semaphore::new),
        checks: CheckBudget::for_this_machine(),
        rate: RateBucket::default(),
        connections: Mutex::default(),
        eviction_warning: Limited::new(limited_log::EVERY),
    });
    let graceful = GracefulShutdown::new();
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            stream = accept(&listener) => {
                let registration = shared.register(settings.max_connections);
                let id = registration.id;
                let task = tokio::spawn(connection(
                    stream,
                    Arc::clone(&shared),
                    graceful.watcher(),
                    registration,
                ));
                shared.set_handle(id, task.abort_handle());
                // The new connection reads its first request before the next one is accepted.
                // Accepted in one burst, connections would all still be unserved when the bound
                // is met, and a prober's among them closed as readily as an attacker's.
                tokio::task::yield_now().await;
            }
            () = &mut shutdown => break,
        }
    }
    drop(listener);
    drain(graceful).await;
    Ok(())
}

/// One connection: the TLS handshake when configured, then HTTP/1.
async fn connection(
    stream: TcpStream,
    shared: Arc<Shared>,
    watcher: Watcher,
    registration: Registration,
) {
    let id = registration.id;
    // Without its address (a socket already reset) a client ranks as one that sent no password.
    let client = stream
        .peer_addr()
        .map_or(IpAddr::from([0, 0, 0, 0]), |a| a.ip());
    let tls = match shared.config.as_ref().filter(|c| c.tls()) {
        None => None,
        Some(config) => match current(config) {
            Some(loaded) => match loaded.tls.clone() {
                Some(tls) => Some(tls),
                None => {
                    if let Some(suppressed) = NO_TLS.admit() {
                        tracing::warn!(
                            suppressed,
                            "the web configuration file no longer has tls_server_config; refusing connections until it does (TLS is chosen at startup; logged at most once a minute, suppressed counts the lines left out)"
                        );
                    }
                    return;
                }
            },
            None => return,
        },
    };
    match tls {
        None => http(stream, shared, id, client, watcher).await,
        Some(tls) => {
            let acceptor = tokio_rustls::TlsAcceptor::from(tls);
            match tokio::time::timeout(HEADER_TIMEOUT, acceptor.accept(stream)).await {
                Ok(Ok(stream)) => http(stream, shared, id, client, watcher).await,
                Ok(Err(error)) => tracing::debug!(%error, "TLS handshake failed"),
                Err(_) => tracing::debug!("TLS handshake timed out"),
            }
        }
    }
}

/// Warnings a client can repeat at will, at most once a minute each.
static INVALID_CONFIG: Limited = Limited::new(limited_log::EVERY);
static NO_TLS: Limited = Limited::new(limited_log::EVERY);

/// The web configuration to serve with: the last valid one while the files are not
/// ([`WebConfigFile::current`]), said in a warning at most once a minute. `None` only when none
/// ever was, which startup rules out.
fn current(config: &WebConfigFile) -> Option<Arc<Loaded>> {
    match config.current() {
        Ok((loaded, None)) => Some(loaded),
        Ok((loaded, Some(error))) => {
            if let Some(suppressed) = INVALID_CONFIG.admit() {
                tracing::warn!(
                    %error,
                    suppressed,
                    "cannot use the web configuration file; the last valid configuration (its certificate, users and limits) stays in force until it is mended (logged at most once a minute, suppressed counts the lines left out)"
                );
            }
            Some(loaded)
        }
        Err(error) => {
            if let Some(suppressed) = INVALID_CONFIG.admit() {
                tracing::warn!(%error, suppressed, "cannot use the web configuration file; refusing requests (logged at most once a minute, suppressed counts the lines left out)");
            }
            None
        }
    }
}

async fn http<I>(io: I, shared: Arc<Shared>, id: u64, client: IpAddr, watcher: Watcher)
where
    I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let service = service_fn(move |request| answer(Arc::clone(&shared), id, client, request));
    let connection = hyper::server::conn::http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(HEADER_TIMEOUT)
        .serve_connection(TokioIo::new(io), service);
    if let Err(error) = watcher.watch(connection).await {
        tracing::debug!(%error, "connection ended with an error");
    }
}

const TEXT: HeaderValue = HeaderValue::from_static("text/plain; charset=utf-8");

async fn answer(
    shared: Arc<Shared>,
    id: u64,
    client: IpAddr,
    request: Request<Incoming>,
) -> Result<Response<Full<Bytes>>, std::convert::Infallible> {
    if let Some(config) = &shared.config {
        let loaded = match current(config) {
            Some(loaded) => loaded,
            None => {
                return Ok(respond(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    TEXT,
                    "the web configuration file is invalid\n",
                ));
            }
        };
        if !shared.rate.take(loaded.rate_limit) {
            return Ok(respond(
                StatusCode::TOO_MANY_REQUESTS,
                TEXT,
                "too many requests (rate_limit in --web.config.file)\n",
            ));
        }
        if loaded.requires_auth() {
            let header = request
                .headers()
                .get(AUTHORIZATION)
                .map(HeaderValue::as_bytes);
            match shared.checks.authenticate(loaded, header, client).await {
                Ok(()) => {}
                Err(Refusal::Busy) => {
                    return Ok(respond(
                        StatusCode::SERVICE_UNAVAILABLE,
                        TEXT,
                        "too many password checks in progress\n",
                    ));
                }
                Err(Refusal::Denied) => {
                    let mut response = respond(StatusCode::UNAUTHORIZED, TEXT, "Unauthorized\n");
                    response.headers_mut().insert(
                        WWW_AUTHENTICATE,
                        HeaderValue::from_static("Basic realm=\"azure-scheduled-events-exporter\""),
                    );
                    return Ok(response);
                }
            }
        }
    }
    let _serving = shared.serving(id);
    let endpoints = &shared.endpoints;
    if request.uri().path() != endpoints.telemetry_path
        || !matches!(*request.method(), Method::GET | Method::HEAD)
    {
        return Ok(endpoints.answer(&request));
    }
    // Only an authenticated scrape takes a place, and holds it to the last byte encoded.
    let _permit = match &shared.scrapes {
        Some(scrapes) => match scrapes.try_acquire() {
            Ok(permit) => Some(permit),
            Err(_) => {
                return Ok(respond(
                    StatusCode::SERVICE_UNAVAILABLE,
                    TEXT,
                    "too many concurrent scrapes (--web.max-requests)\n",
                ));
            }
        },
        None => None,
    };
    let gzip = accepts_gzip(&request);
    Ok(scrape_response(
        &*shared.exposition.encoded(gzip).await,
        gzip,
    ))
}

/// The answer to a scrape from its encoding: gzipped when the scraper accepts it and the
/// encoding has it.
fn scrape_response(encoded: &Encoded, gzip: bool) -> Response<Full<Bytes>> {
    let text = match &encoded.text {
        Ok(text) => text,
        Err(error) => {
            return respond(
                StatusCode::INTERNAL_SERVER_ERROR,
                TEXT,
                format!("cannot encode metrics: {error}\n"),
            );
        }
    };
    match encoded.gzip.as_ref().filter(|_| gzip) {
        None => respond(StatusCode::OK, EXPOSITION, text.clone()),
        Some(compressed) => {
            let mut response = respond(StatusCode::OK, EXPOSITION, compressed.clone());
            let headers = response.headers_mut();
            headers.insert(CONTENT_ENCODING, HeaderValue::from_static("gzip"));
            headers.insert(VARY, HeaderValue::from_static("Accept-Encoding"));
            response
        }
    }
}

/// Whether `Accept-Encoding` lists gzip (or `*`) with a non-zero quality.
fn accepts_gzip<B>(request: &Request<B>) -> bool {
    request
        .headers()
        .get_all(ACCEPT_ENCODING)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|item| {
            let mut parts = item.split(';').map(str::trim);
            let coding = parts.next().unwrap_or_default();
            let zero = parts.any(|p| {
                p.strip_prefix("q=")
                    .and_then(|q| q.trim().parse::<f32>().ok())
                    .is_some_and(|q| q == 0.0)
            });
            (coding.eq_ignore_ascii_case("gzip") || coding == "*") && !zero
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with_encoding(value: &str) -> Request<()> {
        let mut request = Request::new(());
        if let Ok(value) = HeaderValue::from_str(value) {
            request.headers_mut().insert(ACCEPT_ENCODING, value);
        }
        request
    }

    fn open(states: &[(bool, bool)]) -> Connections {
        Connections {
            next_id: states.len() as u64,
            open: states
                .iter()
                .enumerate()
                .map(|(id, &(trusted, busy))| Connection {
                    id: id as u64,
                    handle: None,
                    trusted,
                    busy,
                })
                .collect(),
        }
    }

    #[test]
    fn the_connection_closed_first_is_the_oldest_untrusted_then_idle() {
        // (trusted, busy), oldest first.
        assert_eq!(
            open(&[(true, true), (true, false), (false, false)]).to_close(),
            Some(2)
        );
        assert_eq!(
            open(&[(true, true), (false, false), (false, false)]).to_close(),
            Some(1)
        );
        assert_eq!(
            open(&[(true, true), (true, true), (true, false)]).to_close(),
            Some(2)
        );
        assert_eq!(open(&[(true, true), (true, true)]).to_close(), Some(0));
        assert_eq!(open(&[]).to_close(), None);
    }

    #[test]
    fn gzip_is_used_only_when_accepted() {
        assert!(accepts_gzip(&with_encoding("gzip")));
        assert!(accepts_gzip(&with_encoding("deflate, gzip;q=0.5")));
        assert!(accepts_gzip(&with_encoding("*")));
        assert!(!accepts_gzip(&with_encoding("gzip;q=0")));
        assert!(!accepts_gzip(&with_encoding("identity")));
        assert!(!accepts_gzip(&Request::new(())));
    }
}
