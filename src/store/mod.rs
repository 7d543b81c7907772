//! The embedded durable store: per shard, two append-only logs (`queues/` and
//! `events/`) of segments, each record framed with a CRC32C. Writes go through
//! glommio DMA files (O_DIRECT over io_uring) on the owning shard; a group commit
//! writes every record appended since the last one and fdatasyncs once, and only
//! then are the `accepted` outcomes of unsettled publishes released.
//!
//! On-disk format (version 2), all integers big-endian:
//!
//! ```text
//! segment  = header commit*  zero-padding
//! header   = "SLUICE01" version:u16 kind:u8 0:u8 shard:u16 0:u16        (16 bytes)
//! commit   = record* commit-record            (what one group commit wrote here)
//! record   = 0xA5 type:u8 len:u32 crc:u32 body[len]
//!            crc = CRC32C(type, len, body)
//! commit-record = record of type COMMIT, body start:u64 (where the commit's bytes
//!            start in the segment; 0 when the commit opened it)
//! ```
//!
//! A commit that goes on into a new segment has its commit record in the last one
//! (the earlier segment is synced before the next one is written). The commit record
//! lets recovery tell a last commit torn out of order (a disk may persist the blocks
//! of one write in any order: damage with valid records after it) from corruption of
//! what was acknowledged. Version 1 segments (no commit records) are still read.
//!
//! Segments are named by a 20-digit id and deleted oldest-first once nothing in them
//! is live, so a record always outlives the records it depends on. Each new segment
//! starts with a snapshot of the durable cursors and sequence marks, so deleting old
//! segments never loses them.

pub mod recovery;
pub mod startup;

use crate::broker::address::ChannelKey;
use crate::broker::ShardMsg;
use crate::config::Pattern;
use std::cell::RefCell;
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::task::Waker;
use std::time::{Duration, Instant};

/// Format version written in every segment header.
pub const FORMAT_VERSION: u16 = 2;
/// Oldest format version read (version 1 has no commit records).
pub const OLDEST_FORMAT_VERSION: u16 = 1;
/// Segment header magic.
pub const MAGIC: &[u8; 8] = b"SLUICE01";
/// Size of the segment header.
pub const HEADER_LEN: usize = 16;
/// First byte of every record.
pub const RECORD_MARK: u8 = 0xA5;
/// Bytes before a record's body.
pub const RECORD_HEAD: usize = 10;
/// Largest record body accepted when reading (a message is at most 100 MiB by
/// default; the setting may raise it, this bounds what a corrupt length can ask for).
pub const MAX_RECORD: usize = 1 << 31;
/// Largest buffer kept from one commit for the next.
pub const SPARE_MAX: usize = 8 * 1024 * 1024;
/// A segment is closed once it holds this many bytes.
pub const SEGMENT_BYTES: u64 = 64 * 1024 * 1024;
/// fsync latency histogram bucket bounds, seconds.
pub const FSYNC_BUCKETS: [f64; 12] = [0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0];

/// Which log of a shard.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogKind {
    /// Queue messages, acks and receive counts.
    Queues = 1,
    /// Events-store events, durable cursors and sequence marks.
    Events = 2,
}

impl LogKind {
    /// Directory name of the log under the shard directory.
    pub fn dir(self) -> &'static str {
        match self {
            LogKind::Queues => "queues",
            LogKind::Events => "events",
        }
    }
}

/// Record types.
pub mod rtype {
    /// A queue message: key, id, timestamp, payload.
    pub const QUEUE_PUBLISH: u8 = 1;
    /// A queue message settled for good (accepted, rejected, dead-lettered).
    pub const QUEUE_ACK: u8 = 2;
    /// A queue message's receive count.
    pub const QUEUE_DELIVERED: u8 = 3;
    /// An events-store event: key, sequence, timestamp, payload.
    pub const STORE_PUBLISH: u8 = 4;
    /// A durable subscription's cursor: key, identity, next sequence
    /// ([`super::CURSOR_DELETED`]: the subscription was deleted).
    pub const CURSOR: u8 = 5;
    /// An events-store channel's next sequence number (survives retention).
    pub const SEQ_MARK: u8 = 6;
    /// A sequence floor: bucket (u16), next sequence. Every events-store channel name
    /// in the bucket that has no mark of its own starts at or above it.
    pub const SEQ_FLOOR: u8 = 7;
    /// The end of a commit (format 2): the offset in its segment where the commit's
    /// bytes start (u64). Recovery tells a torn last commit by it.
    pub const COMMIT: u8 = 8;
}

/// Buckets of the sequence floors ([`rtype::SEQ_FLOOR`]): the marks of forgotten
/// events-store channels past the shard's limit are folded into these, so the marks
/// kept stay bounded while no channel's sequence ever restarts.
pub const SEQ_FLOOR_BUCKETS: usize = 4096;

/// The floor bucket of an events-store channel name: FNV-1a (64 bit) of its bytes,
/// stable across restarts and independent of the shard placement hash.
pub fn seq_floor_bucket(name: &str) -> usize {
    use crate::broker::address::{fnv1a64, FNV64_BASIS};
    (fnv1a64(FNV64_BASIS, name.as_bytes()) >> 32) as usize % SEQ_FLOOR_BUCKETS
}

/// The next sequence of a [`rtype::CURSOR`] record that deletes the cursor.
pub const CURSOR_DELETED: u64 = 0;

/// The directory of one shard's log.
pub fn log_dir(data_dir: &Path, shard: usize, kind: LogKind) -> PathBuf {
    data_dir.join(format!("shard-{shard}")).join(kind.dir())
}

/// Segment file name for an id.
pub fn segment_name(id: u64) -> String {
    format!("{id:020}.log")
}

/// Encode a segment header.
pub fn header(kind: LogKind, shard: u16) -> [u8; HEADER_LEN] {
    let mut h = [0u8; HEADER_LEN];
    h[..8].copy_from_slice(MAGIC);
    h[8..10].copy_from_slice(&FORMAT_VERSION.to_be_bytes());
    h[10] = kind as u8;
    h[12..14].copy_from_slice(&shard.to_be_bytes());
    h
}

/// Pattern as stored.
pub fn pattern_code(p: Pattern) -> u8 {
    match p {
        Pattern::Queues => 1,
        Pattern::Events => 2,
        Pattern::EventsStore => 3,
        Pattern::Commands => 4,
        Pattern::Queries => 5,
    }
}

/// Pattern from its stored code.
pub fn pattern_from(code: u8) -> Option<Pattern> {
    Some(match code {
        1 => Pattern::Queues,
        2 => Pattern::Events,
        3 => Pattern::EventsStore,
        4 => Pattern::Commands,
        5 => Pattern::Queries,
        _ => return None,
    })
}

/// The body length a record header (at least [`RECORD_HEAD`] bytes) claims.
pub fn record_body_len(head: &[u8]) -> usize {
    u32::from_be_bytes([head[2], head[3], head[4], head[5]]) as usize
}

/// Append one framed record to `out`.
pub fn frame_record(out: &mut Vec<u8>, rtype: u8, body: &[&[u8]]) {
    let len: usize = body.iter().map(|b| b.len()).sum();
    let at = out.len();
    out.push(RECORD_MARK);
    out.push(rtype);
    out.extend_from_slice(&(len as u32).to_be_bytes());
    out.extend_from_slice(&[0; 4]);
    for b in body {
        out.extend_from_slice(b);
    }
    let mut crc = crc32c::crc32c(&out[at + 1..at + 6]);
    crc = crc32c::crc32c_append(crc, &out[at + RECORD_HEAD..]);
    out[at + 6..at + 10].copy_from_slice(&crc.to_be_bytes());
}

