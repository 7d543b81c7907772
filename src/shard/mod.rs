//! Shards: one glommio executor per core, each with its own listener, its own
//! connections and the channels homed on it. Shards talk only through the router:
//! a bounded lock-free ring per pair of shards (glommio's channel mesh), fed from a
//! local outbox so that no task ever blocks on another shard.

pub mod metrics;

use crate::broker::directory::RouteCache;
use crate::broker::home::Home;
use crate::broker::{steady_ms, wall_ms, PublishRefusal, ShardMsg};
use crate::config::{Pattern, Settings};
use glommio::channels::channel_mesh::{MeshBuilder, Senders};
use metrics::{AdminRequest, ShardCounters};
use std::cell::{Cell, RefCell};
use std::collections::VecDeque;

/// Maps on the per-message path: foldhash (fast, seeded per map), not SipHash.
type HashMap<K, V> = std::collections::HashMap<K, V, foldhash::fast::RandomState>;

use std::rc::Rc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::Waker;
use std::time::Duration;

/// Capacity of each shard-to-shard ring, in batches.
pub const RING_CAPACITY: usize = 64;
/// Most messages (by weight: a publish batch counts each event) carried by one ring
/// entry: one wake-up of the peer shard per batch, not per message.
pub const RING_BATCH: usize = 512;
/// A producer's credit top-up waits while an outbox of its shard holds more than this.
/// With the ring (at most RING_CAPACITY x RING_BATCH messages) this bounds what one
/// shard can have on its way to another (about 48 Ki messages) well below what the events
/// window (`SLUICE_EVENTS_IN_FLIGHT_BYTES`, 32 MiB by default) lets one subscriber have in
/// flight, so a pipeline that is merely busy does not drop.
pub const OUTBOX_HIGH_WATER: usize = 16 * 1024;

/// State shared by all shards of the process (read-mostly, or atomics off the data path).
#[derive(Debug)]
pub struct Global {
    /// Settings.
    pub settings: Settings,
    /// Live connections across all shards (for MaxConnections).
    pub connections: AtomicUsize,
    /// Live connections per shard, counted from the moment a shard is chosen for a
    /// connection (placement: a new connection goes to the shard with the fewest).
    pub shard_connections: Vec<AtomicUsize>,
    /// Set on SIGTERM.
    pub shutting_down: AtomicBool,
    /// Admin requests, one queue per shard.
    pub admin: Vec<Arc<crossbeam_queue::ArrayQueue<AdminRequest>>>,
    /// Shards that finished start-up (listener bound).
    pub ready: AtomicUsize,
    /// Authentication and authorization (shared, read-only).
    pub auth: Arc<crate::auth::Authenticator>,
    /// The TLS listener's configuration, loaded once for every shard (None without a
    /// certificate).
    pub tls: Option<Arc<rustls::ServerConfig>>,
    /// Per shard: its store can write (produce credit towards its channels stops when not).
    pub store_ok: Vec<std::sync::Arc<AtomicBool>>,
    /// The homes of the events channels (the shard of each one's first subscriber).
    pub events_dir: Arc<crate::broker::directory::EventsDirectory>,
    /// What recovery found, per shard; each shard takes its own at start-up.
    pub recovered: std::sync::Mutex<Vec<Option<crate::store::recovery::RecoveredShard>>>,
    /// Per shard: when its oldest connection still in its handshake began, in ms since
    /// `epoch` plus one (0: none), so that at MaxConnections a shard finds one on
    /// another shard to give up.
    pub oldest_handshake: Vec<std::sync::atomic::AtomicU64>,
    /// The origin of `oldest_handshake`.
    pub epoch: std::time::Instant,
}

/// Bytes of what other connections sent one connection (messages for its dynamic nodes,
/// RPC responses) that may wait in its inbox, at most: a driver blocked writing to a
/// peer that does not read takes nothing from its inbox, and nothing else bounds
/// these (what homes send is bounded by credit). One always enters an inbox that holds
/// none of them.
pub const INBOX_FOREIGN_BYTES_MAX: u64 = 64 << 20;

/// Messages for one connection, and how to wake its driver.
#[derive(Default)]
pub struct Inbox {
    queue: RefCell<Vec<ShardMsg>>,
    waker: Cell<Option<Waker>>,
    /// Bytes of the queued messages other connections sent ([`INBOX_FOREIGN_BYTES_MAX`]).
    foreign: Cell<u64>,
}

