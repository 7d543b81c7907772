//! Framing (part 2 section 2.3): the 8-byte frame header, the deframer, and the
//! frame writer.
//!
//! The deframer owns the connection's read buffer. Each frame body it returns is
//! split off that buffer and frozen, so a TRANSFER payload handed to the broker is a
//! `Bytes` slice of the very memory the socket read into: never copied.

use crate::codec::{format, Decode, DecodeError, Decoder, Encode};
use crate::types::{Performative, SaslFrame, Transfer};
use bytes::{Buf, BufMut, Bytes, BytesMut};

/// Frame type 0x00: AMQP.
pub const FRAME_TYPE_AMQP: u8 = 0x00;
/// Frame type 0x01: SASL.
pub const FRAME_TYPE_SASL: u8 = 0x01;
/// The smallest max-frame-size a peer may negotiate (2.7.1).
pub const MIN_MAX_FRAME_SIZE: u32 = 512;

/// Protocol header of the plain AMQP layer (2.2).
pub const AMQP_HEADER: [u8; 8] = *b"AMQP\x00\x01\x00\x00";
/// Protocol header of the SASL layer (5.3.1).
pub const SASL_HEADER: [u8; 8] = *b"AMQP\x03\x01\x00\x00";
/// Protocol header of the TLS layer (5.2.1).
pub const TLS_HEADER: [u8; 8] = *b"AMQP\x02\x01\x00\x00";

/// A frame whose header has been checked and whose body has been split off.
#[derive(Debug, Clone, PartialEq)]
pub struct RawFrame {
    /// Frame type (AMQP or SASL).
    pub frame_type: u8,
    /// Channel (type-specific field of the header).
    pub channel: u16,
    /// Frame body after the extended header: empty for a heartbeat.
    pub body: Bytes,
}

/// A framing violation: the connection cannot continue.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FrameError {
    /// SIZE below the 8-byte header.
    SizeTooSmall(u32),
    /// SIZE above the negotiated max-frame-size (detected before buffering the body).
    SizeTooLarge {
        /// Declared size.
        size: u32,
        /// Negotiated limit.
        max: u32,
    },
    /// DOFF below 2 or pointing past the end of the frame.
    BadDataOffset(u8),
    /// A frame type other than AMQP or SASL.
    UnknownType(u8),
}

impl std::fmt::Display for FrameError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            FrameError::SizeTooSmall(s) => write!(f, "frame size {s} is smaller than the frame header"),
            FrameError::SizeTooLarge { size, max } => {
                write!(f, "frame size {size} exceeds the negotiated max-frame-size {max}")
            }
            FrameError::BadDataOffset(d) => write!(f, "invalid data offset {d}"),
            FrameError::UnknownType(t) => write!(f, "unknown frame type {t}"),
        }
    }
}

impl std::error::Error for FrameError {}

/// Splits a byte stream into frames.
#[derive(Debug)]
pub struct Deframer {
    buf: BytesMut,
    max_frame_size: u32,
}

impl Deframer {
    /// A deframer that accepts frames up to `max_frame_size` bytes.
    pub fn new(max_frame_size: u32) -> Self {
        Deframer { buf: BytesMut::new(), max_frame_size }
    }

    /// Change the largest frame accepted (after OPEN negotiation).
    pub fn set_max_frame_size(&mut self, max: u32) {
        self.max_frame_size = max;
    }

    /// The largest frame accepted.
    pub fn max_frame_size(&self) -> u32 {
        self.max_frame_size
    }

    /// Append received bytes.
    pub fn push(&mut self, data: &[u8]) {
        self.buf.extend_from_slice(data);
    }

    /// The read buffer, to receive into directly (then the bytes are already "pushed").
    pub fn buffer(&mut self) -> &mut BytesMut {
        &mut self.buf
    }

    /// Bytes buffered but not yet returned as frames.
    pub fn buffered(&self) -> usize {
        self.buf.len()
    }

    /// Take `n` raw bytes (protocol headers) if that many are buffered.
    pub fn take_raw(&mut self, n: usize) -> Option<Bytes> {
        if self.buf.len() < n {
            return None;
        }
        Some(self.buf.split_to(n).freeze())
    }

