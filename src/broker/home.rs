//! The channels homed on one shard: queues, events, events-store and RPC. Owned by
//! that shard alone (plain state, no locks); driven by [`ShardMsg`]s and answering
//! with more of them, which the shard router delivers.

use super::address::{self, ChannelKey};
use super::directory::EventsDirectory;
use super::message::SelectorView;
use super::selector::Selector;
use super::{Msg, Outcome, PublishRefusal, ShardMsg, StartPos, StoreRing, SubRef, SubSpec, EVENTS_BATCH};
use crate::config::Pattern;
use crate::store::recovery::RecoveredShard;
use crate::store::Journal;
use crossbeam_queue::ArrayQueue;
use sluice_proto::codec::Value;
use sluice_proto::trail::Trail;
use std::cell::{Cell, RefCell};
use std::collections::VecDeque;

/// Maps on the per-message path: foldhash (fast, seeded per map), not SipHash.
type HashMap<K, V> = std::collections::HashMap<K, V, foldhash::fast::RandomState>;
type HashSet<K> = std::collections::HashSet<K, foldhash::fast::RandomState>;

use std::rc::Rc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// What a queue's dead-letter queue adds to its name: `queues/<channel>.dlq`.
const DLQ_SUFFIX: &str = ".dlq";

/// Requests waiting for a responder, per RPC channel, at most.
const RPC_WAITING_MAX: usize = 10_000;
/// Payload bytes of the requests waiting for a responder, per RPC channel, at most.
const RPC_WAITING_MAX_BYTES: u64 = 256 << 20;
/// A channel that holds nothing, has nobody attached and saw no publish for this long
/// is forgotten (its per-channel counters start again from 0 if it comes back).
const CHANNEL_IDLE_MS: u64 = 5_000;
/// How often the home looks for such channels.
const SWEEP_MS: u64 = 1_000;
/// A durable attach that finds its identity still held waits this long for the
/// holder to let go (a client that closes its connection and reconnects at once
/// races its own teardown on another shard) before it is refused `not-allowed`.
const DURABLE_TAKEOVER_MS: u64 = 1_000;
/// Bound on attaches waiting for a durable identity per channel.
const DURABLE_PARKED_MAX: usize = 1_024;
/// Durable subscriptions are looked over for expiry every tenth of the expiry
/// period, within these bounds (so an expiry is at most a tenth late, and the walk
/// over every cursor runs once an hour at the default of 31 days).
const DURABLE_SCAN_MIN_MS: u64 = 1_000;
const DURABLE_SCAN_MAX_MS: u64 = 3_600_000;

/// Counters kept by the home (read when metrics are scraped).
#[derive(Debug, Default, Clone)]
pub struct HomeStats {
    /// Events dropped because the subscriber had no credit.
    pub events_dropped_no_credit: u64,
    /// Inbound messages dropped (RPC requests nobody could take in time, pre-settled
    /// publishes refused by a limit).
    pub transfers_in_dropped: u64,
    /// Publishes refused because their queue was full.
    pub queue_full: u64,
    /// Publishes and attaches refused because the shard kept `max_channels` channels.
    pub channel_limit: u64,
    /// Durable subscriptions deleted because nobody attached them for the expiry period.
    pub durable_expired: u64,
    /// The counters of the channels forgotten by the sweep, per pattern: kept so that
    /// `*other` on /metrics, which counts them, never goes down.
    pub forgotten: Vec<(Pattern, Backlog)>,
}

impl HomeStats {
    fn forget_channel(&mut self, pattern: Pattern, c: &Counters) {
        add_to(&mut self.forgotten, pattern, &Backlog { born: 0, ..c.backlog() });
    }
}

/// Add `b` to `pattern`'s entry of a short per-pattern list.
fn add_to(list: &mut Vec<(Pattern, Backlog)>, pattern: Pattern, b: &Backlog) {
    match list.iter_mut().find(|(p, _)| *p == pattern) {
        Some((_, o)) => o.add(b),
        None => list.push((pattern, *b)),
    }
}

/// Bounds on what the channels of one shard keep (0: no limit).
#[derive(Debug, Clone, Copy, Default)]
pub struct Limits {
    /// Messages stored per queue channel (waiting and delivered-unsettled).
    pub queue_max_messages: u64,
    /// Payload bytes stored per queue channel.
    pub queue_max_bytes: u64,
    /// Channels kept by the shard, every pattern together.
    pub max_channels: u32,
    /// Durable events-store subscriptions kept by the shard (0: no limit).
    pub max_durable_subscriptions: u32,
    /// A durable subscription nobody attached for this long is deleted (ms; 0: never).
    pub durable_expiry_ms: u64,
}

/// Per-channel counters.
#[derive(Debug, Clone, Copy)]
struct Counters {
    /// Which making of a channel these count (unique in the process): a channel
    /// forgotten and made again starts new counters, and /metrics tells them apart.
    born: u64,
    published: u64,
    published_bytes: u64,
    delivered: u64,
    dead_lettered: u64,
    deadline_expired: u64,
    /// When the channel last saw a publish (steady clock).
    touched_ms: u64,
}

impl Default for Counters {
    fn default() -> Self {
        static BORN: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
        Counters {
            born: BORN.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
            published: 0,
            published_bytes: 0,
            delivered: 0,
            dead_lettered: 0,
            deadline_expired: 0,
            touched_ms: 0,
        }
    }
}

impl Counters {
    /// Its counters as a backlog with nothing held.
    fn backlog(&self) -> Backlog {
        Backlog {
            published: self.published,
            published_bytes: self.published_bytes,
            delivered: self.delivered,
            dead_lettered: self.dead_lettered,
            deadline_expired: self.deadline_expired,
            born: self.born,
            ..Backlog::default()
        }
    }

    fn count_publish(&mut self, bytes: u64, now_ms: u64) {
        self.published += 1;
        self.published_bytes += bytes;
        self.touched_ms = now_ms;
    }

    fn idle(&self, now_ms: u64) -> bool {
        now_ms.saturating_sub(self.touched_ms) >= CHANNEL_IDLE_MS
    }
}

/// Backlog of one channel (for metrics and the admin API).
#[derive(Debug, Clone, PartialEq)]
pub struct ChannelStats {
    /// Channel.
    pub key: ChannelKey,
    /// Its numbers.
    pub backlog: Backlog,
}

/// The numbers of one channel, or of several summed (`*other` on /metrics).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Backlog {
    /// Messages waiting for a consumer (queues), or stored (events-store).
    pub undelivered: u64,
    /// Delivered and not yet settled.
    pub outstanding: u64,
    /// Consumers attached.
    pub consumers: u64,
    /// Messages published.
    pub published: u64,
    /// Bytes published.
    pub published_bytes: u64,
    /// Messages delivered to consumers.
    pub delivered: u64,
    /// Age in ms of the oldest message not yet settled (0: none).
    pub oldest_unacked_ms: u64,
    /// Messages moved to the dead-letter channel.
    pub dead_lettered: u64,
    /// Deliveries returned because their ack deadline passed.
    pub deadline_expired: u64,
    /// One channel's: which making of it the counters are of (see `Counters`); 0 in
    /// a sum.
    pub born: u64,
}

impl Backlog {
    /// Add another channel's numbers (the oldest age is the larger of the two).
    pub fn add(&mut self, o: &Backlog) {
        self.undelivered += o.undelivered;
        self.outstanding += o.outstanding;
        self.consumers += o.consumers;
        self.published += o.published;
        self.published_bytes += o.published_bytes;
        self.delivered += o.delivered;
        self.oldest_unacked_ms = self.oldest_unacked_ms.max(o.oldest_unacked_ms);
        self.dead_lettered += o.dead_lettered;
        self.deadline_expired += o.deadline_expired;
    }
}

/// A channel kept with its own label set while a capped scrape walks the channels:
/// ordered by its key, so the heap's top is the one to evict first.
struct Kept<'a> {
    key: &'a ChannelKey,
    backlog: Backlog,
}

impl PartialEq for Kept<'_> {
    fn eq(&self, o: &Self) -> bool {
        self.key == o.key
    }
}

impl Eq for Kept<'_> {}

impl PartialOrd for Kept<'_> {
    fn partial_cmp(&self, o: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(o))
    }
}

impl Ord for Kept<'_> {
    fn cmp(&self, o: &Self) -> std::cmp::Ordering {
        self.key.cmp(o.key)
    }
}

/// How long and how much an events-store channel keeps (the default: no limit).
#[derive(Debug, Clone, Copy, Default)]
pub struct Retention {
    /// Events older than this are dropped (ms; 0: no limit).
    pub max_age_ms: u64,
    /// Oldest events are dropped beyond this many bytes per channel (0: no limit).
    pub max_bytes: u64,
}

/// Every channel homed on this shard.
#[derive(Debug)]
pub struct Home {
    /// Deliveries of a queue message before it is dead-lettered (0: never).
    pub max_receive_count: u32,
    /// Events-store retention.
    pub retention: Retention,
    /// Queue and channel-count limits.
    pub limits: Limits,
    /// The next queue message id: one sequence for every queue of the shard, so a
    /// queue that is forgotten and comes back never reuses an id.
    next_queue_id: u64,
    /// When idle, empty channels are next looked for.
    next_sweep_ms: u64,
    /// When durable subscriptions are next looked over for expiry.
    next_durable_scan_ms: u64,
    /// Durable subscriptions kept, over every events-store channel.
    durable_count: usize,
    /// The earliest ack deadline of any queue's deliveries (0: none), lowered by the
    /// queues as they deliver: the 20 ms tick walks the queues only once it is due,
    /// so an idle shard with many queues costs no walk over them.
    earliest_deadline: Rc<Cell<u64>>,
    /// Some events-store reader has a walk to go on with (see [`FEED_SLICE`]).
    feeds_pending: Rc<Cell<bool>>,
    /// Some events-store channel has attaches waiting for a durable identity.
    parked_any: bool,
    queues_journal: Rc<RefCell<Journal>>,
    events_journal: Rc<RefCell<Journal>>,
    queues: HashMap<ChannelKey, QueueChan>,
    events: HashMap<ChannelKey, EventsChan>,
    stores: HashMap<ChannelKey, StoreChan>,
    rpcs: HashMap<ChannelKey, RpcChan>,
    /// Counters.
    pub stats: HomeStats,
    /// This shard and the process's events directory (None in a home of its own, as
    /// in unit tests: every events channel is then kept here).
    pub events_dir: Option<(u16, Arc<EventsDirectory>)>,
}

/// A credit update as the connection sent it ([`ShardMsg::Credit`]).
#[derive(Debug, Clone, Copy)]
struct Grant {
    credit: u32,
    reached: u32,
    drain: bool,
    seq: u32,
}

/// Credit as the home sees it: the connection's credit minus deliveries on their way.
#[derive(Debug, Default, Clone, Copy)]
struct Credit {
    credit: u32,
    /// Deliveries dispatched (wrapping), comparable with the connection's `reached`.
    sent: u32,
    drain: bool,
    /// The update that set `drain` (see [`ShardMsg::DrainDone`]).
    seq: u32,
}

impl Credit {
    /// `g.credit` at the connection, which has dealt with `g.reached` of the
    /// deliveries sent: the others are on their way and will spend some of it.
    fn update(&mut self, g: Grant) {
        let in_flight = (self.sent.wrapping_sub(g.reached) as i32).max(0) as u32;
        self.credit = g.credit.saturating_sub(in_flight);
        self.drain = g.drain;
        self.seq = g.seq;
    }

    fn take(&mut self) {
        self.credit -= 1;
        self.sent = self.sent.wrapping_add(1);
    }

    /// Complete a drain: no more deliveries until new credit. The connection advances
    /// the link's delivery-count by what its engine has left, if this drain is still
    /// the one asked for; `sent` counts only deliveries, so nothing here depends on it.
    fn finish_drain(&mut self, sub: SubRef, out: &mut Vec<ShardMsg>) {
        if self.drain {
            self.credit = 0;
            self.drain = false;
            out.push(ShardMsg::DrainDone { sub, seq: self.seq });
        }
    }
}

impl Default for Home {
    fn default() -> Self {
        Home::new(
            0,
            Retention::default(),
            Rc::new(RefCell::new(Journal::disabled(crate::store::LogKind::Queues))),
            Rc::new(RefCell::new(Journal::disabled(crate::store::LogKind::Events))),
        )
    }
}

impl Home {
    /// A home whose queues dead-letter after `max_receive_count` deliveries (0: never),
    /// writing to the given journals.
    pub fn new(
        max_receive_count: u32,
        retention: Retention,
        queues_journal: Rc<RefCell<Journal>>,
        events_journal: Rc<RefCell<Journal>>,
    ) -> Self {
        Home {
            max_receive_count,
            retention,
            limits: Limits::default(),
            next_queue_id: 1,
            next_sweep_ms: 0,
            next_durable_scan_ms: 0,
            durable_count: 0,
            earliest_deadline: Rc::new(Cell::new(0)),
            feeds_pending: Rc::new(Cell::new(false)),
            parked_any: false,
            queues_journal,
            events_journal,
            queues: HashMap::default(),
            events: HashMap::default(),
            stores: HashMap::default(),
            rpcs: HashMap::default(),
            stats: HomeStats::default(),
            events_dir: None,
        }
    }

    /// Rebuild the channels found by recovery.
    pub fn restore(&mut self, rec: RecoveredShard) {
        // The journal first: a channel rebuilt below starts from its mark (or floor).
        // Marks of channels with nothing else to restore stay in the journal only: such
        // a channel is rebuilt when it is used again, not kept as an empty channel.
        self.events_journal.borrow_mut().restore_marks(rec.cursors.clone(), rec.seq_marks, rec.seq_floors);
        for (key, msgs) in rec.queues {
            let q = self.queue(&key);
            for (_, m) in msgs {
                q.bytes += m.payload.len() as u64;
                q.ready.push_back(QItem {
                    msg: Msg { payload: m.payload, received_ms: m.ts },
                    receive_count: m.receive_count,
                    id: m.id,
                    seg: m.seg,
                });
            }
        }
        for (key, max) in rec.queue_ids {
            self.queue(&key);
            self.next_queue_id = self.next_queue_id.max(max.saturating_add(1));
        }
        for (key, evs) in rec.events {
            let s = self.store(&key);
            for (seq, e) in evs {
                s.bytes += e.payload.len() as u64;
                s.log.push_back(StoredEvent {
                    seq,
                    ts_ms: e.ts,
                    msg: Msg { payload: e.payload, received_ms: e.ts },
                    seg: e.seg,
                });
                s.next_seq = s.next_seq.max(seq.saturating_add(1));
            }
        }
        // The expiry clock of a recovered subscription starts now: the broker did not
        // see it attached while it was down, nor can it tell when it last was.
        let now = super::steady_ms();
        for ((key, id), next) in &rec.cursors {
            self.store(key).cursors.insert(id.clone(), Cursor { next: *next, seen_ms: now });
        }
        self.durable_count = self.stores.values().map(|s| s.cursors.len()).sum();
    }

    /// The channel exists, or the shard may keep one more.
    fn has_room_for(&self, key: &ChannelKey) -> bool {
        let max = self.limits.max_channels as usize;
        if max == 0 || self.channel_count() < max {
            return true;
        }
        match key.pattern {
            Pattern::Queues => self.queues.contains_key(key),
            Pattern::Events => self.events.contains_key(key),
            Pattern::EventsStore => self.stores.contains_key(key),
            Pattern::Commands | Pattern::Queries => self.rpcs.contains_key(key),
        }
    }

    fn channel_count(&self) -> usize {
        self.queues.len() + self.events.len() + self.stores.len() + self.rpcs.len()
    }

    /// Channels kept, by pattern (in the order of `shard::metrics::PATTERNS`).
    pub fn channel_counts(&self) -> [u64; 5] {
        let rpc = |p| self.rpcs.keys().filter(|k| k.pattern == p).count() as u64;
        [
            self.queues.len() as u64,
            self.events.len() as u64,
            self.stores.len() as u64,
            rpc(Pattern::Commands),
            rpc(Pattern::Queries),
        ]
    }

    /// Forget the channels that hold nothing, have no consumer attached and saw no
    /// publish for [`CHANNEL_IDLE_MS`]. An events-store channel that ever took an event
    /// is forgotten only when the journal keeps its next sequence number (fsync mode):
    /// its sequence must never restart.
    fn sweep(&mut self, now_ms: u64) {
        let marks_kept = self.events_journal.borrow().is_enabled();
        for r in self.rpcs.values_mut() {
            r.drop_expired(now_ms, &mut self.stats);
        }
        let stats = &mut self.stats;
        self.queues.retain(|k, q| {
            let forget = q.ready.is_empty()
                && q.unacked.is_empty()
                && q.moving.is_empty()
                && q.consumers.is_empty()
                && q.counters.idle(now_ms);
            if forget {
                stats.forget_channel(k.pattern, &q.counters);
            }
            !forget
        });
        // An events channel goes only when the directory agrees (no subscription on
        // its way here), and takes its entry with it.
        let dir = &self.events_dir;
        self.events.retain(|k, e| {
            let forget = e.subs.is_empty()
                && e.counters.idle(now_ms)
                && dir.as_ref().is_none_or(|(shard, dir)| dir.forget(k, *shard));
            if forget {
                stats.forget_channel(k.pattern, &e.counters);
            }
            !forget
        });
        // RPC channels have no per-channel series (visit_backlog): nothing to keep.
        self.rpcs.retain(|_, r| !(r.responders.is_empty() && r.waiting.is_empty() && r.counters.idle(now_ms)));
        let journal = self.events_journal.clone();
        self.stores.retain(|k, s| {
            let forget = (s.next_seq == 1 || marks_kept)
                && s.log.is_empty()
                && s.readers.is_empty()
                && s.parked.is_empty()
                && s.cursors.is_empty()
                && s.counters.idle(now_ms);
            if forget {
                journal.borrow_mut().channel_forgotten(k);
                stats.forget_channel(k.pattern, &s.counters);
            }
            !forget
        });
        // The journal keeps the marks of at most MaxChannels forgotten channels.
        if marks_kept {
            self.events_journal.borrow_mut().trim_marks(self.limits.max_channels as usize);
        }
    }

    /// Delete the durable subscriptions nobody attached for the expiry period (looked
    /// over every tenth of that period, between 1 s and 1 h).
    fn expire_durables(&mut self, now_ms: u64) {
        let expiry = self.limits.durable_expiry_ms;
        if expiry == 0 || self.durable_count == 0 || now_ms < self.next_durable_scan_ms {
            return;
        }
        self.next_durable_scan_ms =
            now_ms.saturating_add((expiry / 10).clamp(DURABLE_SCAN_MIN_MS, DURABLE_SCAN_MAX_MS));
        let gone: usize = self.stores.values_mut().map(|s| s.expire_cursors(now_ms, expiry)).sum();
        self.durable_count = self.durable_count.saturating_sub(gone);
        self.stats.durable_expired += gone as u64;
    }

    /// Durable subscriptions kept by this shard.
    pub fn durable_count(&self) -> usize {
        self.durable_count
    }

    fn queue(&mut self, key: &ChannelKey) -> &mut QueueChan {
        let (j, earliest) = (&self.queues_journal, &self.earliest_deadline);
        channel(&mut self.queues, key, || QueueChan::new(key.clone(), j.clone(), earliest.clone()))
    }

    /// A store forgotten by the sweep comes back with the next sequence number the
    /// journal remembers for it (its mark, or its bucket's floor), so its sequence never
    /// restarts.
    fn store(&mut self, key: &ChannelKey) -> &mut StoreChan {
        let (j, pending) = (&self.events_journal, &self.feeds_pending);
        channel(&mut self.stores, key, || {
            let mut s = StoreChan::new(key.clone(), j.clone(), pending.clone());
            let mut journal = j.borrow_mut();
            s.next_seq = journal.start_seq(key);
            journal.channel_kept(key);
            drop(journal);
            s
        })
    }

