//! The channels homed on one shard: queues, events, events-store and RPC. Owned by
//! that shard alone (plain state, no locks); driven by [`ShardMsg`]s and answering
//! with more of them, which the shard router delivers.

use super::address::ChannelKey;
use super::message::SelectorView;
use super::selector::Selector;
use super::{Msg, Outcome, ShardMsg, StartPos, StoreRing, SubRef, SubSpec};
use crate::config::Pattern;
use crossbeam_queue::ArrayQueue;
use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// Requests waiting for a responder, per RPC channel, at most.
const RPC_WAITING_MAX: usize = 10_000;

/// Counters kept by the home (read when metrics are scraped).
#[derive(Debug, Default, Clone)]
pub struct HomeStats {
    /// Events dropped because the subscriber had no credit.
    pub events_dropped_no_credit: u64,
    /// Inbound messages dropped (RPC requests nobody could take in time).
    pub transfers_in_dropped: u64,
}

/// Backlog of one channel (for metrics and the admin API).
#[derive(Debug, Clone, PartialEq)]
pub struct ChannelStats {
    /// Channel.
    pub key: ChannelKey,
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
}

/// Every channel homed on this shard.
#[derive(Debug, Default)]
pub struct Home {
    queues: HashMap<ChannelKey, QueueChan>,
    events: HashMap<ChannelKey, EventsChan>,
    stores: HashMap<ChannelKey, StoreChan>,
    rpcs: HashMap<ChannelKey, RpcChan>,
    /// Counters.
    pub stats: HomeStats,
}

/// Credit as the home sees it: the connection's credit minus deliveries on their way.
#[derive(Debug, Default, Clone, Copy)]
struct Credit {
    credit: u32,
    /// Deliveries dispatched (wrapping), comparable with the link's delivery-count.
    sent: u32,
    drain: bool,
}

impl Credit {
    fn update(&mut self, credit: u32, delivery_count: u32, drain: bool) {
        let in_flight = (self.sent.wrapping_sub(delivery_count) as i32).max(0) as u32;
        self.credit = credit.saturating_sub(in_flight);
        self.drain = drain;
    }

    fn take(&mut self) {
        self.credit -= 1;
        self.sent = self.sent.wrapping_add(1);
    }

    /// Complete a drain: the link's delivery-count will advance by what is left.
    fn finish_drain(&mut self, sub: SubRef, out: &mut Vec<ShardMsg>) {
        if self.drain {
            self.sent = self.sent.wrapping_add(self.credit);
            self.credit = 0;
            self.drain = false;
            out.push(ShardMsg::DrainDone { sub });
        }
    }
}

