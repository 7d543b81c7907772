//! Subscriber and publisher flow control in the manner of the Google Cloud Pub/Sub
//! client libraries, on the engine-driven client of [`crate::client`].
//!
//! * [`FlowController`]: one shared count of outstanding messages and bytes, with
//!   Pub/Sub's rule (paused while *either* limit is reached, resumed only when *both*
//!   are below) and a [`LimitExceededBehavior`] of Block, Error or Ignore.
//! * [`Subscriber`]: a receiving link and a pool of worker threads that share one
//!   [`FlowController`]. Link credit is granted from the flow-control state only, a
//!   message goes to a worker only once it fits, and it is settled with the worker's
//!   [`Outcome`] (which releases its reservation) when the worker returns.
//! * [`Publisher`]: a sending link that reserves before each send and releases on the
//!   broker's outcome, so its unsettled publishes stay within
//!   [`PublishFlowControlSettings`].
//!
//! # What is guaranteed, and where
//!
//! A message is *outstanding* (Pub/Sub's meaning) from the moment it is handed to the
//! worker pool (queued for a free worker, or being handled) until its settlement is
//! queued. Its size is [`message_size`]: the encoded message without its header
//! section. Brokers rewrite the header in transit (sluice adds delivery-count and
//! first-acquirer to queue deliveries) while sluice's watermark counts the message as
//! it was published, header included, so the subscriber's count of a message never
//! exceeds the broker's (they are equal when the publisher sent no header, as
//! [`crate::client::data_message`] and [`Publisher`] do not).
//!
//! 1. **Workers, any broker: exact.** At most `max_outstanding_messages` messages and
//!    `max_outstanding_bytes` bytes are outstanding at any instant; a single message
//!    larger than the byte limit is handed over only when nothing else is
//!    outstanding, and nothing else is handed over until it is settled. Enforced in
//!    the client. With Block, a delivery that does not fit waits in the subscriber
//!    (FIFO, still unsettled at the broker); with Error it is released back to the
//!    broker at once (counted in [`SubscriberStats::released_by_flow_control`]); with
//!    Ignore it is handed over anyway (and counted).
//! 2. **Link messages, any broker: exact.** Received-and-unsettled messages (waiting in
//!    the subscriber plus in workers) never exceed `max_outstanding_messages`: credit
//!    is only ever raised to `max_outstanding_messages − unsettled`, and not at all
//!    while either limit is reached, so `credit + unsettled ≤ max_outstanding_messages`
//!    holds at all times (summed over the links of subscribers sharing a controller).
//! 3. **Link bytes: exact with sluice, bounded by credit elsewhere.** A receiver cannot
//!    know a message's size before the credit for it is spent, so credit alone bounds
//!    messages, not bytes. The attach therefore carries sluice's broker-side
//!    watermarks, `x-opt-sluice-max-outstanding-messages` and
//!    `x-opt-sluice-max-outstanding-bytes` (= the settings); a sluice broker then sends
//!    a message only while the link's unsettled bytes stay within the limit, or when
//!    nothing is unsettled, so the received-and-unsettled bytes never exceed the limit
//!    except by one lone larger message. Other brokers ignore the properties: there,
//!    once the bytes received reach the limit no more credit is granted, but the
//!    credit already granted (at most `max_outstanding_messages − unsettled`) can
//!    still bring messages of any size; they wait in the subscriber's memory (Block)
//!    until they fit, so workers still see the limits, but the link does not.
//!    [`SubscriberStats::overshoots`] counts deliveries that arrived beyond a limit.
//!
//! # Limits
//!
//! * Credit is never lowered once granted: deliveries the broker has already sent
//!   under it cannot be recalled (and the engine treats a transfer at zero credit as a
//!   protocol violation), so a limit is enforced by not granting, not by revoking.
//! * No resume hysteresis (the Python client resumes below 80 % load): credit flows again
//!   as soon as both counts are below their limits; credit is topped up when it has
//!   fallen to half of what may be granted, which batches FLOW frames.
//! * No lease management: an ack deadline (sluice: `x-opt-sluice-ack-deadline-seconds`
//!   in [`SubscriberOptions::link`]) is not extended while a worker holds a message.
//! * For nodes that deliver unsettled (queues; sluice's events are pre-settled and have
//!   nothing outstanding).
//! * A [`FlowController`] shared by several subscribers: their links take credit from
//!   its one count (received-and-unsettled plus credit, summed over the links, never
//!   passes `max_outstanding_messages`), each up to an equal share of the limit and
//!   only what the others leave; a subscriber that frees room wakes those held back.
//!   A link granted more than its share before others joined drains its credit (the
//!   broker sends what it has under it or gives it back) and is granted its share
//!   again. Messages it has already received stay with it until settled, so a new
//!   subscriber may wait for them. A link whose node is quiet keeps its share of
//!   credit unused (credit cannot be moved between links), and with more subscribers
//!   than `max_outstanding_messages` some get none while the others keep the room
//!   busy (a link that frees room may take it again before those it wakes). Bytes are
//!   summed too (no grant once the links' bytes reach the limit), but sluice's
//!   broker-side byte watermark is per link.
//! * One connection and one link per subscriber or publisher; the publisher sends
//!   unsettled only (pre-settled publishes are never outstanding, so there is nothing
//!   to limit).
//! * The defaults follow the Pub/Sub subscriber (1000 messages, 100 MiB, Block); the
//!   Pub/Sub publisher defaults to Ignore, [`PublishFlowControlSettings`] to Block.

use crate::client::{Client, LinkOptions, WAIT};
use bytes::Bytes;
use sluice_proto::codec::{Fields, Symbol, Value};
use sluice_proto::engine::{Connection, Event, LinkId, UsageError};
use sluice_proto::types::{DeliveryState, DeliveryTag, RawMessage, Rejected};
use std::collections::{HashMap, VecDeque};
use std::fmt;
use std::io::{self, Read, Write};
use std::net::{Shutdown, TcpStream, ToSocketAddrs};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender, SyncSender};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// The sluice link property that caps a consumer's unsettled deliveries.
pub const MAX_OUTSTANDING_MESSAGES_PROPERTY: &str = "x-opt-sluice-max-outstanding-messages";
/// The sluice link property that caps a consumer's unsettled bytes.
pub const MAX_OUTSTANDING_BYTES_PROPERTY: &str = "x-opt-sluice-max-outstanding-bytes";

/// What a [`FlowController`] does with a request that does not fit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum LimitExceededBehavior {
    /// Wait until it fits (first come, first served).
    #[default]
    Block,
    /// Fail at once with a [`FlowError`].
    Error,
    /// Admit it anyway; it is still counted.
    Ignore,
}

/// Flow-control limits (Pub/Sub's `FlowControlSettings`). A limit of 0 means none
/// (a [`Subscriber`] needs `max_outstanding_messages` ≥ 1: credit is derived from it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FlowControlSettings {
    /// Most messages outstanding at once (default 1000).
    pub max_outstanding_messages: usize,
    /// Most bytes outstanding at once (default 100 MiB); one larger message is
    /// admitted when nothing else is outstanding.
    pub max_outstanding_bytes: usize,
    /// What a request that does not fit gets (default Block).
    pub limit_exceeded_behavior: LimitExceededBehavior,
}

impl Default for FlowControlSettings {
    fn default() -> Self {
        FlowControlSettings {
            max_outstanding_messages: 1000,
            max_outstanding_bytes: 100 * 1024 * 1024,
            limit_exceeded_behavior: LimitExceededBehavior::Block,
        }
    }
}

