//! Per-shard probes: plain `Cell` counters on the hot path, copied into a
//! [`ShardSnapshot`] when the admin thread asks (at scrape time).

use super::Shard;
use crate::broker::address::ChannelKey;
use crate::broker::home::ChannelStats;
use crate::config::Pattern;
use std::cell::Cell;
use std::collections::BTreeMap;

/// Pattern labels in metric order.
pub const PATTERNS: [Pattern; 5] =
    [Pattern::Queues, Pattern::Events, Pattern::EventsStore, Pattern::Commands, Pattern::Queries];
/// Disposition outcome labels.
pub const OUTCOMES: [&str; 4] = ["accepted", "released", "modified", "rejected"];
/// Error scope labels.
pub const SCOPES: [&str; 3] = ["conn", "session", "link"];

/// Index of a pattern in [`PATTERNS`].
pub fn pattern_index(p: Pattern) -> usize {
    PATTERNS.iter().position(|x| *x == p).unwrap_or(0)
}

/// Counters of one shard.
#[derive(Debug, Default)]
pub struct ShardCounters {
    /// Open connections.
    pub connections: Cell<i64>,
    /// Open sessions.
    pub sessions: Cell<i64>,
    /// Attached links, server role sender.
    pub links_sender: Cell<i64>,
    /// Attached links, server role receiver.
    pub links_receiver: Cell<i64>,
    /// transfers_total{direction="in"} by pattern.
    pub transfers_in: [Cell<u64>; 5],
    /// transfers_total{direction="out"} by pattern.
    pub transfers_out: [Cell<u64>; 5],
    /// dispositions_total by outcome.
    pub dispositions: [Cell<u64>; 4],
    /// rpc_requests_total{commands, queries}.
    pub rpc_requests: [Cell<u64>; 2],
    /// errors_total by scope.
    pub errors: [Cell<u64>; 3],
    /// transfers_in_dropped_total.
    pub transfers_in_dropped: Cell<u64>,
    /// events_store_dropped_stalled_total.
    pub events_store_dropped_stalled: Cell<u64>,
    /// Events dropped by connections (part of events_dropped_no_credit_total): with a
    /// link detached because its connection held too much behind shut session
    /// windows, or met on their way by a credit the subscriber lowered.
    pub events_dropped_held: Cell<u64>,
    /// rpc_late_responses_total.
    pub rpc_late_responses: Cell<u64>,
    /// Connections this shard accepted and handed to a shard with fewer.
    pub connections_handed_over: Cell<u64>,
    /// Connections dropped in their handshake for a new one at MaxConnections.
    pub handshakes_evicted: Cell<u64>,
}

/// Add `n` to a counter cell.
#[inline]
pub fn add(c: &Cell<u64>, n: u64) {
    c.set(c.get().wrapping_add(n));
}

/// Add `n` (possibly negative) to a gauge cell.
#[inline]
pub fn gauge(c: &Cell<i64>, n: i64) {
    c.set(c.get() + n);
}

/// Connection details for `GET /api/amqp10/connections`.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct ConnectionInfo {
    /// `<shard>-<number>`: names the connection while it lasts (sluice's own field; the
    /// `connection` label of the per-link series on /metrics).
    pub id: String,
    /// Client identity.
    pub client_id: String,
    /// container-id.
    pub container_id: String,
    /// OPEN properties `product`.
    pub product: String,
    /// OPEN properties `version`.
    pub version: String,
    /// Live sessions.
    pub sessions: i64,
    /// Live links.
    pub links: i64,
    /// Dynamic nodes the connection holds (sluice's own field).
    pub dynamic_nodes: i64,
    /// RFC 3339.
    pub connected_at: String,
    /// Peer IP.
    pub source_ip: String,
    /// plain, anonymous, external or none.
    pub sasl: String,
    /// TLS-terminated.
    pub tls: bool,
    /// The shard (core) that serves it.
    pub shard: u16,
}

/// Link details for `GET /api/amqp10/links`.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct LinkInfo {
    /// Owning connection's client id.
    pub client_id: String,
    /// Owning connection's `id` (sluice's own field).
    pub connection: String,
    /// Link name.
    pub name: String,
    /// sender or receiver (server perspective).
    pub role: String,
    /// The address as the client wrote it (a dynamic node: its name).
    pub address: String,
    /// Pattern.
    pub pattern: String,
    /// Channel.
    pub channel: String,
    /// Current credit (server view).
    pub credit: i64,
    /// Unsettled deliveries.
    pub unsettled: i64,
    /// Durable subscription link.
    pub durable: bool,
    /// Dynamic-node link.
    pub dynamic: bool,
    /// Consume links: seconds spent with zero credit so far (sluice's own field).
    pub zero_credit_seconds: f64,
}

