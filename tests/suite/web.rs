//! The agent's listener as a scraper and an operator meet it over loopback: gzip, TLS with a
//! private CA and client certificates, basic auth, a certificate rotated without a restart, the
//! web configuration file checked at startup, the scrape limit, `rate_limit`, a flood of wrong
//! passwords that stops neither polling nor a scraper who has the password, the order in which
//! connections are closed, and a flood of idle connections that neither exhausts the agent's file
//! descriptors nor stops its polling.

use crate::common;

use std::io::{Read as _, Write as _};
use std::net::{IpAddr, SocketAddr, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use base64::Engine as _;
use common::pki::{Ca, Pair};
use common::process::{AgentProcess, command, scrape};
use common::{Agent, Imds, TempDir, TestResult, wait};

type Error = Box<dyn std::error::Error>;

/// A client for the agent: trusts `ca`, presents `identity` when given, never reuses a
/// connection (each request is a new handshake, as after a rotation).
fn tls_client(ca: &str, identity: Option<&Pair>) -> Result<reqwest::Client, Error> {
    let mut builder = reqwest::Client::builder()
        .no_proxy()
        .use_rustls_tls()
        .tls_info(true)
        .pool_max_idle_per_host(0)
        .timeout(Duration::from_secs(10))
        .add_root_certificate(reqwest::Certificate::from_pem(ca.as_bytes())?);
    if let Some(identity) = identity {
        builder = builder.identity(reqwest::Identity::from_pem(&identity.identity_pem())?);
    }
    Ok(builder.build()?)
}

/// The web configuration file `text` in `dir`, as a flag.
fn web_config(dir: &TempDir, text: &str) -> Result<String, Error> {
    let path = dir.path("web.yml");
    std::fs::write(&path, text)?;
    Ok(format!("--web.config.file={}", path.display()))
}

fn https(agent: &Agent, path: &str) -> String {
    format!("{}{path}", agent.base.replace("http://", "https://"))
}

#[tokio::test]
async fn metrics_are_gzipped_when_the_scraper_accepts_it() -> TestResult {
    let imds = Imds::start().await?;
    let agent = Agent::start(&imds, &[]).await?;
    agent
        .wait_for("a first document", |m| m.up() == Some(1.0))
        .await?;
    let plain = agent
        .http
        .get(format!("{}/metrics", agent.base))
        .send()
        .await?;
    assert_eq!(plain.headers().get("content-encoding"), None);
    let plain = plain.text().await?;
    let gzipped = agent
        .http
        .get(format!("{}/metrics", agent.base))
        .header("accept-encoding", "gzip")
        .send()
        .await?;
    assert_eq!(gzipped.status(), 200);
    assert_eq!(
        gzipped
            .headers()
            .get("content-encoding")
            .and_then(|v| v.to_str().ok()),
        Some("gzip")
    );
    let compressed = gzipped.bytes().await?;
    let mut text = String::new();
    flate2::read::GzDecoder::new(&compressed[..]).read_to_string(&mut text)?;
    let families = |t: &str| -> Vec<String> {
        t.lines()
            .filter(|l| l.starts_with("# TYPE"))
            .map(str::to_owned)
            .collect()
    };
    assert!(text.contains("azure_scheduled_events_up 1"), "{text}");
    assert_eq!(families(&text), families(&plain));
    eprintln!(
        "scrape at idle: {} bytes plain, {} bytes gzip",
        plain.len(),
        compressed.len()
    );
    assert!(compressed.len() * 3 < plain.len(), "gzip saves little");
    agent.stop().await
}

#[tokio::test]
async fn tls_with_a_private_ca_requires_a_client_certificate_when_configured() -> TestResult {
    let dir = TempDir::new("web-tls")?;
    let ca = Ca::new("agent test CA")?;
    let (cert, key) = ca
        .server("agent", &["127.0.0.1"])?
        .write(&dir.0, "server")?;
    let client_ca = dir.path("clients.crt");
    std::fs::write(&client_ca, ca.pem())?;
    let flag = web_config(
        &dir,
        &format!(
            "tls_server_config:\n  cert_file: {}\n  key_file: {}\n  client_ca_file: {}\n  client_auth_type: RequireAndVerifyClientCert\n",
            cert.display(),
            key.display(),
            client_ca.display()
        ),
    )?;
    let imds = Imds::start().await?;
    let agent = Agent::start(&imds, &[&flag]).await?;
    let url = https(&agent, "/metrics");

    let prometheus = ca.client("prometheus")?;
    let answer = tls_client(&ca.pem(), Some(&prometheus))?
        .get(&url)
        .send()
        .await?;
    assert_eq!(answer.status(), 200);
    assert!(
        answer
            .text()
            .await?
            .contains("azure_scheduled_events_build_info")
    );

    let without = tls_client(&ca.pem(), None)?.get(&url).send().await;
    assert!(without.is_err(), "no client certificate, yet: {without:?}");
    let stranger = Ca::new("another CA")?.client("intruder")?;
    let foreign = tls_client(&ca.pem(), Some(&stranger))?
        .get(&url)
        .send()
        .await;
    assert!(
        foreign.is_err(),
        "a certificate of another CA, yet: {foreign:?}"
    );
    let plain = agent
        .http
        .get(format!("{}/metrics", agent.base))
        .send()
        .await;
    assert!(
        !plain.is_ok_and(|r| r.status() == 200),
        "plain HTTP must not be served on a TLS listener"
    );
    agent.stop().await
}

#[tokio::test]
async fn require_any_client_cert_takes_a_certificate_of_any_ca_but_needs_one() -> TestResult {
    let dir = TempDir::new("web-any-cert")?;
    let ca = Ca::new("agent test CA")?;
    let (cert, key) = ca
        .server("agent", &["127.0.0.1"])?
        .write(&dir.0, "server")?;
    let flag = web_config(
        &dir,
        &format!(
            "tls_server_config:\n  cert_file: {}\n  key_file: {}\n  client_auth_type: RequireAnyClientCert\n",
            cert.display(),
            key.display()
        ),
    )?;
    let imds = Imds::start().await?;
    let agent = Agent::start(&imds, &[&flag]).await?;
    let url = https(&agent, "/metrics");
    let stranger = Ca::new("any CA")?.client("anyone")?;
    let answer = tls_client(&ca.pem(), Some(&stranger))?
        .get(&url)
        .send()
        .await?;
    assert_eq!(answer.status(), 200);
    let without = tls_client(&ca.pem(), None)?.get(&url).send().await;
    assert!(without.is_err(), "no client certificate, yet: {without:?}");
    agent.stop().await
}

#[tokio::test]
async fn basic_auth_admits_the_right_password_only() -> TestResult {
    let dir = TempDir::new("web-auth")?;
    let hash = bcrypt::hash("s3cret", 6)?;
    let flag = web_config(&dir, &format!("basic_auth_users:\n  prometheus: {hash}\n"))?;
    let imds = Imds::start().await?;
    let agent = Agent::start(&imds, &[&flag]).await?;
    let url = format!("{}/metrics", agent.base);
    let get = |user: Option<(&str, &str)>| {
        let mut request = agent.http.get(&url);
        if let Some((user, password)) = user {
            request = request.basic_auth(user, Some(password));
        }
        request.send()
    };
    let anonymous = get(None).await?;
    assert_eq!(anonymous.status(), 401);
    assert!(
        anonymous
            .headers()
            .get("www-authenticate")
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.starts_with("Basic")),
        "{:?}",
        anonymous.headers()
    );
    assert_eq!(get(Some(("prometheus", "wrong"))).await?.status(), 401);
    assert_eq!(get(Some(("grafana", "s3cret"))).await?.status(), 401);
    let admitted = get(Some(("prometheus", "s3cret"))).await?;
    assert_eq!(admitted.status(), 200);
    assert!(admitted.text().await?.contains("azure_scheduled_events_up"));
    // A garbled header is refused, not a crash.
    let garbled = agent
        .http
        .get(&url)
        .header(
            "authorization",
            format!(
                "Basic {}",
                base64::engine::general_purpose::STANDARD.encode("no-colon")
            ),
        )
        .send()
        .await?;
    assert_eq!(garbled.status(), 401);
    agent.stop().await
}

