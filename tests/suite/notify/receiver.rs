//! Stand-ins at the network edge for the notification tests: an HTTP receiver on loopback
//! (plain or TLS) that records what it is sent and answers as the test scripts, and a small
//! CONNECT proxy that records where it tunnels to.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, PoisonError};

use chrono::{DateTime, Utc};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use super::common::wait;

/// One request a receiver got.
#[derive(Debug, Clone)]
pub struct Hit {
    pub path: String,
    pub headers: Vec<(String, String)>,
    pub body: String,
    pub at: DateTime<Utc>,
    pub instant: tokio::time::Instant,
}

impl Hit {
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.body).unwrap_or(serde_json::Value::Null)
    }

    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// What the receiver answers to the next request.
#[derive(Debug, Clone)]
pub enum Answer {
    Status {
        code: u16,
        retry_after: Option<u64>,
        body: &'static str,
    },
    /// Reads the request and never answers.
    Hang,
}

pub fn status(code: u16) -> Answer {
    Answer::Status {
        code,
        retry_after: None,
        body: "",
    }
}

#[derive(Debug, Default)]
struct Shared {
    hits: Vec<Hit>,
    script: VecDeque<Answer>,
    /// Answer once the script is used up; 200 unless set.
    then: Option<Answer>,
}

/// A receiver on 127.0.0.1:0.
#[derive(Debug, Clone)]
pub struct Receiver {
    pub addr: SocketAddr,
    shared: Arc<Mutex<Shared>>,
}

impl Receiver {
    pub async fn start() -> std::io::Result<Self> {
        Self::start_with(None).await
    }

    /// A receiver speaking HTTPS with the certificate in tests/fixtures/notify (for `localhost`
    /// and 127.0.0.1, issued by `ca.pem` there).
    pub async fn start_tls() -> Result<Self, Box<dyn std::error::Error>> {
        use tokio_rustls::rustls::ServerConfig;
        use tokio_rustls::rustls::pki_types::pem::PemObject;
        use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer};
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/notify");
        let certs = CertificateDer::pem_file_iter(format!("{dir}/receiver.pem"))?
            .collect::<Result<Vec<_>, _>>()?;
        let key = PrivateKeyDer::from_pem_file(format!("{dir}/receiver.key"))?;
        let provider = Arc::new(tokio_rustls::rustls::crypto::ring::default_provider());
        let config = ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()?
            .with_no_client_auth()
            .with_single_cert(certs, key)?;
        Ok(Self::start_with(Some(tokio_rustls::TlsAcceptor::from(Arc::new(config)))).await?)
    }

    async fn start_with(tls: Option<tokio_rustls::TlsAcceptor>) -> std::io::Result<Self> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let receiver = Self {
            addr: listener.local_addr()?,
            shared: Arc::default(),
        };
        let shared = Arc::clone(&receiver.shared);
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let shared = Arc::clone(&shared);
                let tls = tls.clone();
                tokio::spawn(async move {
                    match tls {
                        Some(acceptor) => {
                            if let Ok(stream) = acceptor.accept(stream).await {
                                serve(stream, shared).await;
                            }
                        }
                        None => serve(stream, shared).await,
                    }
                });
            }
        });
        Ok(receiver)
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    /// Answers the next requests with `answers`, in order, then 200.
    pub fn script(&self, answers: impl IntoIterator<Item = Answer>) {
        self.lock().script.extend(answers);
    }

    /// Answers every request, once the script is used up, with `answer`.
    pub fn then_answer(&self, answer: Answer) {
        self.lock().then = Some(answer);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Shared> {
        self.shared.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub fn hits(&self) -> Vec<Hit> {
        self.lock().hits.clone()
    }

    pub fn hits_on(&self, path: &str) -> Vec<Hit> {
        self.hits().into_iter().filter(|h| h.path == path).collect()
    }

    /// Waits until `path` got at least `count` requests; returns them.
    pub async fn wait_for(&self, path: &str, count: usize) -> Result<Vec<Hit>, String> {
        wait(&format!("{count} requests to {path}"))
            .until(async || {
                let hits = self.hits_on(path);
                (hits.len() >= count).then_some(hits)
            })
            .await
            .map_err(|e| format!("{e}: {:?}", self.hits_on(path)))
    }
}

/// Reads one request head, up to the blank line.
async fn read_head<S: AsyncRead + Unpin>(stream: &mut S) -> Option<(String, Vec<u8>)> {
    let mut buffer = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        if let Some(end) = buffer.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&buffer[..end]).into_owned();
            return Some((head, buffer[end + 4..].to_vec()));
        }
        let read = stream.read(&mut chunk).await.ok()?;
        if read == 0 {
            return None;
        }
        buffer.extend_from_slice(&chunk[..read]);
    }
}

