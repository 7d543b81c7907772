//! A small blocking AMQP 1.0 client over `std::net::TcpStream`, driven by the
//! sluice-proto engine. Used by the load generator and by the black-box tests,
//! where it can also write raw bytes that no well-behaved client would.

use bytes::Bytes;
use sluice_proto::codec::Fields;
use sluice_proto::engine::{ClientSasl, Config, Connection, Event, LinkId};
use sluice_proto::types::{
    Attach, AttachTarget, DeliveryState, DeliveryTag, ReceiverSettleMode, Role, SenderSettleMode, Source, Target,
};
use std::collections::VecDeque;
use std::io::{self, Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::time::{Duration, Instant};

/// Options of a link the client attaches.
#[derive(Debug, Clone, Default)]
pub struct LinkOptions {
    /// Sender: pre-settled transfers. Receiver: ask the broker to send pre-settled.
    pub presettled: bool,
    /// Link properties (e.g. `x-opt-kubemq-group`, `x-opt-kubemq-start`).
    pub properties: Option<Fields>,
    /// Source filter (selectors).
    pub filter: Option<Fields>,
    /// Source expiry policy (`never` for durable subscriptions).
    pub expiry_policy: Option<&'static str>,
    /// Request a dynamic node.
    pub dynamic: bool,
    /// Sender: a durable target terminus (durable = 2, unsettled-state); brokers such
    /// as RabbitMQ then declare a durable queue.
    pub durable: bool,
}

/// A connected client.
pub struct Client {
    conn: Connection,
    stream: TcpStream,
    start: Instant,
    events: VecDeque<Event>,
    buf: Vec<u8>,
    next_tag: u64,
}

/// Default time to wait for the broker in [`Client::wait_for`].
pub const WAIT: Duration = Duration::from_secs(10);

impl Client {
    /// Connect and complete the handshake (SASL ANONYMOUS, OPEN).
    pub fn connect(addr: impl ToSocketAddrs, container_id: &str) -> io::Result<Client> {
        Self::connect_with(addr, Config::client(container_id))
    }

    /// Connect with an explicit engine configuration.
    pub fn connect_with(addr: impl ToSocketAddrs, config: Config) -> io::Result<Client> {
        let stream = TcpStream::connect(addr)?;
        stream.set_nodelay(true)?;
        let start = Instant::now();
        let mut c = Client {
            conn: Connection::new(config, 0),
            stream,
            start,
            events: VecDeque::new(),
            buf: vec![0; 256 * 1024],
            next_tag: 0,
        };
        c.wait_for(|e| matches!(e, Event::Opened(_)), WAIT)?;
        Ok(c)
    }

    /// Take the client apart (after the handshake and attaches) to drive the engine
    /// and the socket directly: the engine, the stream (still blocking), the events
    /// not consumed yet, and the engine's clock origin (`now` = ms since it).
    pub fn into_parts(self) -> (Connection, TcpStream, VecDeque<Event>, Instant) {
        (self.conn, self.stream, self.events, self.start)
    }

    /// The engine, for calls this wrapper does not offer.
    pub fn engine(&mut self) -> &mut Connection {
        &mut self.conn
    }

    fn now(&self) -> u64 {
        self.start.elapsed().as_millis() as u64
    }

    /// Write everything the engine has queued.
    pub fn flush(&mut self) -> io::Result<()> {
        let mut batch = Vec::new();
        while let Some(chunk) = self.conn.poll_transmit() {
            batch.extend_from_slice(&chunk);
        }
        if !batch.is_empty() {
            self.stream.write_all(&batch)?;
        }
        Ok(())
    }

    /// Write raw bytes, bypassing the engine.
    pub fn write_raw(&mut self, bytes: &[u8]) -> io::Result<()> {
        self.flush()?;
        self.stream.write_all(bytes)
    }

    /// Flush, then read once (waiting at most `timeout`) and process what came.
    /// Returns false on end of stream.
    pub fn pump(&mut self, timeout: Duration) -> io::Result<bool> {
        self.flush()?;
        self.stream.set_read_timeout(Some(timeout.max(Duration::from_millis(1))))?;
        let n = match self.stream.read(&mut self.buf) {
            Ok(0) => {
                self.conn.handle_eof();
                self.collect();
                return Ok(false);
            }
            Ok(n) => n,
            Err(e) if matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut) => 0,
            Err(e) if e.kind() == io::ErrorKind::ConnectionReset => {
                self.conn.handle_eof();
                self.collect();
                return Ok(false);
            }
            Err(e) => return Err(e),
        };
        let now = self.now();
        if n > 0 {
            self.conn.handle_input(&self.buf[..n], now);
            while self.conn.input_paused() {
                self.collect();
                self.conn.process(now);
            }
        }
        self.conn.handle_timeout(now);
        self.collect();
        self.flush()?;
        Ok(true)
    }

    fn collect(&mut self) {
        while let Some(e) = self.conn.poll_event() {
            self.events.push_back(e);
        }
    }

    /// Take the events seen so far.
    pub fn take_events(&mut self) -> Vec<Event> {
        self.events.drain(..).collect()
    }

    /// Wait for the first event matching `pred` (earlier events are kept).
    pub fn wait_for(&mut self, mut pred: impl FnMut(&Event) -> bool, timeout: Duration) -> io::Result<Event> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(i) = self.events.iter().position(&mut pred) {
                if let Some(e) = self.events.remove(i) {
                    return Ok(e);
                }
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(io::Error::new(io::ErrorKind::TimedOut, "event not seen in time"));
            }
            if !self.pump(left.min(Duration::from_millis(50)))? {
                if let Some(i) = self.events.iter().position(&mut pred) {
                    if let Some(e) = self.events.remove(i) {
                        return Ok(e);
                    }
                }
                return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "connection closed"));
            }
        }
    }

    /// Begin a session and wait for the broker's answer.
    pub fn begin(&mut self) -> io::Result<u16> {
        let ch = self.conn.begin().map_err(io::Error::other)?;
        self.wait_for(|e| matches!(e, Event::SessionBegun { channel, .. } if *channel == ch), WAIT)?;
        Ok(ch)
    }

    /// Attach a sending link to `address` (None: the anonymous terminus).
    pub fn attach_sender(
        &mut self,
        ch: u16,
        name: &str,
        address: Option<&str>,
        opts: &LinkOptions,
    ) -> io::Result<LinkId> {
        let attach = Attach {
            source: Some(Source::default()),
            target: Some(AttachTarget::Target(Target {
                address: address.map(str::to_owned),
                dynamic: opts.dynamic.then_some(true),
                durable: opts.durable.then_some(2),
                ..Default::default()
            })),
            ..base_attach(name, Role::Sender, opts)
        };
        self.attach(ch, attach)
    }

    /// Attach a receiving link from `address` (None with `dynamic`: a dynamic node).
    pub fn attach_receiver(
        &mut self,
        ch: u16,
        name: &str,
        address: Option<&str>,
        opts: &LinkOptions,
    ) -> io::Result<LinkId> {
        let attach = Attach {
            source: Some(Source {
                address: address.map(str::to_owned),
                dynamic: opts.dynamic.then_some(true),
                filter: opts.filter.clone(),
                expiry_policy: opts.expiry_policy.map(sluice_proto::codec::Symbol::new),
                ..Default::default()
            }),
            target: Some(AttachTarget::Target(Target::default())),
            ..base_attach(name, Role::Receiver, opts)
        };
        self.attach(ch, attach)
    }

    /// Attach and wait for the broker's ATTACH. A refused link comes back as
    /// `Err` with the detach condition in the message.
    pub fn attach(&mut self, ch: u16, attach: Attach) -> io::Result<LinkId> {
        self.attach_full(ch, attach).map(|(link, _)| link)
    }

    /// [`Self::attach`], also returning the broker's ATTACH (e.g. the address it
    /// gave a dynamic node).
    pub fn attach_full(&mut self, ch: u16, attach: Attach) -> io::Result<(LinkId, Box<Attach>)> {
        let link = self.conn.attach(ch, attach).map_err(io::Error::other)?;
        // A broker may also end the whole session instead of answering (the link is
        // then reported detached, and the session's error comes with its end).
        let e = self.wait_for(
            |e| matches!(e, Event::Attached { link: l, .. } | Event::Detached { link: l, .. } if *l == link),
            WAIT,
        )?;
        let attach = match e {
            Event::Attached { attach, .. } => attach,
            Event::Detached { error, .. } => {
                let ended = self.events.iter().find_map(|e| match e {
                    Event::SessionEnded { channel, error, .. } if *channel == ch => error.clone(),
                    _ => None,
                });
                return Err(match error.or(ended) {
                    Some(err) => {
                        io::Error::other(format!("{}: {}", err.condition, err.description.unwrap_or_default()))
                    }
                    None => io::Error::other("attach refused"),
                });
            }
            _ => unreachable!(),
        };
        let refused = match attach.role {
            Role::Sender => attach.source.is_none(),
            Role::Receiver => attach.target.is_none(),
        };
        if refused {
            let d = self.wait_for(|e| matches!(e, Event::Detached { link: l, .. } if *l == link), WAIT)?;
            if let Event::Detached { error: Some(err), .. } = d {
                return Err(io::Error::other(format!("{}: {}", err.condition, err.description.unwrap_or_default())));
            }
            return Err(io::Error::other("attach refused"));
        }
        Ok((link, attach))
    }

    /// Send one message (an encoded message payload).
    pub fn send(&mut self, link: LinkId, payload: Bytes, settled: bool) -> io::Result<u32> {
        let tag = DeliveryTag::from_u64(self.next_tag);
        self.next_tag += 1;
        let id = self.conn.send(link, tag, payload, settled).map_err(io::Error::other)?;
        Ok(id)
    }

    /// Send one message, encoded straight into the connection's output buffer (no
    /// encoded copy of its own; see `Connection::send_message`).
    pub fn send_message(&mut self, link: LinkId, msg: &sluice_proto::types::Message, settled: bool) -> io::Result<u32> {
        let tag = DeliveryTag::from_u64(self.next_tag);
        self.next_tag += 1;
        self.conn.send_message(link, tag, msg, settled).map_err(io::Error::other)
    }

    /// Wait until the link has credit.
    pub fn wait_credit(&mut self, link: LinkId) -> io::Result<u32> {
        let deadline = Instant::now() + WAIT;
        while self.conn.link_credit(link) == 0 {
            if Instant::now() > deadline {
                return Err(io::Error::new(io::ErrorKind::TimedOut, "no credit"));
            }
            self.pump(Duration::from_millis(50))?;
        }
        Ok(self.conn.link_credit(link))
    }

    /// Wait for the broker's outcome of an unsettled delivery.
    pub fn wait_outcome(&mut self, link: LinkId, delivery_id: u32) -> io::Result<Option<DeliveryState>> {
        match self.wait_for(
            |e| matches!(e, Event::Disposition { link: l, delivery_id: d, .. } if *l == link && *d == delivery_id),
            WAIT,
        )? {
            Event::Disposition { state, .. } => Ok(state),
            _ => unreachable!(),
        }
    }

    /// Receive the next delivery on `link`.
    pub fn receive(&mut self, link: LinkId, timeout: Duration) -> io::Result<sluice_proto::engine::Delivery> {
        match self.wait_for(|e| matches!(e, Event::Delivery(d) if d.link == link), timeout)? {
            Event::Delivery(d) => Ok(d),
            _ => unreachable!(),
        }
    }

    /// Settle a received delivery with an outcome.
    pub fn settle(&mut self, link: LinkId, delivery_id: u32, state: DeliveryState) {
        self.conn.disposition(link, delivery_id, true, Some(state));
    }
}

