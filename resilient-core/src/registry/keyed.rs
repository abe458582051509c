//! The keyed instances of one spec (see [`crate::keyed`]): a map from a
//! key's text to an instance, bounded in size and in idle time.
//!
//! A lookup of an existing key is the per-call path: it takes no lock,
//! clones the instance's `Arc` (the call may outlive the entry), and writes
//! the entry's recency only when the epoch moved since the key's last use.
//! Everything else (a new key, a sweep, an eviction, a reload) runs under
//! one mutex: new keys are rare, and one writer keeps `max` exact.
//!
//! Recency is counted in epochs, not read from a clock per call. An epoch
//! starts at each eviction at `max` (so that the keys used since are more
//! recent than the ones not) and at each sweep for idle keys; the writers
//! keep when each recent epoch started. A key last used in epoch `e` has
//! been idle at least since epoch `e + 1` started, and at most since epoch
//! `e` did: what a sweep can tell of a key's idleness is as fine as the
//! epochs are short.
//!
//! So that they are short whether or not calls come, a task on the tokio
//! runtime (the [`Ticker`], one per spec with keys) sweeps every
//! [`step`] (an eighth of `idle_timeout`) while the spec has keys: a key
//! unused for `idle_timeout` goes at most a step after that, from the map,
//! its count and the snapshot, which drops the keys idle past the timeout
//! at its own moment before it lists them. A new key sweeps too, at most
//! once a step. Where no tokio runtime (or no timer) is at hand when the
//! keys come, the sweeps of new keys and snapshots are the only ones, and an
//! epoch lasts until the next of them: a key's idleness then counts from
//! the first sweep that found it unused. The same holds for time that
//! jumps (tokio's `advance` on a paused clock), during which the task
//! does not run.
use std::collections::VecDeque;
use std::future::Future;
use std::pin::pin;
use std::sync::atomic::{fence, AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};
use std::task::Poll;
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;

use super::mechanism::{KeyShare, Mechanism};
use super::snapshot::{KeyStatus, KeysSnapshot};
use crate::keyed::{KeyRef, KeySettings};
use crate::telemetry::Switches;

/// An entry's recency once a sweep has taken it out: a call that finds it
/// goes the slow way, which finds the key gone or back.
const EVICTED: u64 = u64::MAX;

/// The epochs whose start the writers keep. A key last used before them
/// has been idle at least since the oldest of them started.
const EPOCHS: usize = 64;

/// How long new keys go to the spec's own instance without a look at the
/// map, after a look found no key to drop.
const SKIP_FOR: Duration = Duration::from_secs(1);

/// The store-load fence between a call's `Arc` clone (a store to the
/// instance's count) and its read of the entry's mark.
///
/// On x86 the clone is a `lock`-prefixed read-modify-write, which the
/// processor never lets a later load pass: only the compiler must be kept
/// from moving the load up, and a compiler fence does that. An `mfence`
/// there cost 3 ns per call on top of the clone's 2 (measured apart, in a
/// loop of the three steps). Elsewhere, the full fence.
///
/// This leans on the processor, not on Rust's memory model, which promises
/// nothing of a relaxed read-modify-write and a compiler fence; crossbeam's
/// epoch collector does the same on x86. Under Miri, which checks the
/// model, the full fence.
#[inline(always)]
fn after_clone_fence() {
    #[cfg(all(any(target_arch = "x86", target_arch = "x86_64"), not(miri)))]
    std::sync::atomic::compiler_fence(Ordering::SeqCst);
    #[cfg(not(all(any(target_arch = "x86", target_arch = "x86_64"), not(miri))))]
    fence(Ordering::SeqCst);
}

/// At most one WARN line about overflowing keys per this period.
const OVERFLOW_LOG_MS: u64 = 10_000;

/// How often idle keys are looked for, and so the longest an epoch lasts
/// while the [`Ticker`] runs: an eighth of `idle_timeout`, at least 1 ms
/// (the timer's resolution). A sweep reads every key: at most one per
/// step, from the ticker and new keys together.
fn step(keys: &KeySettings) -> Duration {
    (keys.idle_timeout / 8).max(Duration::from_millis(1))
}

type Map<M> = papaya::HashMap<OwnedKey, Entry<M>, foldhash::fast::RandomState>;