#[tokio::test]
async fn basic_auth_is_never_dropped_by_emptying_the_web_config_at_runtime() -> TestResult {
    let dir = TempDir::new("web-auth-kept")?;
    let hash = bcrypt::hash("s3cret", 6)?;
    let flag = web_config(&dir, &format!("basic_auth_users:\n  prometheus: {hash}\n"))?;
    let path = dir.path("web.yml");
    let imds = Imds::start().await?;
    let agent = Agent::start(&imds, &[&flag]).await?;
    let url = format!("{}/metrics", agent.base);
    let status = |user: Option<(&str, &str)>| {
        let mut request = agent.http.get(&url);
        if let Some((user, password)) = user {
            request = request.basic_auth(user, Some(password));
        }
        async move { request.send().await.map(|r| r.status().as_u16()) }
    };
    assert_eq!(status(None).await?, 401);
    // A truncating rewrite, caught empty; then a file cut before its users; then one that
    // lists none.
    for text in ["", "tls_server_config:\n", "basic_auth_users: {}\n"] {
        std::fs::write(&path, text)?;
        assert_eq!(status(None).await?, 401, "{text:?}: still closed");
        assert_eq!(
            status(Some(("prometheus", "s3cret"))).await?,
            200,
            "{text:?}: the users in force still get in"
        );
    }
    // Changing the users is tightening, not dropping: it applies at once.
    let other = bcrypt::hash("n3w", 6)?;
    std::fs::write(&path, format!("basic_auth_users:\n  grafana: {other}\n"))?;
    assert_eq!(status(Some(("grafana", "n3w"))).await?, 200);
    assert_eq!(status(Some(("prometheus", "s3cret"))).await?, 401);
    std::fs::write(&path, "")?;
    assert_eq!(status(None).await?, 401);
    assert_eq!(status(Some(("grafana", "n3w"))).await?, 200);
    agent.stop().await
}

