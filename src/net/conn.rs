//! One connection's driver: a loop around the sans-IO engine that reads into the
//! engine's buffer, answers its events with broker decisions, writes its output in
//! large batches, and delivers what the channels' homes send back.

use crate::broker::address::{self, ChannelKey, Node};
use crate::broker::home::{BATCH_OVERHEAD, EVENT_OVERHEAD};
use crate::broker::message::{self, Refusal};
use crate::broker::selector::Selector;
use crate::broker::{
    steady_ms, wall_ms, Msg, Outcome, PublishAck, PublishRefusal, ShardMsg, StartPos, StoreRing, SubRef, SubSpec,
    EVENTS_BATCH,
};
use crate::config::Pattern;
use crate::shard::metrics::{add, gauge, pattern_index, ConnectionInfo, LinkInfo};
use crate::shard::{Inbox, Shard};
use bytes::Bytes;
use futures_lite::{AsyncRead, AsyncWrite, AsyncWriteExt};
use sluice_proto::codec::{Fields, Value};
use sluice_proto::engine::{Config, Connection, Event, LinkId, Scope, UsageError};
use sluice_proto::types::{
    condition, Attach, AttachTarget, DeliveryState, DeliveryTag, Error, Properties, ReceiverSettleMode, Role,
    SenderSettleMode, Source, Target,
};
use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap, VecDeque};
use std::fmt::Write as _;

/// Maps on the per-message path: foldhash (fast, seeded per map), not SipHash.
type HashMap<K, V> = std::collections::HashMap<K, V, foldhash::fast::RandomState>;
type HashSet<K> = std::collections::HashSet<K, foldhash::fast::RandomState>;

use std::pin::Pin;
use std::rc::Rc;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::task::Poll;
use std::time::{Duration, Instant};

/// Read size per system call: starts small (idle connections stay small) and
/// doubles up to the maximum while reads fill it.
const READ_MIN: usize = 4 * 1024;
const READ_MAX: usize = 256 * 1024;
/// Capacity of [`Driver::spent`] kept between turns; a larger list (a turn that
/// drained a long inbox) is let go.
const SPENT_KEEP: usize = 4096;
/// Replies waiting in a dynamic node for credit, at most.
const NODE_QUEUE_MAX: usize = 4096;
/// Payload bytes held by one connection's dynamic nodes (waiting or sent and not yet
/// settled), at most; a message that would pass it is refused "dynamic node is full"
/// (one message always enters a connection whose nodes hold nothing).
const NODE_BYTES_MAX: u64 = 64 * 1024 * 1024;
/// The longest correlation-id (or message-id standing for it) an RPC request may carry:
/// it is kept until the response.
const RPC_ID_MAX: usize = 4096;
/// Memory of the deliver-first windows (rings of MaxUnsettledPerLink slots, allocated
/// when the link attaches) of one connection's events-store subscriptions, at most; an
/// attach past it is refused (the first one always fits).
const RING_BYTES_MAX: u64 = 64 * 1024 * 1024;
/// Longest link name accepted, in bytes.
const MAX_LINK_NAME: usize = 1024;
/// How long a failed authentication waits before its outcome and the close.
const AUTH_FAILURE_DELAY_MS: u64 = 1000;
/// A producer whose channel refused a publish for a limit gets no credit for this
/// long, then one credit at a time (a probe) until a publish is accepted.
const LIMIT_BACKOFF_MS: u64 = 100;

/// A back-off ends after this long without a limit refusal on the link, whatever
/// became of its probes (answered otherwise, sent pre-settled, aborted).
const LIMIT_BACKOFF_FORGET_MS: u64 = 1_000;

/// A producer link backed off after a limit refusal: no credit top-ups; one credit
/// every [`LIMIT_BACKOFF_MS`] while it has none (a probe); over when a publish sent
/// after the last refused one is accepted, or [`LIMIT_BACKOFF_FORGET_MS`] after the
/// last refusal.
#[derive(Debug, Clone, Copy)]
struct Backoff {
    link: LinkId,
    /// Driver time (ms) of the next probe.
    probe_at: u64,
    /// Driver time (ms) of the last refusal.
    refused_at: u64,
    /// Delivery-id of the last refused publish.
    refused_id: u32,
}

/// `a` comes after `b` in serial-number arithmetic (delivery-ids wrap).
fn serial_after(a: u32, b: u32) -> bool {
    (a.wrapping_sub(b) as i32) > 0
}
/// The selector filter keys.
const SELECTOR_KEYS: [&str; 2] = ["apache.org:selector-filter:string", "jms-selector"];

/// Where a produce link's messages go.
#[derive(Debug, Clone)]
enum ProduceTarget {
    Channel(ChannelKey),
    Responses(String),
    Anonymous,
    Node(String),
}

#[derive(Debug)]
enum LinkKind {
    Produce {
        target: ProduceTarget,
        window: u32,
    },
    Consume {
        key: ChannelKey,
        /// delivery-id -> home token, and the delivery's size (an RPC responder's
        /// byte watermark hears how many bytes it settled)
        unsettled: HashMap<u32, (u64, u32)>,
        ring: Option<Arc<StoreRing>>,
        subscribed: bool,
        reply: Option<Box<Attach>>,
        /// Credit came before the subscription was ready: whether it asked for a drain
        /// (the credit itself is the engine's when it is forwarded).
        pending_drain: Option<bool>,
        stalled: bool,
        /// Events-store lossless mode.
        hold: bool,
        /// Lossless events-store links that asked for unsettled deliveries: what the
        /// client has not settled yet, which the durable cursor stays before.
        acks: Option<Box<StoreAcks>>,
    },
    NodeConsume {
        /// The dynamic node's name (shared: cloned on every settlement and credit).
        node: Rc<str>,
    },
}

/// The events a lossless events-store link sent unsettled and the client has not
/// settled: the durable cursor stays before the first of them, so a client that goes
/// (or crashes) before settling gets them again when its durable subscription comes
/// back. Released or modified ones are sent again.
#[derive(Debug, Default)]
struct StoreAcks {
    /// Sequence number -> payload (for resending) and the times it was sent.
    unacked: BTreeMap<u64, (Bytes, u32)>,
    /// Released or modified: sent again before the ring's next.
    redo: VecDeque<u64>,
    /// The sequence number after the last one taken from the ring (0: none yet).
    next: u64,
    /// The cursor last told to the home.
    told: u64,
    /// Settled since the cursor was last told: in `Driver::store_cursors`.
    dirty: bool,
    /// Payload bytes of `unacked`.
    unacked_bytes: u64,
    /// The link's watermarks (0: none): no event is taken from the ring while this
    /// many are unsettled, or while their bytes reach this many.
    max_msgs: u32,
    max_bytes: u64,
}

impl StoreAcks {
    /// The watermarks hold the next event back (Pub/Sub's pause: the last one taken
    /// may pass the byte watermark; the ring's next cannot be looked at in place).
    fn held_back(&self) -> bool {
        (self.max_msgs > 0 && self.unacked.len() >= self.max_msgs as usize)
            || (self.max_bytes > 0 && self.unacked_bytes >= self.max_bytes)
    }

    /// Where the durable cursor may be: the first event not settled, or past the
    /// last one taken.
    fn cursor(&self) -> u64 {
        self.unacked.keys().next().copied().unwrap_or(self.next)
    }
}

#[derive(Debug)]
struct LinkCtx {
    serial: u64,
    channel: u16,
    name: String,
    role: Role,
    kind: LinkKind,
    address: String,
    pattern: String,
    chan: String,
    durable: bool,
    dynamic: bool,
    next_tag: u64,
    /// Consume links: since when the link has had zero credit, and the time so far.
    zero_since: Option<Instant>,
    zero_total: Duration,
    /// Consume links with an ack deadline: a `received` state renews the lease.
    renews: bool,
    /// Consume links: payload bytes sent, deliveries and bytes sent since the last
    /// report to the home (events: it keeps a bounded window beyond it in flight).
    bytes_out: u64,
    unreported: (u32, u64),
    /// Consume links: deliveries waiting for room in the session window, in order
    /// (while any waits, the link's new deliveries go after them).
    held: VecDeque<Held>,
    /// Detached for passing the connection's bound on waiting deliveries: what comes
    /// for it before its Detached event is not held.
    held_over: bool,
    /// Queue and RPC consume links: the delivery (its token, and whether it was sent
    /// settled) whose later frames wait in the engine for the session window
    /// (`partial_on`). RPC requests keep their payload: one cut off goes back to the
    /// channel.
    partial: Option<(u64, bool, Option<Bytes>)>,
    /// Consume links: the source's default-outcome, for deliveries the consumer settles
    /// without a terminal state (accepted when it has none).
    default_outcome: Option<DeliveryState>,
    /// RPC requests released from `held` unsent, or that could not be sent as the link
    /// went: given back to the channel after the Unsubscribe, for another responder.
    requests: Vec<Held>,
    /// In its session's turns (`Driver::held_on`).
    turn: bool,
    /// A drain waits for `held` to go out (then the link's credit is used up).
    drain_after_held: bool,
    /// Consume links fed by a home: deliveries taken from it (wrapping), whatever
    /// became of them; less those in `held`, what the home hears as `reached`.
    taken: u32,
    /// Consume links: the number of the last credit update sent to the home.
    credit_seq: u32,
}

#[derive(Debug, Default)]
struct NodeState {
    link: Option<LinkId>,
    queue: VecDeque<Bytes>,
    unsettled: HashMap<u32, Bytes>,
}

impl NodeState {
    /// Payload bytes the node holds.
    fn bytes(&self) -> u64 {
        self.queue.iter().chain(self.unsettled.values()).map(|p| p.len() as u64).sum()
    }
}

/// The events-store windows a link takes: its ring, and for a link receiving
/// unsettled its unsettled events as well.
fn store_windows(ctx: &LinkCtx) -> u64 {
    match &ctx.kind {
        LinkKind::Consume { key, acks, .. } if key.pattern == Pattern::EventsStore => 1 + u64::from(acks.is_some()),
        _ => 0,
    }
}

/// `<shard>.<conn>.<seq>.<nonce as 16 hex digits>`, the request id a request's
/// reply-to carries; None when a response names anything else.
fn parse_request_id(id: &str) -> Option<(u16, u64, u64, u64)> {
    let mut parts = id.split('.');
    let shard = parts.next()?.parse().ok()?;
    let conn = parts.next()?.parse().ok()?;
    let seq = parts.next()?.parse().ok()?;
    let nonce = parts.next().filter(|n| n.len() == 16).and_then(|n| u64::from_str_radix(n, 16).ok())?;
    parts.next().is_none().then_some((shard, conn, seq, nonce))
}

#[derive(Debug)]
struct PendingRpc {
    node: String,
    correlation: Option<Value>,
    pattern: Pattern,
    /// The random part of the request id: a response must carry it.
    nonce: u64,
}

/// What one delivery waiting for a session window costs besides its payload (its
/// entry and the payload's handle), counted against the connection's bound.
const HELD_OVERHEAD: u64 = EVENT_OVERHEAD;

fn held_cost(h: &Held) -> u64 {
    h.payload.len() as u64 + HELD_OVERHEAD
}

/// The bytes an undelivered settlement gives back to the consumer's (or responder's)
/// byte window: a delivery's payload when it was given unsettled, none when pre-settled.
fn window_bytes(settled: bool, len: u64) -> u32 {
    if settled {
        0
    } else {
        u32::try_from(len).unwrap_or(u32::MAX)
    }
}

/// Most deliveries one link sends in a turn when its session window reopens, before
/// the next waiting link of the session gets one.
const HELD_TURN: usize = 64;

/// What became of a delivery given to [`Driver::send_consumed`].
enum Sent {
    /// Written.
    Out,
    /// The session window has no room for it: back to the caller, to hold.
    Waits(Held),
    /// Not sendable (the link is going, or has no credit): given back to its channel
    /// (queues, RPC) or dropped (events).
    Failed,
}

/// A delivery waiting for room in the peer's session window.
#[derive(Debug, Clone)]
struct Held {
    /// The home's token (queues; an RPC request's deadline); an events-store event's
    /// sequence number.
    token: u64,
    payload: Bytes,
    settled: bool,
}

struct Driver {
    shard: Rc<Shard>,
    id: u64,
    engine: Connection,
    inbox: Rc<Inbox>,
    links: super::link_map::LinkMap<LinkCtx>,
    serials: HashMap<u64, LinkId>,
    next_serial: u64,
    sessions: HashSet<u16>,
    nodes: HashMap<String, NodeState>,
    /// Events-store windows of the connection's links ([`store_windows`]).
    store_windows: u64,
    /// Requests settled by this connection's responders in this turn, per link: told
    /// to the channels once at the end of the turn (at most one entry per link).
    rpc_settled: Vec<(ChannelKey, SubRef, u32, u64)>,
    /// Links receiving unsettled events-store deliveries whose durable cursor may
    /// move: told at the end of the turn.
    store_cursors: Vec<LinkId>,
    /// Payload bytes held by `nodes` (bounded by [`NODE_BYTES_MAX`]).
    node_bytes: u64,
    /// Deliveries whose lease was renewed in this batch of events.
    renewed: HashSet<(LinkId, u32)>,
    /// Links per session, and (session, role is sender, name) of every link: the
    /// attach checks' indexes over `links`.
    links_on: HashMap<u16, usize>,
    link_names: HashSet<(u16, bool, String)>,
    /// Pending requests by their number on this connection.
    pending: HashMap<u64, PendingRpc>,
    /// (deadline ms, request number).
    deadlines: BinaryHeap<Reverse<(u64, u64)>>,
    next_request: u64,
    /// Per session (local channel): its consume links with deliveries waiting for its
    /// window (`LinkCtx::held`), in turn order, each once.
    held_on: HashMap<u16, VecDeque<LinkId>>,
    /// Per session, the queue or RPC consume link whose delivery's later frames wait in
    /// the engine for the peer's window (at most one per session: nothing else is sent
    /// while they wait). That delivery is written only once they have gone.
    partial_on: HashMap<u16, LinkId>,
    /// What the links' waiting deliveries cost: payload plus [`HELD_OVERHEAD`] each.
    held_bytes: u64,
    reject: Option<Error>,
    read_size: usize,
    /// Wall clock (ms since the epoch) read once per driver turn: message timestamps.
    epoch_ms: u64,
    /// Steady clock ([`steady_ms`]) read with `epoch_ms`: RPC deadlines, cache ages.
    steady: u64,
    registry_at: Instant,
    /// A deferred registry refresh is due at this driver time (ms).
    registry_due: Option<u64>,
    registry_count: (usize, usize, usize),
    /// Produce links whose credit top-up waits for a backed-up shard ring.
    deferred_topups: Vec<LinkId>,
    /// Produce links whose channel refused a publish for a limit (queue full, too
    /// many channels): see [`Backoff`].
    backoffs: Vec<Backoff>,
    info: ConnectionInfo,
    /// FNV-1a (64 bit) of the raw container-id and a `|`: where the hash of a durable
    /// subscription's identity starts (`durable_identity`).
    container_hash: u64,
    /// CN of a verified client certificate (SASL EXTERNAL).
    client_cn: Option<String>,
    /// The authenticated client id, when SASL named one.
    identity: Option<String>,
    /// When the credentials (a JWT's exp) run out, in ms since the epoch.
    expires_at: Option<u64>,
    /// A failed authentication is answered at this driver time.
    auth_failed_at: Option<u64>,
    /// Per-message Write checks of the anonymous terminus.
    authz_cache: crate::auth::AuthzCache,
    /// Durable links whose DETACH answer waits for the home: serial -> engine link.
    detaching: HashMap<u64, LinkId>,
    /// Events published in this driver turn, not yet routed (one channel at a time).
    events_batch: Option<(ChannelKey, Vec<Msg>)>,
    /// Payloads of other shards written out in this turn, released together at its
    /// end (see [`Driver::release_spent`]).
    spent: Vec<Bytes>,
    started: Instant,
    shutting_down: bool,
    /// Dropped in its handshake for a new connection (MaxConnections).
    evicted: bool,
}

/// What the transport knows about the peer.
pub(super) struct Peer {
    /// IP address.
    pub(super) ip: String,
    /// The connection is TLS-terminated.
    pub(super) tls: bool,
    /// The CN of a verified client certificate (mTLS).
    pub(super) client_cn: Option<String>,
    /// What the transport took of the handshake timeout (the TLS handshake): the
    /// AMQP handshake gets what is left, so a peer has the timeout from accept to
    /// OPEN once, not once for TLS and again for AMQP.
    pub(super) handshake_spent: Duration,
    /// The id the connection was given at accept (a TLS connection is in the handshake
    /// map from then), else one is given now.
    pub(super) conn_id: Option<u64>,
}

