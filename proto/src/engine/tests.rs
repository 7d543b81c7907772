//! A scripted client/server pair with simulated time, plus raw frames written by
//! hand where a well-behaved engine would never produce them.

use super::*;
use crate::codec::Decode;
use crate::codec::Value;
use crate::frame::{write_frame, Deframer};
use crate::types::{Accepted, AttachTarget, Body, Header, Rejected, Source, Target};

struct Pair {
    client: Connection,
    server: Connection,
    now: u64,
}

impl Pair {
    fn new(client: Config, server: Config) -> Pair {
        let mut p = Pair { client: Connection::new(client, 0), server: Connection::new(server, 0), now: 0 };
        p.pump();
        p
    }

    fn open() -> Pair {
        let mut p = Pair::new(Config::client("client"), Config::server("server"));
        let ce = drain(&mut p.client);
        let se = drain(&mut p.server);
        assert!(ce.iter().any(|e| matches!(e, Event::Opened(_))), "{ce:?}");
        assert!(se.iter().any(|e| matches!(e, Event::Opened(_))), "{se:?}");
        p
    }

    /// Move bytes both ways until neither side has anything to write.
    fn pump(&mut self) {
        loop {
            let mut moved = false;
            while let Some(b) = self.client.poll_transmit() {
                self.server.handle_input(&b, self.now);
                moved = true;
            }
            while let Some(b) = self.server.poll_transmit() {
                self.client.handle_input(&b, self.now);
                moved = true;
            }
            if !moved {
                break;
            }
        }
    }

    /// A session and a link from the client, answered by the server.
    /// Returns (client channel, client link, server link).
    fn link(&mut self, client_role: Role, name: &str) -> (u16, LinkId, LinkId) {
        let ch = self.client.begin().unwrap();
        self.pump();
        drain(&mut self.server);
        drain(&mut self.client);
        let (c, s) = self.link_on(ch, client_role, name);
        (ch, c, s)
    }

    fn link_on(&mut self, ch: u16, client_role: Role, name: &str) -> (LinkId, LinkId) {
        let attach = Attach {
            name: name.into(),
            role: client_role,
            source: Some(Source { address: Some("queues/a".into()), ..Default::default() }),
            target: Some(AttachTarget::Target(Target { address: Some("queues/a".into()), ..Default::default() })),
            ..Default::default()
        };
        let c = self.client.attach(ch, attach.clone()).unwrap();
        self.pump();
        let s = match drain(&mut self.server).into_iter().find(|e| matches!(e, Event::AttachRequested { .. })) {
            Some(Event::AttachRequested { link, attach, .. }) => {
                assert_eq!(attach.name, name);
                link
            }
            other => panic!("no attach: {other:?}"),
        };
        self.server.attach_reply(s, attach).unwrap();
        self.pump();
        assert!(drain(&mut self.client).iter().any(|e| matches!(e, Event::Attached { .. })));
        (c, s)
    }
}

fn drain(c: &mut Connection) -> Vec<Event> {
    std::iter::from_fn(|| c.poll_event()).collect()
}

fn deliveries(events: &[Event]) -> Vec<&Delivery> {
    events
        .iter()
        .filter_map(|e| match e {
            Event::Delivery(d) => Some(d),
            _ => None,
        })
        .collect()
}

fn local_error(events: &[Event]) -> Option<(Scope, String)> {
    events.iter().find_map(|e| match e {
        Event::LocalError { scope, error } => Some((*scope, error.condition.as_str().to_owned())),
        _ => None,
    })
}

/// Every frame a connection wrote, decoded.
fn frames_of(bytes: &[u8]) -> Vec<Performative> {
    let mut de = Deframer::new(u32::MAX);
    let mut rest = bytes;
    // Skip protocol headers.
    while rest.len() >= 8 && &rest[..4] == b"AMQP" {
        rest = &rest[8..];
    }
    de.push(rest);
    let mut out = Vec::new();
    while let Ok(Some(f)) = de.next_frame() {
        if f.frame_type == FRAME_TYPE_AMQP && !f.is_empty() {
            out.push(f.decode_amqp().unwrap().performative);
        }
    }
    out
}

fn collect_out(c: &mut Connection) -> Vec<u8> {
    let mut v = Vec::new();
    while let Some(b) = c.poll_transmit() {
        v.extend_from_slice(&b);
    }
    v
}

fn raw(ch: u16, p: Performative, payload: &[u8]) -> Vec<u8> {
    let mut b = BytesMut::new();
    write_frame(&mut b, FRAME_TYPE_AMQP, ch, &p, payload);
    b.to_vec()
}

/// A server that has received the plain AMQP header, OPEN and BEGIN written by hand.
fn raw_server(config: Config) -> Connection {
    raw_server_opened(config, Open { container_id: "raw".into(), ..Default::default() })
}

/// [`raw_server`] with the peer's OPEN as given.
fn raw_server_opened(config: Config, open: Open) -> Connection {
    let mut s = Connection::new(config, 0);
    let mut input = AMQP_HEADER.to_vec();
    input.extend(raw(0, Performative::Open(Box::new(open)), &[]));
    input.extend(raw(
        0,
        Performative::Begin(Begin {
            next_outgoing_id: 0,
            incoming_window: 100,
            outgoing_window: 100,
            ..Default::default()
        }),
        &[],
    ));
    s.handle_input(&input, 0);
    drain(&mut s);
    collect_out(&mut s);
    s
}

fn raw_attach(handle: u32, role: Role) -> Performative {
    Performative::Attach(Box::new(peer_attach(handle, role)))
}

/// The peer's ATTACH of [`raw_attach`], to shape further.
fn peer_attach(handle: u32, role: Role) -> Attach {
    Attach {
        name: format!("l{handle}"),
        handle,
        role,
        initial_delivery_count: Some(0),
        target: Some(AttachTarget::Target(Target { address: Some("queues/x".into()), ..Default::default() })),
        ..Default::default()
    }
}

/// A sending peer's own link: `snd_settle_mode` as it declares it.
fn raw_sender_attach(handle: u32, mode: SenderSettleMode) -> Performative {
    Performative::Attach(Box::new(Attach { snd_settle_mode: Some(mode), ..peer_attach(handle, Role::Sender) }))
}

fn raw_transfer(handle: u32, id: Option<u32>, more: bool) -> Performative {
    Performative::Transfer(peer_transfer(handle, id, more))
}

/// The peer's TRANSFER of [`raw_transfer`], to shape further.
fn peer_transfer(handle: u32, id: Option<u32>, more: bool) -> Transfer {
    Transfer {
        handle,
        delivery_id: id,
        delivery_tag: id.map(|i| DeliveryTag::from_u64(i as u64)),
        more: more.then_some(true),
        ..Default::default()
    }
}

/// One-frame transfers on handle 0 with delivery-ids `ids`, each carrying "m", in one input.
fn raw_transfers(ids: std::ops::Range<u32>) -> Vec<u8> {
    ids.flat_map(|i| raw(0, raw_transfer(0, Some(i), false), b"m")).collect()
}

/// Attach a receiving link on the raw server and grant it credit.
fn raw_server_with_receiver(config: Config, credit: u32) -> (Connection, LinkId) {
    let mut s = raw_server(config);
    let link = attach_receiving_link(&mut s, 0, credit);
    collect_out(&mut s);
    (s, link)
}

/// The server takes the peer's sending link on `handle` and grants it `credit`.
fn attach_receiving_link(s: &mut Connection, handle: u32, credit: u32) -> LinkId {
    s.handle_input(&raw(0, raw_attach(handle, Role::Sender), &[]), 0);
    let link = attach_requested(&drain(s));
    s.attach_reply(link, Attach::default()).unwrap();
    s.grant_credit(link, credit, false).unwrap();
    link
}

#[test]
fn sasl_anonymous_handshake_and_open_negotiation() {
    let mut server = Config::server("server");
    server.max_frame_size = 4096;
    server.idle_timeout_ms = 10_000;
    let mut client = Config::client("client");
    client.max_frame_size = 1 << 20;
    let mut p = Pair::new(client, server);
    let ce = drain(&mut p.client);
    assert!(ce.contains(&Event::SaslOutcome(0)));
    let open = ce
        .iter()
        .find_map(|e| match e {
            Event::Opened(o) => Some(o.clone()),
            _ => None,
        })
        .unwrap();
    assert_eq!(open.container_id, "server");
    assert_eq!(open.max_frame_size, Some(4096));
    // Half of the configured idle timeout is advertised.
    assert_eq!(open.idle_time_out, Some(5_000));
    // Both directions use min(peer, configured).
    assert_eq!(p.client.send_max_frame_size(), 4096);
    assert_eq!(p.server.send_max_frame_size(), 4096);
    assert!(p.client.is_open() && p.server.is_open());
}

#[test]
fn plain_amqp_header_without_sasl() {
    let mut client = Config::client("c");
    client.client_sasl = None;
    let mut p = Pair::new(client, Config::server("s"));
    assert!(p.server.is_open());
    assert!(drain(&mut p.client).iter().any(|e| matches!(e, Event::Opened(_))));
}

#[test]
fn pipelined_handshake_in_one_write() {
    // Header, OPEN, BEGIN and ATTACH all arrive before the server wrote anything.
    let mut input = AMQP_HEADER.to_vec();
    input.extend(raw(0, Performative::Open(Box::new(Open { container_id: "p".into(), ..Default::default() })), &[]));
    input.extend(raw(
        0,
        Performative::Begin(Begin {
            next_outgoing_id: 0,
            incoming_window: 10,
            outgoing_window: 10,
            ..Default::default()
        }),
        &[],
    ));
    input.extend(raw(0, raw_attach(0, Role::Sender), &[]));
    let mut s = Connection::new(Config::server("s"), 0);
    s.handle_input(&input, 0);
    let ev = drain(&mut s);
    assert!(matches!(ev[0], Event::Opened(_)));
    assert!(matches!(ev[1], Event::SessionBegun { channel: 0, .. }));
    assert!(matches!(ev[2], Event::AttachRequested { .. }));
}

#[test]
fn bad_protocol_header_gets_ours_and_closes() {
    let mut s = Connection::new(Config::server("s"), 0);
    s.handle_input(b"HTTP/1.1 200 OK\r\n", 0);
    let out = collect_out(&mut s);
    assert_eq!(out, SASL_HEADER.to_vec());
    assert!(s.is_closed());
    assert_eq!(local_error(&drain(&mut s)).unwrap().0, Scope::Connection);
}

