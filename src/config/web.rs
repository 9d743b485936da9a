//! The `--web.*` flags of the listener beyond its address and path, and `--web.config.file`: TLS
//! and basic authentication in the Prometheus exporter-toolkit's web configuration format, so one
//! file serves this agent and the node_exporter next to it. [`crate::http::web`] serves by them.
//!
//! As in the toolkit, the file is read again for every TLS handshake and every request: a rotated
//! certificate or a changed password takes effect without a restart. Whether the listener speaks
//! TLS at all is decided once, at startup. A file that is invalid at startup is a usage error
//! (exit 64); one that becomes invalid later fails the handshakes and requests it would govern
//! (logged) until it is fixed, and the agent keeps polling.
//!
//! Supported keys: `tls_server_config` (`cert_file`, `key_file`, `client_ca_file`,
//! `client_auth_type` with all five of the toolkit's values, `min_version`, `max_version`),
//! `basic_auth_users` (bcrypt hashes, as `htpasswd -nBC 10 user` writes them) and `rate_limit`
//! (`interval`, `burst`: a token bucket over every request). Any other key the toolkit knows is
//! refused by name rather than silently ignored: a setting that is not applied must not look
//! applied.

use std::collections::{BTreeMap, HashSet, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use clap::Args;

use rustls::server::WebPkiClientVerifier;
use rustls::{RootCertStore, ServerConfig, SupportedProtocolVersion};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};

use super::values::{ConfigError, duration, invalid, one_line};
use crate::config::file_input;

/// Default of `--web.max-requests`: node_exporter's.
pub const DEFAULT_MAX_REQUESTS: usize = 40;

/// Default of `--web.max-connections`. Above the 40 concurrent scrapes, so that a burst of
/// scrapes meets the documented 503 rather than closed connections; and far below the soft
/// limit of 1024 file descriptors that systemd gives a service, so that the IMDS client, the
/// state file and the OTLP exporter always have descriptors left. A VM's agent is scraped by a
/// few Prometheus replicas and probed by a kubelet: a handful of connections in normal use.
pub const DEFAULT_MAX_CONNECTIONS: usize = 128;

/// The `--web.*` flags of the listener beyond its address and path.
#[derive(Debug, Clone, Args)]
pub struct WebArgs {
    /// exporter-toolkit web configuration file (TLS, client certificates, basic auth, rate limit), re-read
    /// on every connection and request [default: none: plain HTTP, no authentication].
    ///
    /// A rotated certificate needs no restart; a file that is invalid at start exits 64
    /// (docs/web.md).
    #[arg(
        id = "web.config.file",
        long = "web.config.file",
        env = "AZURE_SCHEDULED_EVENTS_WEB_CONFIG_FILE"
    )]
    pub config_file: Option<PathBuf>,
    /// Most concurrent scrapes, as node_exporter; more get 503. 0 means no limit.
    #[arg(long = "web.max-requests", env = "AZURE_SCHEDULED_EVENTS_WEB_MAX_REQUESTS", default_value_t = DEFAULT_MAX_REQUESTS)]
    pub max_requests: usize,
    /// Most open connections; a new one beyond it closes another, unauthenticated and idle ones
    /// first.
    ///
    /// So a flood of idle connections cannot take the agent's file descriptors, nor push out a
    /// scraper's (docs/web.md).
    #[arg(long = "web.max-connections", env = "AZURE_SCHEDULED_EVENTS_WEB_MAX_CONNECTIONS", default_value_t = DEFAULT_MAX_CONNECTIONS)]
    pub max_connections: usize,
}

/// The validated `--web.*` settings.
#[derive(Debug, Clone)]
pub struct WebSettings {
    pub config: Option<Arc<WebConfigFile>>,
    /// `None`: no limit.
    pub max_requests: Option<usize>,
    pub max_connections: usize,
}

impl WebArgs {
    /// Reads the web configuration file once, so that a bad one stops the agent at startup.
    pub fn validate(self) -> Result<WebSettings, ConfigError> {
        if self.max_connections == 0 {
            return Err(invalid("web.max-connections", "must be at least 1"));
        }
        let config = match &self.config_file {
            None => None,
            Some(path) => Some(Arc::new(
                WebConfigFile::open(path).map_err(|e| invalid("web.config.file", e.to_string()))?,
            )),
        };
        Ok(WebSettings {
            config,
            max_requests: (self.max_requests > 0).then_some(self.max_requests),
            max_connections: self.max_connections,
        })
    }
}

/// Why the web configuration cannot be used.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{path}: {reason}")]
pub struct WebConfigError {
    path: String,
    reason: String,
}

