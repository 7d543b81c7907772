//! One load-generating connection on its own OS thread: a plain loop around the
//! sans-IO engine over a non-blocking socket. Each turn it encodes as many messages
//! as credit, the session window and the rate allow into the engine's output (one
//! shared `Bytes` per batch), writes everything queued with one `writev`, reads up to
//! 256 KiB, and answers what came in (latency from the body's timestamp, outcomes,
//! credit top-ups). It sleeps in `ppoll` only when there is nothing to do.

/// A header section with durable=true.
const DURABLE_HEADER: &[u8] = &[0x00, 0x53, 0x70, 0xc0, 0x02, 0x01, 0x41];

use crate::body::{now_ns, read_stamp, Template};
use crate::client::{sasl_plain, Client, LinkOptions};
use crate::frames::{FrameCounter, FrameCounts};
use crate::opts::{Opts, Sasl, Scenario, Settle};
use crate::sys;
use bytes::{BufMut, Bytes, BytesMut};
use hdrhistogram::Histogram;
use sluice_proto::codec::{Encode, Fields, Symbol, Value};
use sluice_proto::engine::{ClientSasl, Config, Connection, Event, LinkId};
use sluice_proto::types::{
    Attach, AttachTarget, DeliveryState, DeliveryTag, Properties, RawMessage, ReceiverSettleMode, Role,
    SenderSettleMode, Source, Target,
};
use std::collections::{HashMap, VecDeque};
use std::io::{self, IoSlice, Read, Write};
use std::net::TcpStream;
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::sync::{Arc, Barrier, Mutex};
use std::time::{Duration, Instant};

/// Bytes read per system call, at most.
const READ_SIZE: usize = 256 * 1024;
/// Stop encoding while this many bytes wait to be written.
const OUT_HIGH_WATER: usize = 8 * 1024 * 1024;
/// Longest sleep in `ppoll`, so that stop flags are seen promptly.
const MAX_WAIT: Duration = Duration::from_millis(5);

/// State shared by the workers and the thread that runs the scenario.
pub struct Shared {
    /// Everyone ends.
    pub stop: AtomicBool,
    /// Producers stop sending (duration runs).
    pub stop_sending: AtomicBool,
    /// Producers may start (consumers are attached and have granted credit).
    pub go: AtomicBool,
    /// A worker failed.
    pub failed: AtomicBool,
    /// Messages sent, all producers.
    pub sent: AtomicU64,
    /// Messages sent per channel.
    pub sent_per_channel: Vec<AtomicU64>,
    /// Deliveries received by consumers (responses, for requesters).
    pub received: AtomicU64,
    /// Outcomes received by unsettled producers.
    pub settled: AtomicU64,
    /// Producers (requesters) that have finished.
    pub producers_done: AtomicUsize,
    /// Time `go` was set, on [`now_ns`].
    pub t0: AtomicU64,
    /// First error of each failed worker.
    pub errors: Mutex<Vec<String>>,
    /// Workers and the runner meet here once every link is attached.
    pub ready: Barrier,
}

impl Shared {
    /// Shared state for `workers` workers and `channels` channels.
    pub fn new(workers: usize, channels: usize) -> Shared {
        Shared {
            stop: AtomicBool::new(false),
            stop_sending: AtomicBool::new(false),
            go: AtomicBool::new(false),
            failed: AtomicBool::new(false),
            sent: AtomicU64::new(0),
            sent_per_channel: (0..channels).map(|_| AtomicU64::new(0)).collect(),
            received: AtomicU64::new(0),
            settled: AtomicU64::new(0),
            producers_done: AtomicUsize::new(0),
            t0: AtomicU64::new(0),
            errors: Mutex::new(Vec::new()),
            ready: Barrier::new(workers + 1),
        }
    }

    fn fail(&self, who: &str, e: impl std::fmt::Display) {
        if let Ok(mut v) = self.errors.lock() {
            v.push(format!("{who}: {e}"));
        }
        self.failed.store(true, Relaxed);
        self.stop.store(true, Relaxed);
    }
}

/// What one link of a worker does.
#[derive(Debug, Clone)]
pub enum LinkSpec {
    /// Send `quota` messages (None: until told to stop) to `address`.
    Producer {
        /// Target address.
        address: String,
        /// Channel index (for the per-channel sent counts).
        channel: usize,
        /// Messages to send.
        quota: Option<u64>,
        /// Messages per second, at most.
        rate: Option<f64>,
    },
    /// Receive from `address`.
    Consumer {
        /// Source address.
        address: String,
    },
    /// Send requests to `address` with reply-to = a dynamic node; count responses.
    Requester {
        /// Target address.
        address: String,
        /// Channel index.
        channel: usize,
        /// Requests to send.
        quota: Option<u64>,
        /// Requests per second, at most.
        rate: Option<f64>,
    },
    /// Receive requests from `address`, answer each to its reply-to.
    Responder {
        /// Source address.
        address: String,
    },
}

