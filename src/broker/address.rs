//! Address resolution: `[/]<pattern>/<channel>`, `responses/<RequestID>`, bare
//! addresses with the JMS capability hint, dynamic nodes and the anonymous terminus.

use crate::config::Pattern;
use std::fmt;
use std::sync::Arc;

/// A pattern and channel: the unit that has a home shard.
#[derive(Debug, Clone, Eq)]
pub struct ChannelKey {
    /// The messaging pattern.
    pub pattern: Pattern,
    /// The channel name (validated).
    pub name: Arc<str>,
    /// FNV-1a of `<pattern>/<name>`, computed once: routing reads it per message.
    fnv: u32,
}

impl PartialEq for ChannelKey {
    /// Keys cloned from one another share the name: compare pointers before bytes.
    fn eq(&self, other: &Self) -> bool {
        self.pattern == other.pattern && (Arc::ptr_eq(&self.name, &other.name) || self.name == other.name)
    }
}

impl PartialOrd for ChannelKey {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for ChannelKey {
    /// By pattern, then name (consistent with `eq`): the order of /metrics label sets
    /// and of /api/channels pages.
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        (self.pattern, &*self.name).cmp(&(other.pattern, &*other.name))
    }
}

impl std::hash::Hash for ChannelKey {
    /// Consistent with `eq`: the pattern and the name's bytes.
    fn hash<H: std::hash::Hasher>(&self, h: &mut H) {
        self.pattern.hash(h);
        self.name.hash(h);
    }
}

impl ChannelKey {
    /// The key for a pattern and channel name.
    pub fn new(pattern: Pattern, name: &str) -> Self {
        let mut h = fnv1a(0x811c_9dc5, pattern.as_str().as_bytes());
        h = fnv1a(h, b"/");
        h = fnv1a(h, name.as_bytes());
        ChannelKey { pattern, name: Arc::from(name), fnv: h }
    }

    /// The shard that owns this channel: FNV-1a of pattern and name.
    #[inline]
    pub fn home(&self, shards: usize) -> usize {
        self.fnv as usize % shards.max(1)
    }
}

impl fmt::Display for ChannelKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.pattern.as_str(), self.name)
    }
}

/// FNV-1a 64-bit offset basis (the start of [`fnv1a64`]).
pub const FNV64_BASIS: u64 = 0xcbf2_9ce4_8422_2325;