/// Drive one connection until it ends.
pub(super) async fn run<S: AsyncRead + AsyncWrite + Unpin>(
    shard: Rc<Shard>,
    mut stream: S,
    peer: Peer,
    over_limit: bool,
) {
    let s = &shard.global.settings;
    let mut cfg = Config::server("sluice");
    cfg.max_frame_size = s.max_frame_size;
    cfg.channel_max = s.channel_max();
    cfg.idle_timeout_ms = s.idle_timeout_ms();
    let spent = u32::try_from(peer.handshake_spent.as_millis()).unwrap_or(u32::MAX);
    cfg.handshake_timeout_ms = s.handshake_timeout_seconds.saturating_mul(1000).saturating_sub(spent).max(1);
    cfg.handle_max = s.handle_max();
    cfg.max_message_size = s.max_message_size;
    // Multi-frame messages being reassembled, over all links of one connection: two
    // of the largest, and at least 256 MiB.
    cfg.max_reassembly_bytes = s.max_message_size.saturating_mul(2).max(256 << 20);
    cfg.session_window = 2048;
    // The anonymous terminus (a sender with a null target, each message routed by its
    // `to`) is served; clients that route through it only when the broker says so
    // (Qpid JMS's anonymous producers, proton's example server) look for this.
    cfg.offered_capabilities =
        Some(sluice_proto::codec::Symbols(vec![sluice_proto::codec::Symbol::new("ANONYMOUS-RELAY")]));
    // Offered in the reference's order: EXTERNAL (verified client certificate only),
    // PLAIN, ANONYMOUS (only while authentication is disabled).
    let auth = shard.global.auth.clone();
    cfg.sasl_mechanisms = auth.mechanisms(peer.client_cn.as_deref()).into_iter().map(str::to_owned).collect();
    cfg.allow_no_sasl = !auth.enabled();
    cfg.sasl_auto_accept = false;
    let started = Instant::now();
    let id = peer.conn_id.unwrap_or_else(|| shard.next_conn_id());
    let inbox = Rc::new(Inbox::default());
    shard.conns.borrow_mut().insert(id, inbox.clone());
    // In the handshake map, where a new connection at MaxConnections may take its place;
    // not one over the limit (it is refused after its OPEN: taking its place would let
    // the new one in over the limit too).
    if !over_limit {
        let since = started.checked_sub(peer.handshake_spent).unwrap_or(started);
        shard.handshake_begin(id, crate::shard::Handshake { since, tls: None });
    }
    gauge(&shard.counters.connections, 1);
    let mut d = Driver {
        shard: shard.clone(),
        id,
        engine: Connection::new(cfg, 0),
        inbox,
        links: super::link_map::LinkMap::default(),
        serials: HashMap::default(),
        next_serial: 1,
        sessions: HashSet::default(),
        nodes: HashMap::default(),
        store_windows: 0,
        rpc_settled: Vec::new(),
        store_cursors: Vec::new(),
        node_bytes: 0,
        renewed: HashSet::default(),
        links_on: HashMap::default(),
        link_names: HashSet::default(),
        pending: HashMap::default(),
        deadlines: BinaryHeap::new(),
        next_request: 1,
        held_on: HashMap::default(),
        partial_on: HashMap::default(),
        held_bytes: 0,
        reject: over_limit.then(|| Error::new(condition::RESOURCE_LIMIT_EXCEEDED, "connection limit reached")),
        read_size: READ_MIN,
        epoch_ms: wall_ms(),
        steady: steady_ms(),
        registry_at: started,
        registry_due: None,
        registry_count: (usize::MAX, 0, 0),
        deferred_topups: Vec::new(),
        backoffs: Vec::new(),
        container_hash: address::FNV64_BASIS,
        info: ConnectionInfo {
            id: format!("{}-{id}", shard.id),
            connected_at: rfc3339_now(),
            source_ip: peer.ip,
            tls: peer.tls,
            shard: shard.id,
            sasl: "none".into(),
            ..Default::default()
        },
        client_cn: peer.client_cn,
        identity: None,
        expires_at: None,
        auth_failed_at: None,
        authz_cache: crate::auth::AuthzCache::new(),
        detaching: HashMap::default(),
        events_batch: None,
        spent: Vec::new(),
        started,
        shutting_down: false,
        evicted: false,
    };
    let mut stalled = false;
    let clean = match d.drive(&mut stream).await {
        Ok(()) => true,
        Err(e) if e.kind() == std::io::ErrorKind::TimedOut => {
            stalled = true;
            // SLUICE_WRITE_TIMEOUT_SECONDS: the socket took none of our output for that
            // long. No CLOSE can reach a peer that does not read; the socket is dropped.
            d.count_error(Scope::Connection);
            let info = &d.info;
            tracing::warn!(conn = id, peer = %info.source_ip, client_id = %info.client_id,
                "peer stopped reading: nothing could be written for the write timeout; connection dropped");
            false
        }
        Err(e) => {
            tracing::debug!(conn = id, error = %e, "connection ended with an I/O error");
            false
        }
    };
    shard.handshake_end(id);
    d.teardown();
    // What came for it after its links went (RPC requests on their way to a
    // responder) is given back at once, and again at the end for what came meanwhile.
    let orphans = |inbox: &Inbox| {
        let mut left = Vec::new();
        inbox.drain(&mut left);
        for m in left {
            shard.orphan(m);
        }
    };
    orphans(&d.inbox);
    // Half-close (FIN after the last frame), then read what the peer still sends
    // until it closes too: closing with unread bytes would send RST.
    // (Not after a write timeout: a TLS close writes close_notify, which would wait
    // for the write timeout once more.)
    if !stalled {
        let _ = AsyncWriteExt::close(&mut stream).await;
    }
    if clean {
        linger(&mut stream).await;
    }
    // Only now: shutdown waits for this set to empty, so a lingering close finishes.
    shard.conns.borrow_mut().remove(&id);
    orphans(&d.inbox);
}

/// After the half-close, read and discard what the peer still sends (at most
/// 64 KiB, at most 500 ms) until it closes. Closing a socket with unread bytes
/// makes the kernel send RST, and a RST can make the peer drop our CLOSE unread.
async fn linger<S: AsyncRead + Unpin>(stream: &mut S) {
    use futures_lite::AsyncReadExt;
    let drain = async {
        let mut buf = [0u8; 4096];
        let mut total = 0usize;
        while total < 64 * 1024 {
            match stream.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => total += n,
            }
        }
    };
    futures_lite::future::or(drain, glommio::timer::sleep(Duration::from_millis(500))).await;
}

fn rfc3339_now() -> String {
    time::OffsetDateTime::now_utc().format(&time::format_description::well_known::Rfc3339).unwrap_or_default()
}

enum Wake {
    Read(usize),
    Inbox,
    Timer,
}

impl Driver {
    fn now(&self) -> u64 {
        self.started.elapsed().as_millis() as u64
    }

    async fn drive<S: AsyncRead + AsyncWrite + Unpin>(&mut self, stream: &mut S) -> std::io::Result<()> {
        let mut msgs = Vec::new();
        loop {
            self.flush(stream).await?;
            if self.engine.is_closed() {
                return Ok(());
            }
            if self.engine.input_paused() {
                // Frames are still buffered behind a full event queue: take them before
                // reading more, letting the shard's other tasks run first.
                futures_lite::future::yield_now().await;
                let now = self.now();
                self.engine.process(now);
                self.handle_events();
                self.release_spent();
                continue;
            }
            let deadline = self.next_deadline();
            let wake = {
                let now = self.now();
                let sleep = deadline.map(|t| Duration::from_millis(t.saturating_sub(now)));
                let mut timer = sleep.map(glommio::timer::Timer::new);
                let inbox = self.inbox.clone();
                let read_size = self.read_size;
                let max_frame = self.settings().max_frame_size as usize;
                // Let go of a large buffer once it is drained (a busy connection's
                // buffer holds up to ROOM_READS rooms of READ_MAX plus a partial frame).
                self.engine.release_read_buffer_if_idle((sluice_proto::frame::ROOM_READS + 1) * READ_MAX);
                let len = self.engine.buffered_input().len();
                // What the engine left unprocessed is at most a partial frame, unless it
                // takes no input at all for now (waiting for an authentication verdict,
                // or closed): then nothing more is read until it does, so a peer that
                // keeps sending meanwhile costs no memory.
                let reading = len <= max_frame + 2 * READ_MAX;
                // The room is zeroed once and kept when this wake-up reads nothing.
                let room: &mut [u8] = if reading { self.engine.read_space(read_size) } else { &mut [] };
                let r = futures_lite::future::poll_fn(|cx| {
                    if !inbox.is_empty() {
                        return Poll::Ready(Ok(Wake::Inbox));
                    }
                    inbox.register(cx.waker());
                    if reading {
                        match Pin::new(&mut *stream).poll_read(cx, &mut *room) {
                            Poll::Ready(Ok(n)) => return Poll::Ready(Ok(Wake::Read(n))),
                            Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                            Poll::Pending => {}
                        }
                    }
                    if let Some(t) = timer.as_mut() {
                        if std::future::Future::poll(Pin::new(t), cx).is_ready() {
                            return Poll::Ready(Ok(Wake::Timer));
                        }
                    }
                    Poll::Pending
                })
                .await;
                if let Ok(Wake::Read(n)) = &r {
                    self.engine.read_done(*n);
                }
                r?
            };
            // One monotonic and one wall-clock read per turn: the engine, the
            // timers and message timestamps share them.
            let now = self.now();
            match wake {
                Wake::Read(0) => {
                    self.engine.handle_eof();
                    self.handle_events();
                    return Ok(());
                }
                Wake::Read(n) => {
                    if n == self.read_size {
                        self.read_size = (self.read_size * 2).min(READ_MAX);
                    } else if n < self.read_size / 4 {
                        self.read_size = (self.read_size / 2).max(READ_MIN);
                    }
                    self.engine.process(now);
                }
                Wake::Inbox => {}
                Wake::Timer => {}
            }
            self.steady = self.shard.refresh_clock();
            self.epoch_ms = self.shard.wall_ms();
            self.engine.handle_timeout(now);
            self.expire_rpc();
            self.retry_topups();
            self.retry_backoffs(now);
            self.auth_timers();
            self.handle_events();
            self.inbox.drain(&mut msgs);
            for m in msgs.drain(..) {
                self.on_message(m);
            }
            self.handle_events();
            // After the events too: a delivery held for a session window that opened
            // in this turn was written in `handle_events`.
            self.release_spent();
            if self.evicted {
                tracing::debug!(
                    conn = self.id,
                    "still in its handshake at MaxConnections: dropped for a new connection"
                );
                return Err(std::io::Error::other("dropped in its handshake for a new connection"));
            }
            if self.shard.global.shutting_down.load(Ordering::Relaxed) && !self.shutting_down {
                self.shutting_down = true;
                self.engine.close(Some(Error::new(condition::CONNECTION_FORCED, "broker shutting down")));
            }
        }
    }

    /// Drop the payloads written out in this turn (mostly from other shards'
    /// messages; also deliveries held for a session window and sent later).
    ///
    /// They are slices of buffers that other shards own (an event's payload is a
    /// slice of its publisher's read buffer, whose reference count the publisher's
    /// shard keeps incrementing as it reads). Dropped one by one between frames,
    /// each release would pull that cache line over from the other core; dropped
    /// together, a turn's releases of one buffer take it over about once.
    fn release_spent(&mut self) {
        self.spent.clear();
        if self.spent.capacity() > SPENT_KEEP {
            self.spent = Vec::new();
        }
    }

    /// Casbin check at attach time (always true when authorization is off).
    fn authorized(&self, key: &ChannelKey, action: crate::auth::Action) -> bool {
        let Some(resource) = crate::auth::authz_resource(key.pattern.as_str()) else { return true };
        self.shard.global.auth.authorize(&self.info.client_id, resource, &key.name, action)
    }

    /// The per-message Write check of the anonymous terminus (LRU-cached).
    fn authorized_message(&mut self, key: &ChannelKey) -> bool {
        let Some(resource) = crate::auth::authz_resource(key.pattern.as_str()) else { return true };
        let auth = self.shard.global.auth.clone();
        let client = self.info.client_id.clone();
        self.authz_cache.check(&auth, &client, resource, &key.name, self.steady)
    }

    fn auth_timers(&mut self) {
        if self.auth_failed_at.is_some_and(|t| self.now() >= t) {
            self.auth_failed_at = None;
            self.engine.sasl_outcome(1);
        }
        if self.expires_at.is_some_and(|t| wall_ms() >= t) {
            self.expires_at = None;
            self.count_error(Scope::Connection);
            self.engine.close(Some(Error::new(condition::UNAUTHORIZED_ACCESS, "credentials expired")));
        }
    }