fn error(path: &Path, reason: impl Into<String>) -> WebConfigError {
    WebConfigError {
        path: path.display().to_string(),
        reason: one_line(&reason.into()),
    }
}

/// The file as written. Unknown keys are errors, as with the toolkit's strict YAML reading.
#[derive(Debug, Default, PartialEq, Eq, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    #[serde(default)]
    tls_server_config: Option<TlsFile>,
    #[serde(default)]
    basic_auth_users: Option<BTreeMap<String, String>>,
    #[serde(default)]
    rate_limit: Option<RateLimitFile>,
}

/// The toolkit's `rate_limit`: one request every `interval`, `burst` at once.
#[derive(Debug, Default, PartialEq, Eq, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct RateLimitFile {
    #[serde(default)]
    interval: Option<DurationText>,
    #[serde(default)]
    burst: Option<u32>,
}

/// A duration as YAML gives it: `30s` is a string, `0` a number.
#[derive(Debug, PartialEq, Eq, serde::Deserialize)]
#[serde(untagged)]
enum DurationText {
    Text(String),
    Number(u64),
}

/// The token bucket `rate_limit` asks for: it holds `burst` requests and gains one every
/// `interval`, over every request whatever its path or client, as in the toolkit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RateLimit {
    pub interval: Duration,
    pub burst: u32,
}

impl RateLimitFile {
    /// `None` when the limit is off: no `interval`, or `0`, as in the toolkit.
    fn settings(&self) -> Result<Option<RateLimit>, String> {
        let interval = match &self.interval {
            None | Some(DurationText::Number(0)) => Duration::ZERO,
            Some(DurationText::Text(text)) => {
                duration(text).map_err(|e| format!("rate_limit: interval {text:?}: {e}"))?
            }
            Some(DurationText::Number(n)) => {
                return Err(format!(
                    "rate_limit: interval {n} has no unit (use a duration like 1s or 100ms)"
                ));
            }
        };
        if interval.is_zero() {
            return Ok(None);
        }
        match self.burst.unwrap_or(0) {
            // The toolkit would refuse every request: surely not what was meant.
            0 => Err("rate_limit: burst must be at least 1 when interval is set (with 0 every request would be refused)".into()),
            burst => Ok(Some(RateLimit { interval, burst })),
        }
    }
}

#[derive(Debug, Default, PartialEq, Eq, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct TlsFile {
    #[serde(default)]
    cert_file: Option<String>,
    #[serde(default)]
    key_file: Option<String>,
    #[serde(default)]
    client_ca_file: Option<String>,
    #[serde(default)]
    client_auth_type: Option<String>,
    #[serde(default)]
    min_version: Option<String>,
    #[serde(default)]
    max_version: Option<String>,
}

/// The toolkit's `client_auth_type` values (Go's `tls.ClientAuthType` names).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ClientAuth {
    NoClientCert,
    RequestClientCert,
    RequireAnyClientCert,
    VerifyClientCertIfGiven,
    RequireAndVerifyClientCert,
}

impl ClientAuth {
    fn parse(text: Option<&str>) -> Result<Self, String> {
        match text.unwrap_or("") {
            "" | "NoClientCert" => Ok(Self::NoClientCert),
            "RequestClientCert" => Ok(Self::RequestClientCert),
            "RequireAnyClientCert" => Ok(Self::RequireAnyClientCert),
            "VerifyClientCertIfGiven" => Ok(Self::VerifyClientCertIfGiven),
            "RequireAndVerifyClientCert" => Ok(Self::RequireAndVerifyClientCert),
            other => Err(format!(
                "client_auth_type {other:?} is not one of NoClientCert, RequestClientCert, RequireAnyClientCert, VerifyClientCertIfGiven, RequireAndVerifyClientCert"
            )),
        }
    }
}

fn tls_version(key: &str, text: &str) -> Result<&'static SupportedProtocolVersion, String> {
    match text {
        "TLS12" => Ok(&rustls::version::TLS12),
        "TLS13" => Ok(&rustls::version::TLS13),
        "TLS10" | "TLS11" => Err(format!(
            "{key} {text} is not supported: TLS 1.0 and 1.1 are obsolete, use TLS12 or TLS13"
        )),
        other => Err(format!("{key} {other:?} is not one of TLS12, TLS13")),
    }
}