#[tokio::test]
async fn a_rotated_certificate_and_password_apply_without_a_restart() -> TestResult {
    let dir = TempDir::new("web-rotate")?;
    let ca = Ca::new("rotation CA")?;
    let first = ca.server("first", &["127.0.0.1"])?;
    let (cert, key) = first.write(&dir.0, "server")?;
    let config = |password: &str| -> Result<String, Error> {
        web_config(
            &dir,
            &format!(
                "tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\nbasic_auth_users:\n  prometheus: {}\n",
                bcrypt::hash(password, 4)?
            ),
        )
    };
    let flag = config("before")?;
    let imds = Imds::start().await?;
    let agent = Agent::start(&imds, &[&flag]).await?;
    let url = https(&agent, "/metrics");
    let served_certificate = |password: &'static str| {
        let url = url.clone();
        let ca = ca.pem();
        async move {
            let answer = tls_client(&ca, None)?
                .get(&url)
                .basic_auth("prometheus", Some(password))
                .send()
                .await?;
            let der = answer
                .extensions()
                .get::<reqwest::tls::TlsInfo>()
                .and_then(|i| i.peer_certificate())
                .map(<[u8]>::to_vec)
                .ok_or("no peer certificate")?;
            Ok::<_, Error>((answer.status().as_u16(), der))
        }
    };
    let pem_der = |pem: &str| -> Result<Vec<u8>, Error> {
        use rustls_pki_types::pem::PemObject as _;
        Ok(rustls_pki_types::CertificateDer::from_pem_slice(pem.as_bytes())?.to_vec())
    };
    let (status, der) = served_certificate("before").await?;
    assert_eq!(status, 200);
    assert_eq!(der, pem_der(&first.cert)?, "serves the first certificate");

    let second = ca.server("second", &["127.0.0.1"])?;
    std::fs::write(&cert, &second.cert)?;
    std::fs::write(&key, &second.key)?;
    config("after")?;
    let (status, der) = served_certificate("after").await?;
    assert_eq!(
        der,
        pem_der(&second.cert)?,
        "the new certificate, no restart"
    );
    assert_eq!(status, 200, "the new password");
    assert_eq!(served_certificate("before").await?.0, 401, "the old one");
    agent.stop().await
}

