//! The outgoing byte queue: small frames are batched into one buffer so that the
//! transport can write many frames per system call; a large TRANSFER payload is
//! queued as its own chunk that shares the caller's memory.

use crate::codec::Encode;
use crate::frame::{write_frame, write_frame_with, FRAME_TYPE_AMQP};
use crate::types::{Message, Transfer};
use bytes::{BufMut, Bytes, BytesMut};
use std::collections::VecDeque;

/// Payloads at least this large are queued by reference instead of copied.
pub const ZERO_COPY_THRESHOLD: usize = 4096;

/// Bytes waiting to be written.
#[derive(Debug, Default)]
pub struct Transmit {
    chunks: VecDeque<Bytes>,
    buf: BytesMut,
}

impl Transmit {
    /// True when nothing is waiting.
    pub fn is_empty(&self) -> bool {
        self.chunks.is_empty() && self.buf.is_empty()
    }

    /// Queue raw bytes (protocol headers, heartbeats).
    pub fn raw(&mut self, b: &[u8]) {
        self.buf.extend_from_slice(b);
    }

    /// Queue one frame.
    #[inline]
    pub fn frame<T: Encode + ?Sized>(&mut self, frame_type: u8, channel: u16, body: &T, payload: &[u8]) {
        write_frame(&mut self.buf, frame_type, channel, body, payload);
    }

    /// Queue one TRANSFER frame; its payload is referenced, not copied, when large.
    #[inline]
    pub fn transfer_frame(&mut self, channel: u16, t: &Transfer, payload: Bytes) {
        if payload.len() < ZERO_COPY_THRESHOLD {
            self.transfer_frame_copied(channel, t, &payload);
            return;
        }
        let at = self.buf.len();
        self.buf.put_slice(&[0, 0, 0, 0, 2, FRAME_TYPE_AMQP]);
        self.buf.put_u16(channel);
        TransferRef(t).encode(&mut self.buf);
        let size = (self.buf.len() - at + payload.len()) as u32;
        self.buf[at..at + 4].copy_from_slice(&size.to_be_bytes());
        self.chunks.push_back(self.buf.split().freeze());
        self.chunks.push_back(payload);
    }

    /// Queue one TRANSFER frame with its (small) payload copied into the buffer.
    #[inline]
    pub fn transfer_frame_copied(&mut self, channel: u16, t: &Transfer, payload: &[u8]) {
        write_frame(&mut self.buf, FRAME_TYPE_AMQP, channel, &TransferRef(t), payload);
    }

    /// Queue one TRANSFER frame (`t`, a TRANSFER performative) with `msg` encoded
    /// straight into the buffer as its payload; returns the payload's length and where the frame starts, for
    /// [`Self::take_back`].
    #[inline]
    pub fn transfer_frame_message<T: Encode>(&mut self, channel: u16, t: &T, msg: &Message) -> (usize, usize) {
        let at = self.buf.len();
        let n = write_frame_with(&mut self.buf, FRAME_TYPE_AMQP, channel, t, msg.body_len(), |out| msg.encode(out));
        (at, n)
    }

    /// Remove the last frame, which starts at `at` and ends with a payload of `len`
    /// bytes, and return a copy of that payload.
    pub fn take_back(&mut self, at: usize, len: usize) -> Bytes {
        let payload = Bytes::copy_from_slice(&self.buf[self.buf.len() - len..]);
        self.buf.truncate(at);
        payload
    }

    /// The next chunk to write.
    #[inline]
    pub fn pop(&mut self) -> Option<Bytes> {
        if let Some(c) = self.chunks.pop_front() {
            return Some(c);
        }
        if self.buf.is_empty() {
            return None;
        }
        Some(self.buf.split().freeze())
    }
}

/// Encodes a borrowed TRANSFER without building a `Performative`.
struct TransferRef<'a>(&'a Transfer);

impl Encode for TransferRef<'_> {
    #[inline]
    fn encode(&self, out: &mut BytesMut) {
        self.0.encode(out)
    }
}