/// Counters of one log, read at scrape time.
#[derive(Debug, Default, Clone)]
pub struct JournalStats {
    /// Bytes written to segments (payload of commits, before padding).
    pub bytes_written: u64,
    /// fdatasync calls.
    pub fsyncs: u64,
    /// fdatasync latency histogram: counts per bucket of [`FSYNC_BUCKETS`] (+Inf last).
    pub fsync_buckets: [u64; 13],
    /// Sum of fdatasync seconds.
    pub fsync_seconds: f64,
    /// Records per commit: sum, and commits.
    pub commit_records: u64,
    /// Commits.
    pub commits: u64,
    /// Live segments.
    pub segments: u64,
    /// Bytes in live segments.
    pub segment_bytes: u64,
    /// Write or sync failures.
    pub errors: u64,
    /// Events-store channel names whose next sequence number is kept (events log).
    pub seq_marks: u64,
    /// Marks of forgotten channels folded into the sequence floors.
    pub seq_marks_folded: u64,
}

/// Records waiting for a commit: (segment id, encoded records, record count).
type Batch = (u64, Vec<u8>, u64);

/// An events-store channel's next sequence number, and whether its shard keeps the
/// channel (a forgotten channel's mark may be folded into the floors).
#[derive(Debug, Clone, Copy)]
struct Mark {
    next: u64,
    kept: bool,
}

/// The synchronous half of a log: the home appends records here, the commit task
/// writes them. Owned by one shard.
#[derive(Debug)]
pub struct Journal {
    kind: LogKind,
    enabled: bool,
    /// Pending batches: (segment id, encoded records, record count).
    batches: VecDeque<Batch>,
    acks: Vec<ShardMsg>,
    /// Buffers of written batches and a drained ack list, kept for the next commits
    /// (a fresh buffer per commit grew by doubling into new, unmapped memory every time).
    spare_data: Vec<Vec<u8>>,
    spare_acks: Vec<ShardMsg>,
    active: u64,
    active_bytes: u64,
    /// Live references per segment (queue messages, events).
    live: BTreeMap<u64, u64>,
    /// Latest durable cursors and sequence marks (events log): re-written at the
    /// start of every segment.
    cursors: HashMap<(ChannelKey, String), u64>,
    seq_marks: HashMap<ChannelKey, Mark>,
    /// Marks whose channel the shard keeps (`Mark::kept`): the others, forgotten, are
    /// `seq_marks.len() - kept_marks`, known without a walk.
    kept_marks: usize,
    /// Sequence floors by bucket ([`SEQ_FLOOR_BUCKETS`] long once a mark was folded,
    /// empty before): where a channel without a mark starts.
    seq_floors: Vec<u64>,
    dirty: Vec<((ChannelKey, String), u64)>,
    /// Bytes of the cursor/mark snapshot at the start of the active segment: a
    /// segment rolls after `SEGMENT_BYTES` of records beyond it, so a snapshot of any
    /// size is written once per segment, not once per record.
    snapshot_bytes: u64,
    /// Writing a snapshot: no roll from inside it.
    rolling: bool,
    waker: Option<Waker>,
    healthy: bool,
    /// A commit taken by [`Journal::take`] is being written and synced (until
    /// [`Journal::recycle`]): shutdown waits for it, as for work not yet taken.
    committing: bool,
    /// Segments given up by messages re-appended since the last commit was taken
    /// ([`Journal::moved_from`]): released only when the commit that carries the new
    /// records is on disk, never before (a segment deleted while the copies of its
    /// messages were still in memory would lose them in a crash).
    moved: Vec<u64>,
    /// `moved` of commits that failed: their new records were cut, so these wait until
    /// the messages of `suspect` have been appended again ([`Journal::redo_done`]).
    held_moved: Vec<u64>,
    /// Segments that had records cut by a failed commit: the live messages recorded
    /// there are appended again ([`Journal::take_suspects`]).
    suspect: Vec<u64>,
    /// Counters.
    pub stats: JournalStats,
}

impl Journal {
    /// A journal that records nothing (memory durability).
    pub fn disabled(kind: LogKind) -> Journal {
        Journal {
            kind,
            enabled: false,
            batches: VecDeque::new(),
            acks: Vec::new(),
            spare_data: Vec::new(),
            spare_acks: Vec::new(),
            active: 0,
            active_bytes: 0,
            live: BTreeMap::new(),
            cursors: HashMap::new(),
            seq_marks: HashMap::new(),
            kept_marks: 0,
            seq_floors: Vec::new(),
            dirty: Vec::new(),
            snapshot_bytes: 0,
            rolling: false,
            waker: None,
            healthy: true,
            committing: false,
            moved: Vec::new(),
            held_moved: Vec::new(),
            suspect: Vec::new(),
            stats: JournalStats::default(),
        }
    }

    /// A journal continuing after recovery: new records go to segment `next_segment`,
    /// `live` holds the references of the recovered segments.
    pub fn enabled(kind: LogKind, next_segment: u64, live: BTreeMap<u64, u64>) -> Journal {
        let mut j = Journal::disabled(kind);
        j.enabled = true;
        j.active = next_segment;
        j.live = live;
        j.live.entry(next_segment).or_insert(0);
        j.batches.push_back((next_segment, Vec::new(), 0));
        j
    }

    /// Which log this is.
    pub fn kind(&self) -> LogKind {
        self.kind
    }

    /// True when records are written.
    pub fn is_enabled(&self) -> bool {
        self.enabled
    }

    /// True unless the last write or sync failed.
    pub fn is_healthy(&self) -> bool {
        self.healthy
    }

    fn wake(&mut self) {
        if let Some(w) = self.waker.take() {
            w.wake();
        }
    }

    fn push(&mut self, rtype: u8, body: &[&[u8]], live: bool) -> u64 {
        if !self.enabled {
            return 0;
        }
        let Some(batch) = self.batches.back_mut() else { return 0 };
        let before = batch.1.len();
        frame_record(&mut batch.1, rtype, body);
        batch.2 += 1;
        self.active_bytes += (batch.1.len() - before) as u64;
        let seg = self.active;
        if live {
            *self.live.entry(seg).or_insert(0) += 1;
        }
        if !self.rolling && self.active_bytes >= SEGMENT_BYTES.saturating_add(self.snapshot_bytes) {
            self.roll();
        }
        self.wake();
        seg
    }

    /// Start a new segment: later records go there, after a snapshot of the cursors.
    fn roll(&mut self) {
        let buf = self.spare_data.pop().unwrap_or_default();
        self.roll_with(buf, 0);
    }

    /// [`Journal::roll`] into a segment that starts with `records` (`count` of them).
    fn roll_with(&mut self, records: Vec<u8>, count: u64) {
        self.active += 1;
        self.active_bytes = records.len() as u64;
        self.live.entry(self.active).or_insert(0);
        self.batches.push_back((self.active, records, count));
        self.write_snapshot();
    }