/// What the drivers of a shard publish about their connections and links.
#[derive(Debug, Default)]
pub struct Registry {
    /// Per connection id.
    pub connections: BTreeMap<u64, ConnectionInfo>,
    /// Per connection id: its links.
    pub links: BTreeMap<u64, Vec<LinkInfo>>,
}

/// A copy of one shard's numbers.
#[derive(Debug, Clone, Default)]
pub struct ShardSnapshot {
    /// The shard.
    pub shard: u16,
    /// Connections it accepted and handed to a shard with fewer.
    pub connections_handed_over: u64,
    /// Gauges: connections, sessions, links sender, links receiver.
    pub gauges: [i64; 4],
    /// transfers in by pattern.
    pub transfers_in: [u64; 5],
    /// transfers out by pattern.
    pub transfers_out: [u64; 5],
    /// dispositions by outcome.
    pub dispositions: [u64; 4],
    /// rpc requests.
    pub rpc_requests: [u64; 2],
    /// errors by scope.
    pub errors: [u64; 3],
    /// transfers_in_dropped.
    pub transfers_in_dropped: u64,
    /// events_dropped_no_credit.
    pub events_dropped_no_credit: u64,
    /// events_store_dropped_stalled.
    pub events_store_dropped_stalled: u64,
    /// rpc_late_responses.
    pub rpc_late_responses: u64,
    /// Publishes refused because their queue was full.
    pub queue_full: u64,
    /// Publishes and attaches refused because the shard kept its maximum of channels.
    pub channel_limit: u64,
    /// Channels kept, by pattern (order of [`PATTERNS`]).
    pub channel_counts: [u64; 5],
    /// Durable events-store subscriptions kept, attached or not.
    pub durable_subscriptions: u64,
    /// Durable subscriptions deleted after the expiry period unattached.
    pub durable_expired: u64,
    /// Connections dropped in their handshake for a new one at MaxConnections.
    pub handshakes_evicted: u64,
    /// Connections.
    pub connections: Vec<ConnectionInfo>,
    /// Links.
    pub links: Vec<LinkInfo>,
    /// Channels homed on the shard (for /metrics: the first `cap` by pattern and name).
    pub channels: Vec<ChannelStats>,
    /// For /metrics: the shard's other channels summed per pattern (`*other`).
    pub channel_others: Vec<ChannelStats>,
    /// Dynamic nodes held by the shard's connections.
    pub dynamic_nodes: i64,
    /// Store logs: (log name, counters, enabled).
    pub store: Vec<(&'static str, crate::store::JournalStats, bool)>,
}

/// A request from the admin thread, answered on the shard's control tick.
#[derive(Debug)]
pub struct AdminRequest {
    /// Where to send the snapshot.
    pub reply: std::sync::mpsc::SyncSender<ShardSnapshot>,
    /// What the snapshot lists.
    pub scope: Scope,
}

/// What a snapshot lists besides the shard's counters.
#[derive(Debug, Clone)]
pub enum Scope {
    /// Every channel (/api/channels in one answer); no connections or links.
    Channels,
    /// /api/amqp10/connections: the connections (every one, or a page); nothing else.
    Connections {
        /// A page: the first `limit` connections after `after`.
        page: Option<Page>,
    },
    /// /api/amqp10/links: the links, each connection's together, in connection order
    /// (every one, or a page); nothing else.
    Links {
        /// A page: the links of the connections after `after`, whole connections, until
        /// there are `limit` or more.
        page: Option<Page>,
    },
    /// For /metrics: the first `cap` channels by key with the rest summed per pattern,
    /// and the first `cap` sender links by (pattern, channel, name); no connections.
    Metrics {
        /// Channels and sender links with their own label sets.
        cap: usize,
    },
    /// A page of /api/channels: the first `limit` channels by key after `after`;
    /// nothing else.
    ChannelPage {
        /// At most this many channels.
        limit: usize,
        /// Where the last page ended.
        after: Option<ChannelKey>,
    },
}

/// A page of connections or of their links, in (shard, connection number) order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Page {
    /// How many (connections, or links at least).
    pub limit: usize,
    /// The last connection of the previous page: its shard and number.
    pub after: Option<(u16, u64)>,
}

