//! Message bodies that carry their send time, and the clock they are read with.
//!
//! A body of at least [`STAMP_LEN`] bytes starts with the magic `SLPF` and the send
//! time in nanoseconds (big-endian u64) on the process clock [`now_ns`]; the rest is
//! padding. Sender and receiver share the process, so no clock synchronisation is
//! involved. The message is one data section, encoded once per send batch: every
//! message of a batch leaves in the same write, so they share one timestamp and one
//! `Bytes` (cloning it costs a reference count, not an allocation).

use bytes::{BufMut, Bytes, BytesMut};
use std::sync::OnceLock;
use std::time::Instant;

/// Bytes of a body that carry the timestamp (magic + u64).
pub const STAMP_LEN: usize = 12;
const MAGIC: &[u8; 4] = b"SLPF";

static BASE: OnceLock<Instant> = OnceLock::new();

/// Nanoseconds on the process's monotonic clock.
#[inline]
pub fn now_ns() -> u64 {
    BASE.get_or_init(Instant::now).elapsed().as_nanos() as u64
}

/// A pre-encoded message: optional leading sections, then one data section.
#[derive(Debug, Clone)]
pub struct Template {
    encoded: BytesMut,
    /// Offset of the body's first byte within `encoded` (None: no timestamp).
    stamp_at: Option<usize>,
}

impl Template {
    /// A message whose body has `size` bytes, after the already encoded `prefix`
    /// sections (e.g. properties). Bodies shorter than [`STAMP_LEN`] carry no time.
    pub fn new(prefix: &[u8], size: usize) -> Template {
        let mut b = BytesMut::with_capacity(prefix.len() + size + 8);
        b.put_slice(prefix);
        b.put_slice(&[0x00, 0x53, 0x75]);
        if size < 256 {
            b.put_u8(0xa0);
            b.put_u8(size as u8);
        } else {
            b.put_u8(0xb0);
            b.put_u32(size as u32);
        }
        let at = b.len();
        b.put_bytes(b'.', size);
        let stamp_at = (size >= STAMP_LEN).then_some(at);
        if let Some(at) = stamp_at {
            b[at..at + 4].copy_from_slice(MAGIC);
        }
        Template { encoded: b, stamp_at }
    }

    /// Encoded size of one message.
    pub fn len(&self) -> usize {
        self.encoded.len()
    }

    /// True when the encoded message is empty (never: there is always a data section).
    pub fn is_empty(&self) -> bool {
        self.encoded.is_empty()
    }

    /// True when messages carry their send time.
    pub fn stamped(&self) -> bool {
        self.stamp_at.is_some()
    }

    /// The message stamped with `now` (one allocation per call).
    pub fn stamp(&mut self, now: u64) -> Bytes {
        if let Some(at) = self.stamp_at {
            self.encoded[at + 4..at + STAMP_LEN].copy_from_slice(&now.to_be_bytes());
        }
        Bytes::copy_from_slice(&self.encoded)
    }

    /// The encoded data section of the message stamped with `now` (for bodies that
    /// are appended after per-message sections).
    pub fn body_section(&mut self, now: u64, prefix_len: usize) -> Bytes {
        self.stamp(now).slice(prefix_len..)
    }
}

/// The send time a message carries, if any. The data section is normally the last
/// section, so the body is the last `body_len` bytes; otherwise the magic is searched.
#[inline]
pub fn read_stamp(payload: &[u8], body_len: usize) -> Option<u64> {
    if body_len >= STAMP_LEN && payload.len() >= body_len {
        let at = payload.len() - body_len;
        if let Some(t) = stamp_at(payload, at) {
            return Some(t);
        }
    }
    let at = payload.windows(MAGIC.len()).position(|w| w == MAGIC)?;
    stamp_at(payload, at)
}

#[inline]
fn stamp_at(p: &[u8], at: usize) -> Option<u64> {
    let s = p.get(at..at + STAMP_LEN)?;
    if &s[..4] != MAGIC {
        return None;
    }
    let mut t = [0u8; 8];
    t.copy_from_slice(&s[4..]);
    Some(u64::from_be_bytes(t))
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_proto::types::RawMessage;

    #[test]
    fn stamp_round_trip_and_valid_message() {
        for size in [0, 11, 12, 100, 255, 256, 5000] {
            let mut t = Template::new(&[], size);
            let m = t.stamp(123_456_789);
            let raw = RawMessage::parse(&m).unwrap();
            assert_eq!(raw.data().unwrap().unwrap().len(), size);
            let want = (size >= STAMP_LEN).then_some(123_456_789);
            assert_eq!(read_stamp(&m, size), want, "size {size}");
        }
    }

    #[test]
    fn stamp_found_when_sections_follow() {
        let mut t = Template::new(&[], 100);
        let mut m = t.stamp(42).to_vec();
        m.extend_from_slice(&[0x00, 0x53, 0x78, 0xc1, 0x01, 0x00]); // footer
        assert_eq!(read_stamp(&m, 100), Some(42));
    }
}
