//! Authentication (SASL), authorization (casbin) and the audit trail.
//!
//! Everything here is synchronous and runtime-free: the connection driver calls it while it
//! handles the SASL frames and attaches. [`Authenticator`] is `Send + Sync`; build it once at
//! startup and share it (e.g. in an `Arc`) between the shards.
//!
//! # SASL
//! Mechanisms are offered in the order EXTERNAL, PLAIN, ANONYMOUS ([`Authenticator::mechanisms`]):
//! - **EXTERNAL** only on a TLS connection whose client certificate was verified. Identity = the
//!   sanitized subject CN; an empty CN fails. An authzid in the initial response is ignored.
//! - **PLAIN** always. RFC 4616 `authzid\0authcid\0passwd`. With auth enabled the password is a
//!   JWT (HS256 or RS256, decided by the key file), `exp`/`nbf` are checked against the caller's
//!   clock with no leeway, `aud` is required when `SLUICE_AUTH_JWT_AUDIENCE` is set, and the
//!   client id is the first non-empty string claim among `ClientID` (the reference's claim),
//!   `client_id` and `sub`, sanitized. A token without `exp` never expires. The username
//!   (authcid) is recorded for audit only; the authzid is ignored. With auth disabled, any
//!   password is accepted and the sanitized username is the client id (empty: the caller uses
//!   the container-id).
//! - **ANONYMOUS** only when auth is disabled; the client id is empty (the caller uses the
//!   container-id).
//!
//! Every initial response is capped at [`MAX_INITIAL_RESPONSE`] bytes. The [`AuthError`] of a
//! failure is for the audit log only ([`audit_failure`]); the wire carries only the SASL outcome
//! code.
//!
//! # Authorization
//! [`Authenticator::authorize`] asks casbin whether `(client_id, resource, channel, action)` is
//! allowed; see `deploy/auth/model.conf` and `deploy/auth/policy.csv`. [`AuthzCache`] caches the
//! per-message Write checks of the anonymous terminus.
//!
//! # Tests
//! [`sign_hs256_for_tests`] (hidden from the docs) builds HS256 tokens for integration tests.

mod cache;
mod jwt;

use std::fmt;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use casbin::function_map::{dynamic_to_str, OperatorFunction};
use casbin::{CoreApi, DefaultModel, Enforcer, StringAdapter};

pub use cache::{AuthzCache, AUTHZ_CACHE_CAPACITY, AUTHZ_CACHE_TTL_MS};

use jwt::JwtKey;

/// The largest accepted SASL initial response (16 KiB); a larger one is refused as hostile.
pub const MAX_INITIAL_RESPONSE: usize = 16 * 1024;

/// The longest client id, as for the container-id.
pub const MAX_CLIENT_ID: usize = 256;

/// How clients authenticate (from settings).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AuthConfig {
    /// `SLUICE_AUTH_ENABLED` (default false). When false, ANONYMOUS and bare connections are
    /// allowed, PLAIN accepts any password and nothing is authorized.
    pub enabled: bool,
    /// `SLUICE_AUTH_JWT_KEY_FILE`: an HS256 secret (raw bytes; trailing CR/LF ignored) or an
    /// RS256 public key (PEM `PUBLIC KEY` or `RSA PUBLIC KEY`), detected from the content.
    pub jwt_key_file: Option<PathBuf>,
    /// `SLUICE_AUTH_JWT_AUDIENCE`: when set, tokens must carry it in `aud`.
    pub jwt_audience: Option<String>,
    /// `SLUICE_AUTH_CASBIN_MODEL`: a casbin model file (with the policy, or neither).
    pub casbin_model: Option<PathBuf>,
    /// `SLUICE_AUTH_CASBIN_POLICY`: a casbin policy file (CSV).
    pub casbin_policy: Option<PathBuf>,
}