    /// Handle one home-bound message; messages to send are appended to `out`.
    pub fn handle(&mut self, msg: ShardMsg, now_ms: u64, out: &mut Vec<ShardMsg>) {
        match msg {
            ShardMsg::Publish { key, msg, ack } => {
                let bytes = msg.payload.len() as u64;
                // An events publish never creates its channel (see `PublishBatch`).
                if key.pattern != Pattern::Events && !self.has_room_for(&key) {
                    self.stats.channel_limit += 1;
                    return refuse_publish(ack, PublishRefusal::TooManyChannels, &mut self.stats, out);
                }
                // Queues and events-store answer `accepted` once the record is on
                // disk (group commit); events at once.
                let done_ok = |ack| ShardMsg::PublishDone { ack, result: Ok(()) };
                // One lookup per message: the channel's counters are updated through
                // the same reference that publishes.
                match key.pattern {
                    Pattern::Queues => {
                        let limits = self.limits;
                        let id = self.next_queue_id;
                        let q = self.queue(&key);
                        if q.full(limits, bytes) {
                            self.stats.queue_full += 1;
                            return refuse_publish(ack, PublishRefusal::QueueFull, &mut self.stats, out);
                        }
                        let done = ack.map(done_ok);
                        q.counters.count_publish(bytes, now_ms);
                        q.publish(id, msg, now_ms, done, out);
                        self.next_queue_id = id.wrapping_add(1);
                    }
                    Pattern::Events => {
                        if let Some(e) = self.events.get_mut(&key) {
                            e.counters.count_publish(bytes, now_ms);
                            e.publish(msg, &mut self.stats);
                            e.flush(out);
                        }
                        out.extend(ack.map(done_ok));
                    }
                    Pattern::EventsStore => {
                        let done = ack.map(done_ok);
                        let retention = self.retention;
                        let s = self.store(&key);
                        s.counters.count_publish(bytes, now_ms);
                        // Retention by age is on the wall clock, as the events' times are.
                        let wall_ms = msg.received_ms;
                        s.publish(msg, done, out);
                        s.trim(wall_ms, retention);
                    }
                    // RPC channels receive RpcRequest, never Publish.
                    Pattern::Commands | Pattern::Queries => out.extend(ack.map(done_ok)),
                }
            }
            ShardMsg::PublishBatch { key, msgs } => {
                if key.pattern == Pattern::Events {
                    // An events channel exists only while someone subscribes (and for
                    // a few seconds after): publishing to a name nobody subscribes to
                    // costs nothing and uses up no channel slot. Its events meet no
                    // one, as on any channel without subscribers.
                    let Some(e) = self.events.get_mut(&key) else { return };
                    for msg in msgs {
                        e.counters.count_publish(msg.payload.len() as u64, now_ms);
                        e.publish(msg, &mut self.stats);
                    }
                    e.flush(out);
                } else {
                    // Only events are batched; anything else is handled one by one.
                    for msg in msgs {
                        self.handle(ShardMsg::Publish { key: key.clone(), msg, ack: None }, now_ms, out);
                    }
                }
            }
            ShardMsg::DeadLetter { key, msg, source, id: source_id } => {
                // Already accepted once: moved whatever the limits say.
                let id = self.next_queue_id;
                self.next_queue_id = id.wrapping_add(1);
                let q = self.queue(&key);
                q.counters.count_publish(msg.payload.len() as u64, now_ms);
                let done = ShardMsg::DeadLettered { key: source, id: source_id, ok: true };
                q.publish(id, msg, now_ms, Some(done), out);
            }
            ShardMsg::DeadLettered { key, id, ok } => {
                if let Some(q) = self.queues.get_mut(&key) {
                    if let Some(item) = q.moving.remove(&id) {
                        if ok {
                            q.forget(&item);
                        } else {
                            // Not stored there: it stays here (and may be delivered
                            // from both, at least once).
                            q.ready.push_back(item);
                            q.dispatch(now_ms, out);
                        }
                    }
                }
            }
            ShardMsg::Subscribe { key, sub, .. } if !self.has_room_for(&key) => {
                self.stats.channel_limit += 1;
                if key.pattern == Pattern::Events {
                    if let Some((_, dir)) = &self.events_dir {
                        dir.refused(&key);
                    }
                }
                let r = PublishRefusal::TooManyChannels;
                let why = (r.condition(), r.description().to_owned());
                out.push(ShardMsg::SubscribeDone { sub, result: Err(why) });
            }
            ShardMsg::Subscribe { key, sub, spec } => match key.pattern {
                Pattern::Queues => self.queue(&key).subscribe(sub, &spec, now_ms, out),
                Pattern::Events => self.events.entry(key).or_default().subscribe(sub, *spec, out),
                Pattern::EventsStore => {
                    // Counted over the shard's channels only for a durable attach.
                    let max = self.limits.max_durable_subscriptions as usize;
                    let room = spec.durable.is_none() || max == 0 || self.durable_count < max;
                    let s = self.store(&key);
                    let before = s.cursors.len();
                    s.subscribe(sub, *spec, room, now_ms, out);
                    let (added, parked) = (s.cursors.len().saturating_sub(before), !s.parked.is_empty());
                    self.durable_count += added;
                    self.parked_any |= parked;
                }
                Pattern::Commands | Pattern::Queries => {
                    self.rpcs.entry(key.clone()).or_insert_with(|| RpcChan::new(key)).subscribe(sub, &spec, now_ms, out)
                }
            },
            ShardMsg::Credit { key, sub, credit, reached, bytes_out, drain, seq } => match key.pattern {
                Pattern::Queues => {
                    if let Some(q) = self.queues.get_mut(&key) {
                        q.credit(sub, Grant { credit, reached, drain, seq }, now_ms, out);
                    }
                }
                Pattern::Events => {
                    if let Some(e) = self.events.get_mut(&key) {
                        if let Some(s) = e.sub_mut(sub) {
                            s.credit.update(Grant { credit, reached, drain, seq });
                            s.acked = reached;
                            s.acked_bytes = bytes_out;
                            // Batches whose last event the connection has dealt with are gone.
                            while s.batch_ends.front().is_some_and(|e| (reached.wrapping_sub(*e) as i32) >= 0) {
                                s.batch_ends.pop_front();
                            }
                            // Held events go first; then a drain completes at once.
                            s.flush_held(out);
                            s.credit.finish_drain(sub, out);
                        }
                    }
                }
                Pattern::EventsStore => {
                    // The ring is emptied by the connection, which completes drains itself.
                }
                Pattern::Commands | Pattern::Queries => {
                    if let Some(r) = self.rpcs.get_mut(&key) {
                        r.responders.credit(sub, Grant { credit, reached, drain, seq });
                        r.dispatch(now_ms, &mut self.stats, out);
                    }
                }
            },
            ShardMsg::RpcSettled { key, sub, n, bytes } => {
                if let Some(r) = self.rpcs.get_mut(&key) {
                    r.forget_blocked(sub);
                    if let Some(resp) = r.responders.get_mut(sub) {
                        resp.unsettled = resp.unsettled.saturating_sub(n);
                        resp.unsettled_bytes = resp.unsettled_bytes.saturating_sub(bytes);
                    }
                    r.responders.wake(sub);
                    r.dispatch(now_ms, &mut self.stats, out);
                }
            }
            ShardMsg::Settle { key, sub, token, outcome } => {
                let max = self.max_receive_count;
                if let Some(q) = self.queues.get_mut(&key) {
                    q.settle(&key, sub, token, outcome, max, out);
                    q.dispatch(now_ms, out);
                }
            }
            ShardMsg::Extend { key, sub, token, held } => {
                if let Some(q) = self.queues.get_mut(&key) {
                    q.extend(sub, token, now_ms, held);
                }
            }
            ShardMsg::Consumed { key, sub, next_seq } => {
                if let Some(s) = self.stores.get_mut(&key) {
                    s.consumed(sub, next_seq, now_ms, out);
                }
            }
            ShardMsg::Unsubscribe { key, sub, stalled, resume_at, confirm, sent } => {
                self.unsubscribe(key, sub, stalled, resume_at, &sent, out);
                if confirm {
                    out.push(ShardMsg::UnsubscribeDone { sub });
                }
            }
            ShardMsg::RingSpace { key, sub } => {
                if let Some(s) = self.stores.get_mut(&key) {
                    if let Some(i) = s.reader_of(sub) {
                        s.readers[i].waiting = false;
                        s.feed(i, out);
                    }
                }
            }
            ShardMsg::RpcRequest { key, msg, deadline_ms } => {
                if !self.has_room_for(&key) {
                    // Nobody can be subscribed to a channel that does not exist: the
                    // requester's deadline answers it.
                    self.stats.channel_limit += 1;
                    self.stats.transfers_in_dropped += 1;
                    return;
                }
                let r = channel(&mut self.rpcs, &key, || RpcChan::new(key.clone()));
                r.counters.count_publish(msg.payload.len() as u64, now_ms);
                r.waiting_bytes += msg.payload.len() as u64;
                r.waiting.push_back((msg.owned(), deadline_ms));
                r.bound(&mut self.stats);
                r.dispatch(now_ms, &mut self.stats, out);
            }
            ShardMsg::RpcReturned { key, requests } => {
                let Some(r) = self.rpcs.get_mut(&key) else {
                    // The channel went with its last responder: the requesters'
                    // deadlines answer them.
                    self.stats.transfers_in_dropped += requests.len() as u64;
                    return;
                };
                // In their order, before the requests that came after them.
                for (msg, deadline_ms) in requests.into_iter().rev() {
                    r.waiting_bytes += msg.payload.len() as u64;
                    r.waiting.push_front((msg, deadline_ms));
                }
                r.bound(&mut self.stats);
                r.dispatch(now_ms, &mut self.stats, out);
            }
            // Connection-bound messages never reach the home.
            _ => {}
        }
    }

    fn unsubscribe(
        &mut self,
        key: ChannelKey,
        sub: SubRef,
        stalled: bool,
        resume_at: Option<u64>,
        sent: &[u64],
        out: &mut Vec<ShardMsg>,
    ) {
        let now_ms = super::steady_ms();
        match key.pattern {
            Pattern::Queues => {
                let max = self.max_receive_count;
                if let Some(q) = self.queues.get_mut(&key) {
                    q.unsubscribe(&key, sub, sent, max, out);
                    q.dispatch(now_ms, out);
                }
            }
            Pattern::Events => {
                if let Some(e) = self.events.get_mut(&key) {
                    if e.unsubscribe(sub) {
                        if let Some((_, dir)) = &self.events_dir {
                            dir.release(&key);
                        }
                    }
                }
            }
            Pattern::EventsStore => {
                if let Some(s) = self.stores.get_mut(&key) {
                    s.unsubscribe(sub, stalled, resume_at, now_ms, out);
                }
            }
            Pattern::Commands | Pattern::Queries => {
                if let Some(r) = self.rpcs.get_mut(&key) {
                    r.forget_blocked(sub);
                    r.responders.remove(sub);
                }
            }
        }
    }

    /// Timers: queue deliveries past their ack deadline go back to the queue;
    /// events-store retention; the oldest pinned queue segment is compacted.
    pub fn tick(&mut self, now_ms: u64, out: &mut Vec<ShardMsg>) {
        if now_ms >= self.next_sweep_ms {
            self.next_sweep_ms = now_ms.saturating_add(SWEEP_MS);
            self.expire_durables(now_ms);
            self.sweep(now_ms);
            // Retention by age, to the second (by size it is kept at every publish),
            // on the wall clock, as the events' times are.
            let retention = self.retention;
            let wall_ms = super::wall_ms();
            for s in self.stores.values_mut() {
                s.trim(wall_ms, retention);
            }
        }
        let due = self.earliest_deadline.get();
        if due != 0 && due <= now_ms {
            let max = self.max_receive_count;
            let mut next = 0;
            for (key, q) in self.queues.iter_mut() {
                if q.next_deadline != 0 && q.next_deadline <= now_ms {
                    q.expire(key, now_ms, max, out);
                    q.dispatch(now_ms, out);
                }
                if q.next_deadline != 0 && (next == 0 || q.next_deadline < next) {
                    next = q.next_deadline;
                }
            }
            self.earliest_deadline.set(next);
        }
        // Readers whose walk past skipped events was cut at its slice go on.
        if self.feeds_pending.replace(false) {
            for s in self.stores.values_mut() {
                for i in 0..s.readers.len() {
                    if std::mem::take(&mut s.readers[i].resume) {
                        s.feed(i, out);
                    }
                }
            }
        }
        if self.parked_any {
            let mut any = false;
            for s in self.stores.values_mut() {
                s.expire_parked(now_ms, out);
                any |= !s.parked.is_empty();
            }
            self.parked_any = any;
        }
        // Records cut by a failed commit: the live messages recorded in those
        // segments are appended again before what that commit gave up is released.
        let suspect = self.queues_journal.borrow_mut().take_suspects();
        if !suspect.is_empty() {
            for q in self.queues.values_mut() {
                q.relocate(&suspect);
            }
            self.queues_journal.borrow_mut().redo_done();
        }
        // A few old messages must not pin every later segment: re-append the live
        // messages of the oldest segment so that it can be deleted.
        let pinned = self.queues_journal.borrow().oldest_pinned();
        if let Some((seg, live)) = pinned {
            if live <= 10_000 {
                for q in self.queues.values_mut() {
                    q.relocate(&[seg]);
                }
            }
        }
    }

    /// Backlog of every channel homed here.
    pub fn channel_stats(&self) -> Vec<ChannelStats> {
        let mut v = Vec::with_capacity(self.channel_count());
        self.visit_backlog(|key, b| v.push(ChannelStats { key: key.clone(), backlog: *b }));
        v
    }

    /// For /metrics: the first `cap` channels by key with their own stats, and the
    /// rest, with the counters of the channels forgotten so far, summed per pattern
    /// under the name `*other`.
    pub fn channel_stats_capped(&self, cap: usize) -> (Vec<ChannelStats>, Vec<ChannelStats>) {
        let mut other = self.stats.forgotten.clone();
        let own = if self.channel_count() <= cap {
            self.channel_stats()
        } else {
            self.first_channels(cap, None, |pattern, b| add_to(&mut other, pattern, b))
        };
        let other =
            other.into_iter().map(|(p, backlog)| ChannelStats { key: ChannelKey::new(p, "*other"), backlog }).collect();
        (own, other)
    }

    /// The first `cap` channels by key past `after` (in no order), in one pass: a
    /// max-heap keeps the smallest seen so far, and whatever it turns away (or
    /// evicts) goes to `rest` at once. Only the ones kept are copied, so a scrape of a
    /// shard with many channels costs one pass over them, not a copy of each.
    pub fn first_channels(
        &self,
        cap: usize,
        after: Option<&ChannelKey>,
        mut rest: impl FnMut(Pattern, &Backlog),
    ) -> Vec<ChannelStats> {
        let mut kept: std::collections::BinaryHeap<Kept<'_>> = std::collections::BinaryHeap::with_capacity(cap + 1);
        self.visit_backlog(|key, b| {
            if after.is_some_and(|a| key <= a) {
                return;
            }
            if kept.len() < cap {
                kept.push(Kept { key, backlog: *b });
            } else if kept.peek().is_some_and(|top| key < top.key) {
                if let Some(out) = kept.pop() {
                    rest(out.key.pattern, &out.backlog);
                }
                kept.push(Kept { key, backlog: *b });
            } else {
                rest(key.pattern, b);
            }
        });
        kept.into_iter().map(|k| ChannelStats { key: k.key.clone(), backlog: k.backlog }).collect()
    }

    /// Call `f` with the backlog of every channel homed here.
    fn visit_backlog<'a>(&'a self, mut f: impl FnMut(&'a ChannelKey, &Backlog)) {
        // Ages of messages: their times are on the wall clock.
        let now = super::wall_ms();
        let backlog = |undelivered: u64, outstanding: u64, consumers: u64, c: &Counters, oldest: Option<u64>| Backlog {
            undelivered,
            outstanding,
            consumers,
            oldest_unacked_ms: oldest.map_or(0, |t| now.saturating_sub(t)),
            ..c.backlog()
        };
        for (k, q) in &self.queues {
            let oldest = q
                .ready
                .front()
                .map(|i| i.msg.received_ms)
                .into_iter()
                .chain(q.unacked.values().map(|u| u.item.msg.received_ms))
                .min();
            let b =
                backlog(q.ready.len() as u64, q.unacked.len() as u64, q.consumers.len() as u64, &q.counters, oldest);
            f(k, &b);
        }
        for (k, e) in &self.events {
            let held: u64 = e.subs.iter().map(|s| s.held.len() as u64).sum();
            let oldest = e.subs.iter().filter_map(|s| s.held.front().map(|m| m.received_ms)).min();
            f(k, &backlog(held, 0, e.subs.len() as u64, &e.counters, oldest));
        }
        for (k, s) in &self.stores {
            // Undelivered: events some reader has not yet taken into its window.
            let behind = s.readers.iter().map(|r| (s.log.len() - s.index_of(r.next)) as u64).max().unwrap_or(0);
            let in_rings: u64 = s.readers.iter().flat_map(|r| &r.members).map(|m| m.ring.ring.len() as u64).sum();
            let oldest_seq = s.readers.iter().map(|r| r.next).min().filter(|n| *n < s.next_seq);
            let oldest = oldest_seq.and_then(|n| s.log.get(s.index_of(n))).map(|e| e.ts_ms);
            let consumers = s.readers.iter().map(|r| r.members.len() as u64).sum();
            f(k, &backlog(behind, in_rings, consumers, &s.counters, oldest));
        }
    }
}

// ------------------------------------------------------------------ queues

#[derive(Debug, Clone)]
struct QItem {
    msg: Msg,
    receive_count: u32,
    /// Per-channel id, in publish order.
    id: u64,
    /// Segment holding its publish record.
    seg: u64,
}

#[derive(Debug)]
struct Unacked {
    item: QItem,
    sub: SubRef,
    /// When the delivery returns to the queue if not settled (0: never).
    deadline: u64,
}

/// A subscriber that competes with the others of its channel for its messages.
trait Competitor {
    fn sub(&self) -> SubRef;
    /// How many more messages it may take now (0: none until its credit or its window
    /// moves).
    fn room(&self) -> u32;
    fn credit_mut(&mut self) -> &mut Credit;
    /// In the turns (see [`Turns`]).
    fn queued(&mut self) -> &mut bool;
}

/// The competing subscribers of a queue or an RPC channel, and whose turn it is: only
/// members that may take a message (credit, room in their windows) are in the turns,
/// each once, so a message or a settlement costs the members that can take something,
/// not every member of the channel (a channel with 1,000 consumers of which one had
/// credit walked all 1,000 per message). Members are found by their subscription in a
/// map, and drains are answered for the members that asked.
#[derive(Debug)]
struct Turns<T> {
    members: Vec<T>,
    /// Position of each member in `members`.
    by_sub: HashMap<SubRef, usize>,
    /// Members that may take messages, in round-robin order, each once.
    queue: VecDeque<SubRef>,
    /// Members with a drain to answer after the next dispatch.
    drains: Vec<SubRef>,
}

impl<T> Default for Turns<T> {
    fn default() -> Self {
        Turns { members: Vec::new(), by_sub: HashMap::default(), queue: VecDeque::new(), drains: Vec::new() }
    }
}

impl<T: Competitor> Turns<T> {
    fn len(&self) -> usize {
        self.members.len()
    }

    fn is_empty(&self) -> bool {
        self.members.is_empty()
    }

    fn get_mut(&mut self, sub: SubRef) -> Option<&mut T> {
        let i = *self.by_sub.get(&sub)?;
        self.members.get_mut(i)
    }

    fn add(&mut self, m: T) {
        self.by_sub.insert(m.sub(), self.members.len());
        self.members.push(m);
    }

    fn remove(&mut self, sub: SubRef) -> Option<T> {
        let i = self.by_sub.remove(&sub)?;
        let mut gone = self.members.swap_remove(i);
        if let Some(moved) = self.members.get(i) {
            self.by_sub.insert(moved.sub(), i);
        }
        if *gone.queued() {
            self.queue.retain(|t| *t != sub);
        }
        self.drains.retain(|d| *d != sub);
        Some(gone)
    }

    /// A turn for member `sub` when it may take messages and has none yet.
    fn wake(&mut self, sub: SubRef) {
        let Some(&i) = self.by_sub.get(&sub) else { return };
        let m = &mut self.members[i];
        if !*m.queued() && m.room() > 0 {
            *m.queued() = true;
            self.queue.push_back(sub);
        }
    }

    /// New credit from member `sub`.
    fn credit(&mut self, sub: SubRef, g: Grant) {
        let Some(m) = self.get_mut(sub) else { return };
        m.credit_mut().update(g);
        if g.drain {
            self.drains.push(sub);
        }
        self.wake(sub);
    }

    /// Turns waiting.
    fn waiting(&self) -> usize {
        self.queue.len()
    }

    /// The member whose turn it is, out of the turns until [`Self::end_turn`].
    fn next(&mut self) -> Option<SubRef> {
        while let Some(sub) = self.queue.pop_front() {
            if self.by_sub.contains_key(&sub) {
                #[cfg(test)]
                TURNS.with(|n| n.set(n.get() + 1));
                return Some(sub);
            }
        }
        None
    }

