//! Fuzz harness functions, shared by the cargo-fuzz targets in `fuzz/fuzz_targets/`
//! (`#[path = "../harness.rs"] mod harness;`) and by the corpus replay test
//! `tests/fuzz_corpus.rs` (`#[path = "../fuzz/harness.rs"] mod harness;`), so that
//! `cargo test` runs exactly the code that was fuzzed.
//!
//! Every function takes arbitrary bytes and must never panic. The only panics
//! here are assertions of properties that must hold for every input (round trips,
//! well-formed engine output) and the checks that the fixed handshake succeeds.
#![allow(dead_code)]

use bytes::{Bytes, BytesMut};
use sluice_proto::codec::{Decode, Decoder, Encode, Value};
use sluice_proto::engine::{Config, Connection, Event, LinkId};
use sluice_proto::frame::{write_frame, Deframer, RawFrame, AMQP_HEADER, FRAME_TYPE_AMQP, FRAME_TYPE_SASL};
use sluice_proto::types::{
    condition, Attach, AttachTarget, Begin, Body, DeliveryState, DeliveryTag, Error, Header, Message, Open,
    Performative, RawMessage, Role, SaslFrame, Source, Target,
};
use std::fmt::Debug;

/// Largest frame the `frame_decode` deframer accepts.
pub(crate) const MAX_FRAME_SIZE: u32 = 64 * 1024;

// ------------------------------------------------------------------ frame_decode

/// Split `data` into frames (protocol headers between frames are skipped, as the
/// engine does) and decode every frame body as AMQP and as SASL; parse the
/// payload of every TRANSFER as a message. The bytes are pushed in two halves so
/// that frames straddling the boundary take the partial-frame path.
pub(crate) fn frame_decode(data: &[u8]) {
    let mut de = Deframer::new(MAX_FRAME_SIZE);
    let half = data.len() / 2;
    de.push(&data[..half]);
    if !drain_frames(&mut de) {
        return;
    }
    de.push(&data[half..]);
    drain_frames(&mut de);
}

/// Decode the frames buffered in `de`; false after a framing error.
fn drain_frames(de: &mut Deframer) -> bool {
    loop {
        if de.buffered_bytes().starts_with(b"AMQP") {
            if de.take_raw(8).is_some() {
                continue;
            }
            return true;
        }
        match de.next_frame() {
            Ok(Some(frame)) => check_frame(&frame),
            Ok(None) => return true,
            Err(_) => return false,
        }
    }
}

fn check_frame(frame: &RawFrame) {
    let _ = frame.is_empty();
    let general = frame.decode_amqp();
    // The engine's path for TRANSFER frames agrees with the general decoder: what it
    // takes, the general decoder takes as the same transfer and payload; what it
    // declines comes back untouched.
    match frame.clone().into_transfer() {
        Ok((t, payload)) => match &general {
            Ok(f) => {
                assert_eq!(f.performative, Performative::Transfer(t), "into_transfer and decode_amqp differ");
                assert_eq!(f.payload, payload, "into_transfer and decode_amqp split the payload differently");
            }
            Err(e) => panic!("into_transfer accepted a frame decode_amqp refuses: {e:?}"),
        },
        Err(back) => assert_eq!(&back, frame, "into_transfer changed a frame it declined"),
    }
    if let Ok(f) = general {
        let _ = f.performative.name();
        // The one-pass encoders of the hot performatives write what the general one does.
        let (fast, slow) = match &f.performative {
            Performative::Flow(x) => (x.to_bytes(), general_bytes(|o| x.encode_general(o))),
            Performative::Transfer(x) => (x.to_bytes(), general_bytes(|o| x.encode_general(o))),
            Performative::Disposition(x) => (x.to_bytes(), general_bytes(|o| x.encode_general(o))),
            _ => (BytesMut::new(), BytesMut::new()),
        };
        assert_eq!(fast, slow, "one-pass and general encodings differ");
        if let Performative::Transfer(t) = &f.performative {
            let _ = (t.more(), t.settled(), t.aborted());
            check_message(&f.payload);
        }
    }
    if let Ok(s) = frame.decode_sasl() {
        roundtrip(&s, "sasl frame");
    }
}