impl Inbox {
    /// Queue a message and wake the driver; a message from another connection that
    /// would pass [`INBOX_FOREIGN_BYTES_MAX`] is given back.
    pub fn push(&self, m: ShardMsg) -> Result<(), ShardMsg> {
        let foreign = match &m {
            ShardMsg::NodeMessage { msg, node, .. } => Some(msg.payload.len() + node.len()),
            ShardMsg::RpcResponse { msg, .. } => Some(msg.payload.len()),
            _ => None,
        };
        if let Some(len) = foreign {
            // With the message's own slot: many small ones are bounded as well.
            let size = (len + std::mem::size_of::<ShardMsg>()) as u64;
            let held = self.foreign.get();
            if held > 0 && held.saturating_add(size) > INBOX_FOREIGN_BYTES_MAX {
                return Err(m);
            }
            self.foreign.set(held + size);
        }
        self.queue.borrow_mut().push(m);
        if let Some(w) = self.waker.take() {
            w.wake();
        }
        Ok(())
    }

    /// Take every queued message.
    pub fn drain(&self, into: &mut Vec<ShardMsg>) {
        self.foreign.set(0);
        let mut q = self.queue.borrow_mut();
        if into.is_empty() {
            // The usual case: trade buffers, nothing is copied.
            std::mem::swap(&mut *q, into);
        } else {
            into.append(&mut q);
        }
    }

    /// True when messages are waiting.
    pub fn is_empty(&self) -> bool {
        self.queue.borrow().is_empty()
    }

    /// Register the driver's waker.
    pub fn register(&self, w: &Waker) {
        self.waker.set(Some(w.clone()));
    }
}

/// A connection in its handshake, as the connection limit sees it.
#[derive(Debug)]
pub struct Handshake {
    /// When it was accepted.
    pub since: std::time::Instant,
    /// Set while it is in its TLS handshake (its driver does not run yet): how it is
    /// told to give its place up (answered true).
    pub tls: Option<Rc<Answer>>,
}

/// An answer a task waits for (set once, wakes the waiter).
#[derive(Debug, Default)]
pub struct Answer {
    value: Cell<Option<bool>>,
    waker: RefCell<Option<std::task::Waker>>,
}

impl Answer {
    /// Give the answer.
    pub fn set(&self, v: bool) {
        self.value.set(Some(v));
        if let Some(w) = self.waker.borrow_mut().take() {
            w.wake();
        }
    }

    /// True once answered.
    pub fn is_set(&self) -> bool {
        self.value.get().is_some()
    }

    /// The answer, once given.
    pub async fn wait(&self) -> bool {
        futures_lite::future::poll_fn(|cx| match self.value.get() {
            Some(v) => std::task::Poll::Ready(v),
            None => {
                *self.waker.borrow_mut() = Some(cx.waker().clone());
                std::task::Poll::Pending
            }
        })
        .await
    }
}

/// One shard's context, shared by its tasks (`Rc`: never leaves the thread).
pub struct Shard {
    /// Shard index.
    pub id: u16,
    /// Number of shards.
    pub shards: usize,
    /// Process-wide state.
    pub global: Arc<Global>,
    /// Channels homed here.
    pub home: RefCell<Home>,
    /// Connections of this shard.
    pub conns: RefCell<HashMap<u64, Rc<Inbox>>>,
    /// Connections of this shard still in their handshake (TLS, then AMQP until
    /// OPEN), by id (so oldest first); changed through `handshake_begin` and
    /// `handshake_end`, which publish the oldest in `Global::oldest_handshake`.
    handshaking: RefCell<std::collections::BTreeMap<u64, Handshake>>,
    /// Evictions asked of other shards, by request number, waiting for their answer.
    pub evict_waits: RefCell<HashMap<u64, Rc<Answer>>>,
    /// The next such request number.
    pub next_evict: Cell<u64>,
    next_conn: Cell<u64>,
    outboxes: Vec<RefCell<VecDeque<ShardMsg>>>,
    /// Messages waiting in each outbox (a batch counts each message it carries).
    outbox_weight: Vec<Cell<usize>>,
    outbox_wakers: Vec<Cell<Option<Waker>>>,
    local: RefCell<VecDeque<ShardMsg>>,
    pumping: Cell<bool>,
    /// The homes' output buffer, kept between [`Self::pump_local`] calls (one
    /// allocation per shard, not one per routed message).
    home_out: Cell<Vec<ShardMsg>>,
    /// Steady clock ([`steady_ms`]) read once per driver turn, ring batch or tick: the
    /// homes use it instead of reading the clock for every message.
    clock_ms: Cell<u64>,
    /// Wall clock (epoch ms) read with `clock_ms`: message timestamps.
    wall_ms: Cell<u64>,
    /// What this shard has read from `global.events_dir`.
    routes: RefCell<RouteCache>,
    /// Counters for metrics (plain cells, aggregated at scrape time).
    pub counters: ShardCounters,
    /// Connection and link details for the admin API, refreshed by each driver.
    pub registry: RefCell<metrics::Registry>,
    /// The durable store's logs of this shard.
    pub journals: [Rc<RefCell<crate::store::Journal>>; 2],
    /// TLS acceptor when the TLS listener is on: serves this shard's TLS connections
    /// and those handed over by other shards.
    pub tls: Option<futures_rustls::TlsAcceptor>,
    /// Random bytes from the OS not yet used ([`Shard::random_bytes`]), and how many
    /// of them were.
    random: RefCell<(Box<[u8; 4096]>, usize)>,
}

