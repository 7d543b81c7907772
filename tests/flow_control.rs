//! Pub/Sub-style flow control of sluice_perf::flow against the real broker binary:
//! outstanding messages and bytes never pass the limits (checked from inside the
//! workers and at the link), a message larger than the byte limit still goes, alone,
//! and the publisher's unsettled publishes stay within its limits. No timings are
//! asserted; the deadlines only keep a broken build from hanging.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::Broker;
use sluice_perf::client::{data_message, Client, LinkOptions};
use sluice_perf::flow::{
    FlowControlSettings, FlowController, FlowError, LimitExceededBehavior, Message, Outcome,
    PublishFlowControlSettings, Publisher, PublisherStats, Subscriber, SubscriberOptions, SubscriberStats,
};
use sluice_proto::types::DeliveryState;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const N: u32 = 2000;
/// The index of the one message larger than every byte limit used here.
const BIG: u32 = 1000;
const BIG_LEN: usize = 50_000;

/// Body length of message `i`: mostly small (messages limit binds), a third a few
/// KB (bytes limit binds), one of 50 KB. Deterministic.
fn body_len(i: u32) -> usize {
    if i == BIG {
        return BIG_LEN;
    }
    let x = i.wrapping_mul(2_654_435_761) >> 7;
    match x % 3 {
        0 => 2000 + (x as usize / 3) % 6000,
        _ => 4 + (x as usize / 3) % 400,
    }
}

/// Message `i`: its index (big-endian) then filler.
fn message(i: u32) -> bytes::Bytes {
    let mut b = vec![(i % 251) as u8; body_len(i)];
    b[..4].copy_from_slice(&i.to_be_bytes());
    data_message(&b)
}

fn index(m: &Message) -> u32 {
    let d = m.data().expect("data body");
    u32::from_be_bytes(d[..4].try_into().unwrap())
}

/// Publish messages `from..to` through a flow-controlled publisher and wait for
/// every outcome.
fn publish_range(addr: &str, address: &str, from: u32, to: u32) -> PublisherStats {
    let settings = PublishFlowControlSettings { max_outstanding_publishes: 64, ..Default::default() };
    let p = Publisher::start(addr, address, settings).unwrap();
    let handles: Vec<_> = (from..to).map(|i| p.publish(message(i)).unwrap()).collect();
    for h in handles {
        assert_eq!(h.wait().unwrap(), Some(DeliveryState::Accepted));
    }
    p.close().unwrap()
}

/// What the workers see, recorded from inside them.
struct Watch {
    max_messages: usize,
    max_bytes: usize,
    /// (messages, bytes) inside handlers right now.
    current: Mutex<(usize, usize)>,
    peak_messages: AtomicUsize,
    /// Most bytes held by more than one message at once.
    peak_shared_bytes: AtomicUsize,
    peak_flow_messages: AtomicUsize,
    peak_flow_shared_bytes: AtomicUsize,
    violations: Mutex<Vec<String>>,
    seen: Vec<AtomicU32>,
    done: AtomicUsize,
    big_alone: AtomicBool,
}

impl Watch {
    fn new(n: u32, max_messages: usize, max_bytes: usize) -> Arc<Watch> {
        Arc::new(Watch {
            max_messages,
            max_bytes,
            current: Mutex::new((0, 0)),
            peak_messages: AtomicUsize::new(0),
            peak_shared_bytes: AtomicUsize::new(0),
            peak_flow_messages: AtomicUsize::new(0),
            peak_flow_shared_bytes: AtomicUsize::new(0),
            violations: Mutex::new(Vec::new()),
            seen: (0..n).map(|_| AtomicU32::new(0)).collect(),
            done: AtomicUsize::new(0),
            big_alone: AtomicBool::new(false),
        })
    }

    fn violation(&self, what: String) {
        let mut v = self.violations.lock().unwrap();
        if v.len() < 20 {
            v.push(what);
        }
    }