    /// The commit of `failed` failed and the writer cut its segment back: the log goes
    /// on in a fresh segment, which starts with what must not be lost. Of the failed
    /// commit's own records, the ones that state what already happened (acks, receive
    /// counts, cursors and their deletions, sequence marks and floors) are written
    /// again; its publishes are not (they were rejected). Then every record appended
    /// while that commit was being written, whatever segment it was queued for (left
    /// queued for the cut segment, the next commit would write to a segment that
    /// exists and fail too; left queued for a later one, it would be written before
    /// the failed commit's older records). Their old segment ids keep counting their
    /// live records, which pins the new segment too. The snapshot of cursors and marks
    /// comes last, so it stays the latest word.
    fn resume_after_failure(&mut self, failed: &[Batch]) {
        let mut records = self.spare_data.pop().unwrap_or_default();
        let mut count = 0;
        for (_, data, _) in failed {
            count += keep_records(&mut records, data, |t| t != rtype::QUEUE_PUBLISH && t != rtype::STORE_PUBLISH);
        }
        while let Some((_, data, n)) = self.batches.pop_front() {
            records.extend_from_slice(&data);
            count += n;
        }
        self.roll_with(records, count);
    }

    /// Every durable cursor and sequence mark, at the start of the active segment.
    fn write_snapshot(&mut self) {
        self.rolling = true;
        let start = self.active_bytes;
        let cursors: Vec<_> = self.cursors.iter().map(|(k, v)| (k.clone(), *v)).collect();
        for ((key, id), next) in cursors {
            self.write_cursor(&key, &id, next);
        }
        let marks: Vec<_> = self.seq_marks.iter().map(|(k, m)| (k.clone(), m.next)).collect();
        for (key, next) in marks {
            self.write_seq_mark(&key, next);
        }
        for bucket in 0..self.seq_floors.len() {
            if self.seq_floors[bucket] > 1 {
                self.write_seq_floor(bucket, self.seq_floors[bucket]);
            }
        }
        self.snapshot_bytes = self.active_bytes - start;
        self.rolling = false;
    }

    /// A record whose body is the channel key (pattern code, name length as u16,
    /// name) followed by `rest` (at most three parts), framed straight into the batch
    /// (no buffer per record). Every record that names a channel is written here.
    fn push_keyed<const N: usize>(&mut self, rtype: u8, key: &ChannelKey, rest: [&[u8]; N], live: bool) -> u64 {
        const { assert!(N <= 3) };
        let name = key.name.as_bytes();
        let code = [pattern_code(key.pattern)];
        let len = (name.len() as u16).to_be_bytes();
        let mut parts: [&[u8]; 6] = [&code, &len, name, &[], &[], &[]];
        parts[3..3 + N].copy_from_slice(&rest);
        self.push(rtype, &parts[..3 + N], live)
    }

    /// A queue message; returns its segment.
    pub fn queue_publish(&mut self, key: &ChannelKey, id: u64, ts: u64, payload: &[u8]) -> u64 {
        self.push_keyed(rtype::QUEUE_PUBLISH, key, [&id.to_be_bytes(), &ts.to_be_bytes(), payload], true)
    }

    /// A queue message is gone for good; `seg` is where it was published.
    pub fn queue_ack(&mut self, key: &ChannelKey, id: u64, seg: u64) {
        if !self.enabled {
            return;
        }
        self.push_keyed(rtype::QUEUE_ACK, key, [&id.to_be_bytes()], false);
        self.unref(seg);
    }

    /// A queue message's receive count.
    pub fn queue_delivered(&mut self, key: &ChannelKey, id: u64, count: u32) {
        if !self.enabled {
            return;
        }
        self.push_keyed(rtype::QUEUE_DELIVERED, key, [&id.to_be_bytes(), &count.to_be_bytes()], false);
    }

    /// An events-store event; returns its segment.
    pub fn store_publish(&mut self, key: &ChannelKey, seq: u64, ts: u64, payload: &[u8]) -> u64 {
        let seg = self.push_keyed(rtype::STORE_PUBLISH, key, [&seq.to_be_bytes(), &ts.to_be_bytes(), payload], true);
        if self.enabled {
            let next = seq.wrapping_add(1);
            // A channel that takes a publish is kept by its shard.
            match self.seq_marks.get_mut(key) {
                Some(m) => {
                    m.next = next;
                    if !m.kept {
                        m.kept = true;
                        self.kept_marks += 1;
                    }
                }
                None => {
                    self.seq_marks.insert(key.clone(), Mark { next, kept: true });
                    self.kept_marks += 1;
                    self.stats.seq_marks = self.seq_marks.len() as u64;
                }
            }
        }
        seg
    }

    /// A durable cursor moved; written (coalesced) with the next commit.
    pub fn cursor(&mut self, key: &ChannelKey, id: &str, next: u64) {
        if !self.enabled {
            return;
        }
        let k = (key.clone(), id.to_owned());
        if self.cursors.get(&k) == Some(&next) {
            return;
        }
        self.cursors.insert(k.clone(), next);
        self.dirty.push((k, next));
        self.wake();
    }

    /// A durable subscription is deleted: its cursor leaves the snapshots of later
    /// segments, and a tombstone (a cursor record whose next sequence is 0, which no
    /// cursor has: sequences start at 1) drops it from the records before it when the
    /// log is recovered. Written with the next commit, after any move of the same
    /// cursor still waiting (those are skipped: the cursor is no longer kept).
    pub fn forget_cursor(&mut self, key: &ChannelKey, id: &str) {
        if !self.enabled {
            return;
        }
        if self.cursors.remove(&(key.clone(), id.to_owned())).is_some() {
            self.write_cursor(key, id, CURSOR_DELETED);
            self.wake();
        }
    }

    /// A cursor taken over under a new identity: the new identity's record is written
    /// before the old one's tombstone, so a crash that keeps part of the commit leaves
    /// one of them, never neither. (Before, the tombstone went first and the new
    /// record only when the commit was taken.)
    pub fn move_cursor(&mut self, key: &ChannelKey, old: &str, new: &str, next: u64) {
        if !self.enabled {
            return;
        }
        self.cursors.insert((key.clone(), new.to_owned()), next);
        self.write_cursor(key, new, next);
        self.forget_cursor(key, old);
    }

    fn write_cursor(&mut self, key: &ChannelKey, id: &str, next: u64) {
        // Identities are built from bounded parts (`address::NAME_MAX`, `durable_identity`); one
        // that did not fit its 16-bit length would make the log unreadable.
        let Ok(id_len) = u16::try_from(id.len()) else {
            tracing::error!(channel = %key.name, "durable subscription id too long to store; cursor not written");
            return;
        };
        let id_len = id_len.to_be_bytes();
        self.push_keyed(rtype::CURSOR, key, [&id_len, id.as_bytes(), &next.to_be_bytes()], false);
    }

    fn write_seq_mark(&mut self, key: &ChannelKey, next: u64) {
        self.push_keyed(rtype::SEQ_MARK, key, [&next.to_be_bytes()], false);
    }

    fn write_seq_floor(&mut self, bucket: usize, next: u64) {
        let b = (bucket as u16).to_be_bytes();
        self.push(rtype::SEQ_FLOOR, &[&b, &next.to_be_bytes()], false);
    }

    /// Where the sequence of an events-store channel the shard does not keep starts:
    /// its mark (the next number it would have had), else the floor of its bucket,
    /// else 1. Either is above every number the channel ever had.
    pub fn start_seq(&self, key: &ChannelKey) -> u64 {
        if let Some(m) = self.seq_marks.get(key) {
            return m.next;
        }
        self.seq_floors.get(seq_floor_bucket(&key.name)).copied().unwrap_or(1).max(1)
    }

    /// The shard keeps the channel of `key` (it was created, or rebuilt).
    pub fn channel_kept(&mut self, key: &ChannelKey) {
        if let Some(m) = self.seq_marks.get_mut(key) {
            if !m.kept {
                m.kept = true;
                self.kept_marks += 1;
            }
        }
    }