/// Whether two key texts are equal: a host or a tenant name of 4 to 16
/// bytes is compared in two loads a side, without a call to `memcmp`
/// (which a lookup otherwise makes on every call).
#[inline]
fn same_text(a: &[u8], b: &[u8]) -> bool {
    fn word<const N: usize>(s: &[u8], at: usize) -> Option<[u8; N]> {
        s.get(at..at + N)?.try_into().ok()
    }
    let n = a.len();
    if n != b.len() {
        return false;
    }
    match n {
        8..=16 => word::<8>(a, 0) == word::<8>(b, 0) && word::<8>(a, n - 8) == word::<8>(b, n - 8),
        4..=7 => word::<4>(a, 0) == word::<4>(b, 0) && word::<4>(a, n - 4) == word::<4>(b, n - 4),
        _ => a == b,
    }
}

/// A key as the map keeps it; looked up by a [`KeyRef`], which hashes the
/// same way.
#[derive(Debug, PartialEq, Eq)]
enum OwnedKey {
    Text(Box<str>),
    Int(i128),
}

impl std::hash::Hash for OwnedKey {
    #[inline]
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        match self {
            OwnedKey::Text(t) => KeyRef::Text(t).hash(state),
            OwnedKey::Int(n) => KeyRef::Int(*n).hash(state),
        }
    }
}

impl From<KeyRef<'_>> for OwnedKey {
    fn from(key: KeyRef<'_>) -> Self {
        match key {
            KeyRef::Text(t) => OwnedKey::Text(Box::from(t)),
            KeyRef::Int(n) => OwnedKey::Int(n),
        }
    }
}

impl papaya::Equivalent<OwnedKey> for KeyRef<'_> {
    #[inline]
    fn equivalent(&self, key: &OwnedKey) -> bool {
        match (self, key) {
            (KeyRef::Text(a), OwnedKey::Text(b)) => same_text(a.as_bytes(), b.as_bytes()),
            (KeyRef::Int(a), OwnedKey::Int(b)) => a == b,
            _ => false,
        }
    }
}

/// One key's instance and the epoch of its last use.
struct Entry<M> {
    instance: Arc<M>,
    used: AtomicU64,
}

/// What the instances of one spec are built from.
pub(crate) struct Keyed<M: Mechanism> {
    /// Itself, for the [`Ticker`], which must not keep it alive.
    this: Weak<Keyed<M>>,
    /// Whether a [`Ticker`] runs (or a runtime without timers refused one).
    ticking: AtomicBool,
    /// Told by a reload, which may have changed the ticker's step.
    rearm: Arc<Notify>,
    map: Map<M>,
    epoch: AtomicU64,
    /// The spec's own instance: where a call goes when `max` keys are all
    /// in use.
    base: Arc<M>,
    overflowed: AtomicU64,
    overflow_logged_ms: AtomicU64,
    origin: Instant,
    share: Arc<KeyShare>,
    make: Mutex<Make<M>>,
}

/// The state only the writers (new keys, sweeps, reloads) touch.
struct Make<M: Mechanism> {
    settings: M::Settings,
    keys: KeySettings,
    switches: Switches,
    /// Entries in the map: papaya's own count is approximate.
    count: usize,
    /// The latest epochs (at most [`EPOCHS`]) and when each started.
    epochs: VecDeque<(u64, Instant)>,
    /// When idle keys were last looked for and an epoch started.
    swept_at: Instant,
    /// New keys to send to the spec's own instance without looking for a
    /// key to evict, and until when: set after a look at `max` keys found
    /// none, so that a stream of new keys while every key is busy pays for
    /// one scan of the map per `max / 8` new keys, not one each (below `max`
    /// = 16, every new key looks), and for at most [`SKIP_FOR`].
    skip_scans: usize,
    skip_until: Instant,
}

/// How many keys an eviction at `max` frees at once: an eighth of `max`,
/// at least one.
fn batch(max: u32) -> usize {
    (max as usize / 8).max(1)
}

impl<M: Mechanism> Make<M> {
    /// When the key last used in epoch `used` became idle: when the next
    /// epoch started (or, for an epoch older than those kept, the oldest
    /// kept); `None` while `used` is the current epoch.
    fn idle_since(&self, used: u64) -> Option<Instant> {
        let next = used.checked_add(1)?;
        let &(oldest, started) = self.epochs.front()?;
        if next < oldest {
            return Some(started);
        }
        self.epochs
            .iter()
            .find(|(e, _)| *e == next)
            .map(|&(_, at)| at)
    }
}