impl AuthConfig {
    /// Reads the `SLUICE_AUTH_*` environment variables (unset or empty = not configured).
    pub fn from_env() -> Result<AuthConfig, String> {
        let var = |name: &str| std::env::var(name).ok().filter(|v| !v.trim().is_empty());
        let enabled = match var("SLUICE_AUTH_ENABLED") {
            None => false,
            Some(v) => {
                parse_bool(&v).ok_or_else(|| format!("SLUICE_AUTH_ENABLED: expected true or false, got {v:?}"))?
            }
        };
        Ok(AuthConfig {
            enabled,
            jwt_key_file: var("SLUICE_AUTH_JWT_KEY_FILE").map(PathBuf::from),
            jwt_audience: var("SLUICE_AUTH_JWT_AUDIENCE"),
            casbin_model: var("SLUICE_AUTH_CASBIN_MODEL").map(PathBuf::from),
            casbin_policy: var("SLUICE_AUTH_CASBIN_POLICY").map(PathBuf::from),
        })
    }
}

fn parse_bool(v: &str) -> Option<bool> {
    match v.trim().to_ascii_lowercase().as_str() {
        "1" | "true" | "yes" | "on" => Some(true),
        "0" | "false" | "no" | "off" => Some(false),
        _ => None,
    }
}

/// How a connection authenticated.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Mechanism {
    External,
    Plain,
    Anonymous,
    /// No SASL layer (bare AMQP header); only allowed when auth is disabled.
    None,
}

impl Mechanism {
    /// Lowercase name for audit records, metrics labels and the connections API.
    pub fn as_str(self) -> &'static str {
        match self {
            Mechanism::External => "external",
            Mechanism::Plain => "plain",
            Mechanism::Anonymous => "anonymous",
            Mechanism::None => "none",
        }
    }

    /// The SASL mechanism symbol on the wire (`None` has none: "").
    pub fn wire_name(self) -> &'static str {
        match self {
            Mechanism::External => "EXTERNAL",
            Mechanism::Plain => "PLAIN",
            Mechanism::Anonymous => "ANONYMOUS",
            Mechanism::None => "",
        }
    }

    fn parse(name: &str) -> Option<Mechanism> {
        [Mechanism::External, Mechanism::Plain, Mechanism::Anonymous]
            .into_iter()
            // Exact: SASL mechanism names are upper case (RFC 4422 3.1), and what is
            // offered is what may be chosen.
            .find(|m| name == m.wire_name())
    }
}

impl fmt::Display for Mechanism {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The result of a successful authentication.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Identity {
    /// Sanitized (`[A-Za-z0-9_-]`, at most 256 characters). Empty for ANONYMOUS and for PLAIN
    /// with auth disabled and an empty username: the caller then uses the container-id.
    pub client_id: String,
    pub mechanism: Mechanism,
    /// The JWT's `exp` in unix milliseconds (PLAIN with auth enabled and a token that has one).
    pub expires_at: Option<u64>,
    /// The PLAIN username (authcid), sanitized; for audit only. None when absent or empty.
    pub username: Option<String>,
}

impl Identity {
    /// The identity of a connection without a SASL layer (client id filled in by the caller).
    pub fn bare() -> Identity {
        Identity { client_id: String::new(), mechanism: Mechanism::None, expires_at: None, username: None }
    }

    /// True once the credential's expiry has passed (never for credentials without one).
    pub fn is_expired(&self, now_unix_ms: u64) -> bool {
        self.expires_at.is_some_and(|exp| now_unix_ms >= exp)
    }
}

/// Why a JWT was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TokenError {
    /// Not a compact JWS, bad base64 or JSON, claims not an object, non-numeric `exp`/`nbf`.
    Malformed,
    /// The header's `alg` is not the one of the configured key.
    WrongAlgorithm,
    BadSignature,
    Expired,
    NotYetValid,
    /// `aud` missing or different from the configured audience.
    WrongAudience,
    /// None of `ClientID`, `client_id`, `sub` is a non-empty string.
    MissingClientId,
    /// The configured key could not verify anything (e.g. an unusable RSA key).
    KeyRejected,
}