impl LinkSpec {
    fn is_producer(&self) -> bool {
        matches!(self, LinkSpec::Producer { .. } | LinkSpec::Requester { .. })
    }
}

/// What a worker measured.
#[derive(Debug)]
pub struct WorkerReport {
    /// Worker name.
    pub name: String,
    /// Messages (requests) sent.
    pub sent: u64,
    /// Outcomes `accepted` received for unsettled sends.
    pub accepted: u64,
    /// Other outcomes received (rejected, released, modified).
    pub refused: u64,
    /// Deliveries received (responses, for requesters; requests, for responders).
    pub received: u64,
    /// End-to-end latency, nanoseconds.
    pub latency: Histogram<u64>,
    /// Time from sending an unsettled message to its `accepted`, nanoseconds.
    pub accept_latency: Histogram<u64>,
    /// Frames written, by kind.
    pub frames_out: FrameCounts,
    /// Frames read, by kind.
    pub frames_in: FrameCounts,
    /// Bytes written.
    pub bytes_out: u64,
    /// Bytes read.
    pub bytes_in: u64,
    /// `write`/`writev` calls.
    pub writes: u64,
    /// `read` calls that returned data.
    pub reads: u64,
    /// Time of the last send, on [`now_ns`] (0: none).
    pub last_send_ns: u64,
    /// Time of the last outcome received.
    pub last_settle_ns: u64,
    /// Time of the last delivery received.
    pub last_recv_ns: u64,
    /// CPU seconds of this thread after `go`.
    pub cpu_s: f64,
    /// Why the worker stopped early.
    pub error: Option<String>,
    /// The first refusal's outcome, for the report.
    pub refusal: Option<String>,
}

impl WorkerReport {
    /// A report with nothing counted yet.
    fn empty(name: String) -> Self {
        WorkerReport {
            name,
            sent: 0,
            accepted: 0,
            refused: 0,
            received: 0,
            latency: new_histogram(),
            accept_latency: new_histogram(),
            frames_out: FrameCounts::default(),
            frames_in: FrameCounts::default(),
            bytes_out: 0,
            bytes_in: 0,
            writes: 0,
            reads: 0,
            last_send_ns: 0,
            last_settle_ns: 0,
            last_recv_ns: 0,
            cpu_s: 0.0,
            error: None,
            refusal: None,
        }
    }
}

/// A new latency histogram: 1 ns .. 100 s, 3 significant digits.
#[allow(clippy::expect_used)]
pub fn new_histogram() -> Histogram<u64> {
    // Constant, valid bounds: this cannot fail.
    Histogram::new_with_bounds(1, 100_000_000_000, 3).expect("valid histogram bounds")
}

enum Part {
    Producer(Producer),
    Consumer(Consumer),
    Requester(Requester),
    Responder(Responder),
}

struct Producer {
    link: LinkId,
    channel: u16,
    chan_index: usize,
    presettled: bool,
    quota: Option<u64>,
    rate: Option<f64>,
    sent: u64,
    outcomes: u64,
    next_tag: u64,
    done: bool,
    /// Send time of each unsettled delivery, by delivery-id (bounded by --inflight).
    sent_at: std::collections::HashMap<u32, u64>,
}

struct Consumer {
    link: LinkId,
}

struct Requester {
    send: Producer,
    reply_link: LinkId,
    reply_to: String,
    responses: u64,
}

struct Responder {
    link: LinkId,
    channel: u16,
    /// The anonymous-terminus sender, when the broker has one.
    anonymous: Option<LinkId>,
    /// Otherwise one sender per reply address.
    by_address: HashMap<String, LinkId>,
    /// Replies waiting for credit or for their link's attach: (address, message).
    waiting: VecDeque<(String, Bytes)>,
    next_tag: u64,
}

/// One connection and its links.
pub struct Worker {
    name: String,
    opts: Arc<Opts>,
    shared: Arc<Shared>,
    conn: Connection,
    sock: TcpStream,
    clock: Instant,
    roles: Vec<Part>,
    /// Index into `roles` by `LinkId.0` (link ids are small and dense).
    by_link: LinkMap,
    template: Template,
    pending: VecDeque<Bytes>,
    pending_bytes: usize,
    recv_now: u64,
    t0: u64,
    fc_in: FrameCounter,
    fc_out: FrameCounter,
    r: WorkerReport,
    /// Local counts not yet added to the shared totals.
    unpublished_received: u64,
    unpublished_settled: u64,
    /// Sessions the broker ended during setup on purpose (a refused anonymous link).
    refused_channels: Vec<u16>,
}

