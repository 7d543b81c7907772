//! Recovery: read a shard's logs at start-up and rebuild what is live.
//!
//! A record that fails its checks in the last segment, with nothing valid after it
//! or (format 2) with only the rest of the last commit after it, is a torn tail (the
//! last commit did not finish: nothing in it was acknowledged): the segment is cut
//! there. Anything else that fails is corruption in the middle of
//! the log: recovery refuses, naming the file and the offset, and `sluice store
//! repair` can cut the log there (losing what follows, which it reports).

use super::{log_dir, pattern_from, rtype, LogKind, HEADER_LEN, MAGIC, MAX_RECORD, RECORD_HEAD, RECORD_MARK};
use crate::broker::address::ChannelKey;
use bytes::Bytes;
use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::path::{Path, PathBuf};

/// A queue message found in the log.
#[derive(Debug, Clone)]
pub struct RecoveredMessage {
    /// Per-channel id.
    pub id: u64,
    /// Receive time (ms since the epoch).
    pub ts: u64,
    /// Encoded message.
    pub payload: Bytes,
    /// Deliveries so far.
    pub receive_count: u32,
    /// Segment of its publish record.
    pub seg: u64,
}

/// An events-store event found in the log.
#[derive(Debug, Clone)]
pub struct RecoveredEvent {
    /// Receive time (ms since the epoch).
    pub ts: u64,
    /// Encoded message.
    pub payload: Bytes,
    /// Segment of its record.
    pub seg: u64,
}

/// Where a log continues and what pins its segments.
#[derive(Debug, Clone, Default)]
pub struct LogState {
    /// Id of the segment new records go to.
    pub next_segment: u64,
    /// Live references per existing segment.
    pub live: BTreeMap<u64, u64>,
    /// Size of each existing segment.
    pub sizes: BTreeMap<u64, u64>,
}

/// What one shard's logs hold.
#[derive(Debug, Default)]
pub struct RecoveredShard {
    /// Queue messages per channel, by id (publish order).
    pub queues: HashMap<ChannelKey, BTreeMap<u64, RecoveredMessage>>,
    /// Highest queue message id ever seen per channel.
    pub queue_ids: HashMap<ChannelKey, u64>,
    /// Events per channel, by sequence number.
    pub events: HashMap<ChannelKey, BTreeMap<u64, RecoveredEvent>>,
    /// Durable cursors: (channel, identity) -> next sequence.
    pub cursors: HashMap<(ChannelKey, String), u64>,
    /// Next sequence number per events-store channel.
    pub seq_marks: HashMap<ChannelKey, u64>,
    /// Sequence floors by bucket (empty when none was logged).
    pub seq_floors: Vec<u64>,
    /// The queues log.
    pub queue_log: LogState,
    /// The events log.
    pub events_log: LogState,
    /// Records read.
    pub records: u64,
    /// Bytes read.
    pub bytes: u64,
    /// Torn tails cut (file, offset, bytes dropped).
    pub torn: Vec<(PathBuf, u64, u64)>,
    /// Segment files with nothing ever written to them (empty, or zeros only: created
    /// by a commit that failed or was cut by a crash before its first block reached
    /// the disk), deleted at start and by repair, listed by verify.
    pub unwritten: Vec<PathBuf>,
}

/// Why recovery stopped.
#[derive(Debug)]
pub enum RecoveryError {
    /// A record in the middle of the log fails its checks.
    Corrupt {
        /// The segment.
        file: PathBuf,
        /// Byte offset of the bad record.
        offset: u64,
        /// What is wrong.
        reason: String,
    },
    /// The log could not be read.
    Io {
        /// The file or directory.
        file: PathBuf,
        /// The error.
        error: std::io::Error,
    },
}

impl fmt::Display for RecoveryError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RecoveryError::Corrupt { file, offset, reason } => write!(
                f,
                "corrupt record in {} at offset {offset}: {reason}; refusing to start (run `sluice store repair` to cut the log there)",
                file.display()
            ),
            RecoveryError::Io { file, error } => write!(f, "cannot read {}: {error}", file.display()),
        }
    }
}

impl std::error::Error for RecoveryError {}

/// What to do with damage.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Start-up: cut torn tails, refuse corruption.
    Start,
    /// `store verify`: change nothing, report both.
    Verify,
    /// `store repair`: cut torn tails and cut the log at corruption.
    Repair,
}

