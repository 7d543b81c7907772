//! Durability: the real broker binary with its embedded store, killed with SIGKILL,
//! restarted, its files cut and flipped. Our engine is the client.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::{fresh_dir, Broker};
use sluice_perf::client::{data_message, Client, LinkOptions, WAIT};
use sluice_proto::codec::{Fields, Symbol, Value};
use sluice_proto::engine::LinkId;
use sluice_proto::types::{DeliveryState, RawMessage};
use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::time::Duration;

fn env<'a>(dir: &'a str, extra: &[(&'a str, &'a str)]) -> Vec<(&'a str, &'a str)> {
    let mut v = vec![("SLUICE_DATA_DIR", dir), ("SLUICE_DURABILITY", "fsync")];
    v.extend_from_slice(extra);
    v
}

fn body(d: &sluice_proto::engine::Delivery) -> Vec<u8> {
    RawMessage::parse(&d.payload).unwrap().data().unwrap().unwrap()
}

/// Everything a receiver gets until `quiet` passes with nothing new.
fn drain_all(c: &mut Client, r: LinkId, quiet: Duration, settle: bool) -> Vec<Vec<u8>> {
    let mut got = Vec::new();
    while let Ok(d) = c.receive(r, quiet) {
        if settle && !d.settled {
            c.settle(r, d.delivery_id, DeliveryState::Accepted);
        }
        got.push(body(&d));
        if c.engine().link_credit(r) < 100 {
            c.engine().grant_credit(r, 1000, false).unwrap();
        }
    }
    got
}

fn start_props(start: &str) -> LinkOptions {
    LinkOptions {
        properties: Some(Fields(vec![(Symbol::new("x-opt-kubemq-start"), Value::string(start))])),
        ..Default::default()
    }
}

/// Publish unsettled to a queue and an events-store channel from a thread, recording
/// every id that came back `accepted`, until the broker is killed under it.
fn publish_until_killed(addr: String) -> std::thread::JoinHandle<(HashSet<u32>, HashSet<u32>)> {
    std::thread::spawn(move || {
        let mut accepted_q = HashSet::new();
        let mut accepted_s = HashSet::new();
        let Ok(mut c) = Client::connect(addr.as_str(), "crash-publisher") else { return (accepted_q, accepted_s) };
        let run = || -> std::io::Result<()> { Ok(()) };
        let _ = run();
        let Ok(ch) = c.begin() else { return (accepted_q, accepted_s) };
        let (Ok(q), Ok(s)) = (
            c.attach_sender(ch, "q", Some("queues/crash"), &LinkOptions::default()),
            c.attach_sender(ch, "s", Some("events-store/crash"), &LinkOptions::default()),
        ) else {
            return (accepted_q, accepted_s);
        };
        let mut pending: Vec<(LinkId, u32, u32)> = Vec::new();
        for i in 0u32.. {
            for (link, _set) in [(q, 0), (s, 1)] {
                if c.engine().link_credit(link) == 0 {
                    continue;
                }
                match c.send(link, data_message(&i.to_be_bytes()), false) {
                    Ok(id) => pending.push((link, id, i)),
                    Err(_) => return (accepted_q, accepted_s),
                }
            }
            if c.pump(Duration::from_millis(1)).is_err() {
                return (accepted_q, accepted_s);
            }
            for e in c.take_events() {
                if let sluice_proto::engine::Event::Disposition {
                    link,
                    delivery_id,
                    state: Some(DeliveryState::Accepted),
                    ..
                } = e
                {
                    if let Some(pos) = pending.iter().position(|(l, d, _)| *l == link && *d == delivery_id) {
                        let (l, _, n) = pending.swap_remove(pos);
                        if l == q {
                            accepted_q.insert(n);
                        } else {
                            accepted_s.insert(n);
                        }
                    }
                }
                if matches!(e, sluice_proto::engine::Event::Closed { .. }) {
                    return (accepted_q, accepted_s);
                }
            }
        }
        (accepted_q, accepted_s)
    })
}