impl fmt::Display for TokenError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            TokenError::Malformed => "malformed",
            TokenError::WrongAlgorithm => "wrong algorithm",
            TokenError::BadSignature => "bad signature",
            TokenError::Expired => "expired",
            TokenError::NotYetValid => "not yet valid",
            TokenError::WrongAudience => "wrong audience",
            TokenError::MissingClientId => "no client id claim",
            TokenError::KeyRejected => "key rejected",
        })
    }
}

/// Why an authentication failed: for the audit log only, never for the wire.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AuthError {
    /// The initial response was longer than [`MAX_INITIAL_RESPONSE`] (its length).
    ResponseTooLarge(usize),
    /// The mechanism was not offered on this connection (sanitized, at most 40 characters).
    MechanismNotOffered(String),
    /// PLAIN response missing, not `authzid\0authcid\0passwd`, or not UTF-8.
    MalformedPlain,
    /// Auth is enabled but no JWT key file is configured, so PLAIN cannot succeed.
    NoKeyConfigured,
    Token(TokenError),
    /// EXTERNAL with a verified certificate whose subject has no (or an empty) CN.
    EmptyCommonName,
    /// A failure found by the connection driver (frames out of order, timeout, bare connection
    /// refused, ...): a short static description.
    Protocol(&'static str),
}

impl fmt::Display for AuthError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AuthError::ResponseTooLarge(n) => write!(f, "initial response too large ({n} bytes)"),
            AuthError::MechanismNotOffered(m) => write!(f, "mechanism not offered: {m}"),
            AuthError::MalformedPlain => f.write_str("malformed PLAIN response"),
            AuthError::NoKeyConfigured => f.write_str("no JWT key configured"),
            AuthError::Token(e) => write!(f, "invalid token: {e}"),
            AuthError::EmptyCommonName => f.write_str("empty certificate common name"),
            AuthError::Protocol(s) => f.write_str(s),
        }
    }
}

impl std::error::Error for AuthError {}

/// Read (consume) or Write (produce).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Action {
    Read,
    Write,
}

impl Action {
    /// The casbin `act` value: "read" or "write".
    pub fn as_str(self) -> &'static str {
        match self {
            Action::Read => "read",
            Action::Write => "write",
        }
    }
}

/// The casbin resource for an address pattern: `events-store` becomes `events_store`; the other
/// four patterns map to themselves; anything else (responses, dynamic nodes) has none.
pub fn authz_resource(pattern: &str) -> Option<&'static str> {
    match pattern {
        "queues" => Some("queues"),
        "events" => Some("events"),
        "events-store" | "events_store" => Some("events_store"),
        "commands" => Some("commands"),
        "queries" => Some("queries"),
        _ => None,
    }
}

/// Characters outside `[A-Za-z0-9_-]` become `_`; at most [`MAX_CLIENT_ID`] characters.
pub fn sanitize_client_id(s: &str) -> String {
    sanitize(s, MAX_CLIENT_ID)
}

fn sanitize(s: &str, max: usize) -> String {
    s.chars().take(max).map(|c| if c.is_ascii_alphanumeric() || c == '_' || c == '-' { c } else { '_' }).collect()
}

/// Verifies SASL credentials and answers authorization questions.
pub struct Authenticator {
    enabled: bool,
    key: Option<JwtKey>,
    audience: Option<String>,
    enforcer: Option<Enforcer>,
}

impl fmt::Debug for Authenticator {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Authenticator")
            .field("enabled", &self.enabled)
            .field("jwt", &self.key.as_ref().map(JwtKey::algorithm_name))
            .field("audience", &self.audience)
            .field("casbin", &self.enforcer.is_some())
            .finish()
    }
}