impl Page {
    /// The entries of `map` (keyed by connection number on `shard`) after `self.after`.
    fn of<'m, V>(&self, map: &'m BTreeMap<u64, V>, shard: u16) -> std::collections::btree_map::Range<'m, u64, V> {
        use std::ops::Bound::{Excluded, Included, Unbounded};
        let none: (std::ops::Bound<u64>, std::ops::Bound<u64>) = (Included(0), Excluded(0));
        match self.after {
            Some((s, n)) if s == shard => map.range((Excluded(n), Unbounded)),
            Some((s, _)) if s > shard => map.range(none),
            _ => map.range(..),
        }
    }
}

fn copy<const N: usize>(c: &[Cell<u64>; N]) -> [u64; N] {
    std::array::from_fn(|i| c[i].get())
}

/// Copy a shard's numbers, and what `scope` lists.
pub fn snapshot(shard: &Shard, scope: &Scope) -> ShardSnapshot {
    let c = &shard.counters;
    let home = shard.home.borrow();
    let reg = shard.registry.borrow();
    let dynamic_nodes = reg.connections.values().map(|c| c.dynamic_nodes).sum();
    let (connections, links, (channels, channel_others)) = match scope {
        Scope::Channels => (Vec::new(), Vec::new(), (home.channel_stats(), Vec::new())),
        Scope::Connections { page } => {
            let conns = match page {
                None => reg.connections.values().cloned().collect(),
                Some(p) => p.of(&reg.connections, shard.id).take(p.limit).map(|(_, c)| c.clone()).collect(),
            };
            (conns, Vec::new(), (Vec::new(), Vec::new()))
        }
        Scope::Links { page } => {
            let links = match page {
                None => reg.links.values().flatten().cloned().collect(),
                Some(p) => {
                    let mut out: Vec<LinkInfo> = Vec::new();
                    for (_, of_conn) in p.of(&reg.links, shard.id) {
                        if out.len() >= p.limit {
                            break;
                        }
                        out.extend(of_conn.iter().cloned());
                    }
                    out
                }
            };
            (Vec::new(), links, (Vec::new(), Vec::new()))
        }
        Scope::Metrics { cap } => {
            // The shard's first `cap` sender links by (pattern, channel, name): the
            // first `cap` of all shards are among them.
            let mut senders: Vec<&LinkInfo> = reg.links.values().flatten().filter(|l| l.role == "sender").collect();
            if senders.len() > *cap {
                if let Some(last) = cap.checked_sub(1) {
                    senders.select_nth_unstable_by_key(last, |l| (&l.pattern, &l.channel, &l.name, &l.connection));
                }
                senders.truncate(*cap);
            }
            (Vec::new(), senders.into_iter().cloned().collect(), home.channel_stats_capped(*cap))
        }
        Scope::ChannelPage { limit, after } => {
            (Vec::new(), Vec::new(), (home.first_channels(*limit, after.as_ref(), |_, _| {}), Vec::new()))
        }
    };
    ShardSnapshot {
        shard: shard.id,
        connections_handed_over: c.connections_handed_over.get(),
        gauges: [c.connections.get(), c.sessions.get(), c.links_sender.get(), c.links_receiver.get()],
        transfers_in: copy(&c.transfers_in),
        transfers_out: copy(&c.transfers_out),
        dispositions: copy(&c.dispositions),
        rpc_requests: copy(&c.rpc_requests),
        errors: copy(&c.errors),
        transfers_in_dropped: c.transfers_in_dropped.get() + home.stats.transfers_in_dropped,
        events_dropped_no_credit: home.stats.events_dropped_no_credit + c.events_dropped_held.get(),
        events_store_dropped_stalled: c.events_store_dropped_stalled.get(),
        rpc_late_responses: c.rpc_late_responses.get(),
        queue_full: home.stats.queue_full,
        channel_limit: home.stats.channel_limit,
        channel_counts: home.channel_counts(),
        durable_subscriptions: home.durable_count() as u64,
        durable_expired: home.stats.durable_expired,
        handshakes_evicted: c.handshakes_evicted.get(),
        connections,
        links,
        channels,
        channel_others,
        dynamic_nodes,
        store: shard
            .journals
            .iter()
            .map(|j| {
                let j = j.borrow();
                (j.kind().dir(), j.stats.clone(), j.is_enabled())
            })
            .collect(),
    }
}
