//! Where an events channel lives. An events channel exists only while someone
//! subscribes (and for a few seconds after), so its home is chosen when its first
//! subscriber arrives: the shard of that subscriber's connection. A 1->1 stream is then
//! fanned out on the shard that writes it to the subscriber, and the subscriber's
//! credit never crosses shards; only the publish does (one hop, whatever the channel's
//! name). Other patterns keep the home their name hashes to ([`ChannelKey::home`]).
//!
//! The process-wide [`EventsDirectory`] maps a channel to its home while the channel
//! has subscriptions (or subscriptions on their way to it). Shards read it through a
//! [`RouteCache`]: a lookup costs one atomic load of the directory's epoch, which
//! changes only when a channel gains its home or loses it, and one map lookup in the
//! shard's own cache.
//!
//! Lifecycle of an entry:
//! - a connection subscribing routes its Subscribe through [`EventsDirectory::claim`],
//!   which names the home (its own shard when the channel has none) and counts the
//!   subscription;
//! - the home gives the count back when it removes the subscription
//!   ([`EventsDirectory::release`]) or refuses it ([`EventsDirectory::refused`]);
//! - the home's sweep forgets an idle channel without subscribers only when
//!   [`EventsDirectory::forget`] agrees, that is when no subscription is counted (none
//!   is on its way), and removes the entry with it.
//!
//! A channel is therefore never kept by two shards at once, an entry never outlives its
//! channel by more than a refused subscription, and the entries are bounded by the
//! subscription links the broker admits.

use super::address::ChannelKey;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

type HashMap<K, V> = std::collections::HashMap<K, V, foldhash::fast::RandomState>;

#[derive(Debug, Clone, Copy)]
struct Entry {
    home: u16,
    /// Subscriptions counted: attached at the home, or on their way to it.
    refs: u32,
}

/// The homes of the events channels that have subscribers (see the module docs).
#[derive(Debug, Default)]
pub struct EventsDirectory {
    /// Changes whenever an entry is added or removed.
    epoch: AtomicU64,
    map: Mutex<HashMap<ChannelKey, Entry>>,
}

impl EventsDirectory {
    fn map(&self) -> std::sync::MutexGuard<'_, HashMap<ChannelKey, Entry>> {
        // A shard that panicked while holding the lock cannot have left an entry half
        // written (every update is a single assignment): go on with the map.
        self.map.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Count a subscription from a connection on `shard` and name the channel's home:
    /// the existing one, or `shard` for a channel without one.
    pub fn claim(&self, key: &ChannelKey, shard: u16) -> u16 {
        let mut map = self.map();
        match map.get_mut(key) {
            Some(e) => {
                e.refs = e.refs.saturating_add(1);
                e.home
            }
            None => {
                map.insert(key.clone(), Entry { home: shard, refs: 1 });
                // Published before the attach is answered: a publish that follows the
                // attach sees the new epoch, and with it the entry.
                self.epoch.fetch_add(1, Ordering::Release);
                shard
            }
        }
    }

    /// The home removed a subscription it had.
    pub fn release(&self, key: &ChannelKey) {
        if let Some(e) = self.map().get_mut(key) {
            e.refs = e.refs.saturating_sub(1);
        }
    }

    /// The home refused a subscription (and keeps no channel for it): the count goes
    /// back, and the entry goes too when nothing else is counted.
    pub fn refused(&self, key: &ChannelKey) {
        let mut map = self.map();
        let Some(e) = map.get_mut(key) else { return };
        e.refs = e.refs.saturating_sub(1);
        if e.refs == 0 {
            map.remove(key);
            self.epoch.fetch_add(1, Ordering::Release);
        }
    }

    /// May the home `shard` forget its idle channel `key`? Only when no subscription is
    /// counted; the entry is removed then.
    pub fn forget(&self, key: &ChannelKey, shard: u16) -> bool {
        let mut map = self.map();
        match map.get(key) {
            Some(e) if e.home == shard => {
                if e.refs > 0 {
                    return false;
                }
                map.remove(key);
                self.epoch.fetch_add(1, Ordering::Release);
                true
            }
            // Not this shard's entry (or none): nothing routes here any more.
            _ => true,
        }
    }

    /// The channel's home, if it has one.
    pub fn lookup(&self, key: &ChannelKey) -> Option<u16> {
        self.map().get(key).map(|e| e.home)
    }

