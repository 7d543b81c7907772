//! The unsettled deliveries of one session in one direction, by delivery-id.
//!
//! Delivery-ids are allocated one after another on a session, and deliveries are
//! mostly settled in the order they were sent, so the common case is a window: slot
//! `i` holds delivery `base + i`. Neighbouring deliveries share cache lines, where a
//! hash map scattered them: with thousands of deliveries waiting (a durable queue's
//! publishes wait for the group commit), nearly every insert and settle of the map
//! missed the cache (75 % of `Connection::disposition`'s samples were the load of
//! the bucket's key).
//!
//! The peer chooses the ids of incoming deliveries, so the window is bounded: an
//! insert may open at most [`GAP_MAX`] free slots ahead of its end, and it never holds
//! more than [`WINDOW_MAX`] slots. Whatever does not fit (ids far apart, out of
//! order, or beyond the bound) goes to an overflow map, as before; a lookup tries the
//! window, then the overflow. Memory stays proportional to the deliveries tracked
//! (at most `GAP_MAX + 1` slots each, and `WINDOW_MAX` slots in all, 64 KiB).

use super::LinkId;
use std::collections::VecDeque;

type HashMap<K, V> = std::collections::HashMap<K, V, foldhash::fast::RandomState>;

/// A free slot.
const EMPTY: u32 = u32::MAX;
/// Most slots the window holds.
pub(crate) const WINDOW_MAX: usize = 16 * 1024;
/// Most free slots one insert may open ahead of the window's end (deliveries sent
/// settled take ids too, so a few gaps are normal).
pub(crate) const GAP_MAX: usize = 64;

/// Unsettled deliveries: delivery-id -> link.
#[derive(Debug, Default)]
pub(crate) struct Unsettled {
    /// Delivery-id of `slots[0]`.
    base: u32,
    /// Link ids (`EMPTY` for none); empty, or its first slot occupied.
    slots: VecDeque<u32>,
    /// Occupied slots.
    in_window: usize,
    overflow: HashMap<u32, LinkId>,
}

impl Unsettled {
    /// Deliveries tracked.
    pub(crate) fn len(&self) -> usize {
        self.in_window + self.overflow.len()
    }

    /// The window's offset of `id`, when the window covers it.
    #[inline]
    fn offset(&self, id: u32) -> Option<usize> {
        let off = id.wrapping_sub(self.base) as usize;
        (off < self.slots.len()).then_some(off)
    }

    /// Track `id` for `link` (replacing what `id` had).
    #[inline]
    pub(crate) fn insert(&mut self, id: u32, link: LinkId) {
        if link.0 != EMPTY {
            if let Some(off) = self.offset(id) {
                if self.slots[off] == EMPTY {
                    self.in_window += 1;
                }
                self.slots[off] = link.0;
                self.forget_overflow(id);
                return;
            }
            if self.in_window == 0 {
                // (Then the window is empty too: its first slot is always occupied.)
                debug_assert!(self.slots.is_empty());
                self.slots.clear();
                self.base = id;
                self.slots.push_back(link.0);
                self.in_window = 1;
                self.forget_overflow(id);
                return;
            }
            let off = id.wrapping_sub(self.base) as usize;
            let gap = off.wrapping_sub(self.slots.len());
            if gap <= GAP_MAX && off < WINDOW_MAX {
                for _ in 0..gap {
                    self.slots.push_back(EMPTY);
                }
                self.slots.push_back(link.0);
                self.in_window += 1;
                self.forget_overflow(id);
                return;
            }
        }
        self.overflow.insert(id, link);
    }

    #[inline]
    fn forget_overflow(&mut self, id: u32) {
        if !self.overflow.is_empty() {
            self.overflow.remove(&id);
        }
    }

    /// The link of `id`, if tracked.
    #[inline]
    pub(crate) fn get(&self, id: u32) -> Option<LinkId> {
        if let Some(off) = self.offset(id) {
            let v = self.slots[off];
            if v != EMPTY {
                return Some(LinkId(v));
            }
        }
        if self.overflow.is_empty() {
            None
        } else {
            self.overflow.get(&id).copied()
        }
    }

    /// Stop tracking `id`; its link, if it was tracked.
    #[inline]
    pub(crate) fn remove(&mut self, id: u32) -> Option<LinkId> {
        if let Some(off) = self.offset(id) {
            let v = self.slots[off];
            if v != EMPTY {
                self.slots[off] = EMPTY;
                self.in_window -= 1;
                if off == 0 {
                    self.trim();
                }
                return Some(LinkId(v));
            }
        }
        if self.overflow.is_empty() {
            None
        } else {
            self.overflow.remove(&id)
        }
    }

    /// Drop free slots from the front, so the first slot is occupied (or none is left).
    fn trim(&mut self) {
        while self.slots.front() == Some(&EMPTY) {
            self.slots.pop_front();
            self.base = self.base.wrapping_add(1);
        }
    }

    /// Keep only the deliveries whose link satisfies `keep` (the engine drops a link's
    /// deliveries by its trail instead).
    #[cfg(test)]
    fn retain(&mut self, mut keep: impl FnMut(LinkId) -> bool) {
        for v in self.slots.iter_mut() {
            if *v != EMPTY && !keep(LinkId(*v)) {
                *v = EMPTY;
                self.in_window -= 1;
            }
        }
        self.trim();
        self.overflow.retain(|_, l| keep(*l));
    }