    fn next_deadline(&self) -> Option<u64> {
        let mut rpc = self.deadlines.peek().map(|Reverse((t, _))| self.steady_to_local(*t));
        for t in [self.auth_failed_at, self.expires_at.map(|e| self.to_local(e))].into_iter().flatten() {
            rpc = Some(rpc.map_or(t, |r| r.min(t)));
        }
        if !self.deferred_topups.is_empty() {
            let soon = self.now() + 2;
            rpc = Some(rpc.map_or(soon, |t| t.min(soon)));
        }
        if let Some(t) = self.registry_due {
            rpc = Some(rpc.map_or(t, |r| r.min(t)));
        }
        if let Some(t) = self.backoffs.iter().map(|b| b.probe_at.min(b.refused_at + LIMIT_BACKOFF_FORGET_MS)).min() {
            rpc = Some(rpc.map_or(t, |r| r.min(t)));
        }
        match (self.engine.poll_timeout(), rpc) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// An epoch-ms deadline (a token's expiry) on this driver's clock.
    fn to_local(&self, epoch_ms: u64) -> u64 {
        self.now() + epoch_ms.saturating_sub(wall_ms())
    }

    /// A steady-clock deadline on this driver's clock.
    fn steady_to_local(&self, steady: u64) -> u64 {
        self.now() + steady.saturating_sub(steady_ms())
    }

    async fn flush<S: AsyncWrite + Unpin>(&mut self, stream: &mut S) -> std::io::Result<()> {
        // Small chunks are gathered into one write; large payloads go on their own.
        let mut batch = Vec::with_capacity(16 * 1024);
        while let Some(chunk) = self.engine.poll_transmit() {
            if chunk.len() >= sluice_proto::engine::ZERO_COPY_THRESHOLD {
                if !batch.is_empty() {
                    stream.write_all(&batch).await?;
                    batch.clear();
                }
                stream.write_all(&chunk).await?;
            } else {
                batch.extend_from_slice(&chunk);
                if batch.len() >= 256 * 1024 {
                    stream.write_all(&batch).await?;
                    batch.clear();
                }
            }
        }
        if !batch.is_empty() {
            stream.write_all(&batch).await?;
        }
        // TLS buffers inside the session: flush pushes the records out.
        stream.flush().await
    }

    fn settings(&self) -> &crate::config::Settings {
        &self.shard.global.settings
    }

    fn sub(&self, serial: u64) -> SubRef {
        SubRef { shard: self.shard.id, conn: self.id, link: serial }
    }

    // ------------------------------------------------------------ engine events

    fn handle_events(&mut self) {
        while let Some(e) = self.engine.poll_event() {
            self.on_event(e);
        }
        self.renewed.clear();
        self.flush_events();
        for (key, sub, n, bytes) in std::mem::take(&mut self.rpc_settled) {
            self.shard.route(ShardMsg::RpcSettled { key, sub, n, bytes });
        }
        self.tell_store_cursors();
        self.refresh_registry();
    }

    /// An unsettled delivery of a consume link was settled (or could not be sent):
    /// a queue's home hears of it at once, an RPC responder's settlements (how many,
    /// and the bytes of those sent unsettled) are counted and told at the end of the
    /// turn.
    fn consumed_settled(&mut self, key: ChannelKey, sub: SubRef, token: u64, bytes: u32, outcome: Outcome) {
        if key.pattern == Pattern::Queues {
            self.route(ShardMsg::Settle { key, sub, token, outcome });
            return;
        }
        match self.rpc_settled.iter_mut().rev().find(|e| e.1 == sub) {
            Some(e) => {
                e.2 += 1;
                e.3 += u64::from(bytes);
            }
            None => self.rpc_settled.push((key, sub, 1, u64::from(bytes))),
        }
    }

    /// Route a message; events batched before it go first, so order is kept.
    fn route(&mut self, m: ShardMsg) {
        self.flush_events();
        self.shard.route(m);
    }

    /// Route the events published in this turn.
    fn flush_events(&mut self) {
        if let Some((key, msgs)) = self.events_batch.take() {
            self.shard.route(ShardMsg::PublishBatch { key, msgs });
        }
    }

    /// Add a published event to the turn's batch (a new batch for another channel
    /// or a full one).
    fn batch_event(&mut self, key: ChannelKey, msg: Msg) {
        match &mut self.events_batch {
            Some((k, msgs)) if *k == key && msgs.len() < EVENTS_BATCH => msgs.push(msg),
            _ => {
                self.flush_events();
                let mut msgs = Vec::with_capacity(EVENTS_BATCH);
                msgs.push(msg);
                self.events_batch = Some((key, msgs));
            }
        }
    }

    fn on_event(&mut self, e: Event) {
        match e {
            Event::Opened(open) => {
                // Out of its handshake: no longer given up for a new connection.
                self.shard.handshake_end(self.id);
                // Publish the new connection at once.
                self.registry_count = (usize::MAX, 0, 0);
                self.info.container_id = sanitize(&open.container_id, 256);
                self.container_hash =
                    address::fnv1a64(address::fnv1a64(address::FNV64_BASIS, open.container_id.as_bytes()), b"|");
                self.info.client_id = self.identity.clone().unwrap_or_else(|| self.info.container_id.clone());
                // As long as a container-id at most: each connection's entry in the admin
                // API's answer stays small (before 2026-12-06 they were kept whole, up to
                // the 32 KiB an OPEN may take, and written six bytes per control character).
                if let Some(p) = &open.properties {
                    let field = |k: &str| -> String {
                        p.get(k).and_then(Value::as_str).unwrap_or_default().chars().take(256).collect()
                    };
                    self.info.product = field("product");
                    self.info.version = field("version");
                }
                if open.container_id.is_empty() {
                    self.count_error(Scope::Connection);
                    self.engine.close(Some(Error::new(condition::INVALID_FIELD, "open.container-id is required")));
                } else if let Some(err) = self.reject.take() {
                    self.count_error(Scope::Connection);
                    self.engine.close(Some(err));
                }
            }
            Event::SaslInit(init) => self.on_sasl_init(init),
            Event::SaslRequired => {
                // A bare AMQP header while authentication is on: refused by the engine,
                // audited and counted here like any other failed authentication.
                let why = crate::auth::AuthError::Protocol("SASL required: bare AMQP connection refused");
                crate::auth::audit_failure("none", &self.info.source_ip, &why);
            }
            Event::SaslOutcome(_) => {}
            Event::SessionBegun { channel, .. } => {
                self.sessions.insert(channel);
                gauge(&self.shard.counters.sessions, 1);
                // A BEGIN above the negotiated channel-max (sent before our OPEN could be
                // seen) is ended like one session too many.
                let above = self.engine.session_remote_channel(channel).is_some_and(|c| c > self.engine.channel_max());
                let too_many = self.sessions.len() > self.settings().session_max as usize;
                if above || too_many {
                    let why = if above { "channel above the negotiated channel-max" } else { "session limit reached" };
                    self.count_error(Scope::Session(channel));
                    self.engine.end_session(channel, Some(Error::new(condition::RESOURCE_LIMIT_EXCEEDED, why)));
                }
            }
            Event::SessionEnded { channel, .. } => {
                if self.sessions.remove(&channel) {
                    gauge(&self.shard.counters.sessions, -1);
                }
            }
            Event::AttachRequested { link, channel, attach } => self.on_attach(link, channel, *attach),
            Event::Attached { .. } => {}
            Event::Credit { link, drain, .. } => self.on_credit(link, drain),
            // A link's FLOW carries its session's window too.
            Event::SenderFlow { link, .. } => {
                if let Some(ch) = self.links.get(&link).map(|c| c.channel) {
                    self.retry_held(ch);
                }
            }
            Event::SessionFlow { channel } => self.retry_held(channel),
            Event::Delivery(d) => self.on_delivery(d),
            Event::Aborted { .. } => {}
            Event::Disposition { link, delivery_id, settled, state } => {
                self.on_disposition(link, delivery_id, settled, state)
            }
            Event::Detached { link, .. } => self.on_detached(link),
            Event::Closed { .. } => {}
            Event::LocalError { scope, error } => {
                tracing::debug!(
                    conn = self.id,
                    condition = %error.condition,
                    description = error.description.as_deref().unwrap_or(""),
                    "protocol error"
                );
                self.count_error(scope);
                // An oversize message is refused as it comes in: dropped, as the
                // reference counts it.
                if error.condition.as_str() == condition::MESSAGE_SIZE_EXCEEDED {
                    add(&self.shard.counters.transfers_in_dropped, 1);
                }
            }
        }
    }

    /// A sasl-init: EXTERNAL names the client by its certificate CN, PLAIN by its JWT
    /// (or, with authentication disabled, by its username). A failure is answered
    /// with outcome `auth` after a delay; the reason goes to the audit log only.
    fn on_sasl_init(&mut self, init: sluice_proto::types::SaslInit) {
        let auth = self.shard.global.auth.clone();
        let result = auth.authenticate(
            init.mechanism.as_str(),
            init.initial_response.as_deref(),
            self.client_cn.as_deref(),
            wall_ms(),
        );
        match result {
            Ok(id) => {
                self.info.sasl = id.mechanism.as_str().to_owned();
                self.identity = (!id.client_id.is_empty()).then(|| id.client_id.clone());
                self.expires_at = id.expires_at;
                crate::auth::audit_success(&id, &self.info.source_ip);
                self.engine.sasl_outcome(0);
            }
            Err(e) => {
                crate::auth::audit_failure(init.mechanism.as_str(), &self.info.source_ip, &e);
                self.auth_failed_at = Some(self.now() + AUTH_FAILURE_DELAY_MS);
            }
        }
    }

    fn count_error(&self, scope: Scope) {
        let i = match scope {
            Scope::Connection => 0,
            Scope::Session(_) => 1,
            Scope::Link(_) => 2,
        };
        add(&self.shard.counters.errors[i], 1);
    }

    // ------------------------------------------------------------ attach

    fn refuse(&mut self, link: LinkId, cond: &str, description: impl Into<String>) {
        add(&self.shard.counters.errors[2], 1);
        let _ = self.engine.refuse_attach(link, Error::new(cond, description));
    }

    fn on_attach(&mut self, link: LinkId, channel: u16, attach: Attach) {
        if attach.rcv_settle_mode() == ReceiverSettleMode::Second {
            return self.refuse(link, condition::NOT_IMPLEMENTED, "rcv-settle-mode second is not supported");
        }
        if attach.name.len() > MAX_LINK_NAME {
            // Kept per link in several places, so bounded like every peer quantity.
            return self.refuse(link, condition::INVALID_FIELD, "link name longer than 1024 bytes");
        }
        // The server's role is the inverse of the client's.
        let role = attach.role.peer();
        if self.link_names.contains(&(channel, role == Role::Sender, attach.name.clone())) {
            return self.refuse(link, condition::NOT_ALLOWED, "duplicate link name");
        }
        if attach.handle > self.settings().handle_max() {
            // Pipelined before our BEGIN (with its handle-max) could be seen.
            return self.refuse(link, condition::RESOURCE_LIMIT_EXCEEDED, "handle above handle-max");
        }
        let on_session = self.links_on.get(&channel).copied().unwrap_or(0);
        if on_session >= self.settings().max_links_per_session as usize {
            return self.refuse(link, condition::RESOURCE_LIMIT_EXCEEDED, "link limit reached");
        }
        match role {
            Role::Receiver => self.attach_produce(link, channel, attach),
            Role::Sender => {
                // The outcome of a delivery the consumer settles without one (3.5.3):
                // the broker agrees to it by echoing the source.
                let default_outcome =
                    attach.source.as_ref().and_then(|s| s.default_outcome.clone()).filter(DeliveryState::is_outcome);
                self.attach_consume(link, channel, attach);
                if let (Some(o), Some(ctx)) = (default_outcome, self.links.get_mut(&link)) {
                    ctx.default_outcome = Some(o);
                }
            }
        }
    }

    /// Keep a link's context, with the per-session count and the name index that
    /// attach checks use (constant time, however many links the connection has).
    fn insert_link(&mut self, link: LinkId, ctx: LinkCtx) {
        *self.links_on.entry(ctx.channel).or_insert(0) += 1;
        self.store_windows += store_windows(&ctx);
        self.link_names.insert((ctx.channel, ctx.role == Role::Sender, ctx.name.clone()));
        if let Some(old) = self.links.insert(link, ctx) {
            self.unindex_link(&old);
        }
    }

    fn remove_link(&mut self, link: LinkId) -> Option<LinkCtx> {
        let ctx = self.links.remove(&link)?;
        self.unindex_link(&ctx);
        Some(ctx)
    }

    fn unindex_link(&mut self, ctx: &LinkCtx) {
        self.store_windows -= store_windows(ctx);
        if let Some(n) = self.links_on.get_mut(&ctx.channel) {
            *n -= 1;
            if *n == 0 {
                self.links_on.remove(&ctx.channel);
            }
        }
        self.link_names.remove(&(ctx.channel, ctx.role == Role::Sender, ctx.name.clone()));
    }

    fn new_ctx(&mut self, channel: u16, name: &str, role: Role, kind: LinkKind) -> LinkCtx {
        let serial = self.next_serial;
        self.next_serial += 1;
        LinkCtx {
            serial,
            channel,
            name: name.to_owned(),
            role,
            kind,
            address: String::new(),
            pattern: String::new(),
            chan: String::new(),
            durable: false,
            dynamic: false,
            next_tag: 0,
            zero_since: Some(Instant::now()),
            zero_total: Duration::ZERO,
            renews: false,
            bytes_out: 0,
            unreported: (0, 0),
            held: VecDeque::new(),
            held_over: false,
            default_outcome: None,
            partial: None,
            requests: Vec::new(),
            turn: false,
            drain_after_held: false,
            taken: 0,
            credit_seq: 0,
        }
    }

    fn mint_node(&mut self) -> String {
        // From the OS: other connections may send to a node they know the name of, so
        // the names a connection has shown must not tell its others.
        let mut r = [0u8; 16];
        self.shard.random_bytes(&mut r);
        let name = address::dynamic_node_name(self.shard.id, self.id, &message::uuid_string(&r));
        self.nodes.insert(name.clone(), NodeState::default());
        name
    }

    fn attach_produce(&mut self, link: LinkId, channel: u16, attach: Attach) {
        if attach.source.as_ref().and_then(|s| s.filter.as_ref()).is_some_and(has_selector) {
            return self.refuse(link, condition::NOT_IMPLEMENTED, "selector filter not supported on a sender link");
        }
        let target = attach.target().cloned();
        let mut reply_target = target.clone();
        let (t, address) = match &target {
            Some(t) if t.dynamic() => {
                let name = self.mint_node();
                if let Some(rt) = reply_target.as_mut() {
                    rt.address = Some(name.clone());
                }
                (ProduceTarget::Node(name.clone()), name)
            }
            Some(Target { address: Some(a), .. }) if !a.is_empty() => {
                let hint = jms_hint(t_caps(&target));
                match address::resolve(a, hint, self.settings().default_pattern) {
                    Ok(Node::Channel(k)) => {
                        if !self.authorized(&k, crate::auth::Action::Write) {
                            return self.refuse(
                                link,
                                condition::UNAUTHORIZED_ACCESS,
                                format!("not authorized for {}", k.name),
                            );
                        }
                        (ProduceTarget::Channel(k), a.clone())
                    }
                    Ok(Node::Responses(id)) => (ProduceTarget::Responses(id), a.clone()),
                    // Another connection's node is known only there: each message
                    // learns whether it still is (refused "unreachable dynamic node").
                    Ok(Node::Dynamic(n)) if self.nodes.contains_key(&n) || self.node_owner(&n).is_some() => {
                        (ProduceTarget::Node(n), a.clone())
                    }
                    Ok(Node::Dynamic(_)) => return self.refuse(link, condition::NOT_FOUND, "unknown dynamic node"),
                    Err(why) => return self.refuse(link, condition::NOT_FOUND, why),
                }
            }
            _ => (ProduceTarget::Anonymous, String::new()),
        };
        if attach.target.as_ref().is_some_and(|t| matches!(t, AttachTarget::Coordinator(_))) {
            return self.refuse(link, condition::NOT_IMPLEMENTED, "transactions are not supported");
        }
        let window = self.settings().effective_max_unsettled();
        let mut ctx =
            self.new_ctx(channel, &attach.name, Role::Receiver, LinkKind::Produce { target: t.clone(), window });
        ctx.address = address;
        ctx.dynamic = matches!(&target, Some(t) if t.dynamic());
        match &t {
            ProduceTarget::Channel(k) => {
                ctx.pattern = k.pattern.as_str().into();
                ctx.chan = k.name.to_string();
            }
            ProduceTarget::Responses(id) => {
                ctx.pattern = "responses".into();
                ctx.chan = id.clone();
            }
            ProduceTarget::Anonymous => ctx.pattern = "anonymous".into(),
            ProduceTarget::Node(n) => {
                ctx.pattern = "dynamic".into();
                ctx.chan = n.clone();
            }
        }
        // The sender's mode is the sender's: echoed as declared.
        let snd = attach.snd_settle_mode();
        let reply = Attach {
            snd_settle_mode: Some(snd),
            rcv_settle_mode: Some(ReceiverSettleMode::First),
            source: attach.source.clone(),
            target: reply_target.map(AttachTarget::Target),
            max_message_size: Some(self.settings().max_message_size),
            ..Default::default()
        };
        if self.engine.attach_reply(link, reply).is_err() {
            // The link went away before its answer (e.g. detached in the same read): a
            // node minted for it must not outlive it.
            if let (true, ProduceTarget::Node(n)) = (ctx.dynamic, &t) {
                self.remove_node(n);
            }
            return;
        }
        let _ = self.engine.grant_credit(link, window, false);
        self.serials.insert(ctx.serial, link);
        self.insert_link(link, ctx);
        gauge(&self.shard.counters.links_receiver, 1);
    }

    fn attach_consume(&mut self, link: LinkId, channel: u16, attach: Attach) {
        let Some(source) = attach.source.clone() else {
            return self.refuse(link, condition::NOT_FOUND, "missing source");
        };
        let mut reply_source = source.clone();
        let props = attach.properties.clone().unwrap_or_default();
        let group =
            props.get("x-opt-kubemq-group").and_then(Value::as_str).filter(|g| !g.is_empty()).map(str::to_owned);
        // A group names a durable cursor on disk (a 16-bit length): as long as a channel
        // name at most.
        if group.as_ref().is_some_and(|g| g.len() > address::NAME_MAX) {
            return self.refuse(
                link,
                condition::INVALID_FIELD,
                format!("x-opt-kubemq-group longer than {} bytes", address::NAME_MAX),
            );
        }
        if source.dynamic() {
            let name = self.mint_node();
            reply_source.address = Some(name.clone());
            let mut ctx = self.new_ctx(
                channel,
                &attach.name,
                Role::Sender,
                LinkKind::NodeConsume { node: Rc::from(name.as_str()) },
            );
            ctx.address = name.clone();
            ctx.pattern = "dynamic".into();
            ctx.chan = name.clone();
            ctx.dynamic = true;
            return self.finish_node_attach(link, ctx, &attach, reply_source, name, true);
        }
        let addr = source.address.clone().unwrap_or_default();
        if addr.is_empty() {
            return self.refuse(link, condition::NOT_FOUND, "missing source address");
        }
        let key = match address::resolve(&addr, jms_hint(source.capabilities.as_ref()), self.settings().default_pattern)
        {
            Ok(Node::Channel(k)) => k,
            Ok(Node::Responses(_)) => {
                return self.refuse(link, condition::NOT_ALLOWED, "responses nodes cannot be consumed")
            }
            Ok(Node::Dynamic(n)) => {
                if self.nodes.get(&n).is_some_and(|s| s.link.is_none()) {
                    let mut ctx = self.new_ctx(
                        channel,
                        &attach.name,
                        Role::Sender,
                        LinkKind::NodeConsume { node: Rc::from(n.as_str()) },
                    );
                    ctx.address = n.clone();
                    ctx.pattern = "dynamic".into();
                    ctx.chan = n.clone();
                    ctx.dynamic = true;
                    return self.finish_node_attach(link, ctx, &attach, reply_source, n, false);
                }
                return self.refuse(link, condition::NOT_FOUND, "unknown dynamic node");
            }
            Err(why) => return self.refuse(link, condition::NOT_FOUND, why),
        };
        if !self.authorized(&key, crate::auth::Action::Read) {
            return self.refuse(link, condition::UNAUTHORIZED_ACCESS, format!("not authorized for {}", key.name));
        }
        let selector_text = match source.filter.as_ref().and_then(selector_text) {
            Some(Err(why)) => return self.refuse(link, condition::INVALID_FIELD, why),
            Some(Ok(text)) => Some(text),
            None => None,
        };
        let mut selector = None;
        if let Some(text) = &selector_text {
            match key.pattern {
                Pattern::Events | Pattern::EventsStore => match Selector::parse(text) {
                    Ok(s) => selector = Some(s),
                    Err(why) => return self.refuse(link, condition::INVALID_FIELD, format!("invalid selector: {why}")),
                },
                _ => {
                    return self.refuse(
                        link,
                        condition::NOT_IMPLEMENTED,
                        "selector filter not supported on this address",
                    )
                }
            }
        }
        if key.pattern == Pattern::Queues && source.distribution_mode.as_ref().is_some_and(|m| m.as_str() == "copy") {
            return self.refuse(link, condition::INVALID_FIELD, "distribution-mode copy is not supported on queues");
        }
        let mut start = StartPos::NewOnly;
        if key.pattern == Pattern::EventsStore {
            if let Some(v) = props.get("x-opt-kubemq-start") {
                match parse_start(v) {
                    Ok(s) => start = s,
                    Err(why) => return self.refuse(link, condition::INVALID_FIELD, why),
                }
            }
        }
        let durable =
            key.pattern == Pattern::EventsStore && source.expiry_policy.as_ref().is_some_and(|p| p.as_str() == "never");
        let durable_id = durable.then(|| durable_identity(&self.info.container_id, self.container_hash, &attach.name));
        let hold_by_default = self.settings().events_store_stall == crate::config::StallPolicy::Hold;
        let hold = match props.get("x-opt-sluice-stall").and_then(Value::as_str) {
            Some("hold") => true,
            Some("detach") => false,
            Some(_) => return self.refuse(link, condition::INVALID_FIELD, "x-opt-sluice-stall must be hold or detach"),
            None => hold_by_default,
        };
        // Events deliver pre-settled; queues and RPC honour snd-settle-mode; events-store
        // delivers pre-settled unless a lossless link asks for unsettled deliveries.
        // (Not for a consumer group: its members share one cursor.)
        let acks = key.pattern == Pattern::EventsStore
            && hold
            && group.is_none()
            && attach.snd_settle_mode() == SenderSettleMode::Unsettled;
        if key.pattern == Pattern::EventsStore && self.store_windows > 0 {
            // Each subscription's window is allocated whole when it attaches (and a link
            // receiving unsettled keeps as many unsettled events besides).
            let slot = std::mem::size_of::<(u64, Msg)>() as u64 + 8;
            let per_link = self.settings().effective_max_unsettled() as u64 * slot;
            let windows = self.store_windows + 1 + u64::from(acks);
            if windows.saturating_mul(per_link) > RING_BYTES_MAX {
                return self.refuse(
                    link,
                    condition::RESOURCE_LIMIT_EXCEEDED,
                    "too many events-store subscriptions on this connection",
                );
            }
        }
        let presettled = match key.pattern {
            Pattern::Queues => attach.snd_settle_mode() == SenderSettleMode::Settled,
            Pattern::Events => true,
            Pattern::EventsStore => !acks,
            Pattern::Commands | Pattern::Queries => attach.snd_settle_mode() == SenderSettleMode::Settled,
        };
        let snd = match (key.pattern, presettled) {
            (_, true) => SenderSettleMode::Settled,
            (Pattern::Queues | Pattern::EventsStore, false) => SenderSettleMode::Unsettled,
            _ => SenderSettleMode::Mixed,
        };
        let reply = Attach {
            snd_settle_mode: Some(snd),
            rcv_settle_mode: Some(ReceiverSettleMode::First),
            source: Some(reply_source),
            target: attach.target.clone(),
            max_message_size: Some(self.settings().max_message_size),
            ..Default::default()
        };
        let kind = LinkKind::Consume {
            key: key.clone(),
            unsettled: HashMap::default(),
            ring: None,
            subscribed: false,
            reply: Some(Box::new(reply)),
            pending_drain: None,
            stalled: false,
            hold,
            acks: acks.then(Box::default),
        };
        let mut ctx = self.new_ctx(channel, &attach.name, Role::Sender, kind);
        ctx.address = addr;
        ctx.pattern = key.pattern.as_str().into();
        ctx.chan = key.name.to_string();
        ctx.durable = durable;
        let st = self.settings();
        let number = |name: &str| props.get(name).and_then(value_u64);
        let spec = SubSpec {
            group,
            selector,
            start,
            legacy_durable: durable.then(|| legacy_durable_identity(&self.info.container_id, &attach.name)),
            durable: durable_id,
            presettled,
            max_unsettled: st.effective_max_unsettled(),
            batch: st.get_batch_size,
            hold,
            max_outstanding_messages: number("x-opt-sluice-max-outstanding-messages")
                .map_or(st.max_outstanding_messages, |n| n.min(u32::MAX as u64) as u32),
            max_outstanding_bytes: number("x-opt-sluice-max-outstanding-bytes").unwrap_or(st.max_outstanding_bytes),
            events_buffer: number("x-opt-sluice-events-buffer").map_or(st.events_buffer, |n| n.min(1 << 20) as u32),
            events_in_flight_bytes: st.events_in_flight_bytes,
            // The same range as the setting (u32 seconds): a peer's huge value must not
            // overflow the deadline arithmetic.
            ack_deadline_ms: number("x-opt-sluice-ack-deadline-seconds")
                .map_or(st.ack_deadline_seconds as u64, |n| n.min(u32::MAX as u64))
                .saturating_mul(1000),
        };
        ctx.renews = key.pattern == Pattern::Queues && spec.ack_deadline_ms > 0;
        if let LinkKind::Consume { acks: Some(acks), .. } = &mut ctx.kind {
            acks.max_msgs = spec.max_outstanding_messages;
            acks.max_bytes = spec.max_outstanding_bytes;
        }
        let sub = self.sub(ctx.serial);
        if ctx.durable {
            self.engine.defer_detach_reply(link);
        }
        self.serials.insert(ctx.serial, link);
        self.insert_link(link, ctx);
        self.route(ShardMsg::Subscribe { key, sub, spec: Box::new(spec) });
    }

    /// Answer the ATTACH of a link consuming dynamic node `node` (`minted`: created
    /// for this link).
    fn finish_node_attach(
        &mut self,
        link: LinkId,
        ctx: LinkCtx,
        attach: &Attach,
        source: Source,
        node: String,
        minted: bool,
    ) {
        let reply = Attach {
            snd_settle_mode: Some(SenderSettleMode::Unsettled),
            rcv_settle_mode: Some(ReceiverSettleMode::First),
            source: Some(source),
            target: attach.target.clone(),
            max_message_size: Some(self.settings().max_message_size),
            ..Default::default()
        };
        if self.engine.attach_reply(link, reply).is_err() {
            // As for a dynamic target: a node minted for this link goes with it.
            if minted {
                self.remove_node(&node);
            }
            return;
        }
        if let Some(n) = self.nodes.get_mut(&node) {
            n.link = Some(link);
        }
        self.serials.insert(ctx.serial, link);
        self.insert_link(link, ctx);
        gauge(&self.shard.counters.links_sender, 1);
    }

    fn on_subscribed(&mut self, serial: u64, result: Result<Option<Arc<StoreRing>>, (&'static str, String)>) {
        let Some(&link) = self.serials.get(&serial) else {
            return;
        };
        let Some(ctx) = self.links.get_mut(&link) else { return };
        let LinkKind::Consume { subscribed, reply, ring, pending_drain, key, .. } = &mut ctx.kind else { return };
        match result {
            Ok(r) => {
                *subscribed = true;
                *ring = r;
                let reply = reply.take().map(|b| *b).unwrap_or_default();
                let pending = pending_drain.take();
                let key = key.clone();
                if self.engine.attach_reply(link, reply).is_err() {
                    return;
                }
                gauge(&self.shard.counters.links_sender, 1);
                // Credit that arrived before the subscription was ready.
                if let Some(drain) = pending {
                    self.forward_credit(link, key, drain);
                }
            }
            Err((cond, why)) => {
                self.remove_link(link);
                self.serials.remove(&serial);
                self.refuse(link, cond, why);
            }
        }
    }

    // ------------------------------------------------------------ credit and delivery (consume)

    fn on_credit(&mut self, link: LinkId, drain: bool) {
        // A drain put off behind waiting deliveries was for the FLOW before this one:
        // this one takes it back (or asks again, and is answered on its own).
        if let Some(ctx) = self.links.get_mut(&link) {
            ctx.drain_after_held = false;
        }
        // The FLOW carried the session's window too: what waits for it goes first.
        self.held_credit(link);
        self.give_back_held(link);
        let Some(ctx) = self.links.get_mut(&link) else { return };
        match &mut ctx.kind {
            LinkKind::Consume { subscribed: false, pending_drain, .. } => *pending_drain = Some(drain),
            LinkKind::Consume { key, ring: Some(_), .. } => {
                let _ = key;
                self.pump_ring(link);
            }
            LinkKind::Consume { key, .. } => {
                let key = key.clone();
                self.forward_credit(link, key, drain);
            }
            LinkKind::NodeConsume { node } => {
                let node = node.clone();
                self.pump_node(&node);
                if drain {
                    let _ = self.engine.drain_complete(link);
                }
            }
            LinkKind::Produce { .. } => {}
        }
    }

    /// The queue or RPC delivery of session `channel` whose later frames waited for the
    /// window has been written once they have gone: a pre-settled one is settled now.
    fn finish_partial(&mut self, channel: u16) {
        let Some(&link) = self.partial_on.get(&channel) else { return };
        if self.engine.frames_waiting(channel) {
            return;
        }
        self.partial_on.remove(&channel);
        let Some((token, settled, _)) = self.links.get_mut(&link).and_then(|c| c.partial.take()) else { return };
        if settled {
            self.link_settled(link, token, 0, Outcome::Accepted);
        }
    }

    /// A queue consumer that took its credit back (a FLOW with credit 0) while
    /// deliveries of it wait for its session window: they go back to the queue,
    /// undelivered (not counted), for its next credit or another consumer. Before, they
    /// waited until both its window and its credit came back, or the link went, so one
    /// consumer could keep up to its window of messages from all others for ever.
    /// RPC requests held so go back to their channel, in their order, for another
    /// responder (before 2026-12-06 they stayed, as queue messages did, until the link
    /// went, past their deadlines).
    fn give_back_held(&mut self, link: LinkId) {
        if self.engine.link_credit(link) > 0 {
            return;
        }
        let Some(ctx) = self.links.get_mut(&link) else { return };
        let LinkKind::Consume { key, .. } = &ctx.kind else { return };
        let rpc = matches!(key.pattern, Pattern::Commands | Pattern::Queries);
        if !(rpc || key.pattern == Pattern::Queues) || ctx.held.is_empty() {
            return;
        }
        let key = key.clone();
        let channel = ctx.channel;
        ctx.turn = false;
        let held = std::mem::take(&mut ctx.held);
        // Out of its session's turns, its bytes no longer held.
        self.forget_held(link, channel, &held);
        let mut requests = Vec::new();
        for h in held {
            self.link_settled(link, h.token, window_bytes(h.settled, h.payload.len() as u64), Outcome::Undelivered);
            if rpc {
                requests.push((Msg { payload: h.payload, received_ms: self.epoch_ms }, h.token));
            }
        }
        if !requests.is_empty() {
            self.route(ShardMsg::RpcReturned { key, requests });
        }
    }

    /// Tell the home the link's credit as its engine has it now: after the deliveries
    /// that waited for the session window went (a FLOW's own figure was from before),
    /// at the same moment as `reached`.
    fn forward_credit(&mut self, link: LinkId, key: ChannelKey, drain: bool) {
        let credit = self.engine.link_credit(link);
        let Some(ctx) = self.links.get_mut(&link) else { return };
        let bytes_out = ctx.bytes_out;
        ctx.unreported = (0, 0);
        ctx.credit_seq = ctx.credit_seq.wrapping_add(1);
        let (seq, serial) = (ctx.credit_seq, ctx.serial);
        // Those still waiting for the session window will spend credit yet.
        let reached = ctx.taken.wrapping_sub(ctx.held.len() as u32);
        let sub = self.sub(serial);
        self.route(ShardMsg::Credit { key, sub, credit, reached, bytes_out, drain, seq });
    }

    /// Events: count what this link has written, and tell the home how far it has got
    /// once a quarter of its window has gone out since the last report, so the window
    /// keeps moving for a subscriber that keeps up.
    /// `batches`: delivery batches taken from the home (each counts in its window).
    fn count_events_out(&mut self, link: LinkId, n: u64, bytes: u64, batches: u64) {
        let Some(ctx) = self.links.get_mut(&link) else { return };
        ctx.bytes_out += bytes;
        ctx.unreported.0 += n as u32;
        ctx.unreported.1 += bytes + batches * BATCH_OVERHEAD;
        let cost = ctx.unreported.1 + ctx.unreported.0 as u64 * EVENT_OVERHEAD;
        if cost < self.shard.global.settings.events_in_flight_bytes / 4 {
            return;
        }
        let LinkKind::Consume { key, .. } = &ctx.kind else { return };
        let key = key.clone();
        let drain = self.engine.link_info(link).is_some_and(|i| i.drain);
        self.forward_credit(link, key, drain);
    }

    /// Move events-store events from the ring to the wire as credit allows.
    fn pump_ring(&mut self, link: LinkId) {
        let Some(ctx) = self.links.get_mut(&link) else { return };
        let LinkKind::Consume { ring: Some(ring), key, stalled: false, hold, acks, .. } = &ctx.kind else { return };
        if acks.is_some() {
            return self.pump_ring_unsettled(link);
        }
        let ring = ring.clone();
        let key = key.clone();
        let hold = *hold;
        let serial = ctx.serial;
        let pattern = pattern_index(key.pattern);
        let mut sent_next = None;
        // Behind deliveries that wait for the session window: resumed once they have
        // gone out (`retry_held`). Inside the loop, the link starts waiting only where
        // the loop ends.
        let waiting = !ctx.held.is_empty();
        loop {
            if waiting || self.engine.link_credit(link) == 0 {
                break;
            }
            let Some((seq, msg)) = ring.ring.pop() else { break };
            let ctx = match self.links.get_mut(&link) {
                Some(c) => c,
                None => return,
            };
            let tag = DeliveryTag::from_u64(ctx.next_tag);
            ctx.next_tag += 1;
            match self.engine.send_ref(link, tag, &msg.payload, true) {
                Ok(_) => {
                    add(&self.shard.counters.transfers_out[pattern], 1);
                    sent_next = Some(seq + 1);
                }
                // Not sent: held, so a lossless cursor stays before it, and a link that
                // is going (any other error) names it as the first it never sent.
                Err(_) => {
                    self.hold(link, Held { token: seq, payload: msg.payload, settled: true });
                    break;
                }
            }
        }
        let drain = self.engine.link_info(link).is_some_and(|i| i.drain);
        if drain && (ring.ring.is_empty() || self.engine.link_credit(link) == 0) {
            self.complete_drain(link);
        }
        let sub = self.sub(serial);
        if let (true, Some(next_seq)) = (hold, sent_next) {
            // Lossless: the durable cursor moves only past what was sent.
            self.route(ShardMsg::Consumed { key: key.clone(), sub, next_seq });
        }
        self.ring_space(&ring, key, sub);
    }

    /// The home waits for room in the link's ring: tell it there is some.
    fn ring_space(&mut self, ring: &StoreRing, key: ChannelKey, sub: SubRef) {
        // After the pops, before the flag: the home sets the flag before it looks at
        // the ring again (`Reader::place`), so one of the two sees the other.
        std::sync::atomic::fence(Ordering::SeqCst);
        if ring.ring.len() < ring.ring.capacity() && ring.home_waiting.swap(false, Ordering::SeqCst) {
            self.route(ShardMsg::RingSpace { key, sub });
        }
    }

    /// [`Self::pump_ring`] for a lossless link receiving unsettled: events released
    /// or modified go again first, then the ring's, while the link has credit and at
    /// most MaxUnsettledPerLink are unsettled. The cursor moves on settlements
    /// ([`Self::store_settled`]), not here.
    fn pump_ring_unsettled(&mut self, link: LinkId) {
        let max = self.settings().effective_max_unsettled() as usize;
        let Some(ctx) = self.links.get(&link) else { return };
        let LinkKind::Consume { ring: Some(ring), key, .. } = &ctx.kind else { return };
        let (ring, key, serial) = (ring.clone(), key.clone(), ctx.serial);
        loop {
            let Some(ctx) = self.links.get_mut(&link) else { return };
            if !ctx.held.is_empty() || self.engine.link_credit(link) == 0 {
                break;
            }
            let LinkKind::Consume { acks: Some(acks), .. } = &mut ctx.kind else { return };
            let (seq, payload) = match acks.redo.pop_front() {
                // Sent again with a header that says so (delivery-count, as for queues).
                Some(seq) => match acks.unacked.get_mut(&seq) {
                    Some((payload, sends)) => {
                        *sends = sends.saturating_add(1);
                        (seq, message::with_delivery_header(payload, *sends))
                    }
                    None => continue,
                },
                None => {
                    if acks.unacked.len() >= max || acks.held_back() {
                        break;
                    }
                    let Some((seq, msg)) = ring.ring.pop() else { break };
                    acks.unacked_bytes += msg.payload.len() as u64;
                    acks.unacked.insert(seq, (msg.payload.clone(), 1));
                    acks.next = seq + 1;
                    (seq, msg.payload)
                }
            };
            match self.send_consumed(link, Pattern::EventsStore, seq, payload, false) {
                Sent::Out => {}
                Sent::Waits(h) => {
                    self.hold(link, h);
                    break;
                }
                Sent::Failed => {
                    // Not sent (the link is going, or its credit was lowered): again
                    // first, while the link lasts.
                    if let Some(LinkKind::Consume { acks: Some(acks), .. }) =
                        self.links.get_mut(&link).map(|c| &mut c.kind)
                    {
                        acks.redo.push_front(seq);
                    }
                    break;
                }
            }
        }
        // A drain completes once nothing more can go now: no credit, or nothing to
        // send again and the ring empty or the unsettled window full.
        let Some(ctx) = self.links.get(&link) else { return };
        let stuck = matches!(&ctx.kind, LinkKind::Consume { acks: Some(a), .. }
            if a.redo.is_empty() && (ring.ring.is_empty() || a.unacked.len() >= max || a.held_back()));
        let drain = self.engine.link_info(link).is_some_and(|i| i.drain);
        if drain && (stuck || self.engine.link_credit(link) == 0) {
            self.complete_drain(link);
        }
        let sub = self.sub(serial);
        self.ring_space(&ring, key, sub);
    }

    /// The client settled event `seq` of a lossless link receiving unsettled: accepted
    /// or rejected, it is done with; released or modified, it goes again. The durable cursor moves up to the first event still
    /// unsettled.
    fn store_settled(&mut self, link: LinkId, seq: u64, outcome: Outcome) {
        let Some(ctx) = self.links.get_mut(&link) else { return };
        let LinkKind::Consume { acks: Some(acks), .. } = &mut ctx.kind else { return };
        match outcome {
            Outcome::Accepted | Outcome::Rejected => {
                if let Some((payload, _)) = acks.unacked.remove(&seq) {
                    acks.unacked_bytes = acks.unacked_bytes.saturating_sub(payload.len() as u64);
                }
            }
            // (Each event has one delivery at a time: it cannot be in `redo` already.)
            Outcome::Requeue | Outcome::Undelivered => {
                if acks.unacked.contains_key(&seq) {
                    acks.redo.push_back(seq);
                }
            }
        }
        // A durable subscription's cursor is told once per turn, however many
        // settlements the turn brought ([`Self::tell_store_cursors`]).
        if ctx.durable && acks.cursor() > acks.told && !acks.dirty {
            acks.dirty = true;
            self.store_cursors.push(link);
        }
        self.pump_ring(link);
    }

    /// Tell the homes how far the durable cursors of links receiving unsettled may go
    /// (the first event each has not settled), once per turn.
    fn tell_store_cursors(&mut self) {
        for link in std::mem::take(&mut self.store_cursors) {
            let Some(ctx) = self.links.get_mut(&link) else { continue };
            let serial = ctx.serial;
            let LinkKind::Consume { key, acks: Some(acks), .. } = &mut ctx.kind else { continue };
            acks.dirty = false;
            let cursor = acks.cursor();
            if cursor > acks.told {
                acks.told = cursor;
                let key = key.clone();
                let sub = self.sub(serial);
                self.route(ShardMsg::Consumed { key, sub, next_seq: cursor });
            }
        }
    }

    fn on_deliver(&mut self, serial: u64, token: u64, msg: Msg, receive_count: u32, settled: bool) {
        let Some(&link) = self.serials.get(&serial) else {
            return;
        };
        let Some(ctx) = self.links.get_mut(&link) else { return };
        let LinkKind::Consume { key, .. } = &ctx.kind else { return };
        ctx.taken = ctx.taken.wrapping_add(1);
        let pattern = key.pattern;
        let waiting = !ctx.held.is_empty();
        let payload = if pattern == Pattern::Queues {
            let p = message::with_delivery_header(&msg.payload, receive_count);
            self.spent.push(msg.payload);
            p
        } else {
            msg.payload
        };
        if waiting {
            self.hold(link, Held { token, payload, settled });
            return;
        }
        if let Sent::Waits(h) = self.send_consumed(link, pattern, token, payload, settled) {
            self.hold(link, h);
        }
    }

    /// Pre-settled events for one link: one lookup of the link for the batch, then
    /// each goes to the engine (or waits behind earlier deliveries for the session
    /// window).
    ///
    /// Written payloads go to [`Driver::spent`], released at the end of the turn.
    fn on_deliver_events(&mut self, serial: u64, msgs: Vec<Msg>) {
        let Some(&link) = self.serials.get(&serial) else { return };
        let Some(ctx) = self.links.get_mut(&link) else { return };
        if !matches!(ctx.kind, LinkKind::Consume { .. }) {
            return;
        }
        ctx.taken = ctx.taken.wrapping_add(msgs.len() as u32);
        let mut next_tag = ctx.next_tag;
        let mut holding = !ctx.held.is_empty();
        let (mut sent, mut bytes, mut dropped, mut dropped_bytes) = (0u64, 0u64, 0u64, 0u64);
        for m in msgs {
            if holding {
                self.hold(link, Held { token: 0, payload: m.payload, settled: true });
                continue;
            }
            let tag = DeliveryTag::from_u64(next_tag);
            next_tag += 1;
            let len = m.payload.len() as u64;
            match self.engine.send_ref(link, tag, &m.payload, true) {
                Ok(_) => {
                    sent += 1;
                    bytes += len;
                    self.spent.push(m.payload);
                }
                Err(UsageError::SessionWindow) => {
                    holding = true;
                    self.hold(link, Held { token: 0, payload: m.payload, settled: true });
                }
                // The peer lowered its credit while they were on their way, or the link
                // is going away: pre-settled events are at most once (dropped, counted).
                Err(_) => {
                    dropped += 1;
                    dropped_bytes += len;
                }
            }
        }
        if let Some(ctx) = self.links.get_mut(&link) {
            ctx.next_tag = next_tag;
        }
        if sent > 0 {
            add(&self.shard.counters.transfers_out[pattern_index(Pattern::Events)], sent);
        }
        if dropped > 0 {
            add(&self.shard.counters.events_dropped_held, dropped);
        }
        // The batch counts even when its events wait behind the session window: the
        // home charged it, and a subscriber that keeps up must hear back in time.
        // Dropped events are done with too: the home charged their bytes to the window.
        self.count_events_out(link, sent + dropped, bytes + dropped_bytes, 1);
    }

    /// Send one delivery of consume link `link`; the delivery back when the session
    /// window has no room for it (the caller holds it).
    fn send_consumed(&mut self, link: LinkId, pattern: Pattern, token: u64, payload: Bytes, settled: bool) -> Sent {
        let Some(channel) = self.links.get(&link).map(|c| c.channel) else { return Sent::Failed };
        // A delivery of this session whose later frames waited has gone whole if none
        // wait now (before this send: its own frames may wait after it).
        self.finish_partial(channel);
        let Some(ctx) = self.links.get_mut(&link) else { return Sent::Failed };
        let tag = DeliveryTag::from_u64(ctx.next_tag);
        ctx.next_tag += 1;
        let len = payload.len() as u64;
        // The home counts this delivery until it hears back: queue deliveries and RPC
        // requests sent unsettled (until settled), and pre-settled ones (until written
        // out, so a consumer or responder that does not read gets no more than its
        // window, and a queue message not written when the link ends goes back).
        let tracked = matches!(pattern, Pattern::Commands | Pattern::Queries | Pattern::Queues)
            || (pattern == Pattern::EventsStore && !settled);
        match self.engine.send_ref(link, tag, &payload, settled) {
            Ok(delivery_id) => {
                self.spent.push(payload);
                add(&self.shard.counters.transfers_out[pattern_index(pattern)], 1);
                if pattern == Pattern::Events {
                    self.count_events_out(link, 1, len, 0);
                }
                // A queue message or RPC request larger than the session window: its
                // later frames wait in the engine, and a detach before they go drops
                // them. It counts as written once they have gone (`finish_partial`);
                // before 2026-12-06 a pre-settled one was settled at once and lost with
                // its dropped frames, and an unsettled one went back counted as delivered.
                let mut partial = false;
                if matches!(pattern, Pattern::Queues | Pattern::Commands | Pattern::Queries)
                    && self.engine.frames_waiting(channel)
                {
                    let request = (pattern != Pattern::Queues).then(|| self.spent.last().cloned()).flatten();
                    if let Some(ctx) = self.links.get_mut(&link) {
                        ctx.partial = Some((token, settled, request));
                        self.partial_on.insert(channel, link);
                        partial = true;
                    }
                }
                if tracked && !settled {
                    if let Some(LinkKind::Consume { unsettled, .. }) = self.links.get_mut(&link).map(|c| &mut c.kind) {
                        unsettled.insert(delivery_id, (token, u32::try_from(len).unwrap_or(u32::MAX)));
                    }
                } else if tracked && !partial {
                    self.link_settled(link, token, 0, Outcome::Accepted);
                }
                Sent::Out
            }
            Err(UsageError::SessionWindow) => Sent::Waits(Held { token, payload, settled }),
            Err(e) => {
                if pattern == Pattern::Events {
                    // A held event the peer no longer has credit for: dropped (at most
                    // once), and done with in the window the home charged it to.
                    add(&self.shard.counters.events_dropped_held, 1);
                    self.count_events_out(link, 1, len, 0);
                }
                // (An events-store event not sent is the caller's to send again.)
                if tracked && pattern != Pattern::EventsStore {
                    // (Counted in its responder's bytes only if sent unsettled.)
                    let bytes = window_bytes(settled, len);
                    self.link_settled(link, token, bytes, Outcome::Undelivered);
                }
                if matches!(pattern, Pattern::Commands | Pattern::Queries) {
                    let Some(ctx) = self.links.get_mut(&link) else { return Sent::Failed };
                    match (&ctx.kind, e) {
                        // The link stays (the peer lowered its credit while the request
                        // was on its way): back to the channel now.
                        (LinkKind::Consume { key, .. }, UsageError::NoCredit) => {
                            let key = key.clone();
                            let msg = Msg { payload, received_ms: self.epoch_ms };
                            self.route(ShardMsg::request_returned(key, msg, token));
                        }
                        // The link is going: back after its Unsubscribe (`on_detached`).
                        _ => ctx.requests.push(Held { token, payload, settled }),
                    }
                }
                Sent::Failed
            }
        }
    }

    /// A delivery of consume link `link` is done with: see [`Self::consumed_settled`].
    fn link_settled(&mut self, link: LinkId, token: u64, bytes: u32, outcome: Outcome) {
        let Some(ctx) = self.links.get(&link) else { return };
        let LinkKind::Consume { key, .. } = &ctx.kind else { return };
        let key = key.clone();
        let sub = self.sub(ctx.serial);
        self.consumed_settled(key, sub, token, bytes, outcome);
    }

    /// Queue a delivery of consume link `link` behind its session window. Deliveries
    /// waiting on a connection are bounded (payload plus [`HELD_OVERHEAD`] each, four
    /// times `SLUICE_EVENTS_IN_FLIGHT_BYTES`): the link that passes the bound is
    /// detached with resource-limit-exceeded. A peer that keeps its session windows
    /// shut while many links take deliveries would otherwise make the connection hold
    /// each link's window. Of what the detached link held, queue messages go back to
    /// the front of their queue with the Unsubscribe, their delivery not counted; RPC
    /// requests go back to the front of their channel's waiting requests after it,
    /// for another responder; events, at most once, are counted as dropped.
    /// (An events-store link holds at most one event: it counts towards the bound but
    /// is not detached by it.)
    fn hold(&mut self, link: LinkId, h: Held) {
        let Some(ctx) = self.links.get_mut(&link) else { return };
        let LinkKind::Consume { key, .. } = &ctx.kind else { return };
        if ctx.held_over {
            match key.pattern {
                // The home has it unsettled, not sent (see `on_detached`).
                Pattern::Queues => {}
                Pattern::Events => add(&self.shard.counters.events_dropped_held, 1),
                Pattern::Commands | Pattern::Queries => ctx.requests.push(h),
                Pattern::EventsStore => {}
            }
            return;
        }
        // A queue delivery with an ack deadline: the deadline stops while it waits,
        // and starts when it is sent (`retry_held`), so waiting for the window does
        // not count against the consumer.
        if let Some((key, serial)) = (ctx.renews && !h.settled).then(|| (key.clone(), ctx.serial)) {
            let sub = self.sub(serial);
            self.route(ShardMsg::Extend { key, sub, token: h.token, held: true });
        }
        let Some(ctx) = self.links.get_mut(&link) else { return };
        let LinkKind::Consume { key, .. } = &ctx.kind else { return };
        if !ctx.turn {
            ctx.turn = true;
            self.held_on.entry(ctx.channel).or_default().push_back(link);
        }
        self.held_bytes += held_cost(&h);
        ctx.held.push_back(h);
        let cap = self.shard.global.settings.events_in_flight_bytes.saturating_mul(4);
        // An events-store link holds one event at most (its ring stops behind it): it
        // counts, but the bound detaches links that can hold more.
        if self.held_bytes <= cap || key.pattern == Pattern::EventsStore {
            return;
        }
        // Released here, so that later deliveries for this link in the same turn
        // (before its Detached event) are not held.
        let (pattern, channel) = (key.pattern, ctx.channel);
        ctx.held_over = true;
        ctx.turn = false;
        let held = std::mem::take(&mut ctx.held);
        // Events are at most once; queue messages the home has unsettled, not sent
        // (see `on_detached`).
        match pattern {
            Pattern::Events => add(&self.shard.counters.events_dropped_held, held.len() as u64),
            Pattern::Commands | Pattern::Queries => ctx.requests.extend(held.iter().cloned()),
            Pattern::Queues | Pattern::EventsStore => {}
        }
        self.forget_held(link, channel, &held);
        add(&self.shard.counters.errors[2], 1);
        let why = format!("deliveries waiting for the session window passed {cap} bytes");
        self.engine.detach(link, Some(Error::new(condition::RESOURCE_LIMIT_EXCEEDED, why)));
    }

    /// `held`, the waiting deliveries of `link` (on session `channel`), are no longer
    /// counted or waiting. Costs the links waiting on that session, never every waiting
    /// delivery.
    fn forget_held(&mut self, link: LinkId, channel: u16, held: &VecDeque<Held>) {
        if held.is_empty() {
            return;
        }
        self.held_bytes -= held.iter().map(held_cost).sum::<u64>();
        if let Some(q) = self.held_on.get_mut(&channel) {
            q.retain(|l| *l != link);
            if q.is_empty() {
                self.held_on.remove(&channel);
            }
        }
    }

    /// Send what waits behind the window of session `channel`, link by link in turns
    /// of at most [`HELD_TURN`] deliveries, as far as the window allows; a link whose
    /// deliveries are all out goes on with its events-store ring. Costs what it sends
    /// and nothing when nothing waits on the session (every FLOW calls it).
    fn retry_held(&mut self, channel: u16) {
        self.finish_partial(channel);
        if !self.held_on.contains_key(&channel) {
            return;
        }
        while self.engine.session_window(channel) > 0 {
            let Some(link) = self.held_on.get_mut(&channel).and_then(VecDeque::pop_front) else { break };
            let Some(ctx) = self.links.get_mut(&link) else { continue };
            ctx.turn = false;
            let LinkKind::Consume { key, hold: lossless, acks, .. } = &ctx.kind else { continue };
            let pattern = key.pattern;
            // Lossless events-store links receiving pre-settled tell the home how far
            // they have sent (those receiving unsettled, as settlements come).
            let cursor =
                (pattern == Pattern::EventsStore && *lossless && acks.is_none()).then(|| (key.clone(), ctx.serial));
            // Queue links with an ack deadline (see `hold`).
            let renew = ctx.renews.then(|| (key.clone(), ctx.serial));
            let (mut sent, mut next_seq, mut shut) = (0, None, false);
            // A link without credit waits out of the turns; its next credit brings it
            // back (`on_credit`).
            while self.engine.link_credit(link) > 0 {
                let Some(ctx) = self.links.get_mut(&link) else { break };
                if sent == HELD_TURN || self.engine.session_window(channel) == 0 {
                    break;
                }
                let Some(h) = ctx.held.pop_front() else { break };
                self.held_bytes -= held_cost(&h);
                if matches!(pattern, Pattern::Commands | Pattern::Queries) && h.token <= self.steady {
                    // An RPC request whose deadline passed while it waited: its
                    // requester has had its timeout answer, so it is not sent (a
                    // command would run after it). Before 2026-12-06 it was.
                    add(&self.shard.counters.transfers_in_dropped, 1);
                    let bytes = window_bytes(h.settled, h.payload.len() as u64);
                    self.link_settled(link, h.token, bytes, Outcome::Undelivered);
                    continue;
                }
                let seq = h.token;
                let settled = h.settled;
                match self.send_consumed(link, pattern, h.token, h.payload, h.settled) {
                    Sent::Out => {
                        sent += 1;
                        next_seq = Some(seq + 1);
                        // Its ack deadline, stopped while it waited (`hold`), starts now.
                        if let (Some((key, serial)), false) = (&renew, settled) {
                            let sub = self.sub(*serial);
                            self.route(ShardMsg::Extend { key: key.clone(), sub, token: seq, held: false });
                        }
                    }
                    Sent::Waits(h) => {
                        // No room after all (a delivery's frames wait in the session).
                        if let Some(ctx) = self.links.get_mut(&link) {
                            self.held_bytes += held_cost(&h);
                            ctx.held.push_front(h);
                        }
                        shut = true;
                        break;
                    }
                    Sent::Failed => {}
                }
            }
            if let (Some((key, serial)), Some(next_seq)) = (cursor, next_seq) {
                let sub = self.sub(serial);
                self.route(ShardMsg::Consumed { key, sub, next_seq });
            }
            let Some(ctx) = self.links.get_mut(&link) else { continue };
            if !ctx.held.is_empty() {
                if self.engine.link_credit(link) > 0 {
                    // The back of the turns (first again when the window stopped it).
                    ctx.turn = true;
                    let q = self.held_on.entry(channel).or_default();
                    if shut {
                        q.push_front(link);
                    } else {
                        q.push_back(link);
                    }
                }
            } else if pattern == Pattern::EventsStore {
                // Its ring goes on, and completes a drain once it has sent what it can.
                ctx.drain_after_held = false;
                self.pump_ring(link);
            } else if std::mem::take(&mut ctx.drain_after_held) {
                let _ = self.engine.drain_complete(link);
            }
            if shut {
                break;
            }
        }
        if self.held_on.get(&channel).is_some_and(VecDeque::is_empty) {
            self.held_on.remove(&channel);
        }
    }

    /// Complete the drain of `link`, or, while deliveries of it wait for the session
    /// window with credit to spend, once they are out (`retry_held`).
    fn complete_drain(&mut self, link: LinkId) {
        let credit = self.engine.link_credit(link);
        match self.links.get_mut(&link) {
            Some(ctx) if credit > 0 && !ctx.held.is_empty() => ctx.drain_after_held = true,
            _ => {
                let _ = self.engine.drain_complete(link);
            }
        }
    }

    /// Link `link` got credit: back in its session's turns when deliveries of it wait
    /// (they stopped there without credit), and its session's waiting deliveries go.
    fn held_credit(&mut self, link: LinkId) {
        let Some(ctx) = self.links.get_mut(&link) else { return };
        let channel = ctx.channel;
        if !ctx.held.is_empty() && !ctx.turn {
            ctx.turn = true;
            self.held_on.entry(channel).or_default().push_back(link);
        }
        self.retry_held(channel);
    }

    fn on_disposition(&mut self, link: LinkId, delivery_id: u32, settled: bool, state: Option<DeliveryState>) {
        // Settled before it reached a terminal state: the link's default-outcome, when
        // its source set one (3.5.3). Before, such a settlement counted as accepted
        // even with default-outcome released, and the message was deleted.
        let state = match state {
            s if settled && !s.as_ref().is_some_and(DeliveryState::is_outcome) => {
                self.links.get(&link).and_then(|c| c.default_outcome.clone()).or(s)
            }
            s => s,
        };
        let terminal = settled || state.as_ref().is_some_and(DeliveryState::is_outcome);
        if !terminal {
            if let Some(DeliveryState::Received(_)) = state {
                // The consumer is still working on it: renew its ack deadline, once per
                // delivery per batch of input (a range DISPOSITION repeated thousands
                // of times in one read must not become as many messages to the home).
                if let Some(ctx) = self.links.get(&link).filter(|c| c.renews) {
                    if let LinkKind::Consume { key, unsettled, .. } = &ctx.kind {
                        if let Some((token, _)) = unsettled.get(&delivery_id) {
                            if self.renewed.insert((link, delivery_id)) {
                                let (key, token, sub) = (key.clone(), *token, self.sub(ctx.serial));
                                self.route(ShardMsg::Extend { key, sub, token, held: false });
                            }
                        }
                    }
                }
            }
            return;
        }
        let label = match &state {
            Some(DeliveryState::Accepted) | None => 0,
            Some(DeliveryState::Released) => 1,
            Some(DeliveryState::Modified(_)) => 2,
            Some(DeliveryState::Rejected(_)) => 3,
            _ => 1,
        };
        // Counted where it settles a delivery still unsettled here: a repeat of a
        // disposition, or a producer settling its own transfer, is not one (before
        // 2026-12-06 each frame counted, so a range repeated K times counted K times).
        let counter = &self.shard.counters.dispositions[label];
        let outcome = match &state {
            Some(DeliveryState::Accepted) | None => Outcome::Accepted,
            Some(DeliveryState::Rejected(_)) => Outcome::Rejected,
            _ => Outcome::Requeue,
        };
        if !settled {
            // The receiver chose an outcome without settling: we settle it.
            self.engine.disposition(link, delivery_id, true, state.clone());
        }
        let Some(ctx) = self.links.get_mut(&link) else { return };
        let serial = ctx.serial;
        match &mut ctx.kind {
            LinkKind::Consume { key, unsettled, .. } => {
                if let Some((token, bytes)) = unsettled.remove(&delivery_id) {
                    add(counter, 1);
                    // Settled by the consumer: not returned if its link goes before its
                    // later frames have.
                    if ctx.partial.as_ref().is_some_and(|p| p.0 == token) {
                        ctx.partial = None;
                        if self.partial_on.get(&ctx.channel) == Some(&link) {
                            self.partial_on.remove(&ctx.channel);
                        }
                    }
                    if key.pattern == Pattern::EventsStore {
                        // Modified as undeliverable here: this link is the only place
                        // it could go, so it is done with (sent again, it would come
                        // back for ever).
                        let outcome = match &state {
                            Some(DeliveryState::Modified(m)) if m.undeliverable_here == Some(true) => Outcome::Rejected,
                            _ => outcome,
                        };
                        self.store_settled(link, token, outcome);
                        return;
                    }
                    let key = key.clone();
                    let sub = self.sub(serial);
                    self.consumed_settled(key, sub, token, bytes, outcome);
                }
            }
            LinkKind::NodeConsume { node } => {
                let node = node.clone();
                if let Some(n) = self.nodes.get_mut(&*node) {
                    if let Some(p) = n.unsettled.remove(&delivery_id) {
                        add(counter, 1);
                        if outcome == Outcome::Requeue {
                            n.queue.push_back(p);
                        } else {
                            self.node_bytes = self.node_bytes.saturating_sub(p.len() as u64);
                        }
                    }
                }
                self.pump_node(&node);
            }
            LinkKind::Produce { .. } => {}
        }
    }

    /// True while the engine still holds the link (its DETACH answer is pending).
    fn engine_link_open(&self, link: LinkId) -> bool {
        self.engine.link_info(link).is_some()
    }

    fn on_detached(&mut self, link: LinkId) {
        // The engine may hand this id to a new link at once: nothing of the old one's
        // back-off or deferred top-up may stick to it.
        self.backoffs.retain(|b| b.link != link);
        self.deferred_topups.retain(|l| *l != link);
        // Settlements of this turn move a durable cursor before the link lets go.
        self.tell_store_cursors();
        let Some(mut ctx) = self.remove_link(link) else { return };
        self.serials.remove(&ctx.serial);
        // A delivery whose later frames the detach dropped was never written whole: it
        // goes back uncounted (a pre-settled one was never settled with the home).
        let (partial, partial_request) = match ctx.partial.take() {
            Some((token, settled, request)) => (Some(token), request.map(|payload| Held { token, payload, settled })),
            None => (None, None),
        };
        if partial.is_some() && self.partial_on.get(&ctx.channel) == Some(&link) {
            self.partial_on.remove(&ctx.channel);
        }
        let held = std::mem::take(&mut ctx.held);
        self.forget_held(link, ctx.channel, &held);
        let sub = self.sub(ctx.serial);
        match ctx.kind {
            LinkKind::Consume { key, subscribed, ring, stalled, unsettled, .. } => {
                if subscribed {
                    gauge(&self.shard.counters.links_sender, -1);
                }
                // The first event the link was given but never sent: the one waiting
                // for the session window, else the next in its ring.
                let first_held = held.front().filter(|_| key.pattern == Pattern::EventsStore).map(|h| h.token);
                let resume_at = first_held.or_else(|| ring.and_then(|r| r.ring.pop()).map(|(seq, _)| seq));
                // Queue deliveries sent and not settled go back counted; the home
                // returns the link's others (held here, or on their way) uncounted.
                let sent = if key.pattern == Pattern::Queues {
                    unsettled.into_values().map(|(token, _)| token).filter(|t| Some(*t) != partial).collect()
                } else {
                    Vec::new()
                };
                // A durable link's DETACH is answered once the home has released the
                // subscription, so a re-attach right after it finds it free.
                let confirm = ctx.durable && self.engine_link_open(link);
                if confirm {
                    self.detaching.insert(ctx.serial, link);
                }
                // RPC requests never sent go to another responder, after the
                // Unsubscribe (before it, the home could give them to this one again).
                let mut requests = std::mem::take(&mut ctx.requests);
                if matches!(key.pattern, Pattern::Commands | Pattern::Queries) {
                    // The one cut off between its frames first: it was given before
                    // the ones held behind it.
                    requests.extend(partial_request);
                    requests.extend(held);
                }
                let rpc_key = (!requests.is_empty()).then(|| key.clone());
                self.route(ShardMsg::Unsubscribe { key, sub, stalled, resume_at, confirm, sent });
                if let Some(key) = rpc_key {
                    let received_ms = self.epoch_ms;
                    let requests =
                        requests.into_iter().map(|h| (Msg { payload: h.payload, received_ms }, h.token)).collect();
                    self.route(ShardMsg::RpcReturned { key, requests });
                }
            }
            LinkKind::NodeConsume { node } => {
                gauge(&self.shard.counters.links_sender, -1);
                // A dynamic node lives as long as its link.
                self.remove_node(&node);
            }
            LinkKind::Produce { target, .. } => {
                gauge(&self.shard.counters.links_receiver, -1);
                if let ProduceTarget::Node(n) = target {
                    if self.nodes.get(&n).is_some_and(|s| s.link.is_none()) {
                        self.remove_node(&n);
                    }
                }
            }
        }
    }

    // ------------------------------------------------------------ produce

    fn on_delivery(&mut self, d: sluice_proto::engine::Delivery) {
        let link = d.link;
        let Some(ctx) = self.links.get(&link) else { return };
        let LinkKind::Produce { target, window } = &ctx.kind else { return };
        let window = *window;
        // The next event of the turn's batch needs no copy of the target.
        let batched = match target {
            ProduceTarget::Channel(k) if k.pattern == Pattern::Events => {
                self.events_batch.as_ref().is_some_and(|(bk, msgs)| bk == k && msgs.len() < EVENTS_BATCH)
            }
            _ => false,
        };
        let ack = (!d.settled).then(|| PublishAck { link: self.sub(ctx.serial), delivery_id: d.delivery_id });
        if batched && self.identity.is_none() && sluice_proto::types::RawMessage::is_single_data(&d.payload) {
            // The next event of the turn's batch, one data section, no user-id to
            // check: nothing to parse or refuse, the payload joins the batch as it is.
            return self.join_events_batch(link, d.payload, ack, window);
        }
        let target = (!batched).then(|| target.clone());
        // The payload moves into the section index and on into the message: no
        // reference count traffic on the shared read buffer.
        let raw = match message::check(d.payload) {
            Ok(r) => r,
            Err((cond, why)) => {
                self.refuse_message(link, ack, (cond, why.clone()));
                if cond == condition::NOT_IMPLEMENTED {
                    add(&self.shard.counters.errors[2], 1);
                    self.engine.detach(link, Some(Error::new(cond, why)));
                    self.on_detached(link);
                }
                self.top_up(link, window);
                return;
            }
        };
        // properties.user-id must name the authenticated identity (when SASL named one).
        if let Some(identity) = &self.identity {
            let props = match raw.properties() {
                Ok(p) => p.unwrap_or_default(),
                Err(e) => {
                    self.refuse_message(link, ack, (condition::DECODE_ERROR, format!("invalid properties: {e}")));
                    self.top_up(link, window);
                    return;
                }
            };
            if props.user_id.as_deref().is_some_and(|u| u != identity.as_bytes()) {
                let why = "user-id does not match the authenticated identity".to_owned();
                self.refuse_message(link, ack, (condition::UNAUTHORIZED_ACCESS, why));
                self.top_up(link, window);
                return;
            }
        }
        let received_ms = self.epoch_ms;
        let Some(target) = target else {
            return self.join_events_batch(link, raw.into_payload(), ack, window);
        };
        let result = match target {
            ProduceTarget::Channel(key) => self.publish(key, raw, ack),
            ProduceTarget::Responses(id) => {
                self.rpc_response(&id, Msg { payload: raw.into_payload(), received_ms }, ack)
            }
            ProduceTarget::Node(n) => self.send_to_node(n, Msg { payload: raw.into_payload(), received_ms }, ack),
            ProduceTarget::Anonymous => {
                let to = match raw.properties() {
                    Ok(p) => Ok(p.and_then(|p| p.to)),
                    Err(e) => Err((condition::DECODE_ERROR, format!("invalid properties: {e}"))),
                };
                match to {
                    Err(refusal) => Err(refusal),
                    Ok(to) => match to {
                        None => Err((condition::PRECONDITION_FAILED, "message has no 'to' address".to_owned())),
                        Some(to) => {
                            match address::resolve(&to, jms_dest_hint(&raw, &to), self.settings().default_pattern) {
                                Ok(Node::Channel(key)) if !self.authorized_message(&key) => {
                                    Err((condition::UNAUTHORIZED_ACCESS, format!("not authorized for {}", key.name)))
                                }
                                Ok(Node::Channel(key)) => self.publish(key, raw, ack),
                                Ok(Node::Responses(id)) => {
                                    self.rpc_response(&id, Msg { payload: raw.into_payload(), received_ms }, ack)
                                }
                                Ok(Node::Dynamic(n)) => {
                                    self.send_to_node(n, Msg { payload: raw.into_payload(), received_ms }, ack)
                                }
                                Err(why) => {
                                    Err((condition::PRECONDITION_FAILED, format!("invalid 'to' address: {why}")))
                                }
                            }
                        }
                    },
                }
            }
        };
        if let Err(refusal) = result {
            self.refuse_message(link, ack, refusal);
        }
        self.top_up(link, window);
    }

    /// An event for the channel of the batch being built: what `publish` does for
    /// events, without looking the channel up again.
    fn join_events_batch(&mut self, link: LinkId, payload: Bytes, ack: Option<PublishAck>, window: u32) {
        add(&self.shard.counters.transfers_in[pattern_index(Pattern::Events)], 1);
        let msg = Msg { payload, received_ms: self.epoch_ms };
        match &mut self.events_batch {
            Some((_, msgs)) if msgs.len() < EVENTS_BATCH => msgs.push(msg),
            _ => {
                if let Some(LinkKind::Produce { target: ProduceTarget::Channel(k), .. }) =
                    self.links.get(&link).map(|c| &c.kind)
                {
                    let key = k.clone();
                    self.batch_event(key, msg);
                }
            }
        }
        self.accept(ack);
        self.top_up(link, window);
    }

    /// Produce links get their full window back when credit falls below half,
    /// unless the ring towards the channel's home shard is backed up: then the
    /// top-up waits, and the producer's credit is what pushes back.
    fn top_up(&mut self, link: LinkId, window: u32) {
        // Below half: credit * 2 < window (window / 2 rounds down, and with a window of
        // 1 no credit ever came back after the first message).
        let credit = u64::from(self.engine.link_credit(link));
        if credit * 2 >= u64::from(window) || self.backoffs.iter().any(|b| b.link == link) {
            return;
        }
        // `routed`: what the link takes may go to another shard (a channel, whatever
        // the anonymous terminus and responses are addressed to, another connection's
        // dynamic node); a dynamic node of this connection stays here.
        let (home, durable, routed) = match self.links.get(&link).map(|c| &c.kind) {
            Some(LinkKind::Produce { target: ProduceTarget::Node(n), .. }) => {
                (None, false, !self.nodes.contains_key(n))
            }
            Some(LinkKind::Produce { target: ProduceTarget::Channel(k), .. }) => {
                (Some(k.home(self.shard.shards)), matches!(k.pattern, Pattern::Queues | Pattern::EventsStore), true)
            }
            Some(LinkKind::Produce { target: ProduceTarget::Anonymous | ProduceTarget::Responses(_), .. }) => {
                (None, false, true)
            }
            _ => (None, false, false),
        };
        // No credit for durable channels while the store cannot write.
        let store_down = durable
            && home.is_some_and(|h| {
                self.shard.global.store_ok.get(h).is_some_and(|ok| !ok.load(std::sync::atomic::Ordering::Relaxed))
            });
        if store_down || (routed && self.shard.any_backlogged()) {
            if !self.deferred_topups.contains(&link) {
                self.deferred_topups.push(link);
            }
            return;
        }
        let _ = self.engine.grant_credit(link, window, false);
    }

    /// A publish on `link` was refused for a limit of its channel: its producer gets
    /// no more credit for [`LIMIT_BACKOFF_MS`], then one credit at a time until a
    /// publish is accepted. Links of the anonymous terminus route per message and are
    /// not backed off.
    fn back_off(&mut self, link: LinkId, delivery_id: u32) {
        let Some(LinkKind::Produce { target: ProduceTarget::Channel(_), .. }) = self.links.get(&link).map(|c| &c.kind)
        else {
            return;
        };
        let now = self.now();
        let probe_at = now + LIMIT_BACKOFF_MS;
        match self.backoffs.iter_mut().find(|b| b.link == link) {
            Some(b) => {
                b.probe_at = probe_at;
                b.refused_at = now;
                if serial_after(delivery_id, b.refused_id) {
                    b.refused_id = delivery_id;
                }
            }
            None => self.backoffs.push(Backoff { link, probe_at, refused_at: now, refused_id: delivery_id }),
        }
    }

    /// A publish on `link` was accepted: a back-off is over when that publish was
    /// sent after the last refused one (an accept for an earlier message can arrive
    /// later, after its group commit).
    fn back_on(&mut self, link: LinkId, delivery_id: u32) {
        let Some(i) = self.backoffs.iter().position(|b| b.link == link && serial_after(delivery_id, b.refused_id))
        else {
            return;
        };
        self.backoffs.swap_remove(i);
        self.top_up_produce(link);
    }

    /// [`Self::top_up`] with the link's own window (nothing for a link that is gone).
    fn top_up_produce(&mut self, link: LinkId) {
        if let Some(LinkKind::Produce { window, .. }) = self.links.get(&link).map(|c| &c.kind) {
            let window = *window;
            self.top_up(link, window);
        }
    }

    fn retry_backoffs(&mut self, now: u64) {
        if self.backoffs.is_empty() {
            return;
        }
        let mut over = Vec::new();
        let links = &self.links;
        self.backoffs.retain(|b| {
            let forgotten = now >= b.refused_at + LIMIT_BACKOFF_FORGET_MS;
            if forgotten {
                over.push(b.link);
            }
            links.contains_key(&b.link) && !forgotten
        });
        for b in &mut self.backoffs {
            if now >= b.probe_at {
                b.probe_at = now + LIMIT_BACKOFF_MS;
                if self.engine.link_credit(b.link) == 0 {
                    let _ = self.engine.grant_credit(b.link, 1, false);
                }
            }
        }
        for link in over {
            self.top_up_produce(link);
        }
    }

    fn retry_topups(&mut self) {
        for link in std::mem::take(&mut self.deferred_topups) {
            self.top_up_produce(link);
        }
    }

    fn refuse_message(&mut self, link: LinkId, ack: Option<PublishAck>, (cond, why): Refusal) {
        match ack {
            Some(a) => {
                let state = DeliveryState::Rejected(Box::new(sluice_proto::types::Rejected {
                    error: Some(Error::new(cond, why)),
                }));
                self.engine.disposition(link, a.delivery_id, true, Some(state));
            }
            None => add(&self.shard.counters.transfers_in_dropped, 1),
        }
    }

    fn accept(&mut self, ack: Option<PublishAck>) {
        if let Some(a) = ack {
            if let Some(&link) = self.serials.get(&a.link.link) {
                self.engine.disposition(link, a.delivery_id, true, Some(DeliveryState::Accepted));
            }
        }
    }

    fn publish(
        &mut self,
        key: ChannelKey,
        raw: sluice_proto::types::RawMessage,
        ack: Option<PublishAck>,
    ) -> Result<(), Refusal> {
        add(&self.shard.counters.transfers_in[pattern_index(key.pattern)], 1);
        if let Pattern::Commands | Pattern::Queries = key.pattern {
            return self.rpc_request(key, raw, ack);
        }
        let msg = Msg { payload: raw.into_payload(), received_ms: self.epoch_ms };
        match key.pattern {
            // Requests went to `rpc_request` above.
            Pattern::Commands | Pattern::Queries => Ok(()),
            Pattern::Events => {
                // Fan-out is at-most-once: accepted as soon as it is routed (with
                // the turn's batch).
                self.batch_event(key, msg);
                self.accept(ack);
                Ok(())
            }
            Pattern::Queues | Pattern::EventsStore => {
                // accepted only once the home has stored it.
                self.route(ShardMsg::Publish { key, msg, ack });
                Ok(())
            }
        }
    }

    /// The shard and connection of another connection's dynamic node (its address
    /// names them: `_amqp10.tmp.<shard>-<conn>.<uuid>`); None for this connection's,
    /// or an address that names no connection of this broker.
    fn node_owner(&self, node: &str) -> Option<(u16, u64)> {
        let (shard, conn) = address::dynamic_node_owner(node)?;
        let mine = shard == self.shard.id && conn == self.id;
        ((shard as usize) < self.shard.shards && !mine).then_some((shard, conn))
    }

    /// A message for a dynamic node: this connection's, or another's (routed to it,
    /// answered there). Copied: a message kept in a node must not pin the read it
    /// came in.
    fn send_to_node(&mut self, node: String, msg: Msg, ack: Option<PublishAck>) -> Result<(), Refusal> {
        if self.nodes.contains_key(&node) {
            return self.deliver_to_node(&node, msg.owned(), ack);
        }
        match self.node_owner(&node) {
            Some((shard, conn)) => {
                self.route(ShardMsg::NodeMessage { shard, conn, node: node.into(), msg: msg.owned(), ack });
                Ok(())
            }
            None => Err(refusal(PublishRefusal::NodeUnreachable)),
        }
    }

    fn deliver_to_node(&mut self, node: &str, msg: Msg, ack: Option<PublishAck>) -> Result<(), Refusal> {
        self.enqueue_node(node, msg, false).map_err(refusal)?;
        self.accept(ack);
        Ok(())
    }

    /// `forced`: past the node's bounds (a command's timeout answer: small, and at most
    /// one per pending request, so bounded by the pending limit).
    fn enqueue_node(&mut self, node: &str, msg: Msg, forced: bool) -> Result<(), PublishRefusal> {
        let Some(n) = self.nodes.get_mut(node) else { return Err(PublishRefusal::NodeUnreachable) };
        let len = msg.payload.len() as u64;
        let over_bytes = self.node_bytes > 0 && self.node_bytes.saturating_add(len) > NODE_BYTES_MAX;
        if !forced && (n.queue.len() >= NODE_QUEUE_MAX || over_bytes) {
            return Err(PublishRefusal::NodeFull);
        }
        self.node_bytes += len;
        n.queue.push_back(msg.payload);
        self.pump_node(node);
        Ok(())
    }

    /// A message another connection sent to one of this connection's nodes; its
    /// outcome goes back to the producer's connection.
    fn on_node_message(&mut self, node: &str, msg: Msg, ack: Option<PublishAck>) {
        // A closing connection sends nothing more: accepted, it would be lost.
        let result = if self.engine.is_open() {
            self.enqueue_node(node, msg, false)
        } else {
            Err(PublishRefusal::NodeUnreachable)
        };
        match ack {
            Some(ack) => self.route(ShardMsg::PublishDone { ack, result }),
            None if result.is_err() => add(&self.shard.counters.transfers_in_dropped, 1),
            None => {}
        }
    }

    /// A dynamic node goes (its link detached): what it held is given back.
    fn remove_node(&mut self, node: &str) {
        if let Some(n) = self.nodes.remove(node) {
            self.node_bytes = self.node_bytes.saturating_sub(n.bytes());
        }
    }

    fn pump_node(&mut self, node: &str) {
        let Some(n) = self.nodes.get_mut(node) else { return };
        let Some(link) = n.link else { return };
        // Unsettled deliveries are kept (for a requeue): at most the link window.
        let window = self.shard.global.settings.effective_max_unsettled() as usize;
        while self.engine.link_credit(link) > 0 && n.unsettled.len() < window {
            let Some(p) = n.queue.pop_front() else { break };
            let tag = DeliveryTag::from_u64(self.next_request);
            self.next_request += 1;
            match self.engine.send_ref(link, tag, &p, false) {
                Ok(id) => {
                    n.unsettled.insert(id, p);
                }
                Err(_) => {
                    n.queue.push_front(p);
                    break;
                }
            }
        }
    }

    // ------------------------------------------------------------ RPC

    fn rpc_request(
        &mut self,
        key: ChannelKey,
        raw: sluice_proto::types::RawMessage,
        ack: Option<PublishAck>,
    ) -> Result<(), Refusal> {
        // Ids that hold other values are refused undecoded (they cost 40 times their
        // size decoded, and the correlation is kept until the response).
        let mut props = match raw.properties() {
            Ok(p) => p.unwrap_or_default(),
            Err(e) => return Err((condition::DECODE_ERROR, format!("invalid properties: {e}"))),
        };
        let Some(mut node) = props.reply_to.take() else {
            return Err((condition::NOT_ALLOWED, "request missing reply-to".into()));
        };
        // As the client wrote it: `/` first, or a URL (address::node_path).
        if let Ok(path) = address::node_path(&node) {
            if path.len() != node.len() {
                node = path.to_owned();
            }
        }
        if !self.nodes.contains_key(&node) {
            return Err((condition::NOT_ALLOWED, "reply-to is not a node this connection owns".into()));
        }
        if self.pending.len() >= self.settings().rpc_max_pending as usize {
            return Err((condition::RESOURCE_LIMIT_EXCEEDED, "rpc pending limit reached".into()));
        }
        // A reply node already full takes no new requests: the timeout answers that go
        // into it past its bounds are then at most one per pending request.
        if self.nodes.get(&node).is_some_and(|n| n.queue.len() >= NODE_QUEUE_MAX) || self.node_bytes >= NODE_BYTES_MAX {
            return Err((condition::RESOURCE_LIMIT_EXCEEDED, "reply node is full".into()));
        }
        let default_ms = self.settings().default_rpc_timeout_seconds as u64 * 1000;
        let timeout = match message::header(&raw).ttl {
            Some(ttl) => (ttl as u64).clamp(1000, default_ms * 10),
            None => default_ms,
        };
        let nonce = self.shard.random_u64();
        let seq = self.next_request;
        self.next_request += 1;
        // "/responses/<shard>.<conn>.<seq>.<nonce>": the request id is the tail.
        let mut reply_to = String::with_capacity(64);
        let _ = write!(reply_to, "/responses/{}.{}.{seq}.{nonce:016x}", self.shard.id, self.id);
        let request_id = reply_to["/responses/".len()..].to_owned();
        let correlation = props.correlation_id.take().or_else(|| props.message_id.clone());
        // Kept until the response or the deadline: bounded, so the pending limit bounds
        // the memory too (before 2026-12-06 an id could take the whole message size, and
        // 512 pending requests of 100 MiB ids 50 GiB).
        let id_len = match &correlation {
            Some(Value::String(s)) => s.len(),
            Some(Value::Binary(b)) => b.len(),
            Some(Value::Symbol(s)) => s.as_str().len(),
            _ => 0,
        };
        if id_len > RPC_ID_MAX {
            return Err((
                condition::INVALID_FIELD,
                format!("correlation-id (or message-id) longer than {RPC_ID_MAX} bytes"),
            ));
        }
        let rewritten =
            Properties { reply_to: Some(reply_to), correlation_id: Some(Value::String(request_id)), ..props };
        let payload = message::rebuild(&raw, &rewritten, &[], true);
        let now = self.epoch_ms;
        let deadline = self.steady + timeout;
        let idx = if key.pattern == Pattern::Commands { 0 } else { 1 };
        add(&self.shard.counters.rpc_requests[idx], 1);
        self.pending.insert(seq, PendingRpc { node, correlation, pattern: key.pattern, nonce });
        self.deadlines.push(Reverse((deadline, seq)));
        compact_deadlines(&mut self.deadlines, &self.pending);
        self.route(ShardMsg::RpcRequest { key, msg: Msg { payload, received_ms: now }, deadline_ms: deadline });
        self.accept(ack);
        Ok(())
    }

    /// A responder's reply: routed to the connection that holds the request.
    fn rpc_response(&mut self, request_id: &str, msg: Msg, ack: Option<PublishAck>) -> Result<(), Refusal> {
        match parse_request_id(request_id) {
            Some((shard, conn, seq, nonce)) if (shard as usize) < self.shard.shards => {
                self.route(ShardMsg::RpcResponse { shard, conn, seq, nonce, msg });
            }
            _ => add(&self.shard.counters.rpc_late_responses, 1),
        }
        self.accept(ack);
        Ok(())
    }

    fn on_rpc_response(&mut self, seq: u64, nonce: u64, msg: Msg) {
        let p = match self.pending.entry(seq) {
            std::collections::hash_map::Entry::Occupied(e) if e.get().nonce == nonce => e.remove(),
            _ => {
                add(&self.shard.counters.rpc_late_responses, 1);
                return;
            }
        };
        let Ok(raw) = sluice_proto::types::RawMessage::parse(&msg.payload) else { return };
        let executed_flag = message::app_property(&raw, "x-opt-kubemq-executed");
        let error = message::app_property(&raw, "x-opt-kubemq-error")
            .and_then(|v| v.as_str().map(str::to_owned))
            .filter(|e| !e.is_empty());
        let executed = !matches!(executed_flag, Some(Value::Bool(false))) && error.is_none();
        let props = message::properties(&raw);
        let reply_props =
            Properties { correlation_id: p.correlation.clone(), to: Some(p.node.clone()), reply_to: None, ..props };
        let payload = match p.pattern {
            Pattern::Commands => match error {
                Some(e) => message::rebuild(
                    &raw,
                    &reply_props,
                    &[("x-opt-kubemq-executed", Value::Bool(executed)), ("x-opt-kubemq-error", Value::String(e))],
                    true,
                ),
                None => message::rebuild(&raw, &reply_props, &[("x-opt-kubemq-executed", Value::Bool(executed))], true),
            },
            _ => {
                if !executed {
                    // Queries answer only on success.
                    return;
                }
                message::rebuild(&raw, &reply_props, &[], true)
            }
        };
        match self.enqueue_node(&p.node, Msg { payload, received_ms: self.epoch_ms }, false) {
            Ok(()) => {}
            // No room in the reply node: a command's requester is answered at its
            // deadline instead (executed=false, timeout), so it gets an answer all the
            // same. Before 2026-12-06 the request was forgotten here and got none.
            Err(PublishRefusal::NodeFull) if p.pattern == Pattern::Commands => {
                add(&self.shard.counters.transfers_in_dropped, 1);
                self.pending.insert(seq, p);
            }
            Err(_) => add(&self.shard.counters.transfers_in_dropped, 1),
        }
    }

    fn expire_rpc(&mut self) {
        // The turn's steady clock (read just before this is called).
        let now = self.steady;
        while let Some(Reverse((t, _))) = self.deadlines.peek() {
            if *t > now {
                break;
            }
            let Some(Reverse((_, id))) = self.deadlines.pop() else { break };
            let Some(p) = self.pending.remove(&id) else { continue };
            if p.pattern == Pattern::Commands {
                // Commands always answer: executed=false on timeout.
                let props = Properties {
                    correlation_id: p.correlation.clone(),
                    to: Some(p.node.clone()),
                    ..Default::default()
                };
                let empty = sluice_proto::types::RawMessage::default();
                let payload = message::rebuild(
                    &empty,
                    &props,
                    &[
                        ("x-opt-kubemq-executed", Value::Bool(false)),
                        ("x-opt-kubemq-error", Value::String("timeout".into())),
                    ],
                    false,
                );
                // Past the node's bounds if need be: the requester's only answer.
                let _ = self.enqueue_node(&p.node, Msg { payload, received_ms: self.epoch_ms }, true);
            }
        }
    }

    // ------------------------------------------------------------ messages from homes

    fn on_message(&mut self, m: ShardMsg) {
        match m {
            ShardMsg::PublishDone { ack, result } => {
                let Some(&link) = self.serials.get(&ack.link.link) else { return };
                match result {
                    Ok(()) => {
                        self.back_on(link, ack.delivery_id);
                        self.engine.disposition(link, ack.delivery_id, true, Some(DeliveryState::Accepted));
                    }
                    Err(why) => {
                        if why.backs_off() {
                            self.back_off(link, ack.delivery_id);
                        }
                        self.refuse_message(link, Some(ack), refusal(why));
                    }
                }
            }
            ShardMsg::SubscribeDone { sub, result } => self.on_subscribed(sub.link, result),
            ShardMsg::UnsubscribeDone { sub } => {
                if let Some(link) = self.detaching.remove(&sub.link) {
                    self.engine.complete_detach(link);
                }
            }
            ShardMsg::Deliver { sub, token, msg, receive_count, settled } => {
                self.on_deliver(sub.link, token, msg, receive_count, settled)
            }
            ShardMsg::DeliverRequest { sub, key, msg, deadline_ms, settled } => {
                if self.serials.contains_key(&sub.link) {
                    // An RPC request's delivery token is its deadline (it goes back
                    // with it if it cannot be sent, `on_detached`).
                    self.on_deliver(sub.link, deadline_ms, msg, 0, settled);
                } else {
                    // The link went while it was on its way: another responder.
                    self.route(ShardMsg::request_returned(key, msg, deadline_ms));
                }
            }
            ShardMsg::DeliverBatch { sub, msgs } => self.on_deliver_events(sub.link, msgs),
            ShardMsg::DrainDone { sub, seq } => {
                if let Some(&link) = self.serials.get(&sub.link) {
                    // Only the drain last asked for: a FLOW since took it back (or asked
                    // again, and that one is answered by its own DrainDone). Completing
                    // it anyway spent credit the peer gave after it.
                    if self.links.get(&link).is_none_or(|c| c.credit_seq != seq) {
                        return;
                    }
                    if let Some(ch) = self.links.get(&link).filter(|c| !c.held.is_empty()).map(|c| c.channel) {
                        // Deliveries still wait for the session window; they go first.
                        self.retry_held(ch);
                    }
                    self.complete_drain(link);
                }
            }
            ShardMsg::RingReady { sub } => {
                if let Some(&link) = self.serials.get(&sub.link) {
                    self.pump_ring(link);
                }
            }
            ShardMsg::RingFull { sub } => {
                let Some(&link) = self.serials.get(&sub.link) else { return };
                self.pump_ring(link);
                if self.engine.link_credit(link) == 0 {
                    self.stall(link);
                }
            }
            ShardMsg::RpcResponse { seq, nonce, msg, .. } => self.on_rpc_response(seq, nonce, msg),
            ShardMsg::NodeMessage { node, msg, ack, .. } => self.on_node_message(&node, msg, ack),
            ShardMsg::Shutdown { .. } => {
                self.shutting_down = true;
                self.engine.close(Some(Error::new(condition::CONNECTION_FORCED, "broker shutting down")));
            }
            // Given up in its handshake: dropped, or, when its OPEN came in this very
            // turn, closed as a connection over the limit is (its place is taken).
            ShardMsg::Evict { .. } => {
                if self.engine.remote_open().is_none() {
                    self.evicted = true;
                } else {
                    self.count_error(Scope::Connection);
                    let e = Error::new(condition::RESOURCE_LIMIT_EXCEEDED, "connection limit reached");
                    self.engine.close(Some(e));
                }
            }
            _ => {}
        }
    }

    /// The events-store window filled while the consumer gave no credit: the link
    /// is detached, the window is lost and counted.
    fn stall(&mut self, link: LinkId) {
        let Some(ctx) = self.links.get_mut(&link) else { return };
        let LinkKind::Consume { ring: Some(ring), stalled, .. } = &mut ctx.kind else { return };
        *stalled = true;
        let lost = ring.ring.len() as u64 + 1;
        while ring.ring.pop().is_some() {}
        add(&self.shard.counters.events_store_dropped_stalled, lost);
        add(&self.shard.counters.errors[2], 1);
        self.engine.detach(link, Some(Error::new(condition::RESOURCE_LIMIT_EXCEEDED, "credit stalled")));
        // The engine reports our own error detach as an event; on_detached cleans up.
        self.handle_events();
    }

    // ------------------------------------------------------------ registry and teardown

    /// Publish this connection's details for the admin API: at most four times a
    /// second, or when links come and go, so the hot path does not pay for it. A
    /// refresh copies every link's details, so while links come and go it runs at
    /// most every 20 ms (a timer catches the last change), not once per ATTACH.
    fn refresh_registry(&mut self) {
        let count = (self.sessions.len(), self.links.len(), self.nodes.len());
        let since = self.registry_at.elapsed();
        if count == self.registry_count && since < Duration::from_millis(250) {
            return;
        }
        const MIN_GAP: Duration = Duration::from_millis(20);
        // A new connection (marked by usize::MAX) is published at once.
        if since < MIN_GAP && self.registry_count.0 != usize::MAX {
            if self.registry_due.is_none() {
                self.registry_due = Some(self.now() + (MIN_GAP - since).as_millis() as u64 + 1);
            }
            return;
        }
        // Not listed before its OPEN; and still new then, so that the OPEN publishes it at
        // once (the SASL exchange before it changes no count).
        if self.info.container_id.is_empty() && !self.engine.is_open() {
            return;
        }
        self.registry_due = None;
        self.registry_count = count;
        self.registry_at = Instant::now();
        let mut reg = self.shard.registry.borrow_mut();
        self.info.sessions = self.sessions.len() as i64;
        self.info.links = self.links.len() as i64;
        self.info.dynamic_nodes = self.nodes.len() as i64;
        reg.connections.insert(self.id, self.info.clone());
        let mut infos = Vec::with_capacity(self.links.len());
        let now = Instant::now();
        for (link, ctx) in self.links.iter_mut() {
            if ctx.role == Role::Sender {
                let credit = self.engine.link_credit(*link);
                match (credit, ctx.zero_since) {
                    (0, None) => ctx.zero_since = Some(now),
                    (c, Some(t)) if c > 0 => {
                        ctx.zero_total += now.duration_since(t);
                        ctx.zero_since = None;
                    }
                    _ => {}
                }
            }
        }
        for (link, ctx) in self.links.iter() {
            let zero = ctx.zero_total + ctx.zero_since.map_or(Duration::ZERO, |t| now.duration_since(t));
            let unsettled = match &ctx.kind {
                LinkKind::Consume { unsettled, .. } => unsettled.len() as i64,
                LinkKind::NodeConsume { node } => self.nodes.get(&**node).map_or(0, |n| n.unsettled.len() as i64),
                LinkKind::Produce { .. } => 0,
            };
            infos.push(LinkInfo {
                client_id: self.info.client_id.clone(),
                connection: self.info.id.clone(),
                name: ctx.name.clone(),
                role: if ctx.role == Role::Sender { "sender" } else { "receiver" }.into(),
                address: ctx.address.clone(),
                pattern: ctx.pattern.clone(),
                channel: ctx.chan.clone(),
                credit: self.engine.link_credit(*link) as i64,
                unsettled,
                durable: ctx.durable,
                dynamic: ctx.dynamic,
                zero_credit_seconds: if ctx.role == Role::Sender { zero.as_secs_f64() } else { 0.0 },
            });
        }
        reg.links.insert(self.id, infos);
    }

    fn teardown(&mut self) {
        self.flush_events();
        // Every link goes: none needs taking out of the session turns one by one.
        self.held_on.clear();
        let links: Vec<LinkId> = self.links.keys().copied().collect();
        for l in links {
            self.on_detached(l);
        }
        let c = &self.shard.counters;
        gauge(&c.sessions, -(self.sessions.len() as i64));
        gauge(&c.connections, -1);
        let mut reg = self.shard.registry.borrow_mut();
        reg.connections.remove(&self.id);
        reg.links.remove(&self.id);
    }
}

// ---------------------------------------------------------------- helpers

fn t_caps(t: &Option<Target>) -> Option<&sluice_proto::codec::Symbols> {
    t.as_ref().and_then(|t| t.capabilities.as_ref())
}

/// The JMS capability hint of a terminus: `queue` or `topic`.
fn jms_hint(caps: Option<&sluice_proto::codec::Symbols>) -> Option<&'static str> {
    let caps = caps?;
    if caps.contains("queue") {
        Some("queue")
    } else if caps.contains("topic") {
        Some("topic")
    } else {
        None
    }
}

/// For a bare `to` on the anonymous terminus: the JMS destination type the message
/// names in its `x-opt-jms-dest` annotation (set by Qpid JMS: 0 queue, 1 topic, 2
/// temporary queue, 3 temporary topic) as the terminus capability hint a sender attached
/// to that address would give (`queue` → queues, `topic` → events). Not read for other
/// addresses: their prefix says.
fn jms_dest_hint(raw: &sluice_proto::types::RawMessage, to: &str) -> Option<&'static str> {
    let bare = address::node_path(to).ok()?;
    if bare.contains('/') || bare.starts_with(address::DYNAMIC_PREFIX) {
        return None;
    }
    let annotations = raw.message_annotations().ok()??;
    let (_, kind) = annotations.iter().find(|(k, _)| k.as_str() == Some("x-opt-jms-dest"))?;
    match kind {
        Value::Byte(0 | 2) | Value::Ubyte(0 | 2) => Some("queue"),
        Value::Byte(1 | 3) | Value::Ubyte(1 | 3) => Some("topic"),
        _ => None,
    }
}