/// Read both logs of shard `shard` under `data_dir`.
pub fn recover(data_dir: &Path, shard: usize, mode: Mode) -> Result<RecoveredShard, RecoveryError> {
    let mut r = RecoveredShard::default();
    for kind in [LogKind::Queues, LogKind::Events] {
        let dir = log_dir(data_dir, shard, kind);
        let state = read_log(&dir, kind, mode, &mut r)?;
        match kind {
            LogKind::Queues => r.queue_log = state,
            LogKind::Events => r.events_log = state,
        }
    }
    // What is still live pins its segment.
    for msgs in r.queues.values() {
        for m in msgs.values() {
            *r.queue_log.live.entry(m.seg).or_insert(0) += 1;
        }
    }
    for evs in r.events.values() {
        for e in evs.values() {
            *r.events_log.live.entry(e.seg).or_insert(0) += 1;
        }
    }
    // Every segment on disk is tracked, also one with nothing live: segments are
    // deleted oldest first once nothing in them is live, so one left out would never
    // go, and the later segments that hold what supersedes its records (the acks of
    // its messages) could be deleted before it, bringing those records back.
    for log in [&mut r.queue_log, &mut r.events_log] {
        for &id in log.sizes.keys() {
            log.live.entry(id).or_insert(0);
        }
    }
    Ok(r)
}

/// Segment ids in a log directory, sorted (the directory is created if missing).
pub fn segments(dir: &Path) -> Result<Vec<u64>, RecoveryError> {
    std::fs::create_dir_all(dir).map_err(|error| RecoveryError::Io { file: dir.to_owned(), error })?;
    let rd = std::fs::read_dir(dir).map_err(|error| RecoveryError::Io { file: dir.to_owned(), error })?;
    let mut ids = Vec::new();
    for e in rd.flatten() {
        let name = e.file_name();
        let name = name.to_string_lossy();
        if let Some(id) = name.strip_suffix(".log").and_then(|n| n.parse::<u64>().ok()) {
            ids.push(id);
        }
    }
    ids.sort_unstable();
    Ok(ids)
}

fn read_log(dir: &Path, kind: LogKind, mode: Mode, r: &mut RecoveredShard) -> Result<LogState, RecoveryError> {
    let ids = segments(dir)?;
    let mut state = LogState::default();
    for (i, &id) in ids.iter().enumerate() {
        let path = dir.join(super::segment_name(id));
        let last = i + 1 == ids.len();
        let buf = std::fs::read(&path).map_err(|error| RecoveryError::Io { file: path.clone(), error })?;
        if buf.iter().all(|b| *b == 0) {
            // Never written (a commit writes the header with its first records and
            // syncs before anything in it is acknowledged): nothing to recover.
            if mode != Mode::Verify {
                std::fs::remove_file(&path).map_err(|error| RecoveryError::Io { file: path.clone(), error })?;
            }
            r.unwritten.push(path);
            state.next_segment = id.saturating_add(1);
            continue;
        }
        let end = match scan(&buf, kind, id, r) {
            Ok(end) => end,
            Err(Damage { offset, reason, unreadable }) => {
                let torn = last && torn_at(&buf, offset, unreadable);
                match (torn, mode) {
                    (true, Mode::Verify) => {
                        r.torn.push((path.clone(), offset as u64, (buf.len() - offset) as u64));
                        offset
                    }
                    (true, _) | (false, Mode::Repair) => {
                        cut(&path, offset as u64)?;
                        r.torn.push((path.clone(), offset as u64, (buf.len() - offset) as u64));
                        if !last && mode == Mode::Repair {
                            // Everything after a corrupt record is cut away with it.
                            for &later in &ids[i + 1..] {
                                let p = dir.join(super::segment_name(later));
                                let size = std::fs::metadata(&p).map(|m| m.len()).unwrap_or(0);
                                let _ = std::fs::remove_file(&p);
                                r.torn.push((p, 0, size));
                            }
                            state.sizes.insert(id, offset as u64);
                            state.next_segment = id.saturating_add(1);
                            return Ok(state);
                        }
                        offset
                    }
                    (false, _) => {
                        return Err(RecoveryError::Corrupt { file: path, offset: offset as u64, reason });
                    }
                }
            }
        };
        r.bytes += end as u64;
        state.sizes.insert(id, end as u64);
        state.next_segment = id.saturating_add(1);
    }
    Ok(state)
}

fn cut(path: &Path, len: u64) -> Result<(), RecoveryError> {
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(path)
        .map_err(|error| RecoveryError::Io { file: path.to_owned(), error })?;
    f.set_len(len).and_then(|_| f.sync_all()).map_err(|error| RecoveryError::Io { file: path.to_owned(), error })
}

/// A valid record header + checksum at `at`: its total length.
fn record_at(buf: &[u8], at: usize) -> Option<usize> {
    let mut unlimited = usize::MAX;
    record_at_within(buf, at, &mut unlimited)
}

