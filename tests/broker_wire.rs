//! Wire-level black-box tests: the real broker binary, our own engine as the client
//! (so exact FLOW values and raw hostile frames can be checked), on loopback.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use bytes::{Bytes, BytesMut};
use common::Broker;
use sluice_perf::client::{data_message, Client, LinkOptions, WAIT};
use sluice_proto::engine::Event;
use sluice_proto::frame::{write_frame, AMQP_HEADER, FRAME_TYPE_AMQP};
use sluice_proto::types::{Begin, DeliveryState, Open, Performative, Transfer};
use std::io::{Read, Write};
use std::time::{Duration, Instant};

fn opts() -> LinkOptions {
    LinkOptions::default()
}

#[test]
fn produce_link_gets_the_window_and_top_ups_below_half() {
    let b = Broker::start(&[("CONNECTORS_AMQP10_MAX_UNSETTLED_PER_LINK", "10")]);
    let mut c = Client::connect(b.addr(), "produce").unwrap();
    let ch = c.begin().unwrap();
    let s = c.attach_sender(ch, "p", Some("queues/topup"), &opts()).unwrap();
    assert_eq!(c.wait_credit(s).unwrap(), 10);
    // Five sends leave 5 (not below half): no top-up. The sixth leaves 4: back to 10.
    for i in 0..5 {
        let id = c.send(s, data_message(format!("m{i}").as_bytes()), false).unwrap();
        assert_eq!(c.wait_outcome(s, id).unwrap(), Some(DeliveryState::Accepted));
    }
    assert_eq!(c.engine().link_credit(s), 5);
    let id = c.send(s, data_message(b"m5"), false).unwrap();
    c.wait_outcome(s, id).unwrap();
    let deadline = Instant::now() + WAIT;
    while c.engine().link_credit(s) != 10 {
        assert!(Instant::now() < deadline, "no top-up");
        c.pump(Duration::from_millis(20)).unwrap();
    }
}

#[test]
fn default_and_clamped_produce_window() {
    for (env, want) in [(None, 1024), (Some("2000000"), 1 << 20)] {
        let b = match env {
            Some(v) => Broker::start(&[("CONNECTORS_AMQP10_MAX_UNSETTLED_PER_LINK", v)]),
            None => Broker::start(&[]),
        };
        let mut c = Client::connect(b.addr(), "w").unwrap();
        let ch = c.begin().unwrap();
        let s = c.attach_sender(ch, "p", Some("queues/w"), &opts()).unwrap();
        assert_eq!(c.wait_credit(s).unwrap(), want);
    }
}

#[test]
fn drain_on_an_empty_queue_is_answered_at_once() {
    let b = Broker::start(&[]);
    let mut c = Client::connect(b.addr(), "drain").unwrap();
    let ch = c.begin().unwrap();
    let r = c.attach_receiver(ch, "r", Some("queues/empty"), &opts()).unwrap();
    c.engine().grant_credit(r, 50, true).unwrap();
    let e = c.wait_for(|e| matches!(e, Event::SenderFlow { link, drain: true, .. } if *link == r), WAIT).unwrap();
    assert!(matches!(e, Event::SenderFlow { credit: 0, .. }), "{e:?}");
    assert_eq!(c.engine().link_info(r).unwrap().delivery_count, 50);
}

#[test]
fn queue_round_trip_across_shards_and_redelivery_header() {
    let b = Broker::start(&[]);
    let mut p = Client::connect(b.addr(), "p").unwrap();
    let mut q = Client::connect(b.addr(), "q").unwrap();
    let pch = p.begin().unwrap();
    let qch = q.begin().unwrap();
    // Several channels so that some are homed on the other shard.
    for n in 0..6 {
        let addr = format!("queues/rt{n}");
        let s = p.attach_sender(pch, &format!("s{n}"), Some(&addr), &opts()).unwrap();
        p.wait_credit(s).unwrap();
        let id = p.send(s, data_message(format!("body{n}").as_bytes()), false).unwrap();
        assert_eq!(p.wait_outcome(s, id).unwrap(), Some(DeliveryState::Accepted));
        let r = q.attach_receiver(qch, &format!("r{n}"), Some(&addr), &opts()).unwrap();
        q.engine().grant_credit(r, 5, false).unwrap();
        let d = q.receive(r, WAIT).unwrap();
        let raw = sluice_proto::types::RawMessage::parse(&d.payload).unwrap();
        assert_eq!(raw.data().unwrap().unwrap(), format!("body{n}").as_bytes());
        let h = raw.header().unwrap().unwrap();
        assert_eq!(h.first_acquirer, Some(true));
        // Release: it comes back with delivery-count 1, not first-acquirer.
        q.settle(r, d.delivery_id, DeliveryState::Released);
        let d2 = q.receive(r, WAIT).unwrap();
        let h2 = sluice_proto::types::RawMessage::parse(&d2.payload).unwrap().header().unwrap().unwrap();
        assert_eq!(h2.delivery_count, Some(1));
        assert_eq!(h2.first_acquirer, Some(false));
        q.settle(r, d2.delivery_id, DeliveryState::Accepted);
    }
}