/// The configuration in force for one handshake or request.
#[derive(Debug)]
pub struct Loaded {
    /// The TLS server configuration, when `tls_server_config` is set.
    pub tls: Option<Arc<ServerConfig>>,
    /// User name to bcrypt hash; empty when basic authentication is off.
    users: BTreeMap<String, String>,
    /// User name to the SHA-256 of the password last verified against this file's hash. bcrypt
    /// costs tens of milliseconds by design; a scraper sends the same password every 15 or 30
    /// seconds, so, as the toolkit does, a password once verified is recognised by its digest.
    /// The cache belongs to this configuration: a changed file starts a new, empty one.
    verified: Mutex<BTreeMap<String, [u8; 32]>>,
    /// Digests of `user:password` pairs bcrypt refused lately, so that a client repeating a wrong
    /// password is refused again without bcrypt. Bounded; a pair refused once stays wrong for as
    /// long as this configuration is in force.
    failed: Mutex<Failed>,
    /// What an unknown user's password is checked against: [`DUMMY_HASH`] at the highest cost
    /// among the users, so that an unknown user takes as long as a wrong password.
    dummy_hash: String,
    /// `rate_limit`, when on.
    pub rate_limit: Option<RateLimit>,
}

/// The most refused pairs [`Loaded`] remembers: 32 KiB of digests.
const FAILED_PAIRS: usize = 1024;

/// Recently refused `user:password` digests, oldest first.
#[derive(Debug, Default)]
struct Failed {
    order: VecDeque<[u8; 32]>,
    set: HashSet<[u8; 32]>,
}

impl Failed {
    fn insert(&mut self, pair: [u8; 32]) {
        if !self.set.insert(pair) {
            return;
        }
        self.order.push_back(pair);
        if self.order.len() > FAILED_PAIRS
            && let Some(oldest) = self.order.pop_front()
        {
            self.set.remove(&oldest);
        }
    }
}

/// What a request's credentials amount to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// No users configured, or the right user and password.
    Granted,
    /// Missing, malformed, unknown user or wrong password: 401.
    Denied,
}

/// What the cheap part of a password check found ([`Loaded::check`]).
#[derive(Debug)]
pub enum Check {
    /// Decided without bcrypt: no users, a missing or malformed header, a password verified or
    /// refused before.
    Decided(Access),
    /// Only bcrypt can tell: [`Loaded::verify`], off the runtime's thread.
    Verify(Credentials),
}

/// A user and password that bcrypt must check.
#[derive(Debug)]
pub struct Credentials {
    user: String,
    password: String,
    /// SHA-256 of the password, for the cache of verified passwords.
    digest: [u8; 32],
    /// SHA-256 of `user:password`, for the cache of refused pairs.
    pair: [u8; 32],
}

/// A hash of the toolkit's kind that matches no password, checked for unknown users so that an
/// unknown user costs as much time as a wrong password and user names cannot be probed. Its cost
/// is replaced by the users' ([`dummy_hash`]).
const DUMMY_HASH: &str = "$2y$10$QOauhQNbBCuQDKes6eFzPeMqBSjb7Mr5DUmpZ/VcEd00UAV/LDeSi";

/// [`DUMMY_HASH`] at the highest cost among `hashes`: bcrypt's time depends on the cost alone,
/// and the salt and digest stay those of a hash that matches no password.
fn dummy_hash<'a>(hashes: impl IntoIterator<Item = &'a String>) -> String {
    let cost = hashes
        .into_iter()
        .filter_map(|h| h.parse::<bcrypt::HashParts>().ok())
        .map(|parts| parts.get_cost())
        .max()
        .unwrap_or(10);
    let (_, salt_and_digest) = DUMMY_HASH.split_at("$2y$10$".len());
    format!("$2y${cost:02}${salt_and_digest}")
}

impl Loaded {
    /// Whether the request must authenticate.
    pub fn requires_auth(&self) -> bool {
        !self.users.is_empty()
    }

    /// The cheap part of checking an `Authorization` header value: what can be decided without
    /// bcrypt, on any thread.
    pub fn check(&self, authorization: Option<&[u8]>) -> Check {
        if self.users.is_empty() {
            return Check::Decided(Access::Granted);
        }
        let Some((user, password)) = authorization.and_then(basic_credentials) else {
            return Check::Decided(Access::Denied);
        };
        let credentials = Credentials {
            digest: sha256(password.as_bytes()),
            pair: sha256(format!("{user}:{password}").as_bytes()),
            user,
            password,
        };
        match self.cached(&credentials) {
            Some(access) => Check::Decided(access),
            None => Check::Verify(credentials),
        }
    }

    /// The verified passwords of the users whose hash is the same in `users`.
    fn verified_for(&self, users: &BTreeMap<String, String>) -> BTreeMap<String, [u8; 32]> {
        let verified = self.verified.lock().unwrap_or_else(PoisonError::into_inner);
        verified
            .iter()
            .filter(|(user, _)| {
                self.users.contains_key(*user) && self.users.get(*user) == users.get(*user)
            })
            .map(|(user, digest)| (user.clone(), *digest))
            .collect()
    }