    /// The next complete frame, `Ok(None)` when more bytes are needed.
    ///
    /// The header is checked as soon as its 8 bytes are present, so an oversized
    /// frame is refused before its body is buffered.
    #[inline]
    pub fn next_frame(&mut self) -> Result<Option<RawFrame>, FrameError> {
        if self.buf.len() < 8 {
            return Ok(None);
        }
        let h = &self.buf[..8];
        let size = u32::from_be_bytes([h[0], h[1], h[2], h[3]]);
        let doff = h[4];
        let frame_type = h[5];
        let channel = u16::from_be_bytes([h[6], h[7]]);
        if size < 8 {
            return Err(FrameError::SizeTooSmall(size));
        }
        if size > self.max_frame_size {
            return Err(FrameError::SizeTooLarge { size, max: self.max_frame_size });
        }
        if doff < 2 || doff as u32 * 4 > size {
            return Err(FrameError::BadDataOffset(doff));
        }
        if frame_type != FRAME_TYPE_AMQP && frame_type != FRAME_TYPE_SASL {
            return Err(FrameError::UnknownType(frame_type));
        }
        if self.buf.len() < size as usize {
            // Make room for the rest of this frame in one allocation.
            self.buf.reserve(size as usize - self.buf.len());
            return Ok(None);
        }
        // Split off the frame and step over its header in place: one reference
        // count update, not three. The step is taken on the frozen `Bytes`, whose
        // `advance` is two inlined field updates (`BytesMut::advance` is a call).
        let mut body = self.buf.split_to(size as usize).freeze();
        body.advance(doff as usize * 4);
        Ok(Some(RawFrame { frame_type, channel, body }))
    }
}

/// A decoded AMQP frame body: the performative and, for TRANSFER, the payload
/// (a slice of the frame body).
#[derive(Debug, Clone, PartialEq)]
pub struct AmqpFrame {
    /// The performative.
    pub performative: Performative,
    /// The bytes after the performative (message data of a TRANSFER).
    pub payload: Bytes,
}

impl RawFrame {
    /// True for an empty (heartbeat) frame.
    pub fn is_empty(&self) -> bool {
        self.body.is_empty()
    }

    /// Decode the performative; the payload is a zero-copy slice of `body`.
    #[inline]
    pub fn decode_amqp(&self) -> Result<AmqpFrame, DecodeError> {
        self.clone().into_amqp()
    }

    /// Like [`RawFrame::decode_amqp`], consuming the frame: the payload is the frame
    /// body advanced past the performative, with no reference count update.
    #[inline(always)]
    pub fn into_amqp(self) -> Result<AmqpFrame, DecodeError> {
        let (performative, at) = Performative::decode_body(&self.body)?;
        let mut payload = self.body;
        payload.advance(at);
        Ok(AmqpFrame { performative, payload })
    }

    /// A TRANSFER in its usual shape (`00 53 14` and a list of simple fields), decoded
    /// without building a [`Performative`]: the transfer and its payload (the body
    /// advanced past the performative, no reference count update). Anything else, or
    /// a TRANSFER the one-pass decoder declines, gives the frame back untouched for
    /// [`RawFrame::into_amqp`], which reports precise errors.
    #[inline(always)]
    pub fn into_transfer(self) -> Result<(Transfer, Bytes), RawFrame> {
        let mut t = Transfer::default();
        self.into_transfer_in(&mut t).map(|payload| (t, payload))
    }

    /// [`RawFrame::into_transfer`] decoding into `t`, a slot the caller keeps, instead
    /// of returning the transfer by value: Ok(payload), or the frame back untouched
    /// (then `t` holds some mix of its old and new fields and is to be ignored). The
    /// engine takes every frame this way: a `Transfer` returned by value is copied out
    /// of the result with wide loads of fields just written by narrow stores, and on
    /// this code that copy cost about a fifth of the decode.
    #[inline(always)]
    pub fn into_transfer_in(self, t: &mut Transfer) -> Result<Bytes, RawFrame> {
        if let [format::DESCRIBED, format::SMALLULONG, 0x14, ..] = self.body[..] {
            let mut d = Decoder::new(&self.body[3..]);
            if crate::types::fast::transfer_into(&mut d, t) {
                let at = 3 + d.position();
                let mut payload = self.body;
                payload.advance(at);
                return Ok(payload);
            }
        }
        Err(self)
    }

    /// Decode a SASL frame body; trailing bytes are an error.
    pub fn decode_sasl(&self) -> Result<SaslFrame, DecodeError> {
        SaslFrame::decode_exact(&self.body)
    }
}

/// Append one frame: header, `body` encoded, then `payload`.
#[inline]
pub fn write_frame<T: Encode + ?Sized>(out: &mut BytesMut, frame_type: u8, channel: u16, body: &T, payload: &[u8]) {
    let at = out.len();
    // Room for the header, a hot performative and the payload: one capacity check.
    out.reserve(8 + 80 + payload.len());
    let [c0, c1] = channel.to_be_bytes();
    out.put_slice(&[0, 0, 0, 0, 2, frame_type, c0, c1]);
    body.encode(out);
    out.put_slice(payload);
    let size = (out.len() - at) as u32;
    out[at..at + 4].copy_from_slice(&size.to_be_bytes());
}