/// Messages encoded in place by `send_message` (small and large data bodies, one
/// larger than the broker's frame size, properties, a value body) reach a subscriber
/// byte for byte as their encoding.
#[test]
fn messages_encoded_in_place_arrive_as_encoded() {
    use sluice_proto::codec::{Encode, Value};
    use sluice_proto::types::{Body, Message, Properties};
    let b = Broker::start(&[("CONNECTORS_AMQP10_MAX_FRAME_SIZE", "4096")]);
    let mut p = Client::connect(b.addr(), "p").unwrap();
    let mut q = Client::connect(b.addr(), "q").unwrap();
    let pch = p.begin().unwrap();
    let qch = q.begin().unwrap();
    // The subscriber's credit reaches the channel's home on its own time: events that
    // get there first wait in a hold buffer instead of meeting zero credit.
    let hold = LinkOptions {
        properties: Some(sluice_proto::codec::Fields(vec![(
            sluice_proto::codec::Symbol::new("x-opt-sluice-events-buffer"),
            Value::Uint(10),
        )])),
        ..opts()
    };
    let r = q.attach_receiver(qch, "r", Some("events/in-place"), &hold).unwrap();
    q.engine().grant_credit(r, 100, false).unwrap();
    q.pump(Duration::from_millis(50)).unwrap();
    let presettled = LinkOptions { presettled: true, ..opts() };
    let s = p.attach_sender(pch, "s", Some("events/in-place"), &presettled).unwrap();
    p.wait_credit(s).unwrap();
    let data = |n: usize| Message { body: Body::Data(vec![0x3c; n].into()), ..Default::default() };
    let max_frame = p.engine().send_max_frame_size() as usize;
    assert_eq!(max_frame, 4096);
    let messages = [
        data(100),
        data(300),
        data(max_frame * 2 + 17),
        Message {
            properties: Some(Properties { subject: Some("s".into()), ..Default::default() }),
            application_properties: Some(vec![("k".into(), Value::Int(7))]),
            ..data(10)
        },
        Message { body: Body::Value(Value::String("v".into())), ..Default::default() },
    ];
    for m in &messages {
        p.send_message(s, m, true).unwrap();
        p.pump(Duration::from_millis(1)).unwrap();
    }
    for (i, m) in messages.iter().enumerate() {
        let d = q.receive(r, WAIT).unwrap();
        assert_eq!(d.payload, m.to_bytes().freeze(), "message {i}");
    }
}

fn frame(ch: u16, p: Performative, payload: &[u8]) -> Vec<u8> {
    let mut b = BytesMut::new();
    write_frame(&mut b, FRAME_TYPE_AMQP, ch, &p, payload);
    b.to_vec()
}

/// Read from a raw socket until `pred` holds for the bytes so far or EOF/timeout.
fn read_until(s: &mut std::net::TcpStream, mut pred: impl FnMut(&[u8]) -> bool) -> Vec<u8> {
    s.set_read_timeout(Some(Duration::from_millis(200))).unwrap();
    let deadline = Instant::now() + WAIT;
    let mut got = Vec::new();
    let mut buf = [0u8; 65536];
    while Instant::now() < deadline && !pred(&got) {
        match s.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(_) => {}
        }
    }
    got
}

fn contains(hay: &[u8], needle: &[u8]) -> bool {
    hay.windows(needle.len()).any(|w| w == needle)
}

#[test]
fn hostile_peers_get_errors_and_others_keep_being_served() {
    let b = Broker::start(&[]);
    let mut good = Client::connect(b.addr(), "good").unwrap();
    let gch = good.begin().unwrap();
    let gs = good.attach_sender(gch, "gs", Some("queues/good"), &opts()).unwrap();
    good.wait_credit(gs).unwrap();

    // Garbage instead of a protocol header: our header back, then the socket closes.
    let mut g = std::net::TcpStream::connect(b.addr()).unwrap();
    g.write_all(b"GET / HTTP/1.1\r\n\r\n").unwrap();
    let got = read_until(&mut g, |_| false);
    assert!(got.starts_with(b"AMQP"), "{got:?}");

    // A second OPEN: CLOSE with amqp:not-allowed.
    let mut s = std::net::TcpStream::connect(b.addr()).unwrap();
    let open = frame(0, Performative::Open(Box::new(Open { container_id: "x".into(), ..Default::default() })), &[]);
    let mut bytes = AMQP_HEADER.to_vec();
    bytes.extend(&open);
    bytes.extend(&open);
    s.write_all(&bytes).unwrap();
    let got = read_until(&mut s, |b| contains(b, b"amqp:not-allowed"));
    assert!(contains(&got, b"unexpected second open"));

    // A transfer on a handle that was never attached: END amqp:session:errant-link.
    let mut s = std::net::TcpStream::connect(b.addr()).unwrap();
    let mut bytes = AMQP_HEADER.to_vec();
    bytes.extend(frame(0, Performative::Open(Box::new(Open { container_id: "w".into(), ..Default::default() })), &[]));
    bytes.extend(frame(
        0,
        Performative::Begin(Begin {
            next_outgoing_id: 0,
            incoming_window: 10,
            outgoing_window: 10,
            ..Default::default()
        }),
        &[],
    ));
    let t = Transfer {
        handle: 7,
        delivery_id: Some(0),
        delivery_tag: sluice_proto::types::DeliveryTag::from_slice(b"t"),
        settled: Some(true),
        ..Default::default()
    };
    bytes.extend(frame(0, Performative::Transfer(t), &data_message(b"x")));
    s.write_all(&bytes).unwrap();
    let got = read_until(&mut s, |b| contains(b, b"amqp:session:errant-link"));
    assert!(contains(&got, b"amqp:session:errant-link"));

    // A frame larger than the negotiated max-frame-size: CLOSE framing-error.
    let mut s = std::net::TcpStream::connect(b.addr()).unwrap();
    let mut bytes = AMQP_HEADER.to_vec();
    bytes.extend(frame(0, Performative::Open(Box::new(Open { container_id: "f".into(), ..Default::default() })), &[]));
    bytes.extend([0x7f, 0xff, 0xff, 0xff, 2, 0, 0, 0]);
    s.write_all(&bytes).unwrap();
    let got = read_until(&mut s, |b| contains(b, b"amqp:connection:framing-error"));
    assert!(contains(&got, b"amqp:connection:framing-error"));

    // The well-behaved client is still served.
    let id = good.send(gs, data_message(b"still here"), false).unwrap();
    assert_eq!(good.wait_outcome(gs, id).unwrap(), Some(DeliveryState::Accepted));
}

#[test]
fn ten_mib_message_over_4k_frames_arrives_bit_exact() {
    let b = Broker::start(&[("CONNECTORS_AMQP10_MAX_FRAME_SIZE", "4096")]);
    let mut p = Client::connect(b.addr(), "big").unwrap();
    let ch = p.begin().unwrap();
    let s = p.attach_sender(ch, "s", Some("queues/big"), &opts()).unwrap();
    p.wait_credit(s).unwrap();
    assert_eq!(p.engine().send_max_frame_size(), 4096);
    let body: Vec<u8> = (0..10 * 1024 * 1024u32).map(|i| (i.wrapping_mul(2654435761) >> 24) as u8).collect();
    let id = p.send(s, data_message(&body), false).unwrap();
    assert_eq!(p.wait_outcome(s, id).unwrap(), Some(DeliveryState::Accepted));
    let r = p.attach_receiver(ch, "r", Some("queues/big"), &opts()).unwrap();
    p.engine().grant_credit(r, 1, false).unwrap();
    let d = p.receive(r, Duration::from_secs(30)).unwrap();
    let raw = sluice_proto::types::RawMessage::parse(&d.payload).unwrap();
    assert!(raw.data().unwrap().unwrap() == body, "payload differs");
}

