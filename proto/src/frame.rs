//! Framing (part 2 section 2.3): the 8-byte frame header, the deframer, and the
//! frame writer.
//!
//! The deframer owns the connection's read buffer. Each frame body it returns is
//! split off that buffer and frozen, so a TRANSFER payload handed to the broker is a
//! `Bytes` slice of the very memory the socket read into: never copied.

use crate::codec::{Decode, DecodeError, Encode};
use crate::types::{Disposition, Flow, Performative, SaslFrame, Transfer};
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
///
/// The buffer holds the bytes received and not yet returned as frames
/// (`..filled`), then zeroed room for the next receive (`filled..`). The room is
/// zeroed once and kept until bytes are received into it: a receive that comes back
/// with nothing (the connection was woken for something else) costs no zeroing, where
/// growing the buffer for every receive and cutting it back afterwards zeroed the whole
/// read size (up to 256 KiB in the broker) on every wake-up.
///
/// Frames leave from the front (`split_to`), which takes their bytes out of the
/// buffer's capacity. When the room no longer fits, the buffer is reclaimed or moved
/// with room for [`ROOM_READS`] reads (rooms of [`ROOM_SPARE_MIN`] and more), so the
/// rooms that follow zero only the bytes
/// consumed since: zeroing costs about `1 + 1 / (ROOM_READS - 1)` bytes per byte
/// received, not a whole room per read (which a buffer sized for one read cost).
#[derive(Debug)]
pub struct Deframer {
    buf: BytesMut,
    filled: usize,
    max_frame_size: u32,
    zeroed: u64,
}

/// How many reads' worth of room the buffer gets when it has to be reclaimed or moved.
pub const ROOM_READS: usize = 2;

/// Rooms smaller than this get room for one read only: zeroing them again costs less
/// than the read itself, and an idle connection (the broker's 4 KiB room) keeps the
/// smallest buffer.
pub const ROOM_SPARE_MIN: usize = 16 * 1024;

impl Deframer {
    /// A deframer that accepts frames up to `max_frame_size` bytes.
    pub fn new(max_frame_size: u32) -> Self {
        Deframer { buf: BytesMut::new(), filled: 0, max_frame_size, zeroed: 0 }
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
        // Copied over the room (zeroed or not), never after it.
        self.buf.truncate(self.filled);
        self.buf.extend_from_slice(data);
        self.filled = self.buf.len();
    }

    /// Room for the next receive: exactly `n` bytes right after the buffered ones,
    /// zeroed where they were not zeroed before. Receive into it, then call
    /// [`Deframer::read_done`] with the count received (0 is fine: the room stays).
    pub fn read_space(&mut self, n: usize) -> &mut [u8] {
        let want = self.filled + n;
        if self.buf.len() < want {
            if self.buf.capacity() < want {
                // The buffer moves (or is reclaimed): carry only the received bytes
                // over, not the room, which would be copied just to be overwritten.
                self.buf.truncate(self.filled);
                let reads = if n >= ROOM_SPARE_MIN { ROOM_READS } else { 1 };
                self.buf.reserve(n.saturating_mul(reads));
            }
            self.zeroed += (want - self.buf.len()) as u64;
            self.buf.resize(want, 0);
        }
        &mut self.buf[self.filled..want]
    }

    /// Bytes zeroed for read room so far (what giving room has cost).
    pub fn zeroed_bytes(&self) -> u64 {
        self.zeroed
    }

    /// `n` bytes were received into the room [`Deframer::read_space`] gave.
    pub fn read_done(&mut self, n: usize) {
        self.filled = (self.filled + n).min(self.buf.len());
    }

    /// The bytes buffered but not yet returned as frames.
    pub fn buffered_bytes(&self) -> &[u8] {
        &self.buf[..self.filled]
    }

    /// Bytes buffered but not yet returned as frames.
    pub fn buffered(&self) -> usize {
        self.filled
    }

    /// Let go of the buffer when nothing is buffered and it has grown past
    /// `max_capacity` bytes (a large frame came through once).
    pub fn release_if_idle(&mut self, max_capacity: usize) {
        if self.filled == 0 && self.buf.capacity() > max_capacity {
            self.buf = BytesMut::new();
        }
    }

    /// Take `n` raw bytes (protocol headers) if that many are buffered.
    pub fn take_raw(&mut self, n: usize) -> Option<Bytes> {
        if self.filled < n {
            return None;
        }
        self.filled -= n;
        Some(self.buf.split_to(n).freeze())
    }

