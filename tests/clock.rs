//! A step of the wall clock (NTP setting it, a VM resumed, an operator's `date -s`)
//! neither holds back nor fires the broker's deadlines: they run on a steady clock. The
//! broker runs under Debian's libfaketime (installed by scripts/test.sh), whose offset
//! file each test rewrites while the broker runs; the monotonic clock is left alone.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use bytes::Bytes;
use common::{fresh_dir, Broker};
use sluice_perf::client::{data_message, Client, LinkOptions, WAIT};
use sluice_proto::codec::{Encode, Fields, Symbol, Value};
use sluice_proto::engine::LinkId;
use sluice_proto::types::{
    Attach, AttachTarget, Body, DeliveryState, Message, Properties, RawMessage, Role, Source, Target,
};
use std::path::PathBuf;
use std::time::Duration;

const LIBFAKETIME: &str = "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1";

/// A broker whose wall clock is offset by what `step` last wrote.
struct SteppedBroker {
    broker: Broker,
    offset_file: PathBuf,
}

impl SteppedBroker {
    fn start(extra: &[(&str, &str)]) -> SteppedBroker {
        assert!(std::path::Path::new(LIBFAKETIME).exists(), "{LIBFAKETIME} missing: run scripts/test.sh");
        let offset_file = PathBuf::from(fresh_dir("clock")).join("offset");
        std::fs::write(&offset_file, "+0").unwrap();
        let file = offset_file.to_str().unwrap().to_owned();
        let mut env = vec![
            ("LD_PRELOAD", LIBFAKETIME),
            ("FAKETIME_TIMESTAMP_FILE", file.as_str()),
            ("FAKETIME_NO_CACHE", "1"),
            ("FAKETIME_DONT_FAKE_MONOTONIC", "1"),
            ("SLUICE_SHARDS", "1"),
        ];
        env.extend_from_slice(extra);
        let broker = Broker::start(&env);
        SteppedBroker { broker, offset_file }
    }

    /// Set the wall clock's offset from now on ("-1h", "+1h", "+0").
    fn step(&self, offset: &str) {
        std::fs::write(&self.offset_file, offset).unwrap();
    }
}

/// A client with one session and an unsettled sender to `addr` that has credit.
fn producer(b: &Broker, container: &str, addr: &str) -> (Client, u16, LinkId) {
    let mut c = Client::connect(b.addr(), container).unwrap();
    let ch = c.begin().unwrap();
    let s = c.attach_sender(ch, "s", Some(addr), &LinkOptions::default()).unwrap();
    c.wait_credit(s).unwrap();
    (c, ch, s)
}

/// Publish `body` on `s` and wait for `accepted`.
fn publish(c: &mut Client, s: LinkId, body: &[u8]) {
    let id = c.send(s, data_message(body), false).unwrap();
    assert_eq!(c.wait_outcome(s, id).unwrap(), Some(DeliveryState::Accepted));
}

fn body(d: &sluice_proto::engine::Delivery) -> Vec<u8> {
    RawMessage::parse(&d.payload).unwrap().data().unwrap().unwrap()
}

/// The wall clock goes back an hour while a consumer holds a message with a 1 s ack
/// deadline: the message still comes back after about a second. (On the wall clock,
/// the deadline was an hour and a second away.)
#[test]
fn a_wall_clock_stepped_back_does_not_hold_back_an_ack_deadline() {
    let sb = SteppedBroker::start(&[]);
    let b = &sb.broker;
    let (mut c, ch, s) = producer(b, "lease", "queues/clock");
    publish(&mut c, s, b"job");
    let lease = LinkOptions {
        properties: Some(Fields(vec![(Symbol::new("x-opt-sluice-ack-deadline-seconds"), Value::Uint(1))])),
        ..Default::default()
    };
    let r = c.attach_receiver(ch, "r", Some("queues/clock"), &lease).unwrap();
    c.engine().grant_credit(r, 1, false).unwrap();
    let first = c.receive(r, WAIT).unwrap();
    assert_eq!(body(&first), b"job");
    sb.step("-1h");
    // Not settled: another consumer gets it once the deadline passes.
    let mut other = Client::connect(b.addr(), "other").unwrap();
    let och = other.begin().unwrap();
    let r2 = other.attach_receiver(och, "r2", Some("queues/clock"), &LinkOptions::default()).unwrap();
    other.engine().grant_credit(r2, 1, false).unwrap();
    let again = other.receive(r2, Duration::from_secs(10)).expect("the deadline never passed");
    assert_eq!(body(&again), b"job");
    assert_eq!(b.metric("sluice_channel_ack_deadline_expired_total{pattern=\"queues\",channel=\"clock\"}"), Some(1.0));
}

