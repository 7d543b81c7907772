//! The admin HTTP endpoint, on its own thread: `/metrics` (Prometheus text),
//! `/api/amqp10/connections`, `/api/amqp10/links`, `/api/channels`, `/healthz`.
//!
//! Shards keep plain per-shard counters; a scrape asks every shard for a snapshot
//! (answered on the shard's control tick) and adds them up.

use crate::broker::address::ChannelKey;
use crate::broker::home::{Backlog, ChannelStats};
use crate::shard::metrics::{AdminRequest, Page, Scope, ShardSnapshot, OUTCOMES, PATTERNS, SCOPES};
use crate::shard::Global;
use metrics::{counter, gauge};
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};
use std::collections::BTreeMap;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;

pub mod http;
use http::{Request, Response};

/// A series no scrape wrote for this long is dropped (see [`start`]).
const SERIES_IDLE_SECONDS: u64 = 5;

/// Start the admin thread. Fails if the address cannot be bound.
pub fn start(global: Arc<Global>) -> std::io::Result<std::thread::JoinHandle<()>> {
    let listener = std::net::TcpListener::bind(global.settings.admin_addr.as_str())
        .map_err(|e| std::io::Error::other(format!("admin address {}: {e}", global.settings.admin_addr)))?;
    // Every family is written from the shards' snapshots just before it is rendered,
    // so a series not written for a while belongs to a channel or link that is gone:
    // it is dropped instead of being kept (and grown) forever.
    let recorder = PrometheusBuilder::new()
        .idle_timeout(metrics_util::MetricKindMask::ALL, Some(Duration::from_secs(SERIES_IDLE_SECONDS)))
        .build_recorder();
    let handle = recorder.handle();
    metrics::set_global_recorder(recorder).map_err(|e| std::io::Error::other(e.to_string()))?;
    // One snapshot at a time: the shards walk their channels once per request, and
    // /metrics writes the families it renders. /healthz never waits for it.
    let busy = Mutex::new(ChannelCounters::default());
    std::thread::Builder::new().name("sluice-admin".into()).spawn(move || {
        http::serve(listener, move |req| {
            if req.path == "/healthz" {
                return healthz(&global);
            }
            let mut counted = busy.lock().unwrap_or_else(|p| p.into_inner());
            route(&global, &handle, &mut counted, req)
        })
    })
}