#[test]
fn frame_before_open_and_second_open_close_the_connection() {
    let mut s = Connection::new(Config::server("s"), 0);
    let mut input = AMQP_HEADER.to_vec();
    input.extend(raw(0, Performative::Begin(Begin::default()), &[]));
    s.handle_input(&input, 0);
    let frames = frames_of(&collect_out(&mut s));
    // OPEN then CLOSE with the error (2.4.5: an OPEN precedes the CLOSE).
    assert!(matches!(frames[0], Performative::Open(_)));
    match &frames[1] {
        Performative::Close(c) => assert_eq!(c.error.as_ref().unwrap().condition, "amqp:illegal-state"),
        other => panic!("{other:?}"),
    }

    let mut s = raw_server(Config::server("s"));
    s.handle_input(
        &raw(0, Performative::Open(Box::new(Open { container_id: "again".into(), ..Default::default() })), &[]),
        0,
    );
    assert_eq!(local_error(&drain(&mut s)), Some((Scope::Connection, "amqp:not-allowed".into())));
    assert!(s.is_closed());
}

#[test]
fn max_frame_size_below_512_is_refused() {
    let mut s = Connection::new(Config::server("s"), 0);
    let mut input = AMQP_HEADER.to_vec();
    input.extend(raw(
        0,
        Performative::Open(Box::new(Open {
            container_id: "x".into(),
            max_frame_size: Some(511),
            ..Default::default()
        })),
        &[],
    ));
    s.handle_input(&input, 0);
    assert_eq!(local_error(&drain(&mut s)), Some((Scope::Connection, "amqp:frame-size-too-small".into())));
}

#[test]
fn oversized_frame_closes_with_framing_error() {
    let mut cfg = Config::server("s");
    cfg.max_frame_size = 1024;
    let mut s = raw_server(cfg);
    // A header announcing 2000 bytes is refused before the body arrives.
    s.handle_input(&[0, 0, 0x07, 0xd0, 2, 0, 0, 0], 0);
    assert_eq!(local_error(&drain(&mut s)), Some((Scope::Connection, "amqp:connection:framing-error".into())));
}

#[test]
fn channel_above_channel_max_closes() {
    let mut cfg = Config::server("s");
    cfg.channel_max = 3;
    cfg.limit_grace = 2;
    let mut s = raw_server(cfg);
    s.handle_input(
        &raw(
            6,
            Performative::Begin(Begin {
                next_outgoing_id: 0,
                incoming_window: 1,
                outgoing_window: 1,
                ..Default::default()
            }),
            &[],
        ),
        0,
    );
    assert_eq!(local_error(&drain(&mut s)), Some((Scope::Connection, "amqp:connection:framing-error".into())));
}

#[test]
fn handle_above_handle_max_closes_and_handle_in_use_ends_session() {
    let mut cfg = Config::server("s");
    cfg.handle_max = 7;
    let mut s = raw_server(cfg.clone());
    s.handle_input(&raw(0, raw_attach(1 << 31, Role::Sender), &[]), 0);
    assert_eq!(local_error(&drain(&mut s)), Some((Scope::Connection, "amqp:connection:framing-error".into())));

    let mut s = raw_server(cfg);
    s.handle_input(&raw(0, raw_attach(2, Role::Sender), &[]), 0);
    s.handle_input(&raw(0, raw_attach(2, Role::Sender), &[]), 0);
    let ev = drain(&mut s);
    assert_eq!(local_error(&ev), Some((Scope::Session(0), "amqp:session:errant-link".into())));
    assert!(ev.iter().any(|e| matches!(e, Event::Detached { local: true, .. })));
    assert!(ev.iter().any(|e| matches!(e, Event::SessionEnded { local: true, .. })));
    let frames = frames_of(&collect_out(&mut s));
    assert!(frames.iter().any(
        |f| matches!(f, Performative::End(e) if e.error.as_ref().unwrap().condition == "amqp:session:errant-link")
    ));
    // The connection is still open.
    assert!(s.is_open());
}

#[test]
fn frames_on_unattached_handles_end_the_session() {
    for (p, cond) in [
        (
            Performative::Flow(Flow { handle: Some(9), link_credit: Some(1), ..Default::default() }),
            "amqp:session:unattached-handle",
        ),
        (raw_transfer(9, Some(0), false), "amqp:session:errant-link"),
        (Performative::Detach(Detach { handle: 9, ..Default::default() }), "amqp:session:unattached-handle"),
    ] {
        let mut s = raw_server(Config::server("s"));
        s.handle_input(&raw(0, p, &[]), 0);
        assert_eq!(local_error(&drain(&mut s)), Some((Scope::Session(0), cond.into())));
        assert!(s.is_open());
    }
}

#[test]
fn transfer_without_credit_detaches_the_link() {
    let (mut s, _link) = raw_server_with_receiver(Config::server("s"), 1);
    s.handle_input(&raw(0, raw_transfer(0, Some(0), false), b"one"), 0);
    s.handle_input(&raw(0, raw_transfer(0, Some(1), false), b"two"), 0);
    let ev = drain(&mut s);
    assert_eq!(deliveries(&ev).len(), 1);
    assert!(matches!(local_error(&ev), Some((Scope::Link(_), c)) if c == "amqp:link:transfer-limit-exceeded"));
    let frames = frames_of(&collect_out(&mut s));
    assert!(frames.iter().any(|f| matches!(f, Performative::Detach(d) if d.closed() && d.error.is_some())));
    // A transfer still in flight on the handle we detached is ignored, not an error.
    s.handle_input(&raw(0, raw_transfer(0, Some(2), false), b"late"), 0);
    assert!(drain(&mut s).is_empty());
    assert!(s.is_open());
}

#[test]
fn frames_after_a_link_or_session_error_in_the_same_read_are_processed() {
    // A link error (h0 has no credit left), then a transfer on h1 in the same read.
    let mut s = raw_server(Config::server("s"));
    attach_receiving_link(&mut s, 0, 1);
    attach_receiving_link(&mut s, 1, 10);
    collect_out(&mut s);
    let mut input = raw(0, raw_transfer(0, Some(0), false), b"one");
    input.extend(raw(0, raw_transfer(0, Some(1), false), b"two"));
    input.extend(raw(0, raw_transfer(1, Some(2), false), b"three"));
    s.handle_input(&input, 0);
    let ev = drain(&mut s);
    assert!(matches!(local_error(&ev), Some((Scope::Link(_), c)) if c == "amqp:link:transfer-limit-exceeded"));
    let ids: Vec<u32> = deliveries(&ev).iter().map(|d| d.delivery_id).collect();
    assert_eq!(ids, [0, 2]);
    assert!(s.buffered_input().is_empty());

    // A session error on channel 0, then an ATTACH on channel 1 in the same read.
    let mut s = raw_server(Config::server("s"));
    let begin = Begin { next_outgoing_id: 0, incoming_window: 100, outgoing_window: 100, ..Default::default() };
    s.handle_input(&raw(1, Performative::Begin(begin), &[]), 0);
    drain(&mut s);
    collect_out(&mut s);
    let mut input = raw(0, Performative::Detach(Detach { handle: 9, ..Default::default() }), &[]);
    input.extend(raw(1, raw_attach(0, Role::Sender), &[]));
    s.handle_input(&input, 0);
    let ev = drain(&mut s);
    assert_eq!(local_error(&ev), Some((Scope::Session(0), "amqp:session:unattached-handle".into())));
    assert!(ev.iter().any(|e| matches!(e, Event::AttachRequested { .. })), "{ev:?}");
    assert!(s.buffered_input().is_empty());
    assert!(s.is_open());
}

#[test]
fn first_transfer_needs_id_and_tag() {
    let (mut s, _) = raw_server_with_receiver(Config::server("s"), 10);
    s.handle_input(&raw(0, raw_transfer(0, None, false), b"x"), 0);
    assert!(matches!(local_error(&drain(&mut s)), Some((Scope::Link(_), c)) if c == "amqp:invalid-field"));
}

#[test]
fn window_violation_ends_the_session() {
    let mut cfg = Config::server("s");
    cfg.session_window = 4;
    let (mut s, _) = raw_server_with_receiver(cfg, 100);
    // Five transfers in one read: the fifth exceeds the window of four.
    s.handle_input(&raw_transfers(0..5), 0);
    let ev = drain(&mut s);
    assert_eq!(deliveries(&ev).len(), 4);
    assert_eq!(local_error(&ev), Some((Scope::Session(0), "amqp:session:window-violation".into())));
}

#[test]
fn window_is_reopened_between_reads() {
    let mut cfg = Config::server("s");
    cfg.session_window = 4;
    let (mut s, _) = raw_server_with_receiver(cfg, 100);
    for i in 0..20 {
        s.handle_input(&raw(0, raw_transfer(0, Some(i), false), b"m"), 0);
    }
    let ev = drain(&mut s);
    assert_eq!(deliveries(&ev).len(), 20);
    assert_eq!(local_error(&ev), None);
    let flows = frames_of(&collect_out(&mut s));
    assert!(flows.iter().any(|f| matches!(f, Performative::Flow(f) if f.incoming_window == 4)));
}

#[test]
fn message_size_exceeded_detaches() {
    let mut cfg = Config::server("s");
    cfg.max_message_size = 10;
    let (mut s, _) = raw_server_with_receiver(cfg.clone(), 10);
    s.handle_input(&raw(0, raw_transfer(0, Some(0), false), &[0u8; 10]), 0);
    s.handle_input(&raw(0, raw_transfer(0, Some(1), false), &[0u8; 11]), 0);
    let ev = drain(&mut s);
    assert_eq!(deliveries(&ev).len(), 1);
    assert!(matches!(local_error(&ev), Some((Scope::Link(_), c)) if c == "amqp:link:message-size-exceeded"));

    // Endless more=true is bounded by the same limit.
    let (mut s, _) = raw_server_with_receiver(cfg, 10);
    s.handle_input(&raw(0, raw_transfer(0, Some(0), true), &[0u8; 6]), 0);
    s.handle_input(&raw(0, raw_transfer(0, None, true), &[0u8; 6]), 0);
    assert!(matches!(local_error(&drain(&mut s)), Some((Scope::Link(_), c)) if c == "amqp:link:message-size-exceeded"));
}

#[test]
fn continuation_with_another_delivery_id_and_aborted_transfers() {
    let (mut s, _) = raw_server_with_receiver(Config::server("s"), 10);
    s.handle_input(&raw(0, raw_transfer(0, Some(0), true), b"a"), 0);
    s.handle_input(
        &raw(0, Performative::Transfer(Transfer { handle: 0, aborted: Some(true), ..Default::default() }), &[]),
        0,
    );
    let ev = drain(&mut s);
    assert!(matches!(ev[0], Event::Aborted { delivery_id: 0, .. }));
    s.handle_input(&raw(0, raw_transfer(0, Some(1), true), b"a"), 0);
    s.handle_input(&raw(0, raw_transfer(0, Some(5), false), b"b"), 0);
    assert!(matches!(local_error(&drain(&mut s)), Some((Scope::Link(_), c)) if c == "amqp:invalid-field"));
}

