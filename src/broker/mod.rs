//! The messaging patterns. Every channel lives on its home shard ([`home::Home`]);
//! links live on the shard of their connection. The two talk only through
//! [`ShardMsg`]s routed by the shard router.

pub mod address;
pub mod directory;
pub mod home;
pub mod message;
pub mod selector;

use crate::config::Pattern;
use address::ChannelKey;
use bytes::Bytes;
use crossbeam_queue::ArrayQueue;
use selector::Selector;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

/// A link endpoint anywhere in the process: its shard, connection and link serial.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SubRef {
    /// Shard of the connection.
    pub shard: u16,
    /// Connection id within that shard.
    pub conn: u64,
    /// Link serial within that connection.
    pub link: u64,
}

/// Where the outcome of an unsettled publish goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PublishAck {
    /// The producing link.
    pub link: SubRef,
    /// Its delivery-id.
    pub delivery_id: u32,
}

/// A stored or in-flight message: the bare message bytes as the producer sent them.
#[derive(Debug, Clone)]
pub struct Msg {
    /// Encoded message (all sections).
    pub payload: Bytes,
    /// When the broker received it (ms since the Unix epoch).
    pub received_ms: u64,
}

impl Msg {
    /// The same message with a payload of its own. A payload straight off the wire is
    /// a slice of its connection's read buffer and keeps the whole buffer alive (up
    /// to twice the 256 KiB read): a message kept for long (queued, logged, waiting
    /// for a responder) gets its own copy, so the memory it holds is its own size,
    /// whatever else came in the same read.
    pub fn owned(self) -> Msg {
        Msg { payload: Bytes::copy_from_slice(&self.payload), received_ms: self.received_ms }
    }
}

/// How the consumer settled a delivery.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// accepted, or settled with no outcome: remove.
    Accepted,
    /// rejected: remove.
    Rejected,
    /// released / modified / unknown: requeue to the tail.
    Requeue,
    /// Never reached the consumer (link gone before sending): requeue at the head.
    Undelivered,
}

/// Where an events-store subscription starts (`x-opt-kubemq-start`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StartPos {
    /// Only events published from now on.
    NewOnly,
    /// The first stored event.
    First,
    /// The last stored event.
    Last,
    /// A sequence number (1-based).
    Sequence(u64),
    /// The first event at or after this time (ms since the epoch).
    Time(u64),
}

/// What a consume link asks of its channel.
#[derive(Debug, Clone)]
pub struct SubSpec {
    /// Consumer group (`x-opt-kubemq-group`).
    pub group: Option<String>,
    /// Selector (events, events-store).
    pub selector: Option<Selector>,
    /// Start position (events-store).
    pub start: StartPos,
    /// Durable subscription identity (events-store, expiry-policy never).
    pub durable: Option<String>,
    /// The identity an older sluice gave the same durable subscription
    /// (`net::conn::legacy_durable_identity`): a cursor kept under it, and none under
    /// `durable`, is taken over when this subscription attaches.
    pub legacy_durable: Option<String>,
    /// The consumer settles nothing (snd-settle-mode settled).
    pub presettled: bool,
    /// MaxUnsettledPerLink.
    pub max_unsettled: u32,
    /// GetBatchSize.
    pub batch: u32,
    /// Events-store: lossless stall policy (wait at zero credit; the cursor moves only
    /// past what was sent).
    pub hold: bool,
    /// Watermark on delivered-but-unsettled messages (0: off).
    pub max_outstanding_messages: u32,
    /// Watermark on delivered-but-unsettled bytes (0: off).
    pub max_outstanding_bytes: u64,
    /// Events: how many events to hold at zero credit before dropping the oldest.
    pub events_buffer: u32,
    /// Events: the window of deliveries on their way to the link, in bytes (payload +
    /// [`home::EVENT_OVERHEAD`] each).
    pub events_in_flight_bytes: u64,
    /// Queues: return a delivery not settled within this many ms (0: off).
    pub ack_deadline_ms: u64,
}

/// The deliver-first window of an events-store subscription: filled by the home
/// shard, emptied by the connection's shard as credit allows. A lock-free bounded
/// ring, so neither side ever blocks the other.
#[derive(Debug)]
pub struct StoreRing {
    /// Events (sequence number, message).
    pub ring: ArrayQueue<(u64, Msg)>,
    /// Set by the home when a push failed for lack of room while credit was left:
    /// the connection then reports room with [`ShardMsg::RingSpace`].
    pub home_waiting: AtomicBool,
}