fn healthz(global: &Global) -> Response {
    // Without the AMQP listener (CONNECTORS_AMQP10_ENABLE=false) no shard runs: the
    // admin endpoint is all there is, and it is up.
    let ready = !global.settings.enable || global.ready.load(Ordering::SeqCst) >= global.settings.shards;
    if ready && !global.shutting_down.load(Ordering::SeqCst) {
        Response::json(200, r#"{"status":"ok"}"#.to_owned())
    } else {
        Response::json(503, r#"{"status":"not ready"}"#.to_owned())
    }
}

/// Answer one request (every path but /healthz).
fn route(global: &Global, handle: &PrometheusHandle, counted: &mut ChannelCounters, req: &Request) -> Response {
    let query = req.query.as_str();
    let (status, ctype, body) = match req.path.as_str() {
        "/metrics" => {
            let snaps = collect(global, Scope::Metrics { cap: global.settings.metrics_channel_cap as usize });
            publish(&snaps);
            publish_backlog(&snaps, global.settings.metrics_channel_cap as usize, counted);
            publish_store(&snaps, global);
            for (mechanism, ok, failed) in crate::auth::stats().snapshot() {
                counter!("sluice_auth_total", "mechanism" => mechanism, "outcome" => "success").absolute(ok);
                counter!("sluice_auth_total", "mechanism" => mechanism, "outcome" => "failure").absolute(failed);
            }
            (200, "text/plain; version=0.0.4", handle.render())
        }
        "/api/amqp10/connections" => match connection_page(query) {
            Err(why) => (400, "application/json", serde_json::json!({ "error": why }).to_string()),
            Ok(page) => {
                let snaps = in_shard_order(collect(global, Scope::Connections { page }));
                if page.is_some() && snaps.len() < global.admin.len() {
                    return shard_missing();
                }
                let lens = snaps.iter().map(|s| s.connections.len()).collect();
                let conns = snaps.into_iter().flat_map(|s| s.connections).collect();
                (200, "application/json", connection_answer("connections", conns, lens, page, |c| &c.id))
            }
        },
        "/api/amqp10/links" => match connection_page(query) {
            Err(why) => (400, "application/json", serde_json::json!({ "error": why }).to_string()),
            Ok(page) => {
                let snaps = in_shard_order(collect(global, Scope::Links { page }));
                if page.is_some() && snaps.len() < global.admin.len() {
                    return shard_missing();
                }
                let lens = snaps.iter().map(|s| s.links.len()).collect();
                let links = snaps.into_iter().flat_map(|s| s.links).collect();
                (200, "application/json", connection_answer("links", links, lens, page, |l| &l.connection))
            }
        },
        "/api/channels" => match channel_page(query) {
            Err(why) => (400, "application/json", serde_json::json!({ "error": why }).to_string()),
            Ok(scope) => {
                let limit = match &scope {
                    Scope::ChannelPage { limit, .. } => Some(*limit),
                    _ => None,
                };
                let snaps = collect(global, scope);
                if limit.is_some() && snaps.len() < global.admin.len() {
                    return shard_missing();
                }
                // Each shard sent its first `limit`: the first `limit` of all are among them.
                let more_on_a_shard = limit.is_some_and(|l| snaps.iter().any(|s| s.channels.len() >= l));
                let mut all: Vec<_> = snaps
                    .into_iter()
                    .flat_map(|s| {
                        let shard = s.shard;
                        s.channels.into_iter().map(move |c| (shard, c))
                    })
                    .collect();
                let mut next = None;
                if let Some(limit) = limit {
                    all.sort_by(|a, b| a.1.key.cmp(&b.1.key));
                    if all.len() > limit || more_on_a_shard {
                        all.truncate(limit);
                        next = all.last().map(|(_, c)| format!("{}/{}", c.key.pattern.as_str(), c.key.name));
                    }
                }
                let channels: Vec<_> = all
                    .into_iter()
                    .map(|(shard, c)| {
                        serde_json::json!({
                            "pattern": c.key.pattern.as_str(),
                            "channel": &*c.key.name,
                            "shard": shard,
                            "undelivered": c.backlog.undelivered,
                            "outstanding": c.backlog.outstanding,
                            "consumers": c.backlog.consumers,
                            "published_messages": c.backlog.published,
                            "published_bytes": c.backlog.published_bytes,
                            "delivered_messages": c.backlog.delivered,
                            "oldest_unacked_age_seconds": c.backlog.oldest_unacked_ms as f64 / 1000.0,
                            "dead_lettered": c.backlog.dead_lettered,
                            "ack_deadline_expired": c.backlog.deadline_expired,
                        })
                    })
                    .collect();
                let total = channels.len();
                let body = match limit {
                    Some(_) => serde_json::json!({ "channels": channels, "total": total, "next": next }),
                    None => serde_json::json!({ "channels": channels, "total": total }),
                };
                (200, "application/json", body.to_string())
            }
        },
        _ => (404, "application/json", r#"{"error":"not found"}"#.to_owned()),
    };
    Response { status, content_type: ctype, body }
}

/// Ask every shard for a snapshot of `scope` (each answers within its 20 ms control
/// tick).
pub fn collect(global: &Global, scope: Scope) -> Vec<ShardSnapshot> {
    let mut out = Vec::new();
    if !global.settings.enable {
        // No shard runs to answer (each request would wait out its 2 s).
        return out;
    }
    for q in &global.admin {
        let (tx, rx) = std::sync::mpsc::sync_channel(1);
        if q.push(AdminRequest { reply: tx, scope: scope.clone() }).is_err() {
            continue;
        }
        if let Ok(s) = rx.recv_timeout(Duration::from_secs(2)) {
            out.push(s);
        }
    }
    out
}

/// Most channels one page of /api/channels may ask for.
const PAGE_MAX: usize = 10_000;

/// `limit=N` (1..=10000) and `after` (percent-decoded) from a query: a page when
/// `limit` is there (`after` needs it); unknown parameters are refused.
fn page_params(query: &str) -> Result<Option<(usize, Option<String>)>, String> {
    let (mut limit, mut after) = (None, None);
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        let v = percent_decode(v).ok_or_else(|| format!("{k}: bad percent-encoding"))?;
        match k {
            "limit" => match v.parse::<usize>() {
                Ok(n) if (1..=PAGE_MAX).contains(&n) => limit = Some(n),
                _ => return Err(format!("limit must be between 1 and {PAGE_MAX}")),
            },
            "after" => after = Some(v),
            other => return Err(format!("unknown parameter {other}")),
        }
    }
    match (limit, after) {
        (None, Some(_)) => Err("after needs limit".to_owned()),
        (None, None) => Ok(None),
        (Some(limit), after) => Ok(Some((limit, after))),
    }
}

/// The query of /api/channels: a page after `<pattern>/<channel>`, or every channel in
/// one answer when `limit` is absent.
fn channel_page(query: &str) -> Result<Scope, String> {
    let Some((limit, after)) = page_params(query)? else {
        return Ok(Scope::Channels);
    };
    let after = match after {
        None => None,
        Some(v) => {
            let (p, name) = v.split_once('/').ok_or("after must be <pattern>/<channel>")?;
            let p = PATTERNS.iter().find(|x| x.as_str() == p).ok_or_else(|| format!("after: unknown pattern {p}"))?;
            Some(ChannelKey::new(*p, name))
        }
    };
    Ok(Scope::ChannelPage { limit, after })
}

/// The query of /api/amqp10/connections and /links: a page after a connection's id
/// (`<shard>-<number>`, as `next` gives it), or everything when `limit` is absent.
fn connection_page(query: &str) -> Result<Option<Page>, String> {
    let Some((limit, after)) = page_params(query)? else {
        return Ok(None);
    };
    let after = match after {
        None => None,
        Some(v) => {
            let parsed = v.split_once('-').and_then(|(s, n)| Some((s.parse::<u16>().ok()?, n.parse::<u64>().ok()?)));
            Some(parsed.ok_or("after must be a connection id, <shard>-<number>")?)
        }
    };
    Ok(Some(Page { limit, after }))
}

/// A page cannot be cut from the shards that answered alone: what a silent shard holds
/// would be skipped, or the last page announced while it still holds some.
fn shard_missing() -> Response {
    Response::json(503, r#"{"error":"a shard did not answer within 2 s; ask again"}"#.to_owned())
}

/// The JSON answer of /api/amqp10/connections or /links: `items` as the shards sent them,
/// in shard order (`lens`: how many each sent), each naming its connection by `conn`
/// (a connection names itself; a link, its connection). With `page`, whole connections
/// until `limit` items or more, and `next`: the last connection's id when more may follow
/// (items were left, or a shard sent `limit` or more and may have had more).
fn connection_answer<T: serde::Serialize>(
    key: &str,
    mut items: Vec<T>,
    lens: Vec<usize>,
    page: Option<Page>,
    conn: impl Fn(&T) -> &String,
) -> String {
    let Some(p) = page else {
        return serde_json::json!({ key: items, "total": items.len() }).to_string();
    };
    let mut end = 0;
    while end < items.len() && end < p.limit {
        let c = conn(&items[end]);
        end += items[end..].iter().take_while(|i| conn(i) == c).count();
    }
    let mut next = None;
    if end < items.len() || lens.iter().any(|&n| n >= p.limit) {
        items.truncate(end);
        next = items.last().map(|i| conn(i).clone());
    }
    serde_json::json!({ key: items, "total": items.len(), "next": next }).to_string()
}

/// Shard snapshots in shard order (each lists its connections in number order).
fn in_shard_order(mut snaps: Vec<ShardSnapshot>) -> Vec<ShardSnapshot> {
    snaps.sort_by_key(|s| s.shard);
    snaps
}

/// `%XX` and `+` decoded; None when an escape is bad or the result is not UTF-8.
fn percent_decode(s: &str) -> Option<String> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'%' => {
                let hex = std::str::from_utf8(b.get(i + 1..i + 3)?).ok()?;
                out.push(u8::from_str_radix(hex, 16).ok()?);
                i += 3;
            }
            b'+' => {
                out.push(b' ');
                i += 1;
            }
            c => {
                out.push(c);
                i += 1;
            }
        }
    }
    String::from_utf8(out).ok()
}