/// Why a reservation was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FlowError {
    /// Error behaviour: the message limit is reached.
    MaxOutstandingMessages,
    /// Error behaviour: the request does not fit the byte limit.
    MaxOutstandingBytes,
    /// [`FlowController::reserve_timeout`]: it did not fit in time.
    Timeout,
    /// The controller was closed (its publisher or subscriber is gone).
    Closed,
}

impl fmt::Display for FlowError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            FlowError::MaxOutstandingMessages => "flow control: max outstanding messages reached",
            FlowError::MaxOutstandingBytes => "flow control: max outstanding bytes reached",
            FlowError::Timeout => "flow control: no room in time",
            FlowError::Closed => "flow control: closed",
        })
    }
}

impl std::error::Error for FlowError {}

impl From<FlowError> for io::Error {
    fn from(e: FlowError) -> io::Error {
        let kind = match e {
            FlowError::Timeout => io::ErrorKind::TimedOut,
            FlowError::Closed => io::ErrorKind::NotConnected,
            _ => io::ErrorKind::WouldBlock,
        };
        io::Error::new(kind, e)
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

#[derive(Debug, Default)]
struct FlowState {
    messages: usize,
    bytes: usize,
    /// Blocked reservations in arrival order (tickets); only the front may proceed.
    waiters: VecDeque<u64>,
    next_ticket: u64,
    closed: bool,
    /// The subscribers' links that take their credit from this state.
    links: Vec<LinkShare>,
    next_link: u64,
    /// Most messages received and unsettled at the links at once (each link's last
    /// report plus its credit then: an upper bound of what they held).
    peak_held: usize,
}

/// What one subscriber's link holds, as it last reported: received and unsettled
/// messages and bytes, and the credit it has granted and not seen used.
#[derive(Debug)]
struct LinkShare {
    id: u64,
    unsettled: usize,
    bytes: usize,
    credit: usize,
    /// Its grant was held back by what the others hold: woken when they hold less.
    wants: bool,
    wake: Sender<Input<SubCmd>>,
}

impl LinkShare {
    fn held(&self) -> usize {
        self.unsettled.saturating_add(self.credit)
    }
}

/// What a subscriber does with its link's credit after [`FlowController::plan`].
#[derive(Debug, PartialEq, Eq)]
enum Plan {
    Nothing,
    /// Raise the credit to this.
    Grant(u32),
    /// It holds more than its share since others joined: ask the broker to use or
    /// return the credit (a drain), then grant again within the share.
    Drain,
}

impl FlowState {
    /// Does one more message of `bytes` fit? Messages first, then bytes; a request
    /// larger than the byte limit fits when nothing is outstanding.
    fn check(&self, s: &FlowControlSettings, bytes: usize) -> Result<(), FlowError> {
        let (max_m, max_b) = (s.max_outstanding_messages, s.max_outstanding_bytes);
        if max_m > 0 && self.messages >= max_m {
            return Err(FlowError::MaxOutstandingMessages);
        }
        if max_b == 0 || self.messages == 0 {
            return Ok(());
        }
        if self.bytes >= max_b || bytes > max_b - self.bytes {
            return Err(FlowError::MaxOutstandingBytes);
        }
        Ok(())
    }

    fn add(&mut self, bytes: usize) {
        self.messages += 1;
        self.bytes = self.bytes.saturating_add(bytes);
    }

    fn leave(&mut self, ticket: u64) {
        self.waiters.retain(|t| *t != ticket);
    }
}

#[derive(Debug)]
struct FlowShared {
    settings: FlowControlSettings,
    state: Mutex<FlowState>,
    changed: Condvar,
}

/// One flow-control state shared by every clone (workers, publishing threads).
#[derive(Debug, Clone)]
pub struct FlowController {
    shared: Arc<FlowShared>,
}

impl FlowController {
    /// A controller with nothing outstanding.
    pub fn new(settings: FlowControlSettings) -> FlowController {
        FlowController {
            shared: Arc::new(FlowShared { settings, state: Mutex::new(FlowState::default()), changed: Condvar::new() }),
        }
    }

    /// Its limits.
    pub fn settings(&self) -> &FlowControlSettings {
        &self.shared.settings
    }

    /// Reserve room for one message of `bytes`, as the behaviour says: Block waits
    /// until it fits (in arrival order), Error fails when it does not fit, Ignore
    /// always succeeds and still counts. Every `Ok` must be matched by one
    /// [`Self::release`] of the same size.
    pub fn reserve(&self, bytes: usize) -> Result<(), FlowError> {
        self.acquire(bytes, None)
    }

    /// [`Self::reserve`], giving up with [`FlowError::Timeout`] after `timeout` (Block).
    pub fn reserve_timeout(&self, bytes: usize, timeout: Duration) -> Result<(), FlowError> {
        self.acquire(bytes, Some(Instant::now() + timeout))
    }

    /// Reserve only if it fits now (and nobody is waiting ahead), whatever the behaviour.
    pub fn try_reserve(&self, bytes: usize) -> bool {
        let mut st = lock(&self.shared.state);
        if st.closed || !st.waiters.is_empty() || st.check(&self.shared.settings, bytes).is_err() {
            return false;
        }
        st.add(bytes);
        true
    }

    fn acquire(&self, bytes: usize, deadline: Option<Instant>) -> Result<(), FlowError> {
        let s = &self.shared.settings;
        let mut st = lock(&self.shared.state);
        if st.closed {
            return Err(FlowError::Closed);
        }
        match s.limit_exceeded_behavior {
            LimitExceededBehavior::Ignore => {
                st.add(bytes);
                Ok(())
            }
            LimitExceededBehavior::Error => {
                st.check(s, bytes)?;
                st.add(bytes);
                Ok(())
            }
            LimitExceededBehavior::Block => {
                if st.waiters.is_empty() && st.check(s, bytes).is_ok() {
                    st.add(bytes);
                    return Ok(());
                }
                let ticket = st.next_ticket;
                st.next_ticket += 1;
                st.waiters.push_back(ticket);
                loop {
                    if st.closed {
                        st.leave(ticket);
                        return Err(FlowError::Closed);
                    }
                    if st.waiters.front() == Some(&ticket) && st.check(s, bytes).is_ok() {
                        st.waiters.pop_front();
                        st.add(bytes);
                        // The next in line may fit too.
                        self.shared.changed.notify_all();
                        return Ok(());
                    }
                    st = match deadline {
                        None => self.shared.changed.wait(st).unwrap_or_else(PoisonError::into_inner),
                        Some(d) => {
                            let left = d.saturating_duration_since(Instant::now());
                            if left.is_zero() {
                                st.leave(ticket);
                                self.shared.changed.notify_all();
                                return Err(FlowError::Timeout);
                            }
                            self.shared.changed.wait_timeout(st, left).unwrap_or_else(PoisonError::into_inner).0
                        }
                    };
                }
            }
        }
    }

    /// Give back the room of one message of `bytes`.
    pub fn release(&self, bytes: usize) {
        let mut st = lock(&self.shared.state);
        st.messages = st.messages.saturating_sub(1);
        st.bytes = st.bytes.saturating_sub(bytes);
        drop(st);
        self.shared.changed.notify_all();
    }

    /// (messages, bytes) outstanding now.
    pub fn outstanding(&self) -> (usize, usize) {
        let st = lock(&self.shared.state);
        (st.messages, st.bytes)
    }

    /// Pub/Sub's rule: paused while either limit is reached.
    pub fn is_paused(&self) -> bool {
        let s = &self.shared.settings;
        let st = lock(&self.shared.state);
        (s.max_outstanding_messages > 0 && st.messages >= s.max_outstanding_messages)
            || (s.max_outstanding_bytes > 0 && st.bytes >= s.max_outstanding_bytes)
    }

    /// Most messages the subscribers sharing this controller had received and not yet
    /// settled at once, counted with the credit they had granted (what the broker
    /// could have sent them): never more than `max_outstanding_messages`.
    pub fn peak_held_messages(&self) -> usize {
        lock(&self.shared.state).peak_held
    }

    fn join(&self, wake: Sender<Input<SubCmd>>) -> u64 {
        let mut st = lock(&self.shared.state);
        let id = st.next_link;
        st.next_link += 1;
        st.links.push(LinkShare { id, unsettled: 0, bytes: 0, credit: 0, wants: false, wake });
        id
    }

    /// The link is gone: the others' shares grow, so they are woken.
    fn part(&self, id: u64) {
        let mut st = lock(&self.shared.state);
        st.links.retain(|l| l.id != id);
        for l in &mut st.links {
            l.wants = false;
            let _ = l.wake.send(Input::Cmd(SubCmd::Wake));
        }
    }

    /// Record what link `id` holds now and decide its credit, all under one lock so
    /// that the links' credit plus unsettled messages never pass
    /// `max_outstanding_messages` together. Each link may hold up to an equal share
    /// of the limit (all of it when alone) and only what the others leave; a link that
    /// holds more than its share (others joined after its grant) drains its credit.
    /// When it holds less than it last reported, the links held back are woken.
    fn plan(&self, id: u64, unsettled: usize, bytes: usize, credit: u32, draining: bool) -> Plan {
        let s = &self.shared.settings;
        let mut st = lock(&self.shared.state);
        let st = &mut *st;
        let Some(me) = st.links.iter().position(|l| l.id == id) else { return Plan::Nothing };
        let credit = credit as usize;
        let l = &mut st.links[me];
        let freed = unsettled.saturating_add(credit) < l.held() || bytes < l.bytes;
        (l.unsettled, l.bytes, l.credit) = (unsettled, bytes, credit);
        let (mut others_held, mut others_bytes, mut all_held) = (0usize, 0usize, 0usize);
        for (i, l) in st.links.iter_mut().enumerate() {
            all_held = all_held.saturating_add(l.held());
            if i == me {
                continue;
            }
            others_held = others_held.saturating_add(l.held());
            others_bytes = others_bytes.saturating_add(l.bytes);
            if freed && l.wants {
                l.wants = false;
                let _ = l.wake.send(Input::Cmd(SubCmd::Wake));
            }
        }
        st.peak_held = st.peak_held.max(all_held);
        let max_m = s.max_outstanding_messages;
        let share = (max_m / st.links.len()).max(1);
        if draining {
            return Plan::Nothing;
        }
        if credit > 0 && unsettled + credit > share {
            return Plan::Drain;
        }
        let room = max_m.saturating_sub(others_held).saturating_sub(unsettled);
        let fair = share.saturating_sub(unsettled);
        let bytes_full = s.max_outstanding_bytes > 0 && others_bytes.saturating_add(bytes) >= s.max_outstanding_bytes;
        let l = &mut st.links[me];
        l.wants = room < fair || (bytes_full && others_bytes > 0);
        let target = room.min(fair).min(u32::MAX as usize);
        if bytes_full || target == 0 || target <= credit || credit > target / 2 {
            return Plan::Nothing;
        }
        l.credit = target;
        st.peak_held = st.peak_held.max(others_held + unsettled + target);
        Plan::Grant(target as u32)
    }

    /// Refuse every further reservation and wake the blocked ones with
    /// [`FlowError::Closed`]. Releases still count down.
    pub fn close(&self) {
        lock(&self.shared.state).closed = true;
        self.shared.changed.notify_all();
    }
}

/// The size flow control counts for an encoded message: everything but its header
/// section (see the module documentation). Not a valid message: its length.
pub fn message_size(payload: &Bytes) -> usize {
    let header = RawMessage::parse(payload).ok().and_then(|m| m.header_section().map(<[u8]>::len)).unwrap_or(0);
    payload.len() - header
}

// ------------------------------------------------------------------ transport

enum Input<C> {
    Bytes(Vec<u8>),
    Eof,
    Cmd(C),
}

/// The engine, the socket, and one channel on which a reader thread delivers the
/// socket's bytes and other threads their commands: the I/O thread sleeps on that
/// channel alone, so a worker's settlement is written at once.
struct Wire<C> {
    conn: Connection,
    stream: TcpStream,
    start: Instant,
    rx: Receiver<Input<C>>,
    reader: Option<JoinHandle<()>>,
    out: Vec<u8>,
    /// Events the client had seen before it was taken over.
    early: VecDeque<Event>,
}

impl<C: Send + 'static> Wire<C> {
    fn new(client: Client) -> io::Result<(Wire<C>, Sender<Input<C>>)> {
        let (conn, stream, events, start) = client.into_parts();
        stream.set_read_timeout(None)?;
        let mut rd = stream.try_clone()?;
        let (tx, rx) = mpsc::channel();
        let rtx = tx.clone();
        let reader = std::thread::Builder::new().name("sluice-flow-reader".into()).spawn(move || {
            let mut buf = vec![0u8; 64 * 1024];
            loop {
                match rd.read(&mut buf) {
                    Ok(0) => break,
                    Ok(n) => {
                        if rtx.send(Input::Bytes(buf[..n].to_vec())).is_err() {
                            return;
                        }
                    }
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    Err(_) => break,
                }
            }
            let _ = rtx.send(Input::Eof);
        })?;
        Ok((Wire { conn, stream, start, rx, reader: Some(reader), out: Vec::new(), early: events }, tx))
    }

    fn now(&self) -> u64 {
        self.start.elapsed().as_millis() as u64
    }

    /// Sleep until input, a command or the engine's next deadline (at most `max`),
    /// then take everything that is waiting: bytes go to the engine, commands to `cmds`.
    fn wait(&mut self, max: Duration, cmds: &mut Vec<C>) {
        let now = self.now();
        if self.conn.input_paused() {
            // Frames left behind a full event queue (drained by now) come first.
            self.conn.process(now);
            return;
        }
        let until = self.conn.poll_timeout().map_or(max, |t| Duration::from_millis(t.saturating_sub(now)).min(max));
        match self.rx.recv_timeout(until) {
            Ok(i) => self.take(i, cmds),
            Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => self.conn.handle_eof(),
        }
        // Bounded, so events and writes are not starved by a flood of input.
        for _ in 0..1024 {
            match self.rx.try_recv() {
                Ok(i) => self.take(i, cmds),
                Err(_) => break,
            }
        }
        let now = self.now();
        self.conn.handle_timeout(now);
    }

    fn take(&mut self, i: Input<C>, cmds: &mut Vec<C>) {
        match i {
            Input::Bytes(b) => {
                let now = self.now();
                self.conn.handle_input(&b, now);
            }
            Input::Eof => self.conn.handle_eof(),
            Input::Cmd(c) => cmds.push(c),
        }
    }

    /// Write everything the engine has queued.
    fn flush(&mut self) -> io::Result<()> {
        while let Some(chunk) = self.conn.poll_transmit() {
            self.out.extend_from_slice(&chunk);
        }
        if !self.out.is_empty() {
            let r = self.stream.write_all(&self.out);
            self.out.clear();
            r?;
        }
        Ok(())
    }

    /// Close the connection (waiting a little for the peer's CLOSE), end the reader.
    fn finish(&mut self, cmds: &mut Vec<C>) {
        if self.conn.is_open() {
            self.conn.close(None);
            let deadline = Instant::now() + Duration::from_secs(1);
            while self.flush().is_ok() && !self.conn.is_closed() && Instant::now() < deadline {
                self.wait(Duration::from_millis(50), cmds);
                while self.conn.poll_event().is_some() {}
            }
        }
        let _ = self.stream.shutdown(Shutdown::Both);
        if let Some(r) = self.reader.take() {
            let _ = r.join();
        }
    }
}

fn link_error(what: &str, error: Option<sluice_proto::types::Error>) -> io::Error {
    match error {
        Some(e) => io::Error::new(
            io::ErrorKind::ConnectionAborted,
            format!("{what}: {}: {}", e.condition, e.description.unwrap_or_default()),
        ),
        None => io::Error::new(io::ErrorKind::ConnectionAborted, what.to_owned()),
    }
}

fn set_property(props: &mut Option<Fields>, key: &str, value: Value) {
    let f = props.get_or_insert_with(|| Fields(Vec::new()));
    f.0.retain(|(k, _)| k.as_str() != key);
    f.0.push((Symbol::new(key), value));
}

// ----------------------------------------------------------------- subscriber

/// A received message, as handed to a worker.
#[derive(Debug, Clone)]
pub struct Message {
    payload: Bytes,
    size: usize,
    delivery_id: u32,
}

impl Message {
    /// The encoded AMQP message as delivered.
    pub fn payload(&self) -> &Bytes {
        &self.payload
    }