    /// What the caches say of these credentials.
    fn cached(&self, credentials: &Credentials) -> Option<Access> {
        let verified = self.verified.lock().unwrap_or_else(PoisonError::into_inner);
        if verified
            .get(&credentials.user)
            .is_some_and(|known| same_digest(known, &credentials.digest))
        {
            return Some(Access::Granted);
        }
        drop(verified);
        let failed = self.failed.lock().unwrap_or_else(PoisonError::into_inner);
        failed
            .set
            .contains(&credentials.pair)
            .then_some(Access::Denied)
    }

    /// Runs bcrypt (tens of milliseconds at cost 10, four times that at 12): call it off the
    /// async runtime's thread, with the listener's bound on concurrent checks.
    pub fn verify(&self, credentials: Credentials) -> Access {
        // Another request may have settled the same credentials while this one waited.
        if let Some(access) = self.cached(&credentials) {
            return access;
        }
        let (hash, known) = match self.users.get(&credentials.user) {
            Some(hash) => (hash.as_str(), true),
            None => (self.dummy_hash.as_str(), false),
        };
        // No lock is held while bcrypt runs, so that two scrapers never wait for each other.
        match bcrypt::verify(credentials.password.as_bytes(), hash) {
            Ok(true) if known => {
                self.verified
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .insert(credentials.user, credentials.digest);
                Access::Granted
            }
            _ => {
                self.failed
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .insert(credentials.pair);
                Access::Denied
            }
        }
    }
}

/// Compares without stopping at the first difference.
fn same_digest(a: &[u8; 32], b: &[u8; 32]) -> bool {
    a.iter().zip(b).fold(0, |differs, (x, y)| differs | (x ^ y)) == 0
}

fn sha256(bytes: &[u8]) -> [u8; 32] {
    let mut digest = [0; 32];
    digest.copy_from_slice(ring::digest::digest(&ring::digest::SHA256, bytes).as_ref());
    digest
}

/// `Basic base64(user:password)`.
fn basic_credentials(header: &[u8]) -> Option<(String, String)> {
    use base64::Engine as _;
    let text = std::str::from_utf8(header).ok()?.trim();
    let (scheme, encoded) = text.split_once(' ')?;
    if !scheme.eq_ignore_ascii_case("basic") {
        return None;
    }
    let decoded = base64::engine::general_purpose::STANDARD
        .decode(encoded.trim())
        .ok()?;
    let decoded = String::from_utf8(decoded).ok()?;
    let (user, password) = decoded.split_once(':')?;
    Some((user.to_owned(), password.to_owned()))
}

/// The bytes a [`Loaded`] was built from; the same bytes give the same configuration.
#[derive(Debug, Default, PartialEq, Eq)]
struct Sources {
    file: Vec<u8>,
    cert: Vec<u8>,
    key: Vec<u8>,
    client_ca: Vec<u8>,
}

/// The web configuration file, read again whenever it is needed.
#[derive(Debug)]
pub struct WebConfigFile {
    path: PathBuf,
    tls: bool,
    /// The last configuration built and what it was built from: reading four small files per
    /// connection is cheap, parsing keys and building verifiers for each is not.
    cache: Mutex<Option<(Sources, Arc<Loaded>)>>,
}

impl WebConfigFile {
    /// Reads and checks the file at startup; its error is the one line to exit with.
    pub fn open(path: &Path) -> Result<Self, WebConfigError> {
        let file = Self {
            path: path.to_owned(),
            tls: false,
            cache: Mutex::new(None),
        };
        let loaded = file.load()?;
        Ok(Self {
            tls: loaded.tls.is_some(),
            ..file
        })
    }

    /// Whether the listener speaks TLS (fixed at startup, as in the toolkit).
    pub fn tls(&self) -> bool {
        self.tls
    }

    /// The configuration to serve with: the files' as they are now or, when they no longer make
    /// a valid one (a certificate half-written by its renewal, a typo), the last valid one, with
    /// the error to report. An error only when no configuration was ever valid.
    pub fn current(&self) -> Result<(Arc<Loaded>, Option<WebConfigError>), WebConfigError> {
        match self.load() {
            Ok(loaded) => Ok((loaded, None)),
            Err(error) => {
                let cache = self.cache.lock().unwrap_or_else(PoisonError::into_inner);
                match cache.as_ref() {
                    Some((_, in_force)) => Ok((Arc::clone(in_force), Some(error))),
                    None => Err(error),
                }
            }
        }
    }