#[test]
fn sigterm_closes_connections_with_connection_forced_and_exits_zero() {
    let mut b = Broker::start(&[]);
    let mut c = Client::connect(b.addr(), "term").unwrap();
    let status = b.signal_and_wait("TERM").expect("broker exits within the bound");
    assert!(status.success(), "{status:?}");
    let e = c.wait_for(|e| matches!(e, Event::Closed { .. }), WAIT).unwrap();
    match e {
        Event::Closed { error: Some(err), .. } => assert_eq!(err.condition, "amqp:connection:forced"),
        other => panic!("{other:?}"),
    }
    let _ = Bytes::new();
}

/// Wait until the admin API lists exactly `n` connections with a container-id.
fn wait_listed(b: &Broker, n: usize) -> std::collections::BTreeMap<String, u64> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let m = b.connection_shards();
        if m.values().len() == n && m.keys().all(|k| !k.is_empty()) {
            return m;
        }
        assert!(Instant::now() < deadline, "admin lists {m:?}, want {n} connections");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// New connections go to the shard with the fewest live ones, not where the kernel's
/// SO_REUSEPORT hash of the client's port puts them: 16 connections opened one after
/// another on 2 shards are served 8 and 8; after 3 of shard 0's close, the next 3 all
/// go to shard 0. A message crosses every connection (handed-over ones included).
#[test]
fn connections_are_served_by_the_shard_with_the_fewest() {
    let b = Broker::start(&[]);
    let mut clients: Vec<(String, Client)> = Vec::new();
    for i in 0..16 {
        let id = format!("c{i:02}");
        clients.push((id.clone(), Client::connect(b.addr(), &id).unwrap()));
        // One at a time: each is placed knowing where the previous ones are.
        wait_listed(&b, i + 1);
    }
    let placed = wait_listed(&b, 16);
    let on = |m: &std::collections::BTreeMap<String, u64>, s| m.values().filter(|&&v| v == s).count();
    assert_eq!((on(&placed, 0), on(&placed, 1)), (8, 8), "{placed:?}");
    assert_eq!(b.metric("sluice_shard_connections{shard=\"0\"}"), Some(8.0));
    assert_eq!(b.metric("sluice_shard_connections{shard=\"1\"}"), Some(8.0));
    let handed = |s: &str| b.metric(&format!("sluice_connections_handed_over_total{{shard=\"{s}\"}}"));
    let (h0, h1) = (handed("0").unwrap(), handed("1").unwrap());
    // Each hand-over corrected one kernel choice; at most one per connection.
    assert!(h0 + h1 <= 16.0, "{h0} + {h1}");

    let gone: Vec<String> = placed.iter().filter(|(_, &s)| s == 0).map(|(k, _)| k.clone()).take(3).collect();
    clients.retain(|(id, _)| !gone.contains(id));
    wait_listed(&b, 13);
    for i in 0..3 {
        let id = format!("n{i}");
        clients.push((id.clone(), Client::connect(b.addr(), &id).unwrap()));
        wait_listed(&b, 14 + i);
    }
    let placed = wait_listed(&b, 16);
    for i in 0..3 {
        assert_eq!(placed[&format!("n{i}")], 0, "{placed:?}");
    }

    // Every connection works: each sends one message to the next one's queue.
    let n = clients.len();
    for k in 0..n {
        let addr = format!("queues/placed-{k}");
        let (_, c) = &mut clients[k];
        let ch = c.begin().unwrap();
        let s = c.attach_sender(ch, "s", Some(&addr), &opts()).unwrap();
        c.wait_credit(s).unwrap();
        let id = c.send(s, data_message(format!("to {k}").as_bytes()), false).unwrap();
        assert_eq!(c.wait_outcome(s, id).unwrap(), Some(DeliveryState::Accepted));
        let (_, r) = &mut clients[(k + 1) % n];
        let rch = r.begin().unwrap();
        let l = r.attach_receiver(rch, "r", Some(&addr), &opts()).unwrap();
        r.engine().grant_credit(l, 1, false).unwrap();
        let d = r.receive(l, WAIT).unwrap();
        let raw = sluice_proto::types::RawMessage::parse(&d.payload).unwrap();
        assert_eq!(raw.data().unwrap().unwrap(), format!("to {k}").as_bytes());
        r.settle(l, d.delivery_id, DeliveryState::Accepted);
    }
}

/// `dynamic_nodes` of the connection with this container-id, from the admin API.
fn dynamic_nodes(b: &Broker, container: &str) -> i64 {
    let (status, body) = b.http("/api/amqp10/connections").unwrap();
    assert_eq!(status, 200, "{body}");
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    let c = v["connections"].as_array().unwrap().iter().find(|c| c["container_id"] == container).cloned();
    c.unwrap_or_else(|| panic!("{container} not listed: {body}"))["dynamic_nodes"].as_i64().unwrap()
}

/// A client's OPEN `product` and `version` are kept to 256 characters, as its
/// container-id is: the admin API's answer does not carry kilobytes per connection.
#[test]
fn open_product_and_version_are_kept_short() {
    use sluice_proto::codec::{Fields, Symbol, Value};
    let b = Broker::start(&[]);
    let mut cfg = sluice_proto::engine::Config::client("long-product");
    cfg.properties = Some(Fields(vec![
        (Symbol::new("product"), Value::String("\u{1}".repeat(5_000))),
        (Symbol::new("version"), Value::String("v".repeat(5_000))),
    ]));
    let mut c = Client::connect_with(b.addr(), cfg).unwrap();
    c.begin().unwrap();
    let (status, body) = b.http("/api/amqp10/connections").unwrap();
    assert_eq!(status, 200, "{body}");
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    let conn = v["connections"].as_array().unwrap().iter().find(|c| c["container_id"] == "long-product").cloned();
    let conn = conn.unwrap_or_else(|| panic!("not listed: {body}"));
    assert_eq!(conn["product"].as_str().unwrap().chars().count(), 256);
    assert_eq!(conn["version"].as_str().unwrap(), "v".repeat(256));
    assert!(body.len() < 4_096, "{} bytes for one connection", body.len());
}

