//! One-pass decoders and encoders for the hot performatives (FLOW, TRANSFER,
//! DISPOSITION).
//!
//! Decoding takes the shapes real peers send: a list8 or list32 of simple fields.
//! Anything unusual (another encoding, a properties map, an uncommon delivery state,
//! an error) makes the fast path give up without consuming input, and the general
//! decoder — which reports precise errors — takes over. Both produce identical values.
//!
//! Encoding grows the frame buffer once by the performative's largest size and
//! writes the fields into that room with plain stores, instead of one capacity check
//! per field. Values the fast encoders do not cover (properties, a delivery state
//! other than none, accepted or released) go to the general encoder; both produce
//! identical bytes (tested below).

use super::definitions::{DeliveryTag, ReceiverSettleMode, Role};
use super::performatives::{DeliveryState, Disposition, Flow, Transfer};
use crate::codec::{format, Decoder, Encode};
use bytes::{BufMut, BytesMut};

/// A cursor that answers `None` to anything it does not handle.
struct Fast<'a> {
    b: &'a [u8],
    p: usize,
}

impl<'a> Fast<'a> {
    #[inline(always)]
    fn byte(&mut self) -> Option<u8> {
        let v = *self.b.get(self.p)?;
        self.p += 1;
        Some(v)
    }

    #[inline(always)]
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        let s = self.b.get(self.p..self.p.checked_add(n)?)?;
        self.p += n;
        Some(s)
    }

    /// A nullable uint; `Err` when the field is not a uint.
    #[inline(always)]
    fn opt_u32(&mut self) -> Option<Option<u32>> {
        match self.byte()? {
            format::NULL => Some(None),
            format::UINT0 => Some(Some(0)),
            format::SMALLUINT => Some(Some(self.byte()? as u32)),
            format::UINT => {
                let s = self.take(4)?;
                Some(Some(u32::from_be_bytes([s[0], s[1], s[2], s[3]])))
            }
            _ => None,
        }
    }

    #[inline(always)]
    fn u32(&mut self) -> Option<u32> {
        self.opt_u32()?
    }

    #[inline(always)]
    fn opt_bool(&mut self) -> Option<Option<bool>> {
        match self.byte()? {
            format::NULL => Some(None),
            format::TRUE => Some(Some(true)),
            format::FALSE => Some(Some(false)),
            format::BOOLEAN => match self.byte()? {
                0 => Some(Some(false)),
                1 => Some(Some(true)),
                _ => None,
            },
            _ => None,
        }
    }

    /// A nullable delivery-tag (vbin8 of at most 32 bytes).
    #[inline(always)]
    fn opt_tag(&mut self) -> Option<Option<DeliveryTag>> {
        match self.byte()? {
            format::NULL => Some(None),
            format::VBIN8 => {
                let len = self.byte()? as usize;
                let tag = DeliveryTag::from_prefix(self.b.get(self.p..)?, len)?;
                self.p += len;
                Some(Some(tag))
            }
            _ => None,
        }
    }

    /// A nullable receiver-settle-mode (ubyte 0 or 1).
    #[inline(always)]
    fn opt_rcv_settle_mode(&mut self) -> Option<Option<ReceiverSettleMode>> {
        match self.byte()? {
            format::NULL => Some(None),
            format::UBYTE => match self.byte()? {
                0 => Some(Some(ReceiverSettleMode::First)),
                1 => Some(Some(ReceiverSettleMode::Second)),
                _ => None,
            },
            _ => None,
        }
    }

    /// null, accepted or released in their canonical forms.
    #[inline(always)]
    fn opt_state(&mut self) -> Option<Option<DeliveryState>> {
        match self.b.get(self.p..)? {
            [format::NULL, ..] => {
                self.p += 1;
                Some(None)
            }
            [0x00, 0x53, 0x24, 0x45, ..] => {
                self.p += 4;
                Some(Some(DeliveryState::Accepted))
            }
            [0x00, 0x53, 0x26, 0x45, ..] => {
                self.p += 4;
                Some(Some(DeliveryState::Released))
            }
            _ => None,
        }
    }

    /// The list header: (field count, end offset of the list).
    #[inline(always)]
    fn list(&mut self) -> Option<(u32, usize)> {
        match self.byte()? {
            format::LIST0 => Some((0, self.p)),
            format::LIST8 => {
                let size = self.byte()? as usize;
                let end = self.p + size;
                let count = self.byte()? as u32;
                (end <= self.b.len() && size >= 1).then_some((count, end))
            }
            format::LIST32 => {
                let s = self.take(8)?;
                let size = u32::from_be_bytes([s[0], s[1], s[2], s[3]]) as usize;
                let count = u32::from_be_bytes([s[4], s[5], s[6], s[7]]);
                let end = self.p - 4 + size;
                (size >= 4 && end <= self.b.len()).then_some((count, end))
            }
            _ => None,
        }
    }
}