#[test]
fn an_invalid_web_config_file_exits_64_with_one_line() -> TestResult {
    let dir = TempDir::new("web-invalid")?;
    for (text, needle) in [
        (
            "tls_server_config:\n  cert_file: missing.crt\n  key_file: missing.key\n",
            "missing.crt",
        ),
        ("basic_auth_users:\n  alice: not-a-hash\n", "bcrypt"),
        (
            "tls_server_config:\n  cert_file: a\n  key_file: b\n  client_auth_type: Sometimes\n",
            "a",
        ),
        ("unknown_key: 1\n", "unknown_key"),
        ("rate_limit:\n  interval: 1s\n", "burst"),
    ] {
        let flag = web_config(&dir, text)?;
        let output = command(&[&flag]).output()?;
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(64), "{text:?}: {stderr}");
        assert_eq!(stderr.trim_end().lines().count(), 1, "{text:?}: {stderr}");
        assert!(
            stderr.contains("--web.config.file") && stderr.contains(needle),
            "{text:?}: {stderr}"
        );
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scrapes_beyond_max_requests_get_503() -> TestResult {
    let dir = TempDir::new("web-limit")?;
    let flag = web_config(
        &dir,
        &format!("basic_auth_users:\n  p: {}\n", bcrypt::hash("pw", 4)?),
    )?;
    let imds = Imds::start().await?;
    // A large exposition keeps each scrape in flight while it is encoded: the limit of one is met.
    let events = common::freeze_events(3000);
    imds.sim.set_document(common::document(2, &events));
    let agent = Agent::start(&imds, &[&flag, "--web.max-requests=1"]).await?;
    let url = format!("{}/metrics", agent.base);
    // Authenticated once: the scrapes below are let in from the verified password's digest.
    wait("every event on /metrics")
        .until(async || {
            let text = agent
                .http
                .get(&url)
                .basic_auth("p", Some("pw"))
                .send()
                .await?
                .text()
                .await?;
            Ok::<_, reqwest::Error>(text.contains(r#"event_type="Freeze"} 3000"#))
        })
        .await?;
    let scrapes = (0..6).map(|_| agent.http.get(&url).basic_auth("p", Some("pw")).send());
    let statuses: Vec<u16> = futures_statuses(scrapes).await?;
    assert!(statuses.contains(&200), "{statuses:?}");
    assert!(statuses.contains(&503), "{statuses:?}");
    assert!(
        statuses.iter().all(|s| *s == 200 || *s == 503),
        "{statuses:?}"
    );
    // The other pages are not scrapes and are never limited.
    let page = agent
        .http
        .get(format!("{}/", agent.base))
        .basic_auth("p", Some("pw"))
        .send()
        .await?;
    assert_eq!(page.status(), 200);
    agent.stop().await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rate_limit_answers_429_once_the_burst_is_spent() -> TestResult {
    let dir = TempDir::new("web-rate")?;
    let flag = web_config(&dir, "rate_limit:\n  interval: 1h\n  burst: 3\n")?;
    let imds = Imds::start().await?;
    let agent = Agent::start(&imds, &[&flag]).await?;
    let mut statuses = Vec::new();
    for path in ["/metrics", "/healthz", "/", "/readyz", "/metrics"] {
        statuses.push(agent.get(path).await?.0);
    }
    assert_eq!(statuses[..3], [200, 200, 200], "{statuses:?}");
    assert_eq!(
        statuses[3..],
        [429, 429],
        "every path shares the bucket: {statuses:?}"
    );
    // Removed from the file, the limit is lifted at once; set again, it starts with a full burst.
    std::fs::write(dir.path("web.yml"), "")?;
    assert_eq!(agent.get("/metrics").await?.0, 200);
    std::fs::write(
        dir.path("web.yml"),
        "rate_limit:\n  interval: 1h\n  burst: 1\n",
    )?;
    assert_eq!(agent.get("/metrics").await?.0, 200);
    assert_eq!(agent.get("/metrics").await?.0, 429);
    agent.stop().await
}

/// `Authorization: Basic` for `user:password`.
fn basic(user: &str, password: &str) -> String {
    let encoded = base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"));
    format!("Basic {encoded}")
}

/// Sends `GET path` on `stream` (kept alive) and reads the answer; its status.
fn get_on(stream: &mut TcpStream, path: &str, authorization: &str) -> std::io::Result<u16> {
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: agent\r\nAuthorization: {authorization}\r\n\r\n"
    )?;
    let mut head = Vec::new();
    let mut byte = [0];
    while !head.ends_with(b"\r\n\r\n") {
        if stream.read(&mut byte)? == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        head.push(byte[0]);
    }
    let head = String::from_utf8_lossy(&head);
    let length: usize = head
        .lines()
        .find_map(|l| {
            l.to_ascii_lowercase()
                .strip_prefix("content-length:")?
                .trim()
                .parse()
                .ok()
        })
        .unwrap_or(0);
    let mut body = vec![0; length];
    stream.read_exact(&mut body)?;
    head.split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| std::io::Error::other(format!("no status in {head:?}")))
}

/// Whether the agent has closed `stream` (read without waiting: end of stream or reset).
fn closed(stream: &TcpStream) -> std::io::Result<bool> {
    stream.set_nonblocking(true)?;
    let mut byte = [0];
    let closed = match (&*stream).read(&mut byte) {
        Ok(0) => true,
        Ok(_) => false,
        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => false,
        Err(_) => true,
    };
    stream.set_nonblocking(false)?;
    Ok(closed)
}

/// A connection to `to` from loopback address `from`.
async fn connect_from(from: IpAddr, to: &str) -> std::io::Result<TcpStream> {
    let to: SocketAddr = to
        .parse()
        .map_err(|e| std::io::Error::other(format!("{to}: {e}")))?;
    let socket = tokio::net::TcpSocket::new_v4()?;
    socket.bind(SocketAddr::new(from, 0))?;
    let stream = socket.connect(to).await?.into_std()?;
    stream.set_nonblocking(false)?;
    Ok(stream)
}

/// The number of threads of process `pid`.
fn threads(pid: u32) -> Result<usize, Error> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    Ok(status
        .lines()
        .find_map(|l| l.strip_prefix("Threads:")?.trim().parse().ok())
        .ok_or("no Threads in /proc/<pid>/status")?)
}

/// Clients sending a new wrong password on a new connection each time, hanging up without
/// waiting for the answer, until dropped. Counts the requests sent.
struct WrongPasswords {
    stop: Arc<AtomicBool>,
    sent: Arc<AtomicUsize>,
    clients: Vec<std::thread::JoinHandle<()>>,
}

impl WrongPasswords {
    fn start(address: &str, clients: usize) -> Self {
        Self::start_from(address, clients, None)
    }

    /// As [`Self::start`], from loopback address `from` when given (any of 127.0.0.0/8), a user
    /// that exists and one that does not in turn, each client waiting for its answer: so many
    /// requests waiting at once keep every place of the check budget taken.
    fn start_from(address: &str, clients: usize, from: Option<IpAddr>) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let sent = Arc::new(AtomicUsize::new(0));
        let clients = (0..clients)
            .map(|client| {
                let (stop, sent, address) =
                    (Arc::clone(&stop), Arc::clone(&sent), address.to_owned());
                std::thread::spawn(move || {
                    let Ok(runtime) = tokio::runtime::Builder::new_current_thread()
                        .enable_io()
                        .build()
                    else {
                        return;
                    };
                    let connect = || match from {
                        None => TcpStream::connect(&address),
                        Some(from) => runtime.block_on(connect_from(from, &address)),
                    };
                    let mut n = 0;
                    while !stop.load(Ordering::Relaxed) {
                        n += 1;
                        let user = match (from, n % 2) {
                            (Some(_), 0) => "mallory",
                            _ => "prometheus",
                        };
                        let header = basic(user, &format!("guess-{client}-{n}"));
                        let Ok(mut stream) = connect() else {
                            continue;
                        };
                        if from.is_some() {
                            if get_on(&mut stream, "/metrics", &header).is_ok() {
                                sent.fetch_add(1, Ordering::Relaxed);
                            }
                        } else if write!(
                            stream,
                            "GET /metrics HTTP/1.1\r\nHost: a\r\nAuthorization: {header}\r\n\r\n"
                        )
                        .is_ok()
                        {
                            sent.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                })
            })
            .collect();
        Self {
            stop,
            sent,
            clients,
        }
    }

    fn sent(&self) -> usize {
        self.sent.load(Ordering::Relaxed)
    }
}

impl Drop for WrongPasswords {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        for client in self.clients.drain(..) {
            let _ = client.join();
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_of_wrong_passwords_stops_neither_polling_nor_the_scraper() -> TestResult {
    let dir = TempDir::new("web-flood")?;
    let flag = web_config(
        &dir,
        &format!(
            "basic_auth_users:\n  prometheus: {}\n",
            bcrypt::hash("s3cret", 8)?
        ),
    )?;
    let imds = Imds::start().await?;
    let url = format!("--imds.url={}", imds.url());
    let agent = AgentProcess::spawn(command(&[
        &url,
        &flag,
        "--web.listen-address=127.0.0.1:0",
        "--poll.interval=100ms",
    ]))?;
    let address = agent.address().to_owned();
    let password = basic("prometheus", "s3cret");
    // The scraper's password is verified once, before the flood.
    let mut scraper = TcpStream::connect(&address)?;
    assert_eq!(get_on(&mut scraper, "/metrics", &password)?, 200);
    let before = threads(agent.id())?;
    let flood = WrongPasswords::start(&address, 48);
    wait("the flood to be under way")
        .until(async || flood.sent() >= 500)
        .await?;
    let (mut answered, mut most_threads) = (Vec::new(), before);
    for _ in 0..10 {
        let polls = imds.sim.requests();
        // A new connection each time, as after a scrape timeout.
        let mut stream = TcpStream::connect(&address)?;
        answered.push(get_on(&mut stream, "/metrics", &password)?);
        answered.push(get_on(&mut stream, "/healthz", &password)?);
        most_threads = most_threads.max(threads(agent.id())?);
        wait("a poll during the flood")
            .until(async || imds.sim.requests() > polls)
            .await?;
    }
    let sent = flood.sent();
    drop(flood);
    let cpus = std::thread::available_parallelism().map_or(1, usize::from);
    eprintln!(
        "{sent} wrong passwords sent; the agent had {before} threads before, at most {most_threads} during; scrapes and probes answered {answered:?}"
    );
    assert!(answered.iter().all(|s| *s == 200), "{answered:?}");
    // Every hung-up client's check would have kept a thread of its own: at most half the CPUs'
    // worth run at once (one more thread for an encoding).
    assert!(
        most_threads <= before + (cpus / 2).max(1) + 1,
        "{most_threads} threads during the flood, {before} before, {cpus} CPUs"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_never_keeps_out_a_password_not_verified_yet() -> TestResult {
    // After a restart or a new hash, the scraper's and the probe's password must go through
    // bcrypt once, while another address keeps every place of the check budget taken.
    let dir = TempDir::new("web-lockout")?;
    let config = || -> Result<String, Error> {
        // A new salt each time: the verified password no longer matches the hash.
        web_config(
            &dir,
            &format!(
                "basic_auth_users:\n  prometheus: {}\n",
                bcrypt::hash("s3cret", 8)?
            ),
        )
    };
    let flag = config()?;
    let imds = Imds::start().await?;
    let url = format!("--imds.url={}", imds.url());
    let agent = AgentProcess::spawn(command(&[
        &url,
        &flag,
        "--web.listen-address=127.0.0.1:0",
        "--poll.interval=100ms",
    ]))?;
    let address = agent.address().to_owned();
    let attacker: IpAddr = [127, 0, 0, 2].into();
    let flood = WrongPasswords::start_from(&address, 48, Some(attacker));
    wait("the flood to take every place of the check budget")
        .until(async || {
            let mut stream = connect_from(attacker, &address).await?;
            let header = basic("prometheus", &format!("probe-{}", flood.sent()));
            Ok::<_, Error>((get_on(&mut stream, "/metrics", &header)? == 503).then_some(()))
        })
        .await?;
    let password = basic("prometheus", "s3cret");
    let mut answered = Vec::new();
    for round in 0..5 {
        if round > 0 {
            // A configuration change: the verified password must be checked again.
            config()?;
        }
        let mut stream = TcpStream::connect(&address)?;
        answered.push(get_on(&mut stream, "/metrics", &password)?);
        let mut stream = TcpStream::connect(&address)?;
        answered.push(get_on(&mut stream, "/healthz", &password)?);
    }
    let sent = flood.sent();
    drop(flood);
    eprintln!("{sent} wrong passwords sent; scrapes and probes answered {answered:?}");
    assert!(answered.iter().all(|s| *s == 200), "{answered:?}");
    Ok(())
}

#[tokio::test]
async fn a_certificate_broken_at_runtime_leaves_the_last_good_one_in_force() -> TestResult {
    let dir = TempDir::new("web-broken")?;
    let ca = Ca::new("broken CA")?;
    let (cert, key) = ca.server("good", &["127.0.0.1"])?.write(&dir.0, "server")?;
    let flag = web_config(
        &dir,
        "tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n",
    )?;
    let imds = Imds::start().await?;
    let url = format!("--imds.url={}", imds.url());
    let mut agent = AgentProcess::spawn(command(&[
        &url,
        &flag,
        "--web.listen-address=127.0.0.1:0",
        "--log.format=json",
    ]))?;
    let metrics = format!("https://{}/metrics", agent.address());
    let client = tls_client(&ca.pem(), None)?;
    assert_eq!(client.get(&metrics).send().await?.status(), 200);
    // A renewal caught half-way: the certificate cut short, then a key of another pair.
    let good = std::fs::read(&cert)?;
    std::fs::write(&cert, &good[..good.len() / 2])?;
    let mut statuses = Vec::new();
    for _ in 0..50 {
        statuses.push(client.get(&metrics).send().await?.status().as_u16());
    }
    std::fs::write(&cert, &good)?;
    std::fs::write(&key, ca.server("other", &["127.0.0.1"])?.key)?;
    for _ in 0..50 {
        statuses.push(client.get(&metrics).send().await?.status().as_u16());
    }
    assert!(statuses.iter().all(|s| *s == 200), "{statuses:?}");
    agent.terminate()?;
    let lines = agent.lines_until(|l| l["message"] == "stopped")?;
    let warnings: Vec<_> = lines
        .iter()
        .filter(|l| {
            l["message"]
                .as_str()
                .is_some_and(|m| m.starts_with("cannot use the web configuration file"))
        })
        .collect();
    // 100 connections met an invalid configuration: one line, the next one a minute on.
    assert_eq!(warnings.len(), 1, "{warnings:#?}");
    assert_eq!(warnings[0]["suppressed"], 0, "{warnings:#?}");
    let error = warnings[0]["error"].as_str().unwrap_or_default();
    assert!(error.contains("cert_file"), "{error}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn new_connections_close_unauthenticated_ones_before_a_scrapers() -> TestResult {
    let dir = TempDir::new("web-evict")?;
    let flag = web_config(
        &dir,
        &format!(
            "basic_auth_users:\n  prometheus: {}\n",
            bcrypt::hash("s3cret", 4)?
        ),
    )?;
    let imds = Imds::start().await?;
    let agent = Agent::start(&imds, &[&flag, "--web.max-connections=4"]).await?;
    let address = agent.base.trim_start_matches("http://").to_owned();
    let statuses = tokio::task::spawn_blocking(move || -> Result<Vec<u16>, String> {
        let password = basic("prometheus", "s3cret");
        let mut scraper = TcpStream::connect(&address).map_err(|e| e.to_string())?;
        let first = get_on(&mut scraper, "/metrics", &password).map_err(|e| e.to_string())?;
        // Twenty new connections that send nothing, or a wrong password, and are held open.
        let mut others = Vec::new();
        for n in 0..20 {
            let mut stream = TcpStream::connect(&address).map_err(|e| e.to_string())?;
            if n % 2 == 1 {
                let _ = get_on(&mut stream, "/metrics", &basic("prometheus", "wrong"));
            }
            others.push(stream);
        }
        // With room for four, all but the newest three of them are closed.
        wait("the oldest seventeen of the twenty closed").until_blocking(|| {
            others[..17]
                .iter()
                .map(closed)
                .collect::<Result<Vec<_>, _>>()
                .map(|c| c.iter().all(|c| *c))
        })?;
        let again = get_on(&mut scraper, "/metrics", &password)
            .map_err(|e| format!("the scraper's connection: {e}"))?;
        Ok(vec![first, again])
    })
    .await??;
    assert_eq!(statuses, [200, 200]);
    agent.stop().await
}

/// Runs the requests concurrently and returns their statuses.
async fn futures_statuses<F>(requests: impl Iterator<Item = F>) -> Result<Vec<u16>, Error>
where
    F: std::future::Future<Output = Result<reqwest::Response, reqwest::Error>> + Send + 'static,
{
    let tasks: Vec<_> = requests.map(tokio::spawn).collect();
    let mut statuses = Vec::new();
    for task in tasks {
        statuses.push(task.await??.status().as_u16());
    }
    Ok(statuses)
}

/// How many idle connections the flood opens.
const FLOOD: usize = 5_000;

/// Raises this process' soft limit on open files so it can hold the flood (CI machines start
/// at 1024); fails when the hard limit does not allow it.
fn allow_open_files(needed: u64) -> Result<(), Error> {
    use nix::sys::resource::{Resource, getrlimit, setrlimit};
    let (soft, hard) = getrlimit(Resource::RLIMIT_NOFILE)?;
    if soft < needed {
        if hard < needed {
            return Err(
                format!("the hard limit of open files is {hard}, the test needs {needed}").into(),
            );
        }
        setrlimit(Resource::RLIMIT_NOFILE, needed, hard)?;
    }
    Ok(())
}

/// The value of an unlabelled series in an exposition.
fn value(text: &str, name: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn five_thousand_idle_connections_neither_exhaust_descriptors_nor_stop_polling() -> TestResult
{
    allow_open_files(FLOOD as u64 + 1024)?;
    let imds = Imds::start().await?;
    let url = format!("--imds.url={}", imds.url());
    let mut agent = AgentProcess::spawn(command(&[
        &url,
        "--web.listen-address=127.0.0.1:0",
        "--poll.interval=100ms",
    ]))?;
    let address = agent.address().to_owned();
    let target = address.clone();
    let before = imds.sim.requests();
    // The flood: connections that connect and never send a byte, held until the end.
    let flood = tokio::task::spawn_blocking(move || {
        let mut held = Vec::with_capacity(FLOOD);
        for _ in 0..FLOOD {
            match std::net::TcpStream::connect(&target) {
                Ok(stream) => held.push(stream),
                Err(error) => return Err(format!("connection {}: {error}", held.len())),
            }
        }
        Ok(held)
    })
    .await??;
    let during = imds.sim.requests();
    // While every connection is held open, a scrape still gets in, and the agent holds no more
    // descriptors than its bound allows.
    let scraper = address.clone();
    let text = tokio::task::spawn_blocking(move || scrape(&scraper)).await??;
    let open_fds = value(&text, "process_open_fds").ok_or("no process_open_fds")?;
    let polled = wait("a poll while the flood is held")
        .within(Duration::from_secs(1))
        .until(async || imds.sim.requests() > during)
        .await;
    let after = imds.sim.requests();
    eprintln!(
        "{FLOOD} idle connections: the agent holds {open_fds} descriptors; IMDS polls {before} before, {during} once opened, {after} within a second"
    );
    assert!(
        open_fds <= 128.0 + 32.0,
        "{open_fds} descriptors open with --web.max-connections=128"
    );
    assert!(text.contains("azure_scheduled_events_up 1"), "{text}");
    assert!(
        after > during,
        "polling stopped during the flood: {polled:?}"
    );
    drop(flood);
    let status = tokio::task::spawn_blocking(move || agent.terminate()).await??;
    assert!(status.success(), "{status:?}");
    Ok(())
}