/// Most events one [`ShardMsg::PublishBatch`] carries.
pub const EVENTS_BATCH: usize = 64;

/// Why a home did not store an unsettled publish. The connection rejects the delivery
/// with [`PublishRefusal::condition`] and [`PublishRefusal::description`]; for a limit
/// it also backs the producer link off ([`PublishRefusal::backs_off`]). (Not to be
/// confused with [`message::Refusal`], the (condition, description) a connection
/// rejects a message with before it reaches a home.)
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PublishRefusal {
    /// The queue holds `SLUICE_QUEUE_MAX_MESSAGES` messages or `SLUICE_QUEUE_MAX_BYTES`.
    QueueFull,
    /// The shard keeps `SLUICE_MAX_CHANNELS` channels already.
    TooManyChannels,
    /// The message store failed to write the record.
    StoreUnavailable,
    /// A dynamic node holds as much as it may (see the README's Limits).
    NodeFull,
    /// No dynamic node of that name (its link or its connection went).
    NodeUnreachable,
}

impl PublishRefusal {
    /// The AMQP error condition.
    pub fn condition(self) -> &'static str {
        match self {
            PublishRefusal::NodeUnreachable => sluice_proto::types::condition::PRECONDITION_FAILED,
            _ => sluice_proto::types::condition::RESOURCE_LIMIT_EXCEEDED,
        }
    }

    /// The error description.
    pub fn description(self) -> &'static str {
        match self {
            PublishRefusal::QueueFull => "queue full",
            PublishRefusal::TooManyChannels => "too many channels",
            PublishRefusal::StoreUnavailable => "message store unavailable",
            PublishRefusal::NodeFull => "dynamic node is full",
            PublishRefusal::NodeUnreachable => "unreachable dynamic node",
        }
    }

    /// A limit that stays reached for a while: the producer is backed off rather than left
    /// to spend its credit on more refusals.
    pub fn backs_off(self) -> bool {
        matches!(self, PublishRefusal::QueueFull | PublishRefusal::TooManyChannels)
    }
}