    /// The shard forgot the channel of `key`: its mark, if any, is a forgotten one.
    pub fn channel_forgotten(&mut self, key: &ChannelKey) {
        if let Some(m) = self.seq_marks.get_mut(key) {
            if m.kept {
                m.kept = false;
                self.kept_marks -= 1;
            }
        }
    }

    /// Keep the marks of at most `keep_forgotten` channels the shard no longer keeps:
    /// past that, marks of forgotten channels are folded into the floors of their
    /// buckets until a quarter of the room is free again, and each raised floor is
    /// logged. A name whose mark was folded comes back at its bucket's floor: above
    /// every number it had, perhaps with a gap. Costs nothing while within the limit
    /// (the forgotten are counted as channels come and go); past it, one walk over the
    /// marks. Returns the marks folded.
    pub fn trim_marks(&mut self, keep_forgotten: usize) -> usize {
        let forgotten = self.seq_marks.len().saturating_sub(self.kept_marks);
        if !self.enabled || forgotten <= keep_forgotten {
            return 0;
        }
        let fold = forgotten - (keep_forgotten - keep_forgotten / 4);
        let folding: Vec<ChannelKey> =
            self.seq_marks.iter().filter(|(_, m)| !m.kept).map(|(k, _)| k.clone()).take(fold).collect();
        if self.seq_floors.is_empty() {
            self.seq_floors = vec![1; SEQ_FLOOR_BUCKETS];
        }
        let mut raised = Vec::new();
        for key in &folding {
            let Some(m) = self.seq_marks.remove(key) else { continue };
            let bucket = seq_floor_bucket(&key.name);
            if m.next > self.seq_floors[bucket] {
                self.seq_floors[bucket] = m.next;
                raised.push(bucket);
            }
        }
        raised.sort_unstable();
        raised.dedup();
        for bucket in raised {
            self.write_seq_floor(bucket, self.seq_floors[bucket]);
        }
        self.stats.seq_marks = self.seq_marks.len() as u64;
        self.stats.seq_marks_folded += folding.len() as u64;
        self.wake();
        folding.len()
    }

    /// Restore the cursor, sequence-mark and sequence-floor state found by recovery.
    pub fn restore_marks(
        &mut self,
        cursors: HashMap<(ChannelKey, String), u64>,
        marks: HashMap<ChannelKey, u64>,
        floors: Vec<u64>,
    ) {
        self.cursors = cursors;
        // No channel is kept yet: the home marks the ones it rebuilds.
        self.seq_marks = marks.into_iter().map(|(k, next)| (k, Mark { next, kept: false })).collect();
        self.kept_marks = 0;
        self.stats.seq_marks = self.seq_marks.len() as u64;
        self.seq_floors = floors;
        // The new segment starts with them, like every segment.
        self.write_snapshot();
    }

    /// A live record in `seg` is no longer needed (the message was settled for good,
    /// or the event left the retention window): nothing else depends on it.
    pub fn unref(&mut self, seg: u64) {
        if let Some(n) = self.live.get_mut(&seg) {
            *n = n.saturating_sub(1);
        }
    }

    /// A live record in `seg` was just appended again (compaction): `seg` is given
    /// up once the commit that carries the new record is on disk.
    pub fn moved_from(&mut self, seg: u64) {
        if self.enabled {
            self.moved.push(seg);
        }
    }

    /// Segments whose live messages must be appended again because a failed commit
    /// cut their records; the caller appends them (giving each old segment up with
    /// [`Journal::moved_from`]) and then calls [`Journal::redo_done`].
    pub fn take_suspects(&mut self) -> Vec<u64> {
        std::mem::take(&mut self.suspect)
    }

    /// The messages of the suspect segments are appended again: what failed commits
    /// gave up is released with the next commit that succeeds.
    pub fn redo_done(&mut self) {
        let held = std::mem::take(&mut self.held_moved);
        self.moved.extend(held);
    }

    /// A commit succeeded: release what it gave up.
    fn committed(&mut self, moved: &mut Vec<u64>) {
        for seg in moved.drain(..) {
            self.unref(seg);
        }
    }

    /// A commit failed: what it gave up stays pinned until its messages are
    /// appended again, and the segments it wrote to become suspect.
    fn commit_failed(&mut self, moved: &mut Vec<u64>, batches: &[Batch]) {
        self.held_moved.append(moved);
        if self.kind != LogKind::Queues {
            // Only queue messages are appended again (events are not compacted).
            return;
        }
        for (seg, data, _) in batches {
            if !data.is_empty() && !self.suspect.contains(seg) {
                self.suspect.push(*seg);
            }
        }
    }

    /// Release `m` once everything appended so far is on disk (immediately when the
    /// journal is disabled).
    pub fn after_commit(&mut self, m: ShardMsg, out: &mut Vec<ShardMsg>) {
        if self.enabled {
            self.acks.push(m);
            self.wake();
        } else {
            out.push(m);
        }
    }

    /// The oldest segment that still pins the log (queues: its messages could be
    /// re-appended so that it can go), with its live count.
    pub fn oldest_pinned(&self) -> Option<(u64, u64)> {
        let (&seg, &n) = self.live.iter().next()?;
        (seg < self.active && n > 0 && self.live.len() >= 3).then_some((seg, n))
    }

    /// True while records or acks wait for a commit.
    pub fn busy(&self) -> bool {
        self.committing || self.has_work()
    }

    fn has_work(&self) -> bool {
        !self.acks.is_empty()
            || !self.dirty.is_empty()
            || !self.moved.is_empty()
            || self.batches.iter().any(|b| !b.1.is_empty())
    }

    /// Take what the next commit writes: (batches, acks, segments given up by the
    /// records in these batches).
    fn take(&mut self) -> (Vec<Batch>, Vec<ShardMsg>, Vec<u64>) {
        for (k, next) in std::mem::take(&mut self.dirty) {
            if self.cursors.get(&k) == Some(&next) {
                self.write_cursor(&k.0, &k.1, next);
            }
        }
        let mut out: Vec<_> = self.batches.drain(..).collect();
        // Keep an open batch for the active segment.
        let buf = self.spare_data.pop().unwrap_or_default();
        self.batches.push_back((self.active, buf, 0));
        out.retain(|b| !b.1.is_empty() || b.0 == self.active);
        let acks = std::mem::replace(&mut self.acks, std::mem::take(&mut self.spare_acks));
        self.committing = true;
        (out, acks, std::mem::take(&mut self.moved))
    }

    /// Keep the buffers of a finished commit for the next ones: at most two batch
    /// buffers of at most [`SPARE_MAX`] bytes, so a burst's memory is not held.
    fn recycle(&mut self, batches: Vec<Batch>, mut acks: Vec<ShardMsg>) {
        self.committing = false;
        for (_, mut data, _) in batches {
            if self.spare_data.len() < 2 && data.capacity() <= SPARE_MAX {
                data.clear();
                self.spare_data.push(data);
            }
        }
        debug_assert!(acks.is_empty(), "acks recycled before they were released");
        acks.clear();
        if acks.capacity() * std::mem::size_of::<ShardMsg>() <= SPARE_MAX
            && acks.capacity() > self.spare_acks.capacity()
        {
            self.spare_acks = acks;
        }
    }