fn has_selector(f: &Fields) -> bool {
    selector_text(f).is_some()
}

/// The selector string of a source filter: the value under one of the selector
/// keys, described or plain. An empty or blank one is no selector (as in JMS); one that
/// is not a string is an error (before 2026-12-06 it was skipped, so the link was
/// attached without the filter its peer asked for, and the filter echoed back as if set).
fn selector_text(f: &Fields) -> Option<Result<String, &'static str>> {
    for (k, v) in &f.0 {
        let by_key = SELECTOR_KEYS.contains(&k.as_str());
        let inner = match v {
            Value::Described(d) => {
                let by_desc = matches!(&d.descriptor, sluice_proto::codec::Descriptor::Code(0x0000_468C_0000_0004))
                    || matches!(&d.descriptor, sluice_proto::codec::Descriptor::Symbol(s) if s.as_str() == "apache.org:selector-filter:string");
                if !(by_key || by_desc) {
                    continue;
                }
                &d.value
            }
            other if by_key => other,
            _ => continue,
        };
        match inner.as_str() {
            Some(s) if s.trim().is_empty() => {}
            Some(s) => return Some(Ok(s.to_owned())),
            None => return Some(Err("selector filter value is not a string")),
        }
    }
    None
}

/// An unsigned integer link property of any integer type.
fn value_u64(v: &Value) -> Option<u64> {
    match v {
        Value::Ubyte(x) => Some(*x as u64),
        Value::Ushort(x) => Some(*x as u64),
        Value::Uint(x) => Some(*x as u64),
        Value::Ulong(x) => Some(*x),
        Value::Byte(x) => u64::try_from(*x).ok(),
        Value::Short(x) => u64::try_from(*x).ok(),
        Value::Int(x) => u64::try_from(*x).ok(),
        Value::Long(x) => u64::try_from(*x).ok(),
        Value::String(s) => s.parse().ok(),
        _ => None,
    }
}