/// [`record_at`], taking the bytes it checksums from `budget` (None once spent).
fn record_at_within(buf: &[u8], at: usize, budget: &mut usize) -> Option<usize> {
    let h = buf.get(at..at + RECORD_HEAD)?;
    if h[0] != RECORD_MARK {
        return None;
    }
    let len = super::record_body_len(h);
    if len > MAX_RECORD {
        return None;
    }
    let body = buf.get(at + RECORD_HEAD..at + RECORD_HEAD + len)?;
    // A candidate the budget cannot pay for spends what is left: the search stops
    // there (before, it skipped such candidates and could pass over valid records
    // longer than the remainder, taking corruption for a torn tail).
    let Some(left) = budget.checked_sub(len) else {
        *budget = 0;
        return None;
    };
    *budget = left;
    let want = u32::from_be_bytes([h[6], h[7], h[8], h[9]]);
    let crc = crc32c::crc32c_append(crc32c::crc32c(&h[1..6]), body);
    (crc == want).then_some(RECORD_HEAD + len)
}

/// What follows damage at some offset.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum After {
    /// Nothing valid: the data ends in the damage.
    Nothing,
    /// Valid records from this offset to the end of the data.
    Records(usize),
    /// The search spent its budget: taken for valid records (corruption).
    Unknown,
}

/// What follows the damage at `offset`: a valid record and valid records after it to
/// the end of the data, or nothing. A record-shaped run of bytes inside a message
/// payload cut by a crash does not pass for one, since the tail after it is torn too.
/// Checking candidates is bounded (`VERIFY_BUDGET` checksummed bytes); past that the
/// damage is taken as corruption, which stops the start-up and names the file and
/// offset for `store repair`, instead of scanning without end.
fn after_damage(buf: &[u8], offset: usize) -> After {
    let mut budget = VERIFY_BUDGET;
    let data_end = data_end(buf);
    let mut p = offset + 1;
    while let Some(i) = buf.get(p..).and_then(|s| s.iter().position(|b| *b == RECORD_MARK)) {
        let at = p + i;
        if ends_at_a_boundary(buf, at, data_end) {
            if let Some(n) = record_at_within(buf, at, &mut budget) {
                match chain_break(buf, at + n, data_end) {
                    None => return After::Records(at),
                    // Records that stop short of the end (one inside a payload, or
                    // the rest of a torn write): the search goes on from where they
                    // stop, so valid records further on are still found. Before, the
                    // first such run ended the search with "nothing valid", and a
                    // record-shaped payload after damage could pass acknowledged
                    // commits off as a torn tail. Each run is walked once.
                    Some(stop) => {
                        p = stop.max(at + 1);
                        continue;
                    }
                }
            }
            if budget == 0 {
                return After::Unknown;
            }
        }
        p = at + 1;
    }
    After::Nothing
}

/// True when the damage at `offset` of a log's last segment is a torn tail rather
/// than corruption: bytes that fail the length or checksum check (`unreadable`, as a
/// write the disk did not finish leaves them) with nothing valid after them, or
/// (format 2) with only the rest of the last commit after them, which a disk that
/// persists the blocks of one write out of order can leave behind a hole.
fn torn_at(buf: &[u8], offset: usize, unreadable: bool) -> bool {
    match after_damage(buf, offset) {
        // Bytes that make sense but not to this build (a later record type, a header
        // not ours) are never a torn write, even at the very end.
        After::Nothing => unreadable,
        After::Unknown => false,
        After::Records(at) => unreadable && rest_of_last_commit(buf, at, offset),
    }
}

/// The valid records from `at` to the end are the rest of the commit the damage at
/// `offset` lies in, and that commit is the last one: they hold at most one commit
/// record, the last of them, naming a start at or before the damage. (A commit record
/// with records after it means a later commit began, so the damaged one had been
/// synced; so does one naming a start past the damage.) Format 2 only; a segment
/// whose header was lost with the rest of its first block counts as format 2 when its
/// one commit record names start 0 (the commit that opened the segment).
fn rest_of_last_commit(buf: &[u8], mut at: usize, offset: usize) -> bool {
    let header_lost = offset == 0 && buf.iter().take(HEADER_LEN).all(|b| *b == 0);
    let format_2 = offset >= HEADER_LEN && segment_version(buf) == Some(2);
    if !(header_lost || format_2) {
        return false;
    }
    let mut start = None;
    let data_end = data_end(buf);
    while let Some(n) = (at < data_end).then(|| record_at(buf, at)).flatten() {
        if start.is_some() {
            return false;
        }
        if buf[at + 1] == rtype::COMMIT {
            match commit_start(&buf[at + RECORD_HEAD..at + n]) {
                Some(s) => start = Some(s),
                None => return false,
            }
        }
        at += n;
    }
    match start {
        Some(s) => s <= offset as u64,
        None => !header_lost,
    }
}

/// The format version in a segment's header, if it has one.
fn segment_version(buf: &[u8]) -> Option<u16> {
    (buf.get(..8)? == MAGIC).then(|| u16::from_be_bytes([buf[8], buf[9]]))
}

/// The start a commit record's body names.
fn commit_start(body: &[u8]) -> Option<u64> {
    Some(u64::from_be_bytes(body.try_into().ok()?))
}