    /// Segments that can be deleted: the oldest ones with nothing live, never the
    /// active one nor `open`, the one the writer still has open (it goes once the
    /// writer has moved on: dropped from `live` while it could not be deleted, it
    /// would stay on disk untracked).
    fn reclaimable(&mut self, open: u64) -> Vec<u64> {
        let mut v = Vec::new();
        while let Some((&seg, &n)) = self.live.iter().next() {
            if seg >= self.active || seg == open || n > 0 {
                break;
            }
            self.live.remove(&seg);
            v.push(seg);
        }
        v
    }
}

#[cfg(test)]
impl Journal {
    /// What the commit loop does with the journal for one commit: on success it
    /// releases what the commit gave up and returns the segments it would delete; on
    /// failure the records are cut and the log goes on in a new segment.
    pub(crate) fn simulate_commit(&mut self, ok: bool) -> Vec<u64> {
        let (batches, _acks, mut moved) = self.take();
        if ok {
            self.committed(&mut moved);
            self.reclaimable(u64::MAX)
        } else {
            self.commit_failed(&mut moved, &batches);
            self.resume_after_failure(&batches);
            Vec::new()
        }
    }

    /// Start a new segment.
    pub(crate) fn simulate_roll(&mut self) {
        self.roll();
    }
}

/// Append to `out` the framed records of `data` whose type passes `keep`; returns how
/// many. `data` is what [`frame_record`] wrote, so a record that does not parse ends
/// the walk.
fn keep_records(out: &mut Vec<u8>, data: &[u8], keep: impl Fn(u8) -> bool) -> u64 {
    let mut at = 0;
    let mut n = 0;
    while let Some(head) = data.get(at..at + RECORD_HEAD) {
        let len = RECORD_HEAD + record_body_len(head);
        let Some(record) = data.get(at..at + len) else { break };
        if keep(head[1]) {
            out.extend_from_slice(record);
            n += 1;
        }
        at += len;
    }
    n
}

/// The writing half of a log: owns the segment files; one task per log per shard.
pub struct Writer {
    dir: PathBuf,
    kind: LogKind,
    shard: u16,
    file: Option<glommio::io::DmaFile>,
    seg: u64,
    /// Logical end of the data in the active segment.
    pos: u64,
    /// End of what the last successful sync of the active segment made durable (0:
    /// nothing, not even its header).
    durable: u64,
    /// The bytes of the last, partial, block (rewritten with the next commit).
    tail: Vec<u8>,
    /// The commit record written after a commit's last batch.
    mark: Vec<u8>,
    /// Segments the commit under way wrote to and left for a new one, with where
    /// their data ended before it (cut back there if the commit fails).
    left: Vec<(u64, u64)>,
    sizes: BTreeMap<u64, u64>,
}

impl Writer {
    /// A writer for a log directory (created if missing); existing segments are
    /// listed with their sizes for the metrics.
    pub fn new(dir: PathBuf, kind: LogKind, shard: u16, existing: BTreeMap<u64, u64>) -> Writer {
        Writer {
            dir,
            kind,
            shard,
            file: None,
            seg: u64::MAX,
            pos: 0,
            durable: 0,
            tail: Vec::new(),
            mark: Vec::new(),
            left: Vec::new(),
            sizes: existing,
        }
    }

    async fn open_segment(&mut self, seg: u64) -> std::io::Result<()> {
        if let Some(f) = self.file.take() {
            // The commit's sync covers only the file it ends in: what this commit
            // wrote to the segment being closed is made durable here.
            let synced = f.fdatasync().await.map_err(glommio_err);
            let _ = f.close().await;
            synced?;
            // Should the commit fail later, what it wrote there is cut off too.
            self.left.push((self.seg, self.durable));
        }
        self.pos = 0;
        self.durable = 0;
        self.tail.clear();
        let path = self.dir.join(segment_name(seg));
        let opened = glommio::io::OpenOptions::new().create_new(true).write(true).read(true).dma_open(&path).await;
        // Not made (a file of that name is in the way, no space): nothing of ours to
        // cut or delete.
        self.seg = u64::MAX;
        let file = opened.map_err(glommio_err)?;
        // From here on a failure concerns the new segment (abandon deletes it: nothing
        // in it is durable yet).
        self.seg = seg;
        // New segments fsync their directory, so the file itself survives a crash.
        let dir = glommio::io::Directory::open(&self.dir).await.map_err(glommio_err)?;
        dir.sync().await.map_err(glommio_err)?;
        let _ = dir.close().await;
        self.file = Some(file);
        self.tail.extend_from_slice(&header(self.kind, self.shard));
        self.pos = HEADER_LEN as u64;
        self.sizes.insert(seg, 0);
        Ok(())
    }

    /// Write one batch (records of one segment) after the current position; the last
    /// batch of a commit (`ends_commit`) is followed by a [`rtype::COMMIT`] record
    /// naming where the commit's bytes start in this segment (0 when it opened the
    /// segment: its header is the commit's too).
    async fn write(&mut self, seg: u64, data: &[u8], ends_commit: bool) -> std::io::Result<()> {
        let fresh = seg != self.seg || self.file.is_none();
        if fresh {
            self.open_segment(seg).await?;
        }
        let start = if fresh { 0 } else { self.pos };
        self.mark.clear();
        if ends_commit {
            frame_record(&mut self.mark, rtype::COMMIT, &[&start.to_be_bytes()]);
        }
        let Some(file) = self.file.as_ref() else { return Err(std::io::Error::other("no segment")) };
        let align = file.alignment();
        let block_start = self.pos - self.tail.len() as u64;
        let total = self.tail.len() + data.len() + self.mark.len();
        let padded = total.div_ceil(align as usize) * align as usize;
        let mut buf = file.alloc_dma_buffer(padded.max(align as usize));
        let bytes = buf.as_bytes_mut();
        let (old, rest) = bytes.split_at_mut(self.tail.len());
        old.copy_from_slice(&self.tail);
        let (new, rest) = rest.split_at_mut(data.len());
        new.copy_from_slice(data);
        let (mark, pad) = rest.split_at_mut(self.mark.len());
        mark.copy_from_slice(&self.mark);
        pad.fill(0);
        // Keep the bytes of the last partial block for the next commit, which writes
        // that block again.
        let end = block_start + total as u64;
        let keep = (end % align) as usize;
        self.tail.clear();
        self.tail.extend_from_slice(&bytes[total - keep..total]);
        let n = file.write_at(buf, block_start).await.map_err(glommio_err)?;
        if n < total {
            return Err(std::io::Error::other("short write"));
        }
        self.pos = end;
        self.sizes.insert(seg, self.pos);
        Ok(())
    }

    async fn sync(&mut self) -> std::io::Result<()> {
        match self.file.as_ref() {
            Some(f) => {
                f.fdatasync().await.map_err(glommio_err)?;
                self.durable = self.pos;
                self.left.clear();
                Ok(())
            }
            None => {
                self.left.clear();
                Ok(())
            }
        }
    }

    /// Cut the active segment back to what its last successful sync made durable
    /// (what a failed commit wrote was never acknowledged) and stop using it; a
    /// segment with nothing durable is deleted (left empty, it would sit in the middle
    /// of the log without a header).
    async fn abandon(&mut self) {
        if let Some(f) = self.file.take() {
            let _ = f.close().await;
        }
        // The segments the failed commit wrote to and left (synced, but nothing of
        // this commit was acknowledged: its publishes are rejected, so they must not
        // come back after a restart).
        for (seg, durable) in std::mem::take(&mut self.left) {
            self.cut_back(seg, durable);
        }
        if self.seg != u64::MAX {
            self.cut_back(self.seg, self.durable);
        }
    }