    /// The configuration as the files say now.
    pub fn load(&self) -> Result<Arc<Loaded>, WebConfigError> {
        let read = |path: &Path| {
            file_input::read(path, file_input::WEB_CONFIG)
                .map_err(|e| error(path, format!("cannot read: {e}")))
        };
        let text = read(&self.path)?;
        let parsed: File = if text.iter().all(u8::is_ascii_whitespace) {
            File::default()
        } else {
            serde_norway::from_slice(&text).map_err(|e| error(&self.path, e.to_string()))?
        };
        let base = self.path.parent().unwrap_or(Path::new("."));
        // Relative paths in the file are relative to the file, as in the toolkit.
        let resolve = |p: &str| base.join(p);
        let mut sources = Sources {
            file: text,
            ..Sources::default()
        };
        if let Some(tls) = &parsed.tls_server_config {
            let (Some(cert), Some(key)) = (&tls.cert_file, &tls.key_file) else {
                return Err(error(
                    &self.path,
                    "tls_server_config needs both cert_file and key_file",
                ));
            };
            sources.cert = read(&resolve(cert))?;
            sources.key = read(&resolve(key))?;
            if let Some(ca) = &tls.client_ca_file {
                sources.client_ca = read(&resolve(ca))?;
            }
        }
        let mut cache = self.cache.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some((cached, loaded)) = cache.as_ref()
            && *cached == sources
        {
            return Ok(Arc::clone(loaded));
        }
        let tls = match &parsed.tls_server_config {
            Some(tls) => Some(Arc::new(
                server_config(tls, &sources).map_err(|e| error(&self.path, e))?,
            )),
            None => None,
        };
        let users = parsed.basic_auth_users.unwrap_or_default();
        for (user, hash) in &users {
            if user.contains(':') {
                return Err(error(
                    &self.path,
                    format!("basic_auth_users: user {user:?} contains ':'"),
                ));
            }
            // The format only: hashing here would hold up the runtime's thread, the poll loop's.
            if hash.parse::<bcrypt::HashParts>().is_err() {
                return Err(error(
                    &self.path,
                    format!("basic_auth_users: the hash of {user:?} is not a bcrypt hash"),
                ));
            }
        }
        // Authentication can be changed or added at runtime, never dropped: an emptied or
        // truncated file (an editor's truncating rewrite) must not open /metrics to anyone.
        if users.is_empty()
            && let Some((_, in_force)) = cache.as_ref()
            && in_force.requires_auth()
        {
            tracing::warn!(
                web_config_file = %self.path.display(),
                "the web configuration file no longer has basic_auth_users: keeping the configuration in force (authentication is never dropped at runtime; restart the agent to remove it)"
            );
            let in_force = Arc::clone(in_force);
            *cache = Some((sources, Arc::clone(&in_force)));
            return Ok(in_force);
        }
        let rate_limit = match &parsed.rate_limit {
            Some(limit) => limit.settings().map_err(|e| error(&self.path, e))?,
            None => None,
        };
        // A password verified against a hash the new file keeps is still right: a scraper is not
        // made to wait for bcrypt again (behind whatever else waits) by an unrelated change.
        let verified = match cache.as_ref() {
            Some((_, previous)) => previous.verified_for(&users),
            None => BTreeMap::new(),
        };
        let loaded = Arc::new(Loaded {
            tls,
            dummy_hash: dummy_hash(users.values()),
            users,
            verified: Mutex::new(verified),
            failed: Mutex::default(),
            rate_limit,
        });
        *cache = Some((sources, Arc::clone(&loaded)));
        Ok(loaded)
    }
}