/// Run a fast decoder on the list at the decoder's position; on success the list is
/// consumed, on `None` nothing is.
#[inline(always)]
fn run<'a, T>(d: &mut Decoder<'a>, f: impl FnOnce(&mut Fast<'a>, u32) -> Option<T>) -> Option<T> {
    let mut c = Fast { b: d.rest(), p: 0 };
    let (count, end) = c.list()?;
    let v = f(&mut c, count)?;
    if c.p != end {
        return None;
    }
    d.advance(end);
    Some(v)
}

/// Reads field `i` of `count` with `read`, or the default (absent) value.
macro_rules! field {
    ($c:expr, $i:expr, $count:expr, $read:expr, $absent:expr) => {
        if $i < $count {
            $read($c)?
        } else {
            $absent
        }
    };
}

/// A decoder at the list of a frame body that starts with the performative `code`'s
/// small descriptor (`00 53 code`), the only shape the one-pass decoders take.
#[inline(always)]
pub(crate) fn after_descriptor(body: &[u8], code: u8) -> Option<Decoder<'_>> {
    match *body {
        [format::DESCRIBED, format::SMALLULONG, c, ..] if c == code => Some(Decoder::new(&body[3..])),
        _ => None,
    }
}

/// FLOW in one pass (no properties map).
#[inline(always)]
pub(crate) fn flow(d: &mut Decoder<'_>) -> Option<Flow> {
    let mut f = Flow::default();
    flow_into(d, &mut f).then_some(f)
}

/// FLOW in one pass, written field by field into `f` (a slot the caller keeps; see
/// [`transfer_into`] for why). On `false` nothing is consumed and `f` holds some mix
/// of its old and the new fields; its properties are always `None` afterwards.
#[inline(always)]
pub(crate) fn flow_into(d: &mut Decoder<'_>, f: &mut Flow) -> bool {
    run(
        d,
        #[inline(always)]
        |c, n| {
            if !(4..=10).contains(&n) {
                return None;
            }
            f.next_incoming_id = c.opt_u32()?;
            f.incoming_window = c.u32()?;
            f.next_outgoing_id = c.u32()?;
            f.outgoing_window = c.u32()?;
            f.handle = field!(c, 4, n, Fast::opt_u32, None);
            f.delivery_count = field!(c, 5, n, Fast::opt_u32, None);
            f.link_credit = field!(c, 6, n, Fast::opt_u32, None);
            f.available = field!(c, 7, n, Fast::opt_u32, None);
            f.drain = field!(c, 8, n, Fast::opt_bool, None);
            f.echo = field!(c, 9, n, Fast::opt_bool, None);
            f.properties = None;
            Some(())
        },
    )
    .is_some()
}

/// TRANSFER in one pass (null, accepted or released state).
#[inline(always)]
pub(crate) fn transfer(d: &mut Decoder<'_>) -> Option<Transfer> {
    let mut t = Transfer::default();
    transfer_into(d, &mut t).then_some(t)
}

/// TRANSFER in one pass, written field by field into `t` (the engine's slot), so the
/// decoded transfer is never moved: a move copies it with wide loads of what were narrow
/// stores a moment before, and each such load waits for the stores to retire. On
/// `false` nothing is consumed and `t` holds some mix of its old and the new fields.
#[inline(always)]
pub(crate) fn transfer_into(d: &mut Decoder<'_>, t: &mut Transfer) -> bool {
    run(
        d,
        #[inline(always)]
        |c, n| {
            if !(1..=11).contains(&n) {
                return None;
            }
            t.handle = c.u32()?;
            t.delivery_id = field!(c, 1, n, Fast::opt_u32, None);
            t.delivery_tag = field!(c, 2, n, Fast::opt_tag, None);
            t.message_format = field!(c, 3, n, Fast::opt_u32, None);
            t.settled = field!(c, 4, n, Fast::opt_bool, None);
            t.more = field!(c, 5, n, Fast::opt_bool, None);
            t.rcv_settle_mode = field!(c, 6, n, Fast::opt_rcv_settle_mode, None);
            t.state = field!(c, 7, n, Fast::opt_state, None);
            t.resume = field!(c, 8, n, Fast::opt_bool, None);
            t.aborted = field!(c, 9, n, Fast::opt_bool, None);
            t.batchable = field!(c, 10, n, Fast::opt_bool, None);
            Some(())
        },
    )
    .is_some()
}

