//! The sans-IO protocol engine: one [`Connection`] per transport connection, with
//! its sessions and links.
//!
//! Inputs: [`Connection::handle_input`] (bytes as they arrive, with `now` in
//! milliseconds), [`Connection::handle_timeout`], and the application calls (begin,
//! attach, grant credit, send, disposition, detach, end, close).
//! Outputs, drained in this order after each input: [`Connection::poll_event`]
//! (what the peer did), [`Connection::poll_transmit`] (bytes to write), and
//! [`Connection::poll_timeout`] (the next deadline to call `handle_timeout` at).
//!
//! Protocol errors never panic: each becomes an AMQP error at its scope through
//! [`ProtocolError::to_amqp`] and is reported as [`Event::LocalError`].

mod error;
mod numbers;
mod serial;
mod transmit;
mod unsettled;

pub use error::{ProtocolError, Scope, UsageError};
pub use serial::{effective_credit, SerialNumber};
pub use transmit::{Transmit, ZERO_COPY_THRESHOLD};

use crate::codec::{Encode, Fields, Symbol, Symbols};
use crate::frame::{
    write_empty_frame, Deframer, RawFrame, AMQP_HEADER, FRAME_TYPE_AMQP, FRAME_TYPE_SASL, MIN_MAX_FRAME_SIZE,
    SASL_HEADER,
};
use crate::trail::Trail;
use crate::types::fast::FirstTransfer;
use crate::types::{
    condition, Attach, Begin, Close, DeliveryState, DeliveryTag, Detach, Disposition, End, Error, Flow, Message, Open,
    Performative, ReceiverSettleMode, Role, SaslFrame, SaslInit, SaslMechanisms, SaslOutcome, SenderSettleMode,
    Transfer,
};
use bytes::{Bytes, BytesMut};
use std::collections::VecDeque;

/// Largest frame accepted before OPEN has been negotiated (SASL frames included).
pub const PRE_OPEN_MAX_FRAME_SIZE: u32 = 32 * 1024;
/// Bytes a peer may send before its OPEN has been processed (headers, SASL, OPEN).
pub const PRE_OPEN_MAX_BYTES: u64 = 64 * 1024;

/// Events the engine buffers before it stops taking frames from its input. The
/// frames left are processed by the next [`Connection::process`], once the caller has
/// drained the events (see [`Connection::input_paused`]). Far above what a read of
/// ordinary traffic gives; it bounds what frames that each make many events can cost
/// in one read (a DISPOSITION over a range re-reports every unsettled delivery it
/// covers, and a read can hold thousands of them).
pub const EVENTS_PAUSE: usize = 65_536;

/// Empty frames are sent at half the peer's idle-time-out, but never more often than
/// this: a peer that advertises 1 ms cannot make us write 2,000 frames a second.
pub const MIN_HEARTBEAT_MS: u64 = 50;

/// Bytes of a TRANSFER frame that are not payload, at most: frame header (8) and
/// the performative with every field that the engine writes.
const TRANSFER_OVERHEAD: usize = 8 + 80;

/// Identifies a link within its connection. A freed id may be reused by a later link.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct LinkId(pub u32);

/// Which end of the connection this engine is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    /// Sends the first protocol header and OPEN.
    Client,
    /// Answers them.
    Server,
}

/// How a client authenticates when it uses the SASL layer.
#[derive(Debug, Clone, PartialEq)]
pub struct ClientSasl {
    /// Mechanism name (ANONYMOUS, PLAIN, ...).
    pub mechanism: String,
    /// Initial response bytes.
    pub initial_response: Option<Bytes>,
}

/// Connection settings.
#[derive(Debug, Clone)]
pub struct Config {
    /// Client or server.
    pub side: Side,
    /// Our container-id.
    pub container_id: String,
    /// Hostname sent in OPEN (client).
    pub hostname: Option<String>,
    /// The largest frame we accept (advertised in OPEN).
    pub max_frame_size: u32,
    /// Highest channel number we accept.
    pub channel_max: u16,
    /// Close the connection after this long without receiving anything (0: never).
    /// OPEN advertises half of it.
    pub idle_timeout_ms: u32,
    /// Close the connection when OPEN has not been exchanged after this long (0: never).
    pub handshake_timeout_ms: u32,
    /// Session incoming (and outgoing) window, in transfer frames.
    pub session_window: u32,
    /// Highest link handle we accept per session.
    pub handle_max: u32,
    /// Handles and channels this far above handle-max / channel-max are still
    /// accepted (a client may pipeline ATTACHes and BEGINs before it has seen our
    /// limits), so the application can refuse them at link or session scope; beyond
    /// it, the connection closes with framing-error. Bounds what a peer can make us keep.
    pub limit_grace: u32,
    /// Largest incoming message, in bytes.
    pub max_message_size: u64,
    /// Bytes of multi-frame messages being reassembled, over all links of the
    /// connection (each link's is bounded by `max_message_size`); a frame that would
    /// pass it detaches its link with `amqp:resource-limit-exceeded`.
    pub max_reassembly_bytes: u64,
    /// Server: SASL mechanisms offered (empty: SASL refused).
    pub sasl_mechanisms: Vec<String>,
    /// Server: accept a connection that starts with the plain AMQP header.
    pub allow_no_sasl: bool,
    /// Server: answer sasl-init at once (ok for an offered mechanism, auth for any
    /// other) instead of raising [`Event::SaslInit`] for the application to decide
    /// (which it then does for every mechanism, offered or not).
    pub sasl_auto_accept: bool,
    /// Client: the SASL layer to use, or None to send the AMQP header directly.
    pub client_sasl: Option<ClientSasl>,
    /// Connection properties sent in OPEN.
    pub properties: Option<Fields>,
    /// Capabilities offered in OPEN.
    pub offered_capabilities: Option<Symbols>,
}

impl Config {
    /// A server configuration with the broker's defaults.
    pub fn server(container_id: &str) -> Self {
        Config {
            side: Side::Server,
            container_id: container_id.to_owned(),
            hostname: None,
            max_frame_size: 65536,
            channel_max: 255,
            idle_timeout_ms: 0,
            handshake_timeout_ms: 10_000,
            session_window: 2048,
            handle_max: 1023,
            limit_grace: 64,
            max_message_size: 100 * 1024 * 1024,
            max_reassembly_bytes: 256 * 1024 * 1024,
            sasl_mechanisms: vec!["ANONYMOUS".into(), "PLAIN".into()],
            allow_no_sasl: true,
            sasl_auto_accept: true,
            client_sasl: None,
            properties: None,
            offered_capabilities: None,
        }
    }

    /// A client configuration (SASL ANONYMOUS).
    pub fn client(container_id: &str) -> Self {
        Config {
            side: Side::Client,
            client_sasl: Some(ClientSasl { mechanism: "ANONYMOUS".into(), initial_response: None }),
            handshake_timeout_ms: 0,
            ..Config::server(container_id)
        }
    }
}

/// A complete incoming delivery (all its transfer frames).
#[derive(Debug, Clone, PartialEq)]
pub struct Delivery {
    /// The link it arrived on.
    pub link: LinkId,
    /// Session-scoped delivery-id.
    pub delivery_id: u32,
    /// Delivery tag.
    pub tag: DeliveryTag,
    /// The sender settled it (pre-settled).
    pub settled: bool,
    /// message-format of the first transfer.
    pub message_format: u32,
    /// The message bytes: a slice of the read buffer when it came in one frame.
    pub payload: Bytes,
}

/// A delivery event with every field empty: a constant, so it is copied into the
/// event queue whole, then filled in place.
const EMPTY_DELIVERY: Event = Event::Delivery(Delivery {
    link: LinkId(0),
    delivery_id: 0,
    tag: DeliveryTag::EMPTY,
    settled: false,
    message_format: 0,
    payload: Bytes::new(),
});