/// Fill `buf` from the kernel's random source: getrandom(2), which needs no file
/// descriptor (a broker at its descriptor limit still gets its bytes) and fails on Linux
/// 3.17 and later only for a bad buffer or an interruption (retried). Should it fail for
/// another reason the process exits: names other connections could guess are worse than
/// no broker.
#[allow(unsafe_code)]
fn fill_random(buf: &mut [u8]) {
    let mut at = 0;
    while at < buf.len() {
        let rest = &mut buf[at..];
        // SAFETY: the pointer and length describe `rest`, writable and owned by the caller
        // for the duration of the call.
        let n = unsafe { libc::getrandom(rest.as_mut_ptr().cast(), rest.len(), 0) };
        if n < 0 {
            let e = std::io::Error::last_os_error();
            if e.kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            tracing::error!(error = %e, "getrandom failed");
            std::process::exit(1);
        }
        at += n as usize;
    }
}

impl Shard {
    /// Connection `id` is in its handshake (at MaxConnections, a new connection may
    /// take its place).
    pub fn handshake_begin(&self, id: u64, h: Handshake) {
        let mut m = self.handshaking.borrow_mut();
        m.insert(id, h);
        self.publish_oldest_handshake(&m);
    }

    /// Connection `id` is out of its handshake (or ended, or given up).
    pub fn handshake_end(&self, id: u64) -> Option<Handshake> {
        let mut m = self.handshaking.borrow_mut();
        let h = m.remove(&id)?;
        self.publish_oldest_handshake(&m);
        Some(h)
    }

    /// The oldest connection still in its handshake, out of the map, if it has been
    /// for `at_least`.
    pub fn take_oldest_handshake(&self, at_least: std::time::Duration) -> Option<(u64, Handshake)> {
        let mut m = self.handshaking.borrow_mut();
        let entry = m.first_entry()?;
        if entry.get().since.elapsed() < at_least {
            return None;
        }
        let taken = entry.remove_entry();
        self.publish_oldest_handshake(&m);
        Some(taken)
    }

    fn publish_oldest_handshake(&self, m: &std::collections::BTreeMap<u64, Handshake>) {
        let g = &self.global;
        // Rounded up: another shard reading it never takes one for older than it is.
        let ms = |d: std::time::Duration| (d.as_micros() as u64).div_ceil(1000);
        let v = m.values().next().map_or(0, |h| ms(h.since.saturating_duration_since(g.epoch)) + 1);
        if let Some(a) = g.oldest_handshake.get(self.id as usize) {
            a.store(v, Ordering::Relaxed);
        }
    }

    /// A new connection id.
    pub fn next_conn_id(&self) -> u64 {
        let id = self.next_conn.get();
        self.next_conn.set(id + 1);
        id
    }

    /// Read the clocks and remember them for this turn: the steady clock for the
    /// homes' deadlines (returned), the wall clock for timestamps ([`Shard::wall_ms`]).
    pub fn refresh_clock(&self) -> u64 {
        let t = steady_ms();
        self.clock_ms.set(t);
        self.wall_ms.set(wall_ms());
        t
    }

    /// The steady clock as of the last [`Shard::refresh_clock`].
    pub fn steady_ms(&self) -> u64 {
        self.clock_ms.get()
    }

