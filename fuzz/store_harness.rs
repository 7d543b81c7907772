//! The `store` fuzz target: crash recovery (`sluice::store::recovery::recover`) over
//! segment files built from the input, in every mode (`Start`, `Verify`, `Repair`).
//! Shared by `fuzz_targets/store.rs` and the corpus replay test `tests/fuzz_corpus.rs`
//! (both include this file with `#[path]`), so `cargo test` replays exactly what was
//! fuzzed.
//!
//! Input: the first byte is a set of flags, the rest the log.
//! * bit 0: the log is `events/` (else `queues/`);
//! * bit 1: raw: the rest is the bytes after a valid segment header, as they are
//!   (records with wrong checksums, torn tails, garbage);
//! * otherwise framed: the rest is a list of `[type][len][body: len bytes]` records,
//!   each written with a valid checksum, so the fuzzer reaches the record decoders;
//!   type 0xFF instead appends its body unframed (damage in the middle or at the
//!   end), and a last record cut short is appended as it is (a torn tail);
//! * bits 2-3: the records are spread over 1 to 4 segments (a record or raw byte run
//!   boundary starts the next one; the header of a later segment may be left out
//!   when bit 4 is set);
//! * bit 5: the headers say format 1 (no commit records; else the current format).
//!
//! Checked for every input: nothing panics; `Verify` changes no file; when `Start`
//! succeeds, a second `Start` finds nothing to cut and recovers the same state;
//! `Repair` always leaves a log that `Start` accepts with the same state and
//! `Verify` finds clean; no recovered durable cursor is a deletion tombstone.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use sluice::store::recovery::{recover, Mode, RecoveredShard, RecoveryError};
use sluice::store::{frame_record, header, log_dir, segment_name, LogKind, CURSOR_DELETED, RECORD_HEAD};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

/// The data directory of this thread's recoveries (in memory when /dev/shm exists;
/// one per thread, since the replay tests run side by side in one process).
fn data_dir() -> PathBuf {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    thread_local! {
        static DIR: PathBuf = {
            let base = if Path::new("/dev/shm").is_dir() { PathBuf::from("/dev/shm") } else { std::env::temp_dir() };
            let n = NEXT.fetch_add(1, Ordering::Relaxed);
            base.join(format!("sluice-fuzz-store-{}-{n}", std::process::id()))
        };
    }
    DIR.with(Clone::clone)
}

/// A segment to write: whether it gets its header, and what follows.
type Segment = (bool, Vec<u8>);

/// The segments the input describes, and their log.
fn segments_of(data: &[u8]) -> Option<(LogKind, Vec<Segment>)> {
    let (&flags, rest) = data.split_first()?;
    let kind = if flags & 1 != 0 { LogKind::Events } else { LogKind::Queues };
    let raw = flags & 2 != 0;
    let want = 1 + ((flags >> 2) & 3) as usize;
    let drop_later_headers = flags & 16 != 0;
    // Pieces: framed records or raw runs, in order.
    let mut pieces: Vec<Vec<u8>> = Vec::new();
    if raw {
        let n = rest.len().div_ceil(want).max(1);
        pieces.extend(rest.chunks(n).map(<[u8]>::to_vec));
    } else {
        let mut at = 0;
        while at < rest.len() {
            let rt = rest[at];
            let Some(&len) = rest.get(at + 1) else {
                pieces.push(rest[at..].to_vec());
                break;
            };
            let body_at = at + 2;
            let end = body_at + len as usize;
            if end > rest.len() {
                // Cut short: a record whose header promises more than follows, the
                // way a crash leaves a tail.
                let avail = &rest[body_at..];
                let mut full = avail.to_vec();
                full.resize(len as usize, 0);
                let mut torn = Vec::new();
                frame_record(&mut torn, rt, &[&full]);
                torn.truncate(RECORD_HEAD + avail.len());
                pieces.push(torn);
                break;
            }
            let body = &rest[body_at..end];
            let mut rec = Vec::new();
            if rt == 0xFF {
                rec.extend_from_slice(body);
            } else {
                frame_record(&mut rec, rt, &[body]);
            }
            pieces.push(rec);
            at = end;
        }
    }
    let per = pieces.len().div_ceil(want).max(1);
    let mut segs: Vec<Segment> = pieces.chunks(per).map(|c| (true, c.concat())).collect();
    if segs.is_empty() {
        segs.push((true, Vec::new()));
    }
    for (i, s) in segs.iter_mut().enumerate() {
        s.0 = i == 0 || !drop_later_headers;
    }
    Some((kind, segs))
}