/// A candidate at `at` whose claimed length ends where the data ends or where another
/// record could start: only such a one can begin valid records to the end, so only it
/// is worth its checksum. Random bytes (a torn compressed payload) pass about one time
/// in 256, so a long torn tail no longer spends the budget and passes for corruption.
/// `data_end` is [`data_end`] of `buf` (found once: a zero run checked per candidate
/// cost its length each time, so a crafted tail of candidates ending before a long run
/// of zeros took time quadratic in the segment's size).
fn ends_at_a_boundary(buf: &[u8], at: usize, data_end: usize) -> bool {
    let Some(h) = buf.get(at..at + RECORD_HEAD) else { return false };
    let len = super::record_body_len(h);
    let end = at + RECORD_HEAD + len;
    len <= MAX_RECORD && end <= buf.len() && (end >= data_end || buf[end] == RECORD_MARK)
}

/// Checksummed bytes [`after_damage`] may spend on candidates.
const VERIFY_BUDGET: usize = 256 << 20;

/// Where valid records from `at` stop short of the end of the data (`data_end`, see
/// [`data_end`]), or None when they run to it.
fn chain_break(buf: &[u8], mut at: usize, data_end: usize) -> Option<usize> {
    loop {
        if at >= data_end {
            return None;
        }
        match record_at(buf, at) {
            Some(n) => at += n,
            None => return Some(at),
        }
    }
}

/// Where a segment's data ends: past its last byte that is not zero (what follows was
/// allocated, never written).
fn data_end(buf: &[u8]) -> usize {
    buf.iter().rposition(|b| *b != 0).map_or(0, |i| i + 1)
}

/// The data of a segment ends at `at`: the end of the file, or only zeros after it
/// (allocated, never written).
fn data_ends_at(buf: &[u8], at: usize) -> bool {
    at >= buf.len() || buf[at] == 0 && buf[at..].iter().all(|b| *b == 0)
}

/// Where and why a segment's scan stopped.
struct Damage {
    /// Byte offset of the bad record (0: the header).
    offset: usize,
    /// What is wrong.
    reason: String,
    /// The bytes there fail the length or checksum check (or the header is zeros), as
    /// a write the disk did not finish leaves them; false for a record that passes
    /// its checksum but does not make sense (an unknown type, a malformed body) and
    /// for a header that is not zeros but not ours: never a torn write.
    unreadable: bool,
}

/// Walk a segment's records; Ok(end of data) or where and why it stopped.
fn scan(buf: &[u8], kind: LogKind, seg: u64, r: &mut RecoveredShard) -> Result<usize, Damage> {
    let bad = |offset: usize, reason: &str, unreadable: bool| Damage { offset, reason: reason.to_owned(), unreadable };
    if buf.len() < HEADER_LEN || buf.iter().take(HEADER_LEN).all(|b| *b == 0) {
        return Err(bad(0, "missing segment header", true));
    }
    if &buf[..8] != MAGIC {
        return Err(bad(0, "not a sluice segment", false));
    }
    let version = u16::from_be_bytes([buf[8], buf[9]]);
    if !(super::OLDEST_FORMAT_VERSION..=super::FORMAT_VERSION).contains(&version) {
        return Err(bad(0, &format!("unsupported format version {version}"), false));
    }
    if buf[10] != kind as u8 {
        return Err(bad(0, "segment of another log", false));
    }
    let mut at = HEADER_LEN;
    loop {
        if data_ends_at(buf, at) {
            return Ok(at.min(buf.len()));
        }
        let Some(n) = record_at(buf, at) else {
            return Err(bad(at, "record fails its length or checksum check", true));
        };
        let rtype = buf[at + 1];
        let body = &buf[at + RECORD_HEAD..at + n];
        apply(rtype, body, seg, r).map_err(|why| bad(at, why, false))?;
        r.records += 1;
        at += n;
    }
}

struct Body<'a> {
    b: &'a [u8],
}

impl<'a> Body<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], &'static str> {
        if n > self.b.len() {
            return Err("record body too short");
        }
        let (h, t) = self.b.split_at(n);
        self.b = t;
        Ok(h)
    }
    fn u16(&mut self) -> Result<u16, &'static str> {
        let s = self.take(2)?;
        Ok(u16::from_be_bytes([s[0], s[1]]))
    }
    fn u32(&mut self) -> Result<u32, &'static str> {
        let s = self.take(4)?;
        Ok(u32::from_be_bytes([s[0], s[1], s[2], s[3]]))
    }
    fn u64(&mut self) -> Result<u64, &'static str> {
        let s = self.take(8)?;
        let mut a = [0u8; 8];
        a.copy_from_slice(s);
        Ok(u64::from_be_bytes(a))
    }
    fn key(&mut self) -> Result<ChannelKey, &'static str> {
        let p = pattern_from(self.take(1)?[0]).ok_or("unknown pattern")?;
        let n = self.u16()? as usize;
        let name = std::str::from_utf8(self.take(n)?).map_err(|_| "channel name is not UTF-8")?;
        Ok(ChannelKey::new(p, name))
    }
}