/// The wall clock goes forward an hour while a command waits for its response (10 s
/// timeout): the responder's answer still reaches the requester. (On the wall clock,
/// the request had timed out an hour ago, and the requester was told so at once.)
#[test]
fn a_wall_clock_stepped_forward_does_not_time_out_a_waiting_request() {
    let sb = SteppedBroker::start(&[]);
    let b = &sb.broker;
    let mut resp = Client::connect(b.addr(), "responder").unwrap();
    let rch = resp.begin().unwrap();
    let rr = resp.attach_receiver(rch, "cmd", Some("commands/clock"), &LinkOptions::default()).unwrap();
    resp.engine().grant_credit(rr, 10, false).unwrap();
    resp.pump(Duration::from_millis(200)).unwrap();

    let mut req = Client::connect(b.addr(), "requester").unwrap();
    let ch = req.begin().unwrap();
    let attach = Attach {
        name: "replies".into(),
        role: Role::Receiver,
        source: Some(Source { dynamic: Some(true), ..Default::default() }),
        target: Some(AttachTarget::Target(Target::default())),
        ..Default::default()
    };
    let (replies, reply) = req.attach_full(ch, attach).unwrap();
    let reply_to = reply.source.as_ref().and_then(|s| s.address.clone()).unwrap();
    req.engine().grant_credit(replies, 10, false).unwrap();
    let s = req.attach_sender(ch, "req", Some("commands/clock"), &LinkOptions::default()).unwrap();
    req.wait_credit(s).unwrap();
    let m = Message {
        properties: Some(Properties {
            reply_to: Some(reply_to),
            message_id: Some(Value::string("q1")),
            ..Default::default()
        }),
        body: Body::Data(Bytes::from_static(b"ping")),
        ..Default::default()
    };
    let id = req.send(s, m.to_bytes().freeze(), false).unwrap();
    assert_eq!(req.wait_outcome(s, id).unwrap(), Some(DeliveryState::Accepted));

    let request = resp.receive(rr, WAIT).unwrap();
    resp.settle(rr, request.delivery_id, DeliveryState::Accepted);
    let props = RawMessage::parse(&request.payload).unwrap().properties().unwrap().unwrap();
    sb.step("+1h");
    // Let both connections wake on the new wall clock before the answer goes.
    req.pump(Duration::from_millis(300)).unwrap();
    resp.pump(Duration::from_millis(300)).unwrap();
    let to = props.reply_to.clone().unwrap();
    let back = resp.attach_sender(rch, "reply", Some(&to), &LinkOptions::default()).unwrap();
    resp.wait_credit(back).unwrap();
    let answer = Message {
        properties: Some(Properties { to: Some(to), correlation_id: props.correlation_id, ..Default::default() }),
        body: Body::Data(Bytes::from_static(b"pong")),
        ..Default::default()
    };
    let id = resp.send(back, answer.to_bytes().freeze(), false).unwrap();
    assert_eq!(resp.wait_outcome(back, id).unwrap(), Some(DeliveryState::Accepted));
    let got = req.receive(replies, Duration::from_secs(5)).unwrap();
    let raw = RawMessage::parse(&got.payload).unwrap();
    assert_eq!(raw.data().unwrap(), Some(b"pong".to_vec()), "not the answer (a timeout?): {raw:?}");
}

/// The wall clock goes back an hour between two events: the later events' times are
/// not before the earlier one's, so a reader from ten minutes ago gets all three.
/// (With their times out of order, the search for the position skipped every event.)
#[test]
fn a_wall_clock_stepped_back_keeps_event_times_in_order() {
    let sb = SteppedBroker::start(&[]);
    let b = &sb.broker;
    let (mut c, ch, s) = producer(b, "times", "events-store/clock-times");
    publish(&mut c, s, b"before");
    sb.step("-1h");
    c.pump(Duration::from_millis(200)).unwrap();
    publish(&mut c, s, b"after-1");
    publish(&mut c, s, b"after-2");
    let since = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs() - 600;
    let start = LinkOptions {
        properties: Some(Fields(vec![(Symbol::new("x-opt-kubemq-start"), Value::string(&format!("time:{since}")))])),
        ..Default::default()
    };
    let r = c.attach_receiver(ch, "r", Some("events-store/clock-times"), &start).unwrap();
    c.engine().grant_credit(r, 10, false).unwrap();
    let mut got = Vec::new();
    while let Ok(d) = c.receive(r, Duration::from_millis(1000)) {
        got.push(body(&d));
    }
    assert_eq!(got, vec![b"before".to_vec(), b"after-1".to_vec(), b"after-2".to_vec()]);
}