fn client_config(opts: &Opts, container_id: &str) -> Config {
    let mut cfg = Config::client(container_id);
    cfg.hostname = Some(opts.url.host.clone());
    cfg.session_window = opts.session_window;
    cfg.max_frame_size = opts.max_frame;
    cfg.client_sasl = match opts.sasl {
        Sasl::None => None,
        Sasl::Anonymous => Some(ClientSasl { mechanism: "ANONYMOUS".into(), initial_response: None }),
        Sasl::Plain => Some(sasl_plain(&opts.user, &opts.password)),
    };
    cfg
}

/// Connect, attach `links`, wait at the barrier, then run until told to stop.
pub fn run(name: String, opts: Arc<Opts>, shared: Arc<Shared>, links: Vec<LinkSpec>) -> WorkerReport {
    let setup = Worker::setup(&name, &opts, &shared, &links);
    shared.ready.wait();
    match setup {
        Ok(mut w) => {
            let cpu0 = sys::thread_cpu_s();
            if let Err(e) = w.run_loop() {
                shared.fail(&w.name, &e);
                w.r.error = Some(e.to_string());
            }
            w.r.cpu_s = sys::thread_cpu_s() - cpu0;
            w.finish()
        }
        Err(e) => {
            shared.fail(&name, &e);
            WorkerReport { error: Some(e.to_string()), ..WorkerReport::empty(name) }
        }
    }
}

/// The sections every produced message carries before its body: the durable header
/// (`--durable`) and the application properties (`--property`).
fn message_prefix(opts: &Opts) -> Vec<u8> {
    let mut prefix = BytesMut::new();
    if opts.durable {
        prefix.put_slice(DURABLE_HEADER);
    }
    if !opts.properties.is_empty() {
        let m = sluice_proto::types::Message {
            application_properties: Some(
                opts.properties.iter().map(|(k, v)| (k.clone(), Value::String(v.clone()))).collect(),
            ),
            ..Default::default()
        };
        // No body: the encoded message is the application-properties section alone.
        prefix.put_slice(&m.to_bytes());
    }
    prefix.to_vec()
}

fn link_name(worker: &str, i: usize, what: &str) -> String {
    format!("{worker}-{what}-{i}")
}