impl Home {
    /// Handle one home-bound message; messages to send are appended to `out`.
    pub fn handle(&mut self, msg: ShardMsg, now_ms: u64, out: &mut Vec<ShardMsg>) {
        match msg {
            ShardMsg::Publish { key, msg, ack } => {
                let bytes = msg.payload.len() as u64;
                match key.pattern {
                    Pattern::Queues => self.queues.entry(key.clone()).or_default().publish(msg, out),
                    Pattern::Events => {
                        let stats = &mut self.stats;
                        self.events.entry(key.clone()).or_default().publish(msg, stats, out)
                    }
                    Pattern::EventsStore => self.stores.entry(key.clone()).or_default().publish(msg, out),
                    // RPC channels receive RpcRequest, never Publish.
                    Pattern::Commands | Pattern::Queries => {}
                }
                self.count_publish(&key, bytes);
                if let Some(ack) = ack {
                    out.push(ShardMsg::PublishDone { ack, result: Ok(()) });
                }
            }
            ShardMsg::Subscribe { key, sub, spec } => match key.pattern {
                Pattern::Queues => self.queues.entry(key).or_default().subscribe(sub, &spec, out),
                Pattern::Events => self.events.entry(key).or_default().subscribe(sub, *spec, out),
                Pattern::EventsStore => self.stores.entry(key).or_default().subscribe(sub, *spec, now_ms, out),
                Pattern::Commands | Pattern::Queries => {
                    self.rpcs.entry(key).or_default().subscribe(sub, &spec, now_ms, out)
                }
            },
            ShardMsg::Credit { key, sub, credit, delivery_count, drain } => match key.pattern {
                Pattern::Queues => {
                    if let Some(q) = self.queues.get_mut(&key) {
                        if let Some(c) = q.consumer(sub) {
                            c.credit.update(credit, delivery_count, drain);
                        }
                        q.dispatch(out);
                    }
                }
                Pattern::Events => {
                    if let Some(e) = self.events.get_mut(&key) {
                        if let Some(s) = e.subs.iter_mut().find(|s| s.sub == sub) {
                            s.credit.update(credit, delivery_count, drain);
                            // Events are never held: a drain completes at once.
                            s.credit.finish_drain(sub, out);
                        }
                    }
                }
                Pattern::EventsStore => {
                    // The ring is emptied by the connection, which completes drains itself.
                }
                Pattern::Commands | Pattern::Queries => {
                    if let Some(r) = self.rpcs.get_mut(&key) {
                        if let Some(s) = r.responders.iter_mut().find(|s| s.sub == sub) {
                            s.credit.update(credit, delivery_count, drain);
                        }
                        r.dispatch(now_ms, &mut self.stats, out);
                    }
                }
            },
            ShardMsg::Settle { key, sub, token, outcome } => {
                if let Some(q) = self.queues.get_mut(&key) {
                    q.settle(sub, token, outcome);
                    q.dispatch(out);
                }
            }
            ShardMsg::Unsubscribe { key, sub, stalled } => match key.pattern {
                Pattern::Queues => {
                    if let Some(q) = self.queues.get_mut(&key) {
                        q.unsubscribe(sub);
                        q.dispatch(out);
                    }
                }
                Pattern::Events => {
                    if let Some(e) = self.events.get_mut(&key) {
                        e.subs.retain(|s| s.sub != sub);
                    }
                }
                Pattern::EventsStore => {
                    if let Some(s) = self.stores.get_mut(&key) {
                        s.unsubscribe(sub, stalled);
                    }
                }
                Pattern::Commands | Pattern::Queries => {
                    if let Some(r) = self.rpcs.get_mut(&key) {
                        r.responders.retain(|s| s.sub != sub);
                    }
                }
            },
            ShardMsg::RingSpace { key, sub } => {
                if let Some(s) = self.stores.get_mut(&key) {
                    if let Some(i) = s.readers.iter().position(|r| r.members.iter().any(|m| m.sub == sub)) {
                        s.readers[i].waiting = false;
                        s.feed(i, out);
                    }
                }
            }
            ShardMsg::RpcRequest { key, msg, deadline_ms } => {
                let r = self.rpcs.entry(key).or_default();
                if r.waiting.len() >= RPC_WAITING_MAX {
                    r.waiting.pop_front();
                    self.stats.transfers_in_dropped += 1;
                }
                r.waiting.push_back((msg, deadline_ms));
                r.dispatch(now_ms, &mut self.stats, out);
            }
            // Connection-bound messages never reach the home.
            _ => {}
        }
    }

    fn count_publish(&mut self, key: &ChannelKey, bytes: u64) {
        let c = match key.pattern {
            Pattern::Queues => self.queues.get_mut(key).map(|q| &mut q.counters),
            Pattern::Events => self.events.get_mut(key).map(|q| &mut q.counters),
            Pattern::EventsStore => self.stores.get_mut(key).map(|q| &mut q.counters),
            _ => None,
        };
        if let Some(c) = c {
            c.0 += 1;
            c.1 += bytes;
        }
    }

    /// Backlog of every channel homed here.
    pub fn channel_stats(&self) -> Vec<ChannelStats> {
        let mut v = Vec::new();
        for (k, q) in &self.queues {
            v.push(ChannelStats {
                key: k.clone(),
                undelivered: q.ready.len() as u64,
                outstanding: q.unacked.len() as u64,
                consumers: q.consumers.len() as u64,
                published: q.counters.0,
                published_bytes: q.counters.1,
            });
        }
        for (k, e) in &self.events {
            v.push(ChannelStats {
                key: k.clone(),
                undelivered: 0,
                outstanding: 0,
                consumers: e.subs.len() as u64,
                published: e.counters.0,
                published_bytes: e.counters.1,
            });
        }
        for (k, s) in &self.stores {
            v.push(ChannelStats {
                key: k.clone(),
                undelivered: s.log.len() as u64,
                outstanding: s.readers.iter().flat_map(|r| &r.members).map(|m| m.ring.ring.len() as u64).sum(),
                consumers: s.readers.iter().map(|r| r.members.len() as u64).sum(),
                published: s.counters.0,
                published_bytes: s.counters.1,
            });
        }
        v
    }
}

// ------------------------------------------------------------------ queues

#[derive(Debug, Clone)]
struct QItem {
    msg: Msg,
    receive_count: u32,
}

#[derive(Debug)]
struct Consumer {
    sub: SubRef,
    credit: Credit,
    unsettled: u32,
    presettled: bool,
    max_unsettled: u32,
    batch: u32,
}

