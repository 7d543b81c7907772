//! JWT verification for the SASL PLAIN password.
//!
//! The key file decides the algorithm: a PEM `PUBLIC KEY` / `RSA PUBLIC KEY` means RS256,
//! anything else is the raw HS256 secret. Exactly one algorithm is accepted per key, so a
//! token cannot choose its own (no `alg` confusion, no `none`).
//!
//! The signature is checked by `jsonwebtoken`; the time and audience claims are checked here
//! against the caller's clock (`now_unix_ms`), with no leeway, so that tests can use a fake
//! clock and the connection driver can compute the expiry deadline itself.

use std::path::Path;

use jsonwebtoken::errors::ErrorKind;
use jsonwebtoken::{Algorithm, DecodingKey, Validation};
use serde_json::Value;

use super::{sanitize_client_id, TokenError};

/// Claims read for the client id, in order; the first non-empty string wins.
pub(crate) const CLIENT_ID_CLAIMS: [&str; 3] = ["ClientID", "client_id", "sub"];

/// A verification key loaded from `SLUICE_AUTH_JWT_KEY_FILE`.
pub(crate) struct JwtKey {
    algorithm: Algorithm,
    key: DecodingKey,
    /// Length of an HS256 secret (for the startup warning); 0 for RS256.
    secret_len: usize,
}

/// A token whose signature, time window and audience were verified.
#[derive(Debug)]
pub(crate) struct VerifiedToken {
    pub(crate) client_id: String,
    pub(crate) expires_at_ms: Option<u64>,
}

impl JwtKey {
    /// Reads and classifies the key file; errors name the file and never include key bytes.
    pub(crate) fn load(path: &Path) -> Result<JwtKey, String> {
        let bytes =
            std::fs::read(path).map_err(|e| format!("cannot read JWT key file {}: {}", path.display(), e.kind()))?;
        JwtKey::from_bytes(&bytes).map_err(|e| format!("JWT key file {}: {e}", path.display()))
    }

    pub(crate) fn from_bytes(bytes: &[u8]) -> Result<JwtKey, String> {
        let trimmed = bytes.trim_ascii_start();
        if trimmed.starts_with(b"-----BEGIN ") {
            let first_line = trimmed.split(|&b| b == b'\n').next().unwrap_or_default();
            let first_line = String::from_utf8_lossy(first_line);
            let first_line = first_line.trim();
            if first_line.contains("PRIVATE KEY") {
                return Err("holds a private key; configure the RS256 public key (PEM `PUBLIC KEY`)".into());
            }
            if first_line.contains("CERTIFICATE") {
                return Err("holds a certificate; extract its public key (openssl x509 -pubkey -noout)".into());
            }
            if first_line != "-----BEGIN PUBLIC KEY-----" && first_line != "-----BEGIN RSA PUBLIC KEY-----" {
                return Err("unsupported PEM block (expected an RSA `PUBLIC KEY` for RS256)".into());
            }
            let key = DecodingKey::from_rsa_pem(trimmed).map_err(|_| "not a valid RSA public key".to_string())?;
            return Ok(JwtKey { algorithm: Algorithm::RS256, key, secret_len: 0 });
        }
        // HS256: the raw bytes, less trailing line endings (`echo secret > file` adds one).
        let mut secret = bytes;
        while let [rest @ .., b'\n' | b'\r'] = secret {
            secret = rest;
        }
        if secret.is_empty() {
            return Err("is empty (expected an HS256 secret or an RS256 public key in PEM)".into());
        }
        Ok(JwtKey { algorithm: Algorithm::HS256, key: DecodingKey::from_secret(secret), secret_len: secret.len() })
    }

