//! Definitions of the transport layer (part 2 section 2.8) and the error type.

use crate::codec::{format, Decode, DecodeError, DecodeResult, Decoder, Encode, Fields, Symbol};
use crate::described_list;
use bytes::{BufMut, BytesMut};

/// 2.8.1 role: false = sender, true = receiver.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Hash)]
pub enum Role {
    /// The link's sender end.
    #[default]
    Sender,
    /// The link's receiver end.
    Receiver,
}

impl Role {
    /// The role at the other end of the link.
    pub fn peer(self) -> Role {
        match self {
            Role::Sender => Role::Receiver,
            Role::Receiver => Role::Sender,
        }
    }
}

impl<'a> Decode<'a> for Role {
    #[inline]
    fn decode_with(d: &mut Decoder<'a>, code: u8) -> DecodeResult<Self> {
        Ok(if bool::decode_with(d, code)? { Role::Receiver } else { Role::Sender })
    }
}

impl Encode for Role {
    #[inline]
    fn encode(&self, out: &mut BytesMut) {
        (*self == Role::Receiver).encode(out)
    }
}

/// 2.8.2 sender-settle-mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SenderSettleMode {
    /// 0: every delivery is sent unsettled.
    Unsettled,
    /// 1: every delivery is sent settled (pre-settled).
    Settled,
    /// 2: either (the default).
    #[default]
    Mixed,
}

impl<'a> Decode<'a> for SenderSettleMode {
    fn decode_with(d: &mut Decoder<'a>, code: u8) -> DecodeResult<Self> {
        match u8::decode_with(d, code)? {
            0 => Ok(SenderSettleMode::Unsettled),
            1 => Ok(SenderSettleMode::Settled),
            2 => Ok(SenderSettleMode::Mixed),
            _ => Err(DecodeError::Invalid("sender-settle-mode out of range")),
        }
    }
}

impl Encode for SenderSettleMode {
    fn encode(&self, out: &mut BytesMut) {
        (*self as u8).encode(out)
    }
}

/// 2.8.3 receiver-settle-mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ReceiverSettleMode {
    /// 0: the receiver settles first (the default).
    #[default]
    First,
    /// 1: the receiver settles only after the sender has.
    Second,
}

impl<'a> Decode<'a> for ReceiverSettleMode {
    fn decode_with(d: &mut Decoder<'a>, code: u8) -> DecodeResult<Self> {
        match u8::decode_with(d, code)? {
            0 => Ok(ReceiverSettleMode::First),
            1 => Ok(ReceiverSettleMode::Second),
            _ => Err(DecodeError::Invalid("receiver-settle-mode out of range")),
        }
    }
}

impl Encode for ReceiverSettleMode {
    fn encode(&self, out: &mut BytesMut) {
        (*self as u8).encode(out)
    }
}

/// `KEEP[32 - len..64 - len]` keeps the first `len` bytes of 32.
const KEEP: [u8; 64] = {
    let mut k = [0u8; 64];
    let mut i = 0;
    while i < 32 {
        k[i] = 0xff;
        i += 1;
    }
    k
};

/// 2.8.7 delivery-tag: binary of at most 32 bytes, stored inline (no allocation)
/// in 33 bytes.
#[derive(Clone, Default)]
pub struct DeliveryTag {
    len: u8,
    buf: [u8; 32],
}

impl DeliveryTag {
    /// The empty tag.
    pub const EMPTY: DeliveryTag = DeliveryTag { len: 0, buf: [0; 32] };

    /// A tag from bytes; None when longer than 32 bytes.
    #[inline]
    pub fn from_slice(b: &[u8]) -> Option<Self> {
        if b.len() > 32 {
            return None;
        }
        let mut buf = [0u8; 32];
        buf[..b.len()].copy_from_slice(b);
        Some(DeliveryTag { len: b.len() as u8, buf })
    }