    /// Member `sub`, whose turn it is, leaves the turns until woken.
    fn leave(&mut self, sub: SubRef) {
        if let Some(m) = self.get_mut(sub) {
            *m.queued() = false;
        }
    }

    /// Member `sub`'s turn is over: to the back of the turns while it may take more
    /// (true), else out of them until woken.
    fn end_turn(&mut self, sub: SubRef) -> bool {
        let Some(&i) = self.by_sub.get(&sub) else { return false };
        let m = &mut self.members[i];
        let more = m.room() > 0;
        *m.queued() = more;
        if more {
            self.queue.push_back(sub);
        }
        more
    }

    /// Drains are answered at once after a dispatch: what could be delivered has been.
    fn finish_drains(&mut self, out: &mut Vec<ShardMsg>) {
        for sub in std::mem::take(&mut self.drains) {
            if let Some(m) = self.get_mut(sub) {
                m.credit_mut().finish_drain(sub, out);
            }
        }
    }
}

/// The byte watermark of a consume link that settles (queue consumers, RPC
/// responders): a message fits while the unsettled bytes stay within the limit (0:
/// none), and a single larger message goes when nothing is unsettled.
fn fits_byte_watermark(presettled: bool, max_bytes: u64, unsettled: u32, unsettled_bytes: u64, size: u64) -> bool {
    presettled || max_bytes == 0 || unsettled == 0 || unsettled_bytes + size <= max_bytes
}

#[derive(Debug)]
struct Consumer {
    sub: SubRef,
    credit: Credit,
    unsettled: u32,
    unsettled_bytes: u64,
    presettled: bool,
    max_unsettled: u32,
    batch: u32,
    max_out_msgs: u32,
    max_out_bytes: u64,
    ack_deadline_ms: u64,
    /// The tokens of the deliveries it was given (a superset of its unacked ones, in
    /// the order given), so its unsubscribe finds them without walking the queue's.
    tokens: Trail<u64>,
    /// Deliveries past their ack deadline (token to size), gone back to the queue but
    /// not yet settled by the client, which still holds them: each keeps its place in
    /// the consumer's window (its counts) until settled, so the consumer is never given
    /// more than its window. At most its window's worth (each entry was a place).
    expired: HashMap<u64, u64>,
    /// In the queue's `turns`.
    queued: bool,
    /// Held back by its byte watermark, with room for this many bytes (in the queue's
    /// `byte_blocked`).
    blocked: Option<u64>,
}

impl Consumer {
    /// How many more messages the consumer may get now, ignoring sizes:
    /// min(credit, batch, MaxUnsettled - unsettled, message watermark room). For a
    /// pre-settled consumer `unsettled` counts the deliveries its connection has not
    /// yet handed to the socket path, so one that stops reading holds at most its
    /// window, and the rest stays in the queue (where the queue limits see it).
    fn room(&self) -> u32 {
        let mut room = self.credit.credit.min(self.batch).min(self.max_unsettled.saturating_sub(self.unsettled));
        if !self.presettled && self.max_out_msgs > 0 {
            room = room.min(self.max_out_msgs.saturating_sub(self.unsettled));
        }
        room
    }

    /// The bytes it may take now under its byte watermark (the next message fits when
    /// it is no larger, or when nothing is outstanding, see [`Self::fits`]; none fits,
    /// not even an empty one, while it is past the watermark).
    fn byte_room(&self) -> u64 {
        self.max_out_bytes.saturating_sub(self.unsettled_bytes)
    }

    /// The byte watermark: a message fits while the outstanding bytes stay within the
    /// limit, and a single larger message goes when nothing is outstanding.
    fn fits(&self, size: u64) -> bool {
        fits_byte_watermark(self.presettled, self.max_out_bytes, self.unsettled, self.unsettled_bytes, size)
    }
}

impl Competitor for Consumer {
    fn sub(&self) -> SubRef {
        self.sub
    }
    fn room(&self) -> u32 {
        Consumer::room(self)
    }
    fn credit_mut(&mut self) -> &mut Credit {
        &mut self.credit
    }
    fn queued(&mut self) -> &mut bool {
        &mut self.queued
    }
}