/// DISPOSITION in one pass (null, accepted or released state).
#[inline(always)]
pub(crate) fn disposition(d: &mut Decoder<'_>) -> Option<Disposition> {
    let mut x = Disposition::default();
    disposition_into(d, &mut x).then_some(x)
}

/// DISPOSITION in one pass, written field by field into `x` (a slot the caller keeps;
/// see [`transfer_into`] for why). On `false` nothing is consumed and `x` holds some
/// mix of its old and the new fields.
#[inline(always)]
pub(crate) fn disposition_into(d: &mut Decoder<'_>, x: &mut Disposition) -> bool {
    run(
        d,
        #[inline(always)]
        |c, n| {
            if !(2..=6).contains(&n) {
                return None;
            }
            x.role = match c.opt_bool()? {
                Some(true) => Role::Receiver,
                Some(false) => Role::Sender,
                None => return None,
            };
            x.first = c.u32()?;
            x.last = field!(c, 2, n, Fast::opt_u32, None);
            x.settled = field!(c, 3, n, Fast::opt_bool, None);
            x.state = field!(c, 4, n, Fast::opt_state, None);
            x.batchable = field!(c, 5, n, Fast::opt_bool, None);
            Some(())
        },
    )
    .is_some()
}

// ---------------------------------------------------------------- encoding

/// The largest FLOW the fast encoder writes: descriptor (3), list8 header (3), eight
/// uints (5 each) and two booleans.
const FLOW_MAX: usize = 3 + 3 + 8 * 5 + 2;
/// TRANSFER: descriptor, list8 header, three uints, a 32-byte tag (vbin8), a ubyte,
/// an accepted/released state (4) and five booleans.
const TRANSFER_MAX: usize = 3 + 3 + 3 * 5 + 34 + 2 + 4 + 5;
/// DISPOSITION: descriptor, list8 header, role, two uints, state and two booleans.
const DISPOSITION_MAX: usize = 3 + 3 + 1 + 2 * 5 + 4 + 2;

/// A performative being written straight into the frame buffer: the buffer is grown
/// by the performative's largest size once, the fields are plain stores into that
/// room, and the unused tail is cut off at the end. The constants above bound what
/// the fast encoders write, so every store is in range.
struct Room<'a> {
    b: &'a mut [u8],
    n: usize,
    /// Field count and the end of the last non-null field (trailing nulls are elided).
    count: u8,
    end: usize,
    fields: u8,
}