fn general_bytes(f: impl FnOnce(&mut BytesMut)) -> BytesMut {
    let mut out = BytesMut::new();
    f(&mut out);
    out
}

/// Parse a message payload and exercise every section accessor. A message that
/// parses must still parse after [`RawMessage::encode_with_header`] (what the
/// broker does when it rewrites the header of a message it forwards).
fn check_message(payload: &Bytes) {
    let Ok(m) = RawMessage::parse(payload) else {
        return;
    };
    let _ = m.header();
    let _ = m.properties();
    let _ = m.application_properties();
    let _ = m.message_annotations();
    let _ = m.data();
    assert_eq!(m.encoded_len(), payload.len(), "sections of {payload:02x?} do not add up to the payload");
    let header = Header { durable: Some(true), delivery_count: Some(1), ..Default::default() };
    let mut out = BytesMut::new();
    m.encode_with_header(&header, &mut out);
    let rewritten = out.freeze();
    match RawMessage::parse(&rewritten) {
        Ok(m2) => {
            assert_eq!(m2.body_bytes(), m.body_bytes(), "body changed by encode_with_header");
            assert_eq!(m2.body_kind, m.body_kind, "body kind changed by encode_with_header");
            assert_eq!(m2.header(), Ok(Some(header)), "header not replaced");
        }
        Err(e) => panic!("message {payload:02x?} no longer parses after encode_with_header: {e:?} ({rewritten:02x?})"),
    }
}

// ------------------------------------------------------------------ value_decode

/// Decode the bytes as a value, a performative, a SASL frame and a message. What
/// decodes must survive a round trip: `encode(decode(encode(v))) == encode(v)`
/// (encodings are compared instead of values because NaN != NaN).
pub(crate) fn value_decode(data: &[u8]) {
    let mut d = Decoder::new(data);
    if let Ok(v) = Value::decode(&mut d) {
        roundtrip(&v, "value");
        let _ = (v.as_str(), v.is_null());
        // The values that follow the first one, as a frame body would hold them.
        let mut n = 0;
        while !d.is_empty() && n < 64 {
            match Value::decode(&mut d) {
                Ok(v) => roundtrip(&v, "value"),
                Err(_) => break,
            }
            n += 1;
        }
    }
    let _ = Value::decode_exact(data);
    if let Ok(p) = Performative::decode(&mut Decoder::new(data)) {
        roundtrip(&p, "performative");
    }
    if let Ok(s) = SaslFrame::decode(&mut Decoder::new(data)) {
        roundtrip(&s, "sasl frame");
    }
    check_message(&Bytes::copy_from_slice(data));
}

/// `encode(v)` decodes (exactly) and re-encodes to the same bytes.
fn roundtrip<T>(v: &T, what: &str)
where
    T: for<'a> Decode<'a> + Encode + Debug,
{
    let e1 = v.to_bytes();
    let v2 = match T::decode_exact(&e1) {
        Ok(v2) => v2,
        Err(e) => {
            panic!("{what}: the encoding of a decoded value does not decode: {e:?}\nvalue: {v:?}\nencoding: {e1:02x?}")
        }
    };
    let e2 = v2.to_bytes();
    assert_eq!(e1, e2, "{what}: re-encoding changed the bytes\nfirst: {v:?}\nsecond: {v2:?}");
}

// ------------------------------------------------------------------ engine

/// A server engine that has completed the plain AMQP handshake and attached one
/// receiving link (the peer sends) with credit, then reads `data` in two chunks;
/// a fresh server (before any protocol header) reads the same bytes as well.
/// Both answer the events like a small broker would and drain their output after
/// every step; everything they write must be well-formed frames.
pub(crate) fn engine(data: &[u8]) {
    let (mut conn, mut app) = handshaken_server();
    feed(&mut conn, &mut app, data);

    let mut fresh = Connection::new(Config::server("fuzz-server"), 0);
    let mut app = App::default();
    feed(&mut fresh, &mut app, data);
}

