//! The per-connection cache of per-message Write checks on the anonymous terminus.

use std::fmt::Write as _;

use hashlink::LruCache;

use super::{Action, Authenticator};

/// Entries kept per connection.
pub const AUTHZ_CACHE_CAPACITY: usize = 1024;
/// How long a decision (allow or deny) is reused, in milliseconds.
pub const AUTHZ_CACHE_TTL_MS: u64 = 60_000;

/// LRU of Write decisions keyed by (client_id, resource, channel): 1024 entries, 60 s TTL.
/// Both allows and denies are cached; a hit costs no allocation.
pub struct AuthzCache {
    entries: LruCache<String, Entry>,
    scratch: String,
    hits: u64,
    misses: u64,
}

#[derive(Clone, Copy)]
struct Entry {
    allowed: bool,
    at_ms: u64,
}

impl Default for AuthzCache {
    fn default() -> Self {
        Self::new()
    }
}

impl std::fmt::Debug for AuthzCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AuthzCache")
            .field("len", &self.entries.len())
            .field("hits", &self.hits)
            .field("misses", &self.misses)
            .finish()
    }
}

impl AuthzCache {
    pub fn new() -> Self {
        AuthzCache { entries: LruCache::new(AUTHZ_CACHE_CAPACITY), scratch: String::new(), hits: 0, misses: 0 }
    }

    /// Whether `client_id` may write to `resource`/`channel`, from the cache when a decision
    /// younger than 60 s is there, else from `auth` (and then cached). Always true, uncached,
    /// when `auth` has no authorization policy.
    pub fn check(&mut self, auth: &Authenticator, client_id: &str, resource: &str, channel: &str, now_ms: u64) -> bool {
        if !auth.authorization_enabled() {
            return true;
        }
        write_key(&mut self.scratch, client_id, resource, channel);
        if let Some(e) = self.entries.get(self.scratch.as_str()) {
            // A clock that went backwards keeps the entry (age 0) rather than thrashing.
            if now_ms.saturating_sub(e.at_ms) < AUTHZ_CACHE_TTL_MS {
                self.hits += 1;
                return e.allowed;
            }
        }
        self.misses += 1;
        let allowed = auth.authorize(client_id, resource, channel, Action::Write);
        self.entries.insert(self.scratch.clone(), Entry { allowed, at_ms: now_ms });
        allowed
    }

    /// Entries held (at most [`AUTHZ_CACHE_CAPACITY`]).
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Checks answered from the cache.
    pub fn hits(&self) -> u64 {
        self.hits
    }

    /// Checks that asked the policy.
    pub fn misses(&self) -> u64 {
        self.misses
    }

    /// Drops every decision (e.g. after a policy reload).
    pub fn clear(&mut self) {
        self.entries.clear();
    }

    #[cfg(test)]
    pub(crate) fn contains(&self, client_id: &str, resource: &str, channel: &str) -> bool {
        let mut key = String::new();
        write_key(&mut key, client_id, resource, channel);
        self.entries.contains_key(key.as_str())
    }
}

/// An unambiguous key: each part is length-prefixed, so no separator can be forged.
fn write_key(buf: &mut String, client_id: &str, resource: &str, channel: &str) {
    buf.clear();
    for part in [client_id, resource, channel] {
        let _ = write!(buf, "{}:", part.len());
        buf.push_str(part);
    }
}