impl<M: Mechanism> std::fmt::Debug for Keyed<M> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Keyed")
            .field("spec", &self.base.telemetry().spec)
            .field("keys", &self.map.len())
            .finish_non_exhaustive()
    }
}

impl<M: Mechanism> Keyed<M> {
    /// No key yet; new keys' instances run `settings` with the spec's
    /// telemetry (its own, `base`'s: names, switches, listeners). `this`:
    /// the `Arc` it is built into (see [`Arc::new_cyclic`]).
    pub(crate) fn new(
        this: Weak<Self>,
        base: Arc<M>,
        settings: M::Settings,
        keys: KeySettings,
    ) -> Self {
        let switches = base.telemetry().switches();
        let now = Instant::now();
        Self {
            this,
            ticking: AtomicBool::new(false),
            rearm: Arc::new(Notify::new()),
            map: Map::with_hasher(foldhash::fast::RandomState::default()),
            epoch: AtomicU64::new(0),
            base,
            overflowed: AtomicU64::new(0),
            overflow_logged_ms: AtomicU64::new(u64::MAX),
            origin: now,
            share: Arc::new(KeyShare::new(keys.max_open_percent)),
            make: Mutex::new(Make {
                settings,
                keys,
                switches,
                count: 0,
                epochs: VecDeque::from([(0, now)]),
                swept_at: now,
                skip_scans: 0,
                skip_until: now,
            }),
        }
    }

    /// The instance of `key`: the one in the map, a new one, or (with
    /// `max` keys none of which can go) the spec's own.
    #[inline]
    pub(crate) fn get(&self, key: KeyRef<'_>) -> Arc<M> {
        let guard = self.map.guard();
        if let Some(entry) = self.map.get(&key, &guard) {
            if let Some(instance) = self.claim(entry) {
                return instance;
            }
        }
        drop(guard);
        self.get_slow(key)
    }