impl Authenticator {
    /// Loads the JWT key and the casbin model and policy. With auth disabled nothing is loaded
    /// (configured files are ignored, with a warning). Errors name the offending file.
    pub fn new(cfg: &AuthConfig) -> Result<Authenticator, String> {
        if !cfg.enabled {
            if cfg.jwt_key_file.is_some() || cfg.casbin_model.is_some() || cfg.casbin_policy.is_some() {
                tracing::warn!(
                    "auth is disabled (SLUICE_AUTH_ENABLED=false): the JWT key and casbin files are ignored"
                );
            }
            return Ok(Authenticator { enabled: false, key: None, audience: None, enforcer: None });
        }
        let key = match &cfg.jwt_key_file {
            Some(path) => {
                let key = JwtKey::load(path)?;
                if key.is_weak() {
                    // RFC 7518 3.2: a key at least as long as the hash output MUST be used.
                    return Err(format!(
                        "JWT key file {}: the HS256 secret is shorter than 32 bytes (RFC 7518 requires at least 32)",
                        path.display()
                    ));
                }
                Some(key)
            }
            None => {
                tracing::warn!("auth is enabled without SLUICE_AUTH_JWT_KEY_FILE: PLAIN refuses every client");
                None
            }
        };
        let enforcer = match (&cfg.casbin_model, &cfg.casbin_policy) {
            (Some(model), Some(policy)) => Some(load_enforcer(model, policy)?),
            (None, None) => {
                tracing::warn!("auth is enabled without a casbin model and policy: every client may use every channel");
                None
            }
            (Some(_), None) | (None, Some(_)) => {
                return Err("SLUICE_AUTH_CASBIN_MODEL and SLUICE_AUTH_CASBIN_POLICY must be set together".into())
            }
        };
        let audience = cfg.jwt_audience.clone().filter(|a| !a.is_empty());
        Ok(Authenticator { enabled: true, key, audience, enforcer })
    }

    /// Whether authentication is enforced. When false, bare (no SASL) connections are allowed.
    pub fn enabled(&self) -> bool {
        self.enabled
    }

    /// Whether [`authorize`](Self::authorize) can ever say no (auth enabled with a casbin policy).
    pub fn authorization_enabled(&self) -> bool {
        self.enforcer.is_some()
    }

    /// SASL mechanisms to offer, in order: EXTERNAL (only if `tls_client_cn` is Some, i.e. a
    /// verified client certificate), PLAIN (always), ANONYMOUS (only when auth is disabled).
    pub fn mechanisms(&self, tls_client_cn: Option<&str>) -> Vec<&'static str> {
        let mut out = Vec::with_capacity(3);
        if tls_client_cn.is_some() {
            out.push(Mechanism::External.wire_name());
        }
        out.push(Mechanism::Plain.wire_name());
        if !self.enabled {
            out.push(Mechanism::Anonymous.wire_name());
        }
        out
    }

    /// Evaluates a sasl-init (see the module docs for each mechanism's rules).
    /// `tls_client_cn`: the subject CN of the verified client certificate ("" if it has none).
    pub fn authenticate(
        &self,
        mechanism: &str,
        initial_response: Option<&[u8]>,
        tls_client_cn: Option<&str>,
        now_unix_ms: u64,
    ) -> Result<Identity, AuthError> {
        if let Some(r) = initial_response {
            if r.len() > MAX_INITIAL_RESPONSE {
                return Err(AuthError::ResponseTooLarge(r.len()));
            }
        }
        let not_offered = || AuthError::MechanismNotOffered(sanitize(mechanism, 40));
        match Mechanism::parse(mechanism) {
            Some(Mechanism::Plain) => self.plain(initial_response, now_unix_ms),
            Some(Mechanism::External) => {
                let cn = tls_client_cn.ok_or_else(not_offered)?;
                if cn.is_empty() {
                    return Err(AuthError::EmptyCommonName);
                }
                Ok(Identity {
                    client_id: sanitize_client_id(cn),
                    mechanism: Mechanism::External,
                    expires_at: None,
                    username: None,
                })
            }
            Some(Mechanism::Anonymous) if !self.enabled => Ok(Identity {
                client_id: String::new(),
                mechanism: Mechanism::Anonymous,
                expires_at: None,
                username: None,
            }),
            _ => Err(not_offered()),
        }
    }

    fn plain(&self, response: Option<&[u8]>, now_ms: u64) -> Result<Identity, AuthError> {
        let (_authzid, authcid, passwd) = parse_plain(response.ok_or(AuthError::MalformedPlain)?)?;
        let username = Some(sanitize_client_id(authcid)).filter(|u| !u.is_empty());
        if !self.enabled {
            let client_id = username.clone().unwrap_or_default();
            return Ok(Identity { client_id, mechanism: Mechanism::Plain, expires_at: None, username });
        }
        let key = self.key.as_ref().ok_or(AuthError::NoKeyConfigured)?;
        let token = key.verify(passwd, self.audience.as_deref(), now_ms).map_err(AuthError::Token)?;
        Ok(Identity {
            client_id: token.client_id,
            mechanism: Mechanism::Plain,
            expires_at: token.expires_at_ms,
            username,
        })
    }

    /// Casbin check of `(client_id, resource, channel, action)`; `resource` is one of
    /// "queues", "events", "events_store", "commands", "queries" (see [`authz_resource`]).
    /// Always true when auth is disabled or no model/policy is configured. An evaluation error
    /// denies (and is logged).
    pub fn authorize(&self, client_id: &str, resource: &str, channel: &str, action: Action) -> bool {
        let Some(enforcer) = &self.enforcer else {
            return true;
        };
        let request = (client_id, resource, channel, action.as_str());
        match catch_unwind(AssertUnwindSafe(|| enforcer.enforce(request))) {
            Ok(Ok(allowed)) => allowed,
            Ok(Err(e)) => {
                tracing::warn!(error = %e, "casbin evaluation failed; denying");
                false
            }
            Err(_) => {
                tracing::error!("casbin evaluation panicked; denying");
                false
            }
        }
    }
}