#[test]
fn settled_flag_must_match_the_settle_mode() {
    let mut s = raw_server(Config::server("s"));
    s.handle_input(&raw(0, raw_sender_attach(0, SenderSettleMode::Settled), &[]), 0);
    let link = attach_requested(&drain(&mut s));
    s.attach_reply(link, Attach { snd_settle_mode: Some(SenderSettleMode::Settled), ..Default::default() }).unwrap();
    s.grant_credit(link, 5, false).unwrap();
    s.handle_input(&raw(0, raw_transfer(0, Some(0), false), b"x"), 0);
    assert!(matches!(local_error(&drain(&mut s)), Some((Scope::Link(_), c)) if c == "amqp:invalid-field"));
}

#[test]
fn multi_frame_reassembly_over_small_frames() {
    let mut server = Config::server("s");
    server.max_frame_size = 4096;
    let mut p = Pair::new(Config::client("c"), server);
    drain(&mut p.client);
    drain(&mut p.server);
    let (_, c, s) = p.link(Role::Sender, "big");
    p.server.grant_credit(s, 10, false).unwrap();
    p.pump();
    drain(&mut p.client);
    let payload: Bytes = (0..1_000_000u32).map(|i| (i * 7 % 251) as u8).collect::<Vec<_>>().into();
    let id = p.client.send(c, DeliveryTag::from_u64(1), payload.clone(), false).unwrap();
    p.pump();
    let ev = drain(&mut p.server);
    let d = deliveries(&ev);
    assert_eq!(d.len(), 1);
    assert_eq!(d[0].delivery_id, id);
    assert_eq!(d[0].payload, payload);
    assert!(!d[0].settled);
    // The server settles it; the client hears accepted.
    p.server.disposition(s, id, true, Some(DeliveryState::Accepted));
    p.pump();
    let ev = drain(&mut p.client);
    assert!(ev.contains(&Event::Disposition {
        link: c,
        delivery_id: id,
        settled: true,
        state: Some(DeliveryState::Accepted)
    }));
}

/// While a multi-frame delivery comes in, `receiving` says how much of it is here: its
/// credit is taken at the first frame, the delivery event comes at the last.
#[test]
fn a_delivery_coming_in_frame_by_frame_is_seen_as_receiving() {
    let mut server = Config::server("s");
    server.max_frame_size = 512;
    let mut p = Pair::new(Config::client("c"), server);
    drain(&mut p.client);
    drain(&mut p.server);
    let (_, c, s) = p.link(Role::Sender, "frames");
    p.server.grant_credit(s, 10, false).unwrap();
    p.pump();
    drain(&mut p.client);
    assert_eq!(p.server.receiving(s), None);
    let payload = Bytes::from(vec![3u8; 10_000]);
    p.client.send(c, DeliveryTag::from_u64(1), payload.clone(), false).unwrap();
    let mut seen = Vec::new();
    while let Some(chunk) = p.client.poll_transmit() {
        // Frame by frame (a chunk may carry several: feed them 512 bytes at a time).
        for part in chunk.chunks(512) {
            p.server.handle_input(part, 0);
            if let Some(n) = p.server.receiving(s) {
                assert_eq!(p.server.link_credit(s), 9, "the credit is taken at the first frame");
                assert!(deliveries(&drain(&mut p.server)).is_empty());
                seen.push(n);
            }
        }
    }
    assert!(seen.len() > 10 && seen.windows(2).all(|w| w[0] <= w[1]) && seen[seen.len() - 1] < 10_000, "{seen:?}");
    assert_eq!(p.server.receiving(s), None);
    assert_eq!(deliveries(&drain(&mut p.server))[0].payload, payload);
}

#[test]
fn large_outgoing_payload_is_not_copied() {
    let mut p = Pair::open();
    let (_, c, s) = p.link(Role::Receiver, "r");
    p.client.grant_credit(c, 1, false).unwrap();
    p.pump();
    drain(&mut p.server);
    let payload = Bytes::from(vec![9u8; 32 * 1024]);
    p.server.send(s, DeliveryTag::from_u64(0), payload.clone(), true).unwrap();
    let mut found = false;
    while let Some(chunk) = p.server.poll_transmit() {
        if chunk.as_ptr() == payload.as_ptr() {
            found = true;
        }
        p.client.handle_input(&chunk, 0);
    }
    assert!(found, "payload chunk should share the caller's buffer");
    assert_eq!(deliveries(&drain(&mut p.client))[0].payload, payload);
}

#[test]
fn credit_and_delivery_count_wrap_around() {
    let mut p = Pair::open();
    let ch = p.client.begin().unwrap();
    p.pump();
    drain(&mut p.server);
    // A client sender whose delivery-count starts just below 2^32.
    let attach = Attach {
        name: "wrap".into(),
        role: Role::Sender,
        initial_delivery_count: Some(u32::MAX - 2),
        target: Some(AttachTarget::Target(Target { address: Some("q".into()), ..Default::default() })),
        ..Default::default()
    };
    let c = p.client.attach(ch, attach.clone()).unwrap();
    p.pump();
    let s = match drain(&mut p.server).remove(0) {
        Event::AttachRequested { link, .. } => link,
        other => panic!("{other:?}"),
    };
    p.server.attach_reply(s, attach).unwrap();
    p.server.grant_credit(s, 10, false).unwrap();
    p.pump();
    assert!(drain(&mut p.client).iter().any(|e| matches!(e, Event::Credit { credit: 10, .. })));
    for i in 0..6 {
        p.client.send(c, DeliveryTag::from_u64(i), Bytes::from_static(b"m"), true).unwrap();
    }
    p.pump();
    assert_eq!(deliveries(&drain(&mut p.server)).len(), 6);
    let info = p.server.link_info(s).unwrap();
    assert_eq!(info.delivery_count, 3); // u32::MAX - 2 + 6, wrapped
    assert_eq!(info.link_credit, 4);
    // The receiver re-grants 10 from its wrapped delivery-count.
    p.server.grant_credit(s, 10, false).unwrap();
    p.pump();
    assert!(drain(&mut p.client).iter().any(|e| matches!(e, Event::Credit { credit: 10, .. })));
    assert_eq!(p.client.link_credit(c), 10);
}

#[test]
fn credit_granted_while_deliveries_are_in_flight() {
    let mut p = Pair::open();
    let (_, c, s) = p.link(Role::Receiver, "r");
    p.client.grant_credit(c, 5, false).unwrap();
    p.pump();
    drain(&mut p.server);
    // The server sends two; before they arrive the client re-grants 5 from count 0.
    p.server.send(s, DeliveryTag::from_u64(0), Bytes::from_static(b"a"), true).unwrap();
    p.server.send(s, DeliveryTag::from_u64(1), Bytes::from_static(b"b"), true).unwrap();
    let in_flight = collect_out(&mut p.server);
    p.client.grant_credit(c, 5, false).unwrap();
    while let Some(b) = p.client.poll_transmit() {
        p.server.handle_input(&b, 0);
    }
    // (0 + 5) - 2 = 3: the effective credit formula.
    assert!(drain(&mut p.server).contains(&Event::Credit { link: s, credit: 3, drain: false }));
    p.client.handle_input(&in_flight, 0);
    assert_eq!(deliveries(&drain(&mut p.client)).len(), 2);
}

#[test]
fn drain_is_answered_at_once_with_zero_credit() {
    let mut p = Pair::open();
    let (_, c, s) = p.link(Role::Receiver, "d");
    p.client.grant_credit(c, 50, true).unwrap();
    p.pump();
    assert!(drain(&mut p.server).contains(&Event::Credit { link: s, credit: 50, drain: true }));
    p.server.send(s, DeliveryTag::from_u64(0), Bytes::from_static(b"only"), true).unwrap();
    p.server.drain_complete(s).unwrap();
    let out = collect_out(&mut p.server);
    let frames = frames_of(&out);
    match frames.last() {
        Some(Performative::Flow(f)) => {
            assert_eq!(f.link_credit, Some(0));
            assert_eq!(f.drain, Some(true));
            assert_eq!(f.delivery_count, Some(50));
        }
        other => panic!("{other:?}"),
    }
    let info = p.server.link_info(s).unwrap();
    assert_eq!((info.delivery_count, info.link_credit), (50, 0));
    // No credit is left to send with.
    assert_eq!(p.server.send(s, DeliveryTag::from_u64(1), Bytes::new(), true), Err(UsageError::NoCredit));
    // The client sees the one message, then its credit drained to zero.
    p.client.handle_input(&out, 0);
    let ev = drain(&mut p.client);
    assert_eq!(deliveries(&ev).len(), 1);
    assert!(ev.iter().any(|e| matches!(e, Event::SenderFlow { credit: 0, drain: true, .. })));
    assert_eq!(p.client.link_credit(c), 0);
}

#[test]
fn echo_is_answered() {
    let mut p = Pair::open();
    let (_, c, s) = p.link(Role::Receiver, "e");
    p.client.grant_credit(c, 3, false).unwrap();
    p.pump();
    drain(&mut p.server);
    let mut s_in = Vec::new();
    s_in.extend(raw(
        0,
        Performative::Flow(Flow {
            next_incoming_id: Some(0),
            incoming_window: 10,
            next_outgoing_id: 0,
            outgoing_window: 10,
            handle: Some(0),
            delivery_count: Some(0),
            link_credit: Some(3),
            echo: Some(true),
            ..Default::default()
        }),
        &[],
    ));
    p.server.handle_input(&s_in, 0);
    let frames = frames_of(&collect_out(&mut p.server));
    assert!(frames
        .iter()
        .any(|f| matches!(f, Performative::Flow(f) if f.handle == Some(0) && f.link_credit == Some(3))));
    let _ = s;
}

/// A FLOW in the usual shape (decoded in place) and one carrying properties (decoded
/// by the general decoder) take the same effect; a FLOW on a session this side has
/// ended is ignored in either shape.
#[test]
fn flows_in_either_shape_take_the_same_effect() {
    let props = || Some(crate::codec::Fields(vec![(crate::codec::Symbol::new("k"), crate::codec::Value::Uint(1))]));
    for properties in [None, props()] {
        let mut p = Pair::open();
        let (ch, _c, s) = p.link(Role::Receiver, "f");
        drain(&mut p.server);
        let flow = |credit: u32, drain: bool, properties| Flow {
            next_incoming_id: Some(0),
            incoming_window: 10,
            next_outgoing_id: 0,
            outgoing_window: 10,
            handle: Some(0),
            delivery_count: Some(0),
            link_credit: Some(credit),
            available: None,
            drain: Some(drain),
            echo: Some(true),
            properties,
        };
        p.server.handle_input(&raw(0, Performative::Flow(flow(7, false, properties.clone())), &[]), 0);
        assert_eq!(p.server.link_credit(s), 7, "{properties:?}");
        let ev = drain(&mut p.server);
        assert!(ev.iter().any(|e| matches!(e, Event::Credit { credit: 7, drain: false, .. })), "{ev:?}");
        let frames = frames_of(&collect_out(&mut p.server));
        assert!(frames.iter().any(|f| matches!(f, Performative::Flow(f) if f.link_credit == Some(7))));
        // Session-level flow only (no handle): the window, no link event.
        let mut session = flow(0, false, properties.clone());
        session.handle = None;
        session.incoming_window = 3;
        p.server.handle_input(&raw(0, Performative::Flow(session), &[]), 0);
        assert_eq!(p.server.link_credit(s), 7);
        assert!(drain(&mut p.server).iter().any(|e| matches!(e, Event::SessionFlow { .. })));
        // Ended by this side: the peer's FLOW is ignored, not an error.
        p.server.end_session(ch, None);
        collect_out(&mut p.server);
        p.server.handle_input(&raw(0, Performative::Flow(flow(9, true, properties.clone())), &[]), 0);
        assert_eq!(local_error(&drain(&mut p.server)), None);
        assert!(p.server.is_open());
        assert!(frames_of(&collect_out(&mut p.server)).iter().all(|f| !matches!(f, Performative::Flow(_))));
    }
}