    /// Its size as flow control counts it ([`message_size`]).
    pub fn size(&self) -> usize {
        self.size
    }

    /// Its session-scoped delivery-id.
    pub fn delivery_id(&self) -> u32 {
        self.delivery_id
    }

    /// The message's sections (None if it does not parse).
    pub fn raw(&self) -> Option<RawMessage> {
        RawMessage::parse(&self.payload).ok()
    }

    /// The body's data sections, concatenated (None: not a data body, or invalid).
    pub fn data(&self) -> Option<Vec<u8>> {
        self.raw()?.data().ok().flatten()
    }
}

/// How a worker settles a message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Done with it (Pub/Sub's ack).
    Accept,
    /// Give it back for redelivery (Pub/Sub's nack).
    Release,
    /// Refuse it for good, with a reason.
    Reject(String),
}

impl Outcome {
    fn state(self) -> DeliveryState {
        match self {
            Outcome::Accept => DeliveryState::Accepted,
            Outcome::Release => DeliveryState::Released,
            Outcome::Reject(why) => DeliveryState::Rejected(Box::new(Rejected {
                error: Some(sluice_proto::types::Error::new("amqp:internal-error", why)),
            })),
        }
    }
}

/// How a [`Subscriber`] attaches and runs.
#[derive(Debug, Clone)]
pub struct SubscriberOptions {
    /// The limits (ignored when [`Self::flow_controller`] is given).
    pub flow_control: FlowControlSettings,
    /// Use this controller (and its settings) instead of a new one, e.g. to watch it
    /// from the handler or to share one state among several subscribers (their
    /// links' credit then comes from its one count: see the module documentation).
    pub flow_controller: Option<FlowController>,
    /// Worker threads sharing the flow-control state (default 4, at least 1).
    pub workers: usize,
    /// Container-id for [`Subscriber::start`].
    pub container_id: String,
    /// Link name.
    pub link_name: String,
    /// Further link options (filter, properties, expiry policy). `presettled` is
    /// ignored: flow control needs settlement.
    pub link: LinkOptions,
    /// Send sluice's watermark link properties (default true).
    pub broker_watermarks: bool,
}