/// Something the peer did, or an error the engine acted on.
#[derive(Debug, Clone, PartialEq)]
pub enum Event {
    /// Server: the client chose a SASL mechanism; answer with [`Connection::sasl_outcome`].
    SaslInit(SaslInit),
    /// Client: the server's SASL outcome code (0 = ok).
    SaslOutcome(u8),
    /// Server: the peer opened without SASL (the AMQP header) where SASL is required
    /// (`allow_no_sasl` false); the connection is refused.
    SaslRequired,
    /// The peer's OPEN (our OPEN has been sent).
    Opened(Box<Open>),
    /// A session is mapped on this local channel.
    SessionBegun {
        /// Local channel.
        channel: u16,
        /// The peer's BEGIN.
        begin: Begin,
    },
    /// The session on this local channel ended (its links got [`Event::Detached`] first).
    SessionEnded {
        /// Local channel.
        channel: u16,
        /// The error the peer (or we) gave.
        error: Option<Error>,
        /// True when we ended it.
        local: bool,
    },
    /// The peer attached a link; answer with [`Connection::attach_reply`] (or refuse
    /// with [`Connection::refuse_attach`]).
    AttachRequested {
        /// The new link.
        link: LinkId,
        /// Local channel of its session.
        channel: u16,
        /// The peer's ATTACH.
        attach: Box<Attach>,
    },
    /// The peer answered our ATTACH.
    Attached {
        /// The link.
        link: LinkId,
        /// The peer's ATTACH.
        attach: Box<Attach>,
    },
    /// Sender links: the receiver set our credit (effective credit already computed).
    Credit {
        /// The link.
        link: LinkId,
        /// Credit now available.
        credit: u32,
        /// The receiver asked us to drain.
        drain: bool,
    },
    /// Receiver links: FLOW from the sender (after a drain, credit is 0).
    SenderFlow {
        /// The link.
        link: LinkId,
        /// Credit we still have granted after the sender's delivery-count.
        credit: u32,
        /// The sender's drain flag.
        drain: bool,
        /// Messages available at the sender.
        available: Option<u32>,
    },
    /// A session-level FLOW (no handle).
    SessionFlow {
        /// Local channel.
        channel: u16,
    },
    /// A complete incoming message.
    Delivery(Delivery),
    /// An incoming delivery was aborted by its sender.
    Aborted {
        /// The link.
        link: LinkId,
        /// Its delivery-id.
        delivery_id: u32,
    },
    /// The peer changed the state of, or settled, one of the known unsettled deliveries.
    Disposition {
        /// The link of the delivery.
        link: LinkId,
        /// The delivery.
        delivery_id: u32,
        /// Settled by the peer.
        settled: bool,
        /// The state the peer gave.
        state: Option<DeliveryState>,
    },
    /// A link is gone (by the peer, by its session ending, or by a link error we raised).
    Detached {
        /// The link.
        link: LinkId,
        /// The link was closed (not just detached).
        closed: bool,
        /// The error given.
        error: Option<Error>,
        /// True when we detached it.
        local: bool,
    },
    /// The connection is closed (the peer's CLOSE, or ours on error).
    Closed {
        /// The error given.
        error: Option<Error>,
        /// True when we closed it.
        local: bool,
    },
    /// We detected a protocol error and acted on it at this scope.
    LocalError {
        /// Where it took effect.
        scope: Scope,
        /// The error sent to the peer.
        error: Error,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// Waiting for the peer's protocol header (`sasl_done`: after a SASL exchange).
    Header { sasl_done: bool },
    /// Server: waiting for sasl-init.
    SaslInit,
    /// Server: waiting for the application's verdict on sasl-init.
    SaslDecision,
    /// Client: waiting for sasl-mechanisms.
    SaslMechanisms,
    /// Client: waiting for sasl-outcome.
    SaslOutcome,
    /// Waiting for the peer's OPEN.
    Open,
    /// OPEN exchanged.
    Opened,
    /// We sent CLOSE; waiting for the peer's.
    Closing,
    /// Finished: nothing more is read or written.
    Closed,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum SessionState {
    /// We sent BEGIN, the peer has not answered.
    BeginSent,
    /// BEGIN exchanged.
    Mapped,
    /// We sent END; frames are ignored until the peer's END.
    EndSent,
}

/// Where `on_frame`'s fast paths decode TRANSFER, FLOW and DISPOSITION frames in place,
/// kept across the frames of one `process_frames` call.
#[derive(Default)]
struct Slots {
    transfer: Transfer,
    flow: Flow,
    disposition: Disposition,
}

#[derive(Debug)]
struct Session {
    state: SessionState,
    remote_channel: Option<u16>,
    /// Next transfer-id we assign.
    next_outgoing_id: u32,
    /// Next transfer-id we expect.
    next_incoming_id: u32,
    /// Transfers we still accept before the peer must wait for our FLOW.
    incoming_window: u32,
    /// Transfers the peer still accepts from us.
    remote_incoming_window: u32,
    remote_handle_max: u32,
    next_delivery_id: u32,
    /// Remote handle -> link.
    by_remote_handle: numbers::NumberMap<LinkId>,
    /// Local handles in use.
    local_handles: Vec<Option<LinkId>>,
    /// Every link of this session (a link's place is its `in_session`), so ending the
    /// session frees its links without walking the connection's.
    links: Vec<LinkId>,
    /// Our unsettled outgoing deliveries: delivery-id -> link.
    out_unsettled: unsettled::Unsettled,
    /// Unsettled incoming deliveries: delivery-id -> link.
    in_unsettled: unsettled::Unsettled,
    /// Frames of one delivery that did not fit the peer's incoming window yet;
    /// written as the window opens. At most one delivery waits here.
    blocked: VecDeque<(Transfer, Bytes)>,
}

impl Session {
    /// The unsettled deliveries of our links of role `role`: a sender's are outgoing.
    fn unsettled_of(&mut self, role: Role) -> &mut unsettled::Unsettled {
        if role == Role::Sender {
            &mut self.out_unsettled
        } else {
            &mut self.in_unsettled
        }
    }

    /// Drop the frames of local handle `handle` still waiting for the peer's window: the
    /// link is going, and a later link may take its handle.
    fn drop_blocked(&mut self, handle: Option<u32>) {
        if let Some(h) = handle {
            if !self.blocked.is_empty() {
                self.blocked.retain(|(t, _)| t.handle != h);
            }
        }
    }

    /// Stop tracking the deliveries of link `id` (of role `role`): `keys` is its trail,
    /// so the cost is the link's own deliveries, not the session's.
    fn forget_link(&mut self, id: LinkId, role: Role, keys: VecDeque<u32>) {
        let map = self.unsettled_of(role);
        #[cfg(test)]
        FORGET_CHECKS.with(|c| c.set(c.get() + keys.len() as u64));
        for d in keys {
            if map.get(d) == Some(id) {
                map.remove(d);
            }
        }
    }
}

#[cfg(test)]
thread_local! {
    /// Delivery-ids checked while links are forgotten (tests of the cost of a detach).
    static FORGET_CHECKS: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
    /// Links visited while sessions are freed (tests of the cost of an END).
    static SESSION_LINKS_FREED: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum LinkState {
    /// We sent ATTACH first.
    AttachSent,
    /// The peer attached first; the application has not answered.
    AttachReceived,
    /// ATTACH exchanged.
    Attached,
    /// We sent DETACH; waiting for the peer's.
    DetachSent,
    /// The peer detached; our answer waits for [`Connection::complete_detach`].
    DetachReceived {
        /// The peer's closed flag, echoed in the answer.
        closed: bool,
    },
}

#[derive(Debug)]
struct Partial {
    delivery_id: u32,
    tag: DeliveryTag,
    settled: bool,
    message_format: u32,
    data: BytesMut,
}

#[derive(Debug)]
struct Link {
    channel: u16,
    name: String,
    role: Role,
    state: LinkState,
    local_handle: Option<u32>,
    remote_handle: Option<u32>,
    snd_settle_mode: SenderSettleMode,
    rcv_settle_mode: ReceiverSettleMode,
    delivery_count: u32,
    initial_delivery_count: u32,
    link_credit: u32,
    /// A receiving link's highest delivery-limit granted (delivery-count plus
    /// link-credit, serial): transfers are taken up to it. A lowered credit does not
    /// lower it, since the sender may have sent under the higher one before our FLOW
    /// reached it (its transfers cross our FLOW); the peer is still held to what was
    /// once granted.
    credit_limit: u32,
    drain: bool,
    available: Option<u32>,
    max_message_size: u64,
    peer_max_message_size: u64,
    partial: Option<Partial>,
    /// Answer the peer's DETACH only when the application says so.
    defer_detach: bool,
    /// The delivery-ids this link put in its session's unsettled map (a superset), so
    /// a detach drops the link's entries without walking the session's.
    trail: Trail<u32>,
    /// Its place in its session's `links` (set by `alloc_link`).
    in_session: u32,
}

/// Read-only view of a link's flow state (for admin endpoints and tests).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LinkInfo {
    /// Local channel of the session.
    pub channel: u16,
    /// Link name.
    pub name: String,
    /// Our role.
    pub role: Role,
    /// Our local handle.
    pub handle: Option<u32>,
    /// delivery-count.
    pub delivery_count: u32,
    /// link-credit.
    pub link_credit: u32,
    /// Drain requested (sender) or granted (receiver).
    pub drain: bool,
}

/// One AMQP connection's protocol state.
#[derive(Debug)]
pub struct Connection {
    config: Config,
    phase: Phase,
    deframer: Deframer,
    out: Transmit,
    events: VecDeque<Event>,
    open_sent: bool,
    remote_open: Option<Box<Open>>,
    /// Frame size limit for what we send (peer's max-frame-size, floored at 512).
    send_max_frame_size: u32,
    channel_max: u16,
    peer_idle_timeout_ms: u32,
    sessions: Vec<Option<Session>>,
    remote_channels: numbers::NumberMap<u16>,
    links: Vec<Option<Link>>,
    free_links: Vec<u32>,
    /// Links freed while events that name them may still be waiting for the
    /// application, oldest first: reused only once the events are drained (or, past
    /// [`FREED_LINKS_HELD`], the oldest), so that in one read an ATTACH, DETACH and
    /// ATTACH on one handle give the second link another id, and the first link's
    /// late answer cannot reach it.
    freed_links: VecDeque<u32>,
    pending_disposition: Option<(u16, Disposition)>,
    window_dirty: bool,
    /// Bytes received while the connection was not yet open.
    pre_open_bytes: u64,
    /// Frames were left in the input because [`EVENTS_PAUSE`] events were waiting.
    input_paused: bool,
    /// Bytes held by the links' partial (multi-frame) messages.
    partial_bytes: u64,
    now: u64,
    started_at: u64,
    last_rx: u64,
    last_tx: u64,
    closing_deadline: u64,
}

impl Connection {
    /// A connection at time `now` (milliseconds on any monotonic clock). A client
    /// writes its protocol header at once.
    pub fn new(config: Config, now: u64) -> Self {
        let mut c = Connection {
            deframer: Deframer::new(PRE_OPEN_MAX_FRAME_SIZE),
            phase: Phase::Header { sasl_done: false },
            out: Transmit::default(),
            events: VecDeque::new(),
            open_sent: false,
            remote_open: None,
            send_max_frame_size: MIN_MAX_FRAME_SIZE,
            channel_max: config.channel_max,
            peer_idle_timeout_ms: 0,
            sessions: Vec::new(),
            remote_channels: numbers::NumberMap::default(),
            links: Vec::new(),
            free_links: Vec::new(),
            freed_links: VecDeque::new(),
            pending_disposition: None,
            window_dirty: false,
            pre_open_bytes: 0,
            input_paused: false,
            partial_bytes: 0,
            now,
            started_at: now,
            last_rx: now,
            last_tx: now,
            closing_deadline: 0,
            config,
        };
        if c.config.side == Side::Client {
            if c.config.client_sasl.is_some() {
                c.out.raw(&SASL_HEADER);
            } else {
                c.out.raw(&AMQP_HEADER);
                c.send_open();
            }
        }
        c
    }

    /// The configuration.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// The peer's OPEN, once received.
    pub fn remote_open(&self) -> Option<&Open> {
        self.remote_open.as_deref()
    }

    /// True once OPEN has been exchanged and until CLOSE.
    pub fn is_open(&self) -> bool {
        self.phase == Phase::Opened
    }

    /// True when the transport should be shut down once [`Self::poll_transmit`] is empty.
    pub fn is_closed(&self) -> bool {
        self.phase == Phase::Closed
    }

    /// Room for receiving straight into the read buffer: exactly `n` bytes after what
    /// is buffered (zeroed once, kept across receives that bring nothing). Then call
    /// [`Self::read_done`] with the count received, and [`Self::process`].
    pub fn read_space(&mut self, n: usize) -> &mut [u8] {
        self.deframer.read_space(n)
    }

    /// `n` bytes were received into the room [`Self::read_space`] gave.
    pub fn read_done(&mut self, n: usize) {
        self.deframer.read_done(n);
    }

    /// The bytes received and not processed yet (a partial frame, or frames left
    /// while [`Self::input_paused`]).
    pub fn buffered_input(&self) -> &[u8] {
        self.deframer.buffered_bytes()
    }

    /// Let go of the read buffer when nothing is buffered and it has grown past
    /// `max_capacity` bytes.
    pub fn release_read_buffer_if_idle(&mut self, max_capacity: usize) {
        self.deframer.release_if_idle(max_capacity);
    }

    /// Feed received bytes and process every complete frame.
    pub fn handle_input(&mut self, data: &[u8], now: u64) {
        self.deframer.push(data);
        self.process(now);
    }

    /// Count bytes processed before the connection is open; error once over the cap
    /// (pipelined frames after OPEN are not counted: they are processed after it).
    fn pre_open_budget(&mut self, n: usize) -> Result<(), ProtocolError> {
        if matches!(self.phase, Phase::Opened | Phase::Closing | Phase::Closed) {
            return Ok(());
        }
        self.pre_open_bytes += n as u64;
        if self.pre_open_bytes > PRE_OPEN_MAX_BYTES {
            return Err(ProtocolError::PreOpenLimit);
        }
        Ok(())
    }

    /// True when [`Self::process`] left complete frames in the input because
    /// [`EVENTS_PAUSE`] events were waiting: drain the events, then call
    /// [`Self::process`] again (without new input) until this is false.
    pub fn input_paused(&self) -> bool {
        self.input_paused
    }

    /// Process the frames received (see [`Self::read_space`]), stopping early (see
    /// [`Self::input_paused`]) while [`EVENTS_PAUSE`] events are waiting.
    pub fn process(&mut self, now: u64) {
        self.now = now;
        self.input_paused = false;
        if self.deframer.buffered() > 0 {
            self.last_rx = now;
        }
        // A link or session error ends only that link or session: the frames after it
        // in this input are processed too, not left until the peer sends more bytes
        // (they may be what the peer waits on an answer for). Each round consumed at
        // least the frame that failed; the check on the buffered bytes keeps it so.
        loop {
            let before = self.deframer.buffered();
            let Err(e) = self.process_frames() else { break };
            let connection = matches!(e.to_amqp().0, Scope::Connection);
            self.fail(e);
            if connection || self.deframer.buffered() >= before {
                break;
            }
        }
        if self.window_dirty {
            self.window_dirty = false;
            self.replenish_windows();
        }
    }

    /// Re-open the incoming window of every session that has used more than half of
    /// it. Done once per batch of input, never in the middle of one: a peer that
    /// sends more transfers than the window we advertised meets a window-violation.
    fn replenish_windows(&mut self) {
        let window = self.config.session_window;
        for ch in 0..self.sessions.len() as u16 {
            let due = matches!(self.session(ch), Some(s) if s.state == SessionState::Mapped && s.incoming_window < window / 2 + 1);
            if due {
                if let Some(s) = self.session_mut(ch) {
                    s.incoming_window = window;
                }
                self.write_session_flow(ch);
            }
        }
    }

    /// The transport reached end of stream (or failed): the connection is gone.
    pub fn handle_eof(&mut self) {
        if self.phase != Phase::Closed {
            self.phase = Phase::Closed;
            self.events.push_back(Event::Closed { error: None, local: false });
        }
    }

    /// The next event, in the order they happened.
    #[inline]
    pub fn poll_event(&mut self) -> Option<Event> {
        self.events.pop_front()
    }

    /// The next chunk of bytes to write. Small frames are batched into one chunk;
    /// large TRANSFER payloads are separate chunks that share the caller's buffer.
    #[inline]
    pub fn poll_transmit(&mut self) -> Option<Bytes> {
        self.flush_disposition();
        let b = self.out.pop();
        if b.is_some() {
            self.last_tx = self.now;
        }
        b
    }

    /// True when bytes are waiting in [`Self::poll_transmit`].
    pub fn wants_write(&self) -> bool {
        self.pending_disposition.is_some() || !self.out.is_empty()
    }

    /// The earliest time at which [`Self::handle_timeout`] must be called.
    pub fn poll_timeout(&self) -> Option<u64> {
        let mut t: Option<u64> = None;
        let mut at = |v: u64| t = Some(t.map_or(v, |c: u64| c.min(v)));
        match self.phase {
            Phase::Closed => return None,
            Phase::Closing => at(self.closing_deadline),
            Phase::Opened => {
                if self.config.idle_timeout_ms > 0 {
                    at(self.last_rx + self.config.idle_timeout_ms as u64);
                }
                if self.peer_idle_timeout_ms > 0 {
                    at(self.last_tx + (self.peer_idle_timeout_ms as u64 / 2).max(MIN_HEARTBEAT_MS));
                }
            }
            _ => {
                if self.config.handshake_timeout_ms > 0 {
                    at(self.started_at + self.config.handshake_timeout_ms as u64);
                }
            }
        }
        t
    }

    /// Act on deadlines that have passed at `now`.
    pub fn handle_timeout(&mut self, now: u64) {
        self.now = now;
        match self.phase {
            Phase::Closed => {}
            Phase::Closing => {
                if now >= self.closing_deadline {
                    self.phase = Phase::Closed;
                }
            }
            Phase::Opened => {
                if self.config.idle_timeout_ms > 0 && now >= self.last_rx + self.config.idle_timeout_ms as u64 {
                    self.fail(ProtocolError::IdleTimeout);
                    return;
                }
                if self.peer_idle_timeout_ms > 0
                    && now >= self.last_tx + (self.peer_idle_timeout_ms as u64 / 2).max(MIN_HEARTBEAT_MS)
                    && self.out.is_empty()
                {
                    let mut b = BytesMut::new();
                    write_empty_frame(&mut b);
                    self.out.raw(&b);
                    self.last_tx = now;
                }
            }
            _ => {
                if self.config.handshake_timeout_ms > 0
                    && now >= self.started_at + self.config.handshake_timeout_ms as u64
                {
                    self.fail(ProtocolError::HandshakeTimeout);
                }
            }
        }
    }

    // ---------------------------------------------------------------- input

    fn process_frames(&mut self) -> Result<(), ProtocolError> {
        // TRANSFER, FLOW and DISPOSITION frames are decoded into these slots in place
        // (see `on_frame`).
        let mut slots = Slots::default();
        loop {
            match self.phase {
                Phase::Closed | Phase::SaslDecision => return Ok(()),
                Phase::Header { sasl_done } => {
                    let Some(h) = self.deframer.take_raw(8) else { return Ok(()) };
                    self.pre_open_budget(8)?;
                    self.on_header(&h, sasl_done)?;
                }
                _ => {
                    if self.events.len() >= EVENTS_PAUSE {
                        self.input_paused = self.deframer.buffered() > 0;
                        return Ok(());
                    }
                    let Some(frame) = self.deframer.next_frame()? else { return Ok(()) };
                    self.pre_open_budget(frame.body.len() + 8)?;
                    self.on_frame(frame, &mut slots)?;
                }
            }
        }
    }

    fn on_header(&mut self, h: &[u8], sasl_done: bool) -> Result<(), ProtocolError> {
        let server = self.config.side == Side::Server;
        if h == SASL_HEADER && !sasl_done {
            if server {
                if self.config.sasl_mechanisms.is_empty() {
                    self.out.raw(&AMQP_HEADER);
                    return Err(self.bad_header());
                }
                self.out.raw(&SASL_HEADER);
                let mechs = SaslMechanisms {
                    sasl_server_mechanisms: Symbols(
                        self.config.sasl_mechanisms.iter().map(|m| Symbol::new(m)).collect(),
                    ),
                };
                self.out.frame(FRAME_TYPE_SASL, 0, &SaslFrame::Mechanisms(mechs), &[]);
                self.phase = Phase::SaslInit;
            } else {
                self.phase = Phase::SaslMechanisms;
            }
            return Ok(());
        }
        if h == AMQP_HEADER {
            if server {
                if !sasl_done && !self.config.allow_no_sasl {
                    self.out.raw(&SASL_HEADER);
                    self.events.push_back(Event::SaslRequired);
                    return Err(self.bad_header());
                }
                self.out.raw(&AMQP_HEADER);
            }
            self.phase = Phase::Open;
            return Ok(());
        }
        self.out.raw(if server && !sasl_done && !self.config.sasl_mechanisms.is_empty() {
            &SASL_HEADER
        } else {
            &AMQP_HEADER
        });
        Err(self.bad_header())
    }

    fn bad_header(&mut self) -> ProtocolError {
        // Nothing but our own header may follow a header we do not speak.
        self.open_sent = true;
        self.phase = Phase::Closed;
        ProtocolError::BadProtocolHeader
    }

    fn on_frame(&mut self, frame: RawFrame, slots: &mut Slots) -> Result<(), ProtocolError> {
        match self.phase {
            Phase::SaslInit | Phase::SaslMechanisms | Phase::SaslOutcome => return self.on_sasl_frame(frame),
            _ => {}
        }
        if frame.frame_type != FRAME_TYPE_AMQP {
            return Err(ProtocolError::IllegalState("SASL frame outside the SASL exchange"));
        }
        if frame.is_empty() {
            return Ok(()); // heartbeat
        }
        let channel = frame.channel;
        // TRANSFER, FLOW and DISPOSITION, the commonest frames, in their usual shapes:
        // decoded straight into the caller's slots and handed to their handlers by
        // reference, without building a `Performative` and moving it through the general
        // dispatch (whose checks they make: a FLOW or DISPOSITION on a session we have
        // ended is ignored, as `on_performative` ignores it).
        let frame = match self.phase {
            Phase::Opened => match frame.into_transfer_in(&mut slots.transfer) {
                Ok(payload) => return self.on_transfer_frame(channel, &slots.transfer, payload),
                Err(frame) if frame.flow_in(&mut slots.flow) => {
                    return self.live_session(channel)?.map_or(Ok(()), |local| self.on_flow(local, &slots.flow));
                }
                Err(frame) if frame.disposition_in(&mut slots.disposition) => {
                    let d = &mut slots.disposition;
                    return self.live_session(channel)?.map_or(Ok(()), |local| self.on_disposition(local, d));
                }
                Err(frame) => frame,
            },
            _ => frame,
        };
        let f = frame.into_amqp()?;
        match self.phase {
            Phase::Open => match f.performative {
                Performative::Open(open) => self.on_open(*open),
                _ => Err(ProtocolError::IllegalState("first frame must be open")),
            },
            Phase::Opened => self.on_performative(channel, f.performative, f.payload),
            Phase::Closing => {
                if let Performative::Close(_) = f.performative {
                    self.phase = Phase::Closed;
                }
                Ok(())
            }
            _ => Ok(()),
        }
    }

    fn on_sasl_frame(&mut self, frame: RawFrame) -> Result<(), ProtocolError> {
        if frame.frame_type != FRAME_TYPE_SASL {
            return Err(ProtocolError::IllegalState("AMQP frame during the SASL exchange"));
        }
        let sasl = frame.decode_sasl()?;
        match (self.phase, sasl) {
            (Phase::SaslInit, SaslFrame::Init(init)) => {
                if self.config.sasl_auto_accept {
                    let offered = self.config.sasl_mechanisms.iter().any(|m| init.mechanism == m.as_str());
                    self.write_sasl_outcome(if offered { 0 } else { 1 });
                } else {
                    // The application decides, also on a mechanism it did not offer (so
                    // it can audit and count the refusal like any other).
                    self.phase = Phase::SaslDecision;
                    self.events.push_back(Event::SaslInit(init));
                }
                Ok(())
            }
            (Phase::SaslMechanisms, SaslFrame::Mechanisms(m)) => {
                let Some(client) = self.config.client_sasl.clone() else {
                    return Err(ProtocolError::IllegalState("unexpected sasl-mechanisms"));
                };
                if !m.sasl_server_mechanisms.contains(&client.mechanism) {
                    self.phase = Phase::Closed;
                    self.events.push_back(Event::SaslOutcome(1));
                    return Ok(());
                }
                let init = SaslInit {
                    mechanism: Symbol::new(&client.mechanism),
                    initial_response: client.initial_response,
                    hostname: self.config.hostname.clone(),
                };
                self.out.frame(FRAME_TYPE_SASL, 0, &SaslFrame::Init(init), &[]);
                self.phase = Phase::SaslOutcome;
                Ok(())
            }
            (Phase::SaslOutcome, SaslFrame::Outcome(o)) => {
                self.events.push_back(Event::SaslOutcome(o.code));
                if o.code == 0 {
                    self.out.raw(&AMQP_HEADER);
                    self.send_open();
                    self.phase = Phase::Header { sasl_done: true };
                } else {
                    self.phase = Phase::Closed;
                }
                Ok(())
            }
            (Phase::SaslOutcome, SaslFrame::Challenge(_)) => {
                Err(ProtocolError::IllegalState("sasl challenges are not supported"))
            }
            _ => Err(ProtocolError::IllegalState("SASL frame out of order")),
        }
    }

    /// Server: answer a pending [`Event::SaslInit`] (0 = ok, 1 = auth failure).
    /// On failure the connection is finished once the outcome is written.
    pub fn sasl_outcome(&mut self, code: u8) {
        if self.phase != Phase::SaslDecision {
            return;
        }
        self.write_sasl_outcome(code);
        let now = self.now;
        self.process(now);
    }

    fn write_sasl_outcome(&mut self, code: u8) {
        let outcome = SaslOutcome { code, additional_data: None };
        self.out.frame(FRAME_TYPE_SASL, 0, &SaslFrame::Outcome(outcome), &[]);
        self.phase = if code == 0 { Phase::Header { sasl_done: true } } else { Phase::Closed };
    }

    fn on_open(&mut self, open: Open) -> Result<(), ProtocolError> {
        let peer_max = open.max_frame_size.unwrap_or(u32::MAX);
        if peer_max < MIN_MAX_FRAME_SIZE {
            return Err(ProtocolError::FrameSizeTooSmall);
        }
        self.send_max_frame_size = peer_max.min(self.config.max_frame_size.max(MIN_MAX_FRAME_SIZE));
        self.channel_max = self.config.channel_max.min(open.channel_max.unwrap_or(u16::MAX));
        self.peer_idle_timeout_ms = open.idle_time_out.unwrap_or(0);
        self.deframer.set_max_frame_size(self.config.max_frame_size.max(MIN_MAX_FRAME_SIZE));
        if !self.open_sent {
            self.send_open();
        }
        self.phase = Phase::Opened;
        let open = Box::new(open);
        self.remote_open = Some(open.clone());
        self.events.push_back(Event::Opened(open));
        Ok(())
    }

    fn send_open(&mut self) {
        let c = &self.config;
        let open = Open {
            container_id: c.container_id.clone(),
            hostname: c.hostname.clone(),
            max_frame_size: Some(c.max_frame_size.max(MIN_MAX_FRAME_SIZE)),
            channel_max: Some(c.channel_max),
            idle_time_out: (c.idle_timeout_ms > 0).then_some(c.idle_timeout_ms / 2),
            offered_capabilities: c.offered_capabilities.clone(),
            properties: c.properties.clone(),
            ..Default::default()
        };
        self.out.frame(FRAME_TYPE_AMQP, 0, &Performative::Open(Box::new(open)), &[]);
        self.open_sent = true;
    }

    fn on_performative(&mut self, channel: u16, p: Performative, payload: Bytes) -> Result<(), ProtocolError> {
        match p {
            Performative::Open(_) => Err(ProtocolError::SecondOpen),
            Performative::Close(close) => {
                self.flush_disposition();
                self.out.frame(FRAME_TYPE_AMQP, 0, &Performative::Close(Close { error: None }), &[]);
                self.phase = Phase::Closed;
                self.events.push_back(Event::Closed { error: close.error, local: false });
                Ok(())
            }
            Performative::Begin(begin) => self.on_begin(channel, begin),
            other => {
                let (local, ended) = self.local_session(channel)?;
                if ended {
                    // Ignore everything but END until the peer acknowledges ours.
                    if let Performative::End(_) = other {
                        self.free_session(local);
                    } else if let Performative::Transfer(_) = other {
                        self.skip_transfer_id(local);
                    }
                    return Ok(());
                }
                match other {
                    Performative::Attach(a) => self.on_attach(local, *a),
                    Performative::Flow(f) => self.on_flow(local, &f),
                    Performative::Transfer(t) => self.on_transfer(local, &t, payload),
                    Performative::Disposition(mut d) => self.on_disposition(local, &mut d),
                    Performative::Detach(d) => self.on_detach(local, d),
                    Performative::End(e) => self.on_end(local, e),
                    _ => Ok(()),
                }
            }
        }
    }

    fn on_begin(&mut self, channel: u16, begin: Begin) -> Result<(), ProtocolError> {
        if channel as u32 > self.channel_max as u32 + self.config.limit_grace {
            return Err(ProtocolError::BadChannel("channel above channel-max"));
        }
        if self.remote_channels.contains(channel as u32) {
            return Err(ProtocolError::IllegalState("begin on a channel already in use"));
        }
        let local = match begin.remote_channel {
            Some(local) => {
                // The peer's answer to our BEGIN.
                match self.session(local).map(|s| (s.state, s.remote_channel)) {
                    Some((SessionState::BeginSent, _)) => local,
                    Some((SessionState::EndSent, None)) => {
                        // We ended the session before its answer came: map the peer's
                        // channel so that its END, which follows, finds the session.
                        self.remote_channels.insert(channel as u32, local);
                        if let Some(s) = self.session_mut(local) {
                            s.remote_channel = Some(channel);
                            s.next_incoming_id = begin.next_outgoing_id;
                        }
                        return Ok(());
                    }
                    _ => return Err(ProtocolError::IllegalState("begin answers no pending begin")),
                }
            }
            None => {
                let local = self.alloc_channel().ok_or(ProtocolError::BadChannel("no free channel"))?;
                self.sessions[local as usize] = Some(self.new_session(SessionState::BeginSent));
                local
            }
        };
        self.remote_channels.insert(channel as u32, local);
        let window = self.config.session_window;
        let s = self.session_mut(local).ok_or(ProtocolError::IllegalState("session vanished"))?;
        s.remote_channel = Some(channel);
        s.next_incoming_id = begin.next_outgoing_id;
        s.remote_incoming_window = begin.incoming_window;
        s.remote_handle_max = begin.handle_max.unwrap_or(u32::MAX);
        let answer = begin.remote_channel.is_none();
        s.state = SessionState::Mapped;
        if answer {
            let reply = Begin {
                remote_channel: Some(channel),
                next_outgoing_id: s.next_outgoing_id,
                incoming_window: window,
                outgoing_window: window,
                handle_max: Some(self.config.handle_max),
                ..Default::default()
            };
            self.write(local, &Performative::Begin(reply), &[]);
        }
        self.events.push_back(Event::SessionBegun { channel: local, begin });
        Ok(())
    }

    fn new_session(&self, state: SessionState) -> Session {
        Session {
            state,
            remote_channel: None,
            next_outgoing_id: 0,
            next_incoming_id: 0,
            incoming_window: self.config.session_window,
            remote_incoming_window: 0,
            remote_handle_max: u32::MAX,
            next_delivery_id: 0,
            by_remote_handle: numbers::NumberMap::default(),
            local_handles: Vec::new(),
            links: Vec::new(),
            out_unsettled: Default::default(),
            in_unsettled: Default::default(),
            blocked: VecDeque::new(),
        }
    }

    fn alloc_channel(&mut self) -> Option<u16> {
        let free = self.sessions.iter().position(Option::is_none).unwrap_or(self.sessions.len());
        // Our channel numbers stay within the peer's channel-max (2.7.1); the grace over
        // the negotiated one is for taking a peer's pipelined BEGINs, not for our own.
        let peer_max = self.remote_open.as_ref().and_then(|o| o.channel_max).unwrap_or(u16::MAX);
        if free > peer_max as usize || free > self.channel_max as usize + self.config.limit_grace as usize {
            return None;
        }
        if free == self.sessions.len() {
            self.sessions.push(None);
        }
        Some(free as u16)
    }

    fn on_attach(&mut self, ch: u16, a: Attach) -> Result<(), ProtocolError> {
        if a.handle as u64 > self.config.handle_max as u64 + self.config.limit_grace as u64 {
            return Err(ProtocolError::HandleAboveMax);
        }
        let s = self.session(ch).ok_or(ProtocolError::IllegalState("no session"))?;
        if s.by_remote_handle.contains(a.handle) {
            return Err(ProtocolError::HandleInUse(ch));
        }
        // The answer to an ATTACH we sent? (Also of a link we have detached since: its
        // DETACH follows on the handle given here, and frees it.)
        let pending = s.local_handles.iter().flatten().copied().find(|id| {
            matches!(self.link(*id), Some(l) if l.remote_handle.is_none()
                && matches!(l.state, LinkState::AttachSent | LinkState::DetachSent)
                && l.name == a.name)
        });
        let max_message_size = self.config.max_message_size;
        if let Some(id) = pending {
            if let Some(s) = self.session_mut(ch) {
                s.by_remote_handle.insert(a.handle, id);
            }
            if let Some(l) = self.link_mut(id).filter(|l| l.state == LinkState::DetachSent) {
                l.remote_handle = Some(a.handle);
                return Ok(());
            }
            if let Some(l) = self.link_mut(id) {
                l.remote_handle = Some(a.handle);
                l.state = LinkState::Attached;
                l.peer_max_message_size = a.max_message_size.filter(|m| *m > 0).unwrap_or(u64::MAX);
                if l.role == Role::Receiver {
                    l.delivery_count = a.initial_delivery_count.unwrap_or(0);
                    l.credit_limit = l.delivery_count.wrapping_add(l.link_credit);
                }
                if l.role == Role::Sender {
                    if let Some(m) = a.rcv_settle_mode {
                        l.rcv_settle_mode = m;
                    }
                } else if let Some(m) = a.snd_settle_mode {
                    l.snd_settle_mode = m;
                }
            }
            self.events.push_back(Event::Attached { link: id, attach: Box::new(a) });
            return Ok(());
        }
        let role = a.role.peer();
        let delivery_count = if role == Role::Receiver { a.initial_delivery_count.unwrap_or(0) } else { 0 };
        let link = Link {
            channel: ch,
            name: a.name.clone(),
            role,
            state: LinkState::AttachReceived,
            local_handle: None,
            remote_handle: Some(a.handle),
            snd_settle_mode: a.snd_settle_mode(),
            rcv_settle_mode: a.rcv_settle_mode(),
            delivery_count,
            initial_delivery_count: delivery_count,
            link_credit: 0,
            credit_limit: delivery_count,
            drain: false,
            available: None,
            max_message_size,
            peer_max_message_size: a.max_message_size.filter(|m| *m > 0).unwrap_or(u64::MAX),
            partial: None,
            defer_detach: false,
            trail: Trail::default(),
            in_session: u32::MAX,
        };
        let id = self.alloc_link(link);
        if let Some(s) = self.session_mut(ch) {
            s.by_remote_handle.insert(a.handle, id);
        }
        self.events.push_back(Event::AttachRequested { link: id, channel: ch, attach: Box::new(a) });
        Ok(())
    }

    fn alloc_link(&mut self, mut link: Link) -> LinkId {
        if self.events.is_empty() {
            self.free_links.extend(self.freed_links.drain(..));
        } else if self.freed_links.len() > FREED_LINKS_HELD {
            self.free_links.extend(self.freed_links.pop_front());
        }
        let id = LinkId(self.free_links.last().copied().unwrap_or(self.links.len() as u32));
        if let Some(s) = self.sessions.get_mut(link.channel as usize).and_then(Option::as_mut) {
            link.in_session = s.links.len() as u32;
            s.links.push(id);
        }
        if let Some(i) = self.free_links.pop() {
            self.links[i as usize] = Some(link);
        } else {
            self.links.push(Some(link));
        }
        id
    }

    fn remote_link(&self, ch: u16, handle: u32) -> Result<LinkId, ProtocolError> {
        self.session(ch).and_then(|s| s.by_remote_handle.get(handle)).ok_or(ProtocolError::UnattachedHandle(ch))
    }

    fn on_flow(&mut self, ch: u16, f: &Flow) -> Result<(), ProtocolError> {
        let link = match f.handle {
            Some(h) => Some(self.remote_link(ch, h)?),
            None => None,
        };
        let s = self.session_mut(ch).ok_or(ProtocolError::IllegalState("no session"))?;
        // 2.5.6: remote-incoming-window = next-incoming-id(flow) + incoming-window(flow)
        // - next-outgoing-id(ours): the peer's window less the frames in flight, which
        // are counted in serial arithmetic (a window may be as large as u32::MAX). A
        // peer that shrank its window below them leaves no room (before, the negative
        // room wrapped around and was taken as the whole new window); one whose view is
        // ahead of ours (ids not sent yet) gets no more than its window. No
        // next-incoming-id: the peer has not had our BEGIN, and counts from our
        // initial-outgoing-id, 0.
        let their_next_in = f.next_incoming_id.unwrap_or(0);
        let in_flight = SerialNumber(s.next_outgoing_id).diff(SerialNumber(their_next_in));
        s.remote_incoming_window = match u32::try_from(in_flight) {
            Ok(n) => f.incoming_window.saturating_sub(n),
            Err(_) => f.incoming_window,
        };
        if !s.blocked.is_empty() {
            self.write_blocked(ch);
        }
        let Some(id) = link else {
            if f.echo() {
                self.write_session_flow(ch);
            }
            self.events.push_back(Event::SessionFlow { channel: ch });
            return Ok(());
        };
        let Some(l) = self.link_mut(id) else { return Ok(()) };
        if matches!(l.state, LinkState::DetachSent | LinkState::DetachReceived { .. }) {
            // The link is going, but the FLOW moved its session's window all the same.
            self.events.push_back(Event::SessionFlow { channel: ch });
            return Ok(());
        }
        match l.role {
            Role::Sender => {
                l.link_credit = effective_credit(
                    f.delivery_count,
                    f.link_credit.unwrap_or(0),
                    l.delivery_count,
                    l.initial_delivery_count,
                );
                l.drain = f.drain();
                let (credit, drain) = (l.link_credit, l.drain);
                if f.echo() {
                    self.write_link_flow(id);
                }
                self.events.push_back(Event::Credit { link: id, credit, drain });
            }
            Role::Receiver => {
                // The sender's delivery-count may have advanced (drain): our credit shrinks
                // with it. Only within what was granted: a count behind ours or past our
                // limit is not taken (it would move the limit check of its transfers, and
                // let a hostile sender past its credit).
                if let Some(dc) = f.delivery_count {
                    let ours = SerialNumber(l.delivery_count);
                    if SerialNumber(dc).diff(ours) >= 0 && SerialNumber(dc).diff(SerialNumber(l.credit_limit)) <= 0 {
                        let limit = ours.plus(l.link_credit);
                        l.link_credit = limit.diff(SerialNumber(dc)).clamp(0, u32::MAX as i64) as u32;
                        l.delivery_count = dc;
                    }
                }
                l.available = f.available;
                let (credit, drain, available) = (l.link_credit, f.drain(), f.available);
                if f.echo() {
                    self.write_link_flow(id);
                }
                self.events.push_back(Event::SenderFlow { link: id, credit, drain, available });
            }
        }
        Ok(())
    }

    /// A TRANSFER decoded by the fast path: the channel checks `on_performative`
    /// makes for every session frame, then [`Connection::on_transfer`].
    fn on_transfer_frame(&mut self, channel: u16, t: &Transfer, payload: Bytes) -> Result<(), ProtocolError> {
        let (local, ended) = self.local_session(channel)?;
        if ended {
            // Ignored until the peer acknowledges our END, but it still used an id.
            self.skip_transfer_id(local);
            return Ok(());
        }
        self.on_transfer(local, t, payload)
    }

    /// [`Connection::local_session`], or `None` when we have ended it.
    fn live_session(&self, channel: u16) -> Result<Option<u16>, ProtocolError> {
        let (local, ended) = self.local_session(channel)?;
        Ok((!ended).then_some(local))
    }

    /// The local session of the peer's channel, and whether we have ended it (then
    /// everything but END is ignored until the peer answers).
    fn local_session(&self, channel: u16) -> Result<(u16, bool), ProtocolError> {
        let Some(local) = self.remote_channels.get(channel as u32) else {
            return Err(ProtocolError::BadChannel("frame on a channel with no session"));
        };
        Ok((local, self.session(local).map(|s| s.state) == Some(SessionState::EndSent)))
    }

    /// A TRANSFER ignored on an ended session still used a transfer-id.
    fn skip_transfer_id(&mut self, local: u16) {
        if let Some(s) = self.session_mut(local) {
            s.next_incoming_id = s.next_incoming_id.wrapping_add(1);
        }
    }

    fn on_transfer(&mut self, ch: u16, t: &Transfer, payload: Bytes) -> Result<(), ProtocolError> {
        let s = self.session_mut(ch).ok_or(ProtocolError::IllegalState("no session"))?;
        if s.incoming_window == 0 {
            return Err(ProtocolError::WindowViolation(ch));
        }
        s.incoming_window -= 1;
        s.next_incoming_id = s.next_incoming_id.wrapping_add(1);
        self.window_dirty = true;
        let id = self.remote_link(ch, t.handle).map_err(|_| ProtocolError::ErrantTransfer(ch))?;
        let budget = self.config.max_reassembly_bytes;
        let Some(l) = self.links.get_mut(id.0 as usize).and_then(Option::as_mut) else { return Ok(()) };
        match l.state {
            LinkState::DetachSent | LinkState::DetachReceived { .. } => return Ok(()), // in flight at the detach
            // Pipelined behind its ATTACH, before any credit could have been granted.
            LinkState::AttachReceived => return Err(ProtocolError::TransferLimitExceeded(id)),
            _ => {}
        }
        if l.role != Role::Receiver {
            return Err(ProtocolError::Session(
                ch,
                condition::ERRANT_LINK,
                "transfer on a link whose receiver is the peer",
            ));
        }
        // A partial message taken out of its link is no longer counted; it is counted
        // again (with what this frame adds) only if it goes back.
        let taken = l.partial.take();
        if let Some(p) = &taken {
            self.partial_bytes -= p.data.capacity() as u64;
        }
        let mut partial = match taken {
            None => {
                let (Some(delivery_id), Some(tag)) = (t.delivery_id, t.delivery_tag.as_ref()) else {
                    if t.aborted() {
                        return Ok(()); // nothing was started
                    }
                    return Err(ProtocolError::Link(
                        id,
                        condition::INVALID_FIELD,
                        "first transfer without delivery-id or delivery-tag",
                    ));
                };
                if SerialNumber(l.delivery_count).diff(SerialNumber(l.credit_limit)) >= 0 {
                    return Err(ProtocolError::TransferLimitExceeded(id));
                }
                // A delivery begun, whatever becomes of it: the sender counted it.
                l.link_credit = l.link_credit.saturating_sub(1);
                l.delivery_count = l.delivery_count.wrapping_add(1);
                if t.aborted() {
                    // Aborted in its first frame: discarded, implicitly settled.
                    return Ok(());
                }
                let settled = t.settled();
                if payload.len() as u64 > l.max_message_size {
                    return Err(ProtocolError::MessageSizeExceeded(id));
                }
                if !t.more() {
                    check_settle_mode(id, l.snd_settle_mode, settled)?;
                    let message_format = t.message_format.unwrap_or(0);
                    self.deliver(ch, id, delivery_id, tag, settled, message_format, payload);
                    return Ok(());
                }
                // Counted by the memory it takes (its capacity, which grows by
                // doubling), not only by the bytes it holds so far.
                if self.partial_bytes + payload.len() as u64 > budget {
                    return Err(reassembly_budget_used_up(id));
                }
                let mut data = BytesMut::with_capacity(payload.len());
                data.extend_from_slice(&payload);
                self.partial_bytes += data.capacity() as u64;
                l.partial = Some(Partial {
                    delivery_id,
                    tag: tag.clone(),
                    settled,
                    message_format: t.message_format.unwrap_or(0),
                    data,
                });
                return Ok(());
            }
            Some(p) => p,
        };
        if t.delivery_id.is_some_and(|d| d != partial.delivery_id) {
            return Err(ProtocolError::Link(
                id,
                condition::INVALID_FIELD,
                "continuation transfer with another delivery-id",
            ));
        }
        if t.aborted() {
            let delivery_id = partial.delivery_id;
            self.events.push_back(Event::Aborted { link: id, delivery_id });
            return Ok(());
        }
        if (partial.data.len() + payload.len()) as u64 > l.max_message_size {
            return Err(ProtocolError::MessageSizeExceeded(id));
        }
        partial.data.extend_from_slice(&payload);
        partial.settled |= t.settled();
        if t.more() {
            if self.partial_bytes + partial.data.capacity() as u64 > budget {
                return Err(reassembly_budget_used_up(id));
            }
            self.partial_bytes += partial.data.capacity() as u64;
            l.partial = Some(partial);
            return Ok(());
        }
        // The settled flag may be set on any frame of the delivery (2.7.5): the mode is
        // checked against what it is once the delivery is complete.
        check_settle_mode(id, l.snd_settle_mode, partial.settled)?;
        let payload = partial.data.freeze();
        self.deliver(ch, id, partial.delivery_id, &partial.tag, partial.settled, partial.message_format, payload);
        Ok(())
    }

    /// A whole incoming delivery: tracked while unsettled, and queued as an event that
    /// is pushed empty and then filled in place. A `Delivery` built and then moved into
    /// the queue was copied with wide loads of fields narrow stores had just written (a
    /// store-forwarding stall on every delivery).
    #[allow(clippy::too_many_arguments)]
    #[inline(always)]
    fn deliver(
        &mut self,
        ch: u16,
        link: LinkId,
        delivery_id: u32,
        tag: &DeliveryTag,
        settled: bool,
        message_format: u32,
        payload: Bytes,
    ) {
        if !settled {
            if let Some(s) = self.sessions.get_mut(ch as usize).and_then(Option::as_mut) {
                s.in_unsettled.insert(delivery_id, link);
                if let Some(l) = self.links.get_mut(link.0 as usize).and_then(Option::as_mut) {
                    l.trail.push(delivery_id, |d| s.in_unsettled.get(*d) == Some(link));
                }
            }
        }
        self.events.push_back(EMPTY_DELIVERY);
        if let Some(Event::Delivery(d)) = self.events.back_mut() {
            d.link = link;
            d.delivery_id = delivery_id;
            d.tag.clone_from(tag);
            d.settled = settled;
            d.message_format = message_format;
            d.payload = payload;
        }
    }

    /// The state of a single delivery is taken out of `d`, not cloned.
    fn on_disposition(&mut self, ch: u16, d: &mut Disposition) -> Result<(), ProtocolError> {
        let Some(s) = self.session_mut(ch) else { return Ok(()) };
        // The peer as receiver speaks of our outgoing deliveries, and vice versa.
        let map = if d.role == Role::Receiver { &mut s.out_unsettled } else { &mut s.in_unsettled };
        let settled = d.settled();
        if d.last() == d.first {
            // One delivery (the common case): no list of hits.
            let id = d.first;
            let link = if settled { map.remove(id) } else { map.get(id) };
            if let Some(link) = link {
                if settled {
                    self.forget_delivery(link, id);
                }
                self.events.push_back(Event::Disposition { link, delivery_id: id, settled, state: d.state.take() });
            }
            return Ok(());
        }
        let first = SerialNumber(d.first);
        let last = SerialNumber(d.last());
        if last.diff(first) < 0 {
            // Before, read as a range wrapped around the whole id space: it settled
            // every delivery of the session outside [last, first].
            return Err(ProtocolError::Session(ch, condition::INVALID_FIELD, "disposition last before first"));
        }
        let span = d.last().wrapping_sub(d.first) as u64 + 1;
        // Walk whichever is smaller: the range, or the deliveries we know.
        let mut hits: Vec<(u32, LinkId)> = if span <= map.len() as u64 {
            (0..span as u32)
                .filter_map(|i| {
                    let id = d.first.wrapping_add(i);
                    map.get(id).map(|l| (id, l))
                })
                .collect()
        } else {
            map.iter().filter(|(id, _)| SerialNumber(*id).in_range(first, last)).collect()
        };
        hits.sort_by_key(|h| SerialNumber(h.0).diff(first));
        if settled {
            for (id, _) in &hits {
                map.remove(*id);
            }
            for (id, link) in &hits {
                self.forget_delivery(*link, *id);
            }
        }
        for (delivery_id, link) in hits {
            self.events.push_back(Event::Disposition { link, delivery_id, settled, state: d.state.clone() });
        }
        Ok(())
    }

    fn on_detach(&mut self, ch: u16, d: Detach) -> Result<(), ProtocolError> {
        let id = self.remote_link(ch, d.handle)?;
        let Some(l) = self.link(id) else { return Ok(()) };
        if l.state == LinkState::AttachReceived {
            // Detached before the application answered its ATTACH: the peer waits for
            // ours, so it gets one with no terminus (the link was not established),
            // then the answer to its DETACH. If no handle is free for it, the DETACH
            // cannot be answered on a handle of ours; the link is forgotten all the same.
            let _ = self.attach_reply(id, Attach::default());
        }
        let Some(l) = self.link(id) else { return Ok(()) };
        let we_detached = l.state == LinkState::DetachSent;
        if !we_detached && l.defer_detach && l.local_handle.is_some() {
            if let Some(l) = self.links.get_mut(id.0 as usize).and_then(Option::as_mut) {
                l.state = LinkState::DetachReceived { closed: d.closed() };
                if let Some(p) = l.partial.take() {
                    self.partial_bytes -= p.data.capacity() as u64;
                }
                // Nothing more goes out on it while its answer is held.
                let (channel, handle) = (l.channel, l.local_handle);
                if let Some(s) = self.sessions.get_mut(channel as usize).and_then(Option::as_mut) {
                    s.drop_blocked(handle);
                }
            }
            self.events.push_back(Event::Detached { link: id, closed: d.closed(), error: d.error, local: false });
            return Ok(());
        }
        if !we_detached {
            if let Some(h) = l.local_handle {
                let reply = Detach { handle: h, closed: Some(d.closed()), error: None };
                self.write(ch, &Performative::Detach(reply), &[]);
            }
            self.events.push_back(Event::Detached { link: id, closed: d.closed(), error: d.error, local: false });
        }
        self.free_link(id);
        Ok(())
    }

    fn on_end(&mut self, ch: u16, e: End) -> Result<(), ProtocolError> {
        self.write(ch, &Performative::End(End { error: None }), &[]);
        self.detach_all(ch, false);
        self.free_session(ch);
        self.events.push_back(Event::SessionEnded { channel: ch, error: e.error, local: false });
        Ok(())
    }

    // ---------------------------------------------------------------- errors

    fn fail(&mut self, e: ProtocolError) {
        let (scope, error) = e.to_amqp();
        self.events.push_back(Event::LocalError { scope, error: error.clone() });
        match scope {
            Scope::Connection => self.close(Some(error)),
            Scope::Session(ch) => self.end_session(ch, Some(error)),
            Scope::Link(id) => {
                // A link the application has not answered yet is answered here:
                // ATTACH with no terminus, then the DETACH with the error.
                if matches!(self.link(id), Some(l) if l.state == LinkState::AttachReceived) {
                    let _ = self.refuse_attach(id, error);
                } else {
                    self.detach(id, Some(error));
                }
            }
        }
    }

    // ---------------------------------------------------------------- application calls

    /// Close the connection (with an error, or gracefully). An OPEN is sent first when
    /// none was (2.4.5); the transport may be shut down when [`Self::is_closed`].
    pub fn close(&mut self, error: Option<Error>) {
        match self.phase {
            Phase::Closed | Phase::Closing => return,
            Phase::Header { .. }
            | Phase::SaslInit
            | Phase::SaslDecision
            | Phase::SaslMechanisms
            | Phase::SaslOutcome
                if !self.open_sent =>
            {
                // No AMQP layer yet: nothing to close politely.
                self.phase = Phase::Closed;
                self.events.push_back(Event::Closed { error, local: true });
                return;
            }
            _ => {}
        }
        self.flush_disposition();
        if !self.open_sent {
            self.send_open();
        }
        self.out.frame(FRAME_TYPE_AMQP, 0, &Performative::Close(Close { error: error.clone() }), &[]);
        self.closing_deadline = self.now + 2_000;
        // After an error nothing more is expected from the peer.
        self.phase = if error.is_some() { Phase::Closed } else { Phase::Closing };
        self.events.push_back(Event::Closed { error, local: true });
    }

    /// Begin a session; [`Event::SessionBegun`] follows when the peer answers.
    pub fn begin(&mut self) -> Result<u16, UsageError> {
        if !self.open_sent || matches!(self.phase, Phase::Closed | Phase::Closing) {
            return Err(UsageError::NotOpen);
        }
        let ch = self.alloc_channel().ok_or(UsageError::Exhausted)?;
        let s = self.new_session(SessionState::BeginSent);
        let begin = Begin {
            remote_channel: None,
            next_outgoing_id: s.next_outgoing_id,
            incoming_window: self.config.session_window,
            outgoing_window: self.config.session_window,
            handle_max: Some(self.config.handle_max),
            ..Default::default()
        };
        self.sessions[ch as usize] = Some(s);
        self.write(ch, &Performative::Begin(begin), &[]);
        Ok(ch)
    }

    /// End a session (its links are reported as [`Event::Detached`]).
    pub fn end_session(&mut self, ch: u16, error: Option<Error>) {
        let Some(s) = self.session_mut(ch) else { return };
        if s.state == SessionState::EndSent {
            return;
        }
        s.state = SessionState::EndSent;
        self.write(ch, &Performative::End(End { error: error.clone() }), &[]);
        self.detach_all(ch, true);
        self.events.push_back(Event::SessionEnded { channel: ch, error, local: true });
    }

    fn detach_all(&mut self, ch: u16, local: bool) {
        let ids: Vec<LinkId> = match self.session(ch) {
            Some(s) => {
                let mut v: Vec<LinkId> = s.local_handles.iter().flatten().copied().collect();
                v.extend(s.by_remote_handle.values());
                v.sort();
                v.dedup();
                v
            }
            None => return,
        };
        for id in ids {
            // A link we detached, or whose DETACH was reported and its answer held
            // (`defer_detach_reply`), had its Detached event already.
            if matches!(self.link(id), Some(l) if !matches!(l.state, LinkState::DetachSent | LinkState::DetachReceived { .. }))
            {
                self.events.push_back(Event::Detached { link: id, closed: false, error: None, local });
            }
            self.free_link(id);
        }
    }

    /// Attach a link on a session (we attach first); [`Event::Attached`] follows.
    /// `handle` in `attach` is assigned by the engine.
    pub fn attach(&mut self, ch: u16, mut attach: Attach) -> Result<LinkId, UsageError> {
        let handle = self.alloc_handle(ch)?;
        let role = attach.role;
        let initial = attach.initial_delivery_count.unwrap_or(0);
        if role == Role::Sender {
            attach.initial_delivery_count = Some(initial);
        }
        attach.handle = handle;
        let link = Link {
            channel: ch,
            name: attach.name.clone(),
            role,
            state: LinkState::AttachSent,
            local_handle: Some(handle),
            remote_handle: None,
            snd_settle_mode: attach.snd_settle_mode(),
            rcv_settle_mode: attach.rcv_settle_mode(),
            delivery_count: initial,
            initial_delivery_count: initial,
            link_credit: 0,
            credit_limit: initial,
            drain: false,
            available: None,
            max_message_size: self.config.max_message_size,
            peer_max_message_size: u64::MAX,
            partial: None,
            defer_detach: false,
            trail: Trail::default(),
            in_session: u32::MAX,
        };
        let id = self.alloc_link(link);
        if let Some(s) = self.session_mut(ch) {
            s.local_handles[handle as usize] = Some(id);
        }
        self.write(ch, &Performative::Attach(Box::new(attach)), &[]);
        Ok(id)
    }

    fn alloc_handle(&mut self, ch: u16) -> Result<u32, UsageError> {
        if !self.is_open() {
            return Err(UsageError::NotOpen);
        }
        // Our own limit with its grace (links the application may still refuse), and
        // never above what the peer accepts.
        let handle_max = self.config.handle_max.saturating_add(self.config.limit_grace);
        let s = self.session_mut(ch).ok_or(UsageError::UnknownEndpoint)?;
        if s.state != SessionState::Mapped && s.state != SessionState::BeginSent {
            return Err(UsageError::UnknownEndpoint);
        }
        let limit = handle_max.min(s.remote_handle_max);
        if let Some(i) = s.local_handles.iter().position(Option::is_none) {
            return Ok(i as u32);
        }
        if s.local_handles.len() as u64 > limit as u64 {
            return Err(UsageError::Exhausted);
        }
        s.local_handles.push(None);
        Ok((s.local_handles.len() - 1) as u32)
    }

    /// Answer the peer's ATTACH ([`Event::AttachRequested`]). Name, handle and role
    /// are filled in by the engine; for a sending link, initial-delivery-count too.
    pub fn attach_reply(&mut self, id: LinkId, mut reply: Attach) -> Result<(), UsageError> {
        let l = self.link(id).ok_or(UsageError::UnknownEndpoint)?;
        if l.state != LinkState::AttachReceived {
            return Err(UsageError::UnknownEndpoint);
        }
        let ch = l.channel;
        let handle = self.alloc_handle(ch)?;
        if let Some(s) = self.session_mut(ch) {
            s.local_handles[handle as usize] = Some(id);
        }
        let l = self.link_mut(id).ok_or(UsageError::UnknownEndpoint)?;
        l.local_handle = Some(handle);
        l.state = LinkState::Attached;
        reply.name = l.name.clone();
        reply.handle = handle;
        reply.role = l.role;
        if l.role == Role::Sender {
            reply.initial_delivery_count = Some(l.delivery_count);
        } else {
            reply.initial_delivery_count = None;
        }
        // Each end's mode is its own: the sender's snd-settle-mode and the receiver's
        // rcv-settle-mode. When we receive, the peer's declared snd-settle-mode stays
        // what its transfers are checked against.
        match l.role {
            Role::Sender => {
                if let Some(m) = reply.snd_settle_mode {
                    l.snd_settle_mode = m;
                }
            }
            Role::Receiver => {
                if let Some(m) = reply.rcv_settle_mode {
                    l.rcv_settle_mode = m;
                }
            }
        }
        if let Some(m) = reply.max_message_size.filter(|m| *m > 0) {
            l.max_message_size = l.max_message_size.min(m);
        }
        self.write(ch, &Performative::Attach(Box::new(reply)), &[]);
        Ok(())
    }

    /// Refuse the peer's ATTACH: answer with no terminus on our side, then detach
    /// with `error` (2.6.3).
    pub fn refuse_attach(&mut self, id: LinkId, error: Error) -> Result<(), UsageError> {
        // No terminus on our side tells the peer the link was not established.
        self.attach_reply(id, Attach::default())?;
        self.detach(id, Some(error));
        // The link waits for the peer's DETACH, by handle: its name (up to a frame's
        // size, whatever the application refused it for) is not kept meanwhile.
        if let Some(l) = self.link_mut(id) {
            l.name = String::new();
        }
        Ok(())
    }

    /// Hold the answer to the peer's DETACH of this link until [`Self::complete_detach`]
    /// (for links whose teardown must finish elsewhere first).
    pub fn defer_detach_reply(&mut self, id: LinkId) {
        if let Some(l) = self.link_mut(id) {
            l.defer_detach = true;
        }
    }

    /// Answer a DETACH held by [`Self::defer_detach_reply`] and forget the link.
    pub fn complete_detach(&mut self, id: LinkId) {
        let Some(l) = self.link(id) else { return };
        let LinkState::DetachReceived { closed } = l.state else { return };
        let (ch, handle) = (l.channel, l.local_handle);
        if let Some(h) = handle {
            self.write(ch, &Performative::Detach(Detach { handle: h, closed: Some(closed), error: None }), &[]);
        }
        self.free_link(id);
    }

    /// Detach (close) a link. An error is reported to the peer; our own
    /// [`Event::Detached`] is raised only when the engine detaches on its own (errors).
    pub fn detach(&mut self, id: LinkId, error: Option<Error>) {
        let Some(l) = self.link_mut(id) else { return };
        if l.state == LinkState::DetachSent {
            return;
        }
        let ch = l.channel;
        let was_attached_by_peer = l.remote_handle.is_some();
        l.state = LinkState::DetachSent;
        let dropped = l.partial.take().map_or(0, |p| p.data.capacity() as u64);
        let handle = l.local_handle;
        self.partial_bytes -= dropped;
        if let Some(h) = handle {
            let d = Detach { handle: h, closed: Some(true), error: error.clone() };
            self.write(ch, &Performative::Detach(d), &[]);
        }
        if error.is_some() {
            self.events.push_back(Event::Detached { link: id, closed: true, error, local: true });
        }
        // Deliveries of this link are no longer tracked by the session.
        let (role, keys) = self.link_mut(id).map(|l| (l.role, l.trail.take())).unwrap_or_default();
        if let Some(s) = self.session_mut(ch) {
            s.forget_link(id, role, keys);
            s.drop_blocked(handle);
        }
        if !was_attached_by_peer || handle.is_none() {
            // The peer never attached (or we never answered): nothing more will come.
            if handle.is_none() {
                self.free_link(id);
            }
        }
    }

    fn free_link(&mut self, id: LinkId) {
        let Some(mut l) = self.links.get_mut(id.0 as usize).and_then(Option::take) else { return };
        if let Some(p) = &l.partial {
            self.partial_bytes -= p.data.capacity() as u64;
        }
        self.freed_links.push_back(id.0);
        if let Some(s) = self.sessions.get_mut(l.channel as usize).and_then(Option::as_mut) {
            if let Some(h) = l.remote_handle {
                if s.by_remote_handle.get(h) == Some(id) {
                    s.by_remote_handle.remove(h);
                }
            }
            if let Some(h) = l.local_handle {
                if let Some(slot) = s.local_handles.get_mut(h as usize) {
                    *slot = None;
                }
            }
            s.forget_link(id, l.role, l.trail.take());
            s.drop_blocked(l.local_handle);
            let at = l.in_session as usize;
            if s.links.get(at) == Some(&id) {
                s.links.swap_remove(at);
                if let Some(&moved) = s.links.get(at) {
                    if let Some(m) = self.links.get_mut(moved.0 as usize).and_then(Option::as_mut) {
                        m.in_session = at as u32;
                    }
                }
            }
        }
    }

    fn free_session(&mut self, ch: u16) {
        let ids = self.session_mut(ch).map(|s| std::mem::take(&mut s.links)).unwrap_or_default();
        #[cfg(test)]
        SESSION_LINKS_FREED.with(|c| c.set(c.get() + ids.len() as u64));
        for id in ids {
            self.free_link(id);
        }
        if let Some(slot) = self.sessions.get_mut(ch as usize) {
            if let Some(s) = slot.take() {
                if let Some(rc) = s.remote_channel {
                    self.remote_channels.remove(rc as u32);
                }
            }
        }
    }

    /// Receiver links: set link-credit to `credit` and tell the sender.
    /// Credit is held below 2^31, so that what is advertised and what the serial
    /// arithmetic of the limit enforces agree.
    pub fn grant_credit(&mut self, id: LinkId, credit: u32, drain: bool) -> Result<(), UsageError> {
        let credit = credit.min(i32::MAX as u32);
        let l = self.link_mut(id).ok_or(UsageError::UnknownEndpoint)?;
        if l.role != Role::Receiver {
            return Err(UsageError::WrongRole);
        }
        if l.state != LinkState::Attached {
            return Err(UsageError::UnknownEndpoint);
        }
        l.link_credit = credit;
        l.drain = drain;
        let limit = SerialNumber(l.delivery_count).plus(credit);
        if limit.diff(SerialNumber(l.credit_limit)) > 0 {
            l.credit_limit = limit.0;
        }
        self.write_link_flow(id);
        Ok(())
    }

    /// Sender links: the drain is complete. delivery-count advances by the remaining
    /// credit, credit becomes 0, and FLOW(link-credit=0, drain=true) is sent at once.
    pub fn drain_complete(&mut self, id: LinkId) -> Result<(), UsageError> {
        let l = self.link_mut(id).ok_or(UsageError::UnknownEndpoint)?;
        if l.role != Role::Sender {
            return Err(UsageError::WrongRole);
        }
        l.delivery_count = l.delivery_count.wrapping_add(l.link_credit);
        l.link_credit = 0;
        l.drain = true;
        self.write_link_flow(id);
        if let Some(l) = self.link_mut(id) {
            l.drain = false;
        }
        Ok(())
    }

    /// Sender links: tell the receiver how many messages are available.
    pub fn set_available(&mut self, id: LinkId, available: u32) -> Result<(), UsageError> {
        let l = self.link_mut(id).ok_or(UsageError::UnknownEndpoint)?;
        l.available = Some(available);
        self.write_link_flow(id);
        Ok(())
    }

    /// Sender links: send one message. The delivery consumes one credit and as many
    /// session-window slots as frames; payloads above the peer's frame size are split
    /// into several TRANSFER frames, each a zero-copy slice of `payload`.
    pub fn send(&mut self, id: LinkId, tag: DeliveryTag, payload: Bytes, settled: bool) -> Result<u32, UsageError> {
        self.send_with_format(id, tag, payload, settled, 0)
    }

    /// [`Self::send`] with an explicit message-format.
    pub fn send_with_format(
        &mut self,
        id: LinkId,
        tag: DeliveryTag,
        payload: Bytes,
        settled: bool,
        message_format: u32,
    ) -> Result<u32, UsageError> {
        self.try_send(id, tag, payload, settled, message_format).map_err(|(e, _)| e)
    }

    /// [`Self::send_with_format`] that hands the payload back when it cannot be sent,
    /// so a caller that keeps it (to send later) need not clone it first.
    pub fn try_send(
        &mut self,
        id: LinkId,
        tag: DeliveryTag,
        payload: Bytes,
        settled: bool,
        message_format: u32,
    ) -> Result<u32, (UsageError, Bytes)> {
        match self.check_send(id) {
            Ok((ch, handle)) => Ok(self.send_checked(id, ch, handle, tag, payload, settled, message_format)),
            Err(e) => Err((e, payload)),
        }
    }

    /// [`Self::send`] of a payload the caller keeps (e.g. one body sent many times):
    /// a message that leaves at once in one frame, copied into the output buffer, is
    /// written from the borrowed bytes, so neither a clone nor a drop of `payload`
    /// (two atomic reference-count updates) is paid; anything else clones it.
    pub fn send_ref(
        &mut self,
        id: LinkId,
        tag: DeliveryTag,
        payload: &Bytes,
        settled: bool,
    ) -> Result<u32, UsageError> {
        let (ch, handle) = self.check_send(id)?;
        let frame_size = self.send_max_frame_size as usize;
        if payload.len() >= ZERO_COPY_THRESHOLD || payload.len() > frame_size - TRANSFER_OVERHEAD {
            return Ok(self.send_checked(id, ch, handle, tag, payload.clone(), settled, 0));
        }
        // `check_send` saw room in the peer's window and nothing blocked: the frame
        // leaves now, as the single-frame case of `send_checked` does.
        let delivery_id = self.start_delivery(id, ch, settled);
        if let Some(s) = self.sessions.get_mut(ch as usize).and_then(Option::as_mut) {
            s.remote_incoming_window -= 1;
            s.next_outgoing_id = s.next_outgoing_id.wrapping_add(1);
            let t = FirstTransfer { handle, delivery_id, tag: &tag, message_format: 0, settled };
            self.out.frame(FRAME_TYPE_AMQP, ch, &t, payload);
        }
        Ok(delivery_id)
    }

    /// Sender links: send `msg`, encoded straight into the output buffer as the
    /// payload of its TRANSFER frame (no buffer of its own, no copy of it, no
    /// reference count). A message larger than one frame goes out as [`Self::send`]
    /// sends its encoding. The same frames as `send` of `msg.to_bytes()`.
    pub fn send_message(
        &mut self,
        id: LinkId,
        tag: DeliveryTag,
        msg: &Message,
        settled: bool,
    ) -> Result<u32, UsageError> {
        let (ch, handle) = self.check_send(id)?;
        let room = self.send_max_frame_size as usize - TRANSFER_OVERHEAD;
        if msg.body_len() > room {
            return Ok(self.send_checked(id, ch, handle, tag, msg.to_bytes().freeze(), settled, 0));
        }
        // `check_send` saw room in the peer's window and nothing blocked: one frame
        // leaves now, unless the encoding turns out larger than a frame.
        let delivery_id = self.start_delivery(id, ch, settled);
        let t = FirstTransfer { handle, delivery_id, tag: &tag, message_format: 0, settled };
        let (at, len) = self.out.transfer_frame_message(ch, &t, msg);
        if len > room {
            // Rare (sections other than the body fill the frame): take the encoding
            // back and send it in several frames.
            let payload = self.out.take_back(at, len);
            self.send_frames(ch, handle, delivery_id, tag, payload, settled, 0);
        } else if let Some(s) = self.sessions.get_mut(ch as usize).and_then(Option::as_mut) {
            s.remote_incoming_window -= 1;
            s.next_outgoing_id = s.next_outgoing_id.wrapping_add(1);
        }
        Ok(delivery_id)
    }

    /// Whether link `id` can send now; its channel and local handle when it can.
    fn check_send(&mut self, id: LinkId) -> Result<(u16, u32), UsageError> {
        if !self.is_open() {
            return Err(UsageError::NotOpen);
        }
        let l = self.links.get(id.0 as usize).and_then(Option::as_ref).ok_or(UsageError::UnknownEndpoint)?;
        if l.role != Role::Sender {
            return Err(UsageError::WrongRole);
        }
        if l.state != LinkState::Attached {
            return Err(UsageError::UnknownEndpoint);
        }
        if l.link_credit == 0 {
            return Err(UsageError::NoCredit);
        }
        let s = self.sessions.get(l.channel as usize).and_then(Option::as_ref).ok_or(UsageError::UnknownEndpoint)?;
        if s.state != SessionState::Mapped {
            return Err(UsageError::UnknownEndpoint);
        }
        // Frames beyond the peer's window wait in the session (one delivery at most),
        // so a message of any size can go through a window of any size.
        if s.remote_incoming_window == 0 || !s.blocked.is_empty() {
            return Err(UsageError::SessionWindow);
        }
        let (ch, handle) = (l.channel, l.local_handle.unwrap_or(0));
        if s.out_unsettled.get(s.next_delivery_id).is_some() {
            // 2^32 deliveries went by on this session while one stayed unsettled: the
            // next id is still that one's, and a disposition of it would settle the
            // wrong delivery. The session ends (its unsettled deliveries go back, as
            // for any end); before, the old delivery's entry was replaced.
            self.end_session(
                ch,
                Some(Error::new(
                    "amqp:resource-limit-exceeded",
                    "delivery-ids wrapped around to an unsettled delivery",
                )),
            );
            return Err(UsageError::UnknownEndpoint);
        }
        Ok((ch, handle))
    }

    /// Send after [`Self::check_send`] passed.
    #[allow(clippy::too_many_arguments)]
    fn send_checked(
        &mut self,
        id: LinkId,
        ch: u16,
        handle: u32,
        tag: DeliveryTag,
        payload: Bytes,
        settled: bool,
        message_format: u32,
    ) -> u32 {
        if self.session(ch).is_none() {
            return 0;
        }
        let delivery_id = self.start_delivery(id, ch, settled);
        self.send_frames(ch, handle, delivery_id, tag, payload, settled, message_format);
        delivery_id
    }

    /// The TRANSFER frames of delivery `delivery_id` (started), as many as the peer's
    /// frame size needs; frames beyond the peer's window wait in the session.
    #[allow(clippy::too_many_arguments)]
    fn send_frames(
        &mut self,
        ch: u16,
        handle: u32,
        delivery_id: u32,
        tag: DeliveryTag,
        mut payload: Bytes,
        settled: bool,
        message_format: u32,
    ) {
        let frame_size = self.send_max_frame_size as usize;
        let chunk = frame_size - TRANSFER_OVERHEAD;
        let frames = payload.len().div_ceil(chunk).max(1) as u32;
        for i in 0..frames {
            let more = i + 1 < frames;
            let t = if i == 0 {
                first_transfer(handle, delivery_id, tag.clone(), message_format, settled, more)
            } else {
                Transfer { handle, more: more.then_some(true), ..Default::default() }
            };
            // The last (usually the only) frame takes the payload itself: no
            // reference count update.
            let part = if more { payload.split_to(chunk) } else { std::mem::take(&mut payload) };
            if let Some(s) = self.sessions.get_mut(ch as usize).and_then(Option::as_mut) {
                if s.remote_incoming_window > 0 && s.blocked.is_empty() {
                    s.remote_incoming_window -= 1;
                    s.next_outgoing_id = s.next_outgoing_id.wrapping_add(1);
                    self.out.transfer_frame(ch, &t, part);
                } else {
                    s.blocked.push_back((t, part));
                }
            }
        }
    }

    /// The bookkeeping of a new outgoing delivery on link `id` of session `ch` (which
    /// exists): its delivery-id, the unsettled entry, credit and delivery-count; any
    /// pending DISPOSITION is written first so frames keep their order.
    fn start_delivery(&mut self, id: LinkId, ch: u16, settled: bool) -> u32 {
        let mut delivery_id = 0;
        let mut session = self.sessions.get_mut(ch as usize).and_then(Option::as_mut);
        if let Some(s) = session.as_deref_mut() {
            delivery_id = s.next_delivery_id;
            s.next_delivery_id = delivery_id.wrapping_add(1);
            if !settled {
                s.out_unsettled.insert(delivery_id, id);
            }
        }
        if let Some(l) = self.links.get_mut(id.0 as usize).and_then(Option::as_mut) {
            l.link_credit -= 1;
            l.delivery_count = l.delivery_count.wrapping_add(1);
            if let (false, Some(s)) = (settled, session) {
                l.trail.push(delivery_id, |d| s.out_unsettled.get(*d) == Some(id));
            }
        }
        self.flush_disposition();
        delivery_id
    }

    /// Write waiting frames as far as the peer's window allows.
    fn write_blocked(&mut self, ch: u16) {
        self.flush_disposition();
        while let Some(s) = self.sessions.get_mut(ch as usize).and_then(Option::as_mut) {
            if s.remote_incoming_window == 0 {
                break;
            }
            let Some((t, part)) = s.blocked.pop_front() else { break };
            s.remote_incoming_window -= 1;
            s.next_outgoing_id = s.next_outgoing_id.wrapping_add(1);
            self.out.transfer_frame(ch, &t, part);
        }
    }

    /// Change the state of, or settle, a delivery we received (role receiver) or sent
    /// (role sender). Consecutive dispositions with the same state are coalesced into
    /// one DISPOSITION range.
    pub fn disposition(&mut self, id: LinkId, delivery_id: u32, settled: bool, state: Option<DeliveryState>) {
        let Some(l) = self.link(id) else { return };
        let (ch, role) = (l.channel, l.role);
        let Some(s) = self.session_mut(ch) else { return };
        if settled {
            s.unsettled_of(role).remove(delivery_id);
            self.forget_delivery(id, delivery_id);
        }
        if let Some((pch, p)) = &mut self.pending_disposition {
            if *pch == ch
                && p.role == role
                && p.settled() == settled
                && p.state == state
                && p.last().wrapping_add(1) == delivery_id
            {
                p.last = Some(delivery_id);
                return;
            }
        }
        self.flush_disposition();
        let d = Disposition {
            role,
            first: delivery_id,
            last: None,
            settled: settled.then_some(true),
            state,
            batchable: None,
        };
        self.pending_disposition = Some((ch, d));
    }

    fn flush_disposition(&mut self) {
        if let Some((ch, d)) = self.pending_disposition.take() {
            self.write(ch, &Performative::Disposition(d), &[]);
        }
    }

    /// The negotiated channel-max: min(ours, the peer's).
    pub fn channel_max(&self) -> u16 {
        self.channel_max
    }

    /// The peer's channel number of the session on local channel `ch`.
    pub fn session_remote_channel(&self, ch: u16) -> Option<u16> {
        self.session(ch).and_then(|s| s.remote_channel)
    }

    /// Flow state of a link.
    pub fn link_info(&self, id: LinkId) -> Option<LinkInfo> {
        self.link(id).map(|l| LinkInfo {
            channel: l.channel,
            name: l.name.clone(),
            role: l.role,
            handle: l.local_handle,
            delivery_count: l.delivery_count,
            link_credit: l.link_credit,
            drain: l.drain,
        })
    }

    /// Link credit currently available (sender) or granted (receiver).
    #[inline]
    pub fn link_credit(&self, id: LinkId) -> u32 {
        self.link(id).map_or(0, |l| l.link_credit)
    }

    /// The bytes received so far of a multi-frame delivery coming in on a receiving
    /// link, if one is: it took its credit at its first frame and becomes an
    /// [`Event::Delivery`] only at its last.
    pub fn receiving(&self, id: LinkId) -> Option<usize> {
        self.link(id).and_then(|l| l.partial.as_ref()).map(|p| p.data.len())
    }

    /// Frames of a delivery already sent wait in this session for the peer's window
    /// (the rest of a message larger than the window; written as it opens).
    pub fn frames_waiting(&self, ch: u16) -> bool {
        self.session(ch).is_some_and(|s| !s.blocked.is_empty())
    }

    /// Set our incoming window of session `ch` (the transfers the peer may send before
    /// our next FLOW) and tell the peer. The engine re-opens a window to its configured
    /// size as it is used; this sets it at once (a client that kept it shut opens it).
    pub fn set_incoming_window(&mut self, ch: u16, window: u32) -> Result<(), UsageError> {
        let s = self.session_mut(ch).filter(|s| s.state == SessionState::Mapped).ok_or(UsageError::UnknownEndpoint)?;
        s.incoming_window = window;
        self.write_session_flow(ch);
        Ok(())
    }

    /// Messages the peer's session window still admits from us on this channel.
    pub fn session_window(&self, ch: u16) -> u32 {
        self.session(ch).map_or(0, |s| s.remote_incoming_window)
    }

    /// Number of unsettled deliveries we track on a session (incoming, outgoing).
    pub fn unsettled_counts(&self, ch: u16) -> (usize, usize) {
        self.session(ch).map_or((0, 0), |s| (s.in_unsettled.len(), s.out_unsettled.len()))
    }

    /// The negotiated maximum frame size for what we send.
    pub fn send_max_frame_size(&self) -> u32 {
        self.send_max_frame_size
    }

    // ---------------------------------------------------------------- helpers

    fn session(&self, ch: u16) -> Option<&Session> {
        self.sessions.get(ch as usize).and_then(Option::as_ref)
    }

    fn session_mut(&mut self, ch: u16) -> Option<&mut Session> {
        self.sessions.get_mut(ch as usize).and_then(Option::as_mut)
    }

    /// Delivery `delivery_id` of link `id` is settled: gone from the link's trail when
    /// it was the oldest there (deliveries settled in order need no compaction).
    #[inline]
    fn forget_delivery(&mut self, id: LinkId, delivery_id: u32) {
        if let Some(l) = self.link_mut(id) {
            l.trail.forget(delivery_id);
        }
    }

    fn link(&self, id: LinkId) -> Option<&Link> {
        self.links.get(id.0 as usize).and_then(Option::as_ref)
    }

    fn link_mut(&mut self, id: LinkId) -> Option<&mut Link> {
        self.links.get_mut(id.0 as usize).and_then(Option::as_mut)
    }

    /// Write an AMQP frame on a local channel (translated to the peer's channel for
    /// sessions the peer began; our BEGIN goes on our own channel number).
    fn write(&mut self, ch: u16, p: &Performative, payload: &[u8]) {
        if !matches!(p, Performative::Disposition(_)) {
            self.flush_disposition();
        }
        // Outgoing frames use our local channel number (2.5.1: the sender's channel).
        self.out.frame(FRAME_TYPE_AMQP, ch, p, payload);
    }

    fn session_flow(&self, ch: u16) -> Option<Flow> {
        let s = self.session(ch)?;
        Some(Flow {
            next_incoming_id: Some(s.next_incoming_id),
            incoming_window: s.incoming_window,
            next_outgoing_id: s.next_outgoing_id,
            outgoing_window: self.config.session_window,
            ..Default::default()
        })
    }

    fn write_session_flow(&mut self, ch: u16) {
        if let Some(f) = self.session_flow(ch) {
            self.write(ch, &Performative::Flow(f), &[]);
        }
    }

    fn write_link_flow(&mut self, id: LinkId) {
        let Some(l) = self.link(id) else { return };
        let ch = l.channel;
        let Some(mut f) = self.session_flow(ch) else { return };
        f.handle = l.local_handle;
        f.delivery_count = Some(l.delivery_count);
        f.link_credit = Some(l.link_credit);
        f.available = l.available;
        f.drain = l.drain.then_some(true);
        if f.handle.is_some() {
            self.write(ch, &Performative::Flow(f), &[]);
        }
    }
}

/// The first (usually the only) TRANSFER frame of an outgoing delivery.
fn first_transfer(
    handle: u32,
    delivery_id: u32,
    tag: DeliveryTag,
    message_format: u32,
    settled: bool,
    more: bool,
) -> Transfer {
    Transfer {
        handle,
        delivery_id: Some(delivery_id),
        delivery_tag: Some(tag),
        message_format: Some(message_format),
        settled: Some(settled),
        more: more.then_some(true),
        ..Default::default()
    }
}

/// A complete incoming delivery, `settled` or not, against the sender's declared
/// snd-settle-mode.
fn check_settle_mode(id: LinkId, mode: SenderSettleMode, settled: bool) -> Result<(), ProtocolError> {
    let why = match (mode, settled) {
        (SenderSettleMode::Settled, false) => "unsettled transfer on a settled link",
        (SenderSettleMode::Unsettled, true) => "settled transfer on an unsettled link",
        _ => return Ok(()),
    };
    Err(ProtocolError::Link(id, condition::INVALID_FIELD, why))
}

/// Most freed link ids held back from reuse while events wait (see `freed_links`).
const FREED_LINKS_HELD: usize = 1024;

/// A multi-frame message on link `id` would pass the connection's reassembly budget.
fn reassembly_budget_used_up(id: LinkId) -> ProtocolError {
    ProtocolError::Link(
        id,
        condition::RESOURCE_LIMIT_EXCEEDED,
        "the connection's budget for messages being reassembled is used up",
    )
}

#[cfg(test)]
mod tests;