#[test]
fn disposition_ranges_walk_only_known_deliveries() {
    let mut p = Pair::open();
    let (_, c, s) = p.link(Role::Receiver, "r");
    p.client.grant_credit(c, 100, false).unwrap();
    p.pump();
    drain(&mut p.server);
    for i in 0..10 {
        p.server.send(s, DeliveryTag::from_u64(i), Bytes::from_static(b"x"), false).unwrap();
    }
    p.pump();
    let ids: Vec<u32> = deliveries(&drain(&mut p.client)).iter().map(|d| d.delivery_id).collect();
    assert_eq!(ids.len(), 10);
    // One consecutive range is coalesced into a single DISPOSITION frame.
    for id in &ids[..5] {
        p.client.disposition(c, *id, true, Some(DeliveryState::Accepted));
    }
    let frames = frames_of(&collect_out(&mut p.client));
    let disp: Vec<_> = frames.iter().filter(|f| matches!(f, Performative::Disposition(_))).collect();
    assert_eq!(disp.len(), 1);
    p.server.handle_input(&raw(0, disp[0].clone(), &[]), 0);
    assert_eq!(drain(&mut p.server).len(), 5);
    // A hostile range 0..2^31-1 (the widest in serial order; a wider one has its last
    // before its first and is refused): only the 5 still-unsettled deliveries are visited.
    let all = Performative::Disposition(Disposition {
        role: Role::Receiver,
        first: 0,
        last: Some(i32::MAX as u32),
        settled: Some(true),
        state: Some(DeliveryState::Released),
        batchable: None,
    });
    p.server.handle_input(&raw(0, all, &[]), 0);
    let ev = drain(&mut p.server);
    assert_eq!(ev.len(), 5);
    assert!(ev
        .iter()
        .all(|e| matches!(e, Event::Disposition { settled: true, state: Some(DeliveryState::Released), .. })));
    assert_eq!(p.server.unsettled_counts(0), (0, 0));
}

/// A DISPOSITION in the usual shape (decoded in place) and one with a rejected state
/// (decoded by the general decoder) take the same effect, for one delivery and for a
/// range; a DISPOSITION on a session this side has ended is ignored in either shape.
#[test]
fn dispositions_in_either_shape_take_the_same_effect() {
    let rejected = || DeliveryState::Rejected(Box::new(Rejected { error: None }));
    for state in [DeliveryState::Accepted, rejected()] {
        let mut p = Pair::open();
        let (ch, c, s) = p.link(Role::Receiver, "d");
        p.client.grant_credit(c, 10, false).unwrap();
        p.pump();
        drain(&mut p.server);
        for i in 0..6 {
            p.server.send(s, DeliveryTag::from_u64(i), Bytes::from_static(b"x"), false).unwrap();
        }
        p.pump();
        drain(&mut p.client);
        let disposition = |first: u32, last: Option<u32>, settled: bool| {
            Performative::Disposition(Disposition {
                role: Role::Receiver,
                first,
                last,
                settled: Some(settled),
                state: Some(state.clone()),
                batchable: None,
            })
        };
        // One delivery, not settled: reported with its state, still unsettled.
        p.server.handle_input(&raw(0, disposition(0, None, false), &[]), 0);
        let ev = drain(&mut p.server);
        assert_eq!(ev.len(), 1, "{ev:?}");
        assert!(
            matches!(&ev[0], Event::Disposition { delivery_id: 0, settled: false, state: Some(st), .. } if *st == state)
        );
        assert_eq!(p.server.unsettled_counts(0).1, 6);
        // A range, settled: each delivery reported, all settled.
        p.server.handle_input(&raw(0, disposition(0, Some(3), true), &[]), 0);
        let ev = drain(&mut p.server);
        assert_eq!(ev.len(), 4, "{ev:?}");
        assert!(ev
            .iter()
            .all(|e| matches!(e, Event::Disposition { settled: true, state: Some(st), .. } if *st == state)));
        assert_eq!(p.server.unsettled_counts(0).1, 2);
        // Ended by this side: ignored, nothing settled, no error.
        p.server.end_session(ch, None);
        collect_out(&mut p.server);
        drain(&mut p.server);
        p.server.handle_input(&raw(0, disposition(4, Some(5), true), &[]), 0);
        assert!(drain(&mut p.server).iter().all(|e| !matches!(e, Event::Disposition { .. })));
        assert_eq!(local_error(&drain(&mut p.server)), None);
        assert!(p.server.is_open());
    }
}

#[test]
fn detach_end_and_close_are_answered() {
    let mut p = Pair::open();
    let (ch, c, s) = p.link(Role::Sender, "x");
    p.client.detach(c, None);
    p.pump();
    assert!(drain(&mut p.server).contains(&Event::Detached { link: s, closed: true, error: None, local: false }));
    let (_c2, s2) = p.link_on(ch, Role::Sender, "y");
    p.client.end_session(ch, None);
    p.pump();
    let ev = drain(&mut p.server);
    assert!(ev.iter().any(|e| matches!(e, Event::Detached { link, .. } if *link == s2)));
    assert!(ev.iter().any(|e| matches!(e, Event::SessionEnded { local: false, .. })));
    p.client.close(None);
    p.pump();
    assert!(drain(&mut p.server).iter().any(|e| matches!(e, Event::Closed { error: None, local: false })));
    assert!(p.server.is_closed());
    assert!(p.client.is_closed());
}

#[test]
fn heartbeats_and_idle_expiry() {
    let mut server = Config::server("s");
    server.idle_timeout_ms = 10_000;
    let mut p = Pair::new(Config::client("c"), server);
    drain(&mut p.client);
    // The client sends an empty frame at half the server's advertised 5 s.
    let t = p.client.poll_timeout().unwrap();
    assert_eq!(t, 2_500);
    p.client.handle_timeout(t);
    let hb = collect_out(&mut p.client);
    assert_eq!(hb, vec![0, 0, 0, 8, 2, 0, 0, 0]);
    p.server.handle_input(&hb, t);
    // The server expires after its configured 10 s of silence.
    assert_eq!(p.server.poll_timeout(), Some(t + 10_000));
    p.server.handle_timeout(t + 9_999);
    assert!(p.server.is_open());
    p.server.handle_timeout(t + 10_000);
    assert_eq!(local_error(&drain(&mut p.server)), Some((Scope::Connection, "amqp:resource-limit-exceeded".into())));
    let frames = frames_of(&collect_out(&mut p.server));
    assert!(matches!(frames.last(), Some(Performative::Close(c)) if c.error.is_some()));
}

#[test]
fn handshake_timeout_closes_a_silent_peer() {
    let mut s = Connection::new(Config::server("s"), 1_000);
    assert_eq!(s.poll_timeout(), Some(11_000));
    s.handle_input(&SASL_HEADER, 2_000);
    s.handle_timeout(11_000);
    assert!(s.is_closed());
    assert!(matches!(local_error(&drain(&mut s)), Some((Scope::Connection, c)) if c == "amqp:resource-limit-exceeded"));
}

#[test]
fn sasl_decision_by_the_application() {
    let mut server = Config::server("s");
    server.sasl_auto_accept = false;
    let mut client = Config::client("c");
    client.client_sasl =
        Some(ClientSasl { mechanism: "PLAIN".into(), initial_response: Some(Bytes::from_static(b"\0u\0p")) });
    let mut p = Pair::new(client.clone(), server.clone());
    match drain(&mut p.server).remove(0) {
        Event::SaslInit(init) => {
            assert_eq!(init.mechanism, "PLAIN");
            assert_eq!(init.initial_response.as_deref(), Some(&b"\0u\0p"[..]));
        }
        other => panic!("{other:?}"),
    }
    p.server.sasl_outcome(1);
    p.pump();
    assert!(drain(&mut p.client).contains(&Event::SaslOutcome(1)));
    assert!(p.server.is_closed() && p.client.is_closed());

    let mut p = Pair::new(client, server);
    drain(&mut p.server);
    p.server.sasl_outcome(0);
    p.pump();
    assert!(p.server.is_open() && p.client.is_open());
}

#[test]
fn decode_error_in_a_frame_closes_with_decode_error() {
    let mut s = raw_server(Config::server("s"));
    // A FLOW list8 that claims 0x20 bytes with only 2 present.
    s.handle_input(&[0, 0, 0, 0x0e, 2, 0, 0, 0, 0x00, 0x53, 0x13, 0xc0, 0x20, 0x01], 0);
    assert_eq!(local_error(&drain(&mut s)), Some((Scope::Connection, "amqp:decode-error".into())));
}

#[test]
fn arbitrary_bytes_after_handshake_never_panic() {
    // A tiny deterministic generator (xorshift) so this test is reproducible.
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    for round in 0..2_000 {
        let (mut s, _) = raw_server_with_receiver(Config::server("s"), 5);
        let mut input = Vec::new();
        for _ in 0..(round % 64 + 1) {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            input.push((x & 0xff) as u8);
        }
        // Half the rounds get a plausible frame header in front.
        if round % 2 == 0 {
            let len = (input.len() + 8) as u32;
            let mut f = len.to_be_bytes().to_vec();
            f.extend([2, 0, 0, 0]);
            f.extend(&input);
            input = f;
        }
        s.handle_input(&input, 0);
        drain(&mut s);
        collect_out(&mut s);
    }
    // Known good value still decodes after all that: sanity check of the helpers.
    assert_eq!(DeliveryState::decode_exact(&[0x00, 0x53, 0x24, 0x45]), Ok(DeliveryState::Accepted));
    let _ = Accepted {};
}

#[test]
fn pre_open_traffic_beyond_the_cap_closes_the_connection() {
    // A server that leaves SASL decisions to the application, which never answers:
    // the client keeps sending bytes that the engine must still count and refuse.
    let mut cfg = Config::server("s");
    cfg.sasl_mechanisms = vec![];
    cfg.allow_no_sasl = true;
    let mut s = Connection::new(cfg, 0);
    s.handle_input(&AMQP_HEADER, 0);
    // Heartbeats before OPEN are legal frames, and each one is counted.
    let mut closed = false;
    for _ in 0..(PRE_OPEN_MAX_BYTES / 8 + 2) {
        s.handle_input(&[0, 0, 0, 8, 2, 0, 0, 0], 0);
        if s.is_closed() {
            closed = true;
            break;
        }
    }
    assert!(closed, "the connection should close beyond the pre-open cap");
    assert!(matches!(local_error(&drain(&mut s)), Some((Scope::Connection, c)) if c == "amqp:resource-limit-exceeded"));
}