async fn serve<S: AsyncRead + AsyncWrite + Unpin>(mut stream: S, shared: Arc<Mutex<Shared>>) {
    let Some((head, mut body)) = read_head(&mut stream).await else {
        return;
    };
    let mut lines = head.split("\r\n");
    let path = lines
        .next()
        .and_then(|l| l.split(' ').nth(1))
        .unwrap_or("")
        .to_owned();
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(n, v)| (n.trim().to_owned(), v.trim().to_owned()))
        .collect();
    let length: usize = headers
        .iter()
        .find(|(n, _)| n.eq_ignore_ascii_case("content-length"))
        .and_then(|(_, v)| v.parse().ok())
        .unwrap_or(0);
    let mut chunk = [0u8; 4096];
    while body.len() < length {
        match stream.read(&mut chunk).await {
            Ok(0) | Err(_) => return,
            Ok(read) => body.extend_from_slice(&chunk[..read]),
        }
    }
    let answer = {
        let mut shared = shared.lock().unwrap_or_else(PoisonError::into_inner);
        shared.hits.push(Hit {
            path,
            headers,
            body: String::from_utf8_lossy(&body).into_owned(),
            at: Utc::now(),
            instant: tokio::time::Instant::now(),
        });
        let then = shared.then.clone();
        shared
            .script
            .pop_front()
            .or(then)
            .unwrap_or_else(|| status(200))
    };
    match answer {
        // A receiver that never answers: the connection stays open until the client gives up.
        Answer::Hang => std::future::pending::<()>().await,
        Answer::Status {
            code,
            retry_after,
            body,
        } => {
            let retry = retry_after
                .map(|s| format!("Retry-After: {s}\r\n"))
                .unwrap_or_default();
            let response = format!(
                "HTTP/1.1 {code} Scripted\r\n{retry}Content-Type: text/plain\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
            let _ = stream.write_all(response.as_bytes()).await;
            let _ = stream.shutdown().await;
        }
    }
}

/// A CONNECT proxy on 127.0.0.1:0 recording the request line of every connection it gets.
#[derive(Debug, Clone)]
pub struct Proxy {
    pub addr: SocketAddr,
    requests: Arc<Mutex<Vec<String>>>,
}

impl Proxy {
    pub async fn start() -> std::io::Result<Self> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let proxy = Self {
            addr: listener.local_addr()?,
            requests: Arc::default(),
        };
        let requests = Arc::clone(&proxy.requests);
        tokio::spawn(async move {
            while let Ok((mut client, _)) = listener.accept().await {
                let requests = Arc::clone(&requests);
                tokio::spawn(async move {
                    let Some((head, early)) = read_head(&mut client).await else {
                        return;
                    };
                    let line = head.lines().next().unwrap_or("").to_owned();
                    requests
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner)
                        .push(line.clone());
                    let mut words = line.split(' ');
                    let (Some("CONNECT"), Some(target)) = (words.next(), words.next()) else {
                        let _ = client
                            .write_all(b"HTTP/1.1 405 CONNECT only\r\nContent-Length: 0\r\n\r\n")
                            .await;
                        return;
                    };
                    let Ok(mut upstream) = TcpStream::connect(target).await else {
                        let _ = client
                            .write_all(b"HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\n\r\n")
                            .await;
                        return;
                    };
                    if client
                        .write_all(b"HTTP/1.1 200 Connection Established\r\n\r\n")
                        .await
                        .is_err()
                        || upstream.write_all(&early).await.is_err()
                    {
                        return;
                    }
                    let _ = tokio::io::copy_bidirectional(&mut client, &mut upstream).await;
                });
            }
        });
        Ok(proxy)
    }

    pub fn requests(&self) -> Vec<String> {
        self.requests
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}