/// Everything that crosses between a connection and a channel's home.
#[derive(Debug)]
pub enum ShardMsg {
    // ---- connection -> home
    /// Store or fan out a message.
    Publish {
        /// Channel.
        key: ChannelKey,
        /// The message.
        msg: Msg,
        /// Outcome wanted (unsettled publish).
        ack: Option<PublishAck>,
    },
    /// Events published on one connection in one driver turn, in order (pre-settled
    /// or already accepted: events are at-most-once). One key, one route and one
    /// channel lookup for up to [`EVENTS_BATCH`] messages.
    PublishBatch {
        /// Channel (an events channel).
        key: ChannelKey,
        /// The messages, oldest first.
        msgs: Vec<Msg>,
    },
    /// A consume link attached.
    Subscribe {
        /// Channel.
        key: ChannelKey,
        /// The link.
        sub: SubRef,
        /// Its options.
        spec: Box<SubSpec>,
    },
    /// New credit from the consumer. `reached` counts the link's deliveries from the
    /// home that its connection has dealt with (written, dropped or given back; not
    /// those still waiting there for a session window), so the home knows exactly which
    /// of what it sent are still on their way: its credit is `credit` less those.
    /// Counting against the link's delivery-count instead went wrong for good whenever
    /// a delivery was not written (it met no credit) or a drain advanced it.
    Credit {
        /// Channel.
        key: ChannelKey,
        /// The link.
        sub: SubRef,
        /// Effective credit at the connection.
        credit: u32,
        /// Deliveries from the home the connection has dealt with (wrapping).
        reached: u32,
        /// Payload bytes the connection has sent on this link so far (events: the
        /// home keeps at most a bounded window beyond this and `reached` on its way
        /// to the connection).
        bytes_out: u64,
        /// Drain requested.
        drain: bool,
        /// This update's number on its link (wrapping): a [`ShardMsg::DrainDone`]
        /// names the update whose drain it completes.
        seq: u32,
    },
    /// The consumer settled a delivery.
    Settle {
        /// Channel.
        key: ChannelKey,
        /// The link.
        sub: SubRef,
        /// Delivery token given in [`ShardMsg::Deliver`].
        token: u64,
        /// Outcome.
        outcome: Outcome,
    },
    /// A responder settled `n` requests (or they could not be sent), coalesced per
    /// turn of its connection: room for as many more.
    RpcSettled {
        /// Channel (commands or queries).
        key: ChannelKey,
        /// The responder's link.
        sub: SubRef,
        /// How many.
        n: u32,
        /// The bytes of those sent unsettled (its byte watermark's room).
        bytes: u64,
    },
    /// The consume link is gone: return its unsettled deliveries.
    Unsubscribe {
        /// Channel.
        key: ChannelKey,
        /// The link.
        sub: SubRef,
        /// It was detached for a credit stall: the message that found the ring full
        /// is lost too, and a durable cursor moves past it.
        stalled: bool,
        /// Events-store: the first sequence number the link had not sent (a durable
        /// subscription resumes there); None when it sent everything it was given.
        resume_at: Option<u64>,
        /// Answer with [`ShardMsg::UnsubscribeDone`] (the connection holds its DETACH
        /// reply until the subscription is released).
        confirm: bool,
        /// Queues: tokens of the deliveries the connection sent that the peer has not
        /// settled (back to the queue, their delivery counted). The link's other
        /// unsettled deliveries were never sent (they waited for a shut session
        /// window, or were on their way to the connection when the link went): back to
        /// the front of the queue in their order, their delivery not counted.
        sent: Vec<u64>,
    },
    /// Lossless events-store: every event before `next_seq` has been sent.
    Consumed {
        /// Channel.
        key: ChannelKey,
        /// The link.
        sub: SubRef,
        /// The next sequence number the link has not sent.
        next_seq: u64,
    },
    /// The consumer reported a `received` state, or the delivery left its connection
    /// after waiting for the session window: its ack deadline starts again. `held`:
    /// instead, the delivery waits for the session window: its deadline stops.
    Extend {
        /// Channel.
        key: ChannelKey,
        /// The link.
        sub: SubRef,
        /// Delivery token.
        token: u64,
        /// Stop the deadline (the delivery waits at its connection).
        held: bool,
    },
    /// Room in an events-store ring again.
    RingSpace {
        /// Channel.
        key: ChannelKey,
        /// The link.
        sub: SubRef,
    },
    /// A queue message delivered too often, moved to `queues/<channel>.dlq` (taken
    /// whatever the queue limits say: it was accepted once). Answered with
    /// [`ShardMsg::DeadLettered`] once its publish record is on disk: only then does
    /// the source queue log the message as gone, so a crash in between leaves it in
    /// both queues rather than in neither.
    DeadLetter {
        /// The dead-letter channel.
        key: ChannelKey,
        /// The message.
        msg: Msg,
        /// The queue it leaves.
        source: ChannelKey,
        /// Its id there.
        id: u64,
    },
    /// The dead-letter queue has stored (`ok`) or could not store the message `id`
    /// of queue `key`.
    DeadLettered {
        /// The source queue.
        key: ChannelKey,
        /// The message's id there.
        id: u64,
        /// Stored; false: the store failed, the message stays in the source queue.
        ok: bool,
    },
    /// An RPC request routed to responders.
    RpcRequest {
        /// commands/ or queries/ channel.
        key: ChannelKey,
        /// The rewritten request.
        msg: Msg,
        /// When it expires (steady clock, [`steady_ms`]).
        deadline_ms: u64,
    },

    /// RPC requests given to a responder whose connection never sent them (they waited
    /// for its session window, or came after its link, its connection or its credit
    /// went): they go to the front of the channel's waiting requests, for another
    /// responder.
    RpcReturned {
        /// commands/ or queries/ channel.
        key: ChannelKey,
        /// Each request and its deadline.
        requests: Vec<(Msg, u64)>,
    },