/// Encode one performative with `f` at the end of `out`; `f` answers false for a
/// value it does not cover, and then nothing is written.
#[inline(always)]
fn encode_with<const MAX: usize>(out: &mut BytesMut, code: u8, f: impl FnOnce(&mut Room<'_>) -> bool) -> bool {
    let at = out.len();
    // A constant-size zero fill: inline stores, no call.
    out.put_slice(&[0u8; MAX]);
    let mut s = Room { b: &mut out[at..], n: 6, count: 0, end: 6, fields: 0 };
    s.b[..6].copy_from_slice(&[format::DESCRIBED, format::SMALLULONG, code, format::LIST8, 0, 0]);
    if !f(&mut s) {
        out.truncate(at);
        return false;
    }
    // Every performative written here has a mandatory first field (count >= 1) and a
    // body far below 255 bytes: always a list8.
    s.b[4] = (s.end - 5) as u8;
    s.b[5] = s.count;
    let end = s.end;
    out.truncate(at + end);
    true
}

impl Room<'_> {
    #[inline(always)]
    fn put(&mut self, v: u8) {
        self.b[self.n] = v;
        self.n += 1;
    }

    /// Close a field: a non-null one moves the list's end past it.
    #[inline(always)]
    fn field(&mut self, null: bool) {
        self.fields += 1;
        if !null {
            self.count = self.fields;
            self.end = self.n;
        }
    }

    /// A delivery tag: all 32 bytes of its storage in one fixed-size copy (the room is
    /// there: TRANSFER_MAX counts a 32-byte tag), then only its length counts; what
    /// follows overwrites the rest.
    #[inline(always)]
    fn tag(&mut self, tag: &DeliveryTag) {
        let len = tag.as_slice().len();
        self.put(format::VBIN8);
        self.put(len as u8);
        self.b[self.n..self.n + 32].copy_from_slice(tag.padded());
        self.n += len;
        self.field(false);
    }

    #[inline(always)]
    fn uint(&mut self, v: u32) {
        match v {
            0 => self.put(format::UINT0),
            1..=255 => {
                self.put(format::SMALLUINT);
                self.put(v as u8);
            }
            _ => {
                self.put(format::UINT);
                self.b[self.n..self.n + 4].copy_from_slice(&v.to_be_bytes());
                self.n += 4;
            }
        }
        self.field(false);
    }

    #[inline(always)]
    fn opt_uint(&mut self, v: Option<u32>) {
        match v {
            Some(v) => self.uint(v),
            None => self.null(),
        }
    }

    #[inline(always)]
    fn null(&mut self) {
        self.put(format::NULL);
        self.field(true);
    }

    #[inline(always)]
    fn bool(&mut self, v: bool) {
        self.put(if v { format::TRUE } else { format::FALSE });
        self.field(false);
    }

    #[inline(always)]
    fn opt_bool(&mut self, v: Option<bool>) {
        match v {
            Some(v) => self.bool(v),
            None => self.null(),
        }
    }

    /// None, accepted or released; false (nothing written) for any other state.
    #[inline(always)]
    fn opt_state(&mut self, v: &Option<DeliveryState>) -> bool {
        let code = match v {
            None => {
                self.null();
                return true;
            }
            Some(DeliveryState::Accepted) => 0x24,
            Some(DeliveryState::Released) => 0x26,
            Some(_) => return false,
        };
        self.b[self.n..self.n + 4].copy_from_slice(&[format::DESCRIBED, format::SMALLULONG, code, format::LIST0]);
        self.n += 4;
        self.field(false);
        true
    }
}

impl Encode for Flow {
    #[inline]
    fn encode(&self, out: &mut BytesMut) {
        if self.properties.is_some() {
            return self.encode_general(out);
        }
        encode_with::<FLOW_MAX>(
            out,
            Flow::CODE as u8,
            #[inline(always)]
            |s| {
                s.opt_uint(self.next_incoming_id);
                s.uint(self.incoming_window);
                s.uint(self.next_outgoing_id);
                s.uint(self.outgoing_window);
                s.opt_uint(self.handle);
                s.opt_uint(self.delivery_count);
                s.opt_uint(self.link_credit);
                s.opt_uint(self.available);
                s.opt_bool(self.drain);
                s.opt_bool(self.echo);
                true
            },
        );
    }
}

impl Encode for Transfer {
    #[inline]
    fn encode(&self, out: &mut BytesMut) {
        let done = encode_with::<TRANSFER_MAX>(
            out,
            Transfer::CODE as u8,
            #[inline(always)]
            |s| {
                s.uint(self.handle);
                s.opt_uint(self.delivery_id);
                match &self.delivery_tag {
                    Some(tag) => s.tag(tag),
                    None => s.null(),
                }
                s.opt_uint(self.message_format);
                s.opt_bool(self.settled);
                s.opt_bool(self.more);
                match self.rcv_settle_mode {
                    Some(m) => {
                        s.put(format::UBYTE);
                        s.put(m as u8);
                        s.field(false);
                    }
                    None => s.null(),
                }
                if !s.opt_state(&self.state) {
                    return false;
                }
                s.opt_bool(self.resume);
                s.opt_bool(self.aborted);
                s.opt_bool(self.batchable);
                true
            },
        );
        if !done {
            self.encode_general(out);
        }
    }
}

/// The first (usually the only) TRANSFER of an outgoing delivery, encoded from its
/// parts: the bytes of the `Transfer` with these fields and no others set (`more`
/// false), without building one (its fields stored, then loaded back to encode, then
/// its state dropped: about a tenth of the broker's samples on the events path).
#[derive(Debug, Clone, Copy)]
pub(crate) struct FirstTransfer<'a> {
    /// handle.
    pub(crate) handle: u32,
    /// delivery-id.
    pub(crate) delivery_id: u32,
    /// delivery-tag.
    pub(crate) tag: &'a DeliveryTag,
    /// message-format.
    pub(crate) message_format: u32,
    /// settled.
    pub(crate) settled: bool,
}