    /// The handler: check and record on entry, hold the message, record on exit.
    fn handle(&self, m: Message, flow: &FlowController, hold: Duration) -> Outcome {
        let (i, size) = (index(&m), m.size());
        let (msgs, bytes) = {
            let mut c = self.current.lock().unwrap();
            c.0 += 1;
            c.1 += size;
            *c
        };
        self.peak_messages.fetch_max(msgs, Ordering::SeqCst);
        if msgs > 1 {
            self.peak_shared_bytes.fetch_max(bytes, Ordering::SeqCst);
        }
        if msgs > self.max_messages || (bytes > self.max_bytes && msgs > 1) {
            self.violation(format!("#{i}: {msgs} messages / {bytes} bytes in handlers"));
        }
        // The shared flow-control state, read from inside a worker.
        let (fm, fb) = flow.outstanding();
        self.peak_flow_messages.fetch_max(fm, Ordering::SeqCst);
        if fm > 1 {
            self.peak_flow_shared_bytes.fetch_max(fb, Ordering::SeqCst);
        }
        if fm == 0 || fm > self.max_messages || (fb > self.max_bytes && fm > 1) {
            self.violation(format!("#{i}: flow controller says {fm} messages / {fb} bytes"));
        }
        if size > self.max_bytes {
            self.big_alone.store(msgs == 1 && fm == 1 && fb == size, Ordering::SeqCst);
        }
        // Hold it, so the others pile up behind the limits (the large one longest).
        std::thread::sleep(if size > self.max_bytes { hold * 20 } else { hold * (1 + i % 3) });
        {
            let mut c = self.current.lock().unwrap();
            c.0 -= 1;
            c.1 -= size;
        }
        self.seen[i as usize].fetch_add(1, Ordering::SeqCst);
        self.done.fetch_add(1, Ordering::SeqCst);
        Outcome::Accept
    }