/// Parse `x-opt-kubemq-start`.
fn parse_start(v: &Value) -> Result<StartPos, String> {
    let s = v.as_str().ok_or_else(|| "x-opt-kubemq-start must be a string".to_owned())?;
    let bad = || format!("invalid x-opt-kubemq-start: {}", truncate(s, 64));
    Ok(match s {
        "" | "new-only" => StartPos::NewOnly,
        "first" => StartPos::First,
        "last" => StartPos::Last,
        _ => {
            if let Some(n) = s.strip_prefix("sequence:") {
                StartPos::Sequence(n.parse::<u64>().map_err(|_| bad())?)
            } else if let Some(t) = s.strip_prefix("time:") {
                let ms = match time::OffsetDateTime::parse(t, &time::format_description::well_known::Rfc3339) {
                    Ok(dt) => (dt.unix_timestamp_nanos() / 1_000_000).max(0) as u64,
                    Err(_) => t.parse::<u64>().map_err(|_| bad())?.saturating_mul(1000),
                };
                StartPos::Time(ms)
            } else if let Some(d) = s.strip_prefix("time-delta:") {
                let secs = d.parse::<u64>().map_err(|_| bad())?;
                StartPos::Time(wall_ms().saturating_sub(secs.saturating_mul(1000)))
            } else {
                return Err(bad());
            }
        }
    })
}