/// The bytes a client writes for the handshake of [`handshaken_server`].
pub(crate) fn client_handshake() -> Vec<u8> {
    let mut input = AMQP_HEADER.to_vec();
    input.extend(raw_frame(
        0,
        &Performative::Open(Box::new(Open {
            container_id: "fuzz-client".into(),
            max_frame_size: Some(4096),
            idle_time_out: Some(30_000),
            ..Default::default()
        })),
        &[],
    ));
    input.extend(raw_frame(
        0,
        &Performative::Begin(Begin {
            next_outgoing_id: 0,
            incoming_window: 100,
            outgoing_window: 100,
            ..Default::default()
        }),
        &[],
    ));
    input.extend(raw_frame(0, &client_attach(0, Role::Sender), &[]));
    input
}

/// The ATTACH a client sends on handle `handle`.
pub(crate) fn client_attach(handle: u32, role: Role) -> Performative {
    Performative::Attach(Box::new(Attach {
        name: format!("l{handle}"),
        handle,
        role,
        initial_delivery_count: (role == Role::Sender).then_some(0),
        source: Some(Source { address: Some("queues/x".into()), ..Default::default() }),
        target: Some(AttachTarget::Target(Target { address: Some("queues/x".into()), ..Default::default() })),
        ..Default::default()
    }))
}

/// One AMQP frame.
pub(crate) fn raw_frame(channel: u16, p: &Performative, payload: &[u8]) -> Vec<u8> {
    let mut b = BytesMut::new();
    write_frame(&mut b, FRAME_TYPE_AMQP, channel, p, payload);
    b.to_vec()
}

/// The server after [`client_handshake`]: OPEN, BEGIN, and the peer's sending link
/// answered with attach_reply and 100 credits.
fn handshaken_server() -> (Connection, App) {
    let mut c = Connection::new(Config::server("fuzz-server"), 0);
    let mut app = App::default();
    c.handle_input(&client_handshake(), 0);
    let mut link = None;
    while let Some(e) = c.poll_event() {
        if let Event::AttachRequested { link: l, .. } = e {
            link = Some(l);
        }
    }
    let Some(link) = link else { panic!("handshake: no attach requested") };
    if let Err(e) = c.attach_reply(link, Attach::default()) {
        panic!("handshake: attach_reply failed: {e:?}");
    }
    if let Err(e) = c.grant_credit(link, 100, false) {
        panic!("handshake: grant_credit failed: {e:?}");
    }
    assert!(c.is_open(), "handshake: connection not open");
    app.links.push((link, Role::Receiver));
    app.drain_output(&mut c);
    (c, app)
}

/// What the harness plays on the application side of a connection.
#[derive(Default)]
struct App {
    /// Links the peer attached, with our role.
    links: Vec<(LinkId, Role)>,
    /// Messages sent so far (bounded so that one input costs bounded work).
    sent: u32,
    /// Everything the connection wrote, checked as a whole at the end.
    output: Vec<u8>,
}

/// Payload the harness sends on links where it is the sender: larger than the
/// peer's max-frame-size of 4096, so it goes out in several frames.
fn outgoing_message(n: u32) -> Bytes {
    let body = if n.is_multiple_of(2) { vec![n as u8; 16] } else { vec![n as u8; 5000] };
    Message { body: Body::Data(Bytes::from(body)), ..Default::default() }.to_bytes().freeze()
}