    /// The tag made of the first `len` bytes of `src`. When `src` holds at least 32
    /// bytes (a tag followed by the rest of a frame) they are read in one 32-byte load
    /// and the bytes past the tag cleared in registers, so the tag is written with
    /// whole-width stores: a tag built byte by byte and then moved costs a
    /// store-forwarding stall on every move.
    #[inline(always)]
    pub fn from_prefix(src: &[u8], len: usize) -> Option<Self> {
        if len > 32 || len > src.len() {
            return None;
        }
        let Some(head) = src.first_chunk::<32>() else {
            // Fewer than 32 bytes left (a small message after the tag): a tag of up to
            // 16 bytes from one 16-byte load when 16 are there. `from_slice` zeroes a
            // buffer, copies the tag into it with a `memcpy` and reads it back whole: a
            // stall on every frame of a small message (16.9 % of the load generator's
            // frame loop in the 8-byte frame pump).
            if let (true, Some(head)) = (len <= 16, src.first_chunk::<16>()) {
                let mut lo = *head;
                for (i, b) in lo.iter_mut().enumerate() {
                    *b &= KEEP[32 - len + i];
                }
                let mut buf = [0u8; 32];
                buf[..16].copy_from_slice(&lo);
                return Some(DeliveryTag { len: len as u8, buf });
            }
            return Self::from_slice(&src[..len]);
        };
        let mut buf = *head;
        for (i, b) in buf.iter_mut().enumerate() {
            *b &= KEEP[32 - len + i];
        }
        Some(DeliveryTag { len: len as u8, buf })
    }

    /// A tag holding the big-endian bytes of `n` (how the broker numbers its deliveries).
    #[inline]
    pub fn from_u64(n: u64) -> Self {
        let mut buf = [0u8; 32];
        buf[..8].copy_from_slice(&n.to_be_bytes());
        DeliveryTag { len: 8, buf }
    }

    /// All 32 bytes of storage (the tag, then zeros): a fixed-size copy for encoders
    /// that have room for the longest tag, instead of a copy of run-time length.
    #[inline(always)]
    pub(crate) fn padded(&self) -> &[u8; 32] {
        &self.buf
    }

    /// The tag's bytes.
    #[inline]
    pub fn as_slice(&self) -> &[u8] {
        &self.buf[..self.len as usize]
    }
}

impl std::ops::Deref for DeliveryTag {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        self.as_slice()
    }
}

impl PartialEq for DeliveryTag {
    fn eq(&self, other: &Self) -> bool {
        self.as_slice() == other.as_slice()
    }
}

impl Eq for DeliveryTag {}

impl std::hash::Hash for DeliveryTag {
    fn hash<H: std::hash::Hasher>(&self, h: &mut H) {
        self.as_slice().hash(h);
    }
}

impl std::fmt::Debug for DeliveryTag {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("DeliveryTag").field(&self.as_slice()).finish()
    }
}

impl<'a> Decode<'a> for DeliveryTag {
    #[inline]
    fn decode_with(d: &mut Decoder<'a>, code: u8) -> DecodeResult<Self> {
        match code {
            format::VBIN8 | format::VBIN32 => {
                let raw = d.variable(code)?;
                DeliveryTag::from_slice(raw).ok_or(DecodeError::InvalidLength("delivery-tag longer than 32 bytes"))
            }
            found => Err(DecodeError::UnexpectedType { expected: "binary delivery-tag", found }),
        }
    }
}

impl Encode for DeliveryTag {
    #[inline]
    fn encode(&self, out: &mut BytesMut) {
        out.put_u8(format::VBIN8);
        out.put_u8(self.len);
        out.put_slice(self.as_slice());
    }
}

described_list! {
    /// 2.8.14 error: a condition, a description and extra information, always written
    /// with all three (a null description or info included).
    pub struct Error = 0x1d, "amqp:error:list", every_field {
        /// The error condition (a symbol such as `amqp:not-found`).
        pub condition: Symbol,
        /// Human-readable description.
        pub description: Option<String>,
        /// Additional information.
        pub info: Option<Fields>,
    }
}

/// The longest description [`Error::new`] keeps, in bytes: descriptions are short, and
/// some quote what a peer sent (a channel name, a selector).
pub const MAX_DESCRIPTION: usize = 512;

impl Error {
    /// An error with a condition and a description, cut to [`MAX_DESCRIPTION`] bytes
    /// (at a character boundary).
    pub fn new(condition: &str, description: impl Into<String>) -> Self {
        let mut description = description.into();
        if description.len() > MAX_DESCRIPTION {
            let mut end = MAX_DESCRIPTION;
            while !description.is_char_boundary(end) {
                end -= 1;
            }
            description.truncate(end);
        }
        Error { condition: Symbol::new(condition), description: Some(description), info: None }
    }
}