impl Default for SubscriberOptions {
    fn default() -> Self {
        SubscriberOptions {
            flow_control: FlowControlSettings::default(),
            flow_controller: None,
            workers: 4,
            container_id: "sluice-flow-subscriber".into(),
            link_name: "sluice-flow-subscriber".into(),
            link: LinkOptions::default(),
            broker_watermarks: true,
        }
    }
}

/// What a [`Subscriber`] has done so far.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SubscriberStats {
    /// Deliveries received.
    pub received: u64,
    /// Settled accepted by a worker.
    pub accepted: u64,
    /// Settled released by a worker (or by a panicking handler).
    pub released: u64,
    /// Settled rejected by a worker.
    pub rejected: u64,
    /// Error behaviour: released back to the broker because they did not fit.
    pub released_by_flow_control: u64,
    /// Released back to the broker because the subscriber was stopping.
    pub released_on_stop: u64,
    /// Most messages received and unsettled at once (waiting plus in workers).
    pub peak_unsettled_messages: usize,
    /// Most bytes received and unsettled at once.
    pub peak_unsettled_bytes: usize,
    /// Deliveries that arrived beyond a limit (more messages than the limit, or more
    /// bytes than the limit held by more than one message). 0 with sluice.
    pub overshoots: u64,
    /// FLOW frames sent to raise the credit.
    pub credit_grants: u64,
    /// Drains of its credit: it held more than its share of a flow controller that
    /// others joined.
    pub drains: u64,
    /// Why the subscriber stopped on its own, if it did.
    pub error: Option<String>,
}

enum SubCmd {
    Done {
        delivery_id: u32,
        size: usize,
        settled: bool,
        outcome: Outcome,
    },
    Stop,
    /// Another subscriber sharing the flow controller holds less now.
    Wake,
}

struct Job {
    msg: Message,
    settled: bool,
}

/// A flow-controlled consumer: one receiving link, `workers` threads, one state.
pub struct Subscriber {
    tx: Sender<Input<SubCmd>>,
    flow: FlowController,
    stats: Arc<Mutex<SubscriberStats>>,
    io: Option<JoinHandle<io::Result<()>>>,
    workers: Vec<JoinHandle<()>>,
}

impl fmt::Debug for Subscriber {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Subscriber").field("flow", &self.flow).field("workers", &self.workers.len()).finish()
    }
}

impl Subscriber {
    /// Connect to `addr` and consume from `address`, calling `handler` on a worker
    /// thread for each message.
    pub fn start<F>(addr: impl ToSocketAddrs, address: &str, options: SubscriberOptions, handler: F) -> io::Result<Self>
    where
        F: Fn(Message) -> Outcome + Send + Sync + 'static,
    {
        let client = Client::connect(addr, &options.container_id)?;
        Self::start_on(client, address, options, handler)
    }

