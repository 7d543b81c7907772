//! The keys one owner holds in a map it shares with other owners, so the owner's
//! entries can be dropped without walking the whole map.
//!
//! A session's unsettled deliveries are one map for all its links, and a queue's
//! unacknowledged deliveries one map for all its consumers. Dropping one link's or one
//! consumer's entries by walking the map made every detach cost as much as everything
//! the session (or queue) held: a peer keeping 250,000 deliveries unsettled on one link
//! could make each attach and detach of another link cost milliseconds. A trail notes
//! each key its owner inserts; entries removed from the map by other means (settled)
//! stay in the trail until it is compacted, so the trail is a superset of the owner's
//! keys, and the owner's entries are found by checking the trail's keys only.
//!
//! Bounds: a trail is compacted (its keys checked against the map, the dead ones
//! dropped) when it reaches twice the keys that were live at its last compaction plus
//! [`SLACK`], so it never holds more than that, and each push costs at most two
//! checks amortized.

use std::collections::VecDeque;

/// The keys an owner inserted into a shared map (a superset of those it still has).
#[derive(Debug, Clone)]
pub struct Trail<K> {
    keys: VecDeque<K>,
    /// Length at which the next push compacts first.
    limit: usize,
}

/// Keys a trail holds beyond twice its live keys before it is compacted.
pub const SLACK: usize = 64;

impl<K> Default for Trail<K> {
    fn default() -> Self {
        Trail { keys: VecDeque::new(), limit: SLACK }
    }
}

impl<K: Copy> Trail<K> {
    /// Note `key`. `live` tells whether a key noted before is still the owner's (called
    /// only when the trail is compacted).
    #[inline]
    pub fn push(&mut self, key: K, live: impl FnMut(&K) -> bool) {
        if self.keys.len() >= self.limit {
            self.compact(live);
        }
        self.keys.push_back(key);
    }

    #[cold]
    fn compact(&mut self, live: impl FnMut(&K) -> bool) {
        self.keys.retain(live);
        self.limit = 2 * self.keys.len() + SLACK;
        if self.keys.capacity() > 2 * self.limit {
            self.keys.shrink_to(self.limit);
        }
    }

    /// `key` is no longer the owner's: when it is the oldest key held, it leaves the
    /// trail at once. Owners whose keys mostly go in the order they came (deliveries
    /// settled in order) keep their trail near their live keys this way, without
    /// compactions and the checks they cost.
    #[inline]
    pub fn forget(&mut self, key: K)
    where
        K: PartialEq,
    {
        if self.keys.front() == Some(&key) {
            self.keys.pop_front();
        }
    }

    /// Every key noted since the last `take`, in the order noted (some may no longer
    /// be the owner's: check each); the trail is left empty.
    pub fn take(&mut self) -> VecDeque<K> {
        self.limit = SLACK;
        std::mem::take(&mut self.keys)
    }

    /// Keys held (live or not).
    pub fn len(&self) -> usize {
        self.keys.len()
    }

    /// Whether no key is held.
    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    /// Keys settled elsewhere leave the trail at compaction: with 10 live keys and a
    /// million pushed and settled, the trail stays within its bound, each push's
    /// checks stay within two amortized, and `take` returns every live key in order.
    #[test]
    fn stays_within_twice_the_live_keys_and_keeps_every_live_one() {
        let mut t = Trail::default();
        let mut live: HashSet<u32> = HashSet::new();
        let mut checks = 0u64;
        for k in 0..1_000_000u32 {
            t.push(k, |x| {
                checks += 1;
                live.contains(x)
            });
            live.insert(k);
            // Keys 0..10 stay; every other key is settled right away.
            if k >= 10 {
                live.remove(&k);
            }
            assert!(t.len() <= 2 * 10 + SLACK + 1, "trail of {} keys", t.len());
        }
        assert!(checks <= 2 * 1_000_000, "{checks} checks for a million pushes");
        let kept: Vec<u32> = t.take().into_iter().filter(|k| live.contains(k)).collect();
        assert_eq!(kept, (0..10).collect::<Vec<_>>());
        assert!(t.is_empty());
    }

    /// Keys forgotten in the order they came never need a compaction: a million
    /// pushed and forgotten cost no check, and the trail holds the live ones only.
    #[test]
    fn keys_forgotten_in_order_cost_no_check() {
        let mut t = Trail::default();
        let mut checks = 0u64;
        for k in 0..1_000_000u32 {
            t.push(k, |_| {
                checks += 1;
                true
            });
            if k >= 10 {
                t.forget(k - 10);
            }
            assert!(t.len() <= 11);
        }
        assert_eq!(checks, 0);
        t.forget(5); // not the oldest: stays until a compaction or `take`
        assert_eq!(t.take(), (1_000_000 - 10..1_000_000).collect::<Vec<_>>());
    }
}