    /// The next complete frame, `Ok(None)` when more bytes are needed.
    ///
    /// The header is checked as soon as its 8 bytes are present, so an oversized
    /// frame is refused before its body is buffered.
    #[inline]
    pub fn next_frame(&mut self) -> Result<Option<RawFrame>, FrameError> {
        if self.filled < 8 {
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
        if self.filled < size as usize {
            // Make room for the rest of this frame in one allocation.
            self.buf.reserve((size as usize).saturating_sub(self.buf.len()));
            return Ok(None);
        }
        self.filled -= size as usize;
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
        if let Some(mut d) = crate::types::fast::after_descriptor(&self.body, 0x14) {
            if crate::types::fast::transfer_into(&mut d, t) {
                let at = 3 + d.position();
                let mut payload = self.body;
                payload.advance(at);
                return Ok(payload);
            }
        }
        Err(self)
    }

    /// A FLOW in its usual shape decoded into `f`, a slot the caller keeps, without
    /// building a [`Performative`] ([`Flow::decode_body_in`]): true, or false for
    /// [`RawFrame::into_amqp`], which decodes any other FLOW or reports why not.
    #[inline(always)]
    pub fn flow_in(&self, f: &mut Flow) -> bool {
        Flow::decode_body_in(&self.body, f)
    }

    /// A DISPOSITION in its usual shape decoded into `x`, a slot the caller keeps
    /// ([`Disposition::decode_body_in`]): true, or false for [`RawFrame::into_amqp`].
    #[inline(always)]
    pub fn disposition_in(&self, x: &mut Disposition) -> bool {
        Disposition::decode_body_in(&self.body, x)
    }

    /// Decode a SASL frame body; trailing bytes are an error.
    pub fn decode_sasl(&self) -> Result<SaslFrame, DecodeError> {
        SaslFrame::decode_exact(&self.body)
    }
}

/// Append one frame: header, `body` encoded, then `payload`.
#[inline]
pub fn write_frame<T: Encode + ?Sized>(out: &mut BytesMut, frame_type: u8, channel: u16, body: &T, payload: &[u8]) {
    write_frame_with(out, frame_type, channel, body, payload.len(), |out| out.put_slice(payload));
}

/// Append one frame whose payload `payload` writes straight into `out` after the
/// encoded `body` (a message encoded in place, with no buffer of its own to copy
/// from); `size_hint` is the payload's expected size, reserved together with the
/// header and the performative. Returns the payload's length.
#[inline(always)]
pub fn write_frame_with<T: Encode + ?Sized>(
    out: &mut BytesMut,
    frame_type: u8,
    channel: u16,
    body: &T,
    size_hint: usize,
    payload: impl FnOnce(&mut BytesMut),
) -> usize {
    let at = out.len();
    // Room for the header, a hot performative and the payload: one capacity check.
    out.reserve(8 + 80 + size_hint);
    // The header as one 8-byte store: size (patched below), doff 2, type, channel.
    // (A constant-size zero fill is inlined; `put_u64` was an out-of-line `memcpy`.)
    out.put_slice(&[0u8; 8]);
    let header = (2u64 << 24) | (u64::from(frame_type) << 16) | u64::from(channel);
    out[at..at + 8].copy_from_slice(&header.to_be_bytes());
    body.encode(out);
    let start = out.len();
    payload(out);
    let end = out.len();
    out[at..at + 4].copy_from_slice(&((end - at) as u32).to_be_bytes());
    end - start
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

    /// Write `wire` into the deframer's room in chunks of `chunk` bytes, as reads would.
    fn receive(de: &mut Deframer, wire: &[u8], chunk: usize, room: usize) {
        for part in wire.chunks(chunk) {
            let space = de.read_space(room);
            space[..part.len()].copy_from_slice(part);
            de.read_done(part.len());
        }
    }

    fn flow_frames(n: u32) -> BytesMut {
        let mut wire = BytesMut::new();
        for i in 0..n {
            let f = Flow { incoming_window: i, next_outgoing_id: 1, outgoing_window: 2, ..Default::default() };
            write_frame(&mut wire, FRAME_TYPE_AMQP, 0, &Performative::Flow(f), &[]);
        }
        wire
    }

    #[test]
    fn frames_received_into_the_room_come_out_whole_whatever_the_read_sizes() {
        let wire = flow_frames(50);
        for (chunk, room) in [(1, 1), (7, 16), (33, 4096), (4096, 4096), (100, 256 * 1024)] {
            let mut de = Deframer::new(u32::MAX);
            let mut got = 0u32;
            for part in wire.chunks(chunk) {
                receive(&mut de, part, chunk, room);
                while let Some(f) = de.next_frame().unwrap() {
                    match f.decode_amqp().unwrap().performative {
                        Performative::Flow(flow) => assert_eq!(flow.incoming_window, got),
                        p => panic!("unexpected {p:?}"),
                    }
                    got += 1;
                }
            }
            assert_eq!(got, 50, "chunk {chunk}, room {room}");
            assert_eq!(de.buffered(), 0);
        }
    }

    #[test]
    fn the_room_is_kept_and_not_zeroed_again_by_a_receive_that_brings_nothing() {
        let mut de = Deframer::new(u32::MAX);
        let room = de.read_space(4096);
        assert!(room.iter().all(|&b| b == 0));
        let at = room.as_ptr();
        // Bytes the kernel never reported (a receive that came back with nothing)
        // stay where they are: the room is not zeroed a second time.
        room[..4].copy_from_slice(b"MARK");
        de.read_done(0);
        let again = de.read_space(4096);
        assert_eq!(again.as_ptr(), at, "the room moved");
        assert_eq!(&again[..4], b"MARK", "the room was zeroed again");
        assert_eq!(de.buffered(), 0);
        assert!(de.next_frame().unwrap().is_none());
    }

    /// Many small reads into a large room, each consumed before the next, as a busy
    /// connection does: the zeroing grows with the bytes received, not with reads x
    /// room (a buffer sized for one room was zeroed again on almost every read).
    #[test]
    fn small_reads_into_a_large_room_zero_about_what_they_receive() {
        const ROOM: usize = 256 * 1024;
        let wire = flow_frames(1);
        for hold_frames in [false, true] {
            let mut de = Deframer::new(u32::MAX);
            let mut held = Vec::new();
            let reads = 20_000;
            for _ in 0..reads {
                receive(&mut de, &wire, wire.len(), ROOM);
                let f = de.next_frame().unwrap().expect("a whole frame");
                if hold_frames {
                    // Frames kept alive (messages queued) keep the buffer shared.
                    held.push(f);
                }
                assert!(de.next_frame().unwrap().is_none());
            }
            let received = (reads * wire.len()) as u64;
            let bound = received * (1 + 1 / (ROOM_READS as u64 - 1)) + 2 * (ROOM * ROOM_READS) as u64;
            assert!(
                de.zeroed_bytes() <= bound,
                "holding frames: {hold_frames}: zeroed {} bytes for {received} received (bound {bound})",
                de.zeroed_bytes()
            );
        }
    }

    /// Small rooms (an idle connection's) get no spare room: the buffer stays one room.
    #[test]
    fn a_small_room_gets_no_spare_room() {
        let wire = flow_frames(1);
        let mut de = Deframer::new(u32::MAX);
        for _ in 0..100 {
            receive(&mut de, &wire, wire.len(), 4096);
            assert!(de.next_frame().unwrap().is_some());
            let _ = de.read_space(4096);
            // Nothing is buffered here: the capacity is the room and at most the one
            // frame consumed since it was given.
            assert!(de.buf.capacity() <= 4096 + wire.len(), "capacity {} for a 4 KiB room", de.buf.capacity());
        }
    }

    #[test]
    fn a_partial_frame_survives_the_room_growing_past_the_buffer() {
        let mut wire = BytesMut::new();
        let t = Transfer { handle: 1, delivery_id: Some(7), ..Default::default() };
        let payload = vec![0x5au8; 10_000];
        write_frame(&mut wire, FRAME_TYPE_AMQP, 3, &Performative::Transfer(t.clone()), &payload);
        let mut de = Deframer::new(u32::MAX);
        // Part of the frame in a small room, then a room far larger than the buffer.
        receive(&mut de, &wire[..3000], 3000, 4096);
        assert!(de.next_frame().unwrap().is_none());
        receive(&mut de, &wire[3000..], 64 * 1024, 256 * 1024);
        let f = de.next_frame().unwrap().unwrap().decode_amqp().unwrap();
        assert_eq!(f.performative, Performative::Transfer(t));
        assert_eq!(&f.payload[..], &payload[..]);
        assert_eq!(de.buffered(), 0);
        // A push after a room was given is appended right after the buffered bytes.
        let _ = de.read_space(1024);
        de.push(&flow_frames(1));
        assert!(matches!(de.next_frame().unwrap().unwrap().decode_amqp().unwrap().performative, Performative::Flow(_)));
        assert!(de.next_frame().unwrap().is_none());
    }

    #[test]
    fn transfer_payload_points_into_the_read_buffer() {
        let mut wire = BytesMut::new();
        let t = Transfer { handle: 1, delivery_id: Some(7), ..Default::default() };
        let payload = [0xabu8; 100];
        write_frame(&mut wire, FRAME_TYPE_AMQP, 3, &Performative::Transfer(t.clone()), &payload);
        let mut de = Deframer::new(u32::MAX);
        de.push(&wire);
        let base = de.buffered_bytes().as_ptr() as usize;
        let end = base + de.buffered_bytes().len();
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
        let base = de.buffered_bytes().as_ptr() as usize;
        let end = base + de.buffered_bytes().len();
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