    /// The wall clock as of the last [`Shard::refresh_clock`] (epoch ms).
    pub fn wall_ms(&self) -> u64 {
        self.wall_ms.get()
    }

    /// Where a message must be handled: [`ShardMsg::destination`], except for the
    /// messages of an events channel, whose home is the shard of its first subscriber
    /// (`broker::directory`). None: events published to a channel nobody subscribes
    /// to, dropped here rather than sent to another shard to be dropped there.
    fn destination(&self, m: &ShardMsg) -> Option<usize> {
        if self.shards > 1 {
            let dir = &self.global.events_dir;
            let lookup = |key| self.routes.borrow_mut().lookup(dir, key).map(usize::from);
            match m {
                ShardMsg::Subscribe { key, sub, .. } if key.pattern == Pattern::Events => {
                    return Some(dir.claim(key, sub.shard) as usize);
                }
                ShardMsg::PublishBatch { key, .. } if key.pattern == Pattern::Events => return lookup(key),
                // An unsettled publish is answered by the hashed home when nobody
                // subscribes; a subscription's messages always find its home.
                ShardMsg::Publish { key, .. } | ShardMsg::Credit { key, .. } | ShardMsg::Unsubscribe { key, .. }
                    if key.pattern == Pattern::Events =>
                {
                    return Some(lookup(key).unwrap_or_else(|| key.home(self.shards)));
                }
                _ => {}
            }
        }
        Some(m.destination(self.shards))
    }

    /// Send a message to wherever it must be handled.
    pub fn route(&self, m: ShardMsg) {
        if let Some(dest) = self.destination(&m) {
            self.route_to(dest, m);
        }
    }

    /// Send a message to the shard `dest` (this one, or `usize::MAX`: handled here).
    fn route_to(&self, dest: usize, m: ShardMsg) {
        if dest == self.id as usize || dest == usize::MAX {
            match m.connection() {
                // Bound for a connection of this shard: straight into its inbox.
                Some(conn) => self.to_inbox(conn, m),
                None => {
                    self.local.borrow_mut().push_back(m);
                    self.pump_local();
                }
            }
        } else if let Some(q) = self.outboxes.get(dest) {
            let w = &self.outbox_weight[dest];
            w.set(w.get() + m.weight());
            q.borrow_mut().push_back(m);
            if let Some(w) = self.outbox_wakers[dest].take() {
                w.wake();
            }
        }
    }

    /// True when any outbox of this shard is backed up: what a producer's messages
    /// turn into (deliveries fanned out here towards consumers elsewhere, not only the
    /// publishes towards the channel's home) must not outrun the shard that takes them.
    pub fn any_backlogged(&self) -> bool {
        self.outbox_weight.iter().any(|w| w.get() > OUTBOX_HIGH_WATER)
    }

    /// Handle local messages until none is left. Re-entrant calls only queue.
    fn pump_local(&self) {
        if self.pumping.replace(true) {
            return;
        }
        let mut out = self.home_out.take();
        // The clock of this turn (driver turn, ring batch or tick), not one read per message.
        let now = self.clock_ms.get();
        // Runs of messages for one connection are common (a ring batch, a fan-out):
        // remember the last inbox. No connection goes away while this loop runs
        // (connections are removed only by their own task).
        let mut last: Option<(u64, Rc<Inbox>)> = None;
        loop {
            let next = self.local.borrow_mut().pop_front();
            let Some(m) = next else { break };
            match m.connection() {
                Some(conn) => self.to_inbox_cached(conn, m, &mut last),
                None => {
                    self.home.borrow_mut().handle(m, now, &mut out);
                    // The home's output in order: connection-bound messages straight
                    // to their inboxes, home-bound ones back into the local queue.
                    for o in out.drain(..) {
                        match self.destination(&o) {
                            Some(dest) if dest == self.id as usize => match o.connection() {
                                Some(conn) => self.to_inbox_cached(conn, o, &mut last),
                                None => self.local.borrow_mut().push_back(o),
                            },
                            Some(dest) => self.route_to(dest, o),
                            None => {}
                        }
                    }
                }
            }
        }
        if out.capacity() <= 4096 {
            // A large one (a burst of fan-out) is let go rather than kept.
            self.home_out.set(out);
        }
        self.pumping.set(false);
    }