/// Set every family from the sum of the snapshots.
fn publish(snaps: &[ShardSnapshot]) {
    let sum = |f: &dyn Fn(&ShardSnapshot) -> u64| snaps.iter().map(f).sum::<u64>();
    let gsum = |i: usize| snaps.iter().map(|s| s.gauges[i]).sum::<i64>().max(0) as f64;
    gauge!("kubemq_amqp10_connections").set(gsum(0));
    gauge!("kubemq_amqp10_sessions").set(gsum(1));
    gauge!("kubemq_amqp10_links", "role" => "sender").set(gsum(2));
    gauge!("kubemq_amqp10_links", "role" => "receiver").set(gsum(3));
    let nodes: i64 = snaps.iter().map(|s| s.dynamic_nodes).sum();
    gauge!("sluice_dynamic_nodes").set(nodes.max(0) as f64);
    for (i, p) in PATTERNS.iter().enumerate() {
        counter!("kubemq_amqp10_transfers_total", "direction" => "in", "pattern" => p.as_str())
            .absolute(sum(&|s| s.transfers_in[i]));
        counter!("kubemq_amqp10_transfers_total", "direction" => "out", "pattern" => p.as_str())
            .absolute(sum(&|s| s.transfers_out[i]));
    }
    for (i, o) in OUTCOMES.iter().enumerate() {
        counter!("kubemq_amqp10_dispositions_total", "outcome" => *o).absolute(sum(&|s| s.dispositions[i]));
    }
    counter!("kubemq_amqp10_rpc_requests_total", "pattern" => "commands").absolute(sum(&|s| s.rpc_requests[0]));
    counter!("kubemq_amqp10_rpc_requests_total", "pattern" => "queries").absolute(sum(&|s| s.rpc_requests[1]));
    for (i, sc) in SCOPES.iter().enumerate() {
        counter!("kubemq_amqp10_errors_total", "scope" => *sc).absolute(sum(&|s| s.errors[i]));
    }
    counter!("kubemq_amqp10_transfers_in_dropped_total").absolute(sum(&|s| s.transfers_in_dropped));
    counter!("kubemq_amqp10_events_dropped_no_credit_total").absolute(sum(&|s| s.events_dropped_no_credit));
    counter!("kubemq_amqp10_events_store_dropped_stalled_total").absolute(sum(&|s| s.events_store_dropped_stalled));
    counter!("kubemq_amqp10_rpc_late_responses_total").absolute(sum(&|s| s.rpc_late_responses));
    counter!("sluice_limit_refusals_total", "reason" => "queue_full").absolute(sum(&|s| s.queue_full));
    counter!("sluice_limit_refusals_total", "reason" => "channel_limit").absolute(sum(&|s| s.channel_limit));
    for (i, p) in PATTERNS.iter().enumerate() {
        gauge!("sluice_channels", "pattern" => p.as_str()).set(sum(&|s| s.channel_counts[i]) as f64);
    }
    gauge!("sluice_durable_subscriptions").set(sum(&|s| s.durable_subscriptions) as f64);
    counter!("sluice_durable_subscriptions_expired_total").absolute(sum(&|s| s.durable_expired));
    counter!("sluice_connections_evicted_in_handshake_total").absolute(sum(&|s| s.handshakes_evicted));
    for s in snaps {
        let shard = s.shard.to_string();
        gauge!("sluice_shard_connections", "shard" => shard.clone()).set(s.gauges[0].max(0) as f64);
        counter!("sluice_connections_handed_over_total", "shard" => shard).absolute(s.connections_handed_over);
    }
}