/// Wait (up to 5 s) for the admin API to report `want` dynamic nodes.
/// A receiving link from a new dynamic node; the node's address.
fn dynamic_receiver(c: &mut Client, ch: u16, name: &str) -> (sluice_proto::engine::LinkId, String) {
    use sluice_proto::types::{Attach, AttachTarget, Role, Source, Target};
    let attach = Attach {
        name: name.into(),
        role: Role::Receiver,
        source: Some(Source { dynamic: Some(true), ..Default::default() }),
        target: Some(AttachTarget::Target(Target::default())),
        ..Default::default()
    };
    let (r, reply) = c.attach_full(ch, attach).unwrap();
    (r, reply.source.as_ref().and_then(|s| s.address.clone()).unwrap())
}

fn wait_dynamic_nodes(b: &Broker, c: &mut Client, container: &str, want: i64) -> i64 {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        c.pump(Duration::from_millis(100)).unwrap();
        let n = dynamic_nodes(b, container);
        if n == want || Instant::now() > deadline {
            return n;
        }
    }
}

/// A dynamic node lives as long as the link it was made for, also when the link is
/// detached in the same write as its ATTACH (gone before the broker answers it), and
/// keeps at most the link window of unsettled deliveries however much credit it has.
#[test]
fn dynamic_nodes_go_with_their_links_and_keep_at_most_a_window_unsettled() {
    use sluice_proto::types::{Attach, AttachTarget, Role, Source, Target};
    let b = Broker::start(&[("CONNECTORS_AMQP10_MAX_UNSETTLED_PER_LINK", "16")]);
    let mut c = Client::connect(b.addr(), "dyn").unwrap();
    let ch = c.begin().unwrap();
    for i in 0..100 {
        let attach = Attach {
            name: format!("gone-{i}"),
            role: Role::Receiver,
            source: Some(Source { dynamic: Some(true), ..Default::default() }),
            target: Some(AttachTarget::Target(Target::default())),
            ..Default::default()
        };
        let link = c.engine().attach(ch, attach).unwrap();
        c.engine().detach(link, None);
    }
    c.flush().unwrap();
    assert_eq!(wait_dynamic_nodes(&b, &mut c, "dyn", 0), 0, "nodes left behind by links detached at once");

    // A node with a consumer granting far more credit than the window.
    let (r, node) = dynamic_receiver(&mut c, ch, "replies");
    assert_eq!(wait_dynamic_nodes(&b, &mut c, "dyn", 1), 1);
    c.engine().grant_credit(r, 1000, false).unwrap();
    let s = c.attach_sender(ch, "to-node", Some(&node), &opts()).unwrap();
    c.wait_credit(s).unwrap();
    for i in 0..40u32 {
        while c.engine().link_credit(s) == 0 {
            c.pump(Duration::from_millis(5)).unwrap();
        }
        let id = c.send(s, data_message(&i.to_be_bytes()), false).unwrap();
        c.wait_outcome(s, id).unwrap();
    }
    // The window's 16 arrive (each waited for as long as it takes), and no more.
    let mut got: Vec<_> = (0..16).map(|_| c.receive(r, WAIT).unwrap()).collect();
    assert!(c.receive(r, Duration::from_millis(500)).is_err(), "unsettled deliveries beyond the window");
    for d in got.drain(..4) {
        c.settle(r, d.delivery_id, DeliveryState::Accepted);
    }
    c.flush().unwrap();
    got.extend((0..4).map(|_| c.receive(r, WAIT).unwrap()));
    assert!(c.receive(r, Duration::from_millis(500)).is_err(), "four settled, more than four more sent");
    assert_eq!(got.len(), 16);
    c.engine().detach(r, None);
    c.flush().unwrap();
    assert_eq!(wait_dynamic_nodes(&b, &mut c, "dyn", 0), 0);
}

/// A link name over 1024 bytes is refused at link scope (invalid-field); the session
/// goes on and a link with a normal name attaches on it.
#[test]
fn an_overlong_link_name_is_refused_at_link_scope() {
    let b = Broker::start(&[]);
    let mut c = Client::connect(b.addr(), "names").unwrap();
    let ch = c.begin().unwrap();
    let long = "n".repeat(1025);
    let err = c.attach_sender(ch, &long, Some("queues/names"), &opts()).unwrap_err();
    assert!(err.to_string().contains("amqp:invalid-field"), "{err}");
    let ok = "n".repeat(1024);
    let s = c.attach_sender(ch, &ok, Some("queues/names"), &opts()).unwrap();
    c.wait_credit(s).unwrap();
    let id = c.send(s, data_message(b"x"), false).unwrap();
    assert_eq!(c.wait_outcome(s, id).unwrap(), Some(DeliveryState::Accepted));
}

/// Link names are per session and per role: another session may use a name, and a
/// name is free again once its link has detached.
#[test]
fn a_link_name_is_free_again_once_its_link_has_detached() {
    let b = Broker::start(&[]);
    let mut c = Client::connect(b.addr(), "reuse").unwrap();
    let ch = c.begin().unwrap();
    let ch2 = c.begin().unwrap();
    let s1 = c.attach_sender(ch, "same", Some("queues/reuse"), &opts()).unwrap();
    let s2 = c.attach_sender(ch2, "same", Some("queues/reuse"), &opts()).unwrap();
    c.wait_credit(s2).unwrap();
    let err = c.attach_sender(ch, "same", Some("queues/reuse"), &opts()).unwrap_err();
    assert!(err.to_string().contains("amqp:not-allowed"), "{err}");
    c.engine().detach(s1, None);
    c.flush().unwrap();
    c.pump(Duration::from_millis(200)).unwrap();
    let s3 = c.attach_sender(ch, "same", Some("queues/reuse"), &opts()).unwrap();
    c.wait_credit(s3).unwrap();
    let id = c.send(s3, data_message(b"again"), false).unwrap();
    assert_eq!(c.wait_outcome(s3, id).unwrap(), Some(DeliveryState::Accepted));
}