impl Worker {
    fn setup(name: &str, opts: &Arc<Opts>, shared: &Arc<Shared>, links: &[LinkSpec]) -> io::Result<Worker> {
        let container = format!("sluice-perf-{}-{name}", std::process::id());
        let mut c = Client::connect_with(opts.url.addr(), client_config(opts, &container))?;
        let mut roles = Vec::new();
        let mut refused_channels = Vec::new();
        let start_props =
            opts.start.as_ref().map(|s| Fields(vec![(Symbol::new("x-opt-kubemq-start"), Value::String(s.clone()))]));
        for (i, spec) in links.iter().enumerate() {
            let ch = c.begin()?;
            match spec {
                LinkSpec::Producer { address, channel, quota, rate } => {
                    let presettled = opts.settle == Settle::Presettled;
                    let lo = LinkOptions { presettled, durable: opts.durable, ..Default::default() };
                    let link = c.attach_sender(ch, &link_name(name, i, "snd"), Some(address), &lo)?;
                    roles.push(Part::Producer(Producer::new(link, ch, *channel, presettled, *quota, *rate)));
                }
                LinkSpec::Consumer { address } => {
                    let lo = LinkOptions {
                        presettled: opts.recv_settle == Settle::Presettled,
                        properties: start_props.clone(),
                        filter: opts.selector.as_ref().map(|sel| {
                            Fields(vec![(Symbol::new("apache.org:selector-filter:string"), Value::String(sel.clone()))])
                        }),
                        ..Default::default()
                    };
                    let link = c.attach_receiver(ch, &link_name(name, i, "rcv"), Some(address), &lo)?;
                    c.engine().grant_credit(link, opts.credit, false).map_err(io::Error::other)?;
                    roles.push(Part::Consumer(Consumer { link }));
                }
                LinkSpec::Requester { address, channel, quota, rate } => {
                    let fixed = opts.reply_to.as_ref().map(|a| format!("{a}-{name}-{i}"));
                    let attach = Attach {
                        name: link_name(name, i, "reply"),
                        role: Role::Receiver,
                        snd_settle_mode: Some(match opts.recv_settle {
                            Settle::Presettled => SenderSettleMode::Settled,
                            Settle::Unsettled => SenderSettleMode::Unsettled,
                        }),
                        rcv_settle_mode: Some(ReceiverSettleMode::First),
                        source: Some(match &fixed {
                            Some(a) => Source { address: Some(a.clone()), ..Default::default() },
                            None => Source { dynamic: Some(true), ..Default::default() },
                        }),
                        target: Some(AttachTarget::Target(Target::default())),
                        ..Default::default()
                    };
                    let (reply_link, peer) = c.attach_full(ch, attach)?;
                    let reply_to = fixed
                        .or_else(|| peer.source.as_ref().and_then(|s| s.address.clone()))
                        .ok_or_else(|| io::Error::other("the broker gave the dynamic node no address"))?;
                    c.engine().grant_credit(reply_link, opts.credit, false).map_err(io::Error::other)?;
                    let presettled = opts.settle == Settle::Presettled;
                    let lo = LinkOptions { presettled, ..Default::default() };
                    let link = c.attach_sender(ch, &link_name(name, i, "req"), Some(address), &lo)?;
                    roles.push(Part::Requester(Requester {
                        send: Producer::new(link, ch, *channel, presettled, *quota, *rate),
                        reply_link,
                        reply_to,
                        responses: 0,
                    }));
                }
                LinkSpec::Responder { address } => {
                    let lo = LinkOptions { presettled: opts.recv_settle == Settle::Presettled, ..Default::default() };
                    let link = c.attach_receiver(ch, &link_name(name, i, "cmd"), Some(address), &lo)?;
                    c.engine().grant_credit(link, opts.credit, false).map_err(io::Error::other)?;
                    // Replies go pre-settled through the anonymous terminus when the
                    // broker has one, else through one link per reply address. The
                    // anonymous link gets its own session: a broker without it may end
                    // the session that asked (RabbitMQ 3.x does).
                    let anon = LinkOptions { presettled: true, ..Default::default() };
                    let anon_ch = c.begin()?;
                    let anonymous = c.attach_sender(anon_ch, &link_name(name, i, "anon"), None, &anon).ok();
                    if anonymous.is_none() {
                        refused_channels.push(anon_ch);
                    }
                    roles.push(Part::Responder(Responder {
                        link,
                        channel: ch,
                        anonymous,
                        by_address: HashMap::new(),
                        waiting: VecDeque::new(),
                        next_tag: 0,
                    }));
                }
            }
        }
        c.flush()?;
        let (conn, sock, events, clock) = c.into_parts();
        sock.set_nonblocking(true)?;
        let mut by_link = LinkMap::default();
        for (i, r) in roles.iter().enumerate() {
            match r {
                Part::Producer(p) => {
                    by_link.insert(p.link, i);
                }
                Part::Consumer(c) => {
                    by_link.insert(c.link, i);
                }
                Part::Requester(q) => {
                    by_link.insert(q.send.link, i);
                    by_link.insert(q.reply_link, i);
                }
                Part::Responder(r) => {
                    by_link.insert(r.link, i);
                    if let Some(a) = r.anonymous {
                        by_link.insert(a, i);
                    }
                }
            }
        }
        let mut fc_in = FrameCounter::default();
        // The deframer's buffer starts at a frame boundary: count from there.
        fc_in.feed(conn.buffered_input());
        let mut w = Worker {
            name: name.to_owned(),
            opts: opts.clone(),
            shared: shared.clone(),
            conn,
            sock,
            clock,
            roles,
            by_link,
            template: Template::new(&message_prefix(opts), opts.size),
            pending: VecDeque::new(),
            pending_bytes: 0,
            recv_now: now_ns(),
            t0: 0,
            fc_in,
            fc_out: FrameCounter::default(),
            r: WorkerReport::empty(name.to_owned()),
            unpublished_received: 0,
            unpublished_settled: 0,
            refused_channels,
        };
        for e in events {
            w.on_event(e)?;
        }
        Ok(w)
    }

    fn now_ms(&self) -> u64 {
        self.clock.elapsed().as_millis() as u64
    }

    /// True for the links this worker uses (not a refused one from setup).
    fn owns(&self, link: LinkId) -> bool {
        self.by_link.get(link).is_some()
            || self.roles.iter().any(|r| matches!(r, Part::Responder(r) if r.by_address.values().any(|l| *l == link)))
    }

    fn has_producers(&self) -> bool {
        self.roles.iter().any(|r| matches!(r, Part::Producer(_) | Part::Requester(_)))
    }