    /// `entry`'s instance, its recency brought up to date; `None` if a
    /// sweep took it out.
    #[inline]
    fn claim(&self, entry: &Entry<M>) -> Option<Arc<M>> {
        let instance = Arc::clone(&entry.instance);
        // Pairs with the sweep's fence between marking an entry and reading
        // its count: either the sweep sees this clone and leaves the entry,
        // or this call sees the mark and goes the slow way.
        after_clone_fence();
        let now = self.epoch.load(Ordering::Relaxed);
        let used = entry.used.load(Ordering::Relaxed);
        if used == now {
            return Some(instance);
        }
        entry
            .used
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |u| {
                (u != EVICTED).then_some(now.max(u))
            })
            .ok()
            .map(|_| instance)
    }

    #[cold]
    #[inline(never)]
    fn get_slow(&self, key: KeyRef<'_>) -> Arc<M> {
        let mut make = self.lock();
        let guard = self.map.guard();
        // Another call may have added the key (or a sweep put it back)
        // while this one waited.
        if let Some(entry) = self.map.get(&key, &guard) {
            if let Some(instance) = self.claim(entry) {
                return instance;
            }
            // Marked and never put back: a sweep would have removed it.
            if let Some(gone) = self.map.remove(&key, &guard) {
                gone.instance.evicted();
            }
            self.forgot_one(&mut make);
        }
        let now = Instant::now();
        self.sweep(&mut make, now);
        if make.count >= make.keys.max as usize {
            if make.skip_scans > 0 && now < make.skip_until {
                make.skip_scans -= 1;
                return self.overflow(make.keys.max);
            }
            self.evict_least_recent(&mut make, now);
        }
        if make.count >= make.keys.max as usize {
            make.skip_scans = batch(make.keys.max) - 1;
            make.skip_until = now + SKIP_FOR;
            return self.overflow(make.keys.max);
        }
        make.skip_scans = 0;
        let text = key.to_text();
        let telemetry = self.base.telemetry().for_key(
            Arc::clone(&text),
            make.keys.label_metrics,
            make.switches,
        );
        let instance = Arc::new(M::build(make.settings.clone(), telemetry));
        instance.inherit(&self.base, key);
        instance.telemetry_switched();
        instance.join(&self.share);
        let entry = Entry {
            instance: Arc::clone(&instance),
            used: AtomicU64::new(self.epoch.load(Ordering::Relaxed)),
        };
        self.map.insert(OwnedKey::from(key), entry, &guard);
        make.count += 1;
        self.share.keys.store(make.count, Ordering::Relaxed);
        self.tick_later(&make);
        instance
    }

    /// Starts the [`Ticker`] if the spec has keys and none runs, on this
    /// thread's tokio runtime, if any. Called with the writers' lock held
    /// (`make`), under which the ticker decides to stop: a key added just
    /// as it stops finds it stopped, and starts another.
    fn tick_later(&self, make: &Make<M>) {
        if make.count == 0 || self.ticking.load(Ordering::Relaxed) {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        self.ticking.store(true, Ordering::Relaxed);
        let ticker = Ticker {
            keyed: Weak::clone(&self.this),
            rearm: Arc::clone(&self.rearm),
            armed: true,
        };
        drop(runtime.spawn(ticker.run()));
    }

    /// One key less in the map.
    fn forgot_one(&self, make: &mut Make<M>) {
        make.count = make.count.saturating_sub(1);
        self.share.keys.store(make.count, Ordering::Relaxed);
    }

    fn lock(&self) -> MutexGuard<'_, Make<M>> {
        self.make.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A call with a new key found `max` keys none of which could go: it
    /// runs under the spec's own instance.
    fn overflow(&self, max: u32) -> Arc<M> {
        self.overflowed.fetch_add(1, Ordering::Relaxed);
        if self.base.telemetry().logging() {
            let now = u64::try_from(self.origin.elapsed().as_millis()).unwrap_or(u64::MAX - 1);
            let last = self.overflow_logged_ms.load(Ordering::Relaxed);
            if last == u64::MAX || now.saturating_sub(last) >= OVERFLOW_LOG_MS {
                self.overflow_logged_ms.store(now, Ordering::Relaxed);
                let t = self.base.telemetry();
                let (spec, path) = (t.spec, t.path);
                tracing::warn!(
                    target: "resilient::registry",
                    spec, path, max,
                    "`{spec}` has `keys.max` = {max} keys, none of which can be dropped now (in use, or holding state): calls with a new key run under the spec's own instance, shared by every such key; raise `keys.max` if this lasts (at most one such line per 10s)"
                );
            }
        }
        Arc::clone(&self.base)
    }

    /// Starts the next epoch, at `now`.
    fn next_epoch(&self, make: &mut Make<M>, now: Instant) {
        let epoch = self.epoch.fetch_add(1, Ordering::Relaxed) + 1;
        make.epochs.push_back((epoch, now));
        if make.epochs.len() > EPOCHS {
            make.epochs.pop_front();
        }
    }

    /// Drops the keys idle for `idle_timeout` or more and starts an epoch,
    /// if a [`step`] has passed since the last sweep.
    fn sweep(&self, make: &mut Make<M>, now: Instant) {
        if now.saturating_duration_since(make.swept_at) < step(&make.keys) {
            return;
        }
        make.swept_at = now;
        self.next_epoch(make, now);
        self.drop_idle(make, now);
    }

    /// Drops the keys that have been idle for `idle_timeout` or more at
    /// `now`, as far as the epochs tell, and that can go.
    fn drop_idle(&self, make: &mut Make<M>, now: Instant) {
        let idle = make.keys.idle_timeout;
        let guard = self.map.guard();
        for (key, entry) in self.map.iter(&guard) {
            let used = entry.used.load(Ordering::Relaxed);
            let idle_for = make
                .idle_since(used)
                .map(|since| now.saturating_duration_since(since));
            if idle_for.is_some_and(|d| d >= idle) && self.take_out(entry, used) {
                self.map.remove(key, &guard);
                entry.instance.evicted();
                self.forgot_one(make);
                make.skip_scans = 0;
            }
        }
    }

    /// At `max` keys: drops the least recently used keys that can go, an
    /// eighth of `max` at a time (at least one), so that a stream of new
    /// keys pays for a scan once per many keys; then starts an epoch, so
    /// that the keys used from now on rank above the ones that are not.
    fn evict_least_recent(&self, make: &mut Make<M>, now: Instant) {
        let guard = self.map.guard();
        let mut candidates: Vec<(u64, &OwnedKey, &Entry<M>)> = self
            .map
            .iter(&guard)
            .filter(|(_, e)| Arc::strong_count(&e.instance) == 1 && e.instance.evictable())
            .map(|(k, e)| (e.used.load(Ordering::Relaxed), k, e))
            .filter(|(used, _, _)| *used != EVICTED)
            .collect();
        // Down to an eighth under `max`: after a reload lowered `max`, the
        // keys above it go too.
        let mut wanted = (make.count + batch(make.keys.max)).saturating_sub(make.keys.max as usize);
        // Least recent first; a key a call claims meanwhile stays, and the
        // next in line goes instead.
        candidates.sort_unstable_by_key(|(used, _, _)| *used);
        for (used, key, entry) in candidates {
            if wanted == 0 {
                break;
            }
            if self.take_out(entry, used) {
                self.map.remove(key, &guard);
                entry.instance.evicted();
                self.forgot_one(make);
                wanted -= 1;
            }
        }
        self.next_epoch(make, now);
    }

    /// Marks `entry` (last used in epoch `used`) as taken out, if no
    /// call or handle holds its instance and a fresh one would do as well;
    /// `false`, and the entry as it was, otherwise.
    fn take_out(&self, entry: &Entry<M>, used: u64) -> bool {
        if Arc::strong_count(&entry.instance) > 1 || !entry.instance.evictable() {
            return false;
        }
        if entry
            .used
            .compare_exchange(used, EVICTED, Ordering::Relaxed, Ordering::Relaxed)
            .is_err()
        {
            return false;
        }
        // Pairs with the fence in `claim`: a call that cloned the instance
        // before the mark is counted here.
        fence(Ordering::SeqCst);
        if Arc::strong_count(&entry.instance) > 1 {
            entry.used.store(used, Ordering::Relaxed);
            return false;
        }
        true
    }

    /// The keys now, for the snapshot: their count, and the first
    /// [`KeysSnapshot::SHOWN`] in text order with their state. Drops the
    /// keys idle past the timeout first, whenever the last sweep was (but
    /// starts no epoch: a health endpoint polled often would otherwise
    /// wear out the epochs kept); the map is read after the writers' lock
    /// is let go, so that a health endpoint does not hold up new keys while
    /// it lists them.
    pub(crate) fn snapshot(&self) -> KeysSnapshot {
        let count = {
            let mut make = self.lock();
            self.drop_idle(&mut make, Instant::now());
            self.tick_later(&make);
            make.count
        };
        let guard = self.map.guard();
        let mut keys: Vec<(Arc<str>, &Entry<M>)> = self
            .map
            .iter(&guard)
            .filter_map(|(_, e)| Some((e.instance.telemetry().event_key()?, e)))
            .collect();
        let mut unhealthy: Vec<KeyStatus> = keys
            .iter()
            .filter_map(|(text, entry)| {
                let state = entry.instance.unhealthy()?;
                Some(KeyStatus::new(
                    Arc::clone(text),
                    entry.instance.status(),
                    Some(state),
                ))
            })
            .collect();
        unhealthy.sort_unstable_by(|a, b| a.key.cmp(&b.key));
        if keys.len() > KeysSnapshot::SHOWN {
            keys.select_nth_unstable_by(KeysSnapshot::SHOWN - 1, |a, b| a.0.cmp(&b.0));
            keys.truncate(KeysSnapshot::SHOWN);
        }
        keys.sort_unstable_by(|a, b| a.0.cmp(&b.0));
        let shown = keys
            .into_iter()
            .map(|(text, entry)| {
                KeyStatus::new(text, entry.instance.status(), entry.instance.unhealthy())
            })
            .collect();
        let (ejected, held_closed) = self.share.ejections();
        KeysSnapshot {
            count,
            overflowed: self.overflowed.load(Ordering::Relaxed),
            ejected,
            held_closed,
            unhealthy,
            shown,
        }
    }

    /// The instance of the key written `text` (an integer key as its
    /// decimal text), if it has one now: found, never made, so that a
    /// mistyped key creates nothing.
    pub(crate) fn existing(&self, text: &str) -> Option<Arc<M>> {
        let guard = self.map.guard();
        let int = text.parse::<i128>().ok().map(KeyRef::Int);
        [int, Some(KeyRef::Text(text))]
            .into_iter()
            .flatten()
            .find_map(|key| {
                let entry = self.map.get(&key, &guard)?;
                (entry.used.load(Ordering::Relaxed) != EVICTED).then(|| Arc::clone(&entry.instance))
            })
    }

    /// The `keys` table running now.
    pub(crate) fn key_settings(&self) -> KeySettings {
        self.lock().keys
    }

    /// Runs `settings` and `keys` from now on: every key's instance, and
    /// the keys to come. The notes of the first instance that has any.
    pub(crate) fn reconfigure(
        &self,
        settings: &M::Settings,
        keys: KeySettings,
        switches: Switches,
    ) -> Vec<String> {
        let mut make = self.lock();
        make.settings = settings.clone();
        if make.keys.idle_timeout != keys.idle_timeout {
            // The ticker sleeps a step of the old timeout: it takes the new
            // one now.
            self.rearm.notify_one();
        }
        make.keys = keys;
        make.switches = switches;
        make.skip_scans = 0;
        self.share
            .percent
            .store(keys.max_open_percent, Ordering::Relaxed);
        let guard = self.map.guard();
        let mut notes = Vec::new();
        for (_, entry) in self.map.iter(&guard) {
            let t = entry.instance.telemetry();
            t.switch(switches);
            entry.instance.telemetry_switched();
            if *entry.instance.settings() != *settings {
                let n = entry.instance.reconfigure(settings.clone());
                if notes.is_empty() {
                    notes = n;
                }
            }
        }
        notes
    }
}