#[derive(Debug, Default)]
struct QueueChan {
    ready: VecDeque<QItem>,
    unacked: HashMap<u64, (QItem, SubRef)>,
    consumers: Vec<Consumer>,
    rr: usize,
    next_token: u64,
    counters: (u64, u64),
}

impl QueueChan {
    fn publish(&mut self, msg: Msg, out: &mut Vec<ShardMsg>) {
        self.ready.push_back(QItem { msg, receive_count: 0 });
        self.dispatch(out);
    }

    fn consumer(&mut self, sub: SubRef) -> Option<&mut Consumer> {
        self.consumers.iter_mut().find(|c| c.sub == sub)
    }

    fn subscribe(&mut self, sub: SubRef, spec: &SubSpec, out: &mut Vec<ShardMsg>) {
        self.consumers.push(Consumer {
            sub,
            credit: Credit::default(),
            unsettled: 0,
            presettled: spec.presettled,
            max_unsettled: spec.max_unsettled.max(1),
            batch: spec.batch.max(1),
        });
        out.push(ShardMsg::SubscribeDone { sub, result: Ok(None) });
    }

    /// Competing consumers, in rounds: each round gives every consumer a batch of
    /// min(credit, GetBatchSize, MaxUnsettled - unsettled) messages.
    fn dispatch(&mut self, out: &mut Vec<ShardMsg>) {
        let n = self.consumers.len();
        while !self.ready.is_empty() && n > 0 {
            let mut progressed = false;
            for i in 0..n {
                let idx = (self.rr + i) % n;
                let c = &mut self.consumers[idx];
                let room = if c.presettled { u32::MAX } else { c.max_unsettled.saturating_sub(c.unsettled) };
                let take = c.credit.credit.min(c.batch).min(room);
                for _ in 0..take {
                    let Some(mut item) = self.ready.pop_front() else { break };
                    item.receive_count += 1;
                    let token = self.next_token;
                    self.next_token += 1;
                    c.credit.take();
                    progressed = true;
                    out.push(ShardMsg::Deliver {
                        sub: c.sub,
                        token,
                        msg: item.msg.clone(),
                        receive_count: item.receive_count,
                        settled: c.presettled,
                    });
                    if !c.presettled {
                        c.unsettled += 1;
                        self.unacked.insert(token, (item, c.sub));
                    }
                }
                if self.ready.is_empty() {
                    break;
                }
            }
            self.rr = (self.rr + 1) % n;
            if !progressed {
                break;
            }
        }
        // Drains are answered at once: what could be delivered has been.
        for c in &mut self.consumers {
            c.credit.finish_drain(c.sub, out);
        }
    }

    fn settle(&mut self, sub: SubRef, token: u64, outcome: Outcome) {
        let Some((mut item, owner)) = self.unacked.remove(&token) else { return };
        if owner != sub {
            self.unacked.insert(token, (item, owner));
            return;
        }
        if let Some(c) = self.consumer(sub) {
            c.unsettled = c.unsettled.saturating_sub(1);
        }
        match outcome {
            Outcome::Accepted | Outcome::Rejected => {}
            Outcome::Requeue => self.ready.push_back(item),
            Outcome::Undelivered => {
                item.receive_count = item.receive_count.saturating_sub(1);
                self.ready.push_front(item);
            }
        }
    }

    /// Every unsettled delivery of the link goes back to the tail, exactly once, in
    /// the order it was delivered.
    fn unsubscribe(&mut self, sub: SubRef) {
        self.consumers.retain(|c| c.sub != sub);
        let mut mine: Vec<u64> = self.unacked.iter().filter(|(_, (_, s))| *s == sub).map(|(t, _)| *t).collect();
        mine.sort_unstable();
        for t in mine {
            if let Some((item, _)) = self.unacked.remove(&t) {
                self.ready.push_back(item);
            }
        }
        if self.rr >= self.consumers.len() {
            self.rr = 0;
        }
    }
}

// ------------------------------------------------------------------ events

#[derive(Debug)]
struct EvSub {
    sub: SubRef,
    credit: Credit,
    group: Option<String>,
    selector: Option<Selector>,
}

#[derive(Debug, Default)]
struct EventsChan {
    subs: Vec<EvSub>,
    group_rr: HashMap<String, usize>,
    counters: (u64, u64),
}

impl EventsChan {
    fn subscribe(&mut self, sub: SubRef, spec: SubSpec, out: &mut Vec<ShardMsg>) {
        self.subs.push(EvSub { sub, credit: Credit::default(), group: spec.group, selector: spec.selector });
        out.push(ShardMsg::SubscribeDone { sub, result: Ok(None) });
    }