fn server_config(tls: &TlsFile, sources: &Sources) -> Result<ServerConfig, String> {
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(&sources.cert)
        .collect::<Result<_, _>>()
        .map_err(|e| format!("cert_file: {e}"))?;
    if certs.is_empty() {
        return Err("cert_file holds no PEM certificate".into());
    }
    let key = PrivateKeyDer::from_pem_slice(&sources.key)
        .map_err(|e| format!("key_file holds no usable PEM private key: {e}"))?;
    let auth = ClientAuth::parse(tls.client_auth_type.as_deref())?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let min = tls
        .min_version
        .as_deref()
        .map(|v| tls_version("min_version", v))
        .transpose()?
        .unwrap_or(&rustls::version::TLS12);
    let max = tls
        .max_version
        .as_deref()
        .map(|v| tls_version("max_version", v))
        .transpose()?
        .unwrap_or(&rustls::version::TLS13);
    let versions: Vec<&'static SupportedProtocolVersion> =
        [&rustls::version::TLS12, &rustls::version::TLS13]
            .into_iter()
            .filter(|v| u16::from(v.version) >= u16::from(min.version))
            .filter(|v| u16::from(v.version) <= u16::from(max.version))
            .collect();
    if versions.is_empty() {
        return Err("min_version is above max_version".into());
    }
    let builder = ServerConfig::builder_with_provider(Arc::clone(&provider))
        .with_protocol_versions(&versions)
        .map_err(|e| e.to_string())?;
    let builder = match (auth, sources.client_ca.is_empty()) {
        (ClientAuth::NoClientCert, true) => builder.with_no_client_auth(),
        // Go checks no CA for these two, whatever client_ca_file says: neither does this.
        (ClientAuth::RequestClientCert | ClientAuth::RequireAnyClientCert, _) => builder
            .with_client_cert_verifier(Arc::new(AnyClientCert {
                mandatory: auth == ClientAuth::RequireAnyClientCert,
                algorithms: provider.signature_verification_algorithms,
            })),
        (ClientAuth::NoClientCert, false) => {
            return Err(
                "client_ca_file is set but client_auth_type is not: set it to VerifyClientCertIfGiven or RequireAndVerifyClientCert".into(),
            );
        }
        (_, true) => {
            return Err("client_auth_type verifies client certificates: set client_ca_file".into());
        }
        (auth, false) => {
            let mut roots = RootCertStore::empty();
            for ca in CertificateDer::pem_slice_iter(&sources.client_ca) {
                let ca = ca.map_err(|e| format!("client_ca_file: {e}"))?;
                roots.add(ca).map_err(|e| format!("client_ca_file: {e}"))?;
            }
            if roots.is_empty() {
                return Err("client_ca_file holds no PEM certificate".into());
            }
            let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider);
            let verifier = if auth == ClientAuth::VerifyClientCertIfGiven {
                verifier.allow_unauthenticated()
            } else {
                verifier
            };
            builder.with_client_cert_verifier(verifier.build().map_err(|e| e.to_string())?)
        }
    };
    let mut config = builder
        .with_single_cert(certs, key)
        .map_err(|e| format!("cert_file and key_file: {e}"))?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(config)
}

/// Go's `RequestClientCert` and `RequireAnyClientCert`: a client certificate is asked for (the
/// latter requires one) but checked against no CA. The handshake still proves that the client
/// holds the certificate's key.
#[derive(Debug)]
struct AnyClientCert {
    mandatory: bool,
    algorithms: rustls::crypto::WebPkiSupportedAlgorithms,
}

impl rustls::server::danger::ClientCertVerifier for AnyClientCert {
    fn offer_client_auth(&self) -> bool {
        true
    }

    fn client_auth_mandatory(&self) -> bool {
        self.mandatory
    }

    fn root_hint_subjects(&self) -> &[rustls::DistinguishedName] {
        &[]
    }