fn truncate(s: &str, n: usize) -> &str {
    match s.char_indices().nth(n) {
        Some((i, _)) => &s[..i],
        None => s,
    }
}

/// Characters outside `[A-Za-z0-9_-]` become `_`; at most `max` characters.
fn sanitize(s: &str, max: usize) -> String {
    s.chars().take(max).map(|c| if c.is_ascii_alphanumeric() || c == '_' || c == '-' { c } else { '_' }).collect()
}

/// Durable subscription identity: container-id (`sanitized`, as the connection shows
/// it) and link name, sanitized, plus a 64-bit hash of the raw pair (`container_hash`:
/// the hash of the raw container-id and `|`), so that names that differ only in the
/// characters sanitizing replaces, or past its length, are different subscriptions.
pub(crate) fn durable_identity(sanitized: &str, container_hash: u64, link_name: &str) -> String {
    let h = address::fnv1a64(container_hash, link_name.as_bytes());
    format!("{}_{}_{h:016x}", sanitize(sanitized, 40), sanitize(link_name, 40))
}

/// The identity sluice gave a durable subscription before 2026-12-04: its 32-bit hash
/// was taken over the sanitized container-id, so "orders.eu" and "orders_eu" were one
/// subscription. A cursor kept under it is taken over, once, by the first subscription
/// that attaches with the new identity (`StoreChan::subscribe`).
pub(crate) fn legacy_durable_identity(sanitized: &str, link_name: &str) -> String {
    let h = address::fnv1a(0x811c_9dc5, format!("{sanitized}|{link_name}").as_bytes());
    format!("{}_{}_{h:08x}", sanitize(sanitized, 40), sanitize(link_name, 40))
}