fn apply(rt: u8, body: &[u8], seg: u64, r: &mut RecoveredShard) -> Result<(), &'static str> {
    let mut b = Body { b: body };
    match rt {
        rtype::QUEUE_PUBLISH => {
            let key = b.key()?;
            let id = b.u64()?;
            let ts = b.u64()?;
            let payload = Bytes::copy_from_slice(b.b);
            let max = r.queue_ids.entry(key.clone()).or_insert(0);
            *max = (*max).max(id);
            let msgs = r.queues.entry(key).or_default();
            let receive_count = msgs.get(&id).map_or(0, |m| m.receive_count);
            msgs.insert(id, RecoveredMessage { id, ts, payload, receive_count, seg });
        }
        rtype::QUEUE_ACK => {
            let key = b.key()?;
            let id = b.u64()?;
            let max = r.queue_ids.entry(key.clone()).or_insert(0);
            *max = (*max).max(id);
            if let Some(msgs) = r.queues.get_mut(&key) {
                msgs.remove(&id);
            }
        }
        rtype::QUEUE_DELIVERED => {
            let key = b.key()?;
            let id = b.u64()?;
            let count = b.u32()?;
            // The latest record holds the count: one lower than the one before is a
            // delivery that never reached its consumer, taken back (`uncount`). Before,
            // the highest count seen won, so after a restart that delivery counted
            // again, towards the dead-letter limit.
            if let Some(m) = r.queues.get_mut(&key).and_then(|q| q.get_mut(&id)) {
                m.receive_count = count;
            }
        }
        rtype::STORE_PUBLISH => {
            let key = b.key()?;
            let seq = b.u64()?;
            let ts = b.u64()?;
            let payload = Bytes::copy_from_slice(b.b);
            let mark = r.seq_marks.entry(key.clone()).or_insert(1);
            *mark = (*mark).max(seq.saturating_add(1));
            r.events.entry(key).or_default().insert(seq, RecoveredEvent { ts, payload, seg });
        }
        rtype::CURSOR => {
            let key = b.key()?;
            let n = b.u16()? as usize;
            let id = std::str::from_utf8(b.take(n)?).map_err(|_| "durable id is not UTF-8")?.to_owned();
            let next = b.u64()?;
            if next == super::CURSOR_DELETED {
                r.cursors.remove(&(key, id));
            } else {
                r.cursors.insert((key, id), next);
            }
        }
        rtype::SEQ_MARK => {
            let key = b.key()?;
            let next = b.u64()?;
            let mark = r.seq_marks.entry(key).or_insert(1);
            *mark = (*mark).max(next);
        }
        rtype::SEQ_FLOOR => {
            let bucket = b.u16()? as usize;
            let next = b.u64()?;
            if bucket >= super::SEQ_FLOOR_BUCKETS {
                return Err("sequence floor bucket out of range");
            }
            if r.seq_floors.is_empty() {
                r.seq_floors = vec![1; super::SEQ_FLOOR_BUCKETS];
            }
            r.seq_floors[bucket] = r.seq_floors[bucket].max(next);
        }
        rtype::COMMIT => {
            commit_start(b.b).ok_or("commit record of the wrong length")?;
        }
        _ => return Err("unknown record type"),
    }
    Ok(())
}

#[cfg(test)]
mod torn_tests {
    use super::*;
    use crate::store::frame_record;
    use std::collections::BTreeMap;

    fn records(n: usize) -> Vec<u8> {
        let mut b = vec![1u8; HEADER_LEN];
        for i in 0..n {
            frame_record(&mut b, 9, &[format!("record {i}").as_bytes()]);
        }
        b
    }

    /// A queues segment of `version` holding `commits` (queue message ids), each
    /// ended by a commit record when `version` has them; the offset of every
    /// message's record.
    fn segment(version: u16, commits: &[&[u64]]) -> (Vec<u8>, BTreeMap<u64, usize>) {
        segment_with(version, commits, |_| b"body".to_vec())
    }

    /// [`segment`] with each message's body given by `body`.
    fn segment_with(
        version: u16,
        commits: &[&[u64]],
        body: impl Fn(u64) -> Vec<u8>,
    ) -> (Vec<u8>, BTreeMap<u64, usize>) {
        let mut buf = crate::store::header(LogKind::Queues, 0).to_vec();
        buf[8..10].copy_from_slice(&version.to_be_bytes());
        let mut at = BTreeMap::new();
        for (i, ids) in commits.iter().enumerate() {
            let start = if i == 0 { 0 } else { buf.len() as u64 };
            for id in *ids {
                at.insert(*id, buf.len());
                let name = b"torn";
                frame_record(
                    &mut buf,
                    rtype::QUEUE_PUBLISH,
                    &[
                        &[1],
                        &(name.len() as u16).to_be_bytes(),
                        name,
                        &id.to_be_bytes(),
                        &7u64.to_be_bytes(),
                        &body(*id),
                    ],
                );
            }
            if version >= 2 {
                frame_record(&mut buf, rtype::COMMIT, &[&start.to_be_bytes()]);
            }
        }
        (buf, at)
    }

