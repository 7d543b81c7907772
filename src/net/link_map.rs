//! The connection driver's per-link state, by [`LinkId`].
//!
//! A `LinkId` is the index of the link's slot in the engine, and the engine reuses
//! freed slots first, so the ids of a connection's links are dense: a vector indexed
//! by the id replaces a hash map on the per-message path (the map's lookup was about
//! 45 % of `Driver::on_event`'s samples in the frame pump). The vector is no longer
//! than the engine's own table of link slots, which the session's `handle-max` and the
//! number of sessions bound; trailing free slots are given back.

use sluice_proto::engine::LinkId;

#[derive(Debug)]
pub(crate) struct LinkMap<V> {
    slots: Vec<Option<(LinkId, V)>>,
    len: usize,
}

impl<V> Default for LinkMap<V> {
    fn default() -> Self {
        LinkMap { slots: Vec::new(), len: 0 }
    }
}

impl<V> LinkMap<V> {
    #[inline]
    pub(crate) fn get(&self, id: &LinkId) -> Option<&V> {
        self.slots.get(id.0 as usize)?.as_ref().map(|(_, v)| v)
    }

    #[inline]
    pub(crate) fn get_mut(&mut self, id: &LinkId) -> Option<&mut V> {
        self.slots.get_mut(id.0 as usize)?.as_mut().map(|(_, v)| v)
    }

    pub(crate) fn contains_key(&self, id: &LinkId) -> bool {
        self.get(id).is_some()
    }

    /// Insert or replace; returns the value replaced.
    pub(crate) fn insert(&mut self, id: LinkId, v: V) -> Option<V> {
        let i = id.0 as usize;
        if self.slots.len() <= i {
            self.slots.resize_with(i + 1, || None);
        }
        let old = self.slots[i].replace((id, v)).map(|(_, v)| v);
        if old.is_none() {
            self.len += 1;
        }
        old
    }

    /// Remove; returns the value removed.
    pub(crate) fn remove(&mut self, id: &LinkId) -> Option<V> {
        let (_, v) = self.slots.get_mut(id.0 as usize)?.take()?;
        self.len -= 1;
        while matches!(self.slots.last(), Some(None)) {
            self.slots.pop();
        }
        Some(v)
    }

    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// In id order.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (&LinkId, &V)> {
        self.slots.iter().flatten().map(|(k, v)| (k, v))
    }

    /// In id order.
    pub(crate) fn iter_mut(&mut self) -> impl Iterator<Item = (&LinkId, &mut V)> {
        self.slots.iter_mut().flatten().map(|(k, v)| (&*k, v))
    }

    /// In id order.
    pub(crate) fn keys(&self) -> impl Iterator<Item = &LinkId> {
        self.iter().map(|(k, _)| k)
    }

    /// Slots held (for tests of the bound).
    #[cfg(test)]
    fn slots_len(&self) -> usize {
        self.slots.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    /// Random inserts, replacements and removals agree with an ordered map at every
    /// step (lookups, length, iteration in id order), and the vector ends at the
    /// largest id in use.
    #[test]
    fn agrees_with_an_ordered_map() {
        let mut x: u64 = 0x0bad_5eed_1234_5678;
        let mut rand = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        let mut m: LinkMap<u64> = LinkMap::default();
        let mut reference: BTreeMap<u32, u64> = BTreeMap::new();
        for step in 0..20_000u64 {
            let r = rand();
            let id = (r >> 8) as u32 % 40;
            if (r >> 32) % 3 == 0 {
                assert_eq!(m.remove(&LinkId(id)), reference.remove(&id), "step {step}");
            } else {
                assert_eq!(m.insert(LinkId(id), step), reference.insert(id, step), "step {step}");
            }
            let probe = LinkId((rand() >> 8) as u32 % 48);
            assert_eq!(m.get(&probe), reference.get(&probe.0));
            assert_eq!(m.contains_key(&probe), reference.contains_key(&probe.0));
            if let Some(v) = m.get_mut(&probe) {
                *v += 1;
                *reference.get_mut(&probe.0).unwrap() += 1;
            }
            assert_eq!(m.len(), reference.len());
            assert_eq!(m.slots_len(), reference.keys().next_back().map_or(0, |k| *k as usize + 1));
        }
        let a: Vec<(u32, u64)> = m.iter().map(|(k, v)| (k.0, *v)).collect();
        let b: Vec<(u32, u64)> = reference.iter().map(|(k, v)| (*k, *v)).collect();
        assert_eq!(a, b);
        let keys: Vec<u32> = m.keys().map(|k| k.0).collect();
        assert_eq!(keys, reference.keys().copied().collect::<Vec<_>>());
        for (_, v) in m.iter_mut() {
            *v = 0;
        }
        assert!(m.iter().all(|(_, v)| *v == 0));
    }
}