    fn wait_for(&self, n: usize, sub: &Subscriber) {
        let deadline = Instant::now() + Duration::from_secs(180);
        while self.done.load(Ordering::SeqCst) < n {
            assert!(sub.is_running(), "subscriber stopped: {:?}", sub.stats());
            assert!(
                Instant::now() < deadline,
                "only {} of {n} handled: {:?}",
                self.done.load(Ordering::SeqCst),
                sub.stats()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn assert_clean(&self) {
        let v = self.violations.lock().unwrap();
        assert!(v.is_empty(), "limits passed: {v:#?}");
        assert!(self.peak_messages.load(Ordering::SeqCst) <= self.max_messages);
        assert!(self.peak_shared_bytes.load(Ordering::SeqCst) <= self.max_bytes);
        assert!(self.peak_flow_messages.load(Ordering::SeqCst) <= self.max_messages);
        assert!(self.peak_flow_shared_bytes.load(Ordering::SeqCst) <= self.max_bytes);
        for (i, s) in self.seen.iter().enumerate() {
            assert_eq!(s.load(Ordering::SeqCst), 1, "message {i} handled {} times", s.load(Ordering::SeqCst));
        }
    }

    fn report(&self, name: &str, stats: &SubscriberStats) {
        eprintln!(
            "{name}: in handlers at most {} messages, {} bytes shared; flow controller at most {} messages, \
             {} bytes shared; {stats:?}",
            self.peak_messages.load(Ordering::SeqCst),
            self.peak_shared_bytes.load(Ordering::SeqCst),
            self.peak_flow_messages.load(Ordering::SeqCst),
            self.peak_flow_shared_bytes.load(Ordering::SeqCst),
        );
    }
}

fn subscribe(
    b: &Broker,
    address: &str,
    settings: FlowControlSettings,
    workers: usize,
    watch: &Arc<Watch>,
    hold: Duration,
    broker_watermarks: bool,
) -> Subscriber {
    let flow = FlowController::new(settings);
    let options =
        SubscriberOptions { flow_controller: Some(flow.clone()), workers, broker_watermarks, ..Default::default() };
    let w = watch.clone();
    Subscriber::start(b.addr(), address, options, move |m| w.handle(m, &flow, hold)).unwrap()
}

/// Nothing is left on the queue: a fresh receiver with credit gets nothing.
fn assert_queue_empty(b: &Broker, address: &str) {
    let mut c = Client::connect(b.addr(), "leftovers").unwrap();
    let ch = c.begin().unwrap();
    let r = c.attach_receiver(ch, "leftovers", Some(address), &LinkOptions::default()).unwrap();
    c.engine().grant_credit(r, 100, false).unwrap();
    assert!(c.receive(r, Duration::from_millis(300)).is_err(), "a message was left behind (or redelivered)");
}

#[test]
fn subscriber_holds_10_messages_and_20000_bytes_and_a_50kb_message_goes_alone() {
    let b = Broker::start(&[]);
    let addr = b.addr();
    let p = publish_range(&addr, "queues/flow", 0, N);
    assert_eq!((p.sent, p.accepted, p.overshoots), (N as u64, N as u64, 0));
    assert!(p.peak_outstanding_publishes <= 64, "{p:?}");

    let settings = FlowControlSettings {
        max_outstanding_messages: 10,
        max_outstanding_bytes: 20_000,
        limit_exceeded_behavior: LimitExceededBehavior::Block,
    };
    let watch = Watch::new(N, 10, 20_000);
    let sub = subscribe(&b, "queues/flow", settings, 4, &watch, Duration::from_micros(500), true);
    watch.wait_for(N as usize, &sub);
    let flow = sub.flow_controller().clone();
    let stats = sub.stop().unwrap();
    watch.report("sluice watermarks + credit", &stats);

    watch.assert_clean();
    assert!(watch.big_alone.load(Ordering::SeqCst), "the 50 KB message was not handled alone");
    assert_eq!(flow.outstanding(), (0, 0));
    // At the link (waiting in the subscriber plus in workers): credit caps messages,
    // the broker's watermark caps bytes; only the lone 50 KB message passes 20,000.
    assert_eq!((stats.received, stats.accepted), (N as u64, N as u64), "{stats:?}");
    assert_eq!(stats.overshoots, 0, "{stats:?}");
    assert_eq!(stats.released_by_flow_control, 0, "{stats:?}");
    assert!(stats.peak_unsettled_messages <= 10, "{stats:?}");
    assert!(stats.peak_unsettled_bytes <= BIG_LEN + 16, "{stats:?}");
    assert!(stats.error.is_none(), "{stats:?}");
    assert_queue_empty(&b, "queues/flow");
}

#[test]
fn publisher_keeps_unsettled_publishes_within_its_limits() {
    let b = Broker::start(&[]);
    let settings = PublishFlowControlSettings {
        max_outstanding_publishes: 8,
        max_outstanding_publish_bytes: 30_000,
        limit_exceeded_behavior: LimitExceededBehavior::Block,
    };
    let p = Publisher::start(b.addr(), "queues/pubflow", settings).unwrap();
    // Four threads share the publisher (and its one flow-control state).
    std::thread::scope(|s| {
        for t in 0..4u32 {
            let p = &p;
            s.spawn(move || {
                let mut handles = Vec::new();
                for i in (t * N / 4)..((t + 1) * N / 4) {
                    handles.push(p.publish(message(i)).unwrap());
                    let (m, bytes) = p.flow_controller().outstanding();
                    assert!(m <= 8 && (bytes <= 30_000 || m == 1), "{m} publishes / {bytes} bytes outstanding");
                }
                for h in handles {
                    assert_eq!(h.wait().unwrap(), Some(DeliveryState::Accepted));
                }
            });
        }
    });
    assert_eq!(p.flow_controller().outstanding(), (0, 0));
    let stats = p.close().unwrap();
    eprintln!("publisher: {stats:?}");
    assert_eq!((stats.sent, stats.accepted, stats.failed), (N as u64, N as u64, 0));
    assert!(stats.peak_outstanding_publishes <= 8, "{stats:?}");
    assert_eq!(stats.overshoots, 0, "{stats:?}");
    assert!(stats.peak_outstanding_bytes <= BIG_LEN + 16, "{stats:?}");

    // Everything arrived, once.
    let watch = Watch::new(N, 1000, 100 * 1024 * 1024);
    let sub = subscribe(&b, "queues/pubflow", FlowControlSettings::default(), 2, &watch, Duration::ZERO, true);
    watch.wait_for(N as usize, &sub);
    sub.stop().unwrap();
    watch.assert_clean();
}

#[test]
fn publisher_error_fails_fast_and_ignore_only_counts() {
    let b = Broker::start(&[]);
    let error = PublishFlowControlSettings {
        max_outstanding_publishes: 2,
        max_outstanding_publish_bytes: 5000,
        limit_exceeded_behavior: LimitExceededBehavior::Error,
    };
    let p = Publisher::start(b.addr(), "queues/pub-error", error).unwrap();
    let (mut ok, mut refused) = (Vec::new(), 0);
    for i in 0..500 {
        match p.publish(message(i)) {
            Ok(h) => ok.push(h),
            Err(FlowError::MaxOutstandingMessages | FlowError::MaxOutstandingBytes) => refused += 1,
            Err(e) => panic!("{e}"),
        }
    }
    let accepted = ok.len();
    for h in ok {
        assert_eq!(h.wait().unwrap(), Some(DeliveryState::Accepted));
    }
    let stats = p.close().unwrap();
    eprintln!("error behaviour: {accepted} published, {refused} refused; {stats:?}");
    assert_eq!(accepted + refused, 500);
    assert!(accepted >= 1);
    // 500 publishes back to back against a limit of 2: most find it reached.
    assert!(refused > 0, "Error refused nothing: {stats:?}");
    assert_eq!(stats.accepted, accepted as u64);
    assert!(stats.peak_outstanding_publishes <= 2, "{stats:?}");
    assert_eq!(stats.overshoots, 0, "{stats:?}");

    let ignore = PublishFlowControlSettings { limit_exceeded_behavior: LimitExceededBehavior::Ignore, ..error };
    let p = Publisher::start(b.addr(), "queues/pub-ignore", ignore).unwrap();
    let handles: Vec<_> = (0..500).map(|i| p.publish(message(i)).unwrap()).collect();
    for h in handles {
        assert_eq!(h.wait().unwrap(), Some(DeliveryState::Accepted));
    }
    // Counted all along, and all given back.
    assert_eq!(p.flow_controller().outstanding(), (0, 0));
    let stats = p.close().unwrap();
    eprintln!("ignore behaviour: {stats:?}");
    assert_eq!(stats.accepted, 500);
    // Nothing waited and nothing was refused: the limit was passed, and counted.
    assert!(stats.overshoots > 0 && stats.peak_outstanding_publishes > 2, "{stats:?}");
}

/// Two subscribers share one flow controller: when one stops, the other goes on with
/// it, and what the stopped one held is given back. Before, the first to stop closed
/// the shared controller: the other's messages waited for room that never came (Block;
/// under Error and Ignore they went back to the broker and came again, without end).
#[test]
fn a_shared_flow_controller_outlives_the_subscriber_that_stops_first() {
    let b = Broker::start(&[]);
    let settings =
        FlowControlSettings { max_outstanding_messages: 10, max_outstanding_bytes: 1 << 20, ..Default::default() };
    let flow = FlowController::new(settings);
    let handled = Arc::new(AtomicUsize::new(0));
    let start = |address: &str| {
        let h = handled.clone();
        let options = SubscriberOptions { flow_controller: Some(flow.clone()), workers: 2, ..Default::default() };
        Subscriber::start(b.addr(), address, options, move |_| {
            h.fetch_add(1, Ordering::SeqCst);
            Outcome::Accept
        })
        .unwrap()
    };
    let wait_handled = |n: usize, sub: &Subscriber| {
        let deadline = Instant::now() + Duration::from_secs(30);
        while handled.load(Ordering::SeqCst) < n {
            assert!(Instant::now() < deadline, "{} of {n} handled: {:?}", handled.load(Ordering::SeqCst), sub.stats());
            std::thread::sleep(Duration::from_millis(20));
        }
    };
    let first = start("queues/shared-first");
    let second = start("queues/shared-second");
    publish_range(&b.addr(), "queues/shared-first", 0, 20);
    wait_handled(20, &first);
    first.stop().unwrap();
    publish_range(&b.addr(), "queues/shared-second", 0, 50);
    wait_handled(70, &second);
    let stats = second.stop().unwrap();
    assert_eq!(stats.accepted, 50, "{stats:?}");
    assert_eq!(flow.outstanding(), (0, 0));
}

/// Sets the handlers' hold flag to false when dropped.
struct Gate(Arc<AtomicBool>);

impl Drop for Gate {
    fn drop(&mut self) {
        self.0.store(false, Ordering::SeqCst);
    }
}

/// Subscribers sharing one flow controller take their credit from its one count: two
/// of them with a limit of 10 are sent 10 messages between them, 5 each (an equal
/// share), not 10 each; the first, granted all 10 while alone, drains its credit when
/// the second joins; and once the first stops, the second may hold all 10. Before,
/// each link got credit for the whole limit (20 received while the workers held them).
#[test]
fn subscribers_sharing_a_flow_controller_are_sent_no_more_than_its_limit_together() {
    let b = Broker::start(&[]);
    let settings =
        FlowControlSettings { max_outstanding_messages: 10, max_outstanding_bytes: 1 << 20, ..Default::default() };
    let flow = FlowController::new(settings);
    let hold = Arc::new(AtomicBool::new(true));
    let accepted = Arc::new(AtomicUsize::new(0));
    let start = |address: &str| {
        let (hold, accepted) = (hold.clone(), accepted.clone());
        let options = SubscriberOptions { flow_controller: Some(flow.clone()), workers: 4, ..Default::default() };
        Subscriber::start(b.addr(), address, options, move |_| {
            while hold.load(Ordering::SeqCst) {
                std::thread::sleep(Duration::from_millis(2));
            }
            accepted.fetch_add(1, Ordering::SeqCst);
            Outcome::Accept
        })
        .unwrap()
    };
    let until = |what: &str, done: &dyn Fn() -> bool, subs: &[&Subscriber]| {
        let deadline = Instant::now() + Duration::from_secs(30);
        while !done() {
            let stats: Vec<_> = subs.iter().map(|s| s.stats()).collect();
            assert!(Instant::now() < deadline, "{what}: {stats:?}");
            std::thread::sleep(Duration::from_millis(10));
        }
    };
    let first = start("queues/share-first");
    until("the first subscriber's grant", &|| first.stats().credit_grants >= 1, &[&first]);
    let second = start("queues/share-second");
    // Dropped before the subscribers: a failed assertion opens the gate, or their
    // workers, joined as they drop, would wait on it for ever.
    let _open_on_failure = Gate(hold.clone());
    // The second is granted credit only once the first has given back what passed its share.
    until("the second subscriber's grant", &|| second.stats().credit_grants >= 1, &[&first, &second]);
    assert_eq!(first.stats().drains, 1, "{:?}", first.stats());
    publish_range(&b.addr(), "queues/share-first", 0, 30);
    publish_range(&b.addr(), "queues/share-second", 0, 30);
    let received = || first.stats().received + second.stats().received;
    until("10 received", &|| received() >= 10, &[&first, &second]);
    // Room for more to arrive if the broker had been given the credit.
    std::thread::sleep(Duration::from_millis(300));
    let (one, two) = (first.stats(), second.stats());
    assert_eq!((one.received, two.received), (5, 5), "{one:?} {two:?}");
    assert!(flow.peak_held_messages() <= 10, "{}", flow.peak_held_messages());

    hold.store(false, Ordering::SeqCst);
    until("60 accepted", &|| accepted.load(Ordering::SeqCst) >= 60, &[&first, &second]);
    let one = first.stop().unwrap();
    assert_eq!((one.received, one.accepted, one.overshoots), (30, 30, 0), "{one:?}");
    // Alone again, the second may hold the whole limit.
    hold.store(true, Ordering::SeqCst);
    publish_range(&b.addr(), "queues/share-second", 30, 60);
    until("10 held by the second", &|| second.stats().received >= 40, &[&second]);
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(second.stats().received, 40, "{:?}", second.stats());
    hold.store(false, Ordering::SeqCst);
    until("90 accepted", &|| accepted.load(Ordering::SeqCst) >= 90, &[&second]);
    let two = second.stop().unwrap();
    assert_eq!((two.received, two.accepted, two.overshoots), (60, 60, 0), "{two:?}");
    assert!(flow.peak_held_messages() <= 10, "{}", flow.peak_held_messages());
    assert_eq!(flow.outstanding(), (0, 0));
}

/// A subscriber whose connection is lost while its workers hold messages gives their
/// room back to the flow controller it was given when it ends. Before, that room stayed
/// counted for good (a controller shared with others stayed that much fuller).
#[test]
fn a_subscriber_that_loses_its_connection_gives_back_the_room_its_workers_held() {
    let mut b = Broker::start(&[]);
    publish_range(&b.addr(), "queues/lost", 0, 10);
    let settings =
        FlowControlSettings { max_outstanding_messages: 10, max_outstanding_bytes: 1 << 20, ..Default::default() };
    let flow = FlowController::new(settings);
    let options = SubscriberOptions { flow_controller: Some(flow.clone()), workers: 4, ..Default::default() };
    let sub = Subscriber::start(b.addr(), "queues/lost", options, |_| {
        std::thread::sleep(Duration::from_secs(2));
        Outcome::Accept
    })
    .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    while flow.outstanding().0 < 4 {
        assert!(Instant::now() < deadline, "workers never held 4: {:?}", flow.outstanding());
        std::thread::sleep(Duration::from_millis(10));
    }
    b.kill9();
    while sub.is_running() {
        assert!(Instant::now() < deadline, "the subscriber did not notice its connection went");
        std::thread::sleep(Duration::from_millis(10));
    }
    assert_eq!(flow.outstanding(), (0, 0));
}

/// Without sluice's watermarks (what any other broker gives), credit still caps the
/// messages at the link, and the client still keeps the workers within both limits;
/// the bytes at the link may pass the limit (counted, not asserted).
#[test]
fn without_broker_watermarks_the_workers_still_stay_within_the_limits() {
    let b = Broker::start(&[]);
    const M: u32 = 400;
    publish_range(&b.addr(), "queues/nowm", 0, M);
    publish_range(&b.addr(), "queues/nowm-error", 0, M);
    for (address, behavior) in
        [("queues/nowm", LimitExceededBehavior::Block), ("queues/nowm-error", LimitExceededBehavior::Error)]
    {
        let settings = FlowControlSettings {
            max_outstanding_messages: 10,
            max_outstanding_bytes: 8000,
            limit_exceeded_behavior: behavior,
        };
        let watch = Watch::new(M, 10, 8000);
        let sub = subscribe(&b, address, settings, 3, &watch, Duration::from_micros(500), false);
        watch.wait_for(M as usize, &sub);
        let stats = sub.stop().unwrap();
        watch.report(&format!("no broker watermarks, {behavior:?}"), &stats);
        watch.assert_clean();
        assert!(stats.peak_unsettled_messages <= 10, "{stats:?}");
        assert_eq!(stats.accepted, M as u64, "{stats:?}");
        if behavior == LimitExceededBehavior::Block {
            assert_eq!(stats.released_by_flow_control, 0);
        }
        assert_queue_empty(&b, address);
    }
}

/// A message that comes in many frames took its credit at its first frame and was
/// counted as held only at its last: a grant in between let the broker send one more
/// than the limit (the broker's own watermark is off, so credit is all that bounds it).
#[test]
fn a_message_half_received_counts_against_the_limit() {
    let b = Broker::start(&[]);
    const M: u32 = 12;
    {
        let mut c = Client::connect(b.addr(), "big-frames").unwrap();
        let ch = c.begin().unwrap();
        let s = c.attach_sender(ch, "s", Some("queues/frames"), &LinkOptions::default()).unwrap();
        c.wait_credit(s).unwrap();
        for i in 0..M {
            let mut body = vec![7u8; 200_000];
            body[..4].copy_from_slice(&i.to_be_bytes());
            let id = c.send(s, data_message(&body), false).unwrap();
            assert_eq!(c.wait_outcome(s, id).unwrap(), Some(DeliveryState::Accepted));
        }
    }
    // 512-byte frames: each message comes in about 400, over many reads.
    let config =
        sluice_proto::engine::Config { max_frame_size: 512, ..sluice_proto::engine::Config::client("small-frames") };
    let client = Client::connect_with(b.addr(), config).unwrap();
    let settings = FlowControlSettings { max_outstanding_messages: 2, ..FlowControlSettings::default() };
    let options =
        SubscriberOptions { flow_control: settings, workers: 2, broker_watermarks: false, ..Default::default() };
    let handled = Arc::new(AtomicU32::new(0));
    let h = handled.clone();
    let sub = Subscriber::start_on(client, "queues/frames", options, move |_| {
        std::thread::sleep(Duration::from_millis(30));
        h.fetch_add(1, Ordering::SeqCst);
        Outcome::Accept
    })
    .unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    while handled.load(Ordering::SeqCst) < M && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    let stats = sub.stop().unwrap();
    assert_eq!(stats.accepted, M as u64, "{stats:?}");
    assert_eq!(stats.overshoots, 0, "{stats:?}");
    assert!(stats.peak_unsettled_messages <= 2, "{stats:?}");
}

/// `sluice-perf flow` (the load generator's scenario on this API) against the real
/// broker: every message published within the publisher's limit and handled within
/// the subscriber's, reported in the JSON it prints.
#[test]
fn the_load_generators_flow_scenario_stays_within_its_limits() {
    let b = Broker::start(&[]);
    let args: Vec<String> = [
        "flow",
        "--url",
        &format!("amqp://{}", b.addr()),
        "--count",
        "20000",
        "--max-outstanding-messages",
        "10",
        "--max-outstanding-bytes",
        "3000",
        "--inflight",
        "64",
        "--workers",
        "3",
        "--timeout",
        "120",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let report = sluice_perf::run::run(sluice_perf::opts::Opts::parse(&args).unwrap());
    let j = &report.json;
    assert!(report.ok, "{}", report.text);
    assert_eq!(j["end"], "complete", "{j}");
    assert_eq!(j["delivered"], 20000, "{j}");
    assert_eq!(j["accepted"], 20000, "{j}");
    let peak_messages = j["subscriber"]["peak_unsettled_messages"].as_u64().unwrap();
    let peak_bytes = j["subscriber"]["peak_unsettled_bytes"].as_u64().unwrap();
    assert!((1..=10).contains(&peak_messages), "{j}");
    assert!(peak_bytes <= 3000, "{j}");
    assert!(j["publisher"]["peak_outstanding_publishes"].as_u64().unwrap() <= 64, "{j}");
}