#[cfg(test)]
mod error_tests {
    use super::*;

    /// A description longer than 512 bytes is cut at a character boundary.
    #[test]
    fn descriptions_are_cut_to_512_bytes() {
        let long = "é".repeat(600); // 1200 bytes, two per character
        let e = Error::new(condition::NOT_FOUND, format!("x{long}"));
        let d = e.description.unwrap();
        assert_eq!(d.len(), 511, "cut before the character that would pass 512");
        assert!(format!("x{long}").starts_with(&d));
        let short = Error::new(condition::NOT_FOUND, "no such channel");
        assert_eq!(short.description.as_deref(), Some("no such channel"));
        let exact = "a".repeat(MAX_DESCRIPTION);
        assert_eq!(Error::new(condition::NOT_FOUND, exact.clone()).description, Some(exact));
    }
}

/// AMQP error conditions (2.8.15 – 2.8.18) and the ones the broker uses.
#[allow(missing_docs)]
pub mod condition {
    pub const INTERNAL_ERROR: &str = "amqp:internal-error";
    pub const NOT_FOUND: &str = "amqp:not-found";
    pub const UNAUTHORIZED_ACCESS: &str = "amqp:unauthorized-access";
    pub const DECODE_ERROR: &str = "amqp:decode-error";
    pub const RESOURCE_LIMIT_EXCEEDED: &str = "amqp:resource-limit-exceeded";
    pub const NOT_ALLOWED: &str = "amqp:not-allowed";
    pub const INVALID_FIELD: &str = "amqp:invalid-field";
    pub const NOT_IMPLEMENTED: &str = "amqp:not-implemented";
    pub const RESOURCE_LOCKED: &str = "amqp:resource-locked";
    pub const PRECONDITION_FAILED: &str = "amqp:precondition-failed";
    pub const RESOURCE_DELETED: &str = "amqp:resource-deleted";
    pub const ILLEGAL_STATE: &str = "amqp:illegal-state";
    pub const FRAME_SIZE_TOO_SMALL: &str = "amqp:frame-size-too-small";
    pub const CONNECTION_FORCED: &str = "amqp:connection:forced";
    pub const FRAMING_ERROR: &str = "amqp:connection:framing-error";
    pub const CONNECTION_REDIRECT: &str = "amqp:connection:redirect";
    pub const WINDOW_VIOLATION: &str = "amqp:session:window-violation";
    pub const ERRANT_LINK: &str = "amqp:session:errant-link";
    pub const HANDLE_IN_USE: &str = "amqp:session:handle-in-use";
    pub const UNATTACHED_HANDLE: &str = "amqp:session:unattached-handle";
    pub const DETACH_FORCED: &str = "amqp:link:detach-forced";
    pub const TRANSFER_LIMIT_EXCEEDED: &str = "amqp:link:transfer-limit-exceeded";
    pub const MESSAGE_SIZE_EXCEEDED: &str = "amqp:link:message-size-exceeded";
    pub const LINK_REDIRECT: &str = "amqp:link:redirect";
    pub const STOLEN: &str = "amqp:link:stolen";
}

#[cfg(test)]
mod tests {
    use super::DeliveryTag;

    /// `from_prefix` gives the tag `from_slice` gives, whether or not 32 bytes follow,
    /// with the bytes past the tag cleared; too long or past the input is refused.
    #[test]
    fn delivery_tag_from_prefix_matches_from_slice() {
        let src: Vec<u8> = (1..=80).collect();
        for len in 0..=32 {
            for avail in [len, len + 1, 15, 16, 17, 20, 31, 32, 33, 80] {
                if avail < len || avail > src.len() {
                    continue;
                }
                let t = DeliveryTag::from_prefix(&src[..avail], len).unwrap();
                let s = DeliveryTag::from_slice(&src[..len]).unwrap();
                assert_eq!(t, s);
                assert_eq!(t.as_slice(), &src[..len]);
                assert!(t.buf[len..].iter().all(|b| *b == 0), "bytes past the tag kept (len {len})");
            }
        }
        assert!(DeliveryTag::from_prefix(&src, 33).is_none());
        assert!(DeliveryTag::from_prefix(&src[..4], 5).is_none());
    }
}