#[test]
fn pipelined_frames_after_open_are_not_counted_as_pre_open_traffic() {
    let mut input = AMQP_HEADER.to_vec();
    input.extend(raw(0, Performative::Open(Box::new(Open { container_id: "p".into(), ..Default::default() })), &[]));
    input.extend(raw(
        0,
        Performative::Begin(Begin {
            next_outgoing_id: 0,
            incoming_window: 10,
            outgoing_window: 10,
            ..Default::default()
        }),
        &[],
    ));
    // 200 KiB of pipelined (ignored) heartbeats right behind the OPEN.
    for _ in 0..25_600 {
        input.extend([0, 0, 0, 8, 2, 0, 0, 0]);
    }
    let mut s = Connection::new(Config::server("s"), 0);
    s.handle_input(&input, 0);
    assert!(s.is_open());
    assert_eq!(local_error(&drain(&mut s)), None);
}

/// A client with a sender link holding 100 credits, to a server whose frames are at
/// most 4,096 bytes; both sides drained. Returns the pair, the client's link and the
/// server's.
fn sender_with_100_credits() -> (Pair, LinkId, LinkId) {
    let mut server = Config::server("s");
    server.max_frame_size = 4096;
    let mut p = Pair::new(Config::client("c"), server);
    drain(&mut p.client);
    drain(&mut p.server);
    let (_, c, s) = p.link(Role::Sender, "l");
    p.server.grant_credit(s, 100, false).unwrap();
    p.pump();
    drain(&mut p.client);
    drain(&mut p.server);
    (p, c, s)
}

/// A received delivery carries what its sender gave it: link, delivery-id, tag,
/// message-format, settlement and payload, whether it came in one frame (filled in
/// place in the event queue) or in several (reassembled).
#[test]
fn received_deliveries_carry_every_field_the_sender_set() {
    let (mut p, c, server_link) = sender_with_100_credits();
    let cases = [(0usize, 0u32, true), (100, 7, false), (10_000, 0x1234_5678, true), (3, u32::MAX, false)];
    for (i, (size, format, settled)) in cases.into_iter().enumerate() {
        let payload: Bytes = (0..size).map(|b| (b * 31 % 255) as u8).collect::<Vec<_>>().into();
        let tag = DeliveryTag::from_slice(&[i as u8 + 1; 13][..i * 4 + 1]).unwrap();
        let id = p.client.send_with_format(c, tag.clone(), payload.clone(), settled, format).unwrap();
        p.pump();
        let ev = drain(&mut p.server);
        let d = deliveries(&ev);
        assert_eq!(d.len(), 1, "case {i}: {ev:?}");
        assert_eq!(d[0].link, server_link, "case {i}");
        assert_eq!(d[0].delivery_id, id, "case {i}");
        assert_eq!(d[0].tag, tag, "case {i}");
        assert_eq!(d[0].message_format, format, "case {i}");
        assert_eq!(d[0].settled, settled, "case {i}");
        assert_eq!(d[0].payload, payload, "case {i}");
    }
}

/// `send_ref` puts the same frames on the wire as `send` for every payload shape
/// (empty, small, just below and at the zero-copy threshold, several frames, settled
/// or not), and keeps no reference to a payload it copied.
#[test]
fn send_ref_writes_what_send_writes() {
    let (mut by_value, cv, _) = sender_with_100_credits();
    let (mut by_ref, cr, _) = sender_with_100_credits();
    let sizes = [0usize, 1, 100, 4000, ZERO_COPY_THRESHOLD - 1, ZERO_COPY_THRESHOLD, 10_000];
    for (i, size) in sizes.into_iter().enumerate() {
        for settled in [true, false] {
            let payload: Bytes = (0..size).map(|b| (b * 13 % 251) as u8).collect::<Vec<_>>().into();
            let tag = DeliveryTag::from_u64(i as u64 * 2 + settled as u64);
            let a = by_value.client.send(cv, tag.clone(), payload.clone(), settled).unwrap();
            let b = by_ref.client.send_ref(cr, tag, &payload, settled).unwrap();
            assert_eq!(a, b, "delivery-id, size {size}");
            if size > 0 && size < ZERO_COPY_THRESHOLD && size <= 4096 - TRANSFER_OVERHEAD {
                assert!(payload.is_unique(), "size {size}: a copied payload is not kept");
            }
            let wa = collect_out(&mut by_value.client);
            let wb = collect_out(&mut by_ref.client);
            assert_eq!(wa, wb, "wire bytes, size {size}, settled {settled}");
            assert_eq!(frames_of(&wb).len(), size.div_ceil(4096 - TRANSFER_OVERHEAD).max(1), "size {size}");
            by_ref.server.handle_input(&wb, 0);
            let ev = drain(&mut by_ref.server);
            let d = deliveries(&ev);
            assert_eq!(d.len(), 1, "size {size}: {ev:?}");
            assert_eq!(d[0].payload, payload);
            assert_eq!(d[0].settled, settled);
        }
    }
    assert_eq!(by_ref.client.link_credit(cr), 100 - 2 * sizes.len() as u32);
}

/// `send_message` puts the same frames on the wire as `send` of the message's
/// encoding, for every shape: data bodies of every size class (the in-place
/// one-section head, vbin32, larger than a frame), other bodies, and a small body
/// whose other sections make the encoding larger than a frame (encoded in place,
/// then taken back and split).
#[test]
fn send_message_writes_what_send_writes() {
    let data = |n: usize| Message {
        body: Body::Data((0..n).map(|b| (b * 7 % 253) as u8).collect::<Vec<_>>().into()),
        ..Default::default()
    };
    let big_props =
        Message { application_properties: Some(vec![("k".into(), Value::String("v".repeat(5000)))]), ..data(100) };
    let with_header = Message { header: Some(Header { durable: Some(true), ..Default::default() }), ..data(100) };
    let messages = vec![
        Message::default(),
        data(0),
        data(100),
        data(255),
        data(256),
        data(4000),
        data(10_000),
        Message { body: Body::Value(Value::String("hello".into())), ..Default::default() },
        with_header,
        big_props,
    ];
    let (mut by_bytes, cb, _) = sender_with_100_credits();
    let (mut in_place, cm, _) = sender_with_100_credits();
    for (i, msg) in messages.iter().enumerate() {
        for settled in [true, false] {
            let tag = DeliveryTag::from_u64(i as u64 * 2 + settled as u64);
            let encoded = msg.to_bytes().freeze();
            let a = by_bytes.client.send(cb, tag.clone(), encoded.clone(), settled).unwrap();
            let b = in_place.client.send_message(cm, tag, msg, settled).unwrap();
            assert_eq!(a, b, "delivery-id, message {i}");
            let wa = collect_out(&mut by_bytes.client);
            let wb = collect_out(&mut in_place.client);
            assert_eq!(wa, wb, "wire bytes, message {i}, settled {settled}");
            assert_eq!(frames_of(&wb).len(), encoded.len().div_ceil(4096 - TRANSFER_OVERHEAD).max(1), "message {i}");
            in_place.server.handle_input(&wb, 0);
            let ev = drain(&mut in_place.server);
            let d = deliveries(&ev);
            assert_eq!(d.len(), 1, "message {i}: {ev:?}");
            assert_eq!(d[0].payload, encoded);
            assert_eq!(d[0].settled, settled);
        }
    }
    assert_eq!(in_place.client.link_credit(cm), 100 - 2 * messages.len() as u32);
    // Refused as `send` refuses: no credit left, nothing written.
    let (mut p, c, _) = sender_with_100_credits();
    for i in 0..100 {
        p.client.send_message(c, DeliveryTag::from_u64(i), &messages[2], true).unwrap();
    }
    drop(collect_out(&mut p.client));
    assert_eq!(p.client.send_message(c, DeliveryTag::from_u64(100), &messages[2], true), Err(UsageError::NoCredit));
    assert!(collect_out(&mut p.client).is_empty());
}

/// Without credit, or with the peer's session window shut, `send_ref` refuses as
/// `send` does and writes nothing.
#[test]
fn send_ref_refuses_without_credit_or_window() {
    let mut p = Pair::open();
    let (_, c, s) = p.link(Role::Receiver, "r");
    let payload = Bytes::from_static(b"x");
    assert_eq!(p.server.send_ref(s, DeliveryTag::from_u64(0), &payload, true), Err(UsageError::NoCredit));
    p.client.grant_credit(c, 1, false).unwrap();
    p.pump();
    drain(&mut p.server);
    p.server.send_ref(s, DeliveryTag::from_u64(0), &payload, true).unwrap();
    assert_eq!(p.server.send_ref(s, DeliveryTag::from_u64(1), &payload, true), Err(UsageError::NoCredit));
    p.pump();
    assert_eq!(deliveries(&drain(&mut p.client)).len(), 1);
}

/// A read full of range DISPOSITIONs, each re-reporting every unsettled delivery,
/// is taken `EVENTS_PAUSE` events at a time: the engine stops at a frame boundary,
/// says so, and finishes the input on the next `process` once the events are drained.
#[test]
fn frames_that_make_many_events_are_taken_a_bounded_batch_at_a_time() {
    let mut p = Pair::open();
    let (ch, c, s) = p.link(Role::Receiver, "r");
    p.client.grant_credit(c, 100, false).unwrap();
    p.pump();
    drain(&mut p.server);
    for i in 0..100 {
        p.server.send(s, DeliveryTag::from_u64(i), Bytes::from_static(b"m"), false).unwrap();
    }
    p.pump();
    assert_eq!(deliveries(&drain(&mut p.client)).len(), 100);
    let d = Disposition {
        role: Role::Receiver,
        first: 0,
        last: Some(i32::MAX as u32),
        settled: Some(false),
        state: Some(DeliveryState::Received(crate::types::Received { section_number: 0, section_offset: 0 })),
        batchable: None,
    };
    let one = raw(ch, Performative::Disposition(d), &[]);
    let input: Vec<u8> = one.iter().copied().cycle().take(one.len() * 1000).collect();
    p.server.handle_input(&input, 0);
    assert!(p.server.input_paused());
    let first = drain(&mut p.server);
    assert!((EVENTS_PAUSE..EVENTS_PAUSE + 100).contains(&first.len()), "{} events in the first batch", first.len());
    assert_eq!(first.len() % 100, 0, "stopped inside a frame");
    p.server.process(0);
    assert!(!p.server.input_paused());
    let rest = drain(&mut p.server);
    assert_eq!(first.len() + rest.len(), 100_000);
    assert!(rest.iter().all(|e| matches!(e, Event::Disposition { settled: false, .. })));
    // Still a working connection: settle everything.
    let settle = Disposition {
        role: Role::Receiver,
        first: 0,
        last: Some(99),
        settled: Some(true),
        state: Some(DeliveryState::Accepted),
        batchable: None,
    };
    p.server.handle_input(&raw(ch, Performative::Disposition(settle), &[]), 0);
    assert_eq!(drain(&mut p.server).len(), 100);
}