/// Everything recovery found, in a fixed order (the maps are hash maps).
fn digest(r: &RecoveredShard) -> Vec<String> {
    let mut d = Vec::new();
    for (k, msgs) in &r.queues {
        for m in msgs.values() {
            d.push(format!("q {k:?} {} {} {:?} {} {}", m.id, m.ts, m.payload, m.receive_count, m.seg));
        }
    }
    for (k, evs) in &r.events {
        for (seq, e) in evs {
            d.push(format!("e {k:?} {seq} {} {:?} {}", e.ts, e.payload, e.seg));
        }
    }
    for ((k, id), next) in &r.cursors {
        d.push(format!("c {k:?} {id} {next}"));
    }
    for (k, next) in &r.seq_marks {
        d.push(format!("m {k:?} {next}"));
    }
    for (k, max) in &r.queue_ids {
        d.push(format!("i {k:?} {max}"));
    }
    d.push(format!("records {}", r.records));
    d.sort();
    d
}

fn files(dir: &Path) -> Vec<(PathBuf, Vec<u8>)> {
    let mut v: Vec<_> = std::fs::read_dir(dir)
        .map(|rd| rd.flatten().map(|e| e.path()).collect())
        .unwrap_or_else(|_| Vec::new())
        .into_iter()
        .map(|p: PathBuf| {
            let b = std::fs::read(&p).unwrap_or_default();
            (p, b)
        })
        .collect();
    v.sort();
    v
}

/// No bytes were found torn. (A segment left without its header, empty once cut, is
/// reported at every start with nothing to drop: harmless, and not what this checks.)
fn nothing_cut(r: &RecoveredShard) -> bool {
    r.torn.iter().all(|(_, _, dropped)| *dropped == 0)
}

fn check(r: &RecoveredShard) {
    assert!(r.cursors.values().all(|n| *n != CURSOR_DELETED), "a deletion tombstone was recovered as a cursor");
}

/// Recover the log the input describes in every mode and check the invariants.
pub(crate) fn store(data: &[u8]) {
    let Some((kind, segs)) = segments_of(data) else { return };
    let format_1 = data[0] & 32 != 0;
    let root = data_dir();
    let root = root.as_path();
    let _ = std::fs::remove_dir_all(root);
    let dir = log_dir(root, 0, kind);
    std::fs::create_dir_all(&dir).expect("fuzz data directory");
    for (i, (with_header, body)) in segs.iter().enumerate() {
        let mut bytes = if *with_header { header(kind, 0).to_vec() } else { Vec::new() };
        if *with_header && format_1 {
            bytes[8..10].copy_from_slice(&1u16.to_be_bytes());
        }
        bytes.extend_from_slice(body);
        std::fs::write(dir.join(segment_name(i as u64 + 1)), bytes).expect("fuzz segment");
    }
    // Verify changes nothing.
    let before = files(&dir);
    if let Ok(r) = recover(root, 0, Mode::Verify) {
        check(&r);
    }
    assert!(files(&dir) == before, "verify changed the log");
    // Start: cuts torn tails or refuses corruption; once it succeeded, a second
    // start finds nothing more to cut and the same state.
    match recover(root, 0, Mode::Start) {
        Ok(first) => {
            check(&first);
            let again = recover(root, 0, Mode::Start).expect("a log that started once starts again");
            assert!(nothing_cut(&again), "a second start cut again: {:?}", again.torn);
            assert_eq!(digest(&first), digest(&again), "a second start recovered another state");
        }
        Err(RecoveryError::Corrupt { .. }) => {}
        Err(e) => panic!("start: {e}"),
    }
    // Repair always ends in a log that starts, with the state repair recovered.
    let repaired = recover(root, 0, Mode::Repair).expect("repair");
    check(&repaired);
    let started = recover(root, 0, Mode::Start).expect("a repaired log starts");
    assert!(nothing_cut(&started), "start cut a repaired log: {:?}", started.torn);
    assert_eq!(digest(&repaired), digest(&started), "start after repair recovered another state");
    let verified = recover(root, 0, Mode::Verify).expect("a repaired log verifies");
    assert!(nothing_cut(&verified), "verify found damage in a repaired log: {:?}", verified.torn);
    let _ = std::fs::remove_dir_all(root);
}

// ------------------------------------------------------------------ seeds

/// A channel key as records carry it: pattern code, name length, name.
fn key(pattern: u8, name: &[u8]) -> Vec<u8> {
    let mut k = vec![pattern];
    k.extend_from_slice(&(name.len() as u16).to_be_bytes());
    k.extend_from_slice(name);
    k
}

/// One framed record of the input: type, body length, body.
fn rec(rt: u8, parts: &[&[u8]]) -> Vec<u8> {
    let body = parts.concat();
    let mut r = vec![rt, body.len() as u8];
    r.extend_from_slice(&body);
    r
}

fn cursor(name: &[u8], id: &[u8], next: u64) -> Vec<u8> {
    rec(5, &[&key(3, name), &(id.len() as u16).to_be_bytes(), id, &next.to_be_bytes()])
}