    fn verify_client_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _now: rustls_pki_types::UnixTime,
    ) -> Result<rustls::server::danger::ClientCertVerified, rustls::Error> {
        Ok(rustls::server::danger::ClientCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.algorithms.supported_schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
        let path = dir.join(name);
        std::fs::write(&path, text).unwrap_or_else(|e| panic!("{e}"));
        path
    }

    fn temp_dir(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("web-config-{name}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{e}"));
        dir
    }

    #[test]
    fn invalid_files_name_what_is_wrong() {
        let dir = temp_dir("invalid");
        for (text, needle) in [
            ("tls_server_config: {cert_file: a.pem}\n", "key_file"),
            ("basic_auth_user: {}\n", "basic_auth_user"),
            ("http_server_config: {http2: false}\n", "http_server_config"),
            ("basic_auth_users: {alice: plain}\n", "not a bcrypt hash"),
            (
                "tls_server_config: {cert_file: nope.pem, key_file: nope.key}\n",
                "nope.pem",
            ),
            ("tls_server_config: [\n", "tls_server_config"),
        ] {
            let path = write(&dir, "web.yml", text);
            match WebConfigFile::open(&path) {
                Ok(_) => panic!("{text:?} was accepted"),
                Err(e) => assert!(e.to_string().contains(needle), "{text:?}: {e}"),
            }
        }
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn client_auth_types_are_the_toolkits() {
        assert_eq!(ClientAuth::parse(None), Ok(ClientAuth::NoClientCert));
        assert_eq!(
            ClientAuth::parse(Some("RequireAndVerifyClientCert")),
            Ok(ClientAuth::RequireAndVerifyClientCert)
        );
        assert_eq!(
            ClientAuth::parse(Some("RequireAnyClientCert")),
            Ok(ClientAuth::RequireAnyClientCert)
        );
        assert!(ClientAuth::parse(Some("Always")).is_err());
    }

    /// Both parts of a check, as the listener runs them.
    fn decide(loaded: &Loaded, header: Option<&str>) -> Access {
        match loaded.check(header.map(str::as_bytes)) {
            Check::Decided(access) => access,
            Check::Verify(credentials) => loaded.verify(credentials),
        }
    }

    fn basic(user_password: &str) -> String {
        use base64::Engine as _;
        format!(
            "Basic {}",
            base64::engine::general_purpose::STANDARD.encode(user_password)
        )
    }

    fn loaded_with(users: &[(&str, &str, u32)]) -> Result<Loaded, bcrypt::BcryptError> {
        let users = users
            .iter()
            .map(|(user, password, cost)| Ok(((*user).to_owned(), bcrypt::hash(password, *cost)?)))
            .collect::<Result<BTreeMap<_, _>, bcrypt::BcryptError>>()?;
        Ok(Loaded {
            tls: None,
            dummy_hash: dummy_hash(users.values()),
            users,
            verified: Mutex::default(),
            failed: Mutex::default(),
            rate_limit: None,
        })
    }

    #[test]
    fn basic_auth_checks_user_and_password() -> Result<(), bcrypt::BcryptError> {
        let loaded = loaded_with(&[("alice", "s3cret", 4)])?;
        let check = |h: &str| decide(&loaded, Some(h));
        assert_eq!(check(&basic("alice:s3cret")), Access::Granted);
        assert!(
            matches!(
                loaded.check(Some(basic("alice:s3cret").as_bytes())),
                Check::Decided(Access::Granted)
            ),
            "again, from the digest of the verified password, without bcrypt"
        );
        assert_eq!(
            check(&basic("alice:wrong")),
            Access::Denied,
            "a verified password never lets another one in"
        );
        assert_eq!(check(&basic("bob:s3cret")), Access::Denied);
        assert_eq!(check("Bearer abc"), Access::Denied);
        assert_eq!(decide(&loaded, None), Access::Denied);
        assert!(
            matches!(bcrypt::verify("s3cret", DUMMY_HASH), Ok(false)),
            "unknown users are checked against a well-formed hash"
        );
        Ok(())
    }

    #[test]
    fn a_refused_password_is_refused_again_without_bcrypt() -> Result<(), bcrypt::BcryptError> {
        let loaded = loaded_with(&[("alice", "s3cret", 4)])?;
        for pair in ["alice:wrong", "mallory:guess"] {
            assert!(
                matches!(loaded.check(Some(basic(pair).as_bytes())), Check::Verify(_)),
                "{pair}: bcrypt decides the first time"
            );
            assert_eq!(decide(&loaded, Some(&basic(pair))), Access::Denied);
            assert!(
                matches!(
                    loaded.check(Some(basic(pair).as_bytes())),
                    Check::Decided(Access::Denied)
                ),
                "{pair}: refused again from the cache"
            );
        }
        assert_eq!(
            decide(&loaded, Some(&basic("alice:s3cret"))),
            Access::Granted,
            "the refused pairs of others never refuse the right password"
        );
        // The cache is bounded: the oldest refusals make room.
        let mut failed = Failed::default();
        for n in 0..FAILED_PAIRS + 10 {
            failed.insert(sha256(format!("alice:{n}").as_bytes()));
        }
        assert_eq!(failed.set.len(), FAILED_PAIRS);
        assert_eq!(failed.order.len(), FAILED_PAIRS);
        assert!(!failed.set.contains(&sha256(b"alice:0")));
        assert!(
            failed
                .set
                .contains(&sha256(format!("alice:{}", FAILED_PAIRS + 9).as_bytes()))
        );
        Ok(())
    }

    #[test]
    fn a_change_of_the_file_keeps_the_passwords_verified_against_a_hash_it_keeps()
    -> Result<(), Box<dyn std::error::Error>> {
        let dir = temp_dir("verified");
        let hash = bcrypt::hash("s3cret", 4)?;
        let path = write(
            &dir,
            "web.yml",
            &format!("basic_auth_users:\n  alice: {hash}\n"),
        );
        let file = WebConfigFile::open(&path)?;
        let header = basic("alice:s3cret");
        let loaded = file.load()?;
        assert_eq!(decide(&loaded, Some(&header)), Access::Granted);
        let known = |file: &WebConfigFile| -> Result<bool, WebConfigError> {
            Ok(matches!(
                file.load()?.check(Some(header.as_bytes())),
                Check::Decided(Access::Granted)
            ))
        };
        assert!(known(&file)?);
        // Another user and a rate limit: alice's hash is the same, her password still known.
        write(
            &dir,
            "web.yml",
            &format!(
                "basic_auth_users:\n  alice: {hash}\n  bob: {}\nrate_limit:\n  interval: 1s\n  burst: 5\n",
                bcrypt::hash("other", 4)?
            ),
        );
        assert!(known(&file)?, "kept across the change");
        // A new hash, even of the same password: bcrypt decides again.
        write(
            &dir,
            "web.yml",
            &format!(
                "basic_auth_users:\n  alice: {}\n",
                bcrypt::hash("s3cret", 4)?
            ),
        );
        assert!(!known(&file)?, "a new hash is checked again");
        let _ = std::fs::remove_dir_all(&dir);
        Ok(())
    }

    #[test]
    fn a_file_broken_at_runtime_leaves_the_last_valid_configuration_in_force()
    -> Result<(), Box<dyn std::error::Error>> {
        let dir = temp_dir("broken");
        let hash = bcrypt::hash("s3cret", 4)?;
        let path = write(
            &dir,
            "web.yml",
            &format!("basic_auth_users:\n  alice: {hash}\n"),
        );
        let file = WebConfigFile::open(&path)?;
        write(&dir, "web.yml", "basic_auth_users: [\n");
        assert!(file.load().is_err());
        let (loaded, error) = file.current()?;
        assert!(error.is_some(), "the error, to report");
        assert!(loaded.requires_auth(), "the last valid configuration");
        assert_eq!(
            decide(&loaded, Some(&basic("alice:s3cret"))),
            Access::Granted
        );
        let _ = std::fs::remove_dir_all(&dir);
        Ok(())
    }

    #[test]
    fn unknown_users_are_checked_at_the_users_highest_cost() -> Result<(), bcrypt::BcryptError> {
        let cost = |hash: &str| hash.parse::<bcrypt::HashParts>().map(|p| p.get_cost());
        let loaded = loaded_with(&[("alice", "a", 4), ("bob", "b", 6)])?;
        assert_eq!(cost(&loaded.dummy_hash)?, 6);
        assert_eq!(cost(&dummy_hash([&bcrypt::hash("x", 12)?]))?, 12);
        assert_eq!(
            cost(&dummy_hash([]))?,
            10,
            "no users: the toolkit's usual cost"
        );
        assert!(
            matches!(bcrypt::verify("a", &loaded.dummy_hash), Ok(false)),
            "the dummy matches no password"
        );
        assert!(matches!(bcrypt::verify("", &loaded.dummy_hash), Ok(false)));
        Ok(())
    }

    #[test]
    fn rate_limit_is_read_as_the_toolkit_writes_it() {
        let dir = temp_dir("rate-limit");
        let limit = |text: &str| {
            WebConfigFile::open(&write(&dir, "web.yml", text))
                .and_then(|file| file.load())
                .map(|loaded| loaded.rate_limit)
        };
        assert_eq!(
            limit("rate_limit:\n  interval: 1s\n  burst: 5\n").ok(),
            Some(Some(RateLimit {
                interval: Duration::from_secs(1),
                burst: 5
            }))
        );
        assert_eq!(
            limit("rate_limit:\n  interval: 100ms\n  burst: 1\n")
                .ok()
                .flatten()
                .map(|l| l.interval),
            Some(Duration::from_millis(100))
        );
        for off in [
            "rate_limit:\n  interval: 0\n  burst: 5\n",
            "rate_limit: {}\n",
            "rate_limit:\n  interval: 0s\n",
        ] {
            assert_eq!(limit(off).ok(), Some(None), "{off:?} turns the limit off");
        }
        for (text, needle) in [
            ("rate_limit:\n  interval: 1s\n", "burst"),
            ("rate_limit:\n  interval: 1s\n  burst: 0\n", "burst"),
            ("rate_limit:\n  interval: 5\n  burst: 1\n", "unit"),
            ("rate_limit:\n  interval: soon\n  burst: 1\n", "interval"),
            ("rate_limit:\n  interval: 1s\n  burst: -1\n", "rate_limit"),
            ("rate_limit:\n  every: 1s\n", "every"),
        ] {
            match limit(text) {
                Ok(l) => panic!("{text:?} was accepted: {l:?}"),
                Err(e) => assert!(e.to_string().contains(needle), "{text:?}: {e}"),
            }
        }
        let _ = std::fs::remove_dir_all(&dir);
    }
}