/// SASL PLAIN with the initial response `\0user\0password` (RFC 4616).
pub fn sasl_plain(user: &str, password: &str) -> ClientSasl {
    let mut r = Vec::with_capacity(user.len() + password.len() + 2);
    r.push(0);
    r.extend_from_slice(user.as_bytes());
    r.push(0);
    r.extend_from_slice(password.as_bytes());
    ClientSasl { mechanism: "PLAIN".into(), initial_response: Some(Bytes::from(r)) }
}

/// An encoded message with one data section.
pub fn data_message(body: &[u8]) -> Bytes {
    use sluice_proto::codec::Encode;
    let m = sluice_proto::types::Message {
        body: sluice_proto::types::Body::Data(Bytes::copy_from_slice(body)),
        ..Default::default()
    };
    m.to_bytes().freeze()
}

/// The ATTACH fields a sender and a receiver share: name, role, settle modes
/// from `opts`, link properties.
fn base_attach(name: &str, role: Role, opts: &LinkOptions) -> Attach {
    Attach {
        name: name.into(),
        role,
        snd_settle_mode: Some(if opts.presettled { SenderSettleMode::Settled } else { SenderSettleMode::Unsettled }),
        rcv_settle_mode: Some(ReceiverSettleMode::First),
        properties: opts.properties.clone(),
        ..Default::default()
    }
}