    fn run_loop(&mut self) -> io::Result<()> {
        let producing = self.has_producers();
        let mut started = !producing;
        loop {
            if self.shared.stop.load(Relaxed) {
                return Ok(());
            }
            if !started && self.shared.go.load(Relaxed) {
                started = true;
                self.t0 = self.shared.t0.load(Relaxed);
            }
            let mut busy = false;
            let mut next_due: Option<u64> = None;
            if started {
                let (did, due) = self.produce();
                busy |= did;
                next_due = due;
            }
            self.flush()?;
            busy |= self.read()?;
            let now = self.now_ms();
            self.conn.handle_timeout(now);
            self.publish_counts();
            if !busy {
                let mut wait = MAX_WAIT;
                if !started && producing {
                    wait = Duration::from_micros(200);
                }
                if let Some(due) = next_due {
                    wait = wait.min(Duration::from_nanos(due.saturating_sub(now_ns())));
                }
                if !wait.is_zero() {
                    sys::wait_fd(self.sock.as_raw_fd(), !self.pending.is_empty(), Some(wait))?;
                }
            }
        }
    }

    /// Encode what credit, window, quota, in-flight limit and rate allow. Returns
    /// (anything encoded, the earliest time a rate-limited link may send again).
    fn produce(&mut self) -> (bool, Option<u64>) {
        if self.pending_bytes > OUT_HIGH_WATER {
            return (false, None);
        }
        let stop_sending = self.shared.stop_sending.load(Relaxed);
        let now = now_ns();
        let mut did = false;
        let mut next_due: Option<u64> = None;
        let batch = self.opts.batch as u64;
        let inflight = self.opts.inflight;
        for i in 0..self.roles.len() {
            let (p, reply_to) = match &mut self.roles[i] {
                Part::Producer(p) => (p, None),
                Part::Requester(q) => {
                    // Pending requests are those without a response yet.
                    q.send.outcomes = q.responses;
                    (&mut q.send, Some(q.reply_to.clone()))
                }
                Part::Responder(_) => {
                    did |= self.send_replies(i);
                    continue;
                }
                _ => continue,
            };
            if p.done {
                continue;
            }
            let remaining = match p.quota {
                Some(q) => q - p.sent,
                None if stop_sending => 0,
                None => u64::MAX,
            };
            if remaining == 0 {
                let settled_all = p.presettled && reply_to.is_none() || p.outcomes >= p.sent;
                if settled_all || self.shared.stop.load(Relaxed) {
                    p.done = true;
                    self.shared.producers_done.fetch_add(1, Relaxed);
                }
                continue;
            }
            let mut n = remaining
                .min(self.conn.link_credit(p.link) as u64)
                .min(self.conn.session_window(p.channel) as u64)
                .min(batch);
            if !p.presettled || reply_to.is_some() {
                n = n.min(inflight.saturating_sub(p.sent - p.outcomes));
            }
            if let Some(rate) = p.rate {
                // Messages are due at t0 + k / rate; they leave in batches of at least
                // one tick's worth, so that a paced sender costs one write per tick
                // rather than one per message (each batch carries its own send time).
                let elapsed = now.saturating_sub(self.t0) as f64 / 1e9;
                let due = (elapsed * rate) as u64 + 1;
                let allowed = due.saturating_sub(p.sent);
                let quantum = ((rate * self.opts.tick_us / 1e6).ceil() as u64).clamp(1, remaining);
                if allowed < quantum {
                    let at = self.t0 + ((p.sent + quantum - 1) as f64 / rate * 1e9) as u64;
                    next_due = Some(next_due.map_or(at, |d: u64| d.min(at)));
                    continue;
                }
                n = n.min(allowed);
            }
            if n == 0 {
                continue;
            }
            let sent = match reply_to {
                None => {
                    let body = self.template.stamp(now);
                    let mut k = 0;
                    while k < n {
                        let tag = DeliveryTag::from_u64(p.next_tag);
                        let Ok(id) = self.conn.send_ref(p.link, tag, &body, p.presettled) else { break };
                        if !p.presettled {
                            p.sent_at.insert(id, now);
                        }
                        p.next_tag += 1;
                        k += 1;
                    }
                    k
                }
                Some(reply_to) => {
                    let body = self.template.stamp(now);
                    // The header (--durable) comes first, then the properties, then the
                    // rest of the template (application properties, data).
                    let head = if self.opts.durable { DURABLE_HEADER.len() } else { 0 };
                    let mut buf = BytesMut::with_capacity((body.len() + 64 + reply_to.len()) * n as usize);
                    let mut k = 0;
                    while k < n {
                        let props = Properties {
                            message_id: Some(Value::Ulong(p.next_tag)),
                            reply_to: Some(reply_to.clone()),
                            ..Default::default()
                        };
                        buf.put_slice(&body[..head]);
                        props.encode(&mut buf);
                        buf.put_slice(&body[head..]);
                        let msg = buf.split().freeze();
                        let tag = DeliveryTag::from_u64(p.next_tag);
                        if self.conn.send(p.link, tag, msg, p.presettled).is_err() {
                            break;
                        }
                        p.next_tag += 1;
                        k += 1;
                    }
                    k
                }
            };
            if sent > 0 {
                did = true;
                p.sent += sent;
                self.r.sent += sent;
                self.r.last_send_ns = now;
                self.shared.sent.fetch_add(sent, Relaxed);
                if let Some(c) = self.shared.sent_per_channel.get(p.chan_index) {
                    c.fetch_add(sent, Relaxed);
                }
            }
        }
        (did, next_due)
    }

