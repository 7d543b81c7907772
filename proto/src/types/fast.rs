//! One-pass decoders for the hot performatives (FLOW, TRANSFER, DISPOSITION) in the
//! shapes real peers send: a list8 or list32 of simple fields. Anything unusual
//! (another encoding, a properties map, an uncommon delivery state, an error) makes
//! the fast path give up without consuming input, and the general decoder — which
//! reports precise errors — takes over. Both produce identical values.

use super::definitions::{DeliveryTag, ReceiverSettleMode, Role};
use super::performatives::{DeliveryState, Disposition, Flow, Transfer};
use crate::codec::{format, Decoder};

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
    d.take(end).ok()?;
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

/// FLOW in one pass (no properties map).
#[inline]
pub(crate) fn flow(d: &mut Decoder<'_>) -> Option<Flow> {
    run(d, |c, n| {
        if !(4..=10).contains(&n) {
            return None;
        }
        Some(Flow {
            next_incoming_id: c.opt_u32()?,
            incoming_window: c.u32()?,
            next_outgoing_id: c.u32()?,
            outgoing_window: c.u32()?,
            handle: field!(c, 4, n, Fast::opt_u32, None),
            delivery_count: field!(c, 5, n, Fast::opt_u32, None),
            link_credit: field!(c, 6, n, Fast::opt_u32, None),
            available: field!(c, 7, n, Fast::opt_u32, None),
            drain: field!(c, 8, n, Fast::opt_bool, None),
            echo: field!(c, 9, n, Fast::opt_bool, None),
            properties: None,
        })
    })
}

/// TRANSFER in one pass (null, accepted or released state).
#[inline]
pub(crate) fn transfer(d: &mut Decoder<'_>) -> Option<Transfer> {
    run(d, |c, n| {
        if !(1..=11).contains(&n) {
            return None;
        }
        let handle = c.u32()?;
        let delivery_id = field!(c, 1, n, Fast::opt_u32, None);
        let delivery_tag = if n > 2 {
            match c.byte()? {
                format::NULL => None,
                format::VBIN8 => {
                    let len = c.byte()? as usize;
                    Some(DeliveryTag::from_slice(c.take(len)?)?)
                }
                _ => return None,
            }
        } else {
            None
        };
        Some(Transfer {
            handle,
            delivery_id,
            delivery_tag,
            message_format: field!(c, 3, n, Fast::opt_u32, None),
            settled: field!(c, 4, n, Fast::opt_bool, None),
            more: field!(c, 5, n, Fast::opt_bool, None),
            rcv_settle_mode: if n > 6 {
                match c.byte()? {
                    format::NULL => None,
                    format::UBYTE => match c.byte()? {
                        0 => Some(ReceiverSettleMode::First),
                        1 => Some(ReceiverSettleMode::Second),
                        _ => return None,
                    },
                    _ => return None,
                }
            } else {
                None
            },
            state: field!(c, 7, n, Fast::opt_state, None),
            resume: field!(c, 8, n, Fast::opt_bool, None),
            aborted: field!(c, 9, n, Fast::opt_bool, None),
            batchable: field!(c, 10, n, Fast::opt_bool, None),
        })
    })
}

/// DISPOSITION in one pass (null, accepted or released state).
#[inline]
pub(crate) fn disposition(d: &mut Decoder<'_>) -> Option<Disposition> {
    run(d, |c, n| {
        if !(2..=6).contains(&n) {
            return None;
        }
        let role = match c.opt_bool()? {
            Some(true) => Role::Receiver,
            Some(false) => Role::Sender,
            None => return None,
        };
        Some(Disposition {
            role,
            first: c.u32()?,
            last: field!(c, 2, n, Fast::opt_u32, None),
            settled: field!(c, 3, n, Fast::opt_bool, None),
            state: field!(c, 4, n, Fast::opt_state, None),
            batchable: field!(c, 5, n, Fast::opt_bool, None),
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codec::Encode;
    use crate::types::{Modified, Performative};

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
        let mut x: u64 = 0x2545_f491_4f6c_dd1d;
        let mut rand = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
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
}