/// Splits an RFC 4616 PLAIN message into (authzid, authcid, passwd).
fn parse_plain(msg: &[u8]) -> Result<(&str, &str, &str), AuthError> {
    let text = std::str::from_utf8(msg).map_err(|_| AuthError::MalformedPlain)?;
    let mut parts = text.split('\0');
    match (parts.next(), parts.next(), parts.next(), parts.next()) {
        (Some(authzid), Some(authcid), Some(passwd), None) => Ok((authzid, authcid, passwd)),
        _ => Err(AuthError::MalformedPlain),
    }
}

fn load_enforcer(model: &Path, policy: &Path) -> Result<Enforcer, String> {
    let model_text = std::fs::read_to_string(model)
        .map_err(|e| format!("cannot read casbin model file {}: {}", model.display(), e.kind()))?;
    let policy_text = std::fs::read_to_string(policy)
        .map_err(|e| format!("cannot read casbin policy file {}: {}", policy.display(), e.kind()))?;
    let m = futures_lite::future::block_on(DefaultModel::from_str(&model_text))
        .map_err(|e| format!("invalid casbin model file {}: {e}", model.display()))?;
    let mut enforcer = futures_lite::future::block_on(Enforcer::new(m, StringAdapter::new(policy_text)))
        .map_err(|e| format!("cannot load casbin policy file {} (model {}): {e}", policy.display(), model.display()))?;
    // casbin's own keyMatch slices strings by byte index and panics on a multi-byte channel name.
    enforcer.add_function(
        "keyMatch",
        OperatorFunction::Arg2(|a, b| key_match(&dynamic_to_str(&a), &dynamic_to_str(&b)).into()),
    );
    // A model whose request is not (sub, obj, channel, act) fails here rather than per attach.
    let probe = catch_unwind(AssertUnwindSafe(|| enforcer.enforce(("-", "queues", "-", "read"))));
    match probe {
        Ok(Ok(_)) => Ok(enforcer),
        Ok(Err(e)) => Err(format!(
            "casbin model file {} does not evaluate a (client, resource, channel, action) request: {e}",
            model.display()
        )),
        Err(_) => Err(format!("casbin model file {} panicked on a probe request", model.display())),
    }
}

/// casbin's `keyMatch`: `key2` may end in (or contain) `*`, matching any suffix from there.
fn key_match(key1: &str, key2: &str) -> bool {
    match key2.find('*') {
        Some(i) => key1.as_bytes().starts_with(&key2.as_bytes()[..i]),
        None => key1 == key2,
    }
}