    /// Write everything the engine queued, as far as the socket takes it.
    fn flush(&mut self) -> io::Result<()> {
        while let Some(c) = self.conn.poll_transmit() {
            self.fc_out.feed(&c);
            self.r.bytes_out += c.len() as u64;
            self.pending_bytes += c.len();
            self.pending.push_back(c);
        }
        while !self.pending.is_empty() {
            let mut iov = [IoSlice::new(&[]); 64];
            let mut k = 0;
            for c in self.pending.iter().take(iov.len()) {
                iov[k] = IoSlice::new(c);
                k += 1;
            }
            match self.sock.write_vectored(&iov[..k]) {
                Ok(0) => return Err(io::Error::new(io::ErrorKind::WriteZero, "socket closed")),
                Ok(mut n) => {
                    self.r.writes += 1;
                    self.pending_bytes -= n;
                    while n > 0 {
                        let Some(front) = self.pending.front_mut() else { break };
                        if n >= front.len() {
                            n -= front.len();
                            self.pending.pop_front();
                        } else {
                            let _ = front.split_to(n);
                            n = 0;
                        }
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// Read once and handle what came. Returns true when bytes arrived.
    fn read(&mut self) -> io::Result<bool> {
        // Straight into the engine's read buffer (its room is zeroed once and kept).
        let n = match self.sock.read(self.conn.read_space(READ_SIZE)) {
            Ok(0) => {
                return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "the broker closed the connection"));
            }
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock || e.kind() == io::ErrorKind::Interrupted => {
                return Ok(false)
            }
            Err(e) => return Err(e),
        };
        self.recv_now = now_ns();
        self.r.reads += 1;
        self.r.bytes_in += n as u64;
        self.conn.read_done(n);
        let buffered = self.conn.buffered_input();
        self.fc_in.feed(&buffered[buffered.len() - n..]);
        let now = self.now_ms();
        self.conn.process(now);
        loop {
            while let Some(e) = self.conn.poll_event() {
                self.on_event(e)?;
            }
            if !self.conn.input_paused() {
                break;
            }
            self.conn.process(now);
        }
        self.top_up_credit();
        Ok(true)
    }

    fn top_up_credit(&mut self) {
        let window = self.opts.credit;
        for r in &self.roles {
            let link = match r {
                Part::Consumer(c) => c.link,
                Part::Requester(q) => q.reply_link,
                Part::Responder(r) => r.link,
                _ => continue,
            };
            if self.conn.link_credit(link) < window / 2 + 1 {
                let _ = self.conn.grant_credit(link, window, false);
            }
        }
    }

    fn publish_counts(&mut self) {
        if self.unpublished_received > 0 {
            self.shared.received.fetch_add(self.unpublished_received, Relaxed);
            self.unpublished_received = 0;
        }
        if self.unpublished_settled > 0 {
            self.shared.settled.fetch_add(self.unpublished_settled, Relaxed);
            self.unpublished_settled = 0;
        }
    }

    fn on_event(&mut self, e: Event) -> io::Result<()> {
        match e {
            Event::Delivery(d) => {
                let Some(i) = self.by_link.get(d.link) else { return Ok(()) };
                let kind = match &mut self.roles[i] {
                    Part::Consumer(_) => 0,
                    Part::Requester(q) => {
                        q.responses += 1;
                        0
                    }
                    Part::Responder(_) => 1,
                    _ => 2,
                };
                self.r.received += 1;
                self.r.last_recv_ns = self.recv_now;
                if kind == 0 {
                    self.unpublished_received += 1;
                    if let Some(ts) = read_stamp(&d.payload, self.opts.size) {
                        self.r.latency.saturating_record(self.recv_now.saturating_sub(ts).max(1));
                    }
                } else if kind == 1 {
                    self.on_request(i, &d.payload);
                }
                if !d.settled {
                    self.conn.disposition(d.link, d.delivery_id, true, Some(DeliveryState::Accepted));
                }
            }
            Event::Disposition { link, settled, state, delivery_id } => {
                if !settled {
                    return Ok(());
                }
                let Some(i) = self.by_link.get(link) else { return Ok(()) };
                let accepted = matches!(state, Some(DeliveryState::Accepted));
                match &mut self.roles[i] {
                    Part::Producer(p) => {
                        if let (Some(t), true) = (p.sent_at.remove(&delivery_id), accepted) {
                            let _ = self.r.accept_latency.record(now_ns().saturating_sub(t).max(1));
                        }
                        p.outcomes += 1;
                        self.unpublished_settled += 1;
                        self.r.last_settle_ns = now_ns();
                    }
                    // Requests are done by their response; a refused one gets none.
                    Part::Requester(q) if q.send.link == link && !accepted => q.responses += 1,
                    Part::Requester(_) => {}
                    _ => return Ok(()),
                }
                if accepted {
                    self.r.accepted += 1;
                } else {
                    self.r.refused += 1;
                    if self.r.refusal.is_none() {
                        self.r.refusal = Some(format!("{state:?}"));
                    }
                }
            }
            // A reply link of a responder (fallback without anonymous terminus).
            Event::Attached { attach, .. } if attach.target.is_none() => {
                return Err(io::Error::other("the broker refused a reply link"));
            }
            Event::Detached { link, .. } if !self.owns(link) => {}
            Event::SessionEnded { channel, .. } if self.refused_channels.contains(&channel) => {}
            Event::Detached { link, error, .. } => {
                let what = error.map(|e| format!("{}: {}", e.condition, e.description.unwrap_or_default()));
                return Err(io::Error::other(format!(
                    "link {link:?} detached by the broker ({})",
                    what.unwrap_or_else(|| "no error".into())
                )));
            }
            Event::SessionEnded { error, .. } => {
                let what = error.map(|e| format!("{}: {}", e.condition, e.description.unwrap_or_default()));
                return Err(io::Error::other(format!("session ended ({})", what.unwrap_or_default())));
            }
            Event::Closed { error, .. } => {
                let what = error.map(|e| format!("{}: {}", e.condition, e.description.unwrap_or_default()));
                return Err(io::Error::other(format!("connection closed ({})", what.unwrap_or_default())));
            }
            Event::LocalError { error, .. } => {
                return Err(io::Error::other(format!(
                    "protocol error: {}: {}",
                    error.condition,
                    error.description.unwrap_or_default()
                )));
            }
            _ => {}
        }
        Ok(())
    }

    /// A responder got a request: queue its reply (sent as credit allows).
    fn on_request(&mut self, i: usize, payload: &Bytes) {
        let Ok(raw) = RawMessage::parse(payload) else { return };
        let Ok(Some(props)) = raw.properties() else { return };
        let Some(reply_to) = props.reply_to else { return };
        let reply = Properties {
            to: Some(reply_to.clone()),
            correlation_id: props.correlation_id.or(props.message_id),
            ..Default::default()
        };
        let mut buf = BytesMut::with_capacity(64 + reply_to.len() + raw.body_bytes().len());
        reply.encode(&mut buf);
        buf.put_slice(raw.body_bytes());
        if let Part::Responder(r) = &mut self.roles[i] {
            r.waiting.push_back((reply_to, buf.freeze()));
        }
        self.send_replies(i);
    }

    fn send_replies(&mut self, i: usize) -> bool {
        let Part::Responder(r) = &mut self.roles[i] else { return false };
        let mut sent = 0;
        while let Some((addr, msg)) = r.waiting.front() {
            let link = match (r.anonymous, r.by_address.get(addr)) {
                (Some(l), _) | (None, Some(&l)) => l,
                (None, None) => {
                    let attach = Attach {
                        name: format!("{}-reply-{}", self.name, r.by_address.len()),
                        role: Role::Sender,
                        snd_settle_mode: Some(SenderSettleMode::Settled),
                        rcv_settle_mode: Some(ReceiverSettleMode::First),
                        source: Some(Source::default()),
                        target: Some(AttachTarget::Target(Target {
                            address: Some(addr.clone()),
                            ..Default::default()
                        })),
                        ..Default::default()
                    };
                    let Ok(l) = self.conn.attach(r.channel, attach) else { break };
                    r.by_address.insert(addr.clone(), l);
                    l
                }
            };
            if self.conn.link_credit(link) == 0 {
                break;
            }
            let tag = DeliveryTag::from_u64(r.next_tag);
            if self.conn.send(link, tag, msg.clone(), true).is_err() {
                break;
            }
            r.next_tag += 1;
            r.waiting.pop_front();
            sent += 1;
        }
        self.r.sent += sent;
        sent > 0
    }

    fn finish(mut self) -> WorkerReport {
        self.publish_counts();
        // Close politely; the broker's answer is not awaited.
        self.conn.close(None);
        let _ = self.sock.set_nonblocking(false);
        let _ = self.flush();
        self.r.frames_in = self.fc_in.counts;
        self.r.frames_out = self.fc_out.counts;
        self.r
    }
}

/// Which part of the worker a link belongs to, indexed by `LinkId.0`.
#[derive(Default)]
struct LinkMap(Vec<Option<usize>>);

impl LinkMap {
    fn insert(&mut self, link: LinkId, part: usize) {
        let i = link.0 as usize;
        if self.0.len() <= i {
            self.0.resize(i + 1, None);
        }
        self.0[i] = Some(part);
    }

    #[inline]
    fn get(&self, link: LinkId) -> Option<usize> {
        self.0.get(link.0 as usize).copied().flatten()
    }
}

impl Producer {
    fn new(
        link: LinkId,
        channel: u16,
        chan_index: usize,
        presettled: bool,
        quota: Option<u64>,
        rate: Option<f64>,
    ) -> Producer {
        Producer {
            link,
            channel,
            chan_index,
            presettled,
            quota,
            rate,
            sent: 0,
            outcomes: 0,
            next_tag: 0,
            done: false,
            sent_at: std::collections::HashMap::new(),
        }
    }
}

/// The links of every worker for a scenario: producer connections first, then
/// consumer connections. Returns (worker name, links) pairs.
pub fn plan(opts: &Opts) -> Vec<(String, Vec<LinkSpec>)> {
    let producers = opts.connections * opts.links;
    let per = |k: usize| -> Option<u64> {
        opts.count.map(|c| c / producers as u64 + u64::from((k as u64) < c % producers as u64))
    };
    let rate = opts.rate.map(|r| r / producers as f64);
    let mut out = Vec::new();
    let mut k = 0;
    for c in 0..opts.connections {
        let mut links = Vec::new();
        for _ in 0..opts.links {
            let channel = k % opts.channels;
            let address = opts.channel_address(&opts.address, channel);
            links.push(match opts.scenario {
                Scenario::Rpc => LinkSpec::Requester { address, channel, quota: per(k), rate },
                _ => LinkSpec::Producer { address, channel, quota: per(k), rate },
            });
            k += 1;
        }
        out.push((format!("p{c}"), links));
    }
    let mut k = 0;
    for c in 0..opts.subscribers {
        let mut links = Vec::new();
        for _ in 0..opts.sub_links {
            let address = opts.channel_address(&opts.address2, k % opts.channels);
            links.push(match opts.scenario {
                Scenario::Rpc => LinkSpec::Responder { address },
                _ => LinkSpec::Consumer { address },
            });
            k += 1;
        }
        out.push((format!("s{c}"), links));
    }
    out
}

/// Number of producing links in a plan.
pub fn producer_count(plan: &[(String, Vec<LinkSpec>)]) -> usize {
    plan.iter().flat_map(|(_, l)| l).filter(|l| l.is_producer()).count()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::body::read_stamp;

    /// `--durable` and `--property`: the header, then the application properties, then
    /// the data section carrying the send time.
    #[test]
    fn produced_messages_keep_their_sections_in_order() {
        let args: Vec<String> =
            "events --durable --property color=red --property n=1 --size 100".split(' ').map(str::to_owned).collect();
        let opts = Opts::parse(&args).unwrap();
        let mut t = Template::new(&message_prefix(&opts), opts.size);
        let payload = t.stamp(42);
        let raw = RawMessage::parse(&payload).unwrap();
        assert_eq!(raw.header().unwrap().unwrap().durable, Some(true));
        let app = raw.application_properties().unwrap().unwrap();
        assert_eq!(app, vec![("color".to_owned(), Value::string("red")), ("n".to_owned(), Value::string("1"))]);
        assert_eq!(raw.data().unwrap().map(|d| d.len()), Some(100));
        assert_eq!(read_stamp(&payload, 100), Some(42));
    }
}