/// FNV-1a 64-bit, continuing from `h`.
pub fn fnv1a64(mut h: u64, bytes: &[u8]) -> u64 {
    for b in bytes {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

/// FNV-1a 32-bit, continuing from `h`.
pub fn fnv1a(mut h: u32, bytes: &[u8]) -> u32 {
    for b in bytes {
        h ^= *b as u32;
        h = h.wrapping_mul(0x0100_0193);
    }
    h
}

/// What an address names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Node {
    /// A pattern channel.
    Channel(ChannelKey),
    /// `responses/<RequestID>` (write-only).
    Responses(String),
    /// A dynamic node `_amqp10.tmp.<shard>-<conn>.<uuid>` (possibly another connection's).
    Dynamic(String),
}

/// Prefix of dynamic node names.
pub const DYNAMIC_PREFIX: &str = "_amqp10.tmp.";

/// A dynamic node's name: `_amqp10.tmp.<shard>-<conn>.<uuid>`, naming the connection
/// that owns it, so that another connection's messages find it ([`dynamic_node_owner`]).
pub fn dynamic_node_name(shard: u16, conn: u64, uuid: &str) -> String {
    format!("{DYNAMIC_PREFIX}{shard}-{conn}.{uuid}")
}

/// The shard and connection a dynamic node's name says own it; None for a name not of
/// that form (decimal digits only: no sign, no overflow).
pub fn dynamic_node_owner(name: &str) -> Option<(u16, u64)> {
    let rest = name.strip_prefix(DYNAMIC_PREFIX)?;
    let (owner, _) = rest.split_once('.')?;
    let (shard, conn) = owner.split_once('-')?;
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    if !digits(shard) || !digits(conn) {
        return None;
    }
    Some((shard.parse().ok()?, conn.parse().ok()?))
}

/// The node path of an address as a client wrote it, without its leading `/`. An
/// address written as a URL, `amqp://` or `amqps://` (any case), then a host (and port),
/// is its path: uAMQP (and the Azure SDKs built on it) put the whole URL it was given in
/// its termini. The host is not checked (the connection has reached this broker already)
/// but is held to 255 bytes, as a channel name is (the address is kept with the link);
/// a URL without a path, or with a query, a fragment or an escape in it (`?`, `#`, `%`:
/// nothing here would decode them), names no node. The error is the `amqp:not-found`
/// description.
pub fn node_path(address: &str) -> Result<&str, String> {
    let url = ["amqp://", "amqps://"]
        .into_iter()
        .find(|p| address.get(..p.len()).is_some_and(|h| h.eq_ignore_ascii_case(p)))
        .map(|p| &address[p.len()..]);
    let a = match url {
        None => address,
        Some(rest) => {
            // '/' is ASCII: a character boundary.
            let (host, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
            if host.len() > NAME_MAX {
                return Err(format!("address URL host exceeds {NAME_MAX} chars"));
            }
            if path.len() <= 1 {
                return Err("address URL has no path".into());
            }
            if path.contains(['?', '#', '%']) {
                return Err("address URL has a query, a fragment or an escape".into());
            }
            path
        }
    };
    Ok(a.strip_prefix('/').unwrap_or(a))
}

/// Resolve an address. `hint` is the terminus capabilities' JMS hint (`queue` or
/// `topic`), `default` the configured default pattern for bare addresses.
/// The error is the `amqp:not-found` description.
pub fn resolve(address: &str, hint: Option<&str>, default: Pattern) -> Result<Node, String> {
    let a = node_path(address)?;
    // Longest prefix first: "events-store/" must win over "events/".
    const PREFIXES: [(&str, Option<Pattern>); 6] = [
        ("events-store/", Some(Pattern::EventsStore)),
        ("queues/", Some(Pattern::Queues)),
        ("events/", Some(Pattern::Events)),
        ("commands/", Some(Pattern::Commands)),
        ("queries/", Some(Pattern::Queries)),
        ("responses/", None),
    ];
    for (prefix, pattern) in PREFIXES {
        if let Some(rest) = a.strip_prefix(prefix) {
            return match pattern {
                Some(p) => {
                    validate_channel(rest)?;
                    Ok(Node::Channel(ChannelKey::new(p, rest)))
                }
                None if rest.is_empty() => Err("empty request id".into()),
                // Ours are "<shard>.<conn>.<seq>.<nonce>", far shorter; an attach keeps it.
                None if rest.len() > NAME_MAX => Err(format!("request id exceeds {NAME_MAX} chars")),
                None => Ok(Node::Responses(rest.to_owned())),
            };
        }
    }
    if a.starts_with(DYNAMIC_PREFIX) {
        if a.len() > DYNAMIC_PREFIX.len() + NAME_MAX {
            return Err(format!("dynamic node name exceeds {NAME_MAX} chars"));
        }
        return Ok(Node::Dynamic(a.to_owned()));
    }
    if a.contains('/') {
        return Err("unknown address prefix".into());
    }
    let pattern = match hint {
        Some("queue") => Pattern::Queues,
        Some("topic") => Pattern::Events,
        _ => default,
    };
    validate_channel(a)?;
    Ok(Node::Channel(ChannelKey::new(pattern, a)))
}

/// The longest channel name, in bytes (also the longest consumer group name).
pub const NAME_MAX: usize = 255;

/// Channel rules: 1..=255 bytes, no whitespace, `*`, `>`, `;`, `:`, no trailing `.`.
pub fn validate_channel(ch: &str) -> Result<(), String> {
    if ch.is_empty() {
        return Err("empty channel".into());
    }
    if ch.len() > NAME_MAX {
        return Err(format!("channel exceeds {NAME_MAX} chars"));
    }
    if ch.chars().any(char::is_whitespace) {
        return Err("channel contains whitespace".into());
    }
    if ch.contains(['*', '>']) {
        return Err("channel contains wildcard".into());
    }
    if ch.contains([';', ':']) {
        return Err("channel contains ';' or ':'".into());
    }
    if ch.ends_with('.') {
        return Err("channel has trailing '.'".into());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_dynamic_node_name_names_its_owner() {
        let n = dynamic_node_name(1, 42, "0a1b2c3d-0000-1111-2222-333344445555");
        assert_eq!(n, "_amqp10.tmp.1-42.0a1b2c3d-0000-1111-2222-333344445555");
        assert_eq!(dynamic_node_owner(&n), Some((1, 42)));
        assert_eq!(dynamic_node_owner("_amqp10.tmp.0-0.x"), Some((0, 0)));
        for bad in [
            "_amqp10.tmp.1-42",       // no uuid part
            "_amqp10.tmp.142.uuid",   // no shard separator
            "_amqp10.tmp.-42.uuid",   // no shard
            "_amqp10.tmp.1-.uuid",    // no connection
            "_amqp10.tmp.+1-42.uuid", // a sign
            "_amqp10.tmp.1-+42.uuid",
            "_amqp10.tmp.65536-1.uuid",                // shard over u16
            "_amqp10.tmp.1-18446744073709551616.uuid", // connection over u64
            "_amqp10.tmp.1 -42.uuid",
            "queues/_amqp10.tmp.1-42.uuid",
            "_amqp10.tmp.",
        ] {
            assert_eq!(dynamic_node_owner(bad), None, "{bad}");
        }
    }

    #[test]
    fn prefixes_and_leading_slash() {
        let q = resolve("/queues/a", None, Pattern::Events).unwrap();
        assert_eq!(q, Node::Channel(ChannelKey::new(Pattern::Queues, "a")));
        assert_eq!(
            resolve("events-store/x", None, Pattern::Queues).unwrap(),
            Node::Channel(ChannelKey::new(Pattern::EventsStore, "x"))
        );
        assert_eq!(resolve("responses/abc", None, Pattern::Queues).unwrap(), Node::Responses("abc".into()));
        assert_eq!(resolve("foo/bar", None, Pattern::Queues), Err("unknown address prefix".into()));
    }

    #[test]
    fn an_address_written_as_a_url_is_its_path() {
        let q = Node::Channel(ChannelKey::new(Pattern::Queues, "a"));
        for url in ["amqps://localhost:5671/queues/a", "amqp://127.0.0.1/queues/a", "AMQPS://h/queues/a"] {
            assert_eq!(resolve(url, None, Pattern::Events), Ok(q.clone()), "{url}");
        }
        assert_eq!(
            resolve("amqps://h:1/examples", Some("topic"), Pattern::Queues),
            Ok(Node::Channel(ChannelKey::new(Pattern::Events, "examples")))
        );
        assert_eq!(
            resolve("amqp://h/_amqp10.tmp.0-1.u", None, Pattern::Queues),
            Ok(Node::Dynamic("_amqp10.tmp.0-1.u".into()))
        );
        assert_eq!(resolve("amqps://h/responses/r1", None, Pattern::Queues), Ok(Node::Responses("r1".into())));
        // The path is held to the same rules.
        assert_eq!(resolve("amqps://h/queues/a b", None, Pattern::Queues), Err("channel contains whitespace".into()));
        assert_eq!(resolve("amqps://h/foo/bar", None, Pattern::Queues), Err("unknown address prefix".into()));
        // What names no node.
        for (url, why) in [
            ("amqps://h:5671", "address URL has no path"),
            ("amqps://h/", "address URL has no path"),
            ("amqp://", "address URL has no path"),
            ("amqps://h/queues/a?x=1", "address URL has a query, a fragment or an escape"),
            ("amqps://h/queues/a#f", "address URL has a query, a fragment or an escape"),
            ("amqps://h/queues/a%2Fb", "address URL has a query, a fragment or an escape"),
        ] {
            assert_eq!(resolve(url, None, Pattern::Queues), Err(why.into()), "{url}");
        }
        let long = format!("amqps://{}/queues/a", "h".repeat(256));
        assert_eq!(resolve(&long, None, Pattern::Queues), Err("address URL host exceeds 255 chars".into()));
        assert_eq!(resolve(&format!("amqps://{}/queues/a", "h".repeat(255)), None, Pattern::Queues), Ok(q));
        // Not URLs here: other schemes (rhea's example `topic://...` is refused by the
        // ':'), and input cut inside a character where a scheme would end.
        assert_eq!(resolve("topic://a", None, Pattern::Queues), Err("unknown address prefix".into()));
        assert_eq!(resolve("amqpx://h/queues/a", None, Pattern::Queues), Err("unknown address prefix".into()));
        assert_eq!(resolve("amqp:/\u{e9}", None, Pattern::Queues), Err("unknown address prefix".into()));
        assert_eq!(node_path("/queues/a"), Ok("queues/a"));
        assert_eq!(node_path("amqps://h/queues/a"), Ok("queues/a"));
    }

    #[test]
    fn bare_addresses_use_the_hint_then_the_default() {
        let k = |p| Node::Channel(ChannelKey::new(p, "examples"));
        assert_eq!(resolve("examples", Some("topic"), Pattern::Queues).unwrap(), k(Pattern::Events));
        assert_eq!(resolve("examples", Some("queue"), Pattern::Events).unwrap(), k(Pattern::Queues));
        assert_eq!(resolve("examples", None, Pattern::Commands).unwrap(), k(Pattern::Commands));
    }

    #[test]
    fn channel_rules() {
        for (ch, why) in [
            ("", "empty channel"),
            ("a b", "channel contains whitespace"),
            ("a*", "channel contains wildcard"),
            ("a>", "channel contains wildcard"),
            ("a;b", "channel contains ';' or ':'"),
            ("a:b", "channel contains ';' or ':'"),
            ("a.", "channel has trailing '.'"),
        ] {
            assert_eq!(resolve(&format!("queues/{ch}"), None, Pattern::Queues), Err(why.into()), "{ch}");
        }
        assert!(validate_channel(&"x".repeat(255)).is_ok());
        assert_eq!(validate_channel(&"x".repeat(256)), Err("channel exceeds 255 chars".into()));
    }

    #[test]
    fn home_is_stable_and_spread() {
        let a = ChannelKey::new(Pattern::Queues, "a");
        assert_eq!(a.home(4), a.home(4));
        let homes: std::collections::HashSet<usize> =
            (0..64).map(|i| ChannelKey::new(Pattern::Events, &format!("c{i}")).home(4)).collect();
        assert_eq!(homes.len(), 4);
    }
}