/// Append an empty (heartbeat) frame.
#[inline]
pub fn write_empty_frame(out: &mut BytesMut) {
    out.put_slice(&[0, 0, 0, 8, 2, FRAME_TYPE_AMQP, 0, 0]);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::{Flow, Transfer};

    #[test]
    fn transfer_payload_points_into_the_read_buffer() {
        let mut wire = BytesMut::new();
        let t = Transfer { handle: 1, delivery_id: Some(7), ..Default::default() };
        let payload = [0xabu8; 100];
        write_frame(&mut wire, FRAME_TYPE_AMQP, 3, &Performative::Transfer(t.clone()), &payload);
        let mut de = Deframer::new(u32::MAX);
        de.push(&wire);
        let base = de.buffer().as_ptr() as usize;
        let end = base + de.buffer().len();
        let frame = de.next_frame().unwrap().unwrap();
        assert_eq!(frame.channel, 3);
        let f = frame.decode_amqp().unwrap();
        assert_eq!(f.performative, Performative::Transfer(t));
        assert_eq!(&f.payload[..], &payload[..]);
        let p = f.payload.as_ptr() as usize;
        assert!(p >= base && p + f.payload.len() <= end, "payload was copied");
    }

    /// The engine's path for TRANSFER frames gives what the general decoder gives,
    /// with the payload still a slice of the read buffer; any other frame comes back
    /// untouched.
    #[test]
    fn into_transfer_matches_into_amqp_and_keeps_the_payload_in_place() {
        let mut wire = BytesMut::new();
        let t = Transfer {
            handle: 2,
            delivery_id: Some(70_000),
            delivery_tag: crate::types::DeliveryTag::from_slice(b"tag-1"),
            settled: Some(true),
            ..Default::default()
        };
        let payload = [0x5au8; 300];
        write_frame(&mut wire, FRAME_TYPE_AMQP, 1, &Performative::Transfer(t.clone()), &payload);
        write_frame(&mut wire, FRAME_TYPE_AMQP, 1, &Performative::Flow(Flow::default()), &[]);
        let mut de = Deframer::new(u32::MAX);
        de.push(&wire);
        let base = de.buffer().as_ptr() as usize;
        let end = base + de.buffer().len();
        let frame = de.next_frame().unwrap().unwrap();
        let general = frame.decode_amqp().unwrap();
        let (fast, body) = frame.into_transfer().unwrap();
        assert_eq!(Performative::Transfer(fast), general.performative);
        assert_eq!(body, general.payload);
        let p = body.as_ptr() as usize;
        assert!(p >= base && p + body.len() <= end, "payload was copied");
        let flow = de.next_frame().unwrap().unwrap();
        let back = flow.clone().into_transfer().unwrap_err();
        assert_eq!(back, flow);
    }

    #[test]
    fn oversized_frame_refused_from_its_header_alone() {
        let mut de = Deframer::new(512);
        de.push(&[0, 0, 2, 1, 2, 0, 0, 0]);
        assert_eq!(de.next_frame(), Err(FrameError::SizeTooLarge { size: 513, max: 512 }));
    }

    #[test]
    fn header_checks() {
        for (bytes, err) in [
            ([0u8, 0, 0, 7, 2, 0, 0, 0], FrameError::SizeTooSmall(7)),
            ([0, 0, 0, 8, 1, 0, 0, 0], FrameError::BadDataOffset(1)),
            ([0, 0, 0, 8, 3, 0, 0, 0], FrameError::BadDataOffset(3)),
            ([0, 0, 0, 8, 2, 9, 0, 0], FrameError::UnknownType(9)),
        ] {
            let mut de = Deframer::new(4096);
            de.push(&bytes);
            assert_eq!(de.next_frame(), Err(err));
        }
    }

    #[test]
    fn partial_frames_wait_for_more_bytes_and_heartbeats_are_empty() {
        let mut wire = BytesMut::new();
        write_empty_frame(&mut wire);
        write_frame(&mut wire, FRAME_TYPE_AMQP, 0, &Performative::Flow(Flow::default()), &[]);
        let mut de = Deframer::new(4096);
        for (i, b) in wire.iter().enumerate() {
            de.push(&[*b]);
            if i == 7 {
                let hb = de.next_frame().unwrap().unwrap();
                assert!(hb.is_empty());
            }
        }
        let f = de.next_frame().unwrap().unwrap();
        assert!(matches!(f.decode_amqp().unwrap().performative, Performative::Flow(_)));
        assert_eq!(de.next_frame(), Ok(None));
    }
}