    /// Run the homes' timers (ack deadlines) and route what they produce.
    pub fn tick(&self) {
        let mut out = Vec::new();
        let now = self.refresh_clock();
        self.home.borrow_mut().tick(now, &mut out);
        for m in out {
            self.route(m);
        }
    }

    /// [`Self::to_inbox`] through a one-entry cache of the last inbox used.
    fn to_inbox_cached(&self, conn: u64, m: ShardMsg, last: &mut Option<(u64, Rc<Inbox>)>) {
        if let Some((c, inbox)) = last.as_ref() {
            if *c == conn {
                self.push_to(inbox, m);
                return;
            }
        }
        let inbox = self.conns.borrow().get(&conn).cloned();
        match inbox {
            Some(inbox) => {
                self.push_to(&inbox, m);
                *last = Some((conn, inbox));
            }
            None => self.orphan(m),
        }
    }

    /// Hand a message to a connection of this shard (or give back what it carried).
    fn to_inbox(&self, conn: u64, m: ShardMsg) {
        let inbox = self.conns.borrow().get(&conn).cloned();
        match inbox {
            Some(inbox) => self.push_to(&inbox, m),
            None => self.orphan(m),
        }
    }

    /// Into a connection's inbox; what another connection sent that it cannot take
    /// ([`INBOX_FOREIGN_BYTES_MAX`]) is refused as a full node, or dropped and counted.
    fn push_to(&self, inbox: &Inbox, m: ShardMsg) {
        if let Err(m) = inbox.push(m) {
            self.not_taken(m, PublishRefusal::NodeFull);
        }
    }

    /// A message another connection sent that its connection did not take: a dynamic
    /// node's message is refused with `why` (or dropped and counted when pre-settled),
    /// an RPC response is counted as late.
    fn not_taken(&self, m: ShardMsg, why: PublishRefusal) {
        match m {
            ShardMsg::NodeMessage { ack: Some(ack), .. } => self.route(ShardMsg::PublishDone { ack, result: Err(why) }),
            ShardMsg::NodeMessage { ack: None, .. } => metrics::add(&self.counters.transfers_in_dropped, 1),
            ShardMsg::RpcResponse { .. } => metrics::add(&self.counters.rpc_late_responses, 1),
            _ => {}
        }
    }

    /// `out.len()` bytes from the operating system's random source (a pool refilled
    /// 4 KiB at a time): dynamic node names and RPC request nonces, which other
    /// connections must not be able to guess from the ones they see.
    pub fn random_bytes(&self, out: &mut [u8]) {
        let mut pool = self.random.borrow_mut();
        let (buf, used) = &mut *pool;
        for b in out.iter_mut() {
            if *used == buf.len() {
                fill_random(&mut buf[..]);
                *used = 0;
            }
            *b = buf[*used];
            *used += 1;
        }
    }

    /// A random u64 from [`Self::random_bytes`].
    pub fn random_u64(&self) -> u64 {
        let mut b = [0u8; 8];
        self.random_bytes(&mut b);
        u64::from_ne_bytes(b)
    }

    /// A message for a connection that is gone: give back what must not be lost.
    pub(crate) fn orphan(&self, m: ShardMsg) {
        match m {
            ShardMsg::Deliver { sub: _, token, msg: _, settled: false, .. } if token != 0 => {
                // The link's Unsubscribe (sent when the connection ended) returns
                // every unsettled delivery; nothing to do here.
            }
            // The node's connection is gone, and the node with it.
            m @ (ShardMsg::RpcResponse { .. } | ShardMsg::NodeMessage { .. }) => {
                self.not_taken(m, PublishRefusal::NodeUnreachable)
            }
            // The responder's connection went while the request was on its way (after
            // its Unsubscribe): another responder.
            ShardMsg::DeliverRequest { key, msg, deadline_ms, .. } => {
                self.route(ShardMsg::request_returned(key, msg, deadline_ms));
            }
            _ => {}
        }
    }
}