    /// Recover a data directory holding `buf` as its only queues segment.
    fn recover_one(name: &str, buf: &[u8]) -> (Result<RecoveredShard, RecoveryError>, Vec<u8>) {
        let data = std::env::temp_dir().join(format!("sluice-recovery-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&data);
        let dir = log_dir(&data, 0, LogKind::Queues);
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join(crate::store::segment_name(1));
        std::fs::write(&file, buf).unwrap();
        let r = recover(&data, 0, Mode::Start);
        let left = std::fs::read(&file).unwrap();
        let _ = std::fs::remove_dir_all(&data);
        (r, left)
    }

    fn ids(r: &RecoveredShard) -> Vec<u64> {
        r.queues.values().flat_map(|m| m.keys().copied()).collect()
    }

    /// A disk persisted the blocks of the last commit out of order: a hole in it, its
    /// later records and its commit record intact. Nothing of that commit was
    /// acknowledged (its sync never returned): a torn tail, cut at the hole, and the
    /// start goes on. Before (format 1's rule), valid records after the damage made it
    /// corruption and the broker refused to start.
    #[test]
    fn a_last_commit_torn_out_of_order_is_cut_at_the_hole() {
        let (mut buf, at) = segment(2, &[&[1, 2], &[3, 4, 5]]);
        buf[at[&3] + RECORD_HEAD + 2] ^= 0xFF;
        let (r, left) = recover_one("hole", &buf);
        let r = r.expect("a torn last commit is not corruption");
        assert_eq!(ids(&r), vec![1, 2]);
        assert_eq!(r.torn.len(), 1);
        assert_eq!(left.len(), at[&3], "cut where the hole starts");
    }

    /// Damage in a commit before the last: a commit started after it, so it was
    /// synced and acknowledged: corruption, as before.
    #[test]
    fn damage_in_a_commit_before_the_last_is_corruption() {
        let (mut buf, at) = segment(2, &[&[1, 2], &[3, 4, 5]]);
        buf[at[&2] + RECORD_HEAD + 2] ^= 0xFF;
        let (r, left) = recover_one("synced", &buf);
        assert!(matches!(r, Err(RecoveryError::Corrupt { offset, .. }) if offset == at[&2] as u64));
        assert_eq!(left, buf, "start-up changes nothing it refuses");
    }

    /// The last commit went on into a segment that a crash kept from existing: its
    /// part here has no commit record. Damage before the previous commit's record is
    /// corruption (a later commit began, so that one was synced), even though no
    /// commit record names a start past it; damage in the unfinished part is torn.
    #[test]
    fn a_commit_record_with_records_after_it_ends_a_synced_commit() {
        let (whole, at) = segment(2, &[&[1, 2], &[3, 4]]);
        let unfinished = &whole[..whole.len() - (RECORD_HEAD + 8)];
        let mut buf = unfinished.to_vec();
        buf[at[&2] + RECORD_HEAD + 2] ^= 0xFF;
        assert!(matches!(recover_one("spanning-synced", &buf).0, Err(RecoveryError::Corrupt { .. })));
        let mut buf = unfinished.to_vec();
        buf[at[&3] + RECORD_HEAD + 2] ^= 0xFF;
        let (r, left) = recover_one("spanning-torn", &buf);
        assert_eq!(ids(&r.unwrap()), vec![1, 2]);
        assert_eq!(left.len(), at[&3]);
    }

    /// Only bytes that fail their length or checksum check can be a torn write: a
    /// record that passes its checksum but makes no sense (a type this build does not
    /// know), followed by the rest of the last commit, is corruption; and so is a
    /// header that is not ours (a later format), never cut.
    #[test]
    fn readable_damage_and_foreign_headers_are_never_cut_as_torn() {
        let (mut buf, at) = segment(2, &[&[1, 2], &[3]]);
        let mut unknown = Vec::new();
        frame_record(&mut unknown, 99, &[b"from a later sluice"]);
        buf.splice(at[&3]..at[&3], unknown);
        // The last commit's record still names where it began: at the unknown record.
        assert!(
            matches!(recover_one("unknown-type", &buf).0, Err(RecoveryError::Corrupt { offset, .. }) if offset == at[&3] as u64)
        );
        // At the very end too: a record of a type this build does not know, and a
        // foreign header with nothing after it. (Before, both were cut as torn tails.)
        let (mut buf, _) = segment(2, &[&[1, 2]]);
        frame_record(&mut buf, 99, &[b"from a later sluice"]);
        let (r, left) = recover_one("unknown-last", &buf);
        assert!(matches!(r, Err(RecoveryError::Corrupt { .. })));
        assert_eq!(left, buf);
        let mut foreign = b"NOTOURS!".to_vec();
        foreign.resize(64, 7);
        let (r, left) = recover_one("foreign-alone", &foreign);
        assert!(matches!(r, Err(RecoveryError::Corrupt { offset: 0, .. })));
        assert_eq!(left, foreign);
        let (mut buf, _) = segment(2, &[&[1, 2]]);
        buf[9] = 3;
        let (r, left) = recover_one("version-3", &buf);
        assert!(matches!(r, Err(RecoveryError::Corrupt { offset: 0, .. })));
        assert_eq!(left, buf);
    }

    /// The commit that opened the last segment lost its first block (the header and
    /// its first records read as zeros) while its commit record, naming start 0,
    /// reached the disk: torn, the segment cut to nothing. Without a commit record
    /// (format 1) it stays corruption.
    #[test]
    fn a_last_segment_that_lost_its_first_block_is_cut_to_nothing() {
        let (mut buf, at) = segment(2, &[&[1, 2, 3]]);
        buf[..at[&2]].fill(0);
        let (r, left) = recover_one("header-lost", &buf);
        assert_eq!(ids(&r.expect("a torn first commit")), Vec::<u64>::new());
        assert!(left.is_empty());
        let (mut buf, at) = segment(1, &[&[1, 2, 3]]);
        buf[..at[&2]].fill(0);
        assert!(matches!(recover_one("header-lost-v1", &buf).0, Err(RecoveryError::Corrupt { offset: 0, .. })));
    }

    /// A version 1 segment has no commit records: damage with valid records after it
    /// stays corruption (there is no telling where its last commit began).
    #[test]
    fn a_version_1_segment_keeps_its_rule() {
        let (mut buf, at) = segment(1, &[&[1, 2], &[3, 4, 5]]);
        buf[at[&3] + RECORD_HEAD + 2] ^= 0xFF;
        assert!(matches!(recover_one("v1", &buf).0, Err(RecoveryError::Corrupt { .. })));
        // Undamaged, it is read as it always was.
        let (buf, _) = segment(1, &[&[1, 2], &[3, 4, 5]]);
        assert_eq!(ids(&recover_one("v1-whole", &buf).0.unwrap()), vec![1, 2, 3, 4, 5]);
    }

    /// A crash cut a record whose payload carries a record-shaped run of bytes (a
    /// message can hold anything): a torn tail, not corruption.
    #[test]
    fn a_record_inside_a_torn_payload_is_not_taken_for_mid_log_data() {
        let mut buf = records(3);
        let torn_at = buf.len();
        let mut fake = Vec::new();
        frame_record(&mut fake, 9, &[b"looks valid"]);
        let mut payload = vec![0x11u8; 50];
        payload.extend_from_slice(&fake);
        payload.extend_from_slice(&[0x22u8; 500]);
        let mut rec = Vec::new();
        frame_record(&mut rec, 9, &[&payload]);
        buf.extend_from_slice(&rec[..rec.len() - 200]); // cut by the crash
        assert_eq!(after_damage(&buf, torn_at), After::Nothing);
    }

    /// Damage in the middle, with valid records after it to the end: corruption.
    #[test]
    fn damage_followed_by_valid_records_is_corruption() {
        let mut buf = records(3);
        let bad_at = buf.len();
        let tail = records(4);
        let mut damaged = tail[HEADER_LEN..].to_vec();
        damaged[3] ^= 0x40; // the first record's length
        buf.extend_from_slice(&damaged);
        assert!(matches!(after_damage(&buf, bad_at), After::Records(_)));
        // And with zeros after the last record (an allocated but unwritten end).
        buf.extend_from_slice(&[0u8; 64]);
        assert!(matches!(after_damage(&buf, bad_at), After::Records(_)));
    }

    /// Many record-shaped candidates, each claiming a long body with a bad checksum
    /// that ends where another candidate starts (so each passes the boundary check),
    /// stop at the budget (taken as corruption) instead of costing time quadratic in
    /// the tail's size.
    #[test]
    fn candidate_checks_are_bounded() {
        let mut buf = records(1);
        let at = buf.len();
        // A multiple of the 10-byte pattern less its header: each body ends on a mark.
        let len = (4u32 << 20) - 4;
        let mut head = vec![RECORD_MARK, 9];
        head.extend_from_slice(&len.to_be_bytes());
        head.extend_from_slice(&[0, 0, 0, 0]);
        let tail: Vec<u8> = head.iter().copied().cycle().take(8 << 20).collect();
        buf.extend_from_slice(&tail);
        assert_eq!(after_damage(&buf, at), After::Unknown);
    }

    /// A crash tore a long payload of random-looking bytes (compressed, encrypted):
    /// a torn tail, cut at start. Without the boundary check before each checksum,
    /// the candidates in 16 MiB of such bytes spent the whole budget and the start was
    /// refused as corruption.
    #[test]
    fn a_long_torn_random_payload_is_a_torn_tail() {
        let mut buf = records(3);
        let torn_at = buf.len();
        let mut x = 0x9E37_79B9_7F4A_7C15u64;
        buf.extend((0..16 << 20).map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 24) as u8
        }));
        assert_eq!(after_damage(&buf, torn_at), After::Nothing);
    }

    /// Candidates that leave part of the budget, then valid records longer than that
    /// part: corruption (the budget is spent), not a torn tail. Before, candidates
    /// the remainder could not pay for were skipped and the search ended with
    /// "nothing valid after it", so start-up cut the valid records away.
    #[test]
    fn valid_records_longer_than_the_budget_left_are_not_taken_for_a_torn_tail() {
        let mut buf = records(1);
        let at = buf.len();
        // The damage, then 51 candidates of 5 MiB with bad checksums: they leave 1 MiB
        // of the 256 MiB budget.
        let len = 5u32 << 20;
        for _ in 0..52 {
            let start = buf.len();
            buf.extend_from_slice(&[RECORD_MARK, 9]);
            buf.extend_from_slice(&len.to_be_bytes());
            buf.extend_from_slice(&[0, 0, 0, 0]);
            buf.resize(start + RECORD_HEAD + len as usize, 0x33);
        }
        for _ in 0..2 {
            frame_record(&mut buf, 9, &[&vec![0x44u8; 2 << 20]]);
        }
        assert_eq!(after_damage(&buf, at), After::Unknown);
    }

    /// A message whose payload holds a well-framed record followed by a byte that
    /// starts no record, damage just before it (its record's checksum), and two
    /// acknowledged commits after: corruption, the file untouched. Before, the search
    /// stopped at the record in the payload, found nothing valid after it and cut the
    /// segment at the damage, acknowledged commits and all, as a torn tail.
    #[test]
    fn a_record_shaped_payload_after_damage_does_not_hide_later_commits() {
        let (mut buf, at) = segment_with(2, &[&[1], &[2], &[3]], |id| {
            if id != 2 {
                return b"body".to_vec();
            }
            let mut body = b"x".to_vec();
            frame_record(&mut body, 9, &[b"a record inside a payload"]);
            body.extend_from_slice(&[RECORD_MARK, b'y']);
            body
        });
        buf[at[&2] + 7] ^= 0xFF; // message 2's record checksum
        let (r, left) = recover_one("payload-record", &buf);
        assert!(
            matches!(r, Err(RecoveryError::Corrupt { offset, .. }) if offset == at[&2] as u64),
            "{:?}",
            r.map(|r| ids(&r))
        );
        assert_eq!(left, buf, "start-up changes nothing it refuses");
    }

    /// A million record-shaped candidates whose claimed bodies all end where 16 MiB
    /// of zeros start, with a byte after the zeros: each is looked at once. Before,
    /// each candidate's boundary check read the whole zero run (about 1.6e13 byte
    /// reads here: start-up, `store verify` and `store repair` never finished).
    #[test]
    fn candidates_ending_before_a_long_zero_run_cost_one_look_each() {
        let mut buf = records(1);
        let damage = buf.len();
        let candidates = 1usize << 20;
        let zeros_at = damage + 1 + candidates * RECORD_HEAD;
        buf.push(0x11); // the damage
        for i in 0..candidates {
            let at = damage + 1 + i * RECORD_HEAD;
            let len = (zeros_at - at - RECORD_HEAD) as u32;
            buf.extend_from_slice(&[RECORD_MARK, 9]);
            buf.extend_from_slice(&len.to_be_bytes());
            buf.extend_from_slice(&[0x11, 0x11, 0x11, 0x11]);
        }
        buf.resize(zeros_at + (16 << 20), 0);
        buf.push(0x11);
        assert_eq!(after_damage(&buf, damage), After::Nothing);
    }

    /// A delivery taken back (the message never reached its consumer: its count went
    /// from 2 back to 1) keeps the lower count after a restart.
    #[test]
    fn a_receive_count_taken_back_stays_taken_back_after_a_restart() {
        let (mut buf, _) = segment(2, &[&[1]]);
        let name = b"torn";
        for count in [1u32, 2, 1] {
            frame_record(
                &mut buf,
                rtype::QUEUE_DELIVERED,
                &[&[1], &(name.len() as u16).to_be_bytes(), name, &1u64.to_be_bytes(), &count.to_be_bytes()],
            );
        }
        let r = recover_one("uncounted", &buf).0.unwrap();
        let counts: Vec<u32> = r.queues.values().flat_map(|m| m.values().map(|m| m.receive_count)).collect();
        assert_eq!(counts, vec![1]);
    }
}