/// Emits `auth.success` (target "audit") and counts it in [`stats`].
pub fn audit_success(id: &Identity, source_ip: &str) {
    stats().count(true, id.mechanism.as_str());
    tracing::info!(
        target: "audit",
        event = "auth.success",
        client_id = %id.client_id,
        transport = "amqp10",
        source_ip = %source_ip,
        mechanism = id.mechanism.as_str(),
        username = id.username.as_deref().unwrap_or(""),
        "auth.success"
    );
}

/// Emits `auth.failure` (target "audit") with the reason and counts it in [`stats`].
/// `mechanism` is what the client asked for (sanitized and lowercased here; "none" for a bare
/// connection).
pub fn audit_failure(mechanism: &str, source_ip: &str, reason: &AuthError) {
    let mechanism = sanitize(mechanism, 40).to_ascii_lowercase();
    stats().count(false, &mechanism);
    tracing::warn!(
        target: "audit",
        event = "auth.failure",
        client_id = "",
        transport = "amqp10",
        source_ip = %source_ip,
        mechanism = %mechanism,
        error = %reason,
        "auth.failure"
    );
}

/// Authentication counters by mechanism ("external", "plain", "anonymous", "none", "other").
#[derive(Debug, Default)]
pub struct AuthStats {
    successes: [AtomicU64; 5],
    failures: [AtomicU64; 5],
}

/// The labels of [`AuthStats`], in index order.
pub const AUTH_STATS_MECHANISMS: [&str; 5] = ["external", "plain", "anonymous", "none", "other"];

impl AuthStats {
    const fn new() -> AuthStats {
        AuthStats {
            successes: [AtomicU64::new(0), AtomicU64::new(0), AtomicU64::new(0), AtomicU64::new(0), AtomicU64::new(0)],
            failures: [AtomicU64::new(0), AtomicU64::new(0), AtomicU64::new(0), AtomicU64::new(0), AtomicU64::new(0)],
        }
    }

    fn index(mechanism: &str) -> usize {
        AUTH_STATS_MECHANISMS[..4].iter().position(|m| mechanism.eq_ignore_ascii_case(m)).unwrap_or(4)
    }

    fn count(&self, success: bool, mechanism: &str) {
        let slot = if success { &self.successes } else { &self.failures };
        slot[Self::index(mechanism)].fetch_add(1, Ordering::Relaxed);
    }

    /// Successful authentications with `mechanism` (a label of [`AUTH_STATS_MECHANISMS`]).
    pub fn successes(&self, mechanism: &str) -> u64 {
        self.successes[Self::index(mechanism)].load(Ordering::Relaxed)
    }

    /// Failed authentications with `mechanism` (unknown names count as "other").
    pub fn failures(&self, mechanism: &str) -> u64 {
        self.failures[Self::index(mechanism)].load(Ordering::Relaxed)
    }

    /// `(mechanism, successes, failures)` for every label, for the metrics exporter.
    pub fn snapshot(&self) -> [(&'static str, u64, u64); 5] {
        let mut out = [("", 0, 0); 5];
        for (i, row) in out.iter_mut().enumerate() {
            *row = (
                AUTH_STATS_MECHANISMS[i],
                self.successes[i].load(Ordering::Relaxed),
                self.failures[i].load(Ordering::Relaxed),
            );
        }
        out
    }
}

static STATS: AuthStats = AuthStats::new();

/// The process-wide authentication counters (bumped by [`audit_success`] and [`audit_failure`]).
pub fn stats() -> &'static AuthStats {
    &STATS
}

/// Builds an HS256 JWT over `claims_json` (taken verbatim) for tests, e.g.
/// `sign_hs256_for_tests(b"secret", r#"{"ClientID":"c1","exp":4102444800}"#)`.
#[doc(hidden)]
pub fn sign_hs256_for_tests(secret: &[u8], claims_json: &str) -> String {
    jwt::sign_hs256(secret, claims_json)
}

/// A PLAIN initial response `\0username\0password`, for tests.
#[doc(hidden)]
pub fn plain_response_for_tests(username: &str, password: &str) -> Vec<u8> {
    format!("\0{username}\0{password}").into_bytes()
}

#[cfg(test)]
mod tests;