/// Messages being reassembled on several links share one budget per connection: a
/// frame that would pass it detaches its own link (resource-limit-exceeded) and
/// frees what that link held; the other links carry on, and the budget is given back
/// when a message completes, aborts or its link goes.
#[test]
fn reassembly_budget_is_shared_by_the_links_of_a_connection() {
    let mut cfg = Config::server("s");
    cfg.max_message_size = 1000;
    cfg.max_reassembly_bytes = 1500;
    let (mut s, _) = raw_server_with_receiver(cfg, 10);
    for h in 1..3 {
        attach_receiving_link(&mut s, h, 10);
    }
    collect_out(&mut s);
    // Handles 0 and 1 each hold 700 bytes of a message: 1400 of 1500.
    s.handle_input(&raw(0, raw_transfer(0, Some(0), true), &[1u8; 700]), 0);
    s.handle_input(&raw(0, raw_transfer(1, Some(1), true), &[2u8; 700]), 0);
    assert!(drain(&mut s).is_empty());
    // Handle 2 would pass the budget with its first 200 bytes: its link goes.
    s.handle_input(&raw(0, raw_transfer(2, Some(2), true), &[3u8; 200]), 0);
    let ev = drain(&mut s);
    assert!(matches!(local_error(&ev), Some((Scope::Link(_), c)) if c == "amqp:resource-limit-exceeded"), "{ev:?}");
    // Handle 0 completes (its 700 + 100 are given back), then handle 1 can grow.
    s.handle_input(&raw(0, raw_transfer(0, None, false), &[1u8; 100]), 0);
    s.handle_input(&raw(0, raw_transfer(1, None, true), &[2u8; 250]), 0);
    s.handle_input(&raw(0, raw_transfer(1, None, false), &[2u8; 50]), 0);
    let ev = drain(&mut s);
    let d = deliveries(&ev);
    assert_eq!(d.len(), 2, "{ev:?}");
    assert_eq!(d[0].payload.len(), 800);
    assert_eq!(d[1].payload.len(), 1000);
    assert!(local_error(&ev).is_none());
    // Nothing is held now: a new message may use the whole budget's worth (within
    // the per-message limit) on another link.
    s.handle_input(&raw(0, raw_transfer(0, Some(3), true), &[4u8; 900]), 0);
    s.handle_input(&raw(0, raw_transfer(1, Some(4), true), &[5u8; 550]), 0);
    assert!(local_error(&drain(&mut s)).is_none());
    // An aborted message gives its bytes back too.
    let mut abort = Transfer { handle: 0, aborted: Some(true), ..Default::default() };
    abort.more = None;
    s.handle_input(&raw(0, Performative::Transfer(abort), &[]), 0);
    s.handle_input(&raw(0, raw_transfer(1, None, true), &[5u8; 400]), 0);
    let ev = drain(&mut s);
    assert!(local_error(&ev).is_none(), "{ev:?}");
}

/// The reassembly budget counts the memory a partial message takes (its buffer's
/// capacity, which grows by doubling), not only the bytes it holds so far: before,
/// a buffer preallocated at four times the first frame and counted by its length let
/// the connection hold up to four times its budget.
#[test]
fn reassembly_budget_counts_the_memory_a_partial_message_takes() {
    let mut cfg = Config::server("s");
    cfg.max_message_size = 1000;
    cfg.max_reassembly_bytes = 1500;
    let (mut s, _) = raw_server_with_receiver(cfg, 10);
    attach_receiving_link(&mut s, 1, 10);
    collect_out(&mut s);
    // What 600 + 100 bytes take once grown.
    let mut probe = bytes::BytesMut::with_capacity(600);
    probe.extend_from_slice(&[0u8; 600]);
    probe.extend_from_slice(&[0u8; 100]);
    let taken = probe.capacity();
    assert!(taken > 700 && taken < 1500, "capacity {taken}");
    s.handle_input(&raw(0, raw_transfer(0, Some(0), true), &[1u8; 600]), 0);
    s.handle_input(&raw(0, raw_transfer(0, None, true), &[1u8; 100]), 0);
    assert!(local_error(&drain(&mut s)).is_none());
    // Fits the budget by the bytes held (700 + n), not by the memory taken.
    let n = 1500 - taken + 1;
    s.handle_input(&raw(0, raw_transfer(1, Some(1), true), &vec![2u8; n]), 0);
    let ev = drain(&mut s);
    assert!(matches!(local_error(&ev), Some((Scope::Link(_), c)) if c == "amqp:resource-limit-exceeded"), "{ev:?}");
}

/// A peer advertising a 1 ms idle-time-out gets an empty frame every
/// `MIN_HEARTBEAT_MS`, not every half millisecond.
#[test]
fn heartbeats_are_not_sent_more_often_than_the_floor() {
    let mut client = Config::client("c");
    client.idle_timeout_ms = 2; // advertised as 1 ms
    let mut p = Pair::new(client, Config::server("s"));
    drain(&mut p.server);
    collect_out(&mut p.server);
    assert_eq!(p.server.poll_timeout(), Some(MIN_HEARTBEAT_MS));
    p.server.handle_timeout(MIN_HEARTBEAT_MS - 1);
    assert!(collect_out(&mut p.server).is_empty());
    p.server.handle_timeout(MIN_HEARTBEAT_MS);
    assert_eq!(collect_out(&mut p.server), vec![0, 0, 0, 8, 2, 0, 0, 0]);
    assert_eq!(p.server.poll_timeout(), Some(2 * MIN_HEARTBEAT_MS));
}

/// `n` unsettled deliveries from the sending side of a client link `c` / server link
/// `s` to the other (the client's role says which way); both sides drained.
fn send_unsettled(p: &mut Pair, client_role: Role, c: LinkId, s: LinkId, n: u32) {
    let (from_link, to_link) = if client_role == Role::Receiver { (s, c) } else { (c, s) };
    let to = if client_role == Role::Receiver { &mut p.client } else { &mut p.server };
    to.grant_credit(to_link, n, false).unwrap();
    p.pump();
    let from = if client_role == Role::Receiver { &mut p.server } else { &mut p.client };
    drain(from);
    for i in 0..n {
        let from = if client_role == Role::Receiver { &mut p.server } else { &mut p.client };
        from.send(from_link, DeliveryTag::from_u64(i as u64), Bytes::from_static(b"x"), false).unwrap();
        if i % 100 == 99 {
            // The session window reopens as the other side reads.
            p.pump();
        }
    }
    p.pump();
    drain(&mut p.client);
    drain(&mut p.server);
}

/// A detach drops the detached link's unsettled deliveries only, and checks only the
/// delivery-ids that link had (its trail), not every delivery its session tracks: with
/// 5,000 unsettled on one link, fifty links attached, given one delivery and detached
/// beside it cost 50 checks, either way round (before, each walked all 5,000).
#[test]
fn a_detach_checks_the_links_own_deliveries_not_its_sessions() {
    for client_role in [Role::Receiver, Role::Sender] {
        let mut p = Pair::open();
        let (ch, ca, sa) = p.link(client_role, "a");
        send_unsettled(&mut p, client_role, ca, sa, 5_000);
        // The server's count of unsettled deliveries in the direction under test.
        let held = |p: &Pair| {
            let (incoming, outgoing) = p.server.unsettled_counts(ch);
            if client_role == Role::Receiver {
                outgoing
            } else {
                incoming
            }
        };
        assert_eq!(held(&p), 5_000);
        FORGET_CHECKS.with(|c| c.set(0));
        for round in 0..50 {
            let (cb, sb) = p.link_on(ch, client_role, &format!("b{round}"));
            send_unsettled(&mut p, client_role, cb, sb, 1);
            assert_eq!(held(&p), 5_001);
            p.client.detach(cb, None);
            p.pump();
            assert!(drain(&mut p.server).iter().any(|e| matches!(e, Event::Detached { link, .. } if *link == sb)));
            assert_eq!(held(&p), 5_000, "the detached link's delivery is forgotten, link a's are not");
        }
        let checks = FORGET_CHECKS.with(|c| c.get());
        assert!(checks <= 100, "{checks} delivery-ids checked for 50 detaches of one-delivery links");
        // Link a's own detach forgets its 5,000.
        p.client.detach(ca, None);
        p.pump();
        drain(&mut p.server);
        assert_eq!(held(&p), 0);
    }
}

/// A FLOW written by hand: the session's window as the peer sees it and, with a
/// handle, a link's credit.
fn raw_flow(next_incoming_id: u32, incoming_window: u32, link: Option<(u32, u32, u32)>) -> Vec<u8> {
    let (handle, delivery_count, link_credit) = match link {
        Some((h, dc, c)) => (Some(h), Some(dc), Some(c)),
        None => (None, None, None),
    };
    raw(
        0,
        Performative::Flow(Flow {
            next_incoming_id: Some(next_incoming_id),
            incoming_window,
            next_outgoing_id: 0,
            outgoing_window: 100,
            handle,
            delivery_count,
            link_credit,
            ..Default::default()
        }),
        &[],
    )
}

/// The application's event for the peer's ATTACH just handled: the first of `events`.
fn attach_requested(events: &[Event]) -> LinkId {
    match events.first() {
        Some(Event::AttachRequested { link, .. }) => *link,
        _ => panic!("AttachRequested first expected: {events:?}"),
    }
}

/// A server with one sending link on handle 0 (the raw peer receives) and the peer's
/// max-frame-size set to `max_frame_size`.
fn raw_server_with_sender(max_frame_size: u32) -> (Connection, LinkId) {
    let open = Open { container_id: "raw".into(), max_frame_size: Some(max_frame_size), ..Default::default() };
    let mut s = raw_server_opened(Config::server("s"), open);
    s.handle_input(&raw(0, raw_attach(0, Role::Receiver), &[]), 0);
    let link = attach_requested(&drain(&mut s));
    s.attach_reply(link, Attach::default()).unwrap();
    collect_out(&mut s);
    (s, link)
}

fn transfers(frames: &[Performative]) -> usize {
    frames.iter().filter(|f| matches!(f, Performative::Transfer(_))).count()
}

