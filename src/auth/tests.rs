use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};

use jsonwebtoken::{Algorithm, EncodingKey, Header};

use super::*;

const SECRET: &[u8] = b"0123456789abcdef0123456789abcdef-test-secret";
const NOW_S: u64 = 1_700_000_000;
const NOW_MS: u64 = NOW_S * 1000;
const RS_PRIVATE: &str = include_str!("testdata/rs256_test_private.pem");
const RS_PUBLIC: &str = include_str!("testdata/rs256_test_public.pem");
const RS_OTHER_PRIVATE: &str = include_str!("testdata/rs256_other_private.pem");
const MODEL: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/deploy/auth/model.conf");
const POLICY: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/deploy/auth/policy.csv");

/// Writes `content` to a fresh file under the temp dir.
fn temp_file(name: &str, content: &[u8]) -> PathBuf {
    static N: AtomicUsize = AtomicUsize::new(0);
    let dir = std::env::temp_dir().join(format!("sluice-auth-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(format!("{}-{name}", N.fetch_add(1, Ordering::Relaxed)));
    std::fs::write(&path, content).unwrap();
    path
}

fn enabled_with_key(key: &[u8], audience: Option<&str>) -> Authenticator {
    Authenticator::new(&AuthConfig {
        enabled: true,
        jwt_key_file: Some(temp_file("key", key)),
        jwt_audience: audience.map(str::to_string),
        ..AuthConfig::default()
    })
    .unwrap()
}

fn hs_auth() -> Authenticator {
    enabled_with_key(SECRET, None)
}

fn disabled() -> Authenticator {
    Authenticator::new(&AuthConfig::default()).unwrap()
}

fn with_policy() -> Authenticator {
    Authenticator::new(&AuthConfig {
        enabled: true,
        casbin_model: Some(MODEL.into()),
        casbin_policy: Some(POLICY.into()),
        ..AuthConfig::default()
    })
    .unwrap()
}

fn plain(auth: &Authenticator, user: &str, password: &str) -> Result<Identity, AuthError> {
    auth.authenticate("PLAIN", Some(&plain_response_for_tests(user, password)), None, NOW_MS)
}

fn hs_token(claims: &str) -> String {
    sign_hs256_for_tests(SECRET, claims)
}

fn rs_token(private_pem: &str, claims: serde_json::Value) -> String {
    let key = EncodingKey::from_rsa_pem(private_pem.as_bytes()).unwrap();
    jsonwebtoken::encode(&Header::new(Algorithm::RS256), &claims, &key).unwrap()
}

fn token_err(r: Result<Identity, AuthError>) -> TokenError {
    match r {
        Err(AuthError::Token(e)) => e,
        other => panic!("expected a token error, got {other:?}"),
    }
}

#[test]
fn authenticator_is_send_and_sync() {
    fn check<T: Send + Sync>() {}
    check::<Authenticator>();
    check::<AuthzCache>();
}

#[test]
fn plain_valid_hs256() {
    let auth = hs_auth();
    let exp = NOW_S + 3600;
    let token = hs_token(&format!(r#"{{"ClientID":"order-service","exp":{exp},"nbf":{}}}"#, NOW_S - 10));
    let id = plain(&auth, "audit user", &token).unwrap();
    assert_eq!(
        id,
        Identity {
            client_id: "order-service".into(),
            mechanism: Mechanism::Plain,
            expires_at: Some(exp * 1000),
            username: Some("audit_user".into()),
        }
    );
    assert!(!id.is_expired(NOW_MS));
    assert!(id.is_expired(exp * 1000));
    // The token may be surrounded by whitespace; the username may be empty.
    let id = plain(&auth, "", &format!(" {token}\n")).unwrap();
    assert_eq!(id.client_id, "order-service");
    assert_eq!(id.username, None);
}

#[test]
fn client_id_claim_precedence() {
    let auth = hs_auth();
    let id = |claims: &str| plain(&auth, "u", &hs_token(claims));
    assert_eq!(id(r#"{"ClientID":"a","client_id":"b","sub":"c"}"#).unwrap().client_id, "a");
    assert_eq!(id(r#"{"client_id":"b","sub":"c"}"#).unwrap().client_id, "b");
    assert_eq!(id(r#"{"sub":"c"}"#).unwrap().client_id, "c");
    assert_eq!(id(r#"{"ClientID":"","sub":"c"}"#).unwrap().client_id, "c");
    assert_eq!(id(r#"{"sub":"svc@example.com"}"#).unwrap().client_id, "svc_example_com");
    // No exp: accepted, never expires.
    assert_eq!(id(r#"{"sub":"c"}"#).unwrap().expires_at, None);
    assert_eq!(token_err(id(r#"{"ClientID":7,"name":"x"}"#)), TokenError::MissingClientId);
    assert_eq!(token_err(id(r#"{}"#)), TokenError::MissingClientId);
}

#[test]
fn expired_token() {
    let auth = hs_auth();
    let t = hs_token(&format!(r#"{{"sub":"c","exp":{}}}"#, NOW_S - 1));
    assert_eq!(token_err(plain(&auth, "u", &t)), TokenError::Expired);
    // exp == now is expired (no leeway).
    let t = hs_token(&format!(r#"{{"sub":"c","exp":{NOW_S}}}"#));
    assert_eq!(token_err(plain(&auth, "u", &t)), TokenError::Expired);
    // One second before exp is fine.
    assert!(auth.authenticate("PLAIN", Some(&plain_response_for_tests("u", &t)), None, NOW_MS - 1000).is_ok());
    // A non-numeric exp is malformed.
    let t = hs_token(r#"{"sub":"c","exp":"tomorrow"}"#);
    assert_eq!(token_err(plain(&auth, "u", &t)), TokenError::Malformed);
}

#[test]
fn nbf_in_the_future() {
    let auth = hs_auth();
    let t = hs_token(&format!(r#"{{"sub":"c","nbf":{},"exp":{}}}"#, NOW_S + 60, NOW_S + 3600));
    assert_eq!(token_err(plain(&auth, "u", &t)), TokenError::NotYetValid);
    let t = hs_token(&format!(r#"{{"sub":"c","nbf":{NOW_S}}}"#));
    assert!(plain(&auth, "u", &t).is_ok());
}

#[test]
fn audience() {
    let auth = enabled_with_key(SECRET, Some("sluice"));
    let with_aud = |aud: &str| plain(&auth, "u", &hs_token(&format!(r#"{{"sub":"c","aud":{aud}}}"#)));
    assert!(with_aud(r#""sluice""#).is_ok());
    assert!(with_aud(r#"["other","sluice"]"#).is_ok());
    assert_eq!(token_err(with_aud(r#""other""#)), TokenError::WrongAudience);
    assert_eq!(token_err(with_aud(r#"["other"]"#)), TokenError::WrongAudience);
    assert_eq!(token_err(plain(&auth, "u", &hs_token(r#"{"sub":"c"}"#))), TokenError::WrongAudience);
    // Without a configured audience, aud is not checked.
    assert!(plain(&hs_auth(), "u", &hs_token(r#"{"sub":"c","aud":"other"}"#)).is_ok());
}

#[test]
fn wrong_signature() {
    let auth = hs_auth();
    let t = sign_hs256_for_tests(b"another secret of thirty-two bytes!!", r#"{"sub":"c"}"#);
    assert_eq!(token_err(plain(&auth, "u", &t)), TokenError::BadSignature);
    // A payload swapped under a valid signature.
    let good = hs_token(r#"{"sub":"c"}"#);
    let evil = hs_token(r#"{"sub":"admin"}"#);
    let g: Vec<&str> = good.split('.').collect();
    let e: Vec<&str> = evil.split('.').collect();
    let forged = format!("{}.{}.{}", g[0], e[1], g[2]);
    assert_eq!(token_err(plain(&auth, "u", &forged)), TokenError::BadSignature);
}

#[test]
fn malformed_tokens() {
    let auth = hs_auth();
    for t in ["", "not-a-jwt", "a.b", "a.b.c", "...."] {
        assert_eq!(token_err(plain(&auth, "u", t)), TokenError::Malformed, "{t:?}");
    }
    // Well signed but the claims are not a JSON object.
    assert_eq!(token_err(plain(&auth, "u", &hs_token("[1,2]"))), TokenError::Malformed);
    assert_eq!(token_err(plain(&auth, "u", &hs_token("{oops"))), TokenError::Malformed);
}

#[test]
fn algorithm_is_pinned_by_the_key() {
    use base64::engine::general_purpose::URL_SAFE_NO_PAD;
    use base64::Engine as _;
    // alg=none
    let header = URL_SAFE_NO_PAD.encode(br#"{"alg":"none","typ":"JWT"}"#);
    let payload = URL_SAFE_NO_PAD.encode(br#"{"sub":"admin"}"#);
    let none = format!("{header}.{payload}.");
    assert!(plain(&hs_auth(), "u", &none).is_err());
    // An HS256 token against an RS256 key (the classic confusion: the public key as HMAC secret).
    let rs = enabled_with_key(RS_PUBLIC.as_bytes(), None);
    let confused = sign_hs256_for_tests(RS_PUBLIC.as_bytes(), r#"{"sub":"admin"}"#);
    assert_eq!(token_err(plain(&rs, "u", &confused)), TokenError::WrongAlgorithm);
    // An RS256 token against an HS256 key.
    let t = rs_token(RS_PRIVATE, serde_json::json!({"sub": "c"}));
    assert_eq!(token_err(plain(&hs_auth(), "u", &t)), TokenError::WrongAlgorithm);
}

#[test]
fn rs256() {
    let auth = enabled_with_key(RS_PUBLIC.as_bytes(), Some("sluice"));
    let claims = serde_json::json!({"client_id": "billing", "aud": "sluice", "exp": NOW_S + 60});
    let id = plain(&auth, "u", &rs_token(RS_PRIVATE, claims.clone())).unwrap();
    assert_eq!(id.client_id, "billing");
    assert_eq!(id.expires_at, Some((NOW_S + 60) * 1000));
    assert_eq!(token_err(plain(&auth, "u", &rs_token(RS_OTHER_PRIVATE, claims))), TokenError::BadSignature);
    let expired = serde_json::json!({"sub": "c", "aud": "sluice", "exp": NOW_S - 60});
    assert_eq!(token_err(plain(&auth, "u", &rs_token(RS_PRIVATE, expired))), TokenError::Expired);
}

#[test]
fn key_file_errors_name_the_file() {
    let try_key = |content: &[u8]| {
        let path = temp_file("badkey", content);
        let err = Authenticator::new(&AuthConfig {
            enabled: true,
            jwt_key_file: Some(path.clone()),
            ..AuthConfig::default()
        })
        .unwrap_err();
        assert!(err.contains(&path.display().to_string()), "{err}");
        err
    };
    assert!(try_key(RS_PRIVATE.as_bytes()).contains("private key"));
    assert!(try_key(b"\n\n").contains("empty"));
    assert!(try_key(b"-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n").contains("certificate"));
    assert!(try_key(b"-----BEGIN PUBLIC KEY-----\n!!!!\n-----END PUBLIC KEY-----\n").contains("RSA public key"));
    let missing = PathBuf::from("/nonexistent/sluice/jwt.key");
    let err =
        Authenticator::new(&AuthConfig { enabled: true, jwt_key_file: Some(missing.clone()), ..AuthConfig::default() })
            .unwrap_err();
    assert!(err.contains("/nonexistent/sluice/jwt.key"), "{err}");
    // The secret file's trailing newline is not part of the secret.
    let mut with_newline = SECRET.to_vec();
    with_newline.extend_from_slice(b"\r\n");
    let auth = enabled_with_key(&with_newline, None);
    assert!(plain(&auth, "u", &hs_token(r#"{"sub":"c"}"#)).is_ok());
}

#[test]
fn enabled_without_key_refuses_plain() {
    let auth = Authenticator::new(&AuthConfig { enabled: true, ..AuthConfig::default() }).unwrap();
    assert_eq!(plain(&auth, "u", &hs_token(r#"{"sub":"c"}"#)), Err(AuthError::NoKeyConfigured));
}

#[test]
fn oversize_initial_response() {
    let auth = hs_auth();
    let big = vec![b'a'; MAX_INITIAL_RESPONSE + 1];
    for mech in ["PLAIN", "EXTERNAL", "ANONYMOUS", "SCRAM-SHA-256"] {
        assert_eq!(
            auth.authenticate(mech, Some(&big), Some("cn"), NOW_MS),
            Err(AuthError::ResponseTooLarge(MAX_INITIAL_RESPONSE + 1))
        );
        assert_eq!(
            disabled().authenticate(mech, Some(&big), Some("cn"), NOW_MS),
            Err(AuthError::ResponseTooLarge(MAX_INITIAL_RESPONSE + 1))
        );
    }
    // Exactly 16 KiB is parsed (and here fails as a malformed token, not as too large).
    let mut max = plain_response_for_tests("u", "");
    max.resize(MAX_INITIAL_RESPONSE, b'x');
    assert_eq!(auth.authenticate("PLAIN", Some(&max), None, NOW_MS), Err(AuthError::Token(TokenError::Malformed)));
}

#[test]
fn malformed_plain() {
    for auth in [hs_auth(), disabled()] {
        for bad in [&b"no nuls at all"[..], b"one\0nul", b"a\0b\0c\0d", b"\0u\0\xff\xfe", b""] {
            assert_eq!(auth.authenticate("PLAIN", Some(bad), None, NOW_MS), Err(AuthError::MalformedPlain), "{bad:?}");
        }
        assert_eq!(auth.authenticate("PLAIN", None, None, NOW_MS), Err(AuthError::MalformedPlain));
    }
}

#[test]
fn plain_with_auth_disabled_accepts_any_password() {
    let auth = disabled();
    let id = plain(&auth, "my app", "whatever").unwrap();
    assert_eq!(
        id,
        Identity {
            client_id: "my_app".into(),
            mechanism: Mechanism::Plain,
            expires_at: None,
            username: Some("my_app".into())
        }
    );
    let id = plain(&auth, "", "").unwrap();
    assert_eq!(id.client_id, "");
    assert_eq!(id.username, None);
    // The authzid is ignored; the username is capped at 256 characters.
    let long = "x".repeat(300);
    let id = auth.authenticate("PLAIN", Some(format!("admin\0{long}\0pw").as_bytes()), None, NOW_MS).unwrap();
    assert_eq!(id.client_id.len(), MAX_CLIENT_ID);
}

#[test]
fn external() {
    for auth in [hs_auth(), disabled()] {
        let id = auth.authenticate("EXTERNAL", None, Some("order service"), NOW_MS).unwrap();
        assert_eq!(
            id,
            Identity {
                client_id: "order_service".into(),
                mechanism: Mechanism::External,
                expires_at: None,
                username: None
            }
        );
        // An authzid in the response does not change the identity.
        let id = auth.authenticate("EXTERNAL", Some(b"admin"), Some("order-service"), NOW_MS).unwrap();
        assert_eq!(id.client_id, "order-service");
        assert_eq!(auth.authenticate("EXTERNAL", Some(b""), Some(""), NOW_MS), Err(AuthError::EmptyCommonName));
        assert_eq!(
            auth.authenticate("EXTERNAL", None, None, NOW_MS),
            Err(AuthError::MechanismNotOffered("EXTERNAL".into()))
        );
    }
}

#[test]
fn anonymous_only_when_disabled() {
    let id = disabled().authenticate("ANONYMOUS", Some(b"trace@example"), None, NOW_MS).unwrap();
    assert_eq!(
        id,
        Identity { client_id: String::new(), mechanism: Mechanism::Anonymous, expires_at: None, username: None }
    );
    assert_eq!(
        hs_auth().authenticate("ANONYMOUS", None, None, NOW_MS),
        Err(AuthError::MechanismNotOffered("ANONYMOUS".into()))
    );
}

#[test]
fn unknown_mechanism() {
    let err = disabled().authenticate("SCRAM-SHA-256", Some(b"n,,n=u,r=x"), None, NOW_MS).unwrap_err();
    assert_eq!(err, AuthError::MechanismNotOffered("SCRAM-SHA-256".into()));
    let hostile = format!("{}\u{1b}[31m", "A".repeat(100));
    let err = disabled().authenticate(&hostile, None, None, NOW_MS).unwrap_err();
    assert_eq!(err, AuthError::MechanismNotOffered("A".repeat(40)));
    // Names are exact (RFC 4422: upper case), as the engine always compared them.
    let err = disabled().authenticate("plain", Some(b"\0u\0p"), None, NOW_MS).unwrap_err();
    assert_eq!(err, AuthError::MechanismNotOffered("plain".into()));
}

#[test]
fn mechanisms_order() {
    assert_eq!(hs_auth().mechanisms(None), ["PLAIN"]);
    assert_eq!(hs_auth().mechanisms(Some("cn")), ["EXTERNAL", "PLAIN"]);
    assert_eq!(disabled().mechanisms(None), ["PLAIN", "ANONYMOUS"]);
    assert_eq!(disabled().mechanisms(Some("")), ["EXTERNAL", "PLAIN", "ANONYMOUS"]);
    assert!(!hs_auth().mechanisms(None).contains(&"ANONYMOUS"));
}

#[test]
fn error_display_is_short_and_secret_free() {
    let auth = hs_auth();
    let token = sign_hs256_for_tests(b"wrong-wrong-wrong-wrong-wrong-wrong", r#"{"sub":"c"}"#);
    let err = plain(&auth, "u", &token).unwrap_err();
    let text = err.to_string();
    assert_eq!(text, "invalid token: bad signature");
    assert!(!text.contains(&token));
    assert_eq!(AuthError::ResponseTooLarge(16385).to_string(), "initial response too large (16385 bytes)");
    assert_eq!(AuthError::EmptyCommonName.to_string(), "empty certificate common name");
}

#[test]
fn casbin_policy() {
    let auth = with_policy();
    assert!(auth.authorization_enabled());
    let ok = |sub: &str, obj: &str, chan: &str, act: Action| auth.authorize(sub, obj, chan, act);
    // Direct grants.
    assert!(ok("order-service", "queues", "orders", Action::Write));
    assert!(!ok("order-service", "queues", "orders", Action::Read));
    assert!(!ok("order-service", "queues", "orders2", Action::Write));
    assert!(!ok("order-service", "events", "orders", Action::Write));
    // Wildcard channel.
    assert!(ok("order-service", "events", "anything.at.all", Action::Read));
    assert!(!ok("order-service", "events_store", "anything", Action::Read));
    // Roles and prefix patterns.
    assert!(ok("worker-1", "queues", "orders", Action::Read));
    assert!(ok("worker-2", "commands", "billing.invoices", Action::Read));
    assert!(!ok("worker-2", "commands", "shipping", Action::Read));
    assert!(!ok("worker-2", "queries", "billing.invoices", Action::Read));
    assert!(ok("reporting", "events_store", "metrics.cpu", Action::Read));
    assert!(!ok("reporting", "events_store", "metric", Action::Read));
    assert!(!ok("reporting", "events_store", "metrics.cpu", Action::Write));
    // Admin: every resource, channel and action.
    assert!(ok("ops-console", "queries", "x", Action::Write));
    assert!(ok("ops-console", "events_store", "y", Action::Read));
    // Unknown clients and role names as subjects are denied.
    assert!(!ok("stranger", "queues", "orders", Action::Write));
    assert!(!ok("", "queues", "orders", Action::Write));
    // Multi-byte channel names at the pattern boundary do not panic (casbin's keyMatch would).
    assert!(!ok("reporting", "events_store", "metricsé", Action::Read));
    assert!(ok("reporting", "events_store", "metrics.é", Action::Read));
    assert!(!ok("reporting", "events_store", "métrics.x", Action::Read));
    // Quotes and expression syntax in values are data, not code.
    assert!(!ok("x\" || true || \"", "queues", "orders", Action::Write));
    assert!(!ok("stranger", "queues", "orders\") || (true", Action::Write));
}

#[test]
fn no_policy_or_disabled_allows_everything() {
    for auth in [disabled(), hs_auth()] {
        assert!(!auth.authorization_enabled());
        assert!(auth.authorize("anyone", "queues", "anything", Action::Write));
        assert!(auth.authorize("", "events_store", "x", Action::Read));
    }
    // Configured files are ignored while auth is disabled.
    let auth = Authenticator::new(&AuthConfig {
        enabled: false,
        casbin_model: Some(MODEL.into()),
        casbin_policy: Some(POLICY.into()),
        ..AuthConfig::default()
    })
    .unwrap();
    assert!(auth.authorize("stranger", "queues", "orders", Action::Write));
}

#[test]
fn casbin_config_errors() {
    let only_model = AuthConfig { enabled: true, casbin_model: Some(MODEL.into()), ..AuthConfig::default() };
    assert!(Authenticator::new(&only_model).unwrap_err().contains("must be set together"));
    let missing = AuthConfig {
        enabled: true,
        casbin_model: Some(MODEL.into()),
        casbin_policy: Some("/nonexistent/policy.csv".into()),
        ..AuthConfig::default()
    };
    assert!(Authenticator::new(&missing).unwrap_err().contains("/nonexistent/policy.csv"));
    let bad_model = temp_file("bad-model.conf", b"[request_definition]\nr = sub, obj, act\n");
    let err = Authenticator::new(&AuthConfig {
        enabled: true,
        casbin_model: Some(bad_model.clone()),
        casbin_policy: Some(POLICY.into()),
        ..AuthConfig::default()
    })
    .unwrap_err();
    assert!(err.contains(&bad_model.display().to_string()), "{err}");
    // A three-field request model does not fit (client, resource, channel, action).
    let three = temp_file(
        "three.conf",
        b"[request_definition]\nr = sub, obj, act\n[policy_definition]\np = sub, obj, act\n\
          [policy_effect]\ne = some(where (p.eft == allow))\n[matchers]\nm = r.sub == p.sub && r.obj == p.obj && r.act == p.act\n",
    );
    let err = Authenticator::new(&AuthConfig {
        enabled: true,
        casbin_model: Some(three.clone()),
        casbin_policy: Some(POLICY.into()),
        ..AuthConfig::default()
    })
    .unwrap_err();
    assert!(err.contains(&three.display().to_string()), "{err}");
}

#[test]
fn authz_resource_map() {
    assert_eq!(authz_resource("events-store"), Some("events_store"));
    for p in ["queues", "events", "commands", "queries"] {
        assert_eq!(authz_resource(p), Some(p));
    }
    assert_eq!(authz_resource("responses"), None);
}

#[test]
fn cache_hit_and_expiry() {
    let auth = with_policy();
    let mut cache = AuthzCache::new();
    assert!(cache.check(&auth, "order-service", "queues", "orders", NOW_MS));
    assert!(!cache.check(&auth, "order-service", "queues", "other", NOW_MS));
    assert_eq!((cache.hits(), cache.misses()), (0, 2));
    // Hits, for allows and denies alike, until the entry is 60 s old.
    assert!(cache.check(&auth, "order-service", "queues", "orders", NOW_MS + 59_999));
    assert!(!cache.check(&auth, "order-service", "queues", "other", NOW_MS + 1));
    assert_eq!((cache.hits(), cache.misses()), (2, 2));
    assert!(cache.check(&auth, "order-service", "queues", "orders", NOW_MS + AUTHZ_CACHE_TTL_MS));
    assert_eq!((cache.hits(), cache.misses()), (2, 3));
    // The refreshed entry lives another 60 s.
    assert!(cache.check(&auth, "order-service", "queues", "orders", NOW_MS + AUTHZ_CACHE_TTL_MS + 1));
    assert_eq!((cache.hits(), cache.misses()), (3, 3));
    // Keys cannot be confused by moving characters between the parts.
    assert!(!cache.check(&auth, "order-servicequeues", "", "orders", NOW_MS));
    assert_eq!(cache.misses(), 4);
    assert_eq!(cache.len(), 3);
    cache.clear();
    assert!(cache.is_empty());
}

#[test]
fn cache_evicts_least_recently_used() {
    let auth = with_policy();
    let mut cache = AuthzCache::new();
    for i in 0..AUTHZ_CACHE_CAPACITY {
        cache.check(&auth, "order-service", "queues", &format!("ch{i}"), NOW_MS);
    }
    assert_eq!(cache.len(), AUTHZ_CACHE_CAPACITY);
    // Touch ch0 so that ch1 is the least recently used.
    cache.check(&auth, "order-service", "queues", "ch0", NOW_MS);
    assert_eq!(cache.hits(), 1);
    cache.check(&auth, "order-service", "queues", "new", NOW_MS);
    assert_eq!(cache.len(), AUTHZ_CACHE_CAPACITY);
    assert!(cache.contains("order-service", "queues", "ch0"));
    assert!(!cache.contains("order-service", "queues", "ch1"));
    assert!(cache.contains("order-service", "queues", "ch2"));
    assert!(cache.contains("order-service", "queues", "new"));
}

#[test]
fn cache_without_policy_is_a_pass_through() {
    let mut cache = AuthzCache::new();
    assert!(cache.check(&disabled(), "c", "queues", "x", NOW_MS));
    assert!(cache.is_empty());
    assert_eq!(cache.misses(), 0);
}

#[test]
fn audit_counts_by_mechanism() {
    let before = stats().snapshot();
    let id = plain(&disabled(), "u", "p").unwrap();
    audit_success(&id, "127.0.0.1");
    audit_failure("PLAIN", "127.0.0.1", &AuthError::Token(TokenError::Expired));
    audit_failure("SCRAM-SHA-256", "::1", &AuthError::MechanismNotOffered("SCRAM-SHA-256".into()));
    audit_failure("none", "::1", &AuthError::Protocol("bare connection refused"));
    let after = stats().snapshot();
    let delta = |i: usize| (after[i].1 - before[i].1, after[i].2 - before[i].2);
    // Tests run concurrently; only this one audits plain, none and other.
    assert_eq!(after[1].0, "plain");
    assert_eq!(delta(1), (1, 1));
    assert_eq!(delta(3), (0, 1));
    assert_eq!(delta(4), (0, 1));
    assert_eq!(stats().successes("plain"), after[1].1);
    assert_eq!(stats().failures("whatever"), after[4].2);
}

#[test]
fn parse_bool_values() {
    assert_eq!(parse_bool("TRUE"), Some(true));
    assert_eq!(parse_bool(" 1 "), Some(true));
    assert_eq!(parse_bool("off"), Some(false));
    assert_eq!(parse_bool("maybe"), None);
}

#[test]
fn key_match_is_utf8_safe() {
    assert!(key_match("orders", "orders"));
    assert!(!key_match("orders2", "orders"));
    assert!(key_match("metrics.cpu", "metrics.*"));
    assert!(key_match("metrics.", "metrics.*"));
    assert!(!key_match("metrics", "metrics.*"));
    assert!(key_match("", "*"));
    // casbin's own keyMatch panics on these (byte index inside a multi-byte character).
    assert!(!key_match("metricsé", "metrics.*"));
    assert!(!key_match("aé", "ab*"));
    assert!(key_match("é.x", "é.*"));
}