    // ---- home -> connection
    /// Outcome of an unsettled publish.
    PublishDone {
        /// Where it goes.
        ack: PublishAck,
        /// Err: why it was not stored.
        result: Result<(), PublishRefusal>,
    },
    /// Answer to Subscribe.
    SubscribeDone {
        /// The link.
        sub: SubRef,
        /// Ok: the ring for events-store. Err: (condition, description).
        result: Result<Option<Arc<StoreRing>>, (&'static str, String)>,
    },
    /// The subscription is released.
    UnsubscribeDone {
        /// The link.
        sub: SubRef,
    },
    /// A message for a consume link.
    Deliver {
        /// The link.
        sub: SubRef,
        /// Token to settle with.
        token: u64,
        /// The message.
        msg: Msg,
        /// Times delivered, this one included (queues); 0 where not counted.
        receive_count: u32,
        /// Sent pre-settled.
        settled: bool,
    },
    /// An RPC request for a responder link. It names its channel: a connection that
    /// cannot send it (the link went while it was on its way, or the connection did)
    /// gives it back with [`ShardMsg::RpcReturned`], for another responder.
    DeliverRequest {
        /// The link.
        sub: SubRef,
        /// The commands/ or queries/ channel.
        key: ChannelKey,
        /// The request.
        msg: Msg,
        /// When it expires (steady clock, [`steady_ms`]).
        deadline_ms: u64,
        /// Sent pre-settled.
        settled: bool,
    },
    /// Pre-settled events for one consume link, in order (what one publish or publish
    /// batch gave it): one route and one link lookup for all of them.
    DeliverBatch {
        /// The link.
        sub: SubRef,
        /// The events, oldest first.
        msgs: Vec<Msg>,
    },
    /// The drain is complete: the home delivered what it had and zeroed its credit.
    /// The connection completes it only if no credit update followed the one that
    /// asked for it (the peer's next FLOW takes a drain back, or asks again).
    DrainDone {
        /// The link.
        sub: SubRef,
        /// The [`ShardMsg::Credit`] update that asked for the drain.
        seq: u32,
    },
    /// Events were put into an empty ring.
    RingReady {
        /// The link.
        sub: SubRef,
    },
    /// A ring was found full.
    RingFull {
        /// The link.
        sub: SubRef,
    },
    /// An RPC response for a pending request of a connection.
    RpcResponse {
        /// Connection that holds the pending request.
        shard: u16,
        /// Its id.
        conn: u64,
        /// The request's number on that connection.
        seq: u64,
        /// The request id's random part (a response must name both).
        nonce: u64,
        /// The responder's message.
        msg: Msg,
    },
    /// A message sent to another connection's dynamic node (by an anonymous sender's
    /// `to`, or a sender attached to the node's address), for that connection.
    NodeMessage {
        /// The node's connection: its shard,
        shard: u16,
        /// and its id.
        conn: u64,
        /// The node's address.
        node: Box<str>,
        /// The message (its own copy).
        msg: Msg,
        /// Outcome wanted (unsettled publish): answered with [`ShardMsg::PublishDone`].
        ack: Option<PublishAck>,
    },
    /// Close the connection (shutdown).
    Shutdown {
        /// Connection.
        conn: u64,
    },
    /// Drop the connection, still in its handshake, at once: a connection over
    /// MaxConnections took its place.
    Evict {
        /// Connection.
        conn: u64,
    },

    // ---- shard -> shard
    /// At MaxConnections, a connection accepted on another shard took the place of this
    /// shard's oldest connection still in its handshake: drop it. Handled by the ring
    /// receiver, never by a home.
    EvictHandshake {
        /// The shard that drops one.
        shard: u16,
        /// The shard that asks, and its request's number: it waits for the answer.
        from: u16,
        token: u64,
    },
    /// The answer to [`ShardMsg::EvictHandshake`]: whether a connection was dropped
    /// (if not, the new connection is refused: it is over the limit).
    EvictReply {
        /// The shard that asked.
        shard: u16,
        /// Its request's number.
        token: u64,
        /// One was dropped.
        ok: bool,
    },
    /// A connection accepted on another shard, to be served here (the shard with the
    /// fewest connections). Handled by the ring receiver, never by a home.
    Adopt {
        /// The shard that serves it.
        shard: u16,
        /// The accepted socket, not yet read from.
        stream: glommio::net::AcceptedTcpStream,
        /// Accepted on the TLS listener.
        tls: bool,
    },
}

impl ShardMsg {
    /// One RPC request, expiring at `deadline_ms`, back to channel `key`.
    pub fn request_returned(key: ChannelKey, msg: Msg, deadline_ms: u64) -> ShardMsg {
        ShardMsg::RpcReturned { key, requests: vec![(msg, deadline_ms)] }
    }