/// Start every shard and block until they all exit. Returns when shut down.
pub fn run(global: Arc<Global>) -> std::io::Result<()> {
    let shards = global.settings.shards;
    let mesh: MeshBuilder<Vec<ShardMsg>, _> = MeshBuilder::full(shards, RING_CAPACITY);
    let mut handles = Vec::new();
    let allowed = allowed_cpus();
    let usable = std::thread::available_parallelism().map_or(1, |n| n.get());
    let cpus = placement_cpus(shards, &allowed, usable);
    match &cpus {
        Some(cpus) => tracing::info!(?cpus, "each shard pinned to one CPU of the process's affinity mask"),
        None if allowed.is_empty() => {
            tracing::info!("the process's affinity mask cannot be read: shards are not pinned")
        }
        None => tracing::info!(shards, usable, "more shards than CPUs the process may use: shards are not pinned"),
    }
    for i in 0..shards {
        let mesh = mesh.clone();
        let global = global.clone();
        let placement = match &cpus {
            Some(cpus) => glommio::Placement::Fixed(cpus[i]),
            None => glommio::Placement::Unbound,
        };
        let h = glommio::LocalExecutorBuilder::new(placement)
            .name(&format!("sluice-shard-{i}"))
            .spawn(move || async move { shard_main(mesh, global).await })
            .map_err(|e| std::io::Error::other(e.to_string()))?;
        handles.push(h);
    }
    for h in handles {
        match h.join() {
            Ok(Ok(())) => {}
            Ok(Err(e)) => return Err(e),
            Err(e) => return Err(std::io::Error::other(e.to_string())),
        }
    }
    Ok(())
}

/// The CPUs this process may run on (its affinity mask: `taskset`, a cgroup cpuset,
/// systemd's CPUAffinity=), in ascending order; empty if the mask cannot be read.
pub fn allowed_cpus() -> Vec<usize> {
    // SAFETY: cpu_set_t is plain bits, zeroed is the empty set; sched_getaffinity writes
    // at most size_of::<cpu_set_t>() bytes into it, and CPU_ISSET reads it.
    #[allow(unsafe_code)]
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        if libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) != 0 {
            return Vec::new();
        }
        (0..libc::CPU_SETSIZE as usize).filter(|&c| libc::CPU_ISSET(c, &set)).collect()
    }
}

/// Shard i's CPU: the i-th CPU the process may run on. None (no pinning) when there are
/// more shards than such CPUs, or than `usable` (the CPU time a cgroup quota leaves,
/// as `available_parallelism` counts it). Pinning to CPU i itself would put a broker
/// started with `taskset -c 2,3` or in a cpuset on CPUs 0 and 1, outside what it was
/// given.
fn placement_cpus(shards: usize, allowed: &[usize], usable: usize) -> Option<Vec<usize>> {
    (shards <= allowed.len() && shards <= usable).then(|| allowed[..shards].to_vec())
}