    /// Cut segment `seg` back to `durable` bytes, deleting it when that is nothing.
    fn cut_back(&mut self, seg: u64, durable: u64) {
        let path = self.dir.join(segment_name(seg));
        let cut = if durable == 0 {
            self.sizes.remove(&seg);
            match std::fs::remove_file(&path) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e),
                _ => std::fs::File::open(&self.dir).and_then(|d| d.sync_all()),
            }
        } else {
            self.sizes.insert(seg, durable);
            std::fs::OpenOptions::new().write(true).open(&path).and_then(|f| {
                f.set_len(durable)?;
                f.sync_all()
            })
        };
        if let Err(e) = cut {
            tracing::error!(segment = %path.display(), error = %e, "could not cut a failed segment back");
        }
    }

    fn remove(&mut self, seg: u64) {
        if seg == self.seg {
            return;
        }
        self.sizes.remove(&seg);
        let _ = std::fs::remove_file(self.dir.join(segment_name(seg)));
    }
}

/// Store health, readable from every shard (produce credit towards a channel stops
/// while its home's store cannot write).
#[derive(Debug, Clone)]
pub struct Health {
    /// False while any of the shard's logs is failing: from a failed write or sync
    /// until that log's next commit succeeds.
    pub healthy: std::sync::Arc<std::sync::atomic::AtomicBool>,
    /// The shard's logs now failing, one bit each ([`LogKind`] as the bit); both
    /// commit loops run on the shard's thread. Before, one log's success set the
    /// shard healthy while the other was still failing.
    failing: std::rc::Rc<std::cell::Cell<u8>>,
}

impl Health {
    /// The health of one shard, shared by its logs.
    pub fn new(healthy: std::sync::Arc<std::sync::atomic::AtomicBool>) -> Health {
        Health { healthy, failing: std::rc::Rc::default() }
    }

    fn set(&self, kind: LogKind, ok: bool) {
        let bit = kind as u8;
        let failing = if ok { self.failing.get() & !bit } else { self.failing.get() | bit };
        self.failing.set(failing);
        self.healthy.store(failing == 0, std::sync::atomic::Ordering::Relaxed);
    }
}

/// The group-commit loop of one log: whenever records or acks are pending, write
/// them all, fdatasync once, then release the acks. On failure, reject what was
/// waiting (never `accepted` for what is not stored) and retry every second.
///
/// `release` gets the acks of one commit together and drains them (the shard reads
/// its clock once for them, not once per ack).
pub async fn commit_loop(
    journal: Rc<RefCell<Journal>>,
    mut writer: Writer,
    release: impl Fn(&mut Vec<ShardMsg>),
    health: Health,
) {
    loop {
        futures_lite::future::poll_fn(|cx| {
            let mut j = journal.borrow_mut();
            // A failed log commits again even with nothing to write (a probe: writing
            // resumes on a fresh segment), so its shard does not stay unhealthy, its
            // producers without credit, for want of a record to write.
            if j.has_work() || !j.healthy {
                std::task::Poll::Ready(())
            } else {
                j.waker = Some(cx.waker().clone());
                std::task::Poll::Pending
            }
        })
        .await;
        let (batches, mut acks, mut moved) = journal.borrow_mut().take();
        let records: u64 = batches.iter().map(|b| b.2).sum();
        let bytes: u64 = batches.iter().map(|b| b.1.len() as u64).sum();
        let mut result = Ok(());
        for (i, (seg, data, _)) in batches.iter().enumerate() {
            if data.is_empty() && *seg == writer.seg {
                continue;
            }
            if let Err(e) = writer.write(*seg, data, i + 1 == batches.len()).await {
                result = Err(e);
                break;
            }
        }
        let started = Instant::now();
        if result.is_ok() {
            result = writer.sync().await;
        }
        let took = started.elapsed();
        let failed = result.is_err();
        match result {
            Ok(()) => {
                {
                    let mut j = journal.borrow_mut();
                    j.healthy = true;
                    let s = &mut j.stats;
                    s.commits += 1;
                    s.commit_records += records;
                    s.bytes_written += bytes;
                    s.fsyncs += 1;
                    s.fsync_seconds += took.as_secs_f64();
                    let b = FSYNC_BUCKETS.iter().position(|b| took.as_secs_f64() <= *b).unwrap_or(FSYNC_BUCKETS.len());
                    s.fsync_buckets[b] += 1;
                }
                health.set(writer.kind, true);
                release(&mut acks);
                journal.borrow_mut().committed(&mut moved);
                let gone = journal.borrow_mut().reclaimable(writer.seg);
                for seg in gone {
                    writer.remove(seg);
                }
                let mut j = journal.borrow_mut();
                j.stats.segments = writer.sizes.len() as u64;
                j.stats.segment_bytes = writer.sizes.values().sum();
            }
            Err(e) => {
                tracing::error!(log = writer.kind.dir(), error = %e, "store write failed; rejecting unsettled publishes until it recovers");
                {
                    let mut j = journal.borrow_mut();
                    j.healthy = false;
                    j.stats.errors += 1;
                    j.commit_failed(&mut moved, &batches);
                }
                health.set(writer.kind, false);
                // Whatever reached the file after the last good commit is cut off and
                // the log continues in a fresh segment, so a torn region never ends
                // up in the middle of the log. Then the publishers hear: a rejected
                // publish's record is gone from the file by then.
                writer.abandon().await;
                journal.borrow_mut().resume_after_failure(&batches);
                let mut rejected: Vec<ShardMsg> = acks.drain(..).map(reject).collect();
                release(&mut rejected);
            }
        }
        journal.borrow_mut().recycle(batches, acks);
        if failed {
            glommio::timer::sleep(Duration::from_secs(1)).await;
        }
    }
}

fn reject(m: ShardMsg) -> ShardMsg {
    match m {
        ShardMsg::PublishDone { ack, .. } => {
            ShardMsg::PublishDone { ack, result: Err(crate::broker::PublishRefusal::StoreUnavailable) }
        }
        ShardMsg::DeadLettered { key, id, .. } => ShardMsg::DeadLettered { key, id, ok: false },
        other => other,
    }
}