    /// [`Self::start`] on a connected client (any SASL or engine configuration). The
    /// client is taken over: a new session is begun on it.
    pub fn start_on<F>(mut client: Client, address: &str, options: SubscriberOptions, handler: F) -> io::Result<Self>
    where
        F: Fn(Message) -> Outcome + Send + Sync + 'static,
    {
        let flow = options.flow_controller.clone().unwrap_or_else(|| FlowController::new(options.flow_control));
        let settings = *flow.settings();
        if settings.max_outstanding_messages == 0 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "a subscriber needs max_outstanding_messages >= 1",
            ));
        }
        let mut link_opts = options.link.clone();
        link_opts.presettled = false;
        if options.broker_watermarks {
            let msgs = settings.max_outstanding_messages.min(u32::MAX as usize) as u32;
            set_property(&mut link_opts.properties, MAX_OUTSTANDING_MESSAGES_PROPERTY, Value::Uint(msgs));
            if settings.max_outstanding_bytes > 0 {
                let bytes = Value::Ulong(settings.max_outstanding_bytes as u64);
                set_property(&mut link_opts.properties, MAX_OUTSTANDING_BYTES_PROPERTY, bytes);
            }
        }
        let ch = client.begin()?;
        let link = client.attach_receiver(ch, &options.link_name, Some(address), &link_opts)?;
        let (wire, tx) = Wire::new(client)?;

        let (job_tx, job_rx) = mpsc::channel::<Job>();
        let job_rx = Arc::new(Mutex::new(job_rx));
        let handler = Arc::new(handler);
        let mut workers = Vec::new();
        for i in 0..options.workers.max(1) {
            let (jobs, handler, done) = (job_rx.clone(), handler.clone(), tx.clone());
            let w = std::thread::Builder::new().name(format!("sluice-flow-worker-{i}")).spawn(move || loop {
                let job = lock(&jobs).recv();
                let Ok(Job { msg, settled }) = job else { return };
                let (delivery_id, size) = (msg.delivery_id, msg.size);
                // A panicking handler releases the message instead of leaking its room.
                let outcome = catch_unwind(AssertUnwindSafe(|| handler(msg))).unwrap_or(Outcome::Release);
                if done.send(Input::Cmd(SubCmd::Done { delivery_id, size, settled, outcome })).is_err() {
                    return;
                }
            })?;
            workers.push(w);
        }

        let stats = Arc::new(Mutex::new(SubscriberStats::default()));
        let share = flow.join(tx.clone());
        let io = SubIo {
            wire,
            link,
            share,
            draining: false,
            flow: flow.clone(),
            owns_flow: options.flow_controller.is_none(),
            reserved: (0, 0),
            settings,
            jobs: Some(job_tx),
            waiting: VecDeque::new(),
            unsettled: 0,
            unsettled_bytes: 0,
            in_workers: 0,
            stopping: false,
            stats: SubscriberStats::default(),
            shared: stats.clone(),
        };
        let io = match std::thread::Builder::new().name("sluice-flow-subscriber".into()).spawn(move || io.run()) {
            Ok(io) => io,
            Err(e) => {
                // Its share would stay taken from the others for good.
                flow.part(share);
                return Err(e);
            }
        };
        Ok(Subscriber { tx, flow, stats, io: Some(io), workers })
    }

    /// The shared flow-control state (outstanding = in workers).
    pub fn flow_controller(&self) -> &FlowController {
        &self.flow
    }

    /// A snapshot of the counters.
    pub fn stats(&self) -> SubscriberStats {
        lock(&self.stats).clone()
    }

    /// True while the subscriber runs (false once it stopped on an error).
    pub fn is_running(&self) -> bool {
        self.io.as_ref().is_some_and(|h| !h.is_finished())
    }

    /// Stop: no more credit, messages not yet handed over are released to the broker,
    /// the workers finish what they hold and it is settled, then the connection
    /// closes. Returns the final counters, or the error that stopped it earlier.
    pub fn stop(mut self) -> io::Result<SubscriberStats> {
        self.shutdown()
    }

    fn shutdown(&mut self) -> io::Result<SubscriberStats> {
        let _ = self.tx.send(Input::Cmd(SubCmd::Stop));
        let r = match self.io.take() {
            Some(h) => h.join().unwrap_or_else(|_| Err(io::Error::other("subscriber I/O thread panicked"))),
            None => Ok(()),
        };
        for w in self.workers.drain(..) {
            let _ = w.join();
        }
        r.map(|()| self.stats())
    }
}

impl Drop for Subscriber {
    fn drop(&mut self) {
        if self.io.is_some() {
            let _ = self.shutdown();
        }
    }
}

struct SubIo {
    wire: Wire<SubCmd>,
    link: LinkId,
    /// Its entry among the links sharing the flow controller.
    share: u64,
    /// A drain of its credit is on its way (no grant until the broker answers).
    draining: bool,
    flow: FlowController,
    /// The controller was made for this subscriber (not given in the options, where
    /// others may share it): closed when it ends.
    owns_flow: bool,
    /// Room reserved for messages handed to workers and not released yet: given back
    /// when the subscriber ends without their settlements (an error, a closed link).
    reserved: (usize, usize),
    settings: FlowControlSettings,
    jobs: Option<Sender<Job>>,
    /// Received, not yet handed to a worker (Block: until it fits).
    waiting: VecDeque<Job>,
    /// Received and unsettled: waiting plus in workers.
    unsettled: usize,
    unsettled_bytes: usize,
    in_workers: usize,
    stopping: bool,
    stats: SubscriberStats,
    shared: Arc<Mutex<SubscriberStats>>,
}

impl SubIo {
    fn run(mut self) -> io::Result<()> {
        let mut cmds = Vec::new();
        let early = std::mem::take(&mut self.wire.early);
        let mut result = early.into_iter().try_for_each(|e| self.on_event(e));
        while result.is_ok() && !(self.stopping && self.in_workers == 0) {
            result = self.step(&mut cmds);
        }
        // Workers end once the job queue closes; what never reached them goes back.
        self.jobs = None;
        self.stopping = true;
        self.dispatch();
        let _ = self.wire.flush();
        self.wire.finish(&mut cmds);
        // What workers still hold never comes back here (their settlements go nowhere
        // once this thread ends): its room is freed now, or a shared controller would
        // count it for good. A controller given in the options is not closed: others
        // may go on using it.
        let (messages, bytes) = std::mem::take(&mut self.reserved);
        for n in 0..messages {
            self.flow.release(if n == 0 { bytes } else { 0 });
        }
        self.flow.part(self.share);
        if self.owns_flow {
            self.flow.close();
        }
        if let Err(e) = &result {
            self.stats.error = Some(e.to_string());
        }
        *lock(&self.shared) = self.stats.clone();
        result
    }

    fn step(&mut self, cmds: &mut Vec<SubCmd>) -> io::Result<()> {
        // While messages wait for room, look again soon: room may also be freed by
        // others sharing the flow controller, who cannot wake this thread.
        let nap = if self.waiting.is_empty() { 500 } else { 20 };
        self.wire.wait(Duration::from_millis(nap), cmds);
        for c in cmds.drain(..) {
            match c {
                SubCmd::Done { delivery_id, size, settled, outcome } => {
                    // The room is free before the broker hears of the settlement, so a
                    // broker that then sends more never finds the client still full.
                    self.flow.release(size);
                    self.reserved = (self.reserved.0 - 1, self.reserved.1 - size);
                    self.in_workers -= 1;
                    self.unsettled -= 1;
                    self.unsettled_bytes -= size;
                    match outcome {
                        Outcome::Accept => self.stats.accepted += 1,
                        Outcome::Release => self.stats.released += 1,
                        Outcome::Reject(_) => self.stats.rejected += 1,
                    }
                    if !settled {
                        self.wire.conn.disposition(self.link, delivery_id, true, Some(outcome.state()));
                    }
                }
                SubCmd::Stop => self.stopping = true,
                SubCmd::Wake => {}
            }
        }
        while let Some(e) = self.wire.conn.poll_event() {
            self.on_event(e)?;
        }
        self.dispatch();
        self.grant();
        self.wire.flush()?;
        *lock(&self.shared) = self.stats.clone();
        Ok(())
    }

    fn on_event(&mut self, e: Event) -> io::Result<()> {
        match e {
            Event::Delivery(d) if d.link == self.link => {
                let size = message_size(&d.payload);
                self.unsettled += 1;
                self.unsettled_bytes += size;
                let s = &self.settings;
                let st = &mut self.stats;
                st.received += 1;
                st.peak_unsettled_messages = st.peak_unsettled_messages.max(self.unsettled);
                st.peak_unsettled_bytes = st.peak_unsettled_bytes.max(self.unsettled_bytes);
                if self.unsettled > s.max_outstanding_messages
                    || (s.max_outstanding_bytes > 0
                        && self.unsettled_bytes > s.max_outstanding_bytes
                        && self.unsettled > 1)
                {
                    st.overshoots += 1;
                }
                let msg = Message { payload: d.payload, size, delivery_id: d.delivery_id };
                self.waiting.push_back(Job { msg, settled: d.settled });
                Ok(())
            }
            Event::SenderFlow { link, drain: true, .. } if link == self.link => {
                // The broker answered the drain: what it sent under that credit has all
                // arrived. (Credit used up ends the drain too: `grant` sees it.)
                self.draining = false;
                Ok(())
            }
            Event::Detached { link, error, .. } if link == self.link => Err(link_error("link detached", error)),
            Event::Closed { error, .. } => Err(link_error("connection closed", error)),
            _ => Ok(()),
        }
    }