/// Links attached in quick succession are published to the admin API in batches (at
/// most every 20 ms), and the last change is published by a timer even when the
/// connection then goes quiet.
#[test]
fn the_last_of_many_quick_attaches_reaches_the_admin_api() {
    let b = Broker::start(&[]);
    let mut c = Client::connect(b.addr(), "many-links").unwrap();
    let ch = c.begin().unwrap();
    for i in 0..200 {
        c.attach_sender(ch, &format!("l{i}"), Some("queues/many"), &opts()).unwrap();
    }
    // Nothing more is sent on the connection from here on.
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let (status, body) = b.http("/api/amqp10/connections").unwrap();
        assert_eq!(status, 200);
        let v: serde_json::Value = serde_json::from_str(&body).unwrap();
        let links = v["connections"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["container_id"] == "many-links")
            .map(|c| c["links"].as_i64().unwrap());
        if links == Some(200) {
            break;
        }
        assert!(Instant::now() < deadline, "listed with {links:?} links");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The messages a connection's dynamic nodes hold (waiting for credit, or sent and
/// not settled) are bounded in bytes, not only in count: a producer into its own
/// node that nobody reads gets "dynamic node is full" once the connection's nodes
/// hold 64 MiB (before: 4,096 messages of any size, 400 GiB at the 100 MiB message
/// limit). The broker stays within that, and once the consumer reads and settles,
/// the node takes messages again.
#[test]
fn a_dynamic_node_nobody_reads_is_bounded_in_bytes() {
    let b = Broker::start(&[]);
    let mut c = Client::connect(b.addr(), "dyn-bytes").unwrap();
    let ch = c.begin().unwrap();
    let (r, node) = dynamic_receiver(&mut c, ch, "unread");
    let s = c.attach_sender(ch, "to-node", Some(&node), &opts()).unwrap();
    let before = common::rss_kib(b.pid());
    let big = data_message(&vec![1u8; 1 << 20]);
    let mut accepted = 0u32;
    let refused = loop {
        assert!(accepted < 200, "200 MiB taken into a node nobody reads");
        c.wait_credit(s).unwrap();
        let id = c.send(s, big.clone(), false).unwrap();
        match c.wait_outcome(s, id).unwrap() {
            Some(DeliveryState::Accepted) => accepted += 1,
            other => break other,
        }
    };
    let Some(DeliveryState::Rejected(rej)) = refused else { panic!("expected a rejection, got {refused:?}") };
    let err = rej.error.expect("rejected with an error");
    assert_eq!(err.condition.as_str(), "amqp:resource-limit-exceeded");
    assert_eq!(err.description.as_deref(), Some("dynamic node is full"));
    assert!((60..=64).contains(&accepted), "{accepted} messages of 1 MiB accepted");
    let grown_mib = common::rss_kib(b.pid()).saturating_sub(before) / 1024;
    assert!(grown_mib < 150, "broker RSS grew by {grown_mib} MiB");
    // Reading and settling makes room again.
    c.engine().grant_credit(r, 10, false).unwrap();
    for _ in 0..10 {
        let d = c.receive(r, WAIT).unwrap();
        c.settle(r, d.delivery_id, DeliveryState::Accepted);
    }
    c.flush().unwrap();
    c.pump(Duration::from_millis(200)).unwrap();
    c.wait_credit(s).unwrap();
    let id = c.send(s, big.clone(), false).unwrap();
    assert_eq!(c.wait_outcome(s, id).unwrap(), Some(DeliveryState::Accepted), "room again after 10 settled");
}

/// Two responders on `address`, both receiving pre-settled: `stuck`, whose connection
/// takes nothing (its session window shut, 100,000 credits), and `good`, which reads
/// (1,000 credits); and a requester that sent `n` requests, each `size` bytes whose
/// first four are its index (big-endian), all accepted.
struct Responders {
    stuck: Client,
    stuck_link: sluice_proto::engine::LinkId,
    good: Client,
    good_link: sluice_proto::engine::LinkId,
    _requester: Client,
}

fn responders_and_requests(b: &Broker, address: &str, n: u32, size: usize) -> Responders {
    let (stuck, _, stuck_link) = shut_responder(b, "stuck-responder", address, 100_000);
    let (mut good, good_link) = responder(b, "good-responder", address, 1000);
    good.pump(Duration::from_millis(200)).unwrap();
    let (mut req, s, reply_to) = requester(b, address);
    send_requests(&mut req, s, &reply_to, n, size);
    Responders { stuck, stuck_link, good, good_link, _requester: req }
}

/// A responder on `address` (container `container`) receiving pre-settled, granted
/// `credit`, whose session window is shut (its connection takes nothing): its
/// connection, channel and link.
fn shut_responder(
    b: &Broker,
    container: &str,
    address: &str,
    credit: u32,
) -> (Client, u16, sluice_proto::engine::LinkId) {
    let presettled = LinkOptions { presettled: true, ..Default::default() };
    let mut cfg = sluice_proto::engine::Config::client(container);
    cfg.session_window = 0;
    let mut c = Client::connect_with(b.addr(), cfg).unwrap();
    let ch = c.begin().unwrap();
    let link = c.attach_receiver(ch, "cmd", Some(address), &presettled).unwrap();
    c.engine().grant_credit(link, credit, false).unwrap();
    c.pump(Duration::from_millis(200)).unwrap();
    (c, ch, link)
}

/// A requester on `address` (container `requester`): its connection, its sending
/// link (credit arrived) and the address of its dynamic reply node.
fn requester(b: &Broker, address: &str) -> (Client, sluice_proto::engine::LinkId, String) {
    let mut req = Client::connect(b.addr(), "requester").unwrap();
    let ch = req.begin().unwrap();
    let (_replies, reply_to) = dynamic_receiver(&mut req, ch, "replies");
    let s = req.attach_sender(ch, "req", Some(address), &LinkOptions::default()).unwrap();
    req.wait_credit(s).unwrap();
    (req, s, reply_to)
}

/// Send `n` RPC requests on `s`, each `size` bytes whose first four are its index
/// (big-endian), replies to `reply_to`; each is accepted.
fn send_requests(req: &mut Client, s: sluice_proto::engine::LinkId, reply_to: &str, n: u32, size: usize) {
    use sluice_proto::codec::Encode;
    use sluice_proto::types::{Body, Message, Properties};
    for i in 0..n {
        let props = Properties { reply_to: Some(reply_to.to_owned()), ..Default::default() };
        let mut body = vec![0u8; size.max(4)];
        body[..4].copy_from_slice(&i.to_be_bytes());
        let m = Message { properties: Some(props), body: Body::Data(Bytes::from(body)), ..Default::default() };
        let id = req.send(s, m.to_bytes().freeze(), false).unwrap();
        assert_eq!(req.wait_outcome(s, id).unwrap(), Some(DeliveryState::Accepted));
    }
}

/// A responder on `address` (container `container`) receiving pre-settled, granted
/// `credit`.
fn responder(b: &Broker, container: &str, address: &str, credit: u32) -> (Client, sluice_proto::engine::LinkId) {
    let mut c = Client::connect(b.addr(), container).unwrap();
    let ch = c.begin().unwrap();
    let presettled = LinkOptions { presettled: true, ..Default::default() };
    let r = c.attach_receiver(ch, "cmd", Some(address), &presettled).unwrap();
    c.engine().grant_credit(r, credit, false).unwrap();
    (c, r)
}

/// A commands channel, named from `prefix`, whose home is not shard `shard` (of 2).
fn commands_homed_off(shard: usize, prefix: &str) -> String {
    use sluice::broker::address::ChannelKey;
    use sluice::config::Pattern;
    let name = (0..)
        .map(|k| format!("{prefix}-{k}"))
        .find(|n| ChannelKey::new(Pattern::Commands, n).home(2) != shard)
        .unwrap();
    format!("commands/{name}")
}

/// The indexes of the requests `c` receives on `link` until none comes for 500 ms.
fn requests_received(c: &mut Client, link: sluice_proto::engine::LinkId) -> Vec<u32> {
    let mut got = Vec::new();
    while let Ok(d) = c.receive(link, Duration::from_millis(500)) {
        let body = sluice_proto::types::RawMessage::parse(&d.payload).unwrap().data().unwrap().unwrap();
        got.push(u32::from_be_bytes(body[..4].try_into().unwrap()));
    }
    got
}

/// A responder receiving pre-settled whose connection takes nothing (its session
/// window shut, 100,000 credits) gets at most MaxUnsettledPerLink requests: the home
/// counts a pre-settled request until its connection has written it out. The other
/// responder of the channel gets the rest. Before, round-robin gave the stuck one
/// half of them (as many as its credit allowed), held by its connection for ever.
#[test]
fn a_presettled_responder_that_takes_nothing_gets_at_most_its_window() {
    let b = Broker::start(&[("CONNECTORS_AMQP10_MAX_UNSETTLED_PER_LINK", "16")]);
    let mut r = responders_and_requests(&b, "commands/stuck", 100, 4);
    let got = requests_received(&mut r.good, r.good_link);
    assert_eq!(got.len(), 100 - 16, "requests the responder that reads got");
}

/// RPC requests given to a responder whose session window is shut were never sent:
/// when its link goes, they go to the channel's other responder, in their order.
/// (Before, they were lost with the link; their requesters were answered with a
/// timeout at their deadline.)
#[test]
fn requests_that_waited_for_a_shut_window_go_to_another_responder_when_the_link_goes() {
    let b = Broker::start(&[("CONNECTORS_AMQP10_MAX_UNSETTLED_PER_LINK", "16")]);
    let mut r = responders_and_requests(&b, "commands/held", 100, 4);
    let mut got = requests_received(&mut r.good, r.good_link);
    assert_eq!(got.len(), 100 - 16);
    r.stuck.engine().detach(r.stuck_link, None);
    r.stuck.pump(Duration::from_millis(200)).unwrap();
    let returned = requests_received(&mut r.good, r.good_link);
    assert_eq!(returned.len(), 16, "the requests the stuck responder held: {returned:?}");
    assert!(returned.windows(2).all(|w| w[0] < w[1]), "in their order: {returned:?}");
    got.extend(returned);
    got.sort_unstable();
    assert_eq!(got, (0..100).collect::<Vec<_>>());
}

/// RPC requests given to a responder whose link or connection goes while they are on
/// their way to it (its credit and its DETACH, or CLOSE, arrive in one read; the
/// channel's home is the other shard) go to the channel's next responder, each once:
/// 10 requests wait with no responder; a responder grants credit and detaches at once
/// (then, on another channel, closes its connection at once); the next responder gets
/// all 10. (Before, the connection dropped a request for a link it no longer had, and
/// one that came for a connection that had ended its links was dropped with it: the
/// next responder got none, and their requesters a timeout at their deadline.)
#[test]
fn requests_on_their_way_to_a_responder_that_goes_reach_the_next_one() {
    let b = Broker::start(&[]);
    let mut req = Client::connect(b.addr(), "requester").unwrap();
    let ch = req.begin().unwrap();
    let (_replies, reply_to) = dynamic_receiver(&mut req, ch, "replies");
    let presettled = LinkOptions { presettled: true, ..Default::default() };
    for round in ["detach", "close"] {
        let container = format!("leaving-{round}");
        let mut leaving = Client::connect(b.addr(), &container).unwrap();
        let lch = leaving.begin().unwrap();
        let shard = b.connection_shards()[&container] as usize;
        // A channel whose home is the other shard: the credit and the requests cross
        // between shards, so the requests are on their way when the link goes.
        let address = commands_homed_off(shard, &format!("on-their-way-{round}"));
        let s = req.attach_sender(ch, &address, Some(&address), &LinkOptions::default()).unwrap();
        req.wait_credit(s).unwrap();
        send_requests(&mut req, s, &reply_to, 10, 4);
        let lr = leaving.attach_receiver(lch, "cmd", Some(&address), &presettled).unwrap();
        leaving.pump(Duration::from_millis(200)).unwrap();
        leaving.engine().grant_credit(lr, 100, false).unwrap();
        if round == "detach" {
            leaving.engine().detach(lr, None);
        } else {
            leaving.engine().close(None);
        }
        leaving.flush().unwrap();
        let _ = leaving.pump(Duration::from_millis(300));
        let (mut next, nr) = responder(&b, &format!("next-{round}"), &address, 100);
        let mut got = requests_received(&mut next, nr);
        got.sort_unstable();
        assert_eq!(got, (0..10).collect::<Vec<_>>(), "after a responder's {round}");
    }
}

/// RPC requests that reach a responder after it took its credit back (a FLOW granting
/// 10 and one granting 0 in one write; the channel's home on the other shard, so the
/// home hands the waiting requests over before it sees the 0) go back to the channel
/// at once: the next responder gets all 10 while the first stays attached. (Before,
/// they waited in its connection until its link went, past their deadlines.)
#[test]
fn requests_a_responder_took_its_credit_back_from_go_to_the_next_one() {
    let b = Broker::start(&[]);
    let mut first = Client::connect(b.addr(), "first").unwrap();
    let fch = first.begin().unwrap();
    let shard = b.connection_shards()["first"] as usize;
    let address = commands_homed_off(shard, "taken-back");
    let (mut req, s, reply_to) = requester(&b, &address);
    send_requests(&mut req, s, &reply_to, 10, 4);
    let presettled = LinkOptions { presettled: true, ..Default::default() };
    let fr = first.attach_receiver(fch, "cmd", Some(&address), &presettled).unwrap();
    first.pump(Duration::from_millis(200)).unwrap();
    first.engine().grant_credit(fr, 10, false).unwrap();
    first.engine().grant_credit(fr, 0, false).unwrap();
    first.flush().unwrap();
    let early = requests_received(&mut first, fr);
    let (mut next, nr) = responder(&b, "next", &address, 100);
    let mut got = requests_received(&mut next, nr);
    assert!(first.engine().link_info(fr).is_some(), "the first responder is still attached");
    got.extend(early);
    got.sort_unstable();
    assert_eq!(got, (0..10).collect::<Vec<_>>());
}

/// A responder that takes its credit back while requests wait for its shut session
/// window gives them back: the other responder gets them, in their order, while the
/// first stays attached. (Before 2026-12-06 they stayed with it until its link went.)
#[test]
fn requests_held_behind_a_shut_window_go_back_when_the_responder_takes_its_credit_back() {
    let b = Broker::start(&[("CONNECTORS_AMQP10_MAX_UNSETTLED_PER_LINK", "16")]);
    let mut r = responders_and_requests(&b, "commands/held-back", 100, 4);
    let mut got = requests_received(&mut r.good, r.good_link);
    assert_eq!(got.len(), 100 - 16);
    r.stuck.engine().grant_credit(r.stuck_link, 0, false).unwrap();
    r.stuck.flush().unwrap();
    r.stuck.pump(Duration::from_millis(200)).unwrap();
    let returned = requests_received(&mut r.good, r.good_link);
    assert_eq!(returned.len(), 16, "the requests the stuck responder held: {returned:?}");
    assert!(returned.windows(2).all(|w| w[0] < w[1]), "in their order: {returned:?}");
    assert!(r.stuck.engine().link_info(r.stuck_link).is_some(), "the stuck responder is still attached");
    got.extend(returned);
    got.sort_unstable();
    assert_eq!(got, (0..100).collect::<Vec<_>>());
}

/// Commands whose deadline (ttl 1 s) passes while they wait for their responder's shut
/// session window are not sent when it opens: their requesters have had their timeout
/// answer, and the responder would run them after it. (Before 2026-12-06 all 16 came.)
#[test]
fn requests_whose_deadline_passed_while_they_waited_are_not_sent() {
    use sluice_proto::codec::Encode;
    use sluice_proto::types::{Body, Header, Message, Properties};
    let b = Broker::start(&[("CONNECTORS_AMQP10_MAX_UNSETTLED_PER_LINK", "16")]);
    let address = "commands/expired-held";
    let (mut stuck, sch, link) = shut_responder(&b, "shut-responder", address, 100);
    let (mut req, s, reply_to) = requester(&b, address);
    for i in 0..16u32 {
        let props = Properties { reply_to: Some(reply_to.clone()), ..Default::default() };
        let header = Header { ttl: Some(1_000), ..Default::default() };
        let body = Body::Data(Bytes::copy_from_slice(&i.to_be_bytes()));
        let m = Message { header: Some(header), properties: Some(props), body, ..Default::default() };
        let id = req.send(s, m.to_bytes().freeze(), false).unwrap();
        assert_eq!(req.wait_outcome(s, id).unwrap(), Some(DeliveryState::Accepted));
    }
    stuck.pump(Duration::from_millis(2_500)).unwrap();
    req.pump(Duration::from_millis(100)).unwrap();
    stuck.engine().set_incoming_window(sch, 1_000).unwrap();
    stuck.flush().unwrap();
    let late = requests_received(&mut stuck, link);
    assert!(late.is_empty(), "requests sent after their deadline: {late:?}");
    // The window is open: a new request reaches the responder.
    send_requests(&mut req, s, &reply_to, 1, 4);
    assert_eq!(requests_received(&mut stuck, link), vec![0]);
}

/// A request larger than its responder's session window (one frame of 512 bytes) goes
/// out a frame at a time; the responder detaches after the first, and the request goes
/// to the next responder, in either settle mode. (Before 2026-12-06 it was dropped with
/// its frames: its requester got only a timeout at its deadline.)
#[test]
fn a_request_cut_off_between_its_frames_by_a_detach_goes_to_the_next_responder() {
    let b = Broker::start(&[]);
    for presettled in [true, false] {
        let address = format!("commands/cut-off-{presettled}");
        let mut cfg = sluice_proto::engine::Config::client("one-frame-responder");
        cfg.session_window = 1;
        cfg.max_frame_size = 512;
        let mut first = Client::connect_with(b.addr(), cfg).unwrap();
        let fch = first.begin().unwrap();
        let o = LinkOptions { presettled, ..Default::default() };
        let fr = first.attach_receiver(fch, "cmd", Some(&address), &o).unwrap();
        first.engine().grant_credit(fr, 1, false).unwrap();
        first.pump(Duration::from_millis(200)).unwrap();
        let (mut req, s, reply_to) = requester(&b, &address);
        send_requests(&mut req, s, &reply_to, 1, 10_000);
        // The first frame is on its way; the responder reads nothing and detaches.
        std::thread::sleep(Duration::from_millis(200));
        first.engine().detach(fr, None);
        first.flush().unwrap();
        let _ = first.pump(Duration::from_millis(200));
        let (mut next, nr) = responder(&b, &format!("next-{presettled}"), &address, 10);
        assert_eq!(requests_received(&mut next, nr), vec![0], "presettled {presettled}");
    }
}

/// RPC requests released when a responder's waiting deliveries pass the connection's
/// bound (4 x SLUICE_EVENTS_IN_FLIGHT_BYTES = 256 KiB; 16 requests of 20 KB may wait)
/// go to the other responder: the stuck link is detached with resource-limit-exceeded
/// and every request reaches the responder that reads, once.
#[test]
fn requests_released_at_the_bound_on_waiting_deliveries_go_to_another_responder() {
    let b = Broker::start(&[
        ("CONNECTORS_AMQP10_MAX_UNSETTLED_PER_LINK", "16"),
        ("SLUICE_EVENTS_IN_FLIGHT_BYTES", "65536"),
    ]);
    let mut r = responders_and_requests(&b, "commands/bound", 100, 20_000);
    let mut detached = false;
    let deadline = Instant::now() + Duration::from_secs(5);
    while !detached && Instant::now() < deadline {
        r.stuck.pump(Duration::from_millis(100)).unwrap();
        for e in r.stuck.take_events() {
            if let Event::Detached { link, error: Some(err), .. } = e {
                assert_eq!(err.condition, "amqp:resource-limit-exceeded");
                assert_eq!(link, r.stuck_link);
                detached = true;
            }
        }
    }
    assert!(detached, "the stuck responder was not detached");
    let mut got = requests_received(&mut r.good, r.good_link);
    got.sort_unstable();
    assert_eq!(got, (0..100).collect::<Vec<_>>());
}

/// A responder receiving unsettled with `x-opt-sluice-max-outstanding-bytes` gets
/// requests while the bytes it has not settled stay within it; a settlement makes
/// room for that many bytes. Before, responders had no byte watermark: all ten came
/// (only MaxUnsettledPerLink and the messages watermark held them).
#[test]
fn a_responder_receiving_unsettled_is_held_to_its_byte_watermark() {
    use sluice_proto::codec::{Fields, Symbol, Value};
    let b = Broker::start(&[]);
    let mut r = Client::connect(b.addr(), "weighed-responder").unwrap();
    let rch = r.begin().unwrap();
    let watermark = (Symbol::new("x-opt-sluice-max-outstanding-bytes"), Value::Ulong(1000));
    let opts = LinkOptions { properties: Some(Fields(vec![watermark])), ..Default::default() };
    let link = r.attach_receiver(rch, "cmd", Some("commands/weighed"), &opts).unwrap();
    r.engine().grant_credit(link, 100, false).unwrap();
    r.pump(Duration::from_millis(200)).unwrap();
    let (mut req, s, reply_to) = requester(&b, "commands/weighed");
    send_requests(&mut req, s, &reply_to, 10, 300);
    let quiet = |r: &mut Client| {
        let mut got = Vec::new();
        while let Ok(d) = r.receive(link, Duration::from_millis(500)) {
            assert!(!d.settled, "sent pre-settled");
            got.push(d);
        }
        got
    };
    let got = quiet(&mut r);
    let size = got[0].payload.len();
    assert!(size > 300 && size < 500, "{size}");
    assert_eq!(got.len(), 1000 / size, "requests of {size} bytes under a 1000-byte watermark");
    r.settle(link, got[0].delivery_id, DeliveryState::Accepted);
    assert_eq!(quiet(&mut r).len(), 1, "one settled, one more");
}

/// A responder that asks for a drain and takes it back in the same write (FLOW
/// drain=true credit 0, then FLOW credit 10) gets the requests on its new credit.
/// Before, its connection completed the drain with the new credit (engine credit 0)
/// while the home counted 10: each request met no credit at the connection, went back
/// to the channel and to the same responder again, round and round.
#[test]
fn a_drain_taken_back_by_the_next_flow_leaves_a_responder_its_credit() {
    let b = Broker::start(&[]);
    let (mut r, link) = responder(&b, "undrain-responder", "commands/undrained", 0);
    r.pump(Duration::from_millis(100)).unwrap();
    common::drain_taken_back(&mut r, link, 10);
    r.pump(Duration::from_millis(300)).unwrap();
    let (mut req, s, reply_to) = requester(&b, "commands/undrained");
    send_requests(&mut req, s, &reply_to, 5, 4);
    assert_eq!(requests_received(&mut r, link), vec![0, 1, 2, 3, 4]);
}

/// An RPC request whose correlation-id is a list of four million nulls (4 MB on the
/// wire, 160 MB decoded) is refused with amqp:decode-error, and the broker's memory
/// does not grow by what decoding it would cost. Before, it was decoded and kept
/// until the response or the request's deadline: 160 MB per request.
#[test]
fn an_rpc_request_whose_correlation_id_holds_values_is_refused_undecoded() {
    use sluice_proto::codec::{Encode, Value};
    let b = Broker::start(&[]);
    let (_responder, _link) = responder(&b, "responder", "commands/ids", 10);
    let (mut req, s, reply_to) = requester(&b, "commands/ids");
    let before = common::rss_kib(b.pid());
    for _ in 0..3 {
        let mut fields = vec![Value::Null; 6];
        fields[4] = Value::string(&reply_to);
        fields[5] = Value::List(vec![Value::Null; 4_000_000]);
        let mut m = BytesMut::new();
        let props = sluice_proto::codec::Described {
            descriptor: sluice_proto::codec::Descriptor::Code(0x73),
            value: Value::List(fields),
        };
        Value::Described(Box::new(props)).encode(&mut m);
        m.extend_from_slice(&[0x00, 0x53, 0x75, 0xa0, 0x02, b'h', b'i']);
        let id = req.send(s, m.freeze(), false).unwrap();
        match req.wait_outcome(s, id).unwrap() {
            Some(DeliveryState::Rejected(r)) => {
                let e = r.error.expect("an error");
                assert_eq!(e.condition.as_str(), "amqp:decode-error", "{e:?}");
            }
            other => panic!("the request was not refused: {other:?}"),
        }
    }
    let grown_mib = common::rss_kib(b.pid()).saturating_sub(before) / 1024;
    assert!(grown_mib < 100, "the broker grew by {grown_mib} MiB");
}