/// Inputs for the corpus: every record type, tombstones, torn tails, corruption,
/// several segments.
pub(crate) fn seeds() -> Vec<(String, Vec<u8>)> {
    let q = key(1, b"orders");
    let publish =
        |id: u64| rec(1, &[&q, &id.to_be_bytes(), &1_700_000_000_000u64.to_be_bytes(), b"\x00\x53\x75\xa0\x02hi"]);
    let queues: Vec<u8> = [
        vec![0u8],
        publish(1),
        publish(2),
        publish(3),
        rec(2, &[&q, &1u64.to_be_bytes()]),
        rec(3, &[&q, &2u64.to_be_bytes(), &3u32.to_be_bytes()]),
    ]
    .concat();
    let es = key(3, b"audit");
    let event = |seq: u64| rec(4, &[&es, &seq.to_be_bytes(), &1_700_000_000_000u64.to_be_bytes(), b"event"]);
    let events: Vec<u8> = [
        vec![1u8],
        event(1),
        event(2),
        cursor(b"audit", b"c1_sub_0a1b2c3d", 2),
        rec(6, &[&es, &3u64.to_be_bytes()]),
        cursor(b"audit", b"c1_sub_0a1b2c3d", CURSOR_DELETED),
        cursor(b"audit", b"group:g", 3),
    ]
    .concat();
    let mut seeds = vec![("queues".to_owned(), queues.clone()), ("events".to_owned(), events.clone())];
    // A torn tail: the last record's header promises more than follows.
    let mut torn = events.clone();
    torn.extend_from_slice(&[4, 200, 1, 2, 3]);
    seeds.push(("events-torn".into(), torn));
    // Damage in the middle, over two segments (flags: events, 2 segments).
    let mut mid = vec![1u8 | (1 << 2)];
    mid.extend_from_slice(&event(1));
    mid.extend_from_slice(&rec(0xFF, &[&[0xA5, 7, 0, 0, 0, 9, 1, 2, 3, 4]]));
    mid.extend_from_slice(&event(2));
    mid.extend_from_slice(&event(3));
    seeds.push(("events-corrupt-middle".into(), mid));
    // Three segments, the later ones without their header.
    let mut headless = vec![(2u8 << 2) | 16];
    headless.extend_from_slice(&queues[1..]);
    seeds.push(("queues-headless-later-segments".into(), headless));
    // A tombstone before its cursor, a cursor of an unknown pattern, a bad name.
    let odd: Vec<u8> = [
        vec![1u8],
        cursor(b"audit", b"x", CURSOR_DELETED),
        cursor(b"audit", b"x", 5),
        rec(5, &[&key(9, b"nope"), &1u16.to_be_bytes(), b"y", &1u64.to_be_bytes()]),
        rec(6, &[&key(3, &[0xFF, 0xFE]), &1u64.to_be_bytes()]),
    ]
    .concat();
    seeds.push(("events-odd-records".into(), odd));
    seeds.push(("unknown-record-type".into(), [vec![0u8], rec(9, &[b"what"])].concat()));
    seeds.push(("short-body".into(), [vec![0u8], rec(1, &[&q, &[1, 2]])].concat()));
    // Raw: a header, then bytes that are not records; all zeros (preallocated).
    seeds.push(("raw-garbage".into(), [vec![2u8], b"not a record at all".to_vec()].concat()));
    seeds.push(("raw-zeros".into(), [vec![3u8], vec![0; 64]].concat()));
    seeds.push(("raw-record-mark-run".into(), [vec![2u8 | (1 << 2)], vec![0xA5; 40]].concat()));
    seeds.push(("flags-only".into(), vec![0u8]));
    // Commits ended by commit records (type 8, the offset where each began); a hole
    // (bytes that fail their checksum) in the last commit, in a synced one, and in a
    // format 1 log.
    let commit = |start: u64| rec(8, &[&start.to_be_bytes()]);
    let on_disk = |recs: &[Vec<u8>]| -> u64 {
        recs.iter().map(|r| if r[0] == 0xFF { r.len() - 2 } else { RECORD_HEAD + r.len() - 2 } as u64).sum()
    };
    let hole = rec(0xFF, &[&[0xA5, 1, 0, 0, 0, 4, 0, 0, 0, 0, 1, 2, 3, 4]]);
    let first = vec![publish(1), publish(2), commit(0)];
    let second_at = 16 + on_disk(&first);
    let last = vec![hole.clone(), publish(3), commit(second_at)];
    seeds.push(("queues-hole-in-last-commit".into(), [vec![vec![0u8]], first.clone(), last].concat().concat()));
    let synced = vec![publish(1), hole.clone(), publish(2), commit(0)];
    let then_at = 16 + on_disk(&synced);
    let then = vec![publish(3), commit(then_at)];
    seeds.push(("queues-hole-in-synced-commit".into(), [vec![vec![0u8]], synced, then].concat().concat()));
    seeds.push(("queues-hole-format-1".into(), [vec![32u8], publish(1), hole, publish(3)].concat()));
    seeds
}