    pub(crate) fn algorithm_name(&self) -> &'static str {
        match self.algorithm {
            Algorithm::RS256 => "RS256",
            _ => "HS256",
        }
    }

    /// HS256 secrets shorter than the hash output (32 bytes) are weak.
    pub(crate) fn is_weak(&self) -> bool {
        self.algorithm == Algorithm::HS256 && self.secret_len < 32
    }

    /// Verifies `token` (compact JWS). `audience`: the required `aud` value, if configured.
    pub(crate) fn verify(&self, token: &str, audience: Option<&str>, now_ms: u64) -> Result<VerifiedToken, TokenError> {
        let token = token.trim_ascii();
        if token.is_empty() {
            return Err(TokenError::Malformed);
        }
        let mut validation = Validation::new(self.algorithm);
        validation.algorithms = vec![self.algorithm];
        validation.validate_exp = false;
        validation.validate_nbf = false;
        validation.validate_aud = false;
        validation.leeway = 0;
        validation.required_spec_claims.clear();
        let data = jsonwebtoken::decode::<Value>(token, &self.key, &validation).map_err(|e| map_error(e.kind()))?;
        let Value::Object(claims) = data.claims else {
            return Err(TokenError::Malformed);
        };

        let expires_at_ms = match claims.get("exp") {
            None => None,
            Some(v) => Some(numeric_date_ms(v).ok_or(TokenError::Malformed)?),
        };
        if let Some(exp) = expires_at_ms {
            if now_ms >= exp {
                return Err(TokenError::Expired);
            }
        }
        if let Some(v) = claims.get("nbf") {
            let nbf = numeric_date_ms(v).ok_or(TokenError::Malformed)?;
            if now_ms < nbf {
                return Err(TokenError::NotYetValid);
            }
        }
        if let Some(want) = audience {
            let ok = match claims.get("aud") {
                Some(Value::String(s)) => s == want,
                Some(Value::Array(items)) => items.iter().any(|a| a.as_str() == Some(want)),
                _ => false,
            };
            if !ok {
                return Err(TokenError::WrongAudience);
            }
        }
        let client_id = CLIENT_ID_CLAIMS
            .iter()
            .filter_map(|name| claims.get(*name).and_then(Value::as_str))
            .map(sanitize_client_id)
            .find(|id| !id.is_empty())
            .ok_or(TokenError::MissingClientId)?;
        Ok(VerifiedToken { client_id, expires_at_ms })
    }
}

/// A JWT NumericDate (seconds since the epoch, possibly fractional) in unix milliseconds.
fn numeric_date_ms(v: &Value) -> Option<u64> {
    let secs = v.as_f64()?;
    if !secs.is_finite() {
        return None;
    }
    let ms = secs * 1000.0;
    Some(if ms <= 0.0 {
        0
    } else if ms >= u64::MAX as f64 {
        u64::MAX
    } else {
        ms as u64
    })
}

fn map_error(kind: &ErrorKind) -> TokenError {
    match kind {
        ErrorKind::InvalidSignature => TokenError::BadSignature,
        ErrorKind::InvalidAlgorithm | ErrorKind::InvalidAlgorithmName | ErrorKind::MissingAlgorithm => {
            TokenError::WrongAlgorithm
        }
        ErrorKind::InvalidToken | ErrorKind::Base64(_) | ErrorKind::Json(_) | ErrorKind::Utf8(_) => {
            TokenError::Malformed
        }
        ErrorKind::InvalidKeyFormat
        | ErrorKind::InvalidRsaKey(_)
        | ErrorKind::InvalidEcdsaKey
        | ErrorKind::Crypto(_) => TokenError::KeyRejected,
        _ => TokenError::Malformed,
    }
}

/// Builds an HS256 token over `claims_json` taken verbatim (it need not even be valid JSON,
/// which lets tests produce well-signed garbage).
pub(crate) fn sign_hs256(secret: &[u8], claims_json: &str) -> String {
    use base64::engine::general_purpose::URL_SAFE_NO_PAD;
    use base64::Engine as _;
    let header = URL_SAFE_NO_PAD.encode(br#"{"alg":"HS256","typ":"JWT"}"#);
    let payload = URL_SAFE_NO_PAD.encode(claims_json.as_bytes());
    let message = format!("{header}.{payload}");
    let key = jsonwebtoken::EncodingKey::from_secret(secret);
    // HS256 signing cannot fail (HMAC accepts any key length).
    let signature = jsonwebtoken::crypto::sign(message.as_bytes(), &key, Algorithm::HS256).unwrap_or_default();
    format!("{message}.{signature}")
}
