//! A map from a number the peer chose (a remote channel, a remote handle) to one of
//! ours, for the lookups every incoming frame makes.
//!
//! Peers number their channels and handles from 0, so the common case is a small
//! number: those below [`DIRECT`] are slots of a vector indexed by the number itself
//! (one bounds check and one load; a hash map lookup was a fifth of
//! `Connection::on_transfer`'s samples, in the broker and in the load generator).
//! Any other number goes to a hash map, as before. The vector grows only to the
//! largest small number in use, never past [`DIRECT`] slots, so what a peer can make
//! it hold is bounded whatever numbers it picks.

/// Maps on the per-message path: foldhash (fast, seeded per map), not SipHash.
type HashMap<K, V> = std::collections::HashMap<K, V, foldhash::fast::RandomState>;

/// Numbers below this are kept in the vector.
pub(crate) const DIRECT: usize = 64;

#[derive(Debug)]
pub(crate) struct NumberMap<V> {
    direct: Vec<Option<V>>,
    other: HashMap<u32, V>,
}

impl<V> Default for NumberMap<V> {
    fn default() -> Self {
        NumberMap { direct: Vec::new(), other: HashMap::default() }
    }
}

impl<V: Copy + PartialEq> NumberMap<V> {
    #[inline]
    pub(crate) fn get(&self, n: u32) -> Option<V> {
        match self.direct.get(n as usize) {
            Some(v) => *v,
            None if (n as usize) < DIRECT => None,
            None => self.other.get(&n).copied(),
        }
    }

    pub(crate) fn contains(&self, n: u32) -> bool {
        self.get(n).is_some()
    }

    /// Insert or replace; returns the value replaced.
    pub(crate) fn insert(&mut self, n: u32, v: V) -> Option<V> {
        let i = n as usize;
        if i < DIRECT {
            if self.direct.len() <= i {
                self.direct.resize(i + 1, None);
            }
            return self.direct[i].replace(v);
        }
        self.other.insert(n, v)
    }

    /// Remove; returns the value removed.
    pub(crate) fn remove(&mut self, n: u32) -> Option<V> {
        let i = n as usize;
        if i < DIRECT {
            let v = self.direct.get_mut(i)?.take();
            // Trailing free slots are given back, so the vector spans the numbers in use.
            while self.direct.last() == Some(&None) {
                self.direct.pop();
            }
            return v;
        }
        self.other.remove(&n)
    }

    /// Every value, in no particular order.
    pub(crate) fn values(&self) -> impl Iterator<Item = V> + '_ {
        self.direct.iter().flatten().copied().chain(self.other.values().copied())
    }

    /// Slots the vector holds (for tests of its bound).
    #[cfg(test)]
    fn direct_len(&self) -> usize {
        self.direct.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap as StdMap;

    /// Random inserts, replacements and removals of small, middling and huge numbers
    /// agree with a plain hash map at every step, and the vector never outgrows its
    /// bound or the largest small number in use.
    #[test]
    fn agrees_with_a_hash_map_and_stays_bounded() {
        let mut x: u64 = 0x1234_5678_9abc_def1;
        let mut rand = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        let mut m: NumberMap<u16> = NumberMap::default();
        let mut reference: StdMap<u32, u16> = StdMap::new();
        for step in 0..50_000u32 {
            let r = rand();
            let n = match r % 4 {
                0 | 1 => (r >> 8) as u32 % 80, // around the bound
                2 => (r >> 8) as u32 % 8,
                _ => (r >> 8) as u32, // anywhere
            };
            if (r >> 40) % 3 == 0 {
                assert_eq!(m.remove(n), reference.remove(&n), "step {step}: remove {n}");
            } else {
                let v = (r >> 48) as u16;
                assert_eq!(m.insert(n, v), reference.insert(n, v), "step {step}: insert {n}");
            }
            let probe = (rand() >> 8) as u32 % 100;
            assert_eq!(m.get(probe), reference.get(&probe).copied(), "step {step}: get {probe}");
            assert_eq!(m.get(n), reference.get(&n).copied());
            assert_eq!(m.contains(n), reference.contains_key(&n));
            let largest_small = reference.keys().filter(|k| (**k as usize) < DIRECT).max();
            assert_eq!(m.direct_len(), largest_small.map_or(0, |k| *k as usize + 1), "step {step}");
            assert!(m.direct_len() <= DIRECT);
        }
        let mut a: Vec<u16> = m.values().collect();
        let mut b: Vec<u16> = reference.values().copied().collect();
        a.sort();
        b.sort();
        assert_eq!(a, b);
    }

    #[test]
    fn numbers_at_and_above_the_bound_are_kept_apart_from_the_vector() {
        let mut m: NumberMap<u32> = NumberMap::default();
        assert_eq!(m.insert(DIRECT as u32, 1), None);
        assert_eq!(m.insert(u32::MAX, 2), None);
        assert_eq!(m.direct_len(), 0);
        assert_eq!(m.get(DIRECT as u32), Some(1));
        assert_eq!(m.get(u32::MAX), Some(2));
        assert_eq!(m.get(DIRECT as u32 - 1), None);
        assert_eq!(m.insert(DIRECT as u32 - 1, 3), None);
        assert_eq!(m.direct_len(), DIRECT);
        assert_eq!(m.remove(DIRECT as u32 - 1), Some(3));
        assert_eq!(m.direct_len(), 0);
        assert_eq!(m.remove(DIRECT as u32), Some(1));
        assert_eq!(m.get(DIRECT as u32), None);
    }
}