async fn shard_main(
    mesh: MeshBuilder<Vec<ShardMsg>, glommio::channels::channel_mesh::Full>,
    global: Arc<Global>,
) -> std::io::Result<()> {
    let shards = global.settings.shards;
    let (senders, mut receivers) = mesh.join().await.map_err(|_| std::io::Error::other("shard mesh join failed"))?;
    let id = senders.peer_id() as u16;
    let settings = &global.settings;
    let recovered = global.recovered.lock().ok().and_then(|mut v| v.get_mut(id as usize).and_then(Option::take));
    let recovered = recovered.unwrap_or_default();
    let durable = settings.durability == crate::config::Durability::Fsync;
    let journal = |kind: crate::store::LogKind, state: &crate::store::recovery::LogState| {
        Rc::new(RefCell::new(if durable {
            crate::store::Journal::enabled(kind, state.next_segment, state.live.clone())
        } else {
            crate::store::Journal::disabled(kind)
        }))
    };
    let qj = journal(crate::store::LogKind::Queues, &recovered.queue_log);
    let ej = journal(crate::store::LogKind::Events, &recovered.events_log);
    let logs = [
        (crate::store::LogKind::Queues, recovered.queue_log.sizes.clone(), qj.clone()),
        (crate::store::LogKind::Events, recovered.events_log.sizes.clone(), ej.clone()),
    ];
    let retention = crate::broker::home::Retention {
        max_age_ms: settings.events_store_retention_seconds.saturating_mul(1000),
        max_bytes: settings.events_store_retention_bytes,
    };
    let mut home = Home::new(settings.max_receive_count, retention, qj.clone(), ej.clone());
    home.limits = crate::broker::home::Limits {
        queue_max_messages: settings.queue_max_messages,
        queue_max_bytes: settings.queue_max_bytes,
        max_channels: settings.max_channels,
        max_durable_subscriptions: settings.max_durable_subscriptions,
        durable_expiry_ms: settings.durable_subscription_expiry_seconds.saturating_mul(1000),
    };
    home.restore(recovered);
    home.events_dir = Some((id, global.events_dir.clone()));
    let health = crate::store::Health::new(global.store_ok[id as usize].clone());
    let tls = global.tls.clone().filter(|_| global.settings.tls_port != 0).map(futures_rustls::TlsAcceptor::from);
    let shard = Rc::new(Shard {
        id,
        shards,
        global: global.clone(),
        home: RefCell::new(home),
        conns: RefCell::new(HashMap::default()),
        handshaking: RefCell::new(std::collections::BTreeMap::new()),
        evict_waits: RefCell::new(HashMap::default()),
        next_evict: Cell::new(0),
        next_conn: Cell::new(1),
        outboxes: (0..shards).map(|_| RefCell::new(VecDeque::new())).collect(),
        outbox_weight: (0..shards).map(|_| Cell::new(0)).collect(),
        outbox_wakers: (0..shards).map(|_| Cell::new(None)).collect(),
        local: RefCell::new(VecDeque::new()),
        pumping: Cell::new(false),
        home_out: Cell::new(Vec::new()),
        clock_ms: Cell::new(steady_ms()),
        wall_ms: Cell::new(wall_ms()),
        routes: RefCell::new(RouteCache::default()),
        counters: ShardCounters::default(),
        registry: RefCell::new(metrics::Registry::default()),
        journals: [qj, ej],
        tls,
        random: RefCell::new((Box::new([0; 4096]), 4096)),
    });
    if durable {
        for (kind, sizes, j) in logs {
            let dir = crate::store::log_dir(&global.settings.data_dir, id as usize, kind);
            let writer = crate::store::Writer::new(dir, kind, id, sizes);
            let s2 = shard.clone();
            glommio::spawn_local(crate::store::commit_loop(
                j,
                writer,
                move |acks: &mut Vec<ShardMsg>| {
                    // One clock read per commit (it was one per ack: 1.3 % of the
                    // broker's samples with durable queues).
                    s2.refresh_clock();
                    for m in acks.drain(..) {
                        s2.route(m);
                    }
                },
                health.clone(),
            ))
            .detach();
        }
    }
    let senders = Rc::new(senders);
    let mut tasks = Vec::new();
    for peer in 0..shards {
        if peer == id as usize {
            continue;
        }
        tasks.push(glommio::spawn_local(outbox_pump(shard.clone(), senders.clone(), peer)).detach());
    }
    for (_peer, rx) in receivers.streams() {
        let shard = shard.clone();
        tasks.push(
            glommio::spawn_local(async move {
                while let Some(batch) = rx.recv().await {
                    shard.refresh_clock();
                    let mut evictions = Vec::new();
                    {
                        let mut local = shard.local.borrow_mut();
                        for m in batch {
                            match m {
                                ShardMsg::Adopt { stream, tls, .. } => crate::net::serve(&shard, stream, tls, false),
                                ShardMsg::EvictHandshake { from, token, .. } => evictions.push((from, token)),
                                ShardMsg::EvictReply { token, ok, .. } => {
                                    if let Some(a) = shard.evict_waits.borrow().get(&token) {
                                        a.set(ok);
                                    }
                                }
                                m => local.push_back(m),
                            }
                        }
                    }
                    for (from, token) in evictions {
                        let ok = crate::net::evict_local(&shard);
                        shard.route(ShardMsg::EvictReply { shard: from, token, ok });
                    }
                    shard.pump_local();
                    // Let the connections this batch woke take their share before the
                    // next batch: a busy ring must not starve the drivers that write
                    // its deliveries out (their backlog is what the events window bounds).
                    futures_lite::future::yield_now().await;
                }
            })
            .detach(),
        );
    }
    let mut accepts = Vec::new();
    let mut listening = Vec::new();
    if global.settings.port != 0 {
        let (listener, fd) = crate::net::bind(&global.settings, global.settings.port)?;
        listening.push(fd);
        accepts.push(glommio::spawn_local(crate::net::accept_loop(shard.clone(), listener, false)).detach());
    }
    if shard.tls.is_some() {
        let (listener, fd) = crate::net::bind(&global.settings, global.settings.tls_port)?;
        listening.push(fd);
        accepts.push(glommio::spawn_local(crate::net::accept_loop(shard.clone(), listener, true)).detach());
    }
    global.ready.fetch_add(1, Ordering::SeqCst);
    // Control tick: timers of the homes, admin requests and shutdown.
    loop {
        glommio::timer::sleep(Duration::from_millis(20)).await;
        shard.tick();
        while let Some(req) = global.admin[id as usize].pop() {
            let snap = metrics::snapshot(&shard, &req.scope);
            let _ = req.reply.send(snap);
        }
        if global.shutting_down.load(Ordering::SeqCst) {
            break;
        }
    }
    // Stop listening first (see ListenerFd::shutdown), then end the accept loops.
    for fd in listening {
        fd.shutdown();
    }
    for a in &accepts {
        a.cancel();
    }
    let conns: Vec<u64> = shard.conns.borrow().keys().copied().collect();
    for conn in conns {
        shard.route(ShardMsg::Shutdown { conn });
    }
    // Give connections time to send CLOSE and flush, and the store its last commit.
    for _ in 0..100 {
        if shard.conns.borrow().is_empty() && shard.journals.iter().all(|j| !j.borrow().busy()) {
            break;
        }
        glommio::timer::sleep(Duration::from_millis(20)).await;
        while let Some(req) = global.admin[id as usize].pop() {
            let _ = req.reply.send(metrics::snapshot(&shard, &req.scope));
        }
    }
    drop(tasks);
    Ok(())
}