/// A peer that shrinks its incoming window below the frames already in flight leaves
/// no room (2.5.6 in serial arithmetic). Before, the negative room wrapped around and
/// was taken as the whole new window, so frames went beyond what the peer allowed.
#[test]
fn a_shrunk_window_counts_the_frames_in_flight() {
    let (mut s, link) = raw_server_with_sender(64 * 1024);
    s.handle_input(&raw_flow(0, 5, Some((0, 0, 100))), 0);
    for i in 0..5 {
        s.send(link, DeliveryTag::from_u64(i), Bytes::from_static(b"m"), true).unwrap();
    }
    assert_eq!(transfers(&frames_of(&collect_out(&mut s))), 5);
    // The peer has seen none of the five and now allows two: 0 + 2 - 5 < 0.
    s.handle_input(&raw_flow(0, 2, None), 0);
    assert_eq!(s.send(link, DeliveryTag::from_u64(5), Bytes::from_static(b"m"), true), Err(UsageError::SessionWindow));
    assert_eq!(transfers(&frames_of(&collect_out(&mut s))), 0);
    // Once it has taken four of them, one more fits: 4 + 2 - 5 = 1.
    s.handle_input(&raw_flow(4, 2, None), 0);
    s.send(link, DeliveryTag::from_u64(5), Bytes::from_static(b"m"), true).unwrap();
    assert_eq!(s.send(link, DeliveryTag::from_u64(6), Bytes::from_static(b"m"), true), Err(UsageError::SessionWindow));
    assert_eq!(transfers(&frames_of(&collect_out(&mut s))), 1);
    // A window of u32::MAX (legal: a uint) with frames in flight is almost all room
    // (a distance of 2^31 or more from the peer's edge must not be read as negative).
    s.handle_input(&raw_flow(4, u32::MAX, None), 0);
    s.send(link, DeliveryTag::from_u64(6), Bytes::from_static(b"m"), true).unwrap();
    assert_eq!(transfers(&frames_of(&collect_out(&mut s))), 1);
    assert_eq!(s.session_window(0), u32::MAX - 3);
}

/// Frames of a delivery waiting for the peer's window are dropped when the peer
/// detaches the link, whether the answer goes at once or is held for the
/// application: none goes out after the DETACH on a handle the link no longer has.
#[test]
fn frames_waiting_for_the_window_are_dropped_when_the_peer_detaches() {
    for held in [false, true] {
        let (mut s, link) = raw_server_with_sender(512);
        if held {
            s.defer_detach_reply(link);
        }
        // A window of one frame, and a message of several.
        s.handle_input(&raw_flow(0, 1, Some((0, 0, 10))), 0);
        s.send(link, DeliveryTag::from_u64(0), Bytes::from(vec![7u8; 2000]), true).unwrap();
        assert_eq!(transfers(&frames_of(&collect_out(&mut s))), 1, "held {held}");
        s.handle_input(&raw(0, Performative::Detach(Detach { handle: 0, closed: Some(true), error: None }), &[]), 0);
        assert!(drain(&mut s).iter().any(|e| matches!(e, Event::Detached { local: false, .. })));
        s.handle_input(&raw_flow(1, 100, None), 0);
        let frames = frames_of(&collect_out(&mut s));
        assert_eq!(transfers(&frames), 0, "held {held}: {frames:?}");
        let detaches = frames.iter().filter(|f| matches!(f, Performative::Detach(_))).count();
        assert_eq!(detaches, usize::from(!held), "held {held}: {frames:?}");
        if held {
            s.complete_detach(link);
            let frames = frames_of(&collect_out(&mut s));
            assert!(matches!(frames.as_slice(), [Performative::Detach(d)] if d.handle == 0), "{frames:?}");
        }
    }
}

/// A peer that detaches before the application answered its ATTACH gets an ATTACH
/// with no terminus, then the answer to its DETACH (held for the application when it
/// asked for that). Before, neither was written and the peer waited for them.
#[test]
fn a_detach_before_the_attach_is_answered_gets_both_answers() {
    for held in [false, true] {
        let mut s = raw_server(Config::server("s"));
        s.handle_input(&raw(0, raw_attach(3, Role::Sender), &[]), 0);
        let link = attach_requested(&drain(&mut s));
        if held {
            s.defer_detach_reply(link);
        }
        s.handle_input(&raw(0, Performative::Detach(Detach { handle: 3, closed: Some(true), error: None }), &[]), 0);
        assert!(drain(&mut s).contains(&Event::Detached { link, closed: true, error: None, local: false }));
        let frames = frames_of(&collect_out(&mut s));
        match frames.as_slice() {
            [Performative::Attach(a)] if held => assert!(a.target.is_none() && a.source.is_none(), "{a:?}"),
            [Performative::Attach(a), Performative::Detach(d)] if !held => {
                assert!(a.target.is_none() && a.source.is_none(), "{a:?}");
                assert_eq!((d.handle, d.closed()), (a.handle, true));
            }
            other => panic!("held {held}: {other:?}"),
        }
        // The application's late answer finds the link taken care of.
        assert_eq!(s.attach_reply(link, Attach::default()), Err(UsageError::UnknownEndpoint));
        if held {
            assert!(s.link_info(link).is_some());
            s.complete_detach(link);
            let frames = frames_of(&collect_out(&mut s));
            assert!(matches!(frames.as_slice(), [Performative::Detach(d)] if d.closed()), "{frames:?}");
        }
        assert!(s.link_info(link).is_none());
        // Its handle is free for a new link.
        s.handle_input(&raw(0, raw_attach(3, Role::Sender), &[]), 0);
        attach_requested(&drain(&mut s));
        assert!(s.is_open());
    }
}

/// A receiver that lowers its credit still takes the transfers the sender sent under
/// the credit granted before (they cross the FLOW), and no more than that.
#[test]
fn transfers_sent_before_a_lowered_credit_arrived_are_taken() {
    let (mut s, link) = raw_server_with_receiver(Config::server("s"), 10);
    s.grant_credit(link, 2, false).unwrap();
    s.handle_input(&raw_transfers(0..10), 0);
    let ev = drain(&mut s);
    assert_eq!(deliveries(&ev).len(), 10);
    assert_eq!(local_error(&ev), None);
    assert_eq!(s.link_credit(link), 0);
    // The eleventh goes beyond anything granted.
    s.handle_input(&raw(0, raw_transfer(0, Some(10), false), b"m"), 0);
    let ev = drain(&mut s);
    assert!(deliveries(&ev).is_empty());
    assert!(matches!(local_error(&ev), Some((Scope::Link(_), c)) if c == "amqp:link:transfer-limit-exceeded"));
}

/// The peer's answer to an ATTACH of ours that we detached before it came is matched
/// to that link (its DETACH then frees it); before, it was taken for a new ATTACH
/// from the peer, and our link and its handle were never freed.
#[test]
fn the_answer_to_an_attach_we_detached_is_matched_to_it() {
    let mut p = Pair::open();
    let ch = p.client.begin().unwrap();
    p.pump();
    drain(&mut p.client);
    drain(&mut p.server);
    let attach = Attach { name: "gone".into(), role: Role::Receiver, ..Default::default() };
    let c = p.client.attach(ch, attach.clone()).unwrap();
    p.client.detach(c, None);
    // The server reads both: it answers the ATTACH (no terminus), then the DETACH.
    while let Some(b) = p.client.poll_transmit() {
        p.server.handle_input(&b, 0);
    }
    let s = attach_requested(&drain(&mut p.server));
    assert_eq!(p.server.attach_reply(s, attach.clone()), Err(UsageError::UnknownEndpoint));
    p.pump();
    let ev = drain(&mut p.client);
    assert!(!ev.iter().any(|e| matches!(e, Event::AttachRequested { .. } | Event::Attached { .. })), "{ev:?}");
    assert!(p.client.link_info(c).is_none());
    // Handle 0 is free again.
    p.client.attach(ch, Attach { name: "next".into(), ..attach }).unwrap();
    let frames = frames_of(&collect_out(&mut p.client));
    assert!(matches!(frames.as_slice(), [Performative::Attach(a)] if a.handle == 0), "{frames:?}");
}

/// A DISPOSITION whose last comes before its first (serial order) ends the session
/// with invalid-field and settles nothing. Before, it was read as a range wrapped
/// around the id space, and settled every delivery outside [last, first].
#[test]
fn a_disposition_with_last_before_first_ends_the_session_and_settles_nothing() {
    let (mut s, link) = raw_server_with_sender(64 * 1024);
    s.handle_input(&raw_flow(0, 100, Some((0, 0, 10))), 0);
    for i in 0..6 {
        s.send(link, DeliveryTag::from_u64(i), Bytes::from_static(b"m"), false).unwrap();
    }
    collect_out(&mut s);
    let d = Disposition {
        role: Role::Receiver,
        first: 4,
        last: Some(2),
        settled: Some(true),
        state: Some(DeliveryState::Accepted),
        batchable: None,
    };
    s.handle_input(&raw(0, Performative::Disposition(d), &[]), 0);
    let ev = drain(&mut s);
    assert!(!ev.iter().any(|e| matches!(e, Event::Disposition { .. })), "{ev:?}");
    assert_eq!(local_error(&ev), Some((Scope::Session(0), "amqp:invalid-field".into())));
    assert!(s.is_open());
}

fn settled_transfer(handle: u32, id: Option<u32>, more: bool, settled: bool) -> Performative {
    Performative::Transfer(Transfer { settled: Some(settled), ..peer_transfer(handle, id, more) })
}

/// The settled flag may be set on any frame of a delivery (2.7.5): the sender's
/// settle mode is checked against the delivery once complete. A settled-mode sender
/// that settles in the last frame is taken (before, refused at its first frame); an
/// unsettled-mode sender that settles in a later frame is refused (before, taken as
/// settled).
#[test]
fn the_settle_mode_is_checked_against_the_whole_delivery() {
    for (mode, accepted) in [(SenderSettleMode::Settled, true), (SenderSettleMode::Unsettled, false)] {
        let mut s = raw_server(Config::server("s"));
        s.handle_input(&raw(0, raw_sender_attach(0, mode), &[]), 0);
        let link = attach_requested(&drain(&mut s));
        s.attach_reply(link, Attach::default()).unwrap();
        s.grant_credit(link, 10, false).unwrap();
        let mut input = raw(0, settled_transfer(0, Some(0), true, false), b"first half ");
        input.extend(raw(0, settled_transfer(0, None, false, true), b"second half"));
        s.handle_input(&input, 0);
        let ev = drain(&mut s);
        let got = deliveries(&ev);
        if accepted {
            assert_eq!(got.len(), 1, "{mode:?}: {ev:?}");
            assert!(got[0].settled);
            assert_eq!(&got[0].payload[..], b"first half second half");
            assert_eq!(local_error(&ev), None);
        } else {
            assert!(got.is_empty(), "{mode:?}: {ev:?}");
            assert!(matches!(local_error(&ev), Some((Scope::Link(_), c)) if c == "amqp:invalid-field"), "{ev:?}");
        }
    }
}