/// The five per-channel counters, in the order [`ChannelCounters`] keeps them.
fn counters_of(b: &Backlog) -> [u64; 5] {
    [b.published, b.published_bytes, b.delivered, b.dead_lettered, b.deadline_expired]
}

/// What the scrapes before this one wrote for the per-channel counter families, so
/// that each series only ever goes up. A channel's counters start again when it is
/// forgotten (idle) and made again, and which channels `*other` sums changes (one
/// forgotten, one given a series of its own or pushed out of the first `cap`, a
/// shard that did not answer in time): written as they are, the series would go
/// down, and the exporter keeps a counter at its maximum, so it would stay flat until
/// it passed it again.
///
/// A channel's series counts what the channel took in the scrapes that listed it in
/// a row; what it took while it had no series (forgotten, past the cap, its shard
/// silent) counts under `*other`, which grows by what every channel of its pattern
/// together grew less what the listed series grew. So the rates add up.
#[derive(Default)]
pub(crate) struct ChannelCounters {
    /// Channels with a series of their own.
    series: BTreeMap<ChannelKey, Series>,
    /// Per shard and pattern: its channels' counters summed, those forgotten included
    /// (only grows), as last read. Kept for a shard that did not answer a scrape.
    totals: BTreeMap<(u16, &'static str), [u64; 5]>,
    /// Per pattern: the value written for `*other`.
    other: BTreeMap<&'static str, [u64; 5]>,
    /// Scrapes so far.
    scrapes: u64,
}

/// What was written for one channel's series.
struct Series {
    /// Which making of the channel `last` was read from.
    born: u64,
    /// Its counters when last read.
    last: [u64; 5],
    /// The values written.
    written: [u64; 5],
    /// The scrape that last listed it.
    scrape: u64,
    seen: std::time::Instant,
}

/// How long a series' values are remembered after its channel was last listed: far
/// past the exporter's idle drop, so a series it still renders never starts lower.
const SERIES_REMEMBERED: Duration = Duration::from_secs(600);

fn add5(a: &mut [u64; 5], b: &[u64; 5]) {
    a.iter_mut().zip(b).for_each(|(x, y)| *x = x.saturating_add(*y));
}

fn sub5(a: &[u64; 5], b: &[u64; 5]) -> [u64; 5] {
    std::array::from_fn(|i| a[i].saturating_sub(b[i]))
}

impl ChannelCounters {
    /// Work out this scrape's values from the listed channels (with the shard that
    /// sent each) and each answering shard's totals per pattern. Returns the listed
    /// channels' values and `*other`'s per pattern.
    fn update(
        &mut self,
        listed: &[(u16, &ChannelStats)],
        totals: &BTreeMap<(u16, &'static str), [u64; 5]>,
        cap: usize,
    ) -> (Vec<[u64; 5]>, BTreeMap<&'static str, [u64; 5]>) {
        let now = std::time::Instant::now();
        self.scrapes += 1;
        let scrape = self.scrapes;
        // What the listed series take of the pattern's growth; for a shard seen for
        // the first time, what its listed channels start their own series with.
        let mut own: BTreeMap<&'static str, [u64; 5]> = Default::default();
        let mut started: BTreeMap<(u16, &'static str), [u64; 5]> = Default::default();
        let mut values = Vec::with_capacity(listed.len());
        for (shard, c) in listed {
            let pattern = c.key.pattern.as_str();
            let raw = counters_of(&c.backlog);
            let value = match self.series.get_mut(&c.key) {
                Some(s) => {
                    // Listed in the scrape before: it grew by what its counters grew
                    // (all of them when it was made again). Else its growth since was
                    // counted under `*other`, and the series goes on from its value.
                    if s.scrape + 1 == scrape {
                        let grew = if s.born == c.backlog.born { sub5(&raw, &s.last) } else { raw };
                        add5(&mut s.written, &grew);
                        add5(own.entry(pattern).or_default(), &grew);
                    }
                    (s.born, s.last, s.scrape, s.seen) = (c.backlog.born, raw, scrape, now);
                    s.written
                }
                None => {
                    add5(started.entry((*shard, pattern)).or_default(), &raw);
                    let s = Series { born: c.backlog.born, last: raw, written: raw, scrape, seen: now };
                    self.series.insert(c.key.clone(), s);
                    raw
                }
            };
            values.push(value);
        }
        let mut all: BTreeMap<&'static str, [u64; 5]> = Default::default();
        for (&(shard, pattern), total) in totals {
            let grew = match self.totals.insert((shard, pattern), *total) {
                Some(before) => sub5(total, &before),
                // First seen: what is not in a listed series is `*other`'s.
                None => sub5(total, &started.get(&(shard, pattern)).copied().unwrap_or_default()),
            };
            add5(all.entry(pattern).or_default(), &grew);
        }
        for (pattern, grew) in &all {
            let mine = own.get(pattern).copied().unwrap_or_default();
            add5(self.other.entry(pattern).or_default(), &sub5(grew, &mine));
        }
        // Remembered for a while, and at most a few times the cap (the listed ones
        // kept).
        self.series.retain(|_, s| now.duration_since(s.seen) < SERIES_REMEMBERED);
        let most = cap.saturating_mul(4).saturating_add(64);
        if self.series.len() > most {
            let mut by_age: Vec<u64> = self.series.values().filter(|s| s.scrape != scrape).map(|s| s.scrape).collect();
            by_age.sort_unstable();
            if let Some(&oldest_kept) = by_age.get(self.series.len() - most) {
                self.series.retain(|_, s| s.scrape >= oldest_kept);
            }
        }
        (values, self.other.clone())
    }
}

/// sluice's own families: backlog per channel (Pub/Sub style) and per-link credit.
/// The first `cap` channels (by name) get their own label set; the rest are summed
/// under `channel="*other"` so a million channels cannot blow up the scrape.
fn publish_backlog(snaps: &[ShardSnapshot], cap: usize, counted: &mut ChannelCounters) {
    let mut channels: Vec<(u16, &ChannelStats)> =
        snaps.iter().flat_map(|s| s.channels.iter().map(move |c| (s.shard, c))).collect();
    channels.sort_by(|a, b| a.1.key.cmp(&b.1.key));
    // Each shard sent its first `cap` channels and the sum of the rest (with its
    // forgotten channels' counters): the first `cap` of all are among those sent, and
    // the rest add up with the shards' sums.
    let mut other: BTreeMap<&'static str, Backlog> = Default::default();
    let beyond = channels.iter().skip(cap).map(|c| c.1).chain(snaps.iter().flat_map(|s| s.channel_others.iter()));
    for c in beyond {
        other.entry(c.key.pattern.as_str()).or_default().add(&c.backlog);
    }
    let mut totals: BTreeMap<(u16, &'static str), [u64; 5]> = Default::default();
    for s in snaps {
        for c in s.channels.iter().chain(&s.channel_others) {
            add5(totals.entry((s.shard, c.key.pattern.as_str())).or_default(), &counters_of(&c.backlog));
        }
    }
    let listed = &channels[..cap.min(channels.len())];
    let (values, other_values) = counted.update(listed, &totals, cap);
    for ((_, c), v) in listed.iter().zip(&values) {
        channel_families(c.key.pattern.as_str(), c.key.name.to_string(), &c.backlog, v);
    }
    // `*other` of a pattern is written once a channel of it is past the first `cap`
    // or was forgotten.
    for (pattern, b) in &other {
        let v = other_values.get(pattern).copied().unwrap_or_default();
        channel_families(pattern, "*other".to_owned(), b, &v);
    }
    let mut links: Vec<_> = snaps.iter().flat_map(|s| s.links.iter()).filter(|l| l.role == "sender").collect();
    links.sort_by(|a, b| {
        (&a.pattern, &a.channel, &a.name, &a.connection).cmp(&(&b.pattern, &b.channel, &b.name, &b.connection))
    });
    for l in links.into_iter().take(cap) {
        // Link names are the clients' choice: two connections' links of the same name
        // on one channel are told apart by their connection.
        let labels = [
            ("pattern", l.pattern.clone()),
            ("channel", label_value(&l.channel)),
            ("link", label_value(&l.name)),
            ("connection", label_value(&l.connection)),
        ];
        gauge!("sluice_link_credit", &labels).set(l.credit as f64);
        gauge!("sluice_link_unsettled", &labels).set(l.unsettled as f64);
        gauge!("sluice_link_zero_credit_seconds", &labels).set(l.zero_credit_seconds);
    }
}

/// A name a peer chose, as a label value for the exporter. Its escaping takes a
/// backslash followed by another, or by a quote, as already escaped (`a\\b` and `a\b`
/// were both written `a\\b`, two channels as one series, and `a\"b` lost its
/// backslash), so every backslash is doubled first: each name is written as it is.
fn label_value(name: &str) -> String {
    name.replace('\\', "\\\\")
}

/// One channel's (or `*other`'s) families: the gauges as `b` has them, the counters
/// as [`ChannelCounters`] worked them out.
fn channel_families(pattern: &'static str, channel: String, b: &Backlog, counters: &[u64; 5]) {
    let labels = [("pattern", pattern.to_owned()), ("channel", label_value(&channel))];
    gauge!("sluice_channel_undelivered_messages", &labels).set(b.undelivered as f64);
    gauge!("sluice_channel_outstanding_messages", &labels).set(b.outstanding as f64);
    gauge!("sluice_channel_oldest_unacked_age_seconds", &labels).set(b.oldest_unacked_ms as f64 / 1000.0);
    gauge!("sluice_channel_consumers", &labels).set(b.consumers as f64);
    let [published, published_bytes, delivered, dead_lettered, deadline_expired] = *counters;
    counter!("sluice_channel_published_messages_total", &labels).absolute(published);
    counter!("sluice_channel_published_bytes_total", &labels).absolute(published_bytes);
    counter!("sluice_channel_delivered_messages_total", &labels).absolute(delivered);
    counter!("sluice_channel_dead_lettered_total", &labels).absolute(dead_lettered);
    counter!("sluice_channel_ack_deadline_expired_total", &labels).absolute(deadline_expired);
}

/// The durable store: sizes, fsync latency (a Prometheus histogram built from the
/// shards' bucket counts), group-commit batch sizes, errors.
fn publish_store(snaps: &[ShardSnapshot], global: &Global) {
    for log in ["queues", "events"] {
        let stats: Vec<_> = snaps.iter().flat_map(|s| s.store.iter()).filter(|(n, _, on)| *n == log && *on).collect();
        let sum = |f: &dyn Fn(&crate::store::JournalStats) -> u64| stats.iter().map(|(_, s, _)| f(s)).sum::<u64>();
        let l = [("log", log)];
        gauge!("sluice_store_bytes", &l).set(sum(&|s| s.segment_bytes) as f64);
        gauge!("sluice_store_segments", &l).set(sum(&|s| s.segments) as f64);
        counter!("sluice_store_written_bytes_total", &l).absolute(sum(&|s| s.bytes_written));
        counter!("sluice_store_commits_total", &l).absolute(sum(&|s| s.commits));
        counter!("sluice_store_commit_records_total", &l).absolute(sum(&|s| s.commit_records));
        counter!("sluice_store_errors_total", &l).absolute(sum(&|s| s.errors));
        let mut cumulative = 0u64;
        for (i, bound) in crate::store::FSYNC_BUCKETS.iter().enumerate() {
            cumulative += sum(&|s| s.fsync_buckets[i]);
            let le = format!("{bound}");
            counter!("sluice_store_fsync_seconds_bucket", "log" => log, "le" => le).absolute(cumulative);
        }
        cumulative += sum(&|s| s.fsync_buckets[crate::store::FSYNC_BUCKETS.len()]);
        counter!("sluice_store_fsync_seconds_bucket", "log" => log, "le" => "+Inf").absolute(cumulative);
        counter!("sluice_store_fsync_seconds_count", &l).absolute(sum(&|s| s.fsyncs));
        gauge!("sluice_store_fsync_seconds_sum", &l).set(stats.iter().map(|(_, s, _)| s.fsync_seconds).sum::<f64>());
        if log == "events" {
            gauge!("sluice_store_sequence_marks").set(sum(&|s| s.seq_marks) as f64);
            counter!("sluice_store_sequence_marks_folded_total").absolute(sum(&|s| s.seq_marks_folded));
        }
    }
    let healthy = global.store_ok.iter().all(|ok| ok.load(std::sync::atomic::Ordering::Relaxed));
    gauge!("sluice_store_healthy").set(if healthy { 1.0 } else { 0.0 });
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Pattern;

    fn stats(name: &str, published: u64, born: u64) -> ChannelStats {
        ChannelStats {
            key: ChannelKey::new(Pattern::Queues, name),
            backlog: Backlog { published, born, ..Backlog::default() },
        }
    }

    fn totals(per_shard: &[(u16, u64)]) -> BTreeMap<(u16, &'static str), [u64; 5]> {
        per_shard.iter().map(|&(shard, published)| ((shard, "queues"), [published, 0, 0, 0, 0])).collect()
    }

    /// Channels moving in and out of their own series, forgotten and made again, and a
    /// shard that misses a scrape never take a written counter down, and every
    /// message published is counted once in rate terms.
    #[test]
    fn channel_counters_only_go_up_as_channels_change_places() {
        let mut c = ChannelCounters::default();
        let mut scrape = |listed: &[ChannelStats], t: &[(u16, u64)]| {
            let listed: Vec<(u16, &ChannelStats)> = listed.iter().map(|s| (0, s)).collect();
            let (v, o) = c.update(&listed, &totals(t), 1);
            (v.first().map(|v| v[0]), o.get("queues").map_or(0, |o| o[0]))
        };
        // a listed (10), b past the cap (5).
        assert_eq!(scrape(&[stats("a", 10, 1)], &[(0, 15)]), (Some(10), 5));
        // A new channel "0" sorts first and takes the series: a's 10 now under
        // `*other`, which grows by what was published since (2, to "0", whose series
        // starts at 2: no increase is counted at a series' first sample).
        assert_eq!(scrape(&[stats("0", 2, 3)], &[(0, 17)]), (Some(2), 7));
        // "0" forgotten; a listed again with one more, taken while it had no series:
        // counted under `*other`, a goes on from 10.
        assert_eq!(scrape(&[stats("a", 11, 1)], &[(0, 18)]), (Some(10), 8));
        assert_eq!(scrape(&[stats("a", 12, 1)], &[(0, 19)]), (Some(11), 8));
        // a forgotten and made again between two scrapes, one publish: a goes on.
        assert_eq!(scrape(&[stats("a", 1, 5)], &[(0, 20)]), (Some(12), 8));
        // The shard misses a scrape: nothing moves (before, its totals were taken as
        // gone and counted again when it answered).
        assert_eq!(scrape(&[], &[]), (None, 8));
        assert_eq!(scrape(&[stats("a", 3, 5)], &[(0, 22)]), (Some(12), 10));
        // A second shard seen for the first time: what it counted is `*other`'s.
        assert_eq!(scrape(&[stats("a", 4, 5)], &[(0, 23), (1, 100)]), (Some(13), 110));
    }

    /// A shard that does not answer within 2 s: a page of connections cannot be cut
    /// without it (503, "ask again"), and the whole list is what the others hold.
    #[test]
    fn a_page_a_silent_shard_did_not_answer_is_503_and_the_rest_is_listed() {
        let settings = crate::config::Settings { shards: 2, ..crate::config::Settings::default() };
        let loaded = crate::server::check_files(&settings).unwrap();
        let global = crate::server::global_with(settings, loaded).unwrap();
        // Shard 0 answers with one connection; shard 1 never does.
        let answering = global.admin[0].clone();
        let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let stop = done.clone();
        let shard0 = std::thread::spawn(move || {
            while !stop.load(Ordering::SeqCst) {
                match answering.pop() {
                    Some(req) => {
                        let conn = crate::shard::metrics::ConnectionInfo { id: "0-1".into(), ..Default::default() };
                        let _ =
                            req.reply.send(ShardSnapshot { shard: 0, connections: vec![conn], ..Default::default() });
                    }
                    None => std::thread::sleep(Duration::from_millis(1)),
                }
            }
        });
        let handle = PrometheusBuilder::new().build_recorder().handle();
        let mut counted = ChannelCounters::default();
        let get = |query: &str, counted: &mut ChannelCounters| {
            let req = Request { head_only: false, path: "/api/amqp10/connections".into(), query: query.into() };
            route(&global, &handle, counted, &req)
        };
        let page = get("limit=10", &mut counted);
        assert_eq!(page.status, 503, "{}", page.body);
        assert!(page.body.contains("did not answer"), "{}", page.body);
        let all = get("", &mut counted);
        assert_eq!(all.status, 200, "{}", all.body);
        let v: serde_json::Value = serde_json::from_str(&all.body).unwrap();
        let ids: Vec<&str> = v["connections"].as_array().unwrap().iter().map(|c| c["id"].as_str().unwrap()).collect();
        assert_eq!(ids, vec!["0-1"]);
        done.store(true, Ordering::SeqCst);
        shard0.join().unwrap();
    }

    /// The remembered series are bounded by a few times the cap.
    #[test]
    fn remembered_series_are_bounded() {
        let mut c = ChannelCounters::default();
        for i in 0..1000u64 {
            let s = stats(&format!("ch-{i:04}"), i, i + 1);
            c.update(&[(0, &s)], &totals(&[(0, i * 10)]), 1);
        }
        assert!(c.series.len() <= 4 + 64, "{}", c.series.len());
        assert!(c.series.contains_key(&ChannelKey::new(Pattern::Queues, "ch-0999")));
    }
}