/// The task that sweeps a spec's keys every [`step`] while it has keys, so
/// that no epoch lasts longer than a step (see the module docs). It holds
/// the keys weakly: a registry dropped takes them with it, and the task
/// ends at its next step. Its flag in [`Keyed::ticking`] is cleared when it
/// ends, or is dropped with its runtime, so that the next key or snapshot
/// starts another.
struct Ticker<M: Mechanism> {
    keyed: Weak<Keyed<M>>,
    rearm: Arc<Notify>,
    /// Whether dropping it clears the flag.
    armed: bool,
}

impl<M: Mechanism> Ticker<M> {
    async fn run(mut self) {
        loop {
            let next = {
                let Some(keyed) = self.keyed.upgrade() else {
                    self.armed = false;
                    return;
                };
                let mut make = keyed.lock();
                keyed.sweep(&mut make, Instant::now());
                if make.count == 0 {
                    keyed.ticking.store(false, Ordering::Relaxed);
                    self.armed = false;
                    return;
                }
                make.swept_at + step(&make.keys)
            };
            // A runtime without a time driver panics here: then the sweeps of
            // new keys and snapshots are the only ones, and the flag stays
            // set so that no key tries again.
            let Ok(sleep) = std::panic::catch_unwind(|| tokio::time::sleep_until(next)) else {
                self.armed = false;
                return;
            };
            let mut sleep = pin!(sleep);
            let mut rearmed = pin!(self.rearm.notified());
            std::future::poll_fn(|cx| {
                if sleep.as_mut().poll(cx).is_ready() || rearmed.as_mut().poll(cx).is_ready() {
                    Poll::Ready(())
                } else {
                    Poll::Pending
                }
            })
            .await;
        }
    }
}

impl<M: Mechanism> Drop for Ticker<M> {
    fn drop(&mut self) {
        if self.armed {
            if let Some(keyed) = self.keyed.upgrade() {
                keyed.ticking.store(false, Ordering::Relaxed);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::same_text;

    #[test]
    fn texts_compare_equal_exactly_when_their_bytes_do() {
        let texts: Vec<String> = (0..=40)
            .flat_map(|n| {
                let base = "x".repeat(n);
                let mut changed = Vec::new();
                for at in 0..n {
                    let mut b = base.clone().into_bytes();
                    b[at] = b'y';
                    changed.push(String::from_utf8(b).unwrap_or_default());
                }
                changed.push(base);
                changed
            })
            .collect();
        for a in &texts {
            for b in &texts {
                assert_eq!(same_text(a.as_bytes(), b.as_bytes()), a == b, "{a:?} {b:?}");
            }
        }
    }
}