    /// Hand waiting messages to the workers in arrival order, as far as they fit.
    fn dispatch(&mut self) {
        while let Some(front) = self.waiting.front() {
            let size = front.msg.size;
            let admitted = !self.stopping
                && self.jobs.is_some()
                && match self.settings.limit_exceeded_behavior {
                    LimitExceededBehavior::Block => self.flow.try_reserve(size),
                    LimitExceededBehavior::Error | LimitExceededBehavior::Ignore => self.flow.reserve(size).is_ok(),
                };
            let blocked =
                !admitted && !self.stopping && self.settings.limit_exceeded_behavior == LimitExceededBehavior::Block;
            if blocked {
                return;
            }
            let Some(job) = self.waiting.pop_front() else { return };
            if admitted {
                if let Some(jobs) = &self.jobs {
                    match jobs.send(job) {
                        Ok(()) => {
                            self.in_workers += 1;
                            self.reserved = (self.reserved.0 + 1, self.reserved.1 + size);
                            continue;
                        }
                        Err(mpsc::SendError(job)) => {
                            self.flow.release(size);
                            self.give_back(job);
                            continue;
                        }
                    }
                }
            }
            if self.stopping {
                self.stats.released_on_stop += 1;
            } else {
                self.stats.released_by_flow_control += 1;
            }
            self.give_back(job);
        }
    }

    /// Release a message that no worker got back to the broker.
    fn give_back(&mut self, job: Job) {
        self.unsettled -= 1;
        self.unsettled_bytes -= job.msg.size;
        if !job.settled {
            self.wire.conn.disposition(self.link, job.msg.delivery_id, true, Some(DeliveryState::Released));
        }
    }

    /// Raise the credit to `max_outstanding_messages − unsettled` (alone on its flow
    /// controller; with others, what its share and theirs leave: [`FlowController::plan`]),
    /// unless either limit is reached; top up once the credit has fallen to half of that.
    fn grant(&mut self) {
        if self.stopping {
            return;
        }
        let current = self.wire.conn.link_credit(self.link);
        if current == 0 {
            self.draining = false;
        }
        // A delivery half received holds the credit it took at its first frame.
        let (coming, coming_bytes) = self.wire.conn.receiving(self.link).map_or((0, 0), |b| (1, b));
        let (held, held_bytes) = (self.unsettled + coming, self.unsettled_bytes.saturating_add(coming_bytes));
        match self.flow.plan(self.share, held, held_bytes, current, self.draining) {
            Plan::Nothing => {}
            Plan::Grant(target) => {
                if self.wire.conn.grant_credit(self.link, target, false).is_ok() {
                    self.stats.credit_grants += 1;
                }
            }
            Plan::Drain => {
                if self.wire.conn.grant_credit(self.link, current, true).is_ok() {
                    self.draining = true;
                    self.stats.drains += 1;
                }
            }
        }
    }
}

// ------------------------------------------------------------------ publisher

/// Publisher flow-control limits (Pub/Sub's `PublishSettings.FlowControlSettings`).
/// A limit of 0 means none.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PublishFlowControlSettings {
    /// Most publishes without the broker's outcome yet (default 1000).
    pub max_outstanding_publishes: usize,
    /// Most bytes of those (default 100 MiB); one larger message goes when nothing
    /// else is outstanding.
    pub max_outstanding_publish_bytes: usize,
    /// What [`Publisher::publish`] does when the next message does not fit
    /// (default Block).
    pub limit_exceeded_behavior: LimitExceededBehavior,
}

impl Default for PublishFlowControlSettings {
    fn default() -> Self {
        PublishFlowControlSettings {
            max_outstanding_publishes: 1000,
            max_outstanding_publish_bytes: 100 * 1024 * 1024,
            limit_exceeded_behavior: LimitExceededBehavior::Block,
        }
    }
}

impl From<PublishFlowControlSettings> for FlowControlSettings {
    fn from(p: PublishFlowControlSettings) -> FlowControlSettings {
        FlowControlSettings {
            max_outstanding_messages: p.max_outstanding_publishes,
            max_outstanding_bytes: p.max_outstanding_publish_bytes,
            limit_exceeded_behavior: p.limit_exceeded_behavior,
        }
    }
}

/// What a [`Publisher`] has done so far.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PublisherStats {
    /// Transfers sent.
    pub sent: u64,
    /// Outcomes: accepted.
    pub accepted: u64,
    /// Outcomes: anything else (rejected, released, modified, none).
    pub not_accepted: u64,
    /// Publishes that failed without an outcome (connection or link lost).
    pub failed: u64,
    /// Most publishes outstanding at once (queued to send plus sent and unsettled).
    pub peak_outstanding_publishes: usize,
    /// Most bytes outstanding at once.
    pub peak_outstanding_bytes: usize,
    /// Publishes that made the outstanding state pass a limit (Ignore only).
    pub overshoots: u64,
    /// Why the publisher stopped on its own, if it did.
    pub error: Option<String>,
}

/// The broker's answer to one publish.
#[derive(Debug)]
pub struct PublishHandle {
    rx: Receiver<io::Result<Option<DeliveryState>>>,
}

impl PublishHandle {
    /// Wait for the broker's outcome (None: settled without a state).
    pub fn wait(self) -> io::Result<Option<DeliveryState>> {
        self.rx.recv().unwrap_or_else(|_| Err(io::Error::new(io::ErrorKind::ConnectionAborted, "publisher gone")))
    }
}

enum PubCmd {
    Publish(Pending),
    Close,
}

struct Pending {
    payload: Bytes,
    size: usize,
    reply: SyncSender<io::Result<Option<DeliveryState>>>,
}

/// A flow-controlled producer on one sending link; `publish` may be called from
/// many threads at once (they share one flow-control state).
pub struct Publisher {
    tx: Sender<Input<PubCmd>>,
    flow: FlowController,
    stats: Arc<Mutex<PublisherStats>>,
    io: Option<JoinHandle<io::Result<()>>>,
}

impl fmt::Debug for Publisher {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Publisher").field("flow", &self.flow).finish()
    }
}

impl Publisher {
    /// Connect to `addr` and attach an unsettled sending link to `address`.
    pub fn start(addr: impl ToSocketAddrs, address: &str, settings: PublishFlowControlSettings) -> io::Result<Self> {
        let client = Client::connect(addr, "sluice-flow-publisher")?;
        Self::start_on(client, address, settings)
    }

    /// [`Self::start`] on a connected client (a new session is begun on it).
    pub fn start_on(mut client: Client, address: &str, settings: PublishFlowControlSettings) -> io::Result<Self> {
        let ch = client.begin()?;
        let link = client.attach_sender(ch, "sluice-flow-publisher", Some(address), &LinkOptions::default())?;
        let (wire, tx) = Wire::new(client)?;
        let flow = FlowController::new(settings.into());
        let stats = Arc::new(Mutex::new(PublisherStats::default()));
        let io = PubIo {
            wire,
            link,
            flow: flow.clone(),
            settings,
            queued: VecDeque::new(),
            unsettled: HashMap::new(),
            outstanding: 0,
            outstanding_bytes: 0,
            next_tag: 0,
            closing: None,
            stats: PublisherStats::default(),
            shared: stats.clone(),
        };
        let io = std::thread::Builder::new().name("sluice-flow-publisher".into()).spawn(move || io.run())?;
        Ok(Publisher { tx, flow, stats, io: Some(io) })
    }