    /// Fan out: each subscriber without a group gets the event, each group gets it
    /// once (round-robin over members with credit); no credit means dropped, counted.
    fn publish(&mut self, msg: Msg, stats: &mut HomeStats, out: &mut Vec<ShardMsg>) {
        let view = self.subs.iter().any(|s| s.selector.is_some()).then(|| SelectorView::new(&msg.payload));
        let matches = |s: &EvSub| match (&s.selector, &view) {
            (Some(sel), Some(v)) => sel.matches(v),
            _ => true,
        };
        let mut groups: Vec<String> = Vec::new();
        for i in 0..self.subs.len() {
            let s = &self.subs[i];
            if let Some(g) = &s.group {
                if !groups.contains(g) {
                    groups.push(g.clone());
                }
                continue;
            }
            if !matches(s) {
                continue;
            }
            let s = &mut self.subs[i];
            if s.credit.credit > 0 {
                s.credit.take();
                out.push(ShardMsg::Deliver { sub: s.sub, token: 0, msg: msg.clone(), receive_count: 0, settled: true });
            } else {
                stats.events_dropped_no_credit += 1;
            }
        }
        for g in groups {
            let members: Vec<usize> = (0..self.subs.len())
                .filter(|i| self.subs[*i].group.as_deref() == Some(g.as_str()) && matches(&self.subs[*i]))
                .collect();
            if members.is_empty() {
                continue;
            }
            let rr = self.group_rr.entry(g).or_insert(0);
            let pick = (0..members.len())
                .map(|k| members[(*rr + k) % members.len()])
                .find(|i| self.subs[*i].credit.credit > 0);
            *rr = rr.wrapping_add(1);
            match pick {
                Some(i) => {
                    let s = &mut self.subs[i];
                    s.credit.take();
                    out.push(ShardMsg::Deliver {
                        sub: s.sub,
                        token: 0,
                        msg: msg.clone(),
                        receive_count: 0,
                        settled: true,
                    });
                }
                None => stats.events_dropped_no_credit += 1,
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
}

#[derive(Debug)]
struct Member {
    sub: SubRef,
    ring: Arc<StoreRing>,
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
}

#[derive(Debug)]
struct StoreChan {
    log: VecDeque<StoredEvent>,
    next_seq: u64,
    readers: Vec<Reader>,
    cursors: HashMap<String, u64>,
    live: HashSet<String>,
    counters: (u64, u64),
}

impl Default for StoreChan {
    fn default() -> Self {
        StoreChan {
            log: VecDeque::new(),
            next_seq: 1,
            readers: Vec::new(),
            cursors: HashMap::new(),
            live: HashSet::new(),
            counters: (0, 0),
        }
    }
}

impl StoreChan {
    fn first_seq(&self) -> u64 {
        self.log.front().map_or(self.next_seq, |e| e.seq)
    }

    fn publish(&mut self, msg: Msg, out: &mut Vec<ShardMsg>) {
        let seq = self.next_seq;
        self.next_seq += 1;
        self.log.push_back(StoredEvent { seq, ts_ms: msg.received_ms, msg });
        for i in 0..self.readers.len() {
            self.feed(i, out);
        }
    }

    fn start_seq(&self, start: StartPos) -> u64 {
        match start {
            StartPos::NewOnly => self.next_seq,
            StartPos::First => self.first_seq(),
            StartPos::Last => {
                if self.log.is_empty() {
                    self.next_seq
                } else {
                    self.next_seq - 1
                }
            }
            StartPos::Sequence(n) => n.max(1).max(self.first_seq()).min(self.next_seq),
            StartPos::Time(t) => {
                let i = self.log.partition_point(|e| e.ts_ms < t);
                self.log.get(i).map_or(self.next_seq, |e| e.seq)
            }
        }
    }

    fn subscribe(&mut self, sub: SubRef, spec: SubSpec, _now_ms: u64, out: &mut Vec<ShardMsg>) {
        if let Some(id) = &spec.durable {
            if self.live.contains(id) {
                out.push(ShardMsg::SubscribeDone {
                    sub,
                    result: Err(("amqp:not-allowed", "durable subscription in use".into())),
                });
                return;
            }
            self.live.insert(id.clone());
        }
        let ring = Arc::new(StoreRing {
            ring: ArrayQueue::new(spec.max_unsettled.max(1) as usize),
            home_waiting: AtomicBool::new(false),
        });
        out.push(ShardMsg::SubscribeDone { sub, result: Ok(Some(ring.clone())) });
        let member = Member { sub, ring };
        // A group shares one cursor; its first member's start position sets it.
        if let Some(g) = &spec.group {
            if let Some(i) = self.readers.iter().position(|r| r.group.as_deref() == Some(g.as_str())) {
                self.readers[i].members.push(member);
                self.feed(i, out);
                return;
            }
        }
        let next = match spec.durable.as_ref().and_then(|id| self.cursors.get(id)) {
            Some(c) => (*c).max(self.first_seq()),
            None => self.start_seq(spec.start),
        };
        self.readers.push(Reader {
            members: vec![member],
            rr: 0,
            next,
            group: spec.group,
            selector: spec.selector,
            durable: spec.durable,
            waiting: false,
        });
        let i = self.readers.len() - 1;
        self.feed(i, out);
    }

    /// Move events from the log into the reader's ring(s). Positions are taken
    /// (and a durable cursor advanced) as they enter a ring: deliver-first.
    fn feed(&mut self, i: usize, out: &mut Vec<ShardMsg>) {
        let first = self.first_seq();
        let r = &mut self.readers[i];
        if r.waiting || r.members.is_empty() {
            return;
        }
        if r.next < first {
            r.next = first;
        }
        while r.next < self.next_seq {
            let Some(ev) = self.log.get((r.next - first) as usize) else { break };
            if let Some(sel) = &r.selector {
                if !sel.matches(&SelectorView::new(&ev.msg.payload)) {
                    r.next += 1;
                    continue;
                }
            }
            let n = r.members.len();
            let mut placed = false;
            for k in 0..n {
                let m = &r.members[(r.rr + k) % n];
                let was_empty = m.ring.ring.is_empty();
                if m.ring.ring.push((ev.seq, ev.msg.clone())).is_ok() {
                    if was_empty {
                        out.push(ShardMsg::RingReady { sub: m.sub });
                    }
                    placed = true;
                    break;
                }
            }
            if !placed {
                // Every ring is full: the connection decides whether this is a
                // credit stall (credit 0: detach) or a slow consumer (wait for room).
                r.waiting = true;
                for m in &r.members {
                    m.ring.home_waiting.store(true, Ordering::Release);
                    out.push(ShardMsg::RingFull { sub: m.sub });
                }
                break;
            }
            r.rr = r.rr.wrapping_add(1);
            r.next += 1;
            if let Some(id) = &r.durable {
                self.cursors.insert(id.clone(), r.next);
            }
        }
    }

    fn unsubscribe(&mut self, sub: SubRef, stalled: bool) {
        let Some(i) = self.readers.iter().position(|r| r.members.iter().any(|m| m.sub == sub)) else { return };
        let r = &mut self.readers[i];
        r.members.retain(|m| m.sub != sub);
        if stalled {
            // The event that found the window full is lost with it.
            r.next += 1;
            r.waiting = false;
        }
        if let Some(id) = r.durable.clone() {
            self.cursors.insert(id.clone(), r.next);
            self.live.remove(&id);
        }
        if self.readers[i].members.is_empty() {
            self.readers.remove(i);
        }
    }
}

// ------------------------------------------------------------------ commands / queries

#[derive(Debug)]
struct Responder {
    sub: SubRef,
    credit: Credit,
    presettled: bool,
}

#[derive(Debug, Default)]
struct RpcChan {
    responders: Vec<Responder>,
    rr: usize,
    waiting: VecDeque<(Msg, u64)>,
}

impl RpcChan {
    fn subscribe(&mut self, sub: SubRef, spec: &SubSpec, now_ms: u64, out: &mut Vec<ShardMsg>) {
        self.responders.push(Responder { sub, credit: Credit::default(), presettled: spec.presettled });
        out.push(ShardMsg::SubscribeDone { sub, result: Ok(None) });
        let mut stats = HomeStats::default();
        self.dispatch(now_ms, &mut stats, out);
    }

    /// Requests go round-robin to responders with credit; expired ones are dropped.
    fn dispatch(&mut self, now_ms: u64, stats: &mut HomeStats, out: &mut Vec<ShardMsg>) {
        while let Some((msg, deadline)) = self.waiting.pop_front() {
            if deadline <= now_ms {
                stats.transfers_in_dropped += 1;
                continue;
            }
            let n = self.responders.len();
            let pick = (0..n).map(|k| (self.rr + k) % n).find(|i| self.responders[*i].credit.credit > 0);
            let Some(i) = pick else {
                self.waiting.push_front((msg, deadline));
                break;
            };
            self.rr = (i + 1) % n.max(1);
            let r = &mut self.responders[i];
            r.credit.take();
            out.push(ShardMsg::Deliver { sub: r.sub, token: 0, msg, receive_count: 0, settled: r.presettled });
        }
        for r in &mut self.responders {
            r.credit.finish_drain(r.sub, out);
        }
    }
}