/// A delivery aborted in its first frame still used a credit and moved the
/// delivery-count, as it did at the sender. Before, it was skipped, and the receiver's
/// count fell one behind the sender's with each such delivery.
#[test]
fn a_delivery_aborted_in_its_first_frame_is_counted() {
    let (mut s, link) = raw_server_with_receiver(Config::server("s"), 2);
    let aborted = Performative::Transfer(Transfer { aborted: Some(true), ..peer_transfer(0, Some(0), false) });
    let mut input = raw(0, aborted, b"");
    input.extend(raw(0, raw_transfer(0, Some(1), false), b"one"));
    s.handle_input(&input, 0);
    let ev = drain(&mut s);
    assert_eq!(deliveries(&ev).len(), 1);
    assert_eq!(local_error(&ev), None);
    let info = s.link_info(link).unwrap();
    assert_eq!((info.delivery_count, info.link_credit), (2, 0));
    // A third goes beyond the two credits.
    s.handle_input(&raw(0, raw_transfer(0, Some(2), false), b"two"), 0);
    let ev = drain(&mut s);
    assert!(matches!(local_error(&ev), Some((Scope::Link(_), c)) if c == "amqp:link:transfer-limit-exceeded"));
}

/// A sending peer's FLOW moves the receiver's delivery-count only within what was
/// granted: a count far ahead (past the limit) or behind is not taken, so it cannot
/// open room for transfers beyond the credit.
#[test]
fn a_senders_delivery_count_outside_the_grant_is_not_taken() {
    let (mut s, link) = raw_server_with_receiver(Config::server("s"), 2);
    for bogus in [1u32 << 31, 5, u32::MAX] {
        s.handle_input(&raw_flow(0, 100, Some((0, bogus, 0))), 0);
        drain(&mut s);
        let info = s.link_info(link).unwrap();
        assert_eq!((info.delivery_count, info.link_credit), (0, 2), "delivery-count {bogus}");
    }
    s.handle_input(&raw_transfers(0..3), 0);
    let ev = drain(&mut s);
    assert_eq!(deliveries(&ev).len(), 2);
    assert!(matches!(local_error(&ev), Some((Scope::Link(_), c)) if c == "amqp:link:transfer-limit-exceeded"));
    // A drain that advances the count to the limit is taken.
    let (mut s, link) = raw_server_with_receiver(Config::server("s"), 2);
    s.handle_input(&raw_flow(0, 100, Some((0, 2, 0))), 0);
    let info = s.link_info(link).unwrap();
    assert_eq!((info.delivery_count, info.link_credit), (2, 0));
}

/// ATTACH, DETACH and ATTACH again on one handle in one read: the second link gets
/// another id than the first, so the application's answer to the first (late: its
/// events came in one batch) finds nothing instead of answering the second with the
/// first's terminus. Before, the freed id was handed to the second link at once.
#[test]
fn a_link_freed_in_a_read_is_not_reused_in_it() {
    let mut s = raw_server(Config::server("s"));
    let mut input = raw(0, raw_attach(3, Role::Sender), &[]);
    input.extend(raw(0, Performative::Detach(Detach { handle: 3, closed: Some(true), error: None }), &[]));
    input.extend(raw(0, raw_attach(3, Role::Sender), &[]));
    s.handle_input(&input, 0);
    let ev = drain(&mut s);
    let asked: Vec<LinkId> = ev
        .iter()
        .filter_map(|e| match e {
            Event::AttachRequested { link, .. } => Some(*link),
            _ => None,
        })
        .collect();
    assert_eq!(asked.len(), 2, "{ev:?}");
    assert_ne!(asked[0], asked[1]);
    assert_eq!(s.attach_reply(asked[0], Attach::default()), Err(UsageError::UnknownEndpoint));
    s.attach_reply(asked[1], Attach::default()).unwrap();
    // Once the events are drained, freed ids are used again (the slots stay bounded).
    let l = s.link_info(asked[1]).unwrap();
    assert_eq!(l.handle, Some(0));
    s.handle_input(&raw(0, Performative::Detach(Detach { handle: 3, closed: Some(true), error: None }), &[]), 0);
    drain(&mut s);
    s.handle_input(&raw(0, raw_attach(4, Role::Sender), &[]), 0);
    let again = attach_requested(&drain(&mut s));
    assert!(again == asked[0] || again == asked[1], "{again:?} is a new slot");
}

/// Ending a session frees its own links only: 300 links on session 0 stay, and fifty
/// sessions of two links each cost at most 200 link visits in all (both sides), whatever session 0 holds
/// (before, every END walked every link slot of the connection). Links detached from
/// the middle of a session leave the rest of it to be freed once each.
#[test]
fn an_end_frees_the_sessions_own_links_without_walking_the_others() {
    let mut p = Pair::open();
    let (ch0, first, _) = p.link(Role::Receiver, "kept-0");
    let kept: Vec<(LinkId, LinkId)> = (1..300).map(|i| p.link_on(ch0, Role::Receiver, &format!("kept-{i}"))).collect();
    SESSION_LINKS_FREED.with(|c| c.set(0));
    for round in 0..50 {
        let ch = p.client.begin().unwrap();
        p.pump();
        drain(&mut p.server);
        drain(&mut p.client);
        let (_, s1) = p.link_on(ch, Role::Sender, &format!("gone-{round}-a"));
        let (_, s2) = p.link_on(ch, Role::Sender, &format!("gone-{round}-b"));
        p.client.end_session(ch, None);
        p.pump();
        let ev = drain(&mut p.server);
        for s in [s1, s2] {
            assert!(ev.iter().any(|e| matches!(e, Event::Detached { link, .. } if *link == s)), "{ev:?}");
            assert!(p.server.link_info(s).is_none());
        }
        drain(&mut p.client);
    }
    // At most each END's own two links, on either side (the links its DETACHes freed
    // first are not visited again); before, every END visited all 300-odd slots.
    let visited = SESSION_LINKS_FREED.with(|c| c.get());
    assert!(visited <= 200, "{visited} link slots visited by 100 ENDs");
    assert!(kept.iter().all(|(_, s)| p.server.link_info(*s).is_some()));

    // Detach every third link of session 0, then end it: the others are freed once each.
    for (c, _) in kept.iter().step_by(3) {
        p.client.detach(*c, None);
    }
    p.pump();
    drain(&mut p.server);
    drain(&mut p.client);
    let left = 1 + kept.len() - kept.iter().step_by(3).count();
    SESSION_LINKS_FREED.with(|c| c.set(0));
    p.client.end_session(ch0, None);
    p.pump();
    let ev = drain(&mut p.server);
    let detached = ev.iter().filter(|e| matches!(e, Event::Detached { .. })).count();
    assert_eq!(detached, left);
    let visited = SESSION_LINKS_FREED.with(|c| c.get());
    assert!(visited <= 2 * left as u64, "{visited} link slots visited for {left} links");
    assert!(kept.iter().all(|(_, s)| p.server.link_info(*s).is_none()));
    assert!(p.client.link_info(first).is_none());
    assert!(p.server.is_open() && p.client.is_open());
}

/// A link whose DETACH was reported and its answer held is reported once, though its
/// session then ends (before, the END reported it a second time).
#[test]
fn a_held_detach_is_reported_once_when_its_session_ends() {
    for local_end in [false, true] {
        let mut s = raw_server(Config::server("s"));
        let link = attach_receiving_link(&mut s, 0, 10);
        s.defer_detach_reply(link);
        collect_out(&mut s);
        s.handle_input(&raw(0, Performative::Detach(Detach { handle: 0, closed: Some(true), error: None }), &[]), 0);
        if local_end {
            s.end_session(0, None);
        } else {
            s.handle_input(&raw(0, Performative::End(End { error: None }), &[]), 0);
        }
        let ev = drain(&mut s);
        let reported = ev.iter().filter(|e| matches!(e, Event::Detached { link: l, .. } if *l == link)).count();
        assert_eq!(reported, 1, "{ev:?}");
        assert!(ev.iter().any(|e| matches!(e, Event::SessionEnded { .. })));
        assert!(s.is_open());
    }
}

/// Our own sessions stay within the peer's channel-max: against a peer allowing
/// channel 0 only, a second begin() is refused (before, it took channel 1, within the
/// grace meant for the peer's pipelined BEGINs).
#[test]
fn begin_stays_within_the_peers_channel_max() {
    let mut server = Config::server("server");
    server.channel_max = 0;
    let mut p = Pair::new(Config::client("client"), server);
    assert_eq!(p.client.begin(), Ok(0));
    assert_eq!(p.client.begin(), Err(UsageError::Exhausted));
    p.pump();
    assert_eq!(local_error(&drain(&mut p.server)), None);
    assert_eq!(local_error(&drain(&mut p.client)), None);
    // Ended, its channel is free again.
    p.client.end_session(0, None);
    p.pump();
    assert_eq!(p.client.begin(), Ok(0));
}

/// A session ended before the peer answered its BEGIN: the answer and the peer's END
/// close it quietly, and its channel is free again (before, the answer closed the
/// connection with amqp:illegal-state).
#[test]
fn a_session_ended_before_its_begin_is_answered_ends_quietly() {
    let mut p = Pair::open();
    let ch = p.client.begin().unwrap();
    p.client.end_session(ch, None);
    p.pump();
    let client = drain(&mut p.client);
    assert_eq!(local_error(&client), None, "{client:?}");
    assert_eq!(local_error(&drain(&mut p.server)), None);
    assert!(p.client.is_open() && p.server.is_open());
    assert_eq!(p.client.begin(), Ok(ch));
    p.pump();
    assert!(drain(&mut p.client).iter().any(|e| matches!(e, Event::SessionBegun { channel, .. } if *channel == ch)));
}

/// 2^32 deliveries on one session while one stays unsettled bring the next delivery-id
/// back to it: the session ends instead of reusing the id (a disposition of it would
/// settle the wrong delivery). Before, the old delivery's entry was replaced.
#[test]
fn delivery_ids_that_wrap_around_to_an_unsettled_delivery_end_the_session() {
    let (mut s, link) = raw_server_with_sender(64 * 1024);
    s.handle_input(&raw_flow(0, 100, Some((0, 0, 100))), 0);
    assert_eq!(s.send(link, DeliveryTag::from_u64(0), Bytes::from_static(b"kept"), false), Ok(0));
    // Jump to the end of the delivery-id space, as if 2^32 - 2 deliveries had gone.
    s.sessions[0].as_mut().unwrap().next_delivery_id = u32::MAX;
    assert_eq!(s.send(link, DeliveryTag::from_u64(1), Bytes::from_static(b"m"), true), Ok(u32::MAX));
    collect_out(&mut s);
    drain(&mut s);
    // The next id is 0, still unsettled.
    assert_eq!(
        s.send(link, DeliveryTag::from_u64(2), Bytes::from_static(b"m"), false),
        Err(UsageError::UnknownEndpoint)
    );
    let frames = frames_of(&collect_out(&mut s));
    assert_eq!(transfers(&frames), 0);
    assert!(frames.iter().any(
        |f| matches!(f, Performative::End(e) if e.error.as_ref().is_some_and(|e| e.condition == "amqp:resource-limit-exceeded"))
    ));
    let ev = drain(&mut s);
    assert!(ev.iter().any(|e| matches!(e, Event::Detached { link: l, .. } if *l == link)), "{ev:?}");
    assert!(s.is_open());
}