    /// The shard this message must be handled on.
    pub fn destination(&self, shards: usize) -> usize {
        match self {
            ShardMsg::Publish { key, .. }
            | ShardMsg::PublishBatch { key, .. }
            | ShardMsg::Subscribe { key, .. }
            | ShardMsg::Credit { key, .. }
            | ShardMsg::Settle { key, .. }
            | ShardMsg::RpcSettled { key, .. }
            | ShardMsg::Unsubscribe { key, .. }
            | ShardMsg::RingSpace { key, .. }
            | ShardMsg::Consumed { key, .. }
            | ShardMsg::Extend { key, .. }
            | ShardMsg::DeadLetter { key, .. }
            | ShardMsg::DeadLettered { key, .. }
            | ShardMsg::RpcRequest { key, .. }
            | ShardMsg::RpcReturned { key, .. } => key.home(shards),
            ShardMsg::PublishDone { ack, .. } => ack.link.shard as usize,
            ShardMsg::SubscribeDone { sub, .. }
            | ShardMsg::UnsubscribeDone { sub }
            | ShardMsg::Deliver { sub, .. }
            | ShardMsg::DeliverRequest { sub, .. }
            | ShardMsg::DeliverBatch { sub, .. }
            | ShardMsg::DrainDone { sub, .. }
            | ShardMsg::RingReady { sub }
            | ShardMsg::RingFull { sub } => sub.shard as usize,
            ShardMsg::RpcResponse { shard, .. }
            | ShardMsg::NodeMessage { shard, .. }
            | ShardMsg::Adopt { shard, .. }
            | ShardMsg::EvictHandshake { shard, .. }
            | ShardMsg::EvictReply { shard, .. } => *shard as usize,
            ShardMsg::Shutdown { .. } | ShardMsg::Evict { .. } => usize::MAX,
        }
    }

    /// How many messages this stands for (outbox accounting).
    pub fn weight(&self) -> usize {
        match self {
            ShardMsg::PublishBatch { msgs, .. } | ShardMsg::DeliverBatch { msgs, .. } => msgs.len().max(1),
            _ => 1,
        }
    }

    /// The connection a connection-bound message is for.
    pub fn connection(&self) -> Option<u64> {
        match self {
            ShardMsg::PublishDone { ack, .. } => Some(ack.link.conn),
            ShardMsg::SubscribeDone { sub, .. }
            | ShardMsg::UnsubscribeDone { sub }
            | ShardMsg::Deliver { sub, .. }
            | ShardMsg::DeliverRequest { sub, .. }
            | ShardMsg::DeliverBatch { sub, .. }
            | ShardMsg::DrainDone { sub, .. }
            | ShardMsg::RingReady { sub }
            | ShardMsg::RingFull { sub } => Some(sub.conn),
            ShardMsg::RpcResponse { conn, .. }
            | ShardMsg::NodeMessage { conn, .. }
            | ShardMsg::Shutdown { conn }
            | ShardMsg::Evict { conn } => Some(*conn),
            _ => None,
        }
    }
}

/// The pattern label used in metrics.
pub fn pattern_label(p: Pattern) -> &'static str {
    p.as_str()
}

/// The wall clock: milliseconds since the Unix epoch. For timestamps only: when a
/// message arrived, an event's time (retention by age, `time:` start positions), a
/// token's expiry. Never for a deadline: NTP, a resumed VM or an operator may step it.
pub fn wall_ms() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_millis() as u64).unwrap_or(0)
}

/// Where the steady clock starts: far enough from 0 that "now minus a period" never
/// saturates into the "none" value some deadlines use.
const STEADY_ORIGIN_MS: u64 = 1 << 30;

/// The steady clock: milliseconds on the monotonic clock since the process first read
/// it (plus [`STEADY_ORIGIN_MS`]), the same on every shard. For every deadline, timeout
/// and period (ack deadlines, RPC timeouts, idle channels, durable-subscription
/// expiry, sweeps): a step of the wall clock moves none of them
/// (`tests/clock.rs`). Never stored: it restarts with the process.
pub fn steady_ms() -> u64 {
    static ORIGIN: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
    let origin = *ORIGIN.get_or_init(std::time::Instant::now);
    STEADY_ORIGIN_MS + origin.elapsed().as_millis() as u64
}