    /// Every tracked delivery (in no particular order).
    pub(crate) fn iter(&self) -> impl Iterator<Item = (u32, LinkId)> + '_ {
        let base = self.base;
        self.slots
            .iter()
            .enumerate()
            .filter(|(_, v)| **v != EMPTY)
            .map(move |(i, v)| (base.wrapping_add(i as u32), LinkId(*v)))
            .chain(self.overflow.iter().map(|(id, l)| (*id, *l)))
    }

    /// Slots in the window (for tests of the bounds).
    #[cfg(test)]
    fn window_slots(&self) -> usize {
        self.slots.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::HashMap as Model;

    #[derive(Debug, Clone)]
    enum Op {
        /// Insert the next id after the last inserted, plus a gap.
        Next(u8, u32),
        /// Insert an arbitrary id.
        Any(u32, u32),
        /// Remove an id near the last inserted (or an arbitrary one).
        Remove(u16),
        RemoveAny(u32),
        /// Drop the deliveries of one link.
        Retain(u32),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            6 => (0u8..80, 0u32..4).prop_map(|(g, l)| Op::Next(g, l)),
            1 => (any::<u32>(), 0u32..4).prop_map(|(i, l)| Op::Any(i, l)),
            6 => any::<u16>().prop_map(Op::Remove),
            1 => any::<u32>().prop_map(Op::RemoveAny),
            1 => (0u32..4).prop_map(Op::Retain),
        ]
    }

    fn check(u: &Unsettled, m: &Model<u32, LinkId>) {
        assert_eq!(u.len(), m.len());
        let mut got: Vec<_> = u.iter().collect();
        got.sort();
        let mut want: Vec<_> = m.iter().map(|(k, v)| (*k, *v)).collect();
        want.sort();
        assert_eq!(got, want);
        assert!(u.window_slots() <= WINDOW_MAX);
        assert_eq!(u.in_window, u.slots.iter().filter(|v| **v != EMPTY).count(), "occupied slots miscounted");
        assert!(u.slots.front() != Some(&EMPTY), "the window starts with a free slot");
    }

    proptest! {
        /// Any sequence of operations gives what a map gives, within the bounds.
        #[test]
        fn behaves_like_a_map(start in any::<u32>(), ops in proptest::collection::vec(op(), 1..400)) {
            let mut u = Unsettled::default();
            let mut m: Model<u32, LinkId> = Model::new();
            let mut last = start;
            for o in ops {
                match o {
                    Op::Next(gap, l) => {
                        last = last.wrapping_add(1 + gap as u32);
                        u.insert(last, LinkId(l));
                        m.insert(last, LinkId(l));
                    }
                    Op::Any(id, l) => {
                        u.insert(id, LinkId(l));
                        m.insert(id, LinkId(l));
                    }
                    Op::Remove(back) => {
                        let id = last.wrapping_sub(back as u32 % 300);
                        prop_assert_eq!(u.remove(id), m.remove(&id));
                    }
                    Op::RemoveAny(id) => prop_assert_eq!(u.remove(id), m.remove(&id)),
                    Op::Retain(l) => {
                        u.retain(|x| x.0 != l);
                        m.retain(|_, x| x.0 != l);
                    }
                }
                for probe in [last, last.wrapping_sub(1), last.wrapping_add(1), last.wrapping_sub(70)] {
                    prop_assert_eq!(u.get(probe), m.get(&probe).copied());
                }
                check(&u, &m);
            }
        }
    }

    /// Deliveries sent and settled in order, across the serial-number wrap, stay in the
    /// window (the overflow map is not used) and leave nothing behind.
    #[test]
    fn in_order_deliveries_use_the_window_only() {
        let mut u = Unsettled::default();
        let mut sent = std::collections::VecDeque::new();
        let mut next = u32::MAX - 5_000;
        for round in 0..20_000u32 {
            u.insert(next, LinkId(round % 3));
            sent.push_back(next);
            next = next.wrapping_add(1 + round % 2); // every other id went out settled
            if sent.len() > 4_000 {
                let oldest = sent.pop_front().unwrap();
                assert!(u.remove(oldest).is_some());
            }
            assert!(u.overflow.is_empty(), "round {round}: in-order ids went to the overflow map");
        }
        for id in sent {
            assert!(u.remove(id).is_some());
        }
        assert_eq!(u.len(), 0);
        assert_eq!(u.window_slots(), 0);
    }

    /// A peer that spreads its ids, or never settles its first delivery, cannot make the
    /// window grow past its bound.
    #[test]
    fn the_window_is_bounded_whatever_the_ids() {
        let mut u = Unsettled::default();
        // Ids far apart: one slot each, the rest in the overflow map.
        for i in 0..1_000u32 {
            u.insert(i.wrapping_mul(1_000_003), LinkId(1));
        }
        assert_eq!(u.len(), 1_000);
        assert!(u.window_slots() <= GAP_MAX + 1, "{} slots for spread ids", u.window_slots());
        // The first delivery never settled, everything after it settled at once.
        let mut u = Unsettled::default();
        u.insert(0, LinkId(1));
        for id in 1..100_000u32 {
            u.insert(id, LinkId(2));
            assert_eq!(u.remove(id), Some(LinkId(2)));
        }
        assert!(u.window_slots() <= WINDOW_MAX);
        assert_eq!(u.len(), 1);
        assert_eq!(u.get(0), Some(LinkId(1)));
    }
}