async fn outbox_pump(shard: Rc<Shard>, senders: Rc<Senders<Vec<ShardMsg>>>, peer: usize) {
    loop {
        let batch: Vec<ShardMsg> = {
            // Up to RING_BATCH messages by weight (a publish batch counts each event it
            // carries), so what one ring entry holds, and the ring as a whole, is bounded
            // in messages.
            let mut q = shard.outboxes[peer].borrow_mut();
            let mut weight = 0;
            let mut n = 0;
            while n < q.len() && (n == 0 || weight + q[n].weight() <= RING_BATCH) {
                weight += q[n].weight();
                n += 1;
            }
            let batch: Vec<ShardMsg> = q.drain(..n).collect();
            let w = &shard.outbox_weight[peer];
            w.set(w.get().saturating_sub(weight));
            batch
        };
        match batch.is_empty() {
            false => {
                if senders.send_to(peer, batch).await.is_err() {
                    return;
                }
            }
            true => {
                futures_lite::future::poll_fn(|cx| {
                    if shard.outboxes[peer].borrow().is_empty() {
                        shard.outbox_wakers[peer].set(Some(cx.waker().clone()));
                        std::task::Poll::Pending
                    } else {
                        std::task::Poll::Ready(())
                    }
                })
                .await
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::broker::{Msg, PublishAck, SubRef};
    use bytes::Bytes;

    fn node_message(len: usize) -> ShardMsg {
        ShardMsg::NodeMessage {
            shard: 0,
            conn: 1,
            node: "_amqp10.tmp.0-1.x".into(),
            msg: Msg { payload: Bytes::from(vec![0u8; len]), received_ms: 0 },
            ack: Some(PublishAck { link: SubRef { shard: 1, conn: 2, link: 3 }, delivery_id: 4 }),
        }
    }

    #[test]
    fn an_inbox_takes_other_connections_messages_up_to_its_limit_between_drains() {
        let inbox = Inbox::default();
        let mib = 1 << 20;
        // One always enters, however large.
        assert!(inbox.push(node_message(200 * mib)).is_ok());
        assert!(inbox.push(node_message(1)).is_err(), "past the limit");
        // What the homes send is not counted (credit bounds it).
        assert!(inbox.push(ShardMsg::Shutdown { conn: 1 }).is_ok());
        let mut taken = Vec::new();
        inbox.drain(&mut taken);
        assert_eq!(taken.len(), 2);
        // A drain makes room again; many small ones count their slots too.
        let mut n = 0;
        while inbox.push(node_message(0)).is_ok() {
            n += 1;
            assert!(n < 10_000_000, "no limit on empty messages");
        }
        let slot = std::mem::size_of::<ShardMsg>() + "_amqp10.tmp.0-1.x".len();
        assert_eq!(n, INBOX_FOREIGN_BYTES_MAX as usize / slot);
        let rpc = ShardMsg::RpcResponse {
            shard: 0,
            conn: 1,
            seq: 1,
            nonce: 1,
            msg: Msg { payload: Bytes::from_static(b"r"), received_ms: 0 },
        };
        assert!(inbox.push(rpc).is_err(), "RPC responses share the limit");
    }
}