/// A publish refusal as the (condition, description) a message is rejected with.
fn refusal(why: PublishRefusal) -> Refusal {
    (why.condition(), why.description().to_owned())
}

/// Drop the deadlines of requests already answered once they outnumber the pending
/// ones by far: the heap then follows the requests in flight (bounded by
/// `CONNECTORS_AMQP10_RPC_MAX_PENDING`), not the request rate times the timeout.
/// Amortised O(1) per request: a compaction at least halves the heap.
fn compact_deadlines<V>(deadlines: &mut BinaryHeap<Reverse<(u64, u64)>>, pending: &HashMap<u64, V>) {
    if deadlines.len() > 2 * pending.len() + 1024 {
        deadlines.retain(|Reverse((_, id))| pending.contains_key(id));
    }
}

#[cfg(test)]
mod deadline_tests {
    use super::*;

    /// 100,000 answered requests with long timeouts leave a heap the size of what is
    /// still pending (plus the slack), and no pending request loses its deadline.
    #[test]
    fn answered_requests_do_not_keep_their_deadlines() {
        let mut heap = BinaryHeap::new();
        let mut pending: HashMap<u64, ()> = HashMap::default();
        for seq in 0..100_000u64 {
            pending.insert(seq, ());
            heap.push(Reverse((1_000_000 + seq, seq)));
            compact_deadlines(&mut heap, &pending);
            // Every request but one in a hundred is answered at once.
            if seq % 100 != 0 {
                pending.remove(&seq);
            }
            assert!(heap.len() <= 2 * (pending.len() + 1) + 1025, "heap {} for {} pending", heap.len(), pending.len());
        }
        assert_eq!(pending.len(), 1000);
        compact_deadlines(&mut heap, &pending);
        let live: std::collections::HashSet<u64> = heap.iter().map(|Reverse((_, id))| *id).collect();
        assert!(pending.keys().all(|id| live.contains(id)));
    }
}