impl App {
    fn react(&mut self, c: &mut Connection, e: Event) {
        match e {
            Event::AttachRequested { link, attach, .. } => {
                let role = attach.role.peer();
                if attach.handle % 8 == 7 {
                    let _ = c.refuse_attach(link, Error::new(condition::NOT_FOUND, "refused by the fuzz harness"));
                    return;
                }
                let reply = Attach {
                    source: attach.source.clone(),
                    target: attach.target.clone(),
                    max_message_size: Some(1 << 20),
                    ..Default::default()
                };
                if c.attach_reply(link, reply).is_ok() {
                    self.links.push((link, role));
                    if role == Role::Receiver {
                        let _ = c.grant_credit(link, 10, false);
                    } else {
                        let _ = c.set_available(link, 3);
                    }
                }
            }
            Event::Credit { link, credit, drain } => {
                if credit > 0 && self.sent < 8 {
                    let tag = DeliveryTag::from_u64(self.sent as u64);
                    let payload = outgoing_message(self.sent);
                    let settled = self.sent.is_multiple_of(3);
                    self.sent += 1;
                    let _ = c.send(link, tag, payload, settled);
                }
                if drain {
                    let _ = c.drain_complete(link);
                }
            }
            Event::SenderFlow { link, credit: 0, drain: false, .. } => {
                let _ = c.grant_credit(link, 5, false);
            }
            Event::Delivery(d) => {
                check_message(&d.payload);
                if !d.settled {
                    let state = if d.delivery_id % 4 == 3 { DeliveryState::Released } else { DeliveryState::Accepted };
                    c.disposition(d.link, d.delivery_id, true, Some(state));
                }
            }
            Event::Disposition { link, delivery_id, settled: false, .. } => {
                c.disposition(link, delivery_id, true, Some(DeliveryState::Accepted));
            }
            Event::Detached { link, .. } => self.links.retain(|(l, _)| *l != link),
            Event::SaslInit(_) => c.sasl_outcome(0),
            _ => {}
        }
    }

    /// Answer every event (bounded: reactions may raise events of their own).
    fn drain_events(&mut self, c: &mut Connection) {
        for _ in 0..10_000 {
            let Some(e) = c.poll_event() else { return };
            self.react(c, e);
        }
    }

    fn drain_output(&mut self, c: &mut Connection) {
        while let Some(b) = c.poll_transmit() {
            self.output.extend_from_slice(&b);
        }
    }

    fn step(&mut self, c: &mut Connection) {
        self.drain_events(c);
        self.drain_output(c);
        let _ = (c.wants_write(), c.poll_timeout(), c.is_open(), c.is_closed(), c.remote_open());
        for (link, _) in &self.links {
            let _ = (c.link_info(*link), c.link_credit(*link));
        }
        for ch in 0..4 {
            let _ = (c.session_window(ch), c.unsettled_counts(ch));
        }
    }
}

fn feed(c: &mut Connection, app: &mut App, data: &[u8]) {
    let half = data.len() / 2;
    c.handle_input(&data[..half], 10);
    app.step(c);
    c.handle_input(&data[half..], 20);
    app.step(c);
    // Let the timers fire: heartbeats, idle timeout, handshake timeout, close deadline.
    for _ in 0..3 {
        let Some(t) = c.poll_timeout() else { break };
        c.handle_timeout(t.max(20));
        app.step(c);
    }
    c.handle_eof();
    app.step(c);
    check_output(&app.output);
}

/// What an engine wrote must be protocol headers and frames that decode.
fn check_output(out: &[u8]) {
    let mut de = Deframer::new(u32::MAX);
    de.push(out);
    loop {
        if de.buffered_bytes().starts_with(b"AMQP") && de.take_raw(8).is_some() {
            continue;
        }
        match de.next_frame() {
            Ok(Some(f)) if f.frame_type == FRAME_TYPE_SASL => {
                if let Err(e) = f.decode_sasl() {
                    panic!("engine wrote an undecodable SASL frame: {e:?}: {:02x?}", f.body);
                }
            }
            Ok(Some(f)) => {
                if !f.is_empty() {
                    if let Err(e) = f.decode_amqp() {
                        panic!("engine wrote an undecodable AMQP frame: {e:?}: {:02x?}", f.body);
                    }
                }
            }
            Ok(None) => break,
            Err(e) => panic!("engine wrote a malformed frame: {e:?}"),
        }
    }
    assert_eq!(de.buffered(), 0, "engine output ends inside a frame");
}
