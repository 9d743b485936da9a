//! HTTP/1 on hyper, as both of the project's servers use it: the agent's `/metrics` listener and
//! the simulated IMDS. [`serve`] is the plain accept loop with graceful shutdown; [`accept`] and
//! [`drain`] are its parts, for a listener that adds TLS or limits of its own; [`respond`] builds a
//! response with a fixed body; [`listen_address`] reads where a server listens, as both take it.

use std::future::Future;
use std::net::{IpAddr, Ipv4Addr, SocketAddr, ToSocketAddrs};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::header::{CONTENT_TYPE, HeaderValue};
use hyper::service::service_fn;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use tokio::net::{TcpListener, TcpStream};

/// How long in-flight requests may finish after shutdown begins.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(5);

/// Accepts HTTP/1 connections on `listener` until `shutdown` completes, then lets in-flight
/// requests finish for a few seconds. `handle` answers each request; an `Err` from it closes the
/// connection without a response (the simulator's dropped-connection fault).
pub async fn serve<H, F, E>(
    listener: TcpListener,
    handle: H,
    shutdown: impl Future<Output = ()>,
) -> std::io::Result<()>
where
    H: Fn(Request<Incoming>) -> F + Clone + Send + Sync + 'static,
    F: Future<Output = Result<Response<Full<Bytes>>, E>> + Send + 'static,
    E: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let graceful = GracefulShutdown::new();
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            stream = accept(&listener) => {
                let handle = handle.clone();
                // The timer lets hyper drop clients that never finish sending their headers.
                let connection = hyper::server::conn::http1::Builder::new()
                    .timer(TokioTimer::new())
                    .serve_connection(TokioIo::new(stream), service_fn(handle));
                let connection = graceful.watch(connection);
                tokio::spawn(async move {
                    if let Err(error) = connection.await {
                        tracing::debug!(%error, "connection ended with an error");
                    }
                });
            }
            () = &mut shutdown => break,
        }
    }
    drop(listener);
    drain(graceful).await;
    Ok(())
}

/// The next connection on `listener`. A failed accept is logged and retried after a short pause:
/// running out of file descriptors is the usual cause, and spinning would not help.
pub async fn accept(listener: &TcpListener) -> TcpStream {
    loop {
        match listener.accept().await {
            Ok((stream, _)) => return stream,
            Err(error) => {
                tracing::warn!(%error, "cannot accept a connection");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
}

/// Lets in-flight requests finish for a few seconds once the listener is closed.
pub async fn drain(graceful: GracefulShutdown) {
    if tokio::time::timeout(DRAIN_TIMEOUT, graceful.shutdown())
        .await
        .is_err()
    {
        tracing::debug!("in-flight requests did not finish before shutdown");
    }
}

/// A response with a fixed body.
pub fn respond(
    status: StatusCode,
    content_type: HeaderValue,
    body: impl Into<Bytes>,
) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(body.into()));
    *response.status_mut() = status;
    response.headers_mut().insert(CONTENT_TYPE, content_type);
    response
}

/// `:PORT` (every address), `IP:PORT`, `[IPv6]:PORT`, or `HOST:PORT` as exporters accept it: a
/// host name is resolved once, here, and the listener takes its first address (`localhost` is
/// the loopback address /etc/hosts gives first).
pub fn listen_address(text: &str) -> Result<SocketAddr, String> {
    let refused = || format!("{text:?} is not :PORT, IP:PORT, [IPv6]:PORT or HOST:PORT");
    if let Some(port) = text.strip_prefix(':') {
        let port = port.parse().map_err(|_| refused())?;
        return Ok(SocketAddr::new(IpAddr::V4(Ipv4Addr::UNSPECIFIED), port));
    }
    if let Ok(address) = text.parse() {
        return Ok(address);
    }
    let (host, port) = text.rsplit_once(':').ok_or_else(refused)?;
    let port: u16 = port.parse().map_err(|_| refused())?;
    if host.is_empty() || host.contains(':') || host.contains('[') {
        return Err(refused());
    }
    (host, port)
        .to_socket_addrs()
        .map_err(|error| format!("{text:?}: cannot resolve {host:?}: {error}"))?
        .next()
        .ok_or_else(|| format!("{text:?}: {host:?} resolves to no address"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn listen_addresses_follow_exporter_conventions() {
        assert_eq!(
            listen_address(":9100"),
            Ok(SocketAddr::from(([0, 0, 0, 0], 9100)))
        );
        assert_eq!(
            listen_address("127.0.0.1:0"),
            Ok(SocketAddr::from(([127, 0, 0, 1], 0)))
        );
        assert!(listen_address("[::1]:10188").is_ok());
        assert!(listen_address("localhost").is_err());
        assert!(listen_address("localhost:port").is_err());
    }

    #[test]
    fn a_host_name_in_the_listen_address_is_resolved_to_its_first_address() {
        let address = listen_address("localhost:10188");
        assert!(
            address
                .as_ref()
                .is_ok_and(|a| a.ip().is_loopback() && a.port() == 10188),
            "{address:?}"
        );
    }
}