impl Encode for FirstTransfer<'_> {
    #[inline]
    fn encode(&self, out: &mut BytesMut) {
        encode_with::<TRANSFER_MAX>(
            out,
            Transfer::CODE as u8,
            #[inline(always)]
            |s| {
                s.uint(self.handle);
                s.uint(self.delivery_id);
                s.tag(self.tag);
                s.uint(self.message_format);
                s.bool(self.settled);
                true
            },
        );
    }
}

impl Encode for Disposition {
    #[inline]
    fn encode(&self, out: &mut BytesMut) {
        let done = encode_with::<DISPOSITION_MAX>(
            out,
            Disposition::CODE as u8,
            #[inline(always)]
            |s| {
                s.bool(self.role == Role::Receiver);
                s.uint(self.first);
                s.opt_uint(self.last);
                s.opt_bool(self.settled);
                if !s.opt_state(&self.state) {
                    return false;
                }
                s.opt_bool(self.batchable);
                true
            },
        );
        if !done {
            self.encode_general(out);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codec::Encode;
    use crate::types::{Modified, Performative};

    /// A xorshift64 generator: the same values on every run.
    fn rng(seed: u64) -> impl FnMut() -> u64 {
        let mut x = seed;
        move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        }
    }

    /// Absent, 0 (uint0), below 256 (smalluint), or wider (uint).
    fn some_uint(r: u64) -> Option<u32> {
        match r % 5 {
            0 => None,
            1 => Some(0),
            2 => Some((r >> 8) as u32 % 256),
            3 => Some(256 + (r >> 8) as u32 % 1000),
            _ => Some((r >> 16) as u32),
        }
    }

    fn some_bool(r: u64) -> Option<bool> {
        match r % 3 {
            0 => None,
            1 => Some(true),
            _ => Some(false),
        }
    }

    /// A FLOW with every field present or absent (no properties).
    fn random_flow(rand: &mut impl FnMut() -> u64) -> Flow {
        Flow {
            next_incoming_id: some_uint(rand()),
            incoming_window: some_uint(rand()).unwrap_or(7),
            next_outgoing_id: some_uint(rand()).unwrap_or(0),
            outgoing_window: some_uint(rand()).unwrap_or(u32::MAX),
            handle: some_uint(rand()),
            delivery_count: some_uint(rand()),
            link_credit: some_uint(rand()),
            available: some_uint(rand()),
            drain: some_bool(rand()),
            echo: some_bool(rand()),
            properties: None,
        }
    }

    /// A DISPOSITION with every field present or absent and `state` from `state`.
    fn random_disposition(rand: &mut impl FnMut() -> u64, state: Option<DeliveryState>) -> Disposition {
        Disposition {
            role: if rand() & 1 == 0 { Role::Sender } else { Role::Receiver },
            first: some_uint(rand()).unwrap_or(3),
            last: some_uint(rand()),
            settled: some_bool(rand()),
            state,
            batchable: some_bool(rand()),
        }
    }

    fn samples() -> Vec<Vec<u8>> {
        let flow = Flow {
            next_incoming_id: Some(1),
            incoming_window: 2048,
            next_outgoing_id: 70000,
            outgoing_window: 0,
            handle: Some(3),
            delivery_count: Some(u32::MAX),
            link_credit: Some(100),
            available: None,
            drain: Some(true),
            echo: Some(false),
            properties: None,
        };
        let transfer = Transfer {
            handle: 1,
            delivery_id: Some(300),
            delivery_tag: DeliveryTag::from_slice(&[1, 2, 3]),
            message_format: Some(0),
            settled: Some(false),
            more: Some(true),
            rcv_settle_mode: Some(ReceiverSettleMode::First),
            state: Some(DeliveryState::Accepted),
            resume: None,
            aborted: Some(false),
            batchable: Some(true),
        };
        let disposition = Disposition {
            role: Role::Receiver,
            first: 5,
            last: Some(9),
            settled: Some(true),
            state: Some(DeliveryState::Released),
            batchable: None,
        };
        let modified = Disposition {
            state: Some(DeliveryState::Modified(Box::new(Modified {
                delivery_failed: Some(true),
                ..Default::default()
            }))),
            ..disposition.clone()
        };
        [
            Performative::Flow(flow),
            Performative::Transfer(transfer),
            Performative::Disposition(disposition),
            Performative::Disposition(modified),
        ]
        .iter()
        .map(|p| p.to_bytes()[3..].to_vec()) // the list after `00 53 xx`
        .collect()
    }

    /// Whenever the fast path accepts bytes, the general decoder accepts them too and
    /// produces the same value; and the fast path never consumes input it declines.
    #[test]
    fn fast_paths_agree_with_the_general_decoders_on_mutated_input() {
        let mut rand = rng(0x2545_f491_4f6c_dd1d);
        let mut accepted = 0;
        for base in samples() {
            for round in 0..20_000 {
                let mut b = base.clone();
                if round > 0 {
                    for _ in 0..(rand() % 3 + 1) {
                        let i = (rand() as usize) % b.len();
                        b[i] = rand() as u8;
                    }
                }
                let mut d = Decoder::new(&b);
                if let Some(f) = flow(&mut d) {
                    accepted += 1;
                    assert_eq!(Flow::decode_list(&mut Decoder::new(&b)), Ok(f));
                } else {
                    assert_eq!(d.position(), 0);
                }
                let mut d = Decoder::new(&b);
                if let Some(t) = transfer(&mut d) {
                    accepted += 1;
                    assert_eq!(Transfer::decode_list(&mut Decoder::new(&b)), Ok(t));
                } else {
                    assert_eq!(d.position(), 0);
                }
                let mut d = Decoder::new(&b);
                if let Some(x) = disposition(&mut d) {
                    accepted += 1;
                    assert_eq!(Disposition::decode_list(&mut Decoder::new(&b)), Ok(x));
                } else {
                    assert_eq!(d.position(), 0);
                }
            }
        }
        assert!(accepted > 1000, "the fast paths accepted only {accepted} inputs");
    }

    /// The one-pass encoders write exactly what the general encoder writes, for every
    /// field present or absent and every width of every uint.
    #[test]
    fn first_transfer_encodes_as_the_transfer_it_stands_for() {
        let mut rand = rng(0x2545_f491_4f6c_dd1d);
        let uint = |r: u64| -> u32 {
            match r % 4 {
                0 => 0,
                1 => (r >> 8) as u32 % 256,
                2 => 256 + (r >> 8) as u32 % 1000,
                _ => (r >> 16) as u32,
            }
        };
        for _ in 0..20_000 {
            let tag_len = (rand() % 33) as usize;
            let bytes: Vec<u8> = (0..tag_len).map(|_| rand() as u8).collect();
            let tag = DeliveryTag::from_prefix(&bytes, tag_len).unwrap();
            let (handle, delivery_id, message_format, settled) =
                (uint(rand()), uint(rand()), uint(rand()), rand() & 1 == 0);
            let t = Transfer {
                handle,
                delivery_id: Some(delivery_id),
                delivery_tag: Some(tag.clone()),
                message_format: Some(message_format),
                settled: Some(settled),
                ..Default::default()
            };
            let (mut a, mut b, mut c) = (BytesMut::new(), BytesMut::new(), BytesMut::new());
            FirstTransfer { handle, delivery_id, tag: &tag, message_format, settled }.encode(&mut a);
            t.encode(&mut b);
            t.encode_general(&mut c);
            assert_eq!(a, b, "{t:?}");
            assert_eq!(a, c, "{t:?}");
        }
    }

    #[test]
    fn fast_encoders_agree_with_the_general_encoder() {
        let mut rand = rng(0x9e37_79b9_7f4a_7c15);
        let state = |r: u64| -> Option<DeliveryState> {
            match r % 5 {
                0 => None,
                1 => Some(DeliveryState::Accepted),
                2 => Some(DeliveryState::Released),
                3 => Some(DeliveryState::Rejected(Box::default())),
                _ => Some(DeliveryState::Modified(Box::new(Modified {
                    delivery_failed: Some(true),
                    ..Default::default()
                }))),
            }
        };
        let check = |p: &dyn Fn(&mut BytesMut), g: &dyn Fn(&mut BytesMut)| {
            let (mut a, mut b) = (BytesMut::new(), BytesMut::new());
            p(&mut a);
            g(&mut b);
            assert_eq!(a, b);
        };
        for _ in 0..20_000 {
            let f = random_flow(&mut rand);
            check(&|o| f.encode(o), &|o| f.encode_general(o));
            let tag_len = (rand() % 34) as usize;
            let t = Transfer {
                handle: some_uint(rand()).unwrap_or(1),
                delivery_id: some_uint(rand()),
                delivery_tag: if tag_len == 33 { None } else { DeliveryTag::from_slice(&[0xab; 32][..tag_len]) },
                message_format: some_uint(rand()),
                settled: some_bool(rand()),
                more: some_bool(rand()),
                rcv_settle_mode: match rand() % 3 {
                    0 => None,
                    1 => Some(ReceiverSettleMode::First),
                    _ => Some(ReceiverSettleMode::Second),
                },
                state: state(rand()),
                resume: some_bool(rand()),
                aborted: some_bool(rand()),
                batchable: some_bool(rand()),
            };
            check(&|o| t.encode(o), &|o| t.encode_general(o));
            let st = state(rand());
            let d = random_disposition(&mut rand, st);
            check(&|o| d.encode(o), &|o| d.encode_general(o));
        }
        // A properties map takes the general path and still encodes the same.
        let props = crate::codec::Fields(vec![(crate::codec::Symbol::new("k"), crate::codec::Value::Uint(1))]);
        let f = Flow { properties: Some(props), ..Default::default() };
        check(&|o| f.encode(o), &|o| f.encode_general(o));
    }

    #[test]
    fn flows_decoded_into_a_reused_slot_match_the_general_decoder() {
        let mut rand = rng(0x5851_f42d_4c95_7f2d);
        // One slot for every frame, as the engine keeps it: a field the decoder failed
        // to write would keep the previous frame's value.
        let mut slot = Flow::default();
        for _ in 0..20_000 {
            let f = random_flow(&mut rand);
            let wire = f.to_bytes();
            assert!(Flow::decode_body_in(&wire, &mut slot), "{f:?}");
            assert_eq!(slot, f);
            assert_eq!(slot, <Flow as crate::codec::Decode>::decode_exact(&wire).unwrap());
        }
        // Not in the usual shape: declined, for the general decoder.
        let props = crate::codec::Fields(vec![(crate::codec::Symbol::new("k"), crate::codec::Value::Uint(1))]);
        let with_props = Flow { properties: Some(props), ..Default::default() };
        assert!(!Flow::decode_body_in(&with_props.to_bytes(), &mut slot));
        let d = Disposition { role: Role::Receiver, first: 1, ..Default::default() };
        assert!(!Flow::decode_body_in(&d.to_bytes(), &mut slot));
        let wire = Flow { handle: Some(1), ..Default::default() }.to_bytes();
        for cut in 0..wire.len() {
            assert!(!Flow::decode_body_in(&wire[..cut], &mut slot), "{cut} bytes");
        }
    }

    #[test]
    fn dispositions_decoded_into_a_reused_slot_match_the_general_decoder() {
        let mut rand = rng(0x2d35_8dcc_aa6c_78a5);
        let mut slot = Disposition::default();
        for _ in 0..20_000 {
            // The states the one-pass decoder takes.
            let state = match rand() % 3 {
                0 => None,
                1 => Some(DeliveryState::Accepted),
                _ => Some(DeliveryState::Released),
            };
            let d = random_disposition(&mut rand, state);
            let wire = d.to_bytes();
            assert!(Disposition::decode_body_in(&wire, &mut slot), "{d:?}");
            assert_eq!(slot, d);
            assert_eq!(slot, <Disposition as crate::codec::Decode>::decode_exact(&wire).unwrap());
        }
        // Not in the usual shape: declined, for the general decoder.
        let rejected = Disposition { state: Some(DeliveryState::Rejected(Box::default())), ..Default::default() };
        assert!(!Disposition::decode_body_in(&rejected.to_bytes(), &mut slot));
        assert!(!Disposition::decode_body_in(&Flow::default().to_bytes(), &mut slot));
        let wire = Disposition { first: 300, last: Some(301), ..Default::default() }.to_bytes();
        for cut in 0..wire.len() {
            assert!(!Disposition::decode_body_in(&wire[..cut], &mut slot), "{cut} bytes");
        }
    }
}