    /// Publish one encoded message (e.g. [`crate::client::data_message`]) unsettled.
    /// Reserves its room first, as the behaviour says (Block may wait here); the
    /// room is released when the broker's outcome arrives.
    pub fn publish(&self, payload: Bytes) -> Result<PublishHandle, FlowError> {
        let size = message_size(&payload);
        self.flow.reserve(size)?;
        let (reply, rx) = mpsc::sync_channel(1);
        if self.tx.send(Input::Cmd(PubCmd::Publish(Pending { payload, size, reply }))).is_err() {
            self.flow.release(size);
            return Err(FlowError::Closed);
        }
        Ok(PublishHandle { rx })
    }

    /// The shared flow-control state (outstanding = published, no outcome yet).
    pub fn flow_controller(&self) -> &FlowController {
        &self.flow
    }

    /// A snapshot of the counters.
    pub fn stats(&self) -> PublisherStats {
        lock(&self.stats).clone()
    }

    /// Wait for the outcome of everything published (bounded), then close.
    pub fn close(mut self) -> io::Result<PublisherStats> {
        self.shutdown()
    }

    fn shutdown(&mut self) -> io::Result<PublisherStats> {
        let _ = self.tx.send(Input::Cmd(PubCmd::Close));
        let r = match self.io.take() {
            Some(h) => h.join().unwrap_or_else(|_| Err(io::Error::other("publisher I/O thread panicked"))),
            None => Ok(()),
        };
        r.map(|()| self.stats())
    }
}

impl Drop for Publisher {
    fn drop(&mut self) {
        if self.io.is_some() {
            let _ = self.shutdown();
        }
    }
}

struct PubIo {
    wire: Wire<PubCmd>,
    link: LinkId,
    flow: FlowController,
    settings: PublishFlowControlSettings,
    /// Reserved, waiting for credit or session window.
    queued: VecDeque<Pending>,
    /// Sent, waiting for the outcome.
    unsettled: HashMap<u32, Pending>,
    outstanding: usize,
    outstanding_bytes: usize,
    next_tag: u64,
    closing: Option<Instant>,
    stats: PublisherStats,
    shared: Arc<Mutex<PublisherStats>>,
}

impl PubIo {
    fn run(mut self) -> io::Result<()> {
        let mut cmds = Vec::new();
        let early = std::mem::take(&mut self.wire.early);
        let mut result = early.into_iter().try_for_each(|e| self.on_event(e));
        loop {
            if result.is_err() {
                break;
            }
            if let Some(since) = self.closing {
                if self.outstanding == 0 {
                    break;
                }
                if since.elapsed() > 3 * WAIT {
                    result = Err(io::Error::new(io::ErrorKind::TimedOut, "no outcome for every publish"));
                    break;
                }
            }
            result = self.step(&mut cmds);
        }
        // Anything still waiting (and whatever arrives meanwhile) fails.
        self.flow.close();
        let why = result.as_ref().err().map_or_else(|| "publisher closed".to_owned(), ToString::to_string);
        self.wire.finish(&mut cmds);
        for c in cmds.drain(..) {
            if let PubCmd::Publish(p) = c {
                self.queued.push_back(p);
            }
        }
        while let Ok(i) = self.wire.rx.try_recv() {
            if let Input::Cmd(PubCmd::Publish(p)) = i {
                self.queued.push_back(p);
            }
        }
        let failed: Vec<Pending> = self.queued.drain(..).chain(self.unsettled.drain().map(|(_, p)| p)).collect();
        for p in failed {
            self.flow.release(p.size);
            self.stats.failed += 1;
            let _ = p.reply.send(Err(io::Error::new(io::ErrorKind::ConnectionAborted, why.clone())));
        }
        if let Err(e) = &result {
            self.stats.error = Some(e.to_string());
        }
        *lock(&self.shared) = self.stats.clone();
        result
    }

    fn step(&mut self, cmds: &mut Vec<PubCmd>) -> io::Result<()> {
        self.wire.wait(Duration::from_millis(500), cmds);
        for c in cmds.drain(..) {
            match c {
                PubCmd::Publish(p) => {
                    self.outstanding += 1;
                    self.outstanding_bytes += p.size;
                    let (max_m, max_b) =
                        (self.settings.max_outstanding_publishes, self.settings.max_outstanding_publish_bytes);
                    let st = &mut self.stats;
                    st.peak_outstanding_publishes = st.peak_outstanding_publishes.max(self.outstanding);
                    st.peak_outstanding_bytes = st.peak_outstanding_bytes.max(self.outstanding_bytes);
                    if (max_m > 0 && self.outstanding > max_m)
                        || (max_b > 0 && self.outstanding_bytes > max_b && self.outstanding > 1)
                    {
                        st.overshoots += 1;
                    }
                    self.queued.push_back(p);
                }
                PubCmd::Close => {
                    self.closing.get_or_insert_with(Instant::now);
                }
            }
        }
        while let Some(e) = self.wire.conn.poll_event() {
            self.on_event(e)?;
        }
        self.send_queued()?;
        self.wire.flush()?;
        *lock(&self.shared) = self.stats.clone();
        Ok(())
    }

    fn send_queued(&mut self) -> io::Result<()> {
        while let Some(p) = self.queued.front() {
            if self.wire.conn.link_credit(self.link) == 0 {
                break;
            }
            let tag = DeliveryTag::from_u64(self.next_tag);
            match self.wire.conn.send_ref(self.link, tag, &p.payload, false) {
                Ok(id) => {
                    self.next_tag += 1;
                    self.stats.sent += 1;
                    if let Some(p) = self.queued.pop_front() {
                        self.unsettled.insert(id, p);
                    }
                }
                Err(UsageError::SessionWindow) => break,
                Err(e) => return Err(io::Error::other(e)),
            }
        }
        Ok(())
    }