/// One kill -9 round: publish under load, SIGKILL at a pseudo-random moment,
/// restart, and check that every accepted id is there.
fn crash_round(seed: u64) {
    let dir = fresh_dir("crash");
    let mut b = Broker::start(&env(&dir, &[]));
    let publisher = publish_until_killed(b.addr());
    std::thread::sleep(Duration::from_millis(300 + seed % 700));
    b.kill9();
    let (acc_q, acc_s) = publisher.join().unwrap();
    assert!(!acc_q.is_empty() && !acc_s.is_empty(), "nothing was accepted before the kill");
    let b = Broker::start(&env(&dir, &[]));
    let mut c = Client::connect(b.addr(), "reader").unwrap();
    let ch = c.begin().unwrap();
    let r = c.attach_receiver(ch, "rq", Some("queues/crash"), &LinkOptions::default()).unwrap();
    c.engine().grant_credit(r, 1000, false).unwrap();
    let got: HashSet<u32> = drain_all(&mut c, r, Duration::from_millis(1500), true)
        .iter()
        .map(|b| u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
        .collect();
    let missing: Vec<_> = acc_q.difference(&got).collect();
    assert!(
        missing.is_empty(),
        "queue: {} accepted ids missing after kill -9, e.g. {:?}",
        missing.len(),
        &missing[..missing.len().min(5)]
    );
    // hold: a replay larger than the window waits for credit instead of stalling.
    let mut replay = LinkOptions { presettled: true, ..start_props("first") };
    if let Some(f) = replay.properties.as_mut() {
        f.0.push((Symbol::new("x-opt-sluice-stall"), Value::string("hold")));
    }
    let r = c.attach_receiver(ch, "rs", Some("events-store/crash"), &replay).unwrap();
    c.engine().grant_credit(r, 1000, false).unwrap();
    let got: HashSet<u32> = drain_all(&mut c, r, Duration::from_millis(1500), false)
        .iter()
        .map(|b| u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
        .collect();
    let missing: Vec<_> = acc_s.difference(&got).collect();
    assert!(missing.is_empty(), "events-store: {} accepted ids missing after kill -9", missing.len());
    eprintln!(
        "kill -9 round {seed}: {} queue and {} events-store messages accepted, none missing",
        acc_q.len(),
        acc_s.len()
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn kill_minus_nine_under_load_loses_no_accepted_message() {
    // The loop script (perf/crash-loop.sh) runs this 20 times; CI runs it 3 times.
    let rounds: u64 = std::env::var("SLUICE_CRASH_ROUNDS").ok().and_then(|v| v.parse().ok()).unwrap_or(3);
    for round in 0..rounds {
        crash_round(round.wrapping_mul(2654435761) ^ std::process::id() as u64);
    }
}

fn segments(dir: &str, log: &str) -> Vec<PathBuf> {
    let mut v = Vec::new();
    for shard in std::fs::read_dir(dir).unwrap().flatten() {
        let p = shard.path().join(log);
        if let Ok(rd) = std::fs::read_dir(&p) {
            for f in rd.flatten() {
                v.push(f.path());
            }
        }
    }
    v.sort();
    v
}

/// Publish `n` unsettled messages to `addr` and wait for each `accepted`.
fn publish(b: &Broker, addr: &str, n: u32) {
    publish_range(b, addr, 0..n)
}

/// Publish unsettled, bodies the big-endian numbers of `range`, each `accepted`.
fn publish_range(b: &Broker, addr: &str, range: std::ops::Range<u32>) {
    let mut c = Client::connect(b.addr(), "p").unwrap();
    let ch = c.begin().unwrap();
    let s = c.attach_sender(ch, "s", Some(addr), &LinkOptions::default()).unwrap();
    c.wait_credit(s).unwrap();
    for i in range {
        let id = c.send(s, data_message(&i.to_be_bytes()), false).unwrap();
        assert_eq!(c.wait_outcome(s, id).unwrap(), Some(DeliveryState::Accepted));
    }
}

/// Publish one message, and wait for `accepted`, to another channel of the same
/// pattern homed on the same shard as `addr` ("<pattern>/<name>", two shards): its
/// commit comes after every record that shard's log took before it, so once it is
/// accepted, what the test did before (settlements, cursors) is on disk.
fn commit_barrier(b: &Broker, addr: &str) {
    use sluice::broker::address::ChannelKey;
    use sluice::config::Pattern;
    let (prefix, name) = addr.split_once('/').unwrap();
    let pattern = match prefix {
        "queues" => Pattern::Queues,
        "events-store" => Pattern::EventsStore,
        other => panic!("no log for {other}"),
    };
    let home = ChannelKey::new(pattern, name).home(2);
    let other =
        (0..).map(|i| format!("{name}-barrier-{i}")).find(|n| ChannelKey::new(pattern, n).home(2) == home).unwrap();
    publish(b, &format!("{prefix}/{other}"), 1);
}

fn read_queue(b: &Broker, addr: &str) -> Vec<u32> {
    let mut c = Client::connect(b.addr(), "r").unwrap();
    let ch = c.begin().unwrap();
    let r = c.attach_receiver(ch, "r", Some(addr), &LinkOptions::default()).unwrap();
    c.engine().grant_credit(r, 1000, false).unwrap();
    drain_all(&mut c, r, Duration::from_millis(800), true)
        .iter()
        .map(|b| u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
        .collect()
}

/// The data region end of a segment (before zero padding).
fn data_end(p: &Path) -> usize {
    let buf = std::fs::read(p).unwrap();
    buf.iter().rposition(|b| *b != 0).map_or(0, |i| i + 1)
}

#[test]
fn a_torn_tail_is_cut_and_every_complete_record_kept() {
    let dir = fresh_dir("torn");
    let mut b = Broker::start(&env(&dir, &[("SLUICE_SHARDS", "1")]));
    publish(&b, "queues/torn", 10);
    b.kill9();
    let seg = segments(&dir, "queues").pop().unwrap();
    // Cut the last publish record in half (the last record is the commit record after
    // it): its last 5 bytes and what follows are gone.
    let (at, rtype, _) = records_of(&seg).into_iter().rev().find(|r| r.1 == QUEUE_PUBLISH).unwrap();
    assert_eq!(rtype, QUEUE_PUBLISH);
    let end = records_of(&seg).into_iter().find(|r| r.0 > at).map_or(data_end(&seg), |r| r.0);
    let f = std::fs::OpenOptions::new().write(true).open(&seg).unwrap();
    f.set_len((end - 5) as u64).unwrap();
    drop(f);
    let b = Broker::start(&env(&dir, &[("SLUICE_SHARDS", "1")]));
    // The last record was the 10th publish; the 9 before it are complete.
    let got = read_queue(&b, "queues/torn");
    assert_eq!(got, (0..9).collect::<Vec<u32>>());
}

/// Record types of the store's format (src/store/mod.rs, `rtype`).
const QUEUE_PUBLISH: u8 = 1;
const COMMIT: u8 = 8;

/// The records of a segment: (offset, type, body), up to the first that does not
/// parse (the zero padding).
fn records_of(p: &Path) -> Vec<(usize, u8, Vec<u8>)> {
    let buf = std::fs::read(p).unwrap();
    let mut at = 16;
    let mut v = Vec::new();
    while buf.get(at) == Some(&0xA5) {
        let len = u32::from_be_bytes(buf[at + 2..at + 6].try_into().unwrap()) as usize;
        v.push((at, buf[at + 1], buf[at + 10..at + 10 + len].to_vec()));
        at += 10 + len;
    }
    v
}

/// A disk that persists the blocks of one write in any order left a hole in the last
/// commit (its later records and its commit record reached the disk, an earlier
/// block did not): nothing of that commit was acknowledged, so the next start cuts
/// the log at the hole and serves everything committed before it. Before (format 1),
/// valid records after the damage made it corruption: the broker refused to start.
#[test]
fn a_hole_in_the_last_commit_is_cut_and_the_broker_starts() {
    let dir = fresh_dir("hole");
    let one = env(&dir, &[("SLUICE_SHARDS", "1")]);
    let mut b = Broker::start(&one);
    publish_range(&b, "queues/hole", 0..5);
    publish_pipelined(&b, "queues/hole-burst", 300);
    b.kill9();
    let seg = segments(&dir, "queues").pop().unwrap();
    let records = records_of(&seg);
    let (_, rtype, body) = records.last().unwrap().clone();
    assert_eq!(rtype, COMMIT, "every commit ends in a commit record");
    let start = u64::from_be_bytes(body[..].try_into().unwrap()) as usize;
    let first = records.iter().find(|r| r.0 >= start).unwrap();
    assert_ne!(first.1, COMMIT, "the last commit holds records");
    // Messages of the burst before the last commit.
    let kept = records.iter().filter(|r| r.0 < start && r.1 == QUEUE_PUBLISH).count() - 5;
    assert!(kept < 300);
    let mut buf = std::fs::read(&seg).unwrap();
    buf[first.0 + 12] ^= 0xFF;
    std::fs::write(&seg, &buf).unwrap();
    let b = Broker::start(&one);
    assert_eq!(read_queue(&b, "queues/hole"), (0..5).collect::<Vec<u32>>());
    assert_eq!(read_queue(&b, "queues/hole-burst"), (0..kept as u32).collect::<Vec<u32>>());
}

/// Segments with nothing live at a restart are tracked like the others and deleted
/// oldest first. Before, recovery left them out of its count: such a segment stayed on
/// disk for good (one more at every restart), and once the later segment holding the
/// acks of its messages was deleted, the next restart brought those accepted messages
/// back (3 here).
#[test]
fn messages_accepted_before_a_restart_stay_gone_after_the_next_ones() {
    let dir = fresh_dir("untracked");
    let one = env(&dir, &[("SLUICE_SHARDS", "1")]);
    // The first segment: more messages than the broker moves to free an old segment (10,000),
    // so it pins every later segment until run 4.
    let mut b = Broker::start(&one);
    publish_pipelined(&b, "queues/pin", 10_001);
    b.kill9();
    // The second: three messages, accepted in the next run.
    let mut b = Broker::start(&one);
    publish(&b, "queues/acked", 3);
    b.kill9();
    // The third: their acks, and a message that stays until run 4 (its publish is
    // committed after the acks). Nothing is live in the second now.
    let mut b = Broker::start(&one);
    assert_eq!(read_queue(&b, "queues/acked"), vec![0, 1, 2]);
    publish(&b, "queues/later", 1);
    b.kill9();
    // Run 4: the others are accepted; nothing is live in the first three any more.
    let mut b = Broker::start(&one);
    assert_eq!(read_queue(&b, "queues/pin").len(), 10_001);
    assert_eq!(read_queue(&b, "queues/later"), vec![0]);
    publish(&b, "queues/barrier", 1);
    b.kill9();
    let left = segments(&dir, "queues");
    let b = Broker::start(&one);
    assert_eq!(read_queue(&b, "queues/acked"), Vec::<u32>::new(), "accepted messages came back ({left:?})");
    assert!(left.len() <= 2, "the first three segments are still there: {left:?}");
}

/// A segment file created by a commit that a crash cut before its first block reached
/// the disk (empty, or zeros) holds nothing: the next start deletes it and goes on,
/// also when later segments follow it. Before, it was refused as a segment without a
/// header in the middle of the log.
#[test]
fn a_segment_left_empty_by_a_crash_does_not_stop_the_next_start() {
    let dir = fresh_dir("emptyseg");
    let one = env(&dir, &[("SLUICE_SHARDS", "1")]);
    let mut b = Broker::start(&one);
    publish_range(&b, "queues/empty-seg", 0..5);
    b.kill9();
    // What the crash left: the next segment created, nothing in it.
    let first = segments(&dir, "queues").pop().unwrap();
    let empty = first.with_file_name("00000000000000000002.log");
    std::fs::write(&empty, b"").unwrap();
    let zeros = first.with_file_name("00000000000000000003.log");
    std::fs::write(&zeros, vec![0u8; 4096]).unwrap();
    let mut b = Broker::start(&one);
    publish_range(&b, "queues/empty-seg", 5..10);
    b.kill9();
    assert!(!empty.exists() && !zeros.exists(), "{:?}", segments(&dir, "queues"));
    let b = Broker::start(&one);
    assert_eq!(read_queue(&b, "queues/empty-seg"), (0..10).collect::<Vec<u32>>());
}

#[test]
fn a_flipped_bit_mid_log_refuses_to_start_naming_file_and_offset() {
    let dir = fresh_dir("flip");
    let mut b = Broker::start(&env(&dir, &[("SLUICE_SHARDS", "1")]));
    publish(&b, "queues/flip", 20);
    b.kill9();
    let seg = segments(&dir, "queues").pop().unwrap();
    let mut buf = std::fs::read(&seg).unwrap();
    let mid = data_end(&seg) / 2;
    buf[mid] ^= 0x10;
    std::fs::write(&seg, &buf).unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_sluice"))
        .env("SLUICE_DATA_DIR", &dir)
        .env("SLUICE_SHARDS", "1")
        .env("SLUICE_DURABILITY", "fsync")
        .env("CONNECTORS_AMQP10_PORT", common::free_port().to_string())
        .env("SLUICE_ADMIN_ADDR", "127.0.0.1:0")
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("corrupt record") && err.contains(&seg.display().to_string()) && err.contains("offset"),
        "{err}"
    );
    // `store verify` reports it too; `store repair` cuts the log there, then it starts.
    let verify = std::process::Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(["store", "verify", "--data-dir", &dir, "--shards", "1"])
        .output()
        .unwrap();
    assert_eq!(verify.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&verify.stdout).contains("corrupt record"));
    let repair = std::process::Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(["store", "repair", "--data-dir", &dir, "--shards", "1"])
        .output()
        .unwrap();
    assert_eq!(repair.status.code(), Some(0), "{}", String::from_utf8_lossy(&repair.stdout));
    let b = Broker::start(&env(&dir, &[("SLUICE_SHARDS", "1")]));
    let got = read_queue(&b, "queues/flip");
    assert!(!got.is_empty() && got.len() < 20 && got.iter().enumerate().all(|(i, n)| *n == i as u32), "{got:?}");
}

#[test]
fn acked_messages_stay_gone_and_unsettled_ones_come_back_after_restart() {
    let dir = fresh_dir("acks");
    let mut b = Broker::start(&env(&dir, &[]));
    publish(&b, "queues/acks", 10);
    {
        let mut c = Client::connect(b.addr(), "c").unwrap();
        let ch = c.begin().unwrap();
        let r = c.attach_receiver(ch, "r", Some("queues/acks"), &LinkOptions::default()).unwrap();
        c.engine().grant_credit(r, 6, false).unwrap();
        for i in 0..6 {
            let d = c.receive(r, WAIT).unwrap();
            // Accept four, reject one, keep one unsettled.
            match i {
                0..=3 => c.settle(r, d.delivery_id, DeliveryState::Accepted),
                4 => c.settle(r, d.delivery_id, DeliveryState::Rejected(Box::default())),
                _ => {}
            }
        }
        c.pump(Duration::from_millis(300)).unwrap();
    }
    commit_barrier(&b, "queues/acks");
    b.kill9();
    let b = Broker::start(&env(&dir, &[]));
    let mut c = Client::connect(b.addr(), "c2").unwrap();
    let ch = c.begin().unwrap();
    let r = c.attach_receiver(ch, "r", Some("queues/acks"), &LinkOptions::default()).unwrap();
    c.engine().grant_credit(r, 100, false).unwrap();
    let mut got = Vec::new();
    while let Ok(d) = c.receive(r, Duration::from_millis(800)) {
        let n = u32::from_be_bytes(body(&d)[..4].try_into().unwrap());
        let h = RawMessage::parse(&d.payload).unwrap().header().unwrap().unwrap();
        got.push((n, h.delivery_count.unwrap_or(0)));
        c.settle(r, d.delivery_id, DeliveryState::Accepted);
    }
    got.sort();
    // 5 was delivered once before the crash: its receive count survived.
    assert_eq!(got, vec![(5, 1), (6, 0), (7, 0), (8, 0), (9, 0)]);
}

#[test]
fn durable_subscriptions_and_start_positions_survive_a_restart() {
    let dir = fresh_dir("durable");
    let mut b = Broker::start(&env(&dir, &[]));
    publish(&b, "events-store/dur", 10);
    let durable = LinkOptions { expiry_policy: Some("never"), ..start_props("first") };
    // Pre-settled (a receiver asking unsettled in lossless mode must settle).
    let mut lossless = LinkOptions { presettled: true, ..durable.clone() };
    if let Some(f) = lossless.properties.as_mut() {
        f.0.push((Symbol::new("x-opt-sluice-stall"), Value::string("hold")));
    }
    for (link, opts) in [("deliver-first", &durable), ("lossless", &lossless)] {
        let mut c = Client::connect(b.addr(), "dur-container").unwrap();
        let ch = c.begin().unwrap();
        let r = c.attach_receiver(ch, link, Some("events-store/dur"), opts).unwrap();
        c.engine().grant_credit(r, 4, false).unwrap();
        for want in 0..4u32 {
            assert_eq!(body(&c.receive(r, WAIT).unwrap()), want.to_be_bytes());
        }
        c.engine().detach(r, None);
        c.pump(Duration::from_millis(300)).unwrap();
    }
    commit_barrier(&b, "events-store/dur");
    b.kill9();
    let b = Broker::start(&env(&dir, &[]));
    publish(&b, "events-store/dur", 1); // sequence 11, body 0
    let mut c = Client::connect(b.addr(), "dur-container").unwrap();
    let ch = c.begin().unwrap();
    // Deliver-first: a plain detach gives back what was in the window but never
    // sent (only a credit stall loses the window), so it resumes after the four it
    // was sent, across the restart.
    let r = c.attach_receiver(ch, "deliver-first", Some("events-store/dur"), &durable).unwrap();
    c.engine().grant_credit(r, 100, false).unwrap();
    let got: Vec<u32> = drain_all(&mut c, r, Duration::from_millis(800), false)
        .iter()
        .map(|b| u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
        .collect();
    assert_eq!(got, vec![4, 5, 6, 7, 8, 9, 0]);
    // Lossless: it resumes right after the four it was sent, across the restart.
    let r = c.attach_receiver(ch, "lossless", Some("events-store/dur"), &lossless).unwrap();
    c.engine().grant_credit(r, 100, false).unwrap();
    let got: Vec<u32> = drain_all(&mut c, r, Duration::from_millis(800), false)
        .iter()
        .map(|b| u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
        .collect();
    assert_eq!(got, vec![4, 5, 6, 7, 8, 9, 0]);
    // Sequence numbers survive: sequence:8 starts at the 8th event, and the new
    // event continued the sequence as 11.
    let r2 = c.attach_receiver(ch, "seq", Some("events-store/dur"), &start_props("sequence:8")).unwrap();
    c.engine().grant_credit(r2, 100, false).unwrap();
    let got: Vec<u32> = drain_all(&mut c, r2, Duration::from_millis(800), false)
        .iter()
        .map(|b| u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
        .collect();
    assert_eq!(got, vec![7, 8, 9, 0]);
    let r3 = c.attach_receiver(ch, "last", Some("events-store/dur"), &start_props("sequence:11")).unwrap();
    c.engine().grant_credit(r3, 10, false).unwrap();
    assert_eq!(body(&c.receive(r3, WAIT).unwrap()), 0u32.to_be_bytes());
    // A time start position works against the persisted timestamps.
    let r4 = c.attach_receiver(ch, "time", Some("events-store/dur"), &start_props("time-delta:3600")).unwrap();
    c.engine().grant_credit(r4, 100, false).unwrap();
    assert_eq!(drain_all(&mut c, r4, Duration::from_millis(800), false).len(), 11);
}

fn numbers(bodies: &[Vec<u8>]) -> Vec<u32> {
    bodies.iter().map(|b| u32::from_be_bytes([b[0], b[1], b[2], b[3]])).collect()
}

fn durable_in_group(group: &str) -> LinkOptions {
    let mut o = LinkOptions { expiry_policy: Some("never"), ..start_props("first") };
    if let Some(f) = o.properties.as_mut() {
        f.0.push((Symbol::new("x-opt-kubemq-group"), Value::string(group)));
    }
    o
}

/// Members of a durable consumer group share the group's cursor. A member that
/// leaves and comes back is admitted at once (before: its own identity stayed taken
/// after it left, and its re-attach waited 1 s and was refused "durable subscription
/// in use"), and once every member has left, any member resumes the group where it
/// stopped, across a restart (before: the cursor was kept under the first member's
/// identity only, so the second member started over from its start position).
#[test]
fn a_durable_consumer_group_shares_one_cursor_whichever_member_comes_back() {
    let dir = fresh_dir("durable-group");
    let mut b = Broker::start(&env(&dir, &[]));
    let addr = "events-store/dgroup";
    publish_range(&b, addr, 0..4);
    let opts = durable_in_group("g");
    let mut c = Client::connect(b.addr(), "group-container").unwrap();
    let ch = c.begin().unwrap();
    let a = c.attach_receiver(ch, "member-a", Some(addr), &opts).unwrap();
    let m = c.attach_receiver(ch, "member-b", Some(addr), &opts).unwrap();
    c.engine().grant_credit(a, 100, false).unwrap();
    c.engine().grant_credit(m, 100, false).unwrap();
    let mut got = numbers(&drain_all(&mut c, a, Duration::from_millis(500), false));
    got.extend(numbers(&drain_all(&mut c, m, Duration::from_millis(300), false)));
    got.sort_unstable();
    assert_eq!(got, vec![0, 1, 2, 3], "the group got the stream once");
    c.engine().detach(m, None);
    c.pump(Duration::from_millis(200)).unwrap();
    let m = c.attach_receiver(ch, "member-b", Some(addr), &opts).expect("a member that left comes back at once");
    c.engine().detach(a, None);
    c.engine().detach(m, None);
    c.pump(Duration::from_millis(300)).unwrap();
    publish_range(&b, addr, 4..7);
    std::thread::sleep(Duration::from_millis(200));
    b.kill9();
    let b = Broker::start(&env(&dir, &[]));
    let mut c = Client::connect(b.addr(), "group-container").unwrap();
    let ch = c.begin().unwrap();
    let m = c.attach_receiver(ch, "member-b", Some(addr), &opts).unwrap();
    c.engine().grant_credit(m, 100, false).unwrap();
    assert_eq!(numbers(&drain_all(&mut c, m, Duration::from_millis(800), false)), vec![4, 5, 6]);
}

/// A consumer group's name is at most 255 bytes (it names a durable cursor, stored
/// with a 16-bit length): a longer one is refused at link scope, and a durable group
/// with the longest name (multi-byte characters) resumes across a restart. Before, a
/// group of 21,846 x "\u{20ac}" (65,538 bytes) was accepted, its cursor record's length
/// wrapped to 2 bytes cutting a character in half, and the next start found the events
/// log corrupt.
#[test]
fn a_consumer_group_name_past_255_bytes_is_refused_and_the_longest_survives_a_restart() {
    let dir = fresh_dir("group-name");
    let mut b = Broker::start(&env(&dir, &[]));
    let addr = "events-store/gname";
    let mut c = Client::connect(b.addr(), "gname-container").unwrap();
    let ch = c.begin().unwrap();
    for group in ["\u{20ac}".repeat(21_846), "g".repeat(256)] {
        let err = c.attach_receiver(ch, "too-long", Some(addr), &durable_in_group(&group)).expect_err("a long group");
        assert!(err.to_string().contains("amqp:invalid-field"), "{err}");
    }
    let longest = "\u{20ac}".repeat(85);
    assert_eq!(longest.len(), 255);
    let opts = durable_in_group(&longest);
    publish_range(&b, addr, 0..2);
    let r = c.attach_receiver(ch, "member", Some(addr), &opts).expect("the connection goes on");
    c.engine().grant_credit(r, 10, false).unwrap();
    assert_eq!(numbers(&drain_all(&mut c, r, Duration::from_millis(500), false)), vec![0, 1]);
    c.engine().detach(r, None);
    c.pump(Duration::from_millis(300)).unwrap();
    publish_range(&b, addr, 2..4);
    commit_barrier(&b, addr);
    b.kill9();
    let b = Broker::start(&env(&dir, &[]));
    let mut c = Client::connect(b.addr(), "gname-container").unwrap();
    let ch = c.begin().unwrap();
    let r = c.attach_receiver(ch, "member", Some(addr), &opts).unwrap();
    c.engine().grant_credit(r, 10, false).unwrap();
    assert_eq!(numbers(&drain_all(&mut c, r, Duration::from_millis(800), false)), vec![2, 3]);
}

/// A shard keeps at most `SLUICE_MAX_DURABLE_SUBSCRIPTIONS` durable subscriptions,
/// attached or not (each costs a cursor in memory and in every new segment's
/// snapshot, for as long as the broker runs): a new identity past it is refused with
/// `amqp:resource-limit-exceeded`, the connection goes on, and the kept ones resume.
#[test]
fn durable_subscriptions_past_the_limit_are_refused_and_kept_ones_resume() {
    let dir = fresh_dir("durable-limit");
    let b = Broker::start(&env(&dir, &[("SLUICE_SHARDS", "1"), ("SLUICE_MAX_DURABLE_SUBSCRIPTIONS", "3")]));
    let durable = LinkOptions { expiry_policy: Some("never"), ..start_props("first") };
    let mut c = Client::connect(b.addr(), "limit-container").unwrap();
    let ch = c.begin().unwrap();
    for (name, chan) in [("d1", "events-store/dl-a"), ("d2", "events-store/dl-a"), ("d3", "events-store/dl-b")] {
        let r = c.attach_receiver(ch, name, Some(chan), &durable).unwrap();
        c.engine().detach(r, None);
    }
    c.pump(Duration::from_millis(300)).unwrap();
    for (name, chan) in [("d4", "events-store/dl-a"), ("d5", "events-store/dl-c")] {
        let err = c.attach_receiver(ch, name, Some(chan), &durable).expect_err("a fourth durable subscription");
        assert!(err.to_string().contains("amqp:resource-limit-exceeded"), "{err}");
    }
    // Not durable: no limit.
    let plain = c.attach_receiver(ch, "plain", Some("events-store/dl-a"), &start_props("first")).unwrap();
    c.engine().detach(plain, None);
    publish_range(&b, "events-store/dl-a", 0..2);
    let r = c.attach_receiver(ch, "d1", Some("events-store/dl-a"), &durable).expect("a kept subscription resumes");
    c.engine().grant_credit(r, 10, false).unwrap();
    assert_eq!(numbers(&drain_all(&mut c, r, Duration::from_millis(500), false)), vec![0, 1]);
}

/// A durable subscription that nobody attaches for
/// `SLUICE_DURABLE_SUBSCRIPTION_EXPIRY_SECONDS` is deleted, on disk too: a later attach
/// of the same identity is a new subscription (from its start position), also after a
/// restart, and its place under `SLUICE_MAX_DURABLE_SUBSCRIPTIONS` is free again. One
/// that stays attached longer than the period is kept and resumes. Before, durable
/// subscriptions were never deleted: identities that drift (a random container-id)
/// filled the shard's table for good.
#[test]
fn a_durable_subscription_left_unattached_past_its_expiry_is_deleted_on_disk_too() {
    let dir = fresh_dir("durable-expiry");
    let addr = "events-store/dexp";
    let mut b = Broker::start(&env(
        &dir,
        &[
            ("SLUICE_SHARDS", "1"),
            ("SLUICE_MAX_DURABLE_SUBSCRIPTIONS", "2"),
            ("SLUICE_DURABLE_SUBSCRIPTION_EXPIRY_SECONDS", "2"),
        ],
    ));
    publish_range(&b, addr, 0..2);
    let durable = LinkOptions { expiry_policy: Some("never"), ..start_props("first") };
    let mut c = Client::connect(b.addr(), "expiry-container").unwrap();
    let ch = c.begin().unwrap();
    let gone = c.attach_receiver(ch, "gone", Some(addr), &durable).unwrap();
    c.engine().grant_credit(gone, 2, false).unwrap();
    assert_eq!(numbers(&drain_all(&mut c, gone, Duration::from_millis(300), false)), vec![0, 1]);
    c.engine().detach(gone, None);
    let kept = c.attach_receiver(ch, "kept", Some(addr), &durable).unwrap();
    c.engine().grant_credit(kept, 2, false).unwrap();
    assert_eq!(numbers(&drain_all(&mut c, kept, Duration::from_millis(300), false)), vec![0, 1]);
    publish_range(&b, addr, 2..4);
    // The table is full: a third identity is refused.
    let err = c.attach_receiver(ch, "third", Some(addr), &durable).expect_err("a third durable subscription");
    assert!(err.to_string().contains("amqp:resource-limit-exceeded"), "{err}");
    // `gone` expires; `kept` stays attached meanwhile (and keeps the connection busy
    // enough to stay open).
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while b.metric("sluice_durable_subscriptions_expired_total") != Some(1.0) {
        assert!(std::time::Instant::now() < deadline, "never expired");
        c.pump(Duration::from_millis(200)).unwrap();
    }
    // Attached for longer than the period, `kept` was not deleted.
    c.pump(Duration::from_millis(2_500)).unwrap();
    assert_eq!(b.metric("sluice_durable_subscriptions_expired_total"), Some(1.0));
    assert_eq!(b.metric("sluice_durable_subscriptions"), Some(1.0));
    // `gone`'s place is free: a new identity fits under the limit of two.
    let third = c
        .attach_receiver(ch, "third", Some(addr), &LinkOptions { expiry_policy: Some("never"), ..start_props("last") })
        .expect("room for a new durable subscription once one expired");
    c.engine().detach(third, None);
    // `kept` resumes where it was.
    c.engine().detach(kept, None);
    c.pump(Duration::from_millis(300)).unwrap();
    let kept = c.attach_receiver(ch, "kept", Some(addr), &durable).unwrap();
    c.engine().grant_credit(kept, 100, false).unwrap();
    assert_eq!(numbers(&drain_all(&mut c, kept, Duration::from_millis(500), false)), vec![2, 3]);
    c.engine().detach(kept, None);
    c.pump(Duration::from_millis(300)).unwrap();
    // After a restart (with expiry off, so what follows is what the disk kept), `gone`
    // is a new subscription: from its start position, not from where it stopped.
    commit_barrier(&b, addr);
    b.kill9();
    let b = Broker::start(&env(
        &dir,
        &[
            ("SLUICE_SHARDS", "1"),
            ("SLUICE_MAX_DURABLE_SUBSCRIPTIONS", "3"),
            ("SLUICE_DURABLE_SUBSCRIPTION_EXPIRY_SECONDS", "0"),
        ],
    ));
    assert_eq!(b.metric("sluice_durable_subscriptions"), Some(2.0), "kept and third came back, gone did not");
    let mut c = Client::connect(b.addr(), "expiry-container").unwrap();
    let ch = c.begin().unwrap();
    let gone = c.attach_receiver(ch, "gone", Some(addr), &durable).unwrap();
    c.engine().grant_credit(gone, 100, false).unwrap();
    assert_eq!(numbers(&drain_all(&mut c, gone, Duration::from_millis(500), false)), vec![0, 1, 2, 3]);
    let kept = c.attach_receiver(ch, "kept", Some(addr), &durable).unwrap();
    c.engine().grant_credit(kept, 100, false).unwrap();
    assert_eq!(numbers(&drain_all(&mut c, kept, Duration::from_millis(500), false)), Vec::<u32>::new());
}

/// A tmpfs mounted on a fresh directory (this needs root, as CI and this project's
/// machines run); unmounted when the test ends, whatever happens.
struct Mount(String);

impl Mount {
    fn tmpfs(tag: &str, size: &str) -> Mount {
        let dir = fresh_dir(tag);
        let opts = format!("size={size}");
        let st =
            std::process::Command::new("mount").args(["-t", "tmpfs", "-o", &opts, "tmpfs", &dir]).status().unwrap();
        assert!(st.success(), "mounting a tmpfs on {dir} failed");
        Mount(dir)
    }

    /// Space returns (or goes): the same filesystem, a new size.
    fn resize(&self, size: &str) {
        let opts = format!("remount,size={size}");
        let st = std::process::Command::new("mount").args(["-o", &opts, &self.0]).status().unwrap();
        assert!(st.success(), "resizing the tmpfs on {} failed", self.0);
    }
}

impl Drop for Mount {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount").arg("-l").arg(&self.0).status();
    }
}

#[test]
fn a_full_disk_rejects_instead_of_accepting_and_recovers_when_space_returns() {
    // A 2 MiB tmpfs as the data directory.
    let mount = Mount::tmpfs("full", "2m");
    let data = format!("{}/data", mount.0);
    let b = Broker::start(&env(&data, &[("SLUICE_SHARDS", "1")]));
    let mut c = Client::connect(b.addr(), "full").unwrap();
    let ch = c.begin().unwrap();
    let s = c.attach_sender(ch, "s", Some("queues/full"), &LinkOptions::default()).unwrap();
    c.wait_credit(s).unwrap();
    let big = vec![7u8; 100_000];
    let mut accepted = 0u32;
    let mut rejected = None;
    for _ in 0..100 {
        let id = c.send(s, data_message(&big), false).unwrap();
        match c.wait_outcome(s, id).unwrap() {
            Some(DeliveryState::Accepted) => accepted += 1,
            Some(DeliveryState::Rejected(r)) => {
                rejected = r.error;
                break;
            }
            other => panic!("{other:?}"),
        }
    }
    let err = rejected.expect("the disk never filled up");
    assert_eq!(err.condition, "amqp:resource-limit-exceeded");
    assert!(accepted > 5 && accepted < 25, "{accepted}");
    assert_eq!(b.metric("sluice_store_healthy"), Some(0.0));
    // Not a byte left: the next commit, on a fresh segment, cannot write anything. It
    // leaves no file behind (before, the segment was cut back to a header that was
    // never written, 16 zero bytes in the middle of the log, which a later start
    // refused).
    let filler = format!("{}/filler", mount.0);
    {
        use std::io::Write;
        let mut f = std::fs::File::create(&filler).unwrap();
        let block = vec![1u8; 4096];
        while f.write_all(&block).is_ok() {}
        let _ = f.write_all(&[1u8]);
        while f.write_all(&[1u8]).is_ok() {}
    }
    assert!(!publish_one(&mut c, s, &big), "accepted on a full disk");
    for seg in segments(&data, "queues") {
        let head = std::fs::read(&seg).unwrap();
        assert!(head.starts_with(b"SLUICE01"), "{} has no header ({} bytes)", seg.display(), head.len());
    }
    std::fs::remove_file(&filler).unwrap();
    // Space returns: the next publish is stored and accepted again.
    mount.resize("64m");
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let id = c.send(s, data_message(b"after"), false).unwrap();
        if c.wait_outcome(s, id).unwrap() == Some(DeliveryState::Accepted) {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "never recovered");
        std::thread::sleep(Duration::from_millis(300));
    }
    assert_eq!(b.metric("sluice_store_healthy"), Some(1.0));
    // Everything accepted is there after a crash (and a rejected publish may be too).
    drop(c);
    let mut b = b;
    b.kill9();
    let b = Broker::start(&env(&data, &[("SLUICE_SHARDS", "1")]));
    let mut c = Client::connect(b.addr(), "full-after").unwrap();
    let ch = c.begin().unwrap();
    let r = c.attach_receiver(ch, "r", Some("queues/full"), &LinkOptions::default()).unwrap();
    c.engine().grant_credit(r, 1000, false).unwrap();
    let got = drain_all(&mut c, r, Duration::from_millis(800), true);
    assert!(got.iter().filter(|b| b.len() == big.len()).count() >= accepted as usize, "{} of {accepted}", got.len());
    assert!(got.iter().any(|b| b == b"after"), "the publish accepted after space returned is gone");
}

/// One unsettled publish: Some(true) accepted, Some(false) rejected.
fn publish_one(c: &mut Client, s: LinkId, body: &[u8]) -> bool {
    let id = c.send(s, data_message(body), false).unwrap();
    match c.wait_outcome(s, id).unwrap() {
        Some(DeliveryState::Accepted) => true,
        Some(DeliveryState::Rejected(_)) => false,
        other => panic!("{other:?}"),
    }
}

/// Events whose write failed (a full disk) are rejected and cut from the log, but
/// their sequence numbers were taken: after a restart the channel's log has a gap.
/// Every reader steps over it: `first` replays what was accepted, `last` starts at
/// the last event, `new-only` gets the next ones, and a durable subscription resumes
/// exactly where it stopped. Before, readers located events by `seq - first`, so
/// past the gap `last`, `new-only` and the durable subscription got nothing at all.
#[test]
fn an_events_store_gap_left_by_a_failed_write_is_stepped_over_after_a_restart() {
    let mount = Mount::tmpfs("gap", "2m");
    let data = format!("{}/data", mount.0);
    let mut b = Broker::start(&env(&data, &[("SLUICE_SHARDS", "1")]));
    let mut c = Client::connect(b.addr(), "gap").unwrap();
    let ch = c.begin().unwrap();
    let s = c.attach_sender(ch, "s", Some("events-store/gap"), &LinkOptions::default()).unwrap();
    c.wait_credit(s).unwrap();
    let (mut accepted, mut rejected) = (Vec::new(), Vec::new());
    for body in [b"a0", b"a1", b"a2"] {
        assert!(publish_one(&mut c, s, body));
        accepted.push(body.to_vec());
    }
    // 100 KB events until the disk is full.
    for i in 0..100u32 {
        let mut big = vec![7u8; 100_000];
        big[..4].copy_from_slice(&i.to_be_bytes());
        if publish_one(&mut c, s, &big) {
            accepted.push(big);
        } else {
            rejected.push(big);
            break;
        }
    }
    assert!(!rejected.is_empty(), "the disk never filled up");
    mount.resize("64m");
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while !publish_one(&mut c, s, b"after") {
        rejected.push(b"after".to_vec());
        assert!(std::time::Instant::now() < deadline, "never recovered");
        std::thread::sleep(Duration::from_millis(300));
    }
    accepted.push(b"after".to_vec());
    for body in [b"b0", b"b1"] {
        assert!(publish_one(&mut c, s, body));
        accepted.push(body.to_vec());
    }
    // A durable subscription reads everything there is, then detaches.
    let durable = LinkOptions { expiry_policy: Some("never"), ..start_props("first") };
    let mut d = Client::connect(b.addr(), "gap-durable").unwrap();
    let dch = d.begin().unwrap();
    let r = d.attach_receiver(dch, "dur", Some("events-store/gap"), &durable).unwrap();
    d.engine().grant_credit(r, 1000, false).unwrap();
    let live = drain_all(&mut d, r, Duration::from_millis(800), false);
    assert!(live.last().is_some_and(|b| b == b"b1"), "the durable subscription did not read to the end");
    d.engine().detach(r, None);
    d.pump(Duration::from_millis(300)).unwrap();
    drop((c, d));
    commit_barrier(&b, "events-store/gap");
    b.kill9();

    let b = Broker::start(&env(&data, &[("SLUICE_SHARDS", "1")]));
    let mut c = Client::connect(b.addr(), "gap").unwrap();
    let ch = c.begin().unwrap();
    // `first`: every accepted event, in order; anything else is a rejected one (a
    // rejected publish may survive, as the README says).
    let r = c.attach_receiver(ch, "first", Some("events-store/gap"), &start_props("first")).unwrap();
    c.engine().grant_credit(r, 1000, false).unwrap();
    let replay = drain_all(&mut c, r, Duration::from_millis(800), false);
    let (kept, extra): (Vec<_>, Vec<_>) = replay.into_iter().partition(|b| accepted.contains(b));
    assert_eq!(kept.len(), accepted.len(), "accepted events missing after the restart");
    assert!(kept == accepted, "accepted events out of order after the restart");
    assert!(extra.iter().all(|e| rejected.contains(e)), "an event nobody published");
    // `last`: the last event.
    let r = c.attach_receiver(ch, "last", Some("events-store/gap"), &start_props("last")).unwrap();
    c.engine().grant_credit(r, 10, false).unwrap();
    assert!(body(&c.receive(r, WAIT).unwrap()) == b"b1", "last did not start at the last event");
    // `new-only`, and the durable subscription: the next events, each once.
    let r = c.attach_receiver(ch, "new", Some("events-store/gap"), &start_props("new-only")).unwrap();
    c.engine().grant_credit(r, 10, false).unwrap();
    let mut d = Client::connect(b.addr(), "gap-durable").unwrap();
    let dch = d.begin().unwrap();
    let dr = d.attach_receiver(dch, "dur", Some("events-store/gap"), &durable).unwrap();
    d.engine().grant_credit(dr, 10, false).unwrap();
    c.pump(Duration::from_millis(300)).unwrap();
    d.pump(Duration::from_millis(300)).unwrap();
    let s = c.attach_sender(ch, "s", Some("events-store/gap"), &LinkOptions::default()).unwrap();
    c.wait_credit(s).unwrap();
    assert!(publish_one(&mut c, s, b"c0"));
    assert!(publish_one(&mut c, s, b"c1"));
    let short = |got: Vec<Vec<u8>>| got.iter().map(|b| format!("{} bytes", b.len())).collect::<Vec<_>>();
    let got = drain_all(&mut c, r, Duration::from_millis(800), false);
    assert!(got == [b"c0", b"c1"], "new-only got {:?}", short(got));
    let got = drain_all(&mut d, dr, Duration::from_millis(800), false);
    assert!(got == [b"c0", b"c1"], "the durable subscription got {:?}", short(got));
}

/// Publish `n` ids unsettled, pipelined within the credit window; all must be accepted.
fn publish_pipelined(b: &Broker, addr: &str, n: u32) {
    let mut c = Client::connect(b.addr(), "pp").unwrap();
    let ch = c.begin().unwrap();
    let s = c.attach_sender(ch, "s", Some(addr), &LinkOptions::default()).unwrap();
    c.wait_credit(s).unwrap();
    let mut ids = Vec::new();
    for i in 0..n {
        while c.engine().link_credit(s) == 0 {
            c.pump(Duration::from_millis(5)).unwrap();
        }
        ids.push(c.send(s, data_message(&i.to_be_bytes()), false).unwrap());
    }
    c.flush().unwrap();
    for id in ids {
        assert_eq!(c.wait_outcome(s, id).unwrap(), Some(DeliveryState::Accepted));
    }
}

/// Dead-lettering moves a message between two queues, and in general between two
/// shards' logs: the source forgets it only after the dead-letter queue has it on
/// disk, so a SIGKILL at any moment leaves every message in one queue or the other
/// (possibly both), never in neither.
#[test]
fn kill_minus_nine_while_dead_lettering_loses_no_message() {
    use sluice::broker::address::ChannelKey;
    use sluice::config::Pattern;
    // A queue whose dead-letter queue lives on the other shard.
    let name = (0..)
        .map(|i| format!("dl-crash-{i}"))
        .find(|n| {
            ChannelKey::new(Pattern::Queues, n).home(2) != ChannelKey::new(Pattern::Queues, &format!("{n}.dlq")).home(2)
        })
        .unwrap();
    let (addr, dlq) = (format!("queues/{name}"), format!("queues/{name}.dlq"));
    const N: u32 = 3000;
    for round in 0..3u64 {
        let dir = fresh_dir("dlcrash");
        let extra = [("SLUICE_MAX_RECEIVE_COUNT", "1")];
        let mut b = Broker::start(&env(&dir, &extra));
        publish_pipelined(&b, &addr, N);
        // Release everything as it comes: each release moves the message to the DLQ.
        let (a, broker) = (addr.clone(), b.addr());
        let count = std::sync::Arc::new(std::sync::atomic::AtomicU32::new(0));
        let seen = count.clone();
        let releaser = std::thread::spawn(move || {
            let mut released = 0u32;
            let Ok(mut c) = Client::connect(broker, "rel") else { return released };
            let ch = c.begin().unwrap();
            let r = c.attach_receiver(ch, "r", Some(&a), &LinkOptions::default()).unwrap();
            c.engine().grant_credit(r, 1000, false).unwrap();
            while let Ok(d) = c.receive(r, Duration::from_secs(2)) {
                c.settle(r, d.delivery_id, DeliveryState::Released);
                released += 1;
                seen.store(released, std::sync::atomic::Ordering::Relaxed);
                if c.engine().link_credit(r) < 100 && c.engine().grant_credit(r, 1000, false).is_err() {
                    break;
                }
            }
            released
        });
        // Killed while the moves are under way (a third, then two thirds in), and
        // last a moment after they are all done.
        let at = N / 3 * (round as u32 + 1);
        let t0 = std::time::Instant::now();
        while count.load(std::sync::atomic::Ordering::Relaxed) < at && t0.elapsed() < Duration::from_secs(20) {
            std::thread::yield_now();
        }
        if round == 2 {
            // All moved: the source holds nothing (it forgets a message only once the
            // dead-letter queue has it on disk) and the dead-letter queue holds all.
            let m = |kind: &str, ch: &str| {
                b.metric(&format!("sluice_channel_{kind}_messages{{pattern=\"queues\",channel=\"{ch}\"}}"))
            };
            let dlq_name = format!("{name}.dlq");
            let deadline = std::time::Instant::now() + Duration::from_secs(60);
            while !(m("undelivered", &dlq_name) == Some(N as f64)
                && m("undelivered", &name).unwrap_or(0.0) == 0.0
                && m("outstanding", &name).unwrap_or(0.0) == 0.0)
            {
                assert!(std::time::Instant::now() < deadline, "the moves never finished");
                std::thread::sleep(Duration::from_millis(50));
            }
        }
        b.kill9();
        let released = releaser.join().unwrap();
        let b = Broker::start(&env(&dir, &extra));
        let mut got: HashSet<u32> = read_queue(&b, &addr).into_iter().collect();
        let dead = read_queue(&b, &dlq);
        got.extend(dead.iter().copied());
        let missing: Vec<u32> = (0..N).filter(|i| !got.contains(i)).collect();
        assert!(
            missing.is_empty(),
            "round {round}: {} of {N} messages in neither queue after kill -9 ({released} released, {} in the DLQ), e.g. {:?}",
            missing.len(),
            dead.len(),
            &missing[..missing.len().min(5)]
        );
        if round == 2 {
            // Every move was done and is on disk: all of them are in the DLQ.
            let dead: HashSet<u32> = dead.into_iter().collect();
            assert_eq!(dead.len(), N as usize, "the dead-letter queue's records were committed");
        }
    }
}

/// A relative data directory (the default is "./data") works: durable publishes are
/// accepted and come back after a kill -9 and a restart. Before, the store's files
/// were opened through io_uring with the relative path, opening the directory failed
/// (EBADF), nothing was written and every durable publish was refused: the broker run
/// with its defaults could not keep a queue message.
#[test]
fn a_relative_data_directory_keeps_durable_messages() {
    let abs = fresh_dir("relative");
    std::fs::create_dir_all(&abs).unwrap();
    let cwd = std::env::current_dir().unwrap();
    // The same directory, relative to the working directory the broker inherits.
    let rel = pathdiff(Path::new(&abs), &cwd);
    assert!(rel.is_relative(), "{}", rel.display());
    let rel = rel.to_string_lossy().into_owned();
    let mut b = Broker::start(&env(&rel, &[]));
    publish(&b, "queues/relative", 5);
    b.kill9();
    let b = Broker::start(&env(&rel, &[]));
    assert_eq!(read_queue(&b, "queues/relative"), vec![0, 1, 2, 3, 4]);
    assert!(!segments(&abs, "queues").is_empty(), "no segment under {abs}");
}

/// `to` relative to `from` (both absolute): enough "../" to a common ancestor, then down.
fn pathdiff(to: &Path, from: &Path) -> PathBuf {
    let (t, f): (Vec<_>, Vec<_>) = (to.components().collect(), from.components().collect());
    let common = t.iter().zip(&f).take_while(|(a, b)| a == b).count();
    let mut p = PathBuf::new();
    for _ in common..f.len() {
        p.push("..");
    }
    for c in &t[common..] {
        p.push(c.as_os_str());
    }
    p
}