fn glommio_err(e: glommio::GlommioError<()>) -> std::io::Error {
    std::io::Error::other(e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A commit that went on into a new segment and failed there (the new segment
    /// could not be made) cuts what it wrote to the segment it left, though that one
    /// was synced: its publishes are rejected, so they must not come back after a
    /// restart. Before, they stayed in the segment left and a restart brought them
    /// back.
    #[test]
    fn a_failed_commit_cuts_what_it_wrote_to_the_segment_it_left() {
        let data = std::env::temp_dir().join(format!("sluice-writer-left-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&data);
        let dir = log_dir(&data, 0, LogKind::Queues);
        std::fs::create_dir_all(&dir).unwrap();
        let publish = |id: u64| {
            let mut out = Vec::new();
            frame_record(
                &mut out,
                rtype::QUEUE_PUBLISH,
                &[&[1], &4u16.to_be_bytes(), b"left", &id.to_be_bytes(), &0u64.to_be_bytes(), b"m"],
            );
            out
        };
        let d = dir.clone();
        let (kept, failed) = glommio::LocalExecutorBuilder::default()
            .spawn(move || async move {
                let mut w = Writer::new(d.clone(), LogKind::Queues, 0, BTreeMap::new());
                w.write(1, &publish(1), true).await.unwrap();
                w.sync().await.unwrap();
                let kept = w.durable;
                // The next commit: a record for segment 1, then segment 2, which a file
                // in the way keeps from being made.
                std::fs::write(d.join(segment_name(2)), b"in the way").unwrap();
                w.write(1, &publish(2), false).await.unwrap();
                let failed = w.write(2, &publish(3), true).await.is_err();
                w.abandon().await;
                (kept, failed)
            })
            .unwrap()
            .join()
            .unwrap();
        assert!(failed);
        assert_eq!(std::fs::metadata(dir.join(segment_name(1))).unwrap().len(), kept);
        assert_eq!(std::fs::read(dir.join(segment_name(2))).unwrap(), b"in the way", "not ours to delete");
        std::fs::remove_file(dir.join(segment_name(2))).unwrap();
        let r = crate::store::recovery::recover(&data, 0, crate::store::recovery::Mode::Start).unwrap();
        let ids: Vec<u64> = r.queues.values().flat_map(|m| m.keys().copied()).collect();
        assert_eq!(ids, vec![1], "the rejected publish came back");
        let _ = std::fs::remove_dir_all(&data);
    }

    fn marks(j: &mut Journal, n: u32) {
        let name = "n".repeat(250);
        for i in 0..n {
            j.seq_marks
                .insert(ChannelKey::new(Pattern::EventsStore, &format!("{name}{i}")), Mark { next: 1, kept: false });
        }
    }

    /// A snapshot of cursors and marks larger than a segment (about 83 MB here) is
    /// written once when the segment rolls; the records after it stay in the new
    /// segment until another `SEGMENT_BYTES` of them. (Before: every write of the
    /// snapshot rolled again from inside itself, without end.)
    #[test]
    fn a_snapshot_larger_than_a_segment_is_written_once_per_segment() {
        let mut j = Journal::enabled(LogKind::Events, 1, BTreeMap::new());
        marks(&mut j, 300_000);
        j.active_bytes = SEGMENT_BYTES - 1;
        j.push(rtype::SEQ_MARK, &[b"first"], false);
        assert_eq!(j.active, 2, "one roll");
        assert!(j.snapshot_bytes > SEGMENT_BYTES, "snapshot {} bytes", j.snapshot_bytes);
        assert_eq!(j.active_bytes, j.snapshot_bytes);
        for _ in 0..10_000 {
            j.push(rtype::SEQ_MARK, &[&[0u8; 100]], false);
        }
        assert_eq!(j.active, 2, "no roll per record");
        let in_seg2: u64 = j.batches.iter().filter(|b| b.0 == 2).map(|b| b.2).sum();
        assert_eq!(in_seg2, 300_000 + 10_000);
    }

    /// A commit being written and synced keeps the journal busy, so shutdown waits for
    /// it (before, `busy` looked only at work not yet taken, and a clean shutdown could
    /// end the shard in the middle of the last commit's fdatasync).
    #[test]
    fn a_commit_in_flight_keeps_the_journal_busy() {
        let mut j = Journal::enabled(LogKind::Events, 1, BTreeMap::new());
        assert!(!j.busy());
        j.push(rtype::SEQ_MARK, &[b"one"], false);
        assert!(j.busy());
        let (batches, acks, _) = j.take();
        assert!(j.busy(), "taken, not yet written");
        j.recycle(batches, acks);
        assert!(!j.busy());
    }

    /// The shard is healthy only while both its logs are: a commit of one log does not
    /// clear the other's failure.
    #[test]
    fn one_log_succeeding_does_not_hide_the_others_failure() {
        let h = Health::new(std::sync::Arc::new(std::sync::atomic::AtomicBool::new(true)));
        let healthy = || h.healthy.load(std::sync::atomic::Ordering::Relaxed);
        h.set(LogKind::Queues, false);
        assert!(!healthy());
        h.set(LogKind::Events, true);
        assert!(!healthy(), "the events log's commit hid the queues log's failure");
        h.set(LogKind::Events, false);
        h.set(LogKind::Queues, true);
        assert!(!healthy());
        h.set(LogKind::Events, true);
        assert!(healthy());
    }

    /// A moved cursor's record under the new identity comes before the old one's
    /// tombstone in the log.
    #[test]
    fn a_moved_cursor_is_written_before_the_old_one_is_deleted() {
        let mut j = Journal::enabled(LogKind::Events, 1, BTreeMap::new());
        let key = ChannelKey::new(Pattern::EventsStore, "es");
        j.cursor(&key, "old-id", 5);
        let (batches, acks, _) = j.take();
        j.recycle(batches, acks);
        j.move_cursor(&key, "old-id", "new-id", 5);
        let (batches, acks, _) = j.take();
        let data: Vec<u8> = batches.iter().flat_map(|b| b.1.iter().copied()).collect();
        j.recycle(batches, acks);
        let find = |needle: &[u8]| data.windows(needle.len()).position(|w| w == needle);
        let new_at = find(b"new-id").expect("the new identity's record");
        let old_at = find(b"old-id").expect("the old identity's tombstone");
        assert!(new_at < old_at, "new record at {new_at}, tombstone at {old_at}");
        // Nothing is written twice when the subscription then sets the same cursor.
        j.cursor(&key, "new-id", 5);
        let (batches, acks, _) = j.take();
        assert!(batches.iter().all(|b| b.1.is_empty()));
        j.recycle(batches, acks);
    }

    fn queue_key() -> ChannelKey {
        ChannelKey::new(Pattern::Queues, "q")
    }

    /// A queue journal with one message in segment 1, committed, and two later
    /// segments (so that segment 1 is old enough to be compacted).
    fn journal_with_old_message() -> (Journal, u64) {
        let mut j = Journal::enabled(LogKind::Queues, 1, BTreeMap::new());
        let old = j.queue_publish(&queue_key(), 1, 0, b"m");
        let (_, _, mut moved) = j.take();
        j.committed(&mut moved);
        assert!(j.reclaimable(u64::MAX).is_empty());
        j.roll();
        j.roll();
        assert_eq!(j.oldest_pinned(), Some((old, 1)));
        (j, old)
    }

    /// Compaction while a commit is being written: the old segment is deleted only
    /// after the commit that carries the message's new record, not after the one in
    /// flight (which would leave the accepted message in memory only until the next
    /// commit: lost in a crash).
    #[test]
    fn a_compacted_segment_is_kept_until_the_commit_with_the_new_record() {
        let (mut j, old) = journal_with_old_message();
        let (_in_flight, _, mut moved1) = j.take();
        let new = j.queue_publish(&queue_key(), 1, 0, b"m");
        j.moved_from(old);
        assert_ne!(new, old);
        j.committed(&mut moved1);
        assert!(!j.reclaimable(u64::MAX).contains(&old), "segment deleted while the new record was only in memory");
        let (batches, _, mut moved2) = j.take();
        assert!(batches.iter().any(|b| b.0 == new && b.2 > 0), "the next commit carries the new record");
        j.committed(&mut moved2);
        assert!(j.reclaimable(u64::MAX).contains(&old));
    }

    /// A commit that carried compacted records fails: the old segment stays until
    /// the messages are appended again and that append is committed.
    #[test]
    fn a_failed_compaction_keeps_the_old_segment_until_the_messages_are_appended_again() {
        let (mut j, old) = journal_with_old_message();
        let new = j.queue_publish(&queue_key(), 1, 0, b"m");
        j.moved_from(old);
        let (batches, _, mut moved) = j.take();
        j.commit_failed(&mut moved, &batches);
        j.resume_after_failure(&batches);
        // A later commit succeeds before anything is appended again.
        let (_, _, mut moved) = j.take();
        j.committed(&mut moved);
        assert!(!j.reclaimable(u64::MAX).contains(&old), "old segment deleted after its copy was cut");
        let suspect = j.take_suspects();
        assert!(suspect.contains(&new), "the segment whose records were cut is suspect: {suspect:?}");
        assert!(j.take_suspects().is_empty(), "taken once");
        j.queue_publish(&queue_key(), 1, 0, b"m");
        j.moved_from(new);
        j.redo_done();
        let (_, _, mut moved) = j.take();
        j.committed(&mut moved);
        let gone = j.reclaimable(u64::MAX);
        assert!(gone.contains(&old) && gone.contains(&new), "{gone:?}");
    }

    /// (type, channel-local id) of the framed records of `data`.
    fn record_ids(data: &[u8]) -> Vec<(u8, u64)> {
        let mut v = Vec::new();
        let mut at = 0;
        while let Some(head) = data.get(at..at + RECORD_HEAD) {
            let len = record_body_len(head);
            let body = &data[at + RECORD_HEAD..at + RECORD_HEAD + len];
            // Body: pattern, name length (u16), name, then the id (u64).
            let name = u16::from_be_bytes([body[1], body[2]]) as usize;
            let id = u64::from_be_bytes(body[3 + name..11 + name].try_into().unwrap());
            v.push((head[1], id));
            at += RECORD_HEAD + len;
        }
        v
    }

    /// A commit fails while records were appended after it was taken: those records
    /// go to the fresh segment (before, they stayed queued for the cut segment, the
    /// next commit failed to create that segment again and dropped them: an ack among
    /// them brought its accepted message back after a restart), and so do the failed
    /// commit's acks and receive counts, but not its publishes (rejected).
    #[test]
    fn records_of_a_failed_segment_go_on_in_the_next_one() {
        let mut j = Journal::enabled(LogKind::Queues, 1, BTreeMap::new());
        let seg = j.queue_publish(&queue_key(), 1, 0, b"one");
        let (_, _, mut moved) = j.take();
        j.committed(&mut moved);
        // The commit that fails: an ack of 1, a publish of 2.
        j.queue_ack(&queue_key(), 1, seg);
        j.queue_publish(&queue_key(), 2, 0, b"two");
        let (failed, _, mut moved) = j.take();
        // Appended while it is being written, also after a roll to the next segment.
        j.queue_publish(&queue_key(), 3, 0, b"three");
        j.queue_delivered(&queue_key(), 3, 1);
        j.roll();
        j.queue_publish(&queue_key(), 4, 0, b"four");
        j.commit_failed(&mut moved, &failed);
        j.resume_after_failure(&failed);
        let (next, _, _) = j.take();
        let written: Vec<_> = next.iter().filter(|b| !b.1.is_empty()).collect();
        assert_eq!(written.len(), 1, "one segment: {:?}", next.iter().map(|b| b.0).collect::<Vec<_>>());
        assert_eq!(written[0].0, seg + 2);
        assert_eq!(
            record_ids(&written[0].1),
            vec![
                (rtype::QUEUE_ACK, 1),
                (rtype::QUEUE_PUBLISH, 3),
                (rtype::QUEUE_DELIVERED, 3),
                (rtype::QUEUE_PUBLISH, 4)
            ]
        );
        assert_eq!(written[0].2, 4);
    }

    /// The segment a commit is still writing when the log rolls, and whose messages
    /// are all settled by the end of that commit, is deleted once the writer has moved
    /// on. Before, it left the live map while the writer could not delete it (the
    /// file it had open) and stayed on disk, untracked, until the next restart.
    #[test]
    fn a_segment_emptied_while_the_writer_has_it_open_is_deleted_later() {
        let mut j = Journal::enabled(LogKind::Queues, 1, BTreeMap::new());
        let seg = j.queue_publish(&queue_key(), 1, 0, b"m");
        let (_, _, mut moved) = j.take();
        j.roll();
        j.queue_ack(&queue_key(), 1, seg);
        j.committed(&mut moved);
        assert!(j.reclaimable(seg).is_empty(), "deleted while the writer has it open");
        assert_eq!(j.reclaimable(seg + 1), vec![seg]);
    }

    /// Marks of forgotten channels past the limit are folded into floors that are
    /// logged: after the segments holding the old marks are gone, a restart still
    /// starts every folded name above every number it had, and the marks kept stay
    /// within the limit. (Before: every name ever used kept its mark in memory and in
    /// every segment's snapshot.)
    #[test]
    fn folded_marks_survive_on_disk_as_floors() {
        let key = |i: u64| ChannelKey::new(Pattern::EventsStore, &format!("churn-{i}"));
        let mut j = Journal::enabled(LogKind::Events, 1, BTreeMap::new());
        for i in 0..40u64 {
            for seq in 1..=i + 1 {
                j.store_publish(&key(i), seq, 0, b"e");
            }
        }
        assert_eq!(j.stats.seq_marks, 40);
        // Channel 0 is still kept by its shard: its mark is never folded.
        for i in 1..40 {
            j.channel_forgotten(&key(i));
        }
        let folded = j.trim_marks(8);
        assert_eq!(folded, 39 - 6, "a quarter of the room is freed");
        assert_eq!(j.stats.seq_marks, 7);
        assert_eq!(j.stats.seq_marks_folded, 33);
        assert_eq!(j.start_seq(&key(0)), 2);
        for i in 1..40 {
            assert!(j.start_seq(&key(i)) > i + 1, "channel {i} would restart at {}", j.start_seq(&key(i)));
        }
        assert_eq!(j.trim_marks(8), 0, "within the limit now");
        // The segment with the publishes and the old marks is deleted; what is left is
        // the segment after it, starting with the snapshot.
        let _ = j.take();
        j.roll();
        let (batches, _, _) = j.take();
        let dir = std::env::temp_dir().join(format!("sluice-floors-{}", std::process::id()));
        let log = log_dir(&dir, 0, LogKind::Events);
        std::fs::create_dir_all(&log).unwrap();
        let mut seg = header(LogKind::Events, 0).to_vec();
        for (id, data, _) in &batches {
            assert_eq!(*id, 2);
            seg.extend_from_slice(data);
        }
        std::fs::write(log.join(segment_name(2)), &seg).unwrap();
        let rec = recovery::recover(&dir, 0, recovery::Mode::Verify).unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
        assert_eq!(rec.seq_marks.len(), 7);
        let mut again = Journal::enabled(LogKind::Events, 3, BTreeMap::new());
        again.restore_marks(rec.cursors, rec.seq_marks, rec.seq_floors);
        for i in 0..40 {
            assert!(again.start_seq(&key(i)) > i + 1, "after a restart channel {i} would restart");
        }
    }

    /// Restoring the same snapshot at start-up does not recurse either.
    #[test]
    fn restoring_a_snapshot_larger_than_a_segment() {
        let mut j = Journal::enabled(LogKind::Events, 7, BTreeMap::new());
        let mut big = Journal::disabled(LogKind::Events);
        marks(&mut big, 300_000);
        let marks = big.seq_marks.drain().map(|(k, m)| (k, m.next)).collect();
        j.restore_marks(HashMap::new(), marks, Vec::new());
        assert_eq!(j.active, 7);
        assert!(j.snapshot_bytes > SEGMENT_BYTES);
        j.push(rtype::SEQ_MARK, &[b"next"], false);
        assert_eq!(j.active, 7);
    }
}