    fn on_event(&mut self, e: Event) -> io::Result<()> {
        match e {
            Event::Disposition { link, delivery_id, settled, state } if link == self.link => {
                let terminal = settled || state.as_ref().is_some_and(DeliveryState::is_outcome);
                if !terminal {
                    return Ok(());
                }
                if !settled {
                    self.wire.conn.disposition(self.link, delivery_id, true, state.clone());
                }
                if let Some(p) = self.unsettled.remove(&delivery_id) {
                    // Room first, then the answer: whoever waits on the handle sees it free.
                    self.flow.release(p.size);
                    self.outstanding -= 1;
                    self.outstanding_bytes -= p.size;
                    if state == Some(DeliveryState::Accepted) {
                        self.stats.accepted += 1;
                    } else {
                        self.stats.not_accepted += 1;
                    }
                    let _ = p.reply.send(Ok(state));
                }
                Ok(())
            }
            Event::Detached { link, error, .. } if link == self.link => Err(link_error("link detached", error)),
            Event::Closed { error, .. } => Err(link_error("connection closed", error)),
            _ => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ctl(messages: usize, bytes: usize, behavior: LimitExceededBehavior) -> FlowController {
        FlowController::new(FlowControlSettings {
            max_outstanding_messages: messages,
            max_outstanding_bytes: bytes,
            limit_exceeded_behavior: behavior,
        })
    }

    #[test]
    fn defaults_are_pubsubs() {
        let s = FlowControlSettings::default();
        assert_eq!(s.max_outstanding_messages, 1000);
        assert_eq!(s.max_outstanding_bytes, 100 * 1024 * 1024);
        assert_eq!(s.limit_exceeded_behavior, LimitExceededBehavior::Block);
        let p = PublishFlowControlSettings::default();
        assert_eq!((p.max_outstanding_publishes, p.max_outstanding_publish_bytes), (1000, 100 * 1024 * 1024));
    }

    #[test]
    fn error_fails_when_either_limit_would_be_passed() {
        let f = ctl(3, 100, LimitExceededBehavior::Error);
        assert_eq!(f.reserve(40), Ok(()));
        assert_eq!(f.reserve(40), Ok(()));
        // Bytes: 80 + 30 > 100.
        assert_eq!(f.reserve(30), Err(FlowError::MaxOutstandingBytes));
        assert_eq!(f.reserve(20), Ok(()));
        assert_eq!(f.outstanding(), (3, 100));
        // Both reached: messages are reported first.
        assert_eq!(f.reserve(0), Err(FlowError::MaxOutstandingMessages));
        f.release(20);
        assert_eq!(f.outstanding(), (2, 80));
        assert_eq!(f.reserve(20), Ok(()));
        // A refused request changed nothing.
        assert_eq!(f.outstanding(), (3, 100));
    }

    #[test]
    fn paused_while_either_limit_is_reached_resumed_only_when_both_are_below() {
        // Ignore admits everything, so every combination of states can be built.
        let f = ctl(3, 100, LimitExceededBehavior::Ignore);
        f.reserve(50).unwrap();
        f.reserve(50).unwrap();
        // Bytes reached, messages below.
        assert!(f.is_paused());
        f.reserve(0).unwrap();
        // Both reached.
        assert!(f.is_paused());
        f.release(0);
        // Messages below again, bytes still reached: still paused.
        assert_eq!(f.outstanding(), (2, 100));
        assert!(f.is_paused());
        f.release(50);
        // Both below: resumed.
        assert_eq!(f.outstanding(), (1, 50));
        assert!(!f.is_paused());
        f.reserve(1).unwrap();
        f.reserve(1).unwrap();
        // Messages reached, bytes below.
        assert_eq!(f.outstanding(), (3, 52));
        assert!(f.is_paused());
        // Paused means nothing fits, not even an empty message.
        let e = ctl(10, 100, LimitExceededBehavior::Error);
        e.reserve(100).unwrap();
        e.reserve(0).unwrap_err();
        e.release(100);
        e.reserve(0).unwrap();
    }

    #[test]
    fn a_request_larger_than_the_byte_limit_goes_alone() {
        for behavior in [LimitExceededBehavior::Error, LimitExceededBehavior::Block] {
            let f = ctl(10, 100, behavior);
            assert_eq!(f.reserve(1), Ok(()));
            assert!(!f.try_reserve(500), "{behavior:?}: admitted beside another");
            f.release(1);
            assert_eq!(f.reserve(500), Ok(()));
            assert_eq!(f.outstanding(), (1, 500));
            assert!(!f.try_reserve(1), "{behavior:?}: something admitted beside the large one");
            f.release(500);
            assert!(f.try_reserve(1));
        }
    }

    #[test]
    fn ignore_always_admits_and_still_counts() {
        let f = ctl(2, 10, LimitExceededBehavior::Ignore);
        for _ in 0..5 {
            assert_eq!(f.reserve(100), Ok(()));
        }
        assert_eq!(f.outstanding(), (5, 500));
        assert!(f.is_paused());
        assert!(!f.try_reserve(1));
        for _ in 0..5 {
            f.release(100);
        }
        assert_eq!(f.outstanding(), (0, 0));
        assert!(!f.is_paused());
    }

    #[test]
    fn block_waits_until_it_fits() {
        let f = ctl(2, 100, LimitExceededBehavior::Block);
        f.reserve(50).unwrap();
        f.reserve(50).unwrap();
        assert_eq!(f.reserve_timeout(10, Duration::from_millis(20)), Err(FlowError::Timeout));
        assert_eq!(f.outstanding(), (2, 100));
        let (tx, rx) = mpsc::channel();
        let g = f.clone();
        let t = std::thread::spawn(move || {
            let r = g.reserve(60);
            tx.send(r).unwrap();
        });
        // Still blocked: one message released, but 50 + 60 > 100.
        f.release(50);
        assert!(rx.recv_timeout(Duration::from_millis(100)).is_err());
        // Both released: it fits.
        f.release(50);
        assert_eq!(rx.recv().unwrap(), Ok(()));
        t.join().unwrap();
        assert_eq!(f.outstanding(), (1, 60));
    }

    fn waiters(f: &FlowController) -> usize {
        lock(&f.shared.state).waiters.len()
    }

    #[test]
    fn block_serves_in_arrival_order_so_a_large_request_is_not_starved() {
        let f = ctl(10, 100, LimitExceededBehavior::Block);
        f.reserve(30).unwrap();
        let g = f.clone();
        let large = std::thread::spawn(move || g.reserve(90));
        while waiters(&f) < 1 {
            std::thread::yield_now();
        }
        // A small request that would fit now (30 + 20) queues behind the large one.
        assert!(!f.try_reserve(20));
        let (tx, rx) = mpsc::channel();
        let h = f.clone();
        let small = std::thread::spawn(move || tx.send(h.reserve(20)).unwrap());
        while waiters(&f) < 2 {
            std::thread::yield_now();
        }
        assert_eq!(f.outstanding(), (1, 30));
        f.release(30);
        // The large one goes first (alone, 90); the small one does not fit beside it.
        assert_eq!(large.join().unwrap(), Ok(()));
        assert_eq!(f.outstanding(), (1, 90));
        assert!(rx.recv_timeout(Duration::from_millis(100)).is_err());
        f.release(90);
        assert_eq!(rx.recv().unwrap(), Ok(()));
        small.join().unwrap();
        assert_eq!(f.outstanding(), (1, 20));
    }

    #[test]
    fn close_wakes_blocked_reservations() {
        let f = ctl(1, 0, LimitExceededBehavior::Block);
        f.reserve(5).unwrap();
        let g = f.clone();
        let t = std::thread::spawn(move || g.reserve(5));
        while waiters(&f) < 1 {
            std::thread::yield_now();
        }
        f.close();
        assert_eq!(t.join().unwrap(), Err(FlowError::Closed));
        assert_eq!(f.reserve(1), Err(FlowError::Closed));
    }

    #[test]
    fn zero_means_no_limit() {
        let f = ctl(0, 0, LimitExceededBehavior::Error);
        for _ in 0..10_000 {
            f.reserve(1 << 20).unwrap();
        }
        assert!(!f.is_paused());
    }

    #[test]
    fn message_size_leaves_the_header_out() {
        use sluice_proto::codec::Encode;
        use sluice_proto::types::{Body, Header};
        let bare = crate::client::data_message(&[7u8; 300]);
        let with_header = sluice_proto::types::Message {
            header: Some(Header { first_acquirer: Some(true), delivery_count: Some(3), ..Default::default() }),
            body: Body::Data(Bytes::from(vec![7u8; 300])),
            ..Default::default()
        }
        .to_bytes()
        .freeze();
        assert!(with_header.len() > bare.len());
        assert_eq!(message_size(&bare), bare.len());
        assert_eq!(message_size(&with_header), bare.len());
        assert_eq!(message_size(&Bytes::from_static(b"not a message")), 13);
    }
}