    /// Entries kept.
    pub fn len(&self) -> usize {
        self.map().len()
    }

    /// No entry kept.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn epoch(&self) -> u64 {
        self.epoch.load(Ordering::Acquire)
    }
}

/// Most channels a shard's [`RouteCache`] remembers; beyond it the cache starts over
/// (publishers may name any number of channels nobody subscribes to).
pub const ROUTE_CACHE_MAX: usize = 4096;

/// A shard's copy of what it has read from the [`EventsDirectory`], valid while the
/// directory's epoch is the one it was read at.
#[derive(Debug, Default)]
pub struct RouteCache {
    epoch: u64,
    homes: HashMap<ChannelKey, Option<u16>>,
}

impl RouteCache {
    /// The home of `key` (None: the channel has no subscriber).
    #[inline]
    pub fn lookup(&mut self, dir: &EventsDirectory, key: &ChannelKey) -> Option<u16> {
        let epoch = dir.epoch();
        if epoch != self.epoch {
            self.homes.clear();
            self.epoch = epoch;
        }
        if let Some(h) = self.homes.get(key) {
            return *h;
        }
        let h = dir.lookup(key);
        if self.homes.len() >= ROUTE_CACHE_MAX {
            self.homes.clear();
        }
        self.homes.insert(key.clone(), h);
        h
    }

    /// Channels remembered.
    pub fn len(&self) -> usize {
        self.homes.len()
    }

    /// Nothing remembered.
    pub fn is_empty(&self) -> bool {
        self.homes.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Pattern;

    fn key(name: &str) -> ChannelKey {
        ChannelKey::new(Pattern::Events, name)
    }

    #[test]
    fn the_first_subscriber_names_the_home_and_the_last_release_lets_it_go() {
        let d = EventsDirectory::default();
        let k = key("a");
        assert_eq!(d.lookup(&k), None);
        assert_eq!(d.claim(&k, 1), 1, "no home yet: the subscriber's shard");
        assert_eq!(d.claim(&k, 0), 1, "a second subscriber goes to the existing home");
        assert_eq!(d.lookup(&k), Some(1));
        assert!(!d.forget(&k, 1), "two subscriptions counted");
        d.release(&k);
        assert!(!d.forget(&k, 1), "one subscription counted");
        d.release(&k);
        d.forget(&k, 0);
        assert_eq!(d.lookup(&k), Some(1), "another shard cannot remove the entry");
        assert!(d.forget(&k, 1));
        assert_eq!(d.lookup(&k), None);
        assert!(d.is_empty());
        assert_eq!(d.claim(&k, 0), 0, "forgotten: the next subscriber's shard is the home");
    }

    #[test]
    fn a_refused_subscription_leaves_no_entry_behind() {
        let d = EventsDirectory::default();
        let (a, b) = (key("a"), key("b"));
        d.claim(&a, 0);
        d.refused(&a);
        assert_eq!(d.lookup(&a), None, "the only subscription was refused");
        d.claim(&b, 1);
        d.claim(&b, 0);
        d.refused(&b);
        assert_eq!(d.lookup(&b), Some(1), "the other subscription still counts");
        assert!(!d.forget(&b, 1));
        d.refused(&b);
        assert!(d.is_empty());
    }

    #[test]
    fn the_cache_follows_every_change_of_the_directory() {
        let d = EventsDirectory::default();
        let mut c = RouteCache::default();
        let k = key("a");
        assert_eq!(c.lookup(&d, &k), None);
        d.claim(&k, 1);
        assert_eq!(c.lookup(&d, &k), Some(1), "a claim is seen at once, not the cached absence");
        d.release(&k);
        assert!(d.forget(&k, 1));
        assert_eq!(c.lookup(&d, &k), None, "a forgotten channel is not routed to");
        d.claim(&k, 0);
        assert_eq!(c.lookup(&d, &k), Some(0), "and its next home is");
    }

    #[test]
    fn the_cache_is_bounded_whatever_publishers_name() {
        let d = EventsDirectory::default();
        let mut c = RouteCache::default();
        for i in 0..3 * ROUTE_CACHE_MAX {
            assert_eq!(c.lookup(&d, &key(&format!("nobody-{i}"))), None);
            assert!(c.len() <= ROUTE_CACHE_MAX);
        }
        assert!(d.is_empty(), "lookups add nothing to the directory");
    }
}