#[cfg(test)]
thread_local! {
    /// Tokens checked by queue unsubscribes (tests of their cost).
    static UNSUBSCRIBE_CHECKS: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
    /// Consumers visited by queue dispatches (tests of their cost).
    static TURNS: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
    /// Events subscribers visited to find one (tests of their cost).
    static SUB_LOOKUPS: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

#[derive(Debug)]
struct QueueChan {
    key: ChannelKey,
    journal: Rc<RefCell<Journal>>,
    ready: VecDeque<QItem>,
    /// How many messages at the front of `ready` came back undelivered, in publish
    /// order (`return_front` places the next among them).
    returned: usize,
    /// Messages on their way to the dead-letter queue, by id, until it has stored them.
    moving: HashMap<u64, QItem>,
    /// Payload bytes of every message stored (waiting, unacked and moving).
    bytes: u64,
    unacked: HashMap<u64, Unacked>,
    consumers: Turns<Consumer>,
    /// Consumers whose byte watermark held back the message at the front, by the
    /// bytes they have room for: out of the turns until a settlement of their own or
    /// a message at the front that fits (a channel of consumers all at their byte
    /// watermark cost a visit to each one per dispatch).
    byte_blocked: std::collections::BTreeSet<(u64, SubRef)>,
    next_token: u64,
    /// Earliest ack deadline among the unacked (0: none), so ticks stay cheap.
    next_deadline: u64,
    /// The home's earliest deadline over every queue, lowered with `next_deadline`.
    earliest: Rc<Cell<u64>>,
    counters: Counters,
}

impl QueueChan {
    fn new(key: ChannelKey, journal: Rc<RefCell<Journal>>, earliest: Rc<Cell<u64>>) -> Self {
        QueueChan {
            key,
            journal,
            earliest,
            ready: VecDeque::new(),
            returned: 0,
            moving: HashMap::default(),
            bytes: 0,
            unacked: HashMap::default(),
            consumers: Turns::default(),
            byte_blocked: std::collections::BTreeSet::new(),
            next_token: 0,
            next_deadline: 0,
            counters: Counters::default(),
        }
    }

    /// At a limit: the message count, or the payload bytes this one would pass (a
    /// single larger message still enters an empty queue).
    fn full(&self, limits: Limits, size: u64) -> bool {
        let stored = (self.ready.len() + self.unacked.len() + self.moving.len()) as u64;
        (limits.queue_max_messages > 0 && stored >= limits.queue_max_messages)
            || (limits.queue_max_bytes > 0 && stored > 0 && self.bytes.saturating_add(size) > limits.queue_max_bytes)
    }

    /// The message leaves the queue for good: logged as settled, its bytes given back.
    fn forget(&mut self, item: &QItem) {
        self.journal.borrow_mut().queue_ack(&self.key, item.id, item.seg);
        self.bytes = self.bytes.saturating_sub(item.msg.payload.len() as u64);
    }

    fn publish(&mut self, id: u64, msg: Msg, now_ms: u64, done: Option<ShardMsg>, out: &mut Vec<ShardMsg>) {
        let msg = msg.owned();
        self.bytes += msg.payload.len() as u64;
        let mut j = self.journal.borrow_mut();
        let seg = j.queue_publish(&self.key, id, msg.received_ms, &msg.payload);
        if let Some(done) = done {
            j.after_commit(done, out);
        }
        drop(j);
        self.ready.push_back(QItem { msg, receive_count: 0, id, seg });
        self.dispatch(now_ms, out);
    }

    /// Re-append the live messages whose publish record is in one of `segs`; each
    /// old segment is given up only when the new records are on disk.
    fn relocate(&mut self, segs: &[u64]) {
        let mut j = self.journal.borrow_mut();
        let items = self.ready.iter_mut().chain(self.unacked.values_mut().map(|u| &mut u.item));
        for item in items.chain(self.moving.values_mut()).filter(|i| segs.contains(&i.seg)) {
            let new = j.queue_publish(&self.key, item.id, item.msg.received_ms, &item.msg.payload);
            if item.receive_count > 0 {
                j.queue_delivered(&self.key, item.id, item.receive_count);
            }
            j.moved_from(item.seg);
            item.seg = new;
        }
    }

    fn consumer(&mut self, sub: SubRef) -> Option<&mut Consumer> {
        self.consumers.get_mut(sub)
    }

    fn subscribe(&mut self, sub: SubRef, spec: &SubSpec, now_ms: u64, out: &mut Vec<ShardMsg>) {
        self.consumers.add(Consumer {
            sub,
            credit: Credit::default(),
            unsettled: 0,
            unsettled_bytes: 0,
            presettled: spec.presettled,
            max_unsettled: spec.max_unsettled.max(1),
            batch: spec.batch.max(1),
            max_out_msgs: spec.max_outstanding_messages,
            max_out_bytes: spec.max_outstanding_bytes,
            ack_deadline_ms: spec.ack_deadline_ms,
            expired: HashMap::default(),
            tokens: Trail::default(),
            queued: false,
            blocked: None,
        });
        out.push(ShardMsg::SubscribeDone { sub, result: Ok(None) });
        self.dispatch(now_ms, out);
    }

    /// New credit from consumer `sub`.
    fn credit(&mut self, sub: SubRef, g: Grant, now_ms: u64, out: &mut Vec<ShardMsg>) {
        self.consumers.credit(sub, g);
        self.dispatch(now_ms, out);
    }

    /// Competing consumers, in turns: each turn gives one consumer a batch of
    /// min(credit, GetBatchSize, MaxUnsettled - unsettled) messages, within its
    /// outstanding-messages and outstanding-bytes watermarks, and sends it to the back
    /// of the turns while it may take more. Only consumers that may take messages
    /// have turns; one whose byte watermark holds back the next message leaves them
    /// until a settlement of its own, or a message that fits, is at the front.
    fn dispatch(&mut self, now_ms: u64, out: &mut Vec<ShardMsg>) {
        let mut idle = 0;
        loop {
            self.unblock();
            if self.ready.is_empty() || idle >= self.consumers.waiting() {
                break;
            }
            let Some(sub) = self.consumers.next() else { break };
            let Some(c) = self.consumers.get_mut(sub) else { continue };
            let mut gave = false;
            let mut blocked = false;
            for _ in 0..c.room() {
                let Some(front) = self.ready.front() else { break };
                let size = front.msg.payload.len() as u64;
                if !c.fits(size) {
                    blocked = true;
                    break;
                }
                let Some(mut item) = self.ready.pop_front() else { break };
                self.returned = self.returned.saturating_sub(1);
                gave = true;
                item.receive_count += 1;
                // Pre-settled: done once its connection has handed it to the
                // socket path (it says so with a Settle); until then it counts in
                // the consumer's window like an unsettled one and goes back to the
                // queue if the connection ends first.
                if !c.presettled {
                    self.journal.borrow_mut().queue_delivered(&self.key, item.id, item.receive_count);
                }
                let token = self.next_token;
                self.next_token += 1;
                c.credit.take();
                self.counters.delivered += 1;
                out.push(ShardMsg::Deliver {
                    sub: c.sub,
                    token,
                    msg: item.msg.clone(),
                    receive_count: item.receive_count,
                    settled: c.presettled,
                });
                c.unsettled += 1;
                c.unsettled_bytes += size;
                let deadline =
                    if c.ack_deadline_ms > 0 && !c.presettled { now_ms.saturating_add(c.ack_deadline_ms) } else { 0 };
                lower_deadline(&mut self.next_deadline, &self.earliest, deadline);
                self.unacked.insert(token, Unacked { item, sub, deadline });
                let unacked = &self.unacked;
                c.tokens.push(token, |t| unacked.get(t).is_some_and(|u| u.sub == sub));
            }
            if gave {
                idle = 0;
            }
            if let Some(old) = c.blocked.take() {
                self.byte_blocked.remove(&(old, sub));
            }
            if blocked {
                // Past its watermark (one large message went when nothing else was
                // out): nothing fits until a settlement of its own, which wakes it.
                if c.unsettled_bytes <= c.max_out_bytes {
                    let room = c.byte_room();
                    c.blocked = Some(room);
                    self.byte_blocked.insert((room, sub));
                }
                self.consumers.leave(sub);
                continue;
            }
            if self.consumers.end_turn(sub) && !gave {
                // A whole round of turns that gives nothing ends the dispatch.
                idle += 1;
            }
        }
        self.consumers.finish_drains(out);
    }

    /// The consumer held back by its byte watermark with the most room gets its turn
    /// again when the message at the front fits it (one at a time: the front may be
    /// the only message that small; one without credit now is passed over, out of the
    /// set until its credit wakes it).
    fn unblock(&mut self) {
        let Some(size) = self.ready.front().map(|f| f.msg.payload.len() as u64) else { return };
        while let Some(&(room, sub)) = self.byte_blocked.last().filter(|(room, _)| *room >= size) {
            self.byte_blocked.remove(&(room, sub));
            self.unblock_consumer(sub);
            if self.consumers.get_mut(sub).is_some_and(|c| c.queued) {
                break;
            }
        }
    }

    /// Consumer `sub` is out of `byte_blocked` (its room moved, or it is going).
    fn forget_blocked(&mut self, sub: SubRef) {
        if let Some(room) = self.consumers.get_mut(sub).and_then(|c| c.blocked.take()) {
            self.byte_blocked.remove(&(room, sub));
        }
    }

    /// Consumer `sub` is no longer held back by its byte watermark: back in the turns
    /// when it may take.
    fn unblock_consumer(&mut self, sub: SubRef) {
        self.forget_blocked(sub);
        self.consumers.wake(sub);
    }

    /// A delivery that never reached its consumer does not count as one (logged).
    fn uncount(&mut self, item: &mut QItem) {
        item.receive_count = item.receive_count.saturating_sub(1);
        self.journal.borrow_mut().queue_delivered(&self.key, item.id, item.receive_count);
    }

    /// Forget an unacked delivery and return its item.
    fn take_unacked(&mut self, token: u64) -> Option<(QItem, SubRef)> {
        let u = self.unacked.remove(&token)?;
        self.release_place(u.sub, token, u.item.msg.payload.len() as u64);
        Some((u.item, u.sub))
    }

    /// A delivery of `size` bytes no longer counts in its consumer's window.
    fn release_place(&mut self, sub: SubRef, token: u64, size: u64) {
        if let Some(c) = self.consumer(sub) {
            c.unsettled = c.unsettled.saturating_sub(1);
            c.unsettled_bytes = c.unsettled_bytes.saturating_sub(size);
            c.tokens.forget(token);
            self.unblock_consumer(sub);
        }
    }

    /// Back to the tail, or to `queues/<channel>.dlq` once delivered too often. A
    /// channel whose name leaves no room for `.dlq` within [`address::NAME_MAX`] has
    /// none (no client could attach to it, so what went there could never be read):
    /// its messages go back to the tail, however often delivered.
    fn requeue(&mut self, key: &ChannelKey, item: QItem, max_receive_count: u32, out: &mut Vec<ShardMsg>) {
        let has_dlq = key.name.len() + DLQ_SUFFIX.len() <= address::NAME_MAX;
        if max_receive_count > 0 && item.receive_count >= max_receive_count && has_dlq {
            self.counters.dead_lettered += 1;
            let dlq = ChannelKey::new(Pattern::Queues, &format!("{}{DLQ_SUFFIX}", key.name));
            // Logged as gone here only once the dead-letter queue has it on disk.
            out.push(ShardMsg::DeadLetter { key: dlq, msg: item.msg.clone(), source: self.key.clone(), id: item.id });
            self.moving.insert(item.id, item);
        } else {
            self.ready.push_back(item);
        }
    }

    fn settle(
        &mut self,
        key: &ChannelKey,
        sub: SubRef,
        token: u64,
        outcome: Outcome,
        max_receive_count: u32,
        out: &mut Vec<ShardMsg>,
    ) {
        match self.unacked.get(&token) {
            Some(u) if u.sub == sub => {}
            _ => {
                // One past its ack deadline (back in the queue already): its place.
                if let Some(size) = self.consumer(sub).and_then(|c| c.expired.remove(&token)) {
                    self.release_place(sub, token, size);
                }
                return;
            }
        }
        let Some((mut item, _)) = self.take_unacked(token) else { return };
        match outcome {
            Outcome::Accepted | Outcome::Rejected => self.forget(&item),
            Outcome::Requeue => self.requeue(key, item, max_receive_count, out),
            Outcome::Undelivered => {
                self.uncount(&mut item);
                self.return_front(item);
            }
        }
    }

    /// A delivery that never reached its consumer goes back to the front, in publish
    /// order among the others that came back before it: they come back one by one, in
    /// the order they were given, so each pushed to the very front would reverse them.
    /// A binary search over the returned run at the front.
    fn return_front(&mut self, item: QItem) {
        let run = self.returned.min(self.ready.len());
        let (mut lo, mut hi) = (0, run);
        while lo < hi {
            let mid = (lo + hi) / 2;
            if self.ready[mid].id < item.id {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        self.ready.insert(lo, item);
        self.returned = run + 1;
    }

    /// A `received` state renews the lease of a delivery.
    /// `held`: the delivery waits for its connection's session window; its lease
    /// stops until it is sent (then renewed from then).
    fn extend(&mut self, sub: SubRef, token: u64, now_ms: u64, held: bool) {
        let Some(ms) = self.consumer(sub).map(|c| c.ack_deadline_ms) else { return };
        let Some(u) = self.unacked.get_mut(&token).filter(|u| u.sub == sub && ms > 0) else { return };
        u.deadline = if held { 0 } else { now_ms.saturating_add(ms) };
        let deadline = u.deadline;
        lower_deadline(&mut self.next_deadline, &self.earliest, deadline);
    }

    /// Deliveries whose ack deadline passed return to the queue (counted).
    fn expire(&mut self, key: &ChannelKey, now_ms: u64, max_receive_count: u32, out: &mut Vec<ShardMsg>) {
        let mut due: Vec<u64> =
            self.unacked.iter().filter(|(_, u)| u.deadline != 0 && u.deadline <= now_ms).map(|(t, _)| *t).collect();
        due.sort_unstable();
        for t in due {
            let Some(u) = self.unacked.remove(&t) else { continue };
            // The client still holds it: its place stays taken until it settles.
            if let Some(c) = self.consumers.get_mut(u.sub) {
                c.expired.insert(t, u.item.msg.payload.len() as u64);
            }
            self.counters.deadline_expired += 1;
            self.requeue(key, u.item, max_receive_count, out);
        }
        self.next_deadline = self.unacked.values().map(|u| u.deadline).filter(|d| *d != 0).min().unwrap_or(0);
    }

    /// Every unsettled delivery of the link goes back, exactly once: those its
    /// connection `sent` to the tail (or to the dead-letter queue), their delivery
    /// counted; the others, never sent (they waited for a shut session window, or were
    /// on their way to the connection when the link went), to the front in the order
    /// they were given, their delivery not counted.
    /// Costs the consumer's own deliveries (its trail), not the queue's.
    fn unsubscribe(
        &mut self,
        key: &ChannelKey,
        sub: SubRef,
        sent: &[u64],
        max_receive_count: u32,
        out: &mut Vec<ShardMsg>,
    ) {
        let sent: HashSet<u64> = sent.iter().copied().collect();
        let mine = self.consumer(sub).map(|c| c.tokens.take()).unwrap_or_default();
        #[cfg(test)]
        UNSUBSCRIBE_CHECKS.with(|n| n.set(n.get() + mine.len() as u64));
        let mut unsent = Vec::new();
        for t in mine {
            if self.unacked.get(&t).is_some_and(|u| u.sub == sub) {
                if let Some((mut item, _)) = self.take_unacked(t) {
                    if sent.contains(&t) {
                        self.requeue(key, item, max_receive_count, out);
                    } else {
                        self.uncount(&mut item);
                        unsent.push(item);
                    }
                }
            }
        }
        // In the order given, before the returned run (whose order they need not
        // share): the run is theirs now.
        if !unsent.is_empty() {
            self.returned = unsent.len();
        }
        for item in unsent.into_iter().rev() {
            self.ready.push_front(item);
        }
        self.forget_blocked(sub);
        self.consumers.remove(sub);
    }
}

// ------------------------------------------------------------------ events

/// What one event on its way to a subscriber costs besides its payload (the
/// delivery's bookkeeping), in the events window: events sent by the home and not yet
/// written by the subscriber's connection are bounded by `SubSpec::events_in_flight_bytes`
/// (payload + this each); beyond it an event meets the subscriber as if it had no
/// credit. A subscriber that grants a huge credit and stops reading therefore costs a
/// bounded amount of memory. The connection reports its progress every quarter window
/// (`conn.rs`), so a subscriber that keeps up does not meet the bound.
pub const EVENT_OVERHEAD: u64 = 64;

/// What one batch of deliveries on its way to a subscriber costs besides its events:
/// its list (room for [`EVENTS_BATCH`] events) and its message slot. Counted in the
/// window too, so a subscriber fed one event per batch (a publisher alternating between
/// channels) is held to the same memory as one fed full batches.
pub const BATCH_OVERHEAD: u64 = (EVENTS_BATCH * std::mem::size_of::<Msg>() + std::mem::size_of::<ShardMsg>()) as u64;

#[derive(Debug)]
struct EvSub {
    sub: SubRef,
    credit: Credit,
    /// The connection's delivery-count and payload bytes sent, as last reported.
    acked: u32,
    acked_bytes: u64,
    /// Payload bytes the home has sent to this link.
    sent_bytes: u64,
    /// The window of events on their way, in bytes.
    window: u64,
    group: Option<String>,
    /// Shared by the channel's subscribers with the same selector text.
    selector: Option<Rc<Selector>>,
    /// Events kept at zero credit (at most `buffer` events and `window` payload
    /// bytes), oldest first.
    held: VecDeque<Msg>,
    held_bytes: u64,
    buffer: u32,
    /// Events this subscriber missed since its last delivery (gap signalling).
    missed: u64,
    /// Deliveries of the publish (or publish batch) being handled, sent as one
    /// [`ShardMsg::DeliverBatch`] when it is done.
    pending: Vec<Msg>,
    /// The delivery count at the end of each batch sent and not yet written by the
    /// connection: each costs [`BATCH_OVERHEAD`] in the window, whatever it holds.
    batch_ends: VecDeque<u32>,
}

impl EvSub {
    /// Credit left, and room in the window of events on their way to the link (a
    /// single event larger than the byte window still goes when nothing is on its way).
    #[inline]
    fn room(&self) -> bool {
        let in_flight = (self.credit.sent.wrapping_sub(self.acked) as i32).max(0) as u64;
        let cost = self.sent_bytes.saturating_sub(self.acked_bytes)
            + in_flight * EVENT_OVERHEAD
            + self.batch_ends.len() as u64 * BATCH_OVERHEAD;
        self.credit.credit > 0 && (cost < self.window || in_flight == 0)
    }

    /// Deliver one event (with the others of this publish, see [`EvSub::flush`]); the
    /// first event after a gap carries `x-opt-sluice-dropped-before` = the number missed.
    fn deliver(&mut self, msg: Msg) {
        let msg = if self.missed > 0 {
            let payload =
                super::message::with_annotation(&msg.payload, "x-opt-sluice-dropped-before", Value::Ulong(self.missed));
            self.missed = 0;
            Msg { payload, received_ms: msg.received_ms }
        } else {
            msg
        };
        self.sent_bytes += msg.payload.len() as u64;
        self.credit.take();
        self.pending.push(msg);
    }

    /// Send the deliveries gathered so far, in order, as one message to the link.
    fn flush(&mut self, out: &mut Vec<ShardMsg>) {
        if self.pending.is_empty() {
            return;
        }
        let msgs = std::mem::replace(&mut self.pending, Vec::with_capacity(EVENTS_BATCH));
        out.push(ShardMsg::DeliverBatch { sub: self.sub, msgs });
        // The batch's own cost counts in the window until the connection has written
        // its last event.
        self.batch_ends.push_back(self.credit.sent);
    }

    /// No credit: hold the event (dropping the oldest beyond the buffer's count, or
    /// beyond the byte window: the newest event is always kept) or drop it.
    /// Returns how many events were dropped.
    /// Hold an event at zero credit (or drop it, counted). A held event is kept beyond
    /// its turn: it gets its own copy of the payload ([`Msg::owned`], made once in
    /// `owned` for all the subscribers that hold it), so it does not keep the read it
    /// came in alive; it counts its record ([`EVENT_OVERHEAD`]) besides its
    /// payload against the window.
    fn hold_or_drop(&mut self, msg: &Msg, owned: &mut Option<Msg>) -> u64 {
        if self.buffer == 0 {
            self.missed += 1;
            return 1;
        }
        // One copy per event, shared by every subscriber that holds it.
        let msg = owned.get_or_insert_with(|| msg.clone().owned()).clone();
        self.held_bytes += msg.payload.len() as u64 + EVENT_OVERHEAD;
        self.held.push_back(msg);
        let mut dropped = 0;
        while self.held.len() > self.buffer as usize || (self.held_bytes > self.window && self.held.len() > 1) {
            let Some(old) = self.held.pop_front() else { break };
            self.held_bytes -= old.payload.len() as u64 + EVENT_OVERHEAD;
            self.missed += 1;
            dropped += 1;
        }
        dropped
    }

    fn flush_held(&mut self, out: &mut Vec<ShardMsg>) {
        while self.room() {
            let Some(m) = self.held.pop_front() else { break };
            self.held_bytes -= m.payload.len() as u64 + EVENT_OVERHEAD;
            self.deliver(m);
        }
        self.flush(out);
    }
}

#[derive(Debug)]
struct GroupRr {
    next: usize,
    members: usize,
}

#[derive(Debug, Default)]
struct EventsChan {
    subs: Vec<EvSub>,
    /// Position of each subscriber in `subs` (a FLOW finds its subscriber without a
    /// walk: a stream of FLOWs on one link cost a walk over every subscriber each).
    by_sub: HashMap<SubRef, usize>,
    /// Each group's round-robin position and member count (it goes with its last
    /// member).
    groups: HashMap<String, GroupRr>,
    counters: Counters,
    /// Results of the selectors shared by several subscribers, for the event being
    /// published (kept between publishes for its allocation).
    shared_results: HashMap<*const Selector, bool>,
}

impl EventsChan {
    fn sub_mut(&mut self, sub: SubRef) -> Option<&mut EvSub> {
        #[cfg(test)]
        SUB_LOOKUPS.with(|n| n.set(n.get() + 1));
        let i = *self.by_sub.get(&sub)?;
        self.subs.get_mut(i)
    }

    /// Subscriber `sub` is gone; whether it was one. The last subscriber takes its
    /// place, so a detach costs one move, not a walk over the channel.
    fn unsubscribe(&mut self, sub: SubRef) -> bool {
        #[cfg(test)]
        SUB_LOOKUPS.with(|n| n.set(n.get() + 1));
        let Some(i) = self.by_sub.remove(&sub).filter(|i| *i < self.subs.len()) else { return false };
        let gone = self.subs.swap_remove(i);
        if let Some(moved) = self.subs.get(i) {
            self.by_sub.insert(moved.sub, i);
        }
        if let Some(g) = gone.group {
            if let Some(rr) = self.groups.get_mut(&g) {
                rr.members -= 1;
                if rr.members == 0 {
                    self.groups.remove(&g);
                }
            }
        }
        true
    }

    fn subscribe(&mut self, sub: SubRef, spec: SubSpec, out: &mut Vec<ShardMsg>) {
        self.by_sub.insert(sub, self.subs.len());
        if let Some(g) = &spec.group {
            match self.groups.get_mut(g) {
                Some(rr) => rr.members += 1,
                None => {
                    self.groups.insert(g.clone(), GroupRr { next: 0, members: 1 });
                }
            }
        }
        self.subs.push(EvSub {
            sub,
            credit: Credit::default(),
            acked: 0,
            acked_bytes: 0,
            sent_bytes: 0,
            window: spec.events_in_flight_bytes,
            group: spec.group,
            selector: spec.selector.map(|sel| {
                // A subscriber with the same selector text shares its selector.
                self.subs
                    .iter()
                    .filter_map(|s| s.selector.as_ref())
                    .find(|s| s.text() == sel.text())
                    .cloned()
                    .unwrap_or_else(|| Rc::new(sel))
            }),
            held: VecDeque::new(),
            held_bytes: 0,
            buffer: spec.events_buffer,
            missed: 0,
            pending: Vec::new(),
            batch_ends: VecDeque::new(),
        });
        out.push(ShardMsg::SubscribeDone { sub, result: Ok(None) });
    }

    /// Send every subscriber what the publishes since the last flush gave it.
    fn flush(&mut self, out: &mut Vec<ShardMsg>) {
        for s in &mut self.subs {
            s.flush(out);
        }
    }

    /// Fan out: each subscriber without a group gets the event, each group gets it
    /// once (round-robin over members with credit); no credit means held (up to the
    /// subscriber's buffer) or dropped, counted. Deliveries wait in each subscriber's
    /// batch until [`EventsChan::flush`].
    fn publish(&mut self, msg: Msg, stats: &mut HomeStats) {
        // One plain subscriber (1->1): the event moves to it, no reference count.
        if let [s] = &mut self.subs[..] {
            if s.group.is_none() && s.selector.is_none() {
                if s.held.is_empty() && s.room() {
                    self.counters.delivered += 1;
                    s.deliver(msg);
                } else {
                    stats.events_dropped_no_credit += s.hold_or_drop(&msg, &mut None);
                }
                return;
            }
        }
        let view = self.subs.iter().any(|s| s.selector.is_some()).then(|| SelectorView::new(&msg.payload));
        // The event's own copy, made when a subscriber first holds it.
        let mut owned: Option<Msg> = None;
        // A selector shared by several subscribers is evaluated once per event.
        let mut shared = std::mem::take(&mut self.shared_results);
        shared.clear();
        let mut matches = |s: &EvSub| match (&s.selector, &view) {
            (Some(sel), Some(v)) if Rc::strong_count(sel) > 1 => {
                *shared.entry(Rc::as_ptr(sel)).or_insert_with(|| sel.matches(v))
            }
            (Some(sel), Some(v)) => sel.matches(v),
            _ => true,
        };
        // Groups and their matching members, in order of first appearance: one pass
        // with a map, so many distinct groups cost O(subscribers), not O(groups x
        // subscribers).
        let mut groups: Vec<(usize, Vec<usize>)> = Vec::new();
        if self.subs.iter().any(|s| s.group.is_some()) {
            let mut at: HashMap<&str, usize> = HashMap::default();
            for (i, s) in self.subs.iter().enumerate() {
                let Some(g) = s.group.as_deref() else { continue };
                let k = *at.entry(g).or_insert_with(|| {
                    groups.push((i, Vec::new()));
                    groups.len() - 1
                });
                if matches(s) {
                    groups[k].1.push(i);
                }
            }
        }
        for i in 0..self.subs.len() {
            let s = &self.subs[i];
            if s.group.is_some() || !matches(s) {
                continue;
            }
            let s = &mut self.subs[i];
            if s.held.is_empty() && s.room() {
                self.counters.delivered += 1;
                s.deliver(msg.clone());
            } else {
                stats.events_dropped_no_credit += s.hold_or_drop(&msg, &mut owned);
            }
        }
        self.shared_results = shared;
        for (first, members) in groups {
            if members.is_empty() {
                continue;
            }
            let Some(g) = self.subs[first].group.as_deref() else { continue };
            let Some(rr) = self.groups.get_mut(g).map(|rr| &mut rr.next) else { continue };
            let pick = (0..members.len()).map(|k| members[(*rr + k) % members.len()]).find(|i| self.subs[*i].room());
            *rr = rr.wrapping_add(1);
            match pick {
                Some(i) => {
                    self.counters.delivered += 1;
                    self.subs[i].deliver(msg.clone());
                }
                None => {
                    stats.events_dropped_no_credit += 1;
                    for i in members {
                        self.subs[i].missed += 1;
                    }
                }
            }
        }
    }
}

// ------------------------------------------------------------------ events-store

#[derive(Debug)]
struct StoredEvent {
    seq: u64,
    ts_ms: u64,
    msg: Msg,
    /// Segment holding its record.
    seg: u64,
}

#[derive(Debug)]
struct Member {
    sub: SubRef,
    ring: Arc<StoreRing>,
    /// Lossless (its reader's `hold`: a group's members are all lossless or none;
    /// their connections report how far they sent, `Consumed`): a lower bound of the first event given to it and not reported sent;
    /// `None` when it has sent everything it was given. Its ring holds events in
    /// rising order (events given again, [`Reader::redo`], go only to a member that
    /// sent everything), so "sent everything before `n`" moves the bound to `n`.
    unsent_from: Option<u64>,
    /// Lossless: the last event given to it.
    last_given: u64,
}

impl Member {
    fn new(sub: SubRef, ring: Arc<StoreRing>) -> Self {
        Member { sub, ring, unsent_from: None, last_given: 0 }
    }

    /// It may take event `seq`, given before to a member that left: a member with
    /// nothing unsent (always, deliver-first), or one whose ring stays in rising
    /// order (`seq` after the last it was given).
    fn takes(&self, seq: u64) -> bool {
        self.unsent_from.is_none() || seq > self.last_given
    }

    /// Lossless: event `seq` went into its ring.
    fn given(&mut self, seq: u64) {
        self.unsent_from.get_or_insert(seq);
        self.last_given = seq;
    }

    /// Its connection sent everything it was given before `next_seq`.
    fn sent_before(&mut self, next_seq: u64) {
        if let Some(from) = &mut self.unsent_from {
            if next_seq > self.last_given {
                self.unsent_from = None;
            } else {
                *from = (*from).max(next_seq);
            }
        }
    }
}

/// One cursor over the log: a subscription, or a consumer group sharing one.
#[derive(Debug)]
struct Reader {
    members: Vec<Member>,
    rr: usize,
    next: u64,
    group: Option<String>,
    selector: Option<Selector>,
    durable: Option<String>,
    waiting: bool,
    /// The event the reader waits to place while `waiting`.
    waiting_on: Option<u64>,
    /// Lossless: wait at a full window; a durable cursor moves only past what the
    /// connection reports as sent.
    hold: bool,
    /// Its walk was cut at [`FEED_SLICE`]; the next tick goes on with it.
    resume: bool,
    /// Events a member of a group was given and never sent when it left, in rising
    /// order: given to the members that stay before any new event.
    redo: VecDeque<u64>,
}

impl Reader {
    /// Put event `seq` in the next member's ring that has room (members take turns).
    /// `again`: an event given before, to a member that left; only members that may
    /// take it out of order get it. False when none has room: the reader waits.
    fn place(&mut self, seq: u64, msg: &Msg, again: bool, out: &mut Vec<ShardMsg>) -> bool {
        if self.push(seq, msg, again, out) {
            return true;
        }
        if again && !self.members.iter().any(|m| m.takes(seq)) {
            // Every member has events it has not sent: the first to report it sent
            // them all takes this one (`consumed`).
            return false;
        }
        // Every ring that may take it is full: ask the connections to say when one has
        // room. A connection that emptied a ring between the push and the flag saw no
        // flag and will not say (the ring's only producer is this home, so one that
        // has room now takes the event): look again after the flag (the connection
        // looks at the flag after its pop; the fences order both).
        for m in &self.members {
            m.ring.home_waiting.store(true, Ordering::SeqCst);
        }
        std::sync::atomic::fence(Ordering::SeqCst);
        if self.push(seq, msg, again, out) {
            for m in &self.members {
                m.ring.home_waiting.store(false, Ordering::SeqCst);
            }
            return true;
        }
        // Lossless links wait for room; otherwise the connection decides whether this
        // is a credit stall (credit 0: detach) or a slow consumer (wait for room).
        self.waiting = true;
        self.waiting_on = Some(seq);
        if !self.hold {
            for m in &self.members {
                out.push(ShardMsg::RingFull { sub: m.sub });
            }
        }
        false
    }

    /// Put the event in the next member's ring that has room and may take it.
    fn push(&mut self, seq: u64, msg: &Msg, again: bool, out: &mut Vec<ShardMsg>) -> bool {
        let n = self.members.len();
        for k in 0..n {
            let m = &mut self.members[(self.rr + k) % n];
            if again && !m.takes(seq) {
                continue;
            }
            if m.ring.ring.push((seq, msg.clone())).is_ok() {
                // Alone in the ring after the push: the connection may have found it
                // empty and stopped taking (asked before the push, "was it empty?"
                // missed a connection that took the last one in between, and the
                // window stopped for good with credit left).
                if m.ring.ring.len() == 1 {
                    out.push(ShardMsg::RingReady { sub: m.sub });
                }
                if self.hold {
                    m.given(seq);
                }
                self.rr = self.rr.wrapping_add(1);
                return true;
            }
        }
        false
    }

    /// A deliver-first (not lossless) durable cursor at the reader's position.
    fn deliver_first_cursor(
        &self,
        cursors: &mut HashMap<String, Cursor>,
        journal: &RefCell<Journal>,
        key: &ChannelKey,
    ) {
        if let (Some(id), false) = (&self.durable, self.hold) {
            if let Some(c) = cursors.get_mut(id) {
                c.next = self.next;
            }
            journal.borrow_mut().cursor(key, id, self.next);
        }
    }

    /// How far a durable cursor may go: before the first event not yet sent.
    fn safe_next(&self) -> u64 {
        let mut next = self.redo.front().map_or(self.next, |s| self.next.min(*s));
        for m in &self.members {
            if let Some(from) = m.unsent_from {
                next = next.min(from);
            }
        }
        next
    }
}

/// The longest one feed walks past events its reader's selector skips before it lets
/// the shard serve everyone else; the walk goes on at the next tick (every 20 ms). An
/// attach at `first` with a selector that matches nothing in a large log would
/// otherwise hold its shard for the whole walk.
const FEED_SLICE: std::time::Duration = std::time::Duration::from_millis(5);

#[derive(Debug)]
struct StoreChan {
    key: ChannelKey,
    journal: Rc<RefCell<Journal>>,
    /// The home's flag: some reader's walk was cut at its slice.
    feeds_pending: Rc<Cell<bool>>,
    /// Bytes of the events in the log (for retention).
    bytes: u64,
    log: VecDeque<StoredEvent>,
    next_seq: u64,
    readers: Vec<Reader>,
    /// The reader of each member and of each group (positions in `readers`): a
    /// member's report or detach finds its reader without a walk over the channel.
    by_sub: HashMap<SubRef, usize>,
    by_group: HashMap<String, usize>,
    cursors: HashMap<String, Cursor>,
    live: HashSet<String>,
    /// Attaches waiting for a durable identity that is still held.
    parked: Vec<Parked>,
    counters: Counters,
    /// The selector view of the last event a reader's selector read (by sequence):
    /// the readers fed one new event share one parse of it.
    /// Boxed: an empty slot costs a pointer, not a view, in every channel.
    view: Option<(u64, Box<SelectorView>)>,
}

/// A durable subscription's position, and when it was last seen attached (or let
/// go): it is deleted once nobody attached it for the expiry period.
#[derive(Debug, Clone, Copy)]
struct Cursor {
    next: u64,
    seen_ms: u64,
}

#[derive(Debug)]
struct Parked {
    sub: SubRef,
    spec: SubSpec,
    until_ms: u64,
}

impl StoreChan {
    fn new(key: ChannelKey, journal: Rc<RefCell<Journal>>, feeds_pending: Rc<Cell<bool>>) -> Self {
        StoreChan {
            key,
            journal,
            feeds_pending,
            bytes: 0,
            log: VecDeque::new(),
            next_seq: 1,
            readers: Vec::new(),
            by_sub: HashMap::default(),
            by_group: HashMap::default(),
            cursors: HashMap::default(),
            live: HashSet::default(),
            parked: Vec::new(),
            counters: Counters::default(),
            view: None,
        }
    }

    fn first_seq(&self) -> u64 {
        self.log.front().map_or(self.next_seq, |e| e.seq)
    }

    /// Where in the log the first event at or after `seq` is. Sequence numbers rise
    /// through the log but may skip: events of a failed write (rejected to their
    /// publishers) or cut by `store repair` are missing from it after a restart. So
    /// the position `seq - first` is checked before it is trusted.
    fn index_of(&self, seq: u64) -> usize {
        let guess = seq.saturating_sub(self.first_seq());
        if let Some(e) = usize::try_from(guess).ok().and_then(|g| self.log.get(g)) {
            if e.seq == seq {
                return guess as usize;
            }
        }
        self.log.partition_point(|e| e.seq < seq)
    }

    fn publish(&mut self, msg: Msg, done: Option<ShardMsg>, out: &mut Vec<ShardMsg>) {
        let msg = msg.owned();
        let seq = self.next_seq;
        self.next_seq = self.next_seq.wrapping_add(1);
        // An event's time is its arrival on the wall clock, never before the time of
        // the event before it: after the wall clock is stepped back, the log's times
        // stay in order, so a `time:` position still finds the first event at or after
        // it (a binary search over times out of order could skip every event).
        let ts_ms = self.log.back().map_or(msg.received_ms, |e| e.ts_ms.max(msg.received_ms));
        let mut j = self.journal.borrow_mut();
        let seg = j.store_publish(&self.key, seq, ts_ms, &msg.payload);
        if let Some(done) = done {
            j.after_commit(done, out);
        }
        drop(j);
        self.bytes += msg.payload.len() as u64;
        self.log.push_back(StoredEvent { seq, ts_ms, msg, seg });
        for i in 0..self.readers.len() {
            self.feed(i, out);
        }
    }

    /// Drop the oldest events beyond the retention age (against `wall_ms`, the wall
    /// clock of their times) or size.
    fn trim(&mut self, wall_ms: u64, r: Retention) {
        while let Some(front) = self.log.front() {
            let too_old = r.max_age_ms > 0 && wall_ms.saturating_sub(front.ts_ms) > r.max_age_ms;
            let too_big = r.max_bytes > 0 && self.bytes > r.max_bytes;
            if !(too_old || too_big) {
                break;
            }
            if let Some(e) = self.log.pop_front() {
                self.bytes -= e.msg.payload.len() as u64;
                self.journal.borrow_mut().unref(e.seg);
                if self.view.as_ref().is_some_and(|(seq, _)| *seq == e.seq) {
                    self.view = None;
                }
            }
        }
    }

    /// The cursor of a durable subscription that is attached, or just let go, at
    /// `now_ms` (its expiry clock starts again).
    fn set_cursor(&mut self, id: &str, next: u64, now_ms: u64) {
        match self.cursors.get_mut(id) {
            Some(c) => *c = Cursor { next, seen_ms: now_ms },
            None => {
                self.cursors.insert(id.to_owned(), Cursor { next, seen_ms: now_ms });
            }
        }
        self.journal.borrow_mut().cursor(&self.key, id, next);
    }

    /// Delete the durable subscriptions that nobody attached for `expiry_ms`; the
    /// attached ones are seen now. Returns how many went.
    fn expire_cursors(&mut self, now_ms: u64, expiry_ms: u64) -> usize {
        if self.cursors.is_empty() {
            return 0;
        }
        let attached: HashSet<&str> = self
            .readers
            .iter()
            .filter_map(|r| r.durable.as_deref())
            .chain(self.parked.iter().filter_map(|p| p.spec.durable.as_deref()))
            .collect();
        let mut expired = Vec::new();
        for (id, c) in self.cursors.iter_mut() {
            if attached.contains(id.as_str()) {
                c.seen_ms = now_ms;
            } else if now_ms.saturating_sub(c.seen_ms) >= expiry_ms {
                expired.push(id.clone());
            }
        }
        for id in &expired {
            self.cursors.remove(id);
            self.journal.borrow_mut().forget_cursor(&self.key, id);
            tracing::info!(
                channel = %self.key.name,
                subscription = %id,
                "durable subscription deleted: not attached for the expiry period"
            );
        }
        expired.len()
    }

    fn start_seq(&self, start: StartPos) -> u64 {
        match start {
            StartPos::NewOnly => self.next_seq,
            StartPos::First => self.first_seq(),
            StartPos::Last => self.log.back().map_or(self.next_seq, |e| e.seq),
            StartPos::Sequence(n) => n.max(1).max(self.first_seq()).min(self.next_seq),
            StartPos::Time(t) => {
                let i = self.log.partition_point(|e| e.ts_ms < t);
                self.log.get(i).map_or(self.next_seq, |e| e.seq)
            }
        }
    }

    /// `durable_room`: the shard may keep one more durable subscription.
    fn subscribe(&mut self, sub: SubRef, mut spec: SubSpec, durable_room: bool, now_ms: u64, out: &mut Vec<ShardMsg>) {
        // A durable consumer group keeps one cursor, the group's, whichever member
        // attaches or leaves (members have their own link names).
        if let (Some(g), Some(_)) = (&spec.group, &spec.durable) {
            spec.durable = Some(group_durable_id(g));
        }
        // A cursor an older sluice kept under this subscription's former identity is
        // taken over, once, before anything looks the identity up.
        if let (Some(id), Some(old), None) = (&spec.durable, &spec.legacy_durable, &spec.group) {
            if !self.cursors.contains_key(id) && !self.live.contains(old) {
                if let Some(c) = self.cursors.remove(old) {
                    self.journal.borrow_mut().move_cursor(&self.key, old, id, c.next);
                    self.cursors.insert(id.clone(), c);
                }
            }
        }
        if let Some(id) = &spec.durable {
            if !self.cursors.contains_key(id) && !durable_room {
                let why = "too many durable subscriptions on this shard".to_owned();
                out.push(ShardMsg::SubscribeDone { sub, result: Err(("amqp:resource-limit-exceeded", why)) });
                return;
            }
        }
        if let Some(id) = spec.durable.as_ref().filter(|_| spec.group.is_none()) {
            if self.live.contains(id) {
                if self.parked.len() < DURABLE_PARKED_MAX {
                    self.parked.push(Parked { sub, spec, until_ms: now_ms + DURABLE_TAKEOVER_MS });
                } else {
                    out.push(in_use(sub));
                }
                return;
            }
            self.live.insert(id.clone());
        }
        // A group's members share one cursor: lossless for all or for none (a member
        // that does not report would let a lossless cursor pass what it holds; a
        // lossless one in a deliver-first group would be detached at a full window).
        let joins = spec.group.as_ref().and_then(|g| self.by_group.get(g)).and_then(|i| self.readers.get(*i));
        if joins.is_some_and(|r| r.hold != spec.hold) {
            let why = "x-opt-sluice-stall differs from the consumer group's members".to_owned();
            out.push(ShardMsg::SubscribeDone { sub, result: Err(("amqp:invalid-field", why)) });
            return;
        }
        let ring = Arc::new(StoreRing {
            ring: ArrayQueue::new(spec.max_unsettled.max(1) as usize),
            home_waiting: AtomicBool::new(false),
        });
        out.push(ShardMsg::SubscribeDone { sub, result: Ok(Some(ring.clone())) });
        let member = Member::new(sub, ring);
        // A group shares one cursor; its first member's start position sets it.
        if let Some(&i) = spec.group.as_ref().and_then(|g| self.by_group.get(g)).filter(|i| **i < self.readers.len()) {
            self.by_sub.insert(sub, i);
            self.readers[i].members.push(member);
            self.feed(i, out);
            return;
        }
        let next = match spec.durable.as_ref().and_then(|id| self.cursors.get(id)) {
            Some(c) => c.next.max(self.first_seq()),
            None => self.start_seq(spec.start),
        };
        if let Some(id) = &spec.durable {
            self.set_cursor(id, next, now_ms);
        }
        let i = self.readers.len();
        self.by_sub.insert(sub, i);
        if let Some(g) = &spec.group {
            self.by_group.insert(g.clone(), i);
        }
        self.readers.push(Reader {
            members: vec![member],
            rr: 0,
            next,
            group: spec.group,
            selector: spec.selector,
            durable: spec.durable,
            waiting: false,
            waiting_on: None,
            hold: spec.hold,
            resume: false,
            redo: VecDeque::new(),
        });
        self.feed(i, out);
    }

    /// Move events from the log into the reader's ring(s). Positions are taken
    /// (and a durable cursor advanced) as they enter a ring: deliver-first.
    fn feed(&mut self, i: usize, out: &mut Vec<ShardMsg>) {
        let r = &self.readers[i];
        if r.waiting || r.members.is_empty() {
            return;
        }
        if !self.readers[i].redo.is_empty() {
            if !self.feed_redo(i, out) {
                return;
            }
            // Given again: a deliver-first cursor, set back to the first of them when
            // their member left, is where the reader is again.
            self.readers[i].deliver_first_cursor(&mut self.cursors, &self.journal, &self.key);
        }
        let mut at = self.index_of(self.readers[i].next);
        let r = &mut self.readers[i];
        let started = std::time::Instant::now();
        // A reader's position is always one past the last event it took, so it
        // follows the log's sequence numbers across any gap.
        while let Some(ev) = self.log.get(at) {
            if let Some(sel) = &r.selector {
                if self.view.as_ref().is_none_or(|(seq, _)| *seq != ev.seq) {
                    self.view = Some((ev.seq, Box::new(SelectorView::new(&ev.msg.payload))));
                }
                if !self.view.as_ref().is_some_and(|(_, v)| sel.matches(v.as_ref())) {
                    r.next = ev.seq + 1;
                    at += 1;
                    if started.elapsed() >= FEED_SLICE {
                        r.resume = true;
                        self.feeds_pending.set(true);
                        return;
                    }
                    continue;
                }
            }
            if !r.place(ev.seq, &ev.msg, false, out) {
                break;
            }
            r.next = ev.seq + 1;
            at += 1;
            self.counters.delivered += 1;
            // Deliver-first: the position is taken as the event enters the window.
            r.deliver_first_cursor(&mut self.cursors, &self.journal, &self.key);
        }
    }

    /// Give the reader's members the events given to a member that left (in order),
    /// before any new event. False while some wait: no member may take the first now.
    fn feed_redo(&mut self, i: usize, out: &mut Vec<ShardMsg>) -> bool {
        while let Some(&seq) = self.readers[i].redo.front() {
            let at = self.index_of(seq);
            let r = &mut self.readers[i];
            // Gone by retention meanwhile, as for any reader behind it.
            if let Some(ev) = self.log.get(at).filter(|e| e.seq == seq) {
                if !r.place(seq, &ev.msg, true, out) {
                    return false;
                }
            }
            r.redo.pop_front();
        }
        true
    }

    /// Lossless links: the connection sent everything before `next_seq` that it was
    /// given. A durable cursor moves up to the first event some member has not sent.
    fn consumed(&mut self, sub: SubRef, next_seq: u64, now_ms: u64, out: &mut Vec<ShardMsg>) {
        let Some(i) = self.reader_of(sub) else { return };
        let r = &mut self.readers[i];
        if let Some(m) = r.members.iter_mut().find(|m| m.sub == sub) {
            m.sent_before(next_seq);
        }
        if let (Some(id), true) = (&r.durable, r.hold) {
            let next = r.safe_next();
            let current = self.cursors.get(id).map_or(0, |c| c.next);
            if next > current {
                let id = id.clone();
                self.set_cursor(&id, next, now_ms);
            }
        }
        // A member that sent everything may take the events given again.
        let r = &mut self.readers[i];
        let first = r.redo.front().copied();
        if first.is_some_and(|seq| r.members.iter().any(|m| m.sub == sub && m.takes(seq))) {
            r.waiting = false;
            self.feed(i, out);
        }
    }

    /// Parked attaches whose holder did not let go in time are refused.
    fn expire_parked(&mut self, now_ms: u64, out: &mut Vec<ShardMsg>) {
        if self.parked.is_empty() {
            return;
        }
        self.parked.retain(|p| {
            if p.until_ms <= now_ms {
                out.push(in_use(p.sub));
                return false;
            }
            true
        });
    }

    fn unsubscribe(
        &mut self,
        sub: SubRef,
        stalled: bool,
        resume_at: Option<u64>,
        now_ms: u64,
        out: &mut Vec<ShardMsg>,
    ) {
        if let Some(p) = self.parked.iter().position(|p| p.sub == sub) {
            // Gone while it waited for the identity.
            self.parked.remove(p);
            return;
        }
        let Some(i) = self.by_sub.remove(&sub).filter(|i| *i < self.readers.len()) else { return };
        let r = &mut self.readers[i];
        let gone = r.members.iter().position(|m| m.sub == sub).map(|k| r.members.remove(k));
        // What it was given and never sent: the event its connection held for the
        // session window or took from the ring last (`resume_at`), and its ring's.
        let mut unsent: Vec<u64> = resume_at.into_iter().collect();
        while let Some((seq, _)) = gone.as_ref().and_then(|m| m.ring.ring.pop()) {
            unsent.push(seq);
        }
        if stalled {
            // The event that found the window full is lost with it (the reference),
            // if the reader still waits to place it (another member's room may have
            // let it go on meanwhile).
            if let (true, Some(seq)) = (r.waiting, r.waiting_on) {
                if r.redo.front() == Some(&seq) {
                    r.redo.pop_front();
                } else if seq >= r.next {
                    r.next = seq + 1;
                }
            }
            r.waiting = false;
        }
        if !r.members.is_empty() {
            // A group goes on: the members that stay get what this one never sent,
            // before any new event (before, it was lost to the group).
            if !unsent.is_empty() {
                let mut redo: Vec<u64> = r.redo.drain(..).chain(unsent).collect();
                redo.sort_unstable();
                redo.dedup();
                r.redo = redo.into();
            }
        } else {
            // The last one: what was in the window but never sent is sent again on
            // re-attach (a durable cursor), unless the window stalled.
            let first_unsent = if stalled { None } else { unsent.iter().min().copied() };
            let redo = r.redo.front().copied();
            r.next = [Some(r.next), first_unsent, redo].into_iter().flatten().min().unwrap_or(r.next);
            r.redo.clear();
        }
        if !r.redo.is_empty() && !r.waiting {
            self.feed(i, out);
        }
        let r = &self.readers[i];
        if let Some(id) = r.durable.clone() {
            if !r.hold {
                let next = r.safe_next();
                self.set_cursor(&id, next, now_ms);
            } else if let Some(c) = self.cursors.get_mut(&id) {
                c.seen_ms = now_ms;
            }
            self.live.remove(&id);
            if self.readers[i].members.is_empty() {
                self.drop_reader(i);
            }
            // The identity is free: the first attach waiting for it takes over.
            if let Some(p) = self.parked.iter().position(|p| p.spec.durable.as_deref() == Some(id.as_str())) {
                let p = self.parked.remove(p);
                self.subscribe(p.sub, p.spec, true, now_ms, out);
            }
            return;
        }
        if self.readers[i].members.is_empty() {
            self.drop_reader(i);
        }
    }

    /// The reader member `sub` belongs to.
    fn reader_of(&self, sub: SubRef) -> Option<usize> {
        #[cfg(test)]
        SUB_LOOKUPS.with(|n| n.set(n.get() + 1));
        self.by_sub.get(&sub).copied().filter(|i| *i < self.readers.len())
    }

    /// Reader `i` has no members left: the last reader takes its place.
    fn drop_reader(&mut self, i: usize) {
        let gone = self.readers.swap_remove(i);
        if let Some(g) = &gone.group {
            self.by_group.remove(g);
        }
        if let Some(moved) = self.readers.get(i) {
            for m in &moved.members {
                self.by_sub.insert(m.sub, i);
            }
            if let Some(g) = &moved.group {
                self.by_group.insert(g.clone(), i);
            }
        }
    }
}

/// A publish refused by a limit: rejected when the producer waits for the outcome,
/// dropped and counted when it sent it pre-settled.
fn refuse_publish(ack: Option<super::PublishAck>, why: PublishRefusal, stats: &mut HomeStats, out: &mut Vec<ShardMsg>) {
    match ack {
        Some(ack) => out.push(ShardMsg::PublishDone { ack, result: Err(why) }),
        None => stats.transfers_in_dropped += 1,
    }
}

/// A queue delivery's ack deadline was set: the queue's earliest (`next`) and the
/// home's follow it when it comes first.
fn lower_deadline(next: &mut u64, earliest: &Cell<u64>, deadline: u64) {
    if deadline != 0 && (*next == 0 || deadline < *next) {
        *next = deadline;
        let e = earliest.get();
        if e == 0 || deadline < e {
            earliest.set(deadline);
        }
    }
}

/// The durable identity of a consumer group's shared cursor (link-derived identities
/// hold only `[A-Za-z0-9_-]`, so the `:` keeps the two apart).
fn group_durable_id(group: &str) -> String {
    format!("group:{group}")
}

fn in_use(sub: SubRef) -> ShardMsg {
    ShardMsg::SubscribeDone { sub, result: Err(("amqp:not-allowed", "durable subscription in use".into())) }
}

/// The channel under `key`, created by `make` when missing. Looked up before it is
/// entered: `entry` needs an owned key, and cloning one touches the name's reference
/// count, a cache line shared with the publishing shard, on every message.
fn channel<'a, T>(map: &'a mut HashMap<ChannelKey, T>, key: &ChannelKey, make: impl FnOnce() -> T) -> &'a mut T {
    if !map.contains_key(key) {
        map.insert(key.clone(), make());
    }
    match map.get_mut(key) {
        Some(c) => c,
        None => unreachable_channel(),
    }
}

/// A channel inserted a moment ago is missing: cannot happen; never panic over it.
#[cold]
fn unreachable_channel() -> ! {
    std::process::abort()
}

// ------------------------------------------------------------------ commands / queries

#[derive(Debug)]
struct Responder {
    sub: SubRef,
    credit: Credit,
    presettled: bool,
    /// Requests on their way to the responder, and the most it may have
    /// (MaxUnsettledPerLink): sent unsettled and not yet settled by it, or sent
    /// pre-settled and not yet written out by its connection. A responder that never
    /// settles, or never reads, stops getting requests instead of piling them up.
    unsettled: u32,
    max_unsettled: u32,
    /// The outstanding-messages watermark (0: none), for a responder receiving
    /// unsettled: requests it has not settled.
    max_out_msgs: u32,
    /// The outstanding-bytes watermark (0: none), for a responder receiving
    /// unsettled, and the bytes of the requests it has not settled.
    max_out_bytes: u64,
    unsettled_bytes: u64,
    /// In the turns.
    queued: bool,
    /// Held back by its byte watermark, with room for this many bytes (in the
    /// channel's `byte_blocked`).
    blocked: Option<u64>,
}

impl Responder {
    /// The byte watermark, as for queue consumers: a request fits while the unsettled
    /// bytes stay within it, and a single larger one goes when nothing is unsettled.
    fn fits(&self, size: u64) -> bool {
        fits_byte_watermark(self.presettled, self.max_out_bytes, self.unsettled, self.unsettled_bytes, size)
    }
}

impl Competitor for Responder {
    fn sub(&self) -> SubRef {
        self.sub
    }
    fn room(&self) -> u32 {
        let room = self.credit.credit.min(self.max_unsettled.saturating_sub(self.unsettled));
        if !self.presettled && self.max_out_msgs > 0 {
            room.min(self.max_out_msgs.saturating_sub(self.unsettled))
        } else {
            room
        }
    }
    fn credit_mut(&mut self) -> &mut Credit {
        &mut self.credit
    }
    fn queued(&mut self) -> &mut bool {
        &mut self.queued
    }
}

#[derive(Debug)]
struct RpcChan {
    key: ChannelKey,
    responders: Turns<Responder>,
    waiting: VecDeque<(Msg, u64)>,
    /// Payload bytes of `waiting`.
    waiting_bytes: u64,
    /// Responders held back by their byte watermarks, by room: one gets its turn
    /// again when a request that fits it is at the front (or on its own settlement).
    byte_blocked: std::collections::BTreeSet<(u64, SubRef)>,
    counters: Counters,
}

impl RpcChan {
    fn new(key: ChannelKey) -> Self {
        RpcChan {
            key,
            responders: Turns::default(),
            waiting: VecDeque::new(),
            waiting_bytes: 0,
            byte_blocked: std::collections::BTreeSet::new(),
            counters: Counters::default(),
        }
    }

    /// Responder `sub` is out of `byte_blocked` (it settled, or it is going).
    fn forget_blocked(&mut self, sub: SubRef) {
        if let Some(room) = self.responders.get_mut(sub).and_then(|r| r.blocked.take()) {
            self.byte_blocked.remove(&(room, sub));
        }
    }

    /// The responder held back by its byte watermark with the most room gets its turn
    /// again when a request of `size` bytes fits it (one at a time, as for queues).
    fn unblock(&mut self, size: u64) {
        while let Some(&(room, sub)) = self.byte_blocked.last().filter(|(room, _)| *room >= size) {
            self.byte_blocked.remove(&(room, sub));
            if let Some(r) = self.responders.get_mut(sub) {
                r.blocked = None;
            }
            self.responders.wake(sub);
            if self.responders.get_mut(sub).is_some_and(|r| r.queued) {
                break;
            }
        }
    }

    /// Requests whose deadline passed while no responder took them (their requesters
    /// have answered them already).
    fn drop_expired(&mut self, now_ms: u64, stats: &mut HomeStats) {
        let bytes = &mut self.waiting_bytes;
        self.waiting.retain(|(m, deadline)| {
            let live = *deadline > now_ms;
            if !live {
                *bytes = bytes.saturating_sub(m.payload.len() as u64);
                stats.transfers_in_dropped += 1;
            }
            live
        });
    }

    fn subscribe(&mut self, sub: SubRef, spec: &SubSpec, now_ms: u64, out: &mut Vec<ShardMsg>) {
        self.responders.add(Responder {
            sub,
            credit: Credit::default(),
            presettled: spec.presettled,
            unsettled: 0,
            max_unsettled: spec.max_unsettled.max(1),
            max_out_msgs: spec.max_outstanding_messages,
            max_out_bytes: spec.max_outstanding_bytes,
            unsettled_bytes: 0,
            queued: false,
            blocked: None,
        });
        out.push(ShardMsg::SubscribeDone { sub, result: Ok(None) });
        let mut stats = HomeStats::default();
        self.dispatch(now_ms, &mut stats, out);
    }

    /// The oldest requests go first when too many wait (their requesters' deadlines
    /// answer them); the newest always stays.
    fn bound(&mut self, stats: &mut HomeStats) {
        while self.waiting.len() > RPC_WAITING_MAX
            || (self.waiting_bytes > RPC_WAITING_MAX_BYTES && self.waiting.len() > 1)
        {
            let Some((old, _)) = self.waiting.pop_front() else { break };
            self.waiting_bytes = self.waiting_bytes.saturating_sub(old.payload.len() as u64);
            stats.transfers_in_dropped += 1;
        }
    }

    /// Requests go round-robin to responders with credit; expired ones are dropped.
    /// A connection that cannot send one gives it back ([`ShardMsg::RpcReturned`]).
    fn dispatch(&mut self, now_ms: u64, stats: &mut HomeStats, out: &mut Vec<ShardMsg>) {
        while let Some((msg, deadline)) = self.waiting.pop_front() {
            self.waiting_bytes = self.waiting_bytes.saturating_sub(msg.payload.len() as u64);
            if deadline <= now_ms {
                stats.transfers_in_dropped += 1;
                continue;
            }
            // The next responder that may take it (turns of those that could not
            // take any more end here).
            let size = msg.payload.len() as u64;
            self.unblock(size);
            let mut pick = None;
            while let Some(sub) = self.responders.next() {
                match self.responders.get_mut(sub).map(|r| (r.room() > 0, r.fits(size))) {
                    Some((true, true)) => {
                        self.forget_blocked(sub);
                        pick = Some(sub);
                        break;
                    }
                    // Room, but not for this many bytes: out until a request that fits
                    // it, or a settlement (or credit) of its own.
                    Some((true, false)) => {
                        self.forget_blocked(sub);
                        if let Some(r) = self.responders.get_mut(sub) {
                            let room = r.max_out_bytes.saturating_sub(r.unsettled_bytes);
                            r.blocked = Some(room);
                            self.byte_blocked.insert((room, sub));
                        }
                        self.responders.leave(sub);
                    }
                    _ => {
                        self.responders.end_turn(sub);
                    }
                }
            }
            let Some(r) = pick.and_then(|sub| self.responders.get_mut(sub)) else {
                self.waiting_bytes += msg.payload.len() as u64;
                self.waiting.push_front((msg, deadline));
                break;
            };
            r.credit.take();
            r.unsettled += 1;
            if !r.presettled {
                r.unsettled_bytes += size;
            }
            let sub = r.sub;
            out.push(ShardMsg::DeliverRequest {
                sub,
                key: self.key.clone(),
                msg,
                deadline_ms: deadline,
                settled: r.presettled,
            });
            self.responders.end_turn(sub);
        }
        self.responders.finish_drains(out);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::LogKind;
    use std::collections::BTreeMap;

    fn spec() -> Box<SubSpec> {
        Box::new(SubSpec {
            group: None,
            selector: None,
            start: StartPos::NewOnly,
            durable: None,
            legacy_durable: None,
            presettled: true,
            max_unsettled: 16,
            batch: 1,
            hold: false,
            max_outstanding_messages: 0,
            max_outstanding_bytes: 0,
            events_buffer: 16,
            events_in_flight_bytes: 1 << 20,
            ack_deadline_ms: 0,
        })
    }

    fn selector_spec(selector: &str) -> Box<SubSpec> {
        let mut s = spec();
        s.selector = Some(Selector::parse(selector).unwrap());
        s
    }

    fn colored(color: &str) -> Msg {
        use sluice_proto::codec::Encode;
        let m = sluice_proto::types::Message {
            application_properties: Some(vec![("color".to_owned(), Value::string(color))]),
            body: sluice_proto::types::Body::Data(bytes::Bytes::from_static(b"e")),
            ..Default::default()
        };
        Msg { payload: m.to_bytes().freeze(), received_ms: 1 }
    }

    fn subscribe_all(home: &mut Home, key: &ChannelKey, selectors: &[&str]) {
        let mut out = Vec::new();
        for (i, sel) in selectors.iter().enumerate() {
            let sub = SubRef { shard: 0, conn: 1, link: i as u64 };
            home.handle(ShardMsg::Subscribe { key: key.clone(), sub, spec: selector_spec(sel) }, 1, &mut out);
        }
        assert_eq!(out.len(), selectors.len(), "{out:?}");
        assert!(out.iter().all(|m| matches!(m, ShardMsg::SubscribeDone { result: Ok(_), .. })), "{out:?}");
    }

    /// Link `link` of connection 1 on shard 0.
    fn sub(link: u64) -> SubRef {
        SubRef { shard: 0, conn: 1, link }
    }

    /// `credit` from link `link` of channel `key` (nothing delivered yet).
    fn credit_msg(key: &ChannelKey, link: u64, credit: u32) -> ShardMsg {
        ShardMsg::Credit { key: key.clone(), sub: sub(link), credit, reached: 0, bytes_out: 0, drain: false, seq: 0 }
    }

    /// Queue consumer `link` of channel `key`, receiving unsettled with this window
    /// and batch size, granted `credit`.
    fn queue_consumer(
        home: &mut Home,
        key: &ChannelKey,
        link: u64,
        (credit, max_unsettled, batch): (u32, u32, u32),
        out: &mut Vec<ShardMsg>,
    ) -> SubRef {
        let mut spec = spec();
        spec.presettled = false;
        spec.max_unsettled = max_unsettled;
        spec.batch = batch;
        home.handle(ShardMsg::Subscribe { key: key.clone(), sub: sub(link), spec }, 1, out);
        home.handle(credit_msg(key, link, credit), 1, out);
        sub(link)
    }

    /// A pre-settled publish of `payload` to channel `key` (arrived at 1 ms).
    fn publish_msg(key: &ChannelKey, payload: impl Into<bytes::Bytes>) -> ShardMsg {
        ShardMsg::Publish { key: key.clone(), msg: Msg { payload: payload.into(), received_ms: 1 }, ack: None }
    }

    /// Link `sub` lets go of channel `key` (`sent`: queue deliveries its connection wrote).
    fn unsubscribe_msg(key: &ChannelKey, sub: SubRef, sent: Vec<u64>) -> ShardMsg {
        ShardMsg::Unsubscribe { key: key.clone(), sub, stalled: false, resume_at: None, confirm: false, sent }
    }

    /// Deliveries in `out` to link `link` (one by one, or in batches of events).
    fn delivered_to(out: &[ShardMsg], link: u64) -> usize {
        out.iter()
            .map(|m| match m {
                ShardMsg::Deliver { sub: s, .. } | ShardMsg::DeliverRequest { sub: s, .. } if s.link == link => 1,
                ShardMsg::DeliverBatch { sub: s, msgs } if s.link == link => msgs.len(),
                _ => 0,
            })
            .sum()
    }

    /// The tokens of the queue deliveries in `out`, in order.
    fn delivered_tokens(out: &[ShardMsg]) -> Vec<u64> {
        out.iter()
            .filter_map(|m| match m {
                ShardMsg::Deliver { token, .. } => Some(*token),
                _ => None,
            })
            .collect()
    }

    fn events_home() -> Home {
        let qj = Rc::new(RefCell::new(Journal::disabled(LogKind::Queues)));
        let ej = Rc::new(RefCell::new(Journal::disabled(LogKind::Events)));
        Home::new(0, Retention::default(), qj, ej)
    }

    /// Events subscribers with the same selector text share one evaluation per event:
    /// 100 subscribers with one selector and one with another cost two evaluations,
    /// not 101, and each still gets what its selector matches.
    #[test]
    fn subscribers_with_the_same_selector_share_its_evaluation() {
        let mut home = events_home();
        let key = ChannelKey::new(Pattern::Events, "shared");
        let mut selectors = vec!["color = 'red'"; 100];
        selectors.push("color = 'blue'");
        subscribe_all(&mut home, &key, &selectors);
        let before = crate::broker::selector::EVALUATIONS.with(|n| n.get());
        let mut out = Vec::new();
        home.handle(ShardMsg::Publish { key: key.clone(), msg: colored("red"), ack: None }, 2, &mut out);
        let evaluations = crate::broker::selector::EVALUATIONS.with(|n| n.get()) - before;
        assert_eq!(evaluations, 2);
        let e = &home.events[&key];
        let got: Vec<usize> = e.subs.iter().map(|s| s.held.len() + s.pending.len()).collect();
        assert!(got[..100].iter().all(|n| *n == 1), "the red subscribers: {got:?}");
        assert_eq!(got[100], 0, "the blue one");
    }

    /// Events-store readers fed one new event share one parse of it for their
    /// selectors (before: one per reader).
    #[test]
    fn readers_fed_one_event_share_its_selector_view() {
        let mut home = events_home();
        let key = ChannelKey::new(Pattern::EventsStore, "shared");
        subscribe_all(&mut home, &key, &["color = 'red'"; 10]);
        let before = crate::broker::message::VIEWS.with(|n| n.get());
        let mut out = Vec::new();
        home.handle(ShardMsg::Publish { key: key.clone(), msg: colored("red"), ack: None }, 2, &mut out);
        assert_eq!(crate::broker::message::VIEWS.with(|n| n.get()) - before, 1);
        let s = &home.stores[&key];
        assert!(s.readers.iter().all(|r| r.members.iter().all(|m| m.ring.ring.len() == 1)));
        home.handle(ShardMsg::Publish { key: key.clone(), msg: colored("blue"), ack: None }, 3, &mut out);
        let s = &home.stores[&key];
        assert!(s.readers.iter().all(|r| r.next == 3), "each reader stepped over the blue event");
        assert!(s.readers.iter().all(|r| r.members.iter().all(|m| m.ring.ring.len() == 1)));
    }

    /// A durable subscription attaching under its identity takes over, once, the cursor
    /// an older sluice kept under its former identity (whose hash was over the sanitized
    /// container-id), so an upgrade does not send it back to its start position; a
    /// second subscription with the same former identity starts afresh.
    #[test]
    fn a_durable_subscription_takes_over_its_cursor_under_the_former_identity() {
        let mut home = events_home();
        let key = ChannelKey::new(Pattern::EventsStore, "legacy");
        let mut rec = RecoveredShard::default();
        let events = (1..=5u64)
            .map(|seq| (seq, crate::store::recovery::RecoveredEvent { ts: 1, payload: colored("red").payload, seg: 1 }))
            .collect();
        rec.events.insert(key.clone(), events);
        rec.cursors.insert((key.clone(), "former".to_owned()), 4);
        home.restore(rec);
        assert_eq!(home.durable_count(), 1);
        let mut out = Vec::new();
        for (link, id) in [(1, "new-a"), (2, "new-b")] {
            let mut spec = spec();
            spec.start = StartPos::First;
            spec.durable = Some(id.to_owned());
            spec.legacy_durable = Some("former".to_owned());
            let sub = SubRef { shard: 0, conn: 1, link };
            home.handle(ShardMsg::Subscribe { key: key.clone(), sub, spec }, 2, &mut out);
        }
        let s = &home.stores[&key];
        let next: Vec<u64> = s.readers.iter().map(|r| r.next).collect();
        // Each reader's window (16) took what was left from where it started.
        assert_eq!(next, vec![6, 6]);
        let rings: Vec<usize> = s.readers.iter().map(|r| r.members[0].ring.ring.len()).collect();
        assert_eq!(rings, vec![2, 5], "the first went on from event 4, the second started at the first");
        assert!(!s.cursors.contains_key("former"));
        assert!(s.cursors.contains_key("new-a") && s.cursors.contains_key("new-b"));
        assert_eq!(home.durable_count(), 2);
    }

    /// A restart keeps the next sequence number of a forgotten events-store channel
    /// (one with nothing left but its mark) in the journal only: no empty channel is
    /// rebuilt to take one of the shard's slots, and the channel goes on from its mark
    /// when it is used again. (Before, every mark rebuilt an empty channel; with many
    /// marks the shard was full of them and refused new channels until the sweep.)
    #[test]
    fn a_restart_rebuilds_no_channel_for_a_mark_alone() {
        let qj = Rc::new(RefCell::new(Journal::disabled(LogKind::Queues)));
        let ej = Rc::new(RefCell::new(Journal::enabled(LogKind::Events, 2, BTreeMap::new())));
        let mut home = Home::new(0, Retention::default(), qj, ej.clone());
        let key = ChannelKey::new(Pattern::EventsStore, "forgotten");
        let mut rec = RecoveredShard::default();
        rec.seq_marks.insert(key.clone(), 9);
        home.restore(rec);
        assert_eq!(home.channel_count(), 0);
        assert_eq!(ej.borrow().stats.seq_marks, 1);
        assert_eq!(home.store(&key).next_seq, 9);
    }

    /// Compaction whose commit fails: the next tick appends the message again, and
    /// only the commit of that copy lets the original segment go (before, nothing
    /// appended it again and the original segment was deleted with the next commit:
    /// the accepted message then lived in memory only).
    #[test]
    fn a_message_whose_compacted_copy_was_cut_is_appended_again() {
        let qj = Rc::new(RefCell::new(Journal::enabled(LogKind::Queues, 1, BTreeMap::new())));
        let ej = Rc::new(RefCell::new(Journal::disabled(LogKind::Events)));
        let mut home = Home::new(0, Retention::default(), qj.clone(), ej);
        let key = ChannelKey::new(Pattern::Queues, "compacted");
        let mut out = Vec::new();
        home.handle(publish_msg(&key, &b"accepted"[..]), 1, &mut out);
        assert!(qj.borrow_mut().simulate_commit(true).is_empty());
        qj.borrow_mut().simulate_roll();
        qj.borrow_mut().simulate_roll();
        let (first, _) = qj.borrow().oldest_pinned().expect("segment 1 is pinned by the message");
        home.tick(2, &mut out); // compaction: the message is appended to the active segment
        assert!(qj.borrow_mut().simulate_commit(false).is_empty(), "that commit fails");
        assert!(!qj.borrow_mut().simulate_commit(true).contains(&first), "deleted with its copy cut");
        home.tick(3, &mut out); // appended again
        let gone = qj.borrow_mut().simulate_commit(true);
        assert!(gone.contains(&first), "the original segment goes once the copy is on disk: {gone:?}");
        let q = &home.queues[&key];
        let item = q.ready.front().expect("the message is still queued");
        assert!(!gone.contains(&item.seg), "its current segment {} is kept", item.seg);
    }

    /// A queue consumer's unsubscribe checks the tokens of its own deliveries, not the
    /// queue's: with 5,000 unacked by one consumer, fifty consumers that each take one
    /// message and leave cost 50 checks (before, each walked all 5,000), and each one's
    /// message goes back to the queue while the first one's stay unacked.
    #[test]
    fn a_queue_unsubscribe_checks_the_consumers_own_deliveries() {
        let mut home = events_home();
        let key = ChannelKey::new(Pattern::Queues, "held");
        let mut out = Vec::new();
        let consumer = |link: u64, credit: u32, home: &mut Home, out: &mut Vec<ShardMsg>| {
            queue_consumer(home, &key, link, (credit, 10_000, 10_000), out)
        };
        let publish = |n: usize, home: &mut Home, out: &mut Vec<ShardMsg>| {
            for _ in 0..n {
                home.handle(publish_msg(&key, &b"m"[..]), 1, out);
            }
        };
        consumer(0, 5_000, &mut home, &mut out);
        publish(5_000, &mut home, &mut out);
        assert_eq!(home.queues[&key].unacked.len(), 5_000);
        UNSUBSCRIBE_CHECKS.with(|n| n.set(0));
        publish(1, &mut home, &mut out);
        for round in 0..50 {
            let sub = consumer(1 + round, 1, &mut home, &mut out);
            let q = &home.queues[&key];
            assert_eq!((q.unacked.len(), q.ready.len()), (5_001, 0), "the new consumer took the message");
            let bye = unsubscribe_msg(&key, sub, Vec::new());
            home.handle(bye, 1, &mut out);
            let q = &home.queues[&key];
            assert_eq!((q.unacked.len(), q.ready.len()), (5_000, 1), "its message is back, the first's are not");
        }
        let checks = UNSUBSCRIBE_CHECKS.with(|n| n.get());
        assert!(checks <= 100, "{checks} tokens checked for 50 unsubscribes of one-delivery consumers");
    }

    /// Competing consumers take turns of at most GetBatchSize (32) messages each: 100
    /// messages that come back to the queue at once go 32 to one consumer, 32 to the
    /// other, 32 to the first and the last 4 to the second.
    #[test]
    fn queue_consumers_take_turns_of_get_batch_size() {
        let mut home = events_home();
        let key = ChannelKey::new(Pattern::Queues, "turns");
        let mut out = Vec::new();
        let consumer = |link: u64, home: &mut Home, out: &mut Vec<ShardMsg>| {
            queue_consumer(home, &key, link, (100, 1024, 32), out)
        };
        // A first consumer takes all 100; two more wait with 100 credit each.
        let first = consumer(0, &mut home, &mut out);
        for _ in 0..100 {
            home.handle(publish_msg(&key, &b"m"[..]), 1, &mut out);
        }
        assert_eq!(home.queues[&key].unacked.len(), 100);
        let a = consumer(1, &mut home, &mut out);
        let b = consumer(2, &mut home, &mut out);
        out.clear();
        // The first goes: its 100 come back at once.
        home.handle(unsubscribe_msg(&key, first, Vec::new()), 1, &mut out);
        let mut turns: Vec<(u64, usize)> = Vec::new();
        for m in &out {
            if let ShardMsg::Deliver { sub, .. } = m {
                match turns.last_mut() {
                    Some((link, n)) if *link == sub.link => *n += 1,
                    _ => turns.push((sub.link, 1)),
                }
            }
        }
        assert_eq!(turns, vec![(a.link, 32), (b.link, 32), (a.link, 32), (b.link, 4)]);
    }

    /// A queue's dispatch visits the consumers that may take messages, not all of
    /// them: with 1,000 consumers of which one has credit, 1,000 publishes cost about
    /// 1,000 visits (before: every publish walked all 1,000 consumers, a million
    /// visits), every message goes to the one with credit, and a consumer granted
    /// credit later gets its turn.
    #[test]
    fn a_queue_dispatch_visits_only_consumers_that_can_take() {
        let mut home = events_home();
        let key = ChannelKey::new(Pattern::Queues, "crowded");
        let mut out = Vec::new();
        for link in 0..1_000 {
            let mut spec = spec();
            spec.presettled = false;
            spec.max_unsettled = 10_000;
            home.handle(ShardMsg::Subscribe { key: key.clone(), sub: sub(link), spec }, 1, &mut out);
        }
        let credit = |link: u64, credit: u32| credit_msg(&key, link, credit);
        home.handle(credit(500, 5_000), 1, &mut out);
        out.clear();
        TURNS.with(|n| n.set(0));
        for _ in 0..1_000 {
            home.handle(publish_msg(&key, &b"m"[..]), 1, &mut out);
        }
        let turns = TURNS.with(|n| n.get());
        assert!(turns <= 2_000, "{turns} consumer visits for 1,000 publishes");
        assert_eq!(delivered_to(&out, 500), 1_000);
        // Another consumer granted credit takes its share of what comes next.
        home.handle(credit(7, 10), 1, &mut out);
        out.clear();
        for _ in 0..20 {
            home.handle(publish_msg(&key, &b"m"[..]), 1, &mut out);
        }
        assert_eq!((delivered_to(&out, 7), delivered_to(&out, 500)), (10, 10), "turn by turn");
    }

    /// A dispatch goes on while a consumer took something in the round: A's byte
    /// watermark holds back the 50-byte message B then takes, and the 10-byte one
    /// behind it fits A, which gets it in the same dispatch (before, the round that
    /// ended with B out of room stopped the dispatch and left it waiting).
    #[test]
    fn a_dispatch_goes_on_after_a_round_that_gave() {
        let mut home = events_home();
        let key = ChannelKey::new(Pattern::Queues, "watermark");
        let mut out = Vec::new();
        let credit = |link: u64, credit: u32| credit_msg(&key, link, credit);
        let publish = |n: usize, home: &mut Home, out: &mut Vec<ShardMsg>| {
            home.handle(publish_msg(&key, vec![0u8; n]), 1, out);
        };
        let mut a = spec();
        a.presettled = false;
        a.max_outstanding_bytes = 100;
        home.handle(ShardMsg::Subscribe { key: key.clone(), sub: sub(1), spec: a }, 1, &mut out);
        home.handle(credit(1, 10), 1, &mut out);
        publish(60, &mut home, &mut out);
        publish(50, &mut home, &mut out);
        publish(10, &mut home, &mut out);
        let sizes = |out: &[ShardMsg], link: u64| -> Vec<usize> {
            out.iter()
                .filter_map(|m| match m {
                    ShardMsg::Deliver { sub: s, msg, .. } if s.link == link => Some(msg.payload.len()),
                    _ => None,
                })
                .collect()
        };
        assert_eq!(sizes(&out, 1), vec![60]);
        let mut b = spec();
        b.presettled = false;
        home.handle(ShardMsg::Subscribe { key: key.clone(), sub: sub(2), spec: b }, 1, &mut out);
        home.handle(credit(2, 1), 1, &mut out);
        assert_eq!(sizes(&out, 2), vec![50]);
        assert_eq!(sizes(&out, 1), vec![60, 10]);
    }

    /// An RPC channel's requests go to the responders that may take them, without a
    /// walk over the others: 1,000 responders of which one has credit, 1,000 requests
    /// cost at most 2,000 turns (before, each request scanned the responders from the
    /// last one served and every dispatch walked all 1,000 for drains), and a second
    /// responder granted credit takes every other request.
    #[test]
    fn rpc_requests_visit_only_responders_that_can_take() {
        let mut home = events_home();
        let key = ChannelKey::new(Pattern::Commands, "crowded");
        let mut out = Vec::new();
        for link in 0..1_000 {
            let mut spec = spec();
            spec.max_unsettled = 10_000;
            home.handle(ShardMsg::Subscribe { key: key.clone(), sub: sub(link), spec }, 1, &mut out);
        }
        let credit = |link: u64, credit: u32| credit_msg(&key, link, credit);
        let request = |home: &mut Home, out: &mut Vec<ShardMsg>| {
            let msg = Msg { payload: bytes::Bytes::from_static(b"r"), received_ms: 1 };
            home.handle(ShardMsg::RpcRequest { key: key.clone(), msg, deadline_ms: u64::MAX }, 1, out);
        };
        home.handle(credit(500, 5_000), 1, &mut out);
        out.clear();
        TURNS.with(|n| n.set(0));
        for _ in 0..1_000 {
            request(&mut home, &mut out);
        }
        let turns = TURNS.with(|n| n.get());
        assert!(turns <= 2_000, "{turns} responder visits for 1,000 requests");
        assert_eq!(delivered_to(&out, 500), 1_000);
        home.handle(credit(7, 10), 1, &mut out);
        out.clear();
        for _ in 0..20 {
            request(&mut home, &mut out);
        }
        assert_eq!((delivered_to(&out, 7), delivered_to(&out, 500)), (10, 10), "turn by turn");
    }

    /// A responder's link receiving unsettled, with a window of 1,024.
    fn unsettled_responder_spec() -> Box<SubSpec> {
        let mut s = spec();
        s.presettled = false;
        s.max_unsettled = 1024;
        s
    }

    /// Responder 1 on `key`, receiving unsettled under a 250-byte watermark, 100
    /// credits.
    fn weighed_responder(home: &mut Home, key: &ChannelKey, out: &mut Vec<ShardMsg>) {
        let mut weighed = unsettled_responder_spec();
        weighed.max_outstanding_bytes = 250;
        home.handle(ShardMsg::Subscribe { key: key.clone(), sub: sub(1), spec: weighed }, 1, out);
        home.handle(credit_msg(key, 1, 100), 1, out);
    }

    /// An RPC request of `size` bytes to `key`, with no deadline.
    fn rpc_request(home: &mut Home, key: &ChannelKey, out: &mut Vec<ShardMsg>, size: usize) {
        let msg = Msg { payload: bytes::Bytes::from(vec![7u8; size]), received_ms: 1 };
        home.handle(ShardMsg::RpcRequest { key: key.clone(), msg, deadline_ms: u64::MAX }, 1, out);
    }

    /// A responder receiving unsettled with `x-opt-sluice-max-outstanding-messages`
    /// gets at most that many requests it has not settled, whatever its credit; each
    /// settlement lets one more go. Before, only MaxUnsettledPerLink held it.
    #[test]
    fn a_responder_is_held_to_its_outstanding_messages_watermark() {
        let mut home = events_home();
        let key = ChannelKey::new(Pattern::Commands, "marked");
        let mut out = Vec::new();
        let mut spec = unsettled_responder_spec();
        spec.max_outstanding_messages = 3;
        home.handle(ShardMsg::Subscribe { key: key.clone(), sub: sub(1), spec }, 1, &mut out);
        home.handle(credit_msg(&key, 1, 100), 1, &mut out);
        out.clear();
        for _ in 0..10 {
            let msg = Msg { payload: bytes::Bytes::from_static(b"r"), received_ms: 1 };
            home.handle(ShardMsg::RpcRequest { key: key.clone(), msg, deadline_ms: u64::MAX }, 1, &mut out);
        }
        assert_eq!(delivered_to(&out, 1), 3);
        out.clear();
        home.handle(ShardMsg::RpcSettled { key: key.clone(), sub: sub(1), n: 2, bytes: 2 }, 1, &mut out);
        assert_eq!(delivered_to(&out, 1), 2, "two settled, two more");
    }

    /// A responder receiving unsettled with `x-opt-sluice-max-outstanding-bytes` gets
    /// requests while their unsettled bytes stay within it (a single larger one when
    /// nothing is unsettled); a settlement makes room for its bytes, and the requests
    /// it could not take go to another responder meanwhile. Before, responders had no
    /// byte watermark: all ten went to the first.
    #[test]
    fn a_responder_is_held_to_its_outstanding_bytes_watermark() {
        let mut home = events_home();
        let key = ChannelKey::new(Pattern::Commands, "weighed");
        let mut out = Vec::new();
        weighed_responder(&mut home, &key, &mut out);
        let request = |home: &mut Home, out: &mut Vec<ShardMsg>, size| rpc_request(home, &key, out, size);
        out.clear();
        for _ in 0..10 {
            request(&mut home, &mut out, 100);
        }
        assert_eq!(delivered_to(&out, 1), 2, "200 of 250 bytes");
        out.clear();
        home.handle(ShardMsg::RpcSettled { key: key.clone(), sub: sub(1), n: 1, bytes: 100 }, 1, &mut out);
        assert_eq!(delivered_to(&out, 1), 1, "one settled, one more");
        // Another responder, pre-settled, takes what the first cannot.
        let mut other = spec();
        other.max_unsettled = 1024;
        home.handle(ShardMsg::Subscribe { key: key.clone(), sub: sub(2), spec: other }, 1, &mut out);
        out.clear();
        home.handle(credit_msg(&key, 2, 100), 1, &mut out);
        assert_eq!(delivered_to(&out, 2), 7);
        // Nothing unsettled: a request larger than the watermark still goes.
        out.clear();
        home.handle(ShardMsg::RpcSettled { key: key.clone(), sub: sub(1), n: 2, bytes: 200 }, 1, &mut out);
        home.handle(unsubscribe_msg(&key, sub(2), Vec::new()), 1, &mut out);
        out.clear();
        request(&mut home, &mut out, 1000);
        assert_eq!(delivered_to(&out, 1), 1, "a single larger request when nothing is unsettled");
    }

    /// A responder held back by its byte watermark gets a later, smaller request
    /// that fits it once the one it could not take went elsewhere, without a
    /// settlement of its own. Before, it was out of the turns until it settled: the
    /// 40-byte request waited (for its deadline) while the responder had room for 50.
    #[test]
    fn a_byte_blocked_responder_takes_a_smaller_request_that_fits() {
        let mut home = events_home();
        let key = ChannelKey::new(Pattern::Commands, "smaller");
        let mut out = Vec::new();
        weighed_responder(&mut home, &key, &mut out);
        home.handle(ShardMsg::Subscribe { key: key.clone(), sub: sub(2), spec: spec() }, 1, &mut out);
        let request = |home: &mut Home, out: &mut Vec<ShardMsg>, size| rpc_request(home, &key, out, size);
        out.clear();
        for _ in 0..3 {
            request(&mut home, &mut out, 100);
        }
        assert_eq!(delivered_to(&out, 1), 2, "room for 50 bytes left");
        out.clear();
        home.handle(credit_msg(&key, 2, 1), 1, &mut out);
        assert_eq!(delivered_to(&out, 2), 1, "the other responder takes the 100-byte one");
        out.clear();
        request(&mut home, &mut out, 40);
        assert_eq!(delivered_to(&out, 1), 1, "40 bytes fit the first one's room");
        // Blocked again, then gone: not kept in the blocked set.
        request(&mut home, &mut out, 100);
        assert_eq!(home.rpcs[&key].byte_blocked.len(), 1);
        home.handle(unsubscribe_msg(&key, sub(1), Vec::new()), 1, &mut out);
        assert!(home.rpcs[&key].byte_blocked.is_empty());
    }

    /// A FLOW finds its events subscriber by an index: 1,000 subscribers of one
    /// channel, 1,000 credits from the last one cost 1,000 lookups (a walk visited every
    /// subscriber before it, a million visits); after others leave it is still found.
    #[test]
    fn an_events_flow_finds_its_subscriber_without_a_walk() {
        let mut home = events_home();
        let key = ChannelKey::new(Pattern::Events, "many");
        let mut out = Vec::new();
        for link in 0..1_000 {
            home.handle(ShardMsg::Subscribe { key: key.clone(), sub: sub(link), spec: spec() }, 1, &mut out);
        }
        SUB_LOOKUPS.with(|n| n.set(0));
        for credit in 1..=1_000 {
            home.handle(credit_msg(&key, 999, credit), 1, &mut out);
        }
        assert!(SUB_LOOKUPS.with(|n| n.get()) <= 1_000);
        let bye = |link| unsubscribe_msg(&key, sub(link), Vec::new());
        home.handle(bye(0), 1, &mut out);
        home.handle(bye(500), 1, &mut out);
        home.handle(credit_msg(&key, 999, 7), 1, &mut out);
        let e = home.events.get_mut(&key).unwrap();
        assert_eq!(e.subs.len(), 998);
        assert_eq!(e.sub_mut(sub(999)).map(|s| s.credit.credit), Some(7));
        assert!(e.sub_mut(sub(500)).is_none());
    }

    /// An events detach moves the channel's last subscriber into the gap instead of
    /// walking the channel (1,000 subscribers leaving one by one cost a million
    /// visits): 500 of 1,000 leave at one lookup each; every one left is still found by
    /// its FLOW, a group's round-robin position goes with its last member only, and an
    /// event still reaches each plain subscriber once and the group once.
    #[test]
    fn an_events_detach_moves_one_subscriber_not_the_channel() {
        let mut home = events_home();
        let key = ChannelKey::new(Pattern::Events, "leaving");
        let mut out = Vec::new();
        let in_group = |link: u64| link.is_multiple_of(100);
        for link in 0..1_000 {
            let mut spec = spec();
            if in_group(link) {
                spec.group = Some(if link < 500 { "early" } else { "late" }.to_owned());
            }
            home.handle(ShardMsg::Subscribe { key: key.clone(), sub: sub(link), spec }, 1, &mut out);
        }
        let bye = |link| unsubscribe_msg(&key, sub(link), Vec::new());
        SUB_LOOKUPS.with(|n| n.set(0));
        // Every odd link, and every link below 500 that is in a group ("early" empties).
        let leaving: Vec<u64> = (0..1_000).filter(|l| l % 2 == 1 || (in_group(*l) && *l < 500)).collect();
        for link in &leaving {
            home.handle(bye(*link), 1, &mut out);
        }
        assert!(SUB_LOOKUPS.with(|n| n.get()) <= leaving.len() as u64);
        let e = home.events.get_mut(&key).unwrap();
        assert_eq!(e.subs.len(), 1_000 - leaving.len());
        assert!(!e.groups.contains_key("early"), "the group went with its last member");
        assert_eq!(e.groups.get("late").map(|g| g.members), Some(5));
        for link in 0..1_000 {
            let found = e.sub_mut(sub(link)).map(|s| s.sub);
            let left = leaving.contains(&link);
            assert_eq!(found, (!left).then(|| sub(link)), "link {link}");
        }
        let remaining: Vec<u64> = (0..1_000).filter(|l| !leaving.contains(l)).collect();
        for link in &remaining {
            home.handle(credit_msg(&key, *link, 1), 1, &mut out);
        }
        out.clear();
        home.handle(publish_msg(&key, &b"e"[..]), 2, &mut out);
        home.tick(3, &mut out);
        for link in &remaining {
            if !in_group(*link) {
                assert_eq!(delivered_to(&out, *link), 1, "plain subscriber {link}");
            }
        }
        let to_group: usize = remaining.iter().filter(|l| in_group(**l)).map(|l| delivered_to(&out, *l)).sum();
        assert_eq!(to_group, 1, "the group got the event once");
    }

    /// An events-store member's report (room in its ring, what it sent) and its detach
    /// find its reader by an index, not a walk over the channel's readers, and a
    /// reader that goes is replaced by the last one: 1,000 readers (one a group of
    /// ten, one a lossless durable subscription attached last), half of them leaving,
    /// then room reported by every one left, cost one lookup each; each one left
    /// still gets the next event, the group its events, and the durable subscription's
    /// cursor follows what its connection reports sent.
    #[test]
    fn an_events_store_report_finds_its_reader_without_a_walk() {
        let mut home = events_home();
        let key = ChannelKey::new(Pattern::EventsStore, "many");
        let mut out = Vec::new();
        let one = |group: Option<&str>| {
            let mut spec = spec();
            spec.max_unsettled = 1;
            spec.group = group.map(str::to_owned);
            spec
        };
        for link in 0..1_000 {
            home.handle(ShardMsg::Subscribe { key: key.clone(), sub: sub(link), spec: one(None) }, 1, &mut out);
        }
        for link in 2_000..2_010 {
            home.handle(ShardMsg::Subscribe { key: key.clone(), sub: sub(link), spec: one(Some("g")) }, 1, &mut out);
        }
        let mut durable = one(None);
        durable.durable = Some("d".to_owned());
        durable.hold = true;
        home.handle(ShardMsg::Subscribe { key: key.clone(), sub: sub(3_000), spec: durable }, 1, &mut out);
        assert!(out.iter().all(|m| matches!(m, ShardMsg::SubscribeDone { result: Ok(_), .. })));
        let bye = |link| unsubscribe_msg(&key, sub(link), Vec::new());
        SUB_LOOKUPS.with(|n| n.set(0));
        // Half the plain readers, from the front (each gap takes the last reader), and
        // three of the group's members.
        let leaving: Vec<u64> = (0..500).chain(2_000..2_003).collect();
        for link in &leaving {
            home.handle(bye(*link), 1, &mut out);
        }
        // A new member joins the group's reader, wherever the gaps moved it.
        home.handle(ShardMsg::Subscribe { key: key.clone(), sub: sub(2_010), spec: one(Some("g")) }, 1, &mut out);
        let staying: Vec<u64> = (500..1_000).chain(2_003..2_011).chain([3_000]).collect();
        let s = &home.stores[&key];
        assert_eq!(s.readers.len(), 502, "500 plain readers, the group, the durable subscription");
        for link in &staying {
            let i = s.reader_of(sub(*link)).unwrap_or_else(|| panic!("link {link} lost its reader"));
            assert!(s.readers[i].members.iter().any(|m| m.sub == sub(*link)), "link {link}");
        }
        assert!(leaving.iter().all(|l| s.reader_of(sub(*l)).is_none()));
        // The first event fills every ring (one each), the second finds them full.
        for n in 0..2 {
            home.handle(publish_msg(&key, vec![b'a' + n; 1]), 2, &mut out);
        }
        let s = &home.stores[&key];
        let ring_of = |s: &StoreChan, link: u64| {
            let i = s.reader_of(sub(link)).unwrap();
            s.readers[i].members.iter().find(|m| m.sub == sub(link)).unwrap().ring.clone()
        };
        let rings: Vec<_> = staying.iter().map(|l| ring_of(s, *l)).collect();
        let firsts: Vec<_> = rings.iter().filter_map(|r| r.ring.pop()).map(|(seq, _)| seq).collect();
        // Each plain reader and the durable one took event 1 and found its ring full
        // for event 2; the group took event 1 in one member's ring, 2 in the next's.
        assert_eq!(firsts.len(), 500 + 1 + 2);
        assert_eq!(firsts.iter().filter(|seq| **seq == 2).count(), 1);
        SUB_LOOKUPS.with(|n| n.set(0));
        for link in &staying {
            home.handle(ShardMsg::RingSpace { key: key.clone(), sub: sub(*link) }, 2, &mut out);
        }
        assert!(SUB_LOOKUPS.with(|n| n.get()) <= staying.len() as u64 * 2);
        let seconds: Vec<_> = rings.iter().filter_map(|r| r.ring.pop()).map(|(seq, _)| seq).collect();
        assert_eq!(seconds.len(), 500 + 1, "every reader that waited took event 2");
        assert!(seconds.iter().all(|seq| *seq == 2));
        home.handle(ShardMsg::Consumed { key: key.clone(), sub: sub(3_000), next_seq: 3 }, 3, &mut out);
        assert_eq!(home.stores[&key].cursors.get("d").map(|c| c.next), Some(3));
    }

    /// Queue consumers held back by their byte watermarks leave the turns until a
    /// settlement of their own (or a message that fits) lets them take again: 1,000
    /// consumers, each at its 150-byte watermark with one 100-byte message unsettled,
    /// cost no visits for the next 1,000 messages (before, every dispatch visited all
    /// 1,000 of them: a million visits), and the one that settles gets the next.
    #[test]
    fn consumers_at_their_byte_watermark_leave_the_turns() {
        let mut home = events_home();
        let key = ChannelKey::new(Pattern::Queues, "watermarked");
        let mut out = Vec::new();
        for link in 0..1_000 {
            let mut spec = spec();
            spec.presettled = false;
            spec.max_outstanding_bytes = 150;
            home.handle(ShardMsg::Subscribe { key: key.clone(), sub: sub(link), spec }, 1, &mut out);
            home.handle(credit_msg(&key, link, 10), 1, &mut out);
        }
        let publish = |home: &mut Home, out: &mut Vec<ShardMsg>| {
            home.handle(publish_msg(&key, vec![0u8; 100]), 1, out);
        };
        out.clear();
        for _ in 0..1_000 {
            publish(&mut home, &mut out);
        }
        assert!((0..1_000).all(|l| delivered_to(&out, l) == 1), "one each");
        let token_of_7 = out
            .iter()
            .find_map(|m| match m {
                ShardMsg::Deliver { sub: s, token, .. } if s.link == 7 => Some(*token),
                _ => None,
            })
            .unwrap();
        TURNS.with(|n| n.set(0));
        out.clear();
        for _ in 0..1_000 {
            publish(&mut home, &mut out);
        }
        let turns = TURNS.with(|n| n.get());
        assert!(turns <= 2_000, "{turns} consumer visits for 1,000 publishes");
        assert_eq!(home.queues[&key].ready.len(), 1_000, "nobody had room for 100 more bytes");
        let settle = ShardMsg::Settle { key: key.clone(), sub: sub(7), token: token_of_7, outcome: Outcome::Accepted };
        home.handle(settle, 1, &mut out);
        assert_eq!(delivered_to(&out, 7), 1, "the consumer that settled took the next");
        assert_eq!(out.iter().filter(|m| matches!(m, ShardMsg::Deliver { .. })).count(), 1);
    }

    /// A queue consumer's unsubscribe counts only the deliveries its connection says
    /// it sent: of three messages given to a consumer, the connection sent the middle
    /// one; the first and last (held for a shut session window, or on their way when
    /// the link went) go back to the front in their order, not counted, and the sent
    /// one goes back counted, so with a receive limit of 1 only it is dead-lettered.
    /// (Before, the connection named what it held and everything else counted as
    /// delivered: a delivery still on its way to the connection when the link went
    /// was dead-lettered without ever having been sent.)
    #[test]
    fn a_queue_unsubscribe_counts_only_what_the_connection_sent() {
        let qj = Rc::new(RefCell::new(Journal::disabled(LogKind::Queues)));
        let ej = Rc::new(RefCell::new(Journal::disabled(LogKind::Events)));
        let mut home = Home::new(1, Retention::default(), qj, ej);
        let key = ChannelKey::new(Pattern::Queues, "counted");
        let mut out = Vec::new();
        for body in [b"a", b"b", b"c", b"d"] {
            home.handle(publish_msg(&key, &body[..]), 1, &mut out);
        }
        let mut spec = spec();
        spec.presettled = false;
        home.handle(ShardMsg::Subscribe { key: key.clone(), sub: sub(1), spec }, 1, &mut out);
        out.clear();
        home.handle(credit_msg(&key, 1, 3), 1, &mut out);
        let tokens = delivered_tokens(&out);
        assert_eq!(tokens.len(), 3);
        out.clear();
        let bye = unsubscribe_msg(&key, sub(1), vec![tokens[1]]);
        home.handle(bye, 2, &mut out);
        let q = &home.queues[&key];
        let ready: Vec<(&[u8], u32)> = q.ready.iter().map(|i| (&i.msg.payload[..], i.receive_count)).collect();
        assert_eq!(ready, vec![(&b"a"[..], 0), (&b"c"[..], 0), (&b"d"[..], 0)]);
        let dead: Vec<&[u8]> = out
            .iter()
            .filter_map(|m| match m {
                ShardMsg::DeadLetter { msg, .. } => Some(&msg.payload[..]),
                _ => None,
            })
            .collect();
        assert_eq!(dead, vec![&b"b"[..]], "only the message that was sent");
    }

    /// A delivery past its ack deadline goes back to the queue, but keeps its place in
    /// the consumer's window until the client settles it: a consumer with
    /// max-outstanding-messages 1 is not given a second message while it still holds
    /// the first. Before, the expiry freed the place at once and the consumer held two.
    #[test]
    fn an_expired_delivery_keeps_its_place_in_the_window_until_settled() {
        let mut home = events_home(); // never dead-letters (max_receive_count 0)
        let key = ChannelKey::new(Pattern::Queues, "slow-consumer");
        let mut out = Vec::new();
        let mut spec = spec();
        spec.presettled = false;
        spec.max_outstanding_messages = 1;
        spec.ack_deadline_ms = 1_000;
        home.handle(ShardMsg::Subscribe { key: key.clone(), sub: sub(1), spec }, 1, &mut out);
        home.handle(publish_msg(&key, &b"a"[..]), 1, &mut out);
        home.handle(publish_msg(&key, &b"b"[..]), 1, &mut out);
        out.clear();
        home.handle(credit_msg(&key, 1, 10), 1, &mut out);
        let tokens = delivered_tokens;
        let first = tokens(&out);
        assert_eq!(first.len(), 1);
        out.clear();
        home.tick(5_000, &mut out);
        assert!(tokens(&out).is_empty(), "given a second message while it holds the expired one");
        assert_eq!(home.queues[&key].ready.len(), 2, "the expired one is back in the queue");
        // Its settlement (too late to count) frees the place.
        let settle = ShardMsg::Settle { key: key.clone(), sub: sub(1), token: first[0], outcome: Outcome::Accepted };
        home.handle(settle, 5_001, &mut out);
        assert_eq!(tokens(&out).len(), 1);
    }

    /// A queue whose name leaves no room for `.dlq` within 255 bytes keeps a message
    /// delivered too often (at the tail, its count kept) instead of moving it to a
    /// dead-letter queue no client could attach to; one a byte shorter moves it.
    #[test]
    fn a_queue_too_long_for_its_dead_letter_name_keeps_its_message() {
        for (len, moved) in [(252, false), (251, true)] {
            let mut home = events_home();
            home.max_receive_count = 1;
            let key = ChannelKey::new(Pattern::Queues, &"n".repeat(len));
            let mut out = Vec::new();
            home.handle(publish_msg(&key, &b"poison"[..]), 1, &mut out);
            let mut spec = spec();
            spec.presettled = false;
            home.handle(ShardMsg::Subscribe { key: key.clone(), sub: sub(1), spec }, 1, &mut out);
            out.clear();
            home.handle(credit_msg(&key, 1, 1), 1, &mut out);
            let token = *delivered_tokens(&out).first().expect("delivered");
            out.clear();
            home.handle(unsubscribe_msg(&key, sub(1), vec![token]), 2, &mut out);
            let dead: Vec<String> = out
                .iter()
                .filter_map(|m| match m {
                    ShardMsg::DeadLetter { key, .. } => Some(key.name.to_string()),
                    _ => None,
                })
                .collect();
            let q = &home.queues[&key];
            let ready: Vec<(&[u8], u32)> = q.ready.iter().map(|i| (&i.msg.payload[..], i.receive_count)).collect();
            if moved {
                assert_eq!(dead, vec![format!("{}.dlq", key.name)]);
                assert!(ready.is_empty(), "{ready:?}");
                assert_eq!(dead[0].len(), 255);
            } else {
                assert!(dead.is_empty(), "{dead:?}");
                assert_eq!(ready, vec![(&b"poison"[..], 1)]);
            }
        }
    }

    /// The consumer with the most room under its byte watermark, passed over when it
    /// has no credit now: the next one the front message fits gets it in the same
    /// dispatch. A (100-byte watermark, 60 out) and B (100, 70 out) are held back by
    /// a 50-byte message with a 25-byte one behind it; A's credit goes to 0; C (no
    /// watermark) takes the 50 and B the 25. (Before, only A was taken out of the set,
    /// and the 25 waited for the next publish, settlement or credit.)
    #[test]
    fn a_blocked_consumer_without_credit_is_passed_over() {
        let mut home = events_home();
        let key = ChannelKey::new(Pattern::Queues, "passed-over");
        let mut out = Vec::new();
        let publish = |n: usize, home: &mut Home, out: &mut Vec<ShardMsg>| {
            home.handle(publish_msg(&key, vec![0u8; n]), 1, out);
        };
        let consumer = |link: u64, max_bytes: u64, credit: u32, home: &mut Home, out: &mut Vec<ShardMsg>| {
            let mut spec = spec();
            spec.presettled = false;
            spec.max_outstanding_bytes = max_bytes;
            home.handle(ShardMsg::Subscribe { key: key.clone(), sub: sub(link), spec }, 1, out);
            home.handle(credit_msg(&key, link, credit), 1, out);
        };
        consumer(1, 100, 10, &mut home, &mut out);
        publish(60, &mut home, &mut out);
        consumer(2, 100, 10, &mut home, &mut out);
        publish(70, &mut home, &mut out);
        publish(50, &mut home, &mut out);
        publish(25, &mut home, &mut out);
        assert_eq!((delivered_to(&out, 1), delivered_to(&out, 2)), (1, 1));
        home.handle(credit_msg(&key, 1, 0), 1, &mut out);
        out.clear();
        consumer(3, 0, 1, &mut home, &mut out);
        assert_eq!(delivered_to(&out, 3), 1, "C took the 50");
        assert_eq!(delivered_to(&out, 2), 1, "B took the 25");
        assert!(home.queues[&key].ready.is_empty());
    }

    /// A consumer past its byte watermark (one message larger than it went when nothing
    /// else was out) takes nothing, not even an empty message, until it settles: the
    /// dispatch ends (before, an empty message at the front woke it and held it back
    /// again without end: the shard spun), and its settlement gives it the message.
    #[test]
    fn an_empty_message_does_not_spin_a_consumer_past_its_watermark() {
        // On a thread of its own: were the dispatch to spin again, the test fails
        // (after a minute) instead of hanging the run.
        let (done, finished) = std::sync::mpsc::channel();
        let scenario = std::thread::spawn(move || {
            let mut home = events_home();
            let key = ChannelKey::new(Pattern::Queues, "empty");
            let mut out = Vec::new();
            let mut spec = spec();
            spec.presettled = false;
            spec.max_outstanding_bytes = 1;
            home.handle(ShardMsg::Subscribe { key: key.clone(), sub: sub(1), spec }, 1, &mut out);
            home.handle(credit_msg(&key, 1, 10), 1, &mut out);
            for n in [2, 0] {
                home.handle(publish_msg(&key, vec![0u8; n]), 1, &mut out);
            }
            assert_eq!(delivered_to(&out, 1), 1, "the 2-byte message went with nothing out");
            assert_eq!(home.queues[&key].ready.len(), 1, "the empty one waits");
            let token = delivered_tokens(&out)[0];
            out.clear();
            home.handle(
                ShardMsg::Settle { key: key.clone(), sub: sub(1), token, outcome: Outcome::Accepted },
                2,
                &mut out,
            );
            assert_eq!(delivered_to(&out, 1), 1, "its settlement let the empty one go");
            let _ = done.send(());
        });
        if let Err(std::sync::mpsc::RecvTimeoutError::Timeout) =
            finished.recv_timeout(std::time::Duration::from_secs(60))
        {
            panic!("the dispatch did not end");
        }
        if let Err(e) = scenario.join() {
            std::panic::resume_unwind(e);
        }
    }

    /// The ring of link `link`'s member of its events-store reader.
    fn member_ring(home: &Home, key: &ChannelKey, link: u64) -> Arc<StoreRing> {
        let s = &home.stores[key];
        let i = s.reader_of(sub(link)).unwrap();
        s.readers[i].members.iter().find(|m| m.sub == sub(link)).unwrap().ring.clone()
    }

    fn drain_ring(ring: &StoreRing) -> Vec<u64> {
        std::iter::from_fn(|| ring.ring.pop()).map(|(seq, _)| seq).collect()
    }

    fn group_spec(hold: bool, durable: bool) -> Box<SubSpec> {
        let mut spec = spec();
        spec.group = Some("g".to_owned());
        spec.max_unsettled = 4;
        spec.hold = hold;
        spec.durable = durable.then(|| "link".to_owned());
        spec
    }

    /// Consumer group "g" on events-store channel `name`: members `links` (each with
    /// `spec`), then `events` events published. The home, the key and its output.
    fn group_with_events(
        name: &str,
        links: &[u64],
        spec: impl Fn() -> Box<SubSpec>,
        events: u8,
    ) -> (Home, ChannelKey, Vec<ShardMsg>) {
        let mut home = events_home();
        let key = ChannelKey::new(Pattern::EventsStore, name);
        let mut out = Vec::new();
        for link in links {
            home.handle(ShardMsg::Subscribe { key: key.clone(), sub: sub(*link), spec: spec() }, 1, &mut out);
        }
        for n in 0..events {
            home.handle(publish_msg(&key, vec![n; 1]), 1, &mut out);
        }
        (home, key, out)
    }

    /// A lossless durable consumer group's cursor moves only past events every member
    /// has sent: members report how far they sent in their own rings, and one that
    /// reports ahead of another does not move it past the other's unsent events
    /// (before, the cursor took the furthest report, and a restart skipped them).
    #[test]
    fn a_lossless_group_cursor_waits_for_every_member() {
        let (mut home, key, mut out) = group_with_events("lossless-group", &[1, 2], || group_spec(true, true), 4);
        let (a, b) = (member_ring(&home, &key, 1), member_ring(&home, &key, 2));
        assert_eq!(drain_ring(&a), [1, 3]);
        let cursor = |home: &Home| home.stores[&key].cursors.get("group:g").map(|c| c.next);
        home.handle(ShardMsg::Consumed { key: key.clone(), sub: sub(1), next_seq: 4 }, 2, &mut out);
        assert_eq!(cursor(&home), Some(2), "event 2 is not sent yet");
        assert_eq!(drain_ring(&b), [2, 4]);
        home.handle(ShardMsg::Consumed { key: key.clone(), sub: sub(2), next_seq: 3 }, 2, &mut out);
        // Member 2 sent everything before 3; its next (4) is not sent yet. (The
        // cursor is at most one report behind: 3 was sent by member 1.)
        assert_eq!(cursor(&home), Some(3));
        home.handle(ShardMsg::Consumed { key: key.clone(), sub: sub(2), next_seq: 5 }, 2, &mut out);
        assert_eq!(cursor(&home), Some(5));
    }

    /// The events a member of a consumer group was given and never sent go to the
    /// members that stay, before any new event, once, whether the group is lossless or
    /// not (before, they were lost to the group). A lossless member takes them only
    /// once it has sent everything it had, so its ring stays in order and its reports
    /// stay true.
    #[test]
    fn a_group_members_unsent_events_go_to_the_members_that_stay() {
        for hold in [false, true] {
            let (mut home, key, mut out) = group_with_events("leaving-group", &[1, 2], || group_spec(hold, true), 4);
            let (a, b) = (member_ring(&home, &key, 1), member_ring(&home, &key, 2));
            // Member 1 sends event 1, holds 3 for its session window, and leaves.
            assert_eq!(a.ring.pop().map(|(seq, _)| seq), Some(1));
            assert_eq!(a.ring.pop().map(|(seq, _)| seq), Some(3));
            if hold {
                home.handle(ShardMsg::Consumed { key: key.clone(), sub: sub(1), next_seq: 2 }, 2, &mut out);
            }
            let bye = ShardMsg::Unsubscribe {
                key: key.clone(),
                sub: sub(1),
                stalled: false,
                resume_at: Some(3),
                confirm: false,
                sent: Vec::new(),
            };
            home.handle(bye, 2, &mut out);
            home.handle(publish_msg(&key, vec![9; 1]), 2, &mut out);
            let cursor = |home: &Home| home.stores[&key].cursors.get("group:g").map(|c| c.next);
            if hold {
                // Member 2 has not sent 2 and 4 yet: event 3 waits for it, and 5
                // after 3; the cursor stays before 2.
                assert_eq!(drain_ring(&b), [2, 4], "lossless");
                assert_eq!(cursor(&home), Some(2));
                home.handle(ShardMsg::Consumed { key: key.clone(), sub: sub(2), next_seq: 5 }, 3, &mut out);
                assert_eq!(cursor(&home), Some(3), "event 3 is not sent yet");
                assert_eq!(drain_ring(&b), [3, 5]);
                home.handle(ShardMsg::Consumed { key: key.clone(), sub: sub(2), next_seq: 4 }, 3, &mut out);
                assert_eq!(cursor(&home), Some(4), "event 5 is not sent yet");
                home.handle(ShardMsg::Consumed { key: key.clone(), sub: sub(2), next_seq: 6 }, 3, &mut out);
                assert_eq!(cursor(&home), Some(6));
            } else {
                assert_eq!(drain_ring(&b), [2, 4, 3, 5]);
            }
            home.handle(publish_msg(&key, vec![9; 1]), 3, &mut out);
            assert_eq!(b.ring.len(), 1, "hold {hold}: event 6 only, nothing given twice");
            // The last member leaves with event 6 unsent: a durable group's cursor is
            // before it.
            home.handle(unsubscribe_msg(&key, sub(2), Vec::new()), 3, &mut out);
            assert_eq!(cursor(&home), Some(6), "hold {hold}");
        }
    }

    /// `published` messages on a queue; the first consumer is given `given` of them
    /// and returns each undelivered, one by one; what a second consumer then gets.
    fn after_undelivered_returns(given: u32, published: u8) -> Vec<u8> {
        let mut home = events_home();
        let key = ChannelKey::new(Pattern::Queues, "returned");
        let mut out = Vec::new();
        let unsettled = || {
            let mut spec = spec();
            spec.presettled = false;
            spec.max_unsettled = 1_000;
            spec
        };
        home.handle(ShardMsg::Subscribe { key: key.clone(), sub: sub(1), spec: unsettled() }, 1, &mut out);
        home.handle(credit_msg(&key, 1, given), 1, &mut out);
        for n in 0..published {
            home.handle(publish_msg(&key, vec![n]), 1, &mut out);
        }
        let tokens = delivered_tokens(&out);
        assert_eq!(tokens.len(), given as usize);
        for token in tokens {
            let undelivered = ShardMsg::Settle { key: key.clone(), sub: sub(1), token, outcome: Outcome::Undelivered };
            home.handle(undelivered, 2, &mut out);
        }
        out.clear();
        home.handle(ShardMsg::Subscribe { key: key.clone(), sub: sub(2), spec: unsettled() }, 2, &mut out);
        home.handle(credit_msg(&key, 2, 1_000), 2, &mut out);
        out.iter()
            .filter_map(|m| match m {
                ShardMsg::Deliver { sub: s, msg, .. } if *s == sub(2) => Some(msg.payload[0]),
                _ => None,
            })
            .collect()
    }

    /// Queue deliveries that come back undelivered one by one (the consumer lowered
    /// its credit while they were on their way) go back to the front in publish order
    /// (before, each went to the very front, so they came out reversed).
    #[test]
    fn deliveries_returned_undelivered_keep_their_order() {
        assert_eq!(after_undelivered_returns(3, 5), [0, 1, 2, 3, 4]);
    }

    /// A hundred deliveries returned undelivered in a row, with a hundred messages
    /// behind them, come back in publish order.
    #[test]
    fn a_long_run_of_undelivered_returns_keeps_its_order() {
        assert_eq!(after_undelivered_returns(100, 200), (0..200u8).collect::<Vec<_>>());
    }

    /// A lossless member takes a leaver's events at once when they come after all it
    /// was given (its ring stays in rising order), without waiting to send what it has.
    #[test]
    fn a_lossless_member_takes_a_leavers_later_events_at_once() {
        let (mut home, key, mut out) = group_with_events("later-events", &[1, 2], || group_spec(true, true), 2);
        let a = member_ring(&home, &key, 1);
        // Member 1 has 1, member 2 has 2 and leaves having sent nothing: 2 comes after
        // all member 1 was given, so member 1 takes it before it has sent 1.
        home.handle(unsubscribe_msg(&key, sub(2), Vec::new()), 2, &mut out);
        assert_eq!(drain_ring(&a), [1, 2]);
        let cursor = |home: &Home| home.stores[&key].cursors.get("group:g").map(|c| c.next);
        assert_eq!(cursor(&home), Some(1));
        home.handle(ShardMsg::Consumed { key: key.clone(), sub: sub(1), next_seq: 3 }, 3, &mut out);
        assert_eq!(cursor(&home), Some(3));
    }

    /// A member of a deliver-first group detached for a credit stall loses the event
    /// the reader waited to place (the reference), not an event another member left
    /// behind; once that one is given again, a durable group's cursor is back where
    /// the reader is.
    #[test]
    fn a_stalled_member_loses_the_waiting_event_not_a_leavers() {
        let one_slot = || {
            let mut spec = group_spec(false, true);
            spec.max_unsettled = 1;
            spec
        };
        // One event each, the fourth waits (every ring full).
        let (mut home, key, mut out) = group_with_events("stalled-group", &[1, 2, 3], one_slot, 4);
        let c = member_ring(&home, &key, 3);
        // Member 1 leaves with its event unsent; member 2 is detached, stalled.
        home.handle(unsubscribe_msg(&key, sub(1), Vec::new()), 2, &mut out);
        let stalled = ShardMsg::Unsubscribe {
            key: key.clone(),
            sub: sub(2),
            stalled: true,
            resume_at: None,
            confirm: false,
            sent: Vec::new(),
        };
        home.handle(stalled, 2, &mut out);
        // Member 3 sends its event 3 and has room: member 1's event 1 comes, then
        // member 2's 2 (its window is given again, all but the event it stalled on).
        let cursor = |home: &Home| home.stores[&key].cursors.get("group:g").map(|c| c.next);
        assert_eq!(drain_ring(&c), [3]);
        home.handle(ShardMsg::RingSpace { key: key.clone(), sub: sub(3) }, 3, &mut out);
        assert_eq!(drain_ring(&c), [1], "event 4 was the one lost to the stall");
        assert_eq!(cursor(&home), Some(1));
        home.handle(ShardMsg::RingSpace { key: key.clone(), sub: sub(3) }, 3, &mut out);
        assert_eq!(drain_ring(&c), [2]);
        assert_eq!(cursor(&home), Some(5));
    }

    /// A consumer group's members are lossless all or none: a member whose stall
    /// mode differs from the group's is refused, and the group goes on.
    #[test]
    fn a_group_member_with_another_stall_mode_is_refused() {
        let mut home = events_home();
        let key = ChannelKey::new(Pattern::EventsStore, "mixed-group");
        let mut out = Vec::new();
        home.handle(ShardMsg::Subscribe { key: key.clone(), sub: sub(1), spec: group_spec(true, false) }, 1, &mut out);
        out.clear();
        home.handle(ShardMsg::Subscribe { key: key.clone(), sub: sub(2), spec: group_spec(false, false) }, 1, &mut out);
        assert!(
            matches!(&out[..], [ShardMsg::SubscribeDone { result: Err(("amqp:invalid-field", _)), .. }]),
            "{out:?}"
        );
        assert!(home.stores[&key].reader_of(sub(2)).is_none());
        home.handle(publish_msg(&key, vec![1; 1]), 1, &mut out);
        assert_eq!(drain_ring(&member_ring(&home, &key, 1)), [1]);
    }
}
