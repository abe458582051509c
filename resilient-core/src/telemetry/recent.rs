//! The recent events of each spec: a bounded ring per spec (and one for
//! the registry's own events: fallbacks, reloads, operator actions), kept
//! whether or not anyone listens, so that an operator reads what happened
//! last without having subscribed before it happened (Resilience4j's event
//! consumer buffer, 100 events per instance by default).
//!
//! Writing never waits. An event takes a slot with `try_lock`: a slot that
//! a reader holds at that moment (it is copying that slot's event) is not
//! written, and the event is not kept. A run of
//! rejections by one instance, with no other event of its spec between
//! them, is counted into the run's first entry with one atomic add (no
//! clock read, no event built): a breaker open under load rejects every
//! call, and a ring of its rejections would hide the transition that
//! caused them. Nothing here is on the success path, which publishes no
//! event.
//!
//! Readers (the snapshot's readers, an admin route, the event stream) lock
//! one slot at a time, and only the slots holding events newer than what
//! they have seen.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{SystemTime, UNIX_EPOCH};

use super::events::Event;
use crate::versions::{Tag, Versions};

/// The most events a ring keeps: `recent_events` is read in `0..=MAX`.
pub(crate) const MAX_RECENT: u64 = 10_000;

/// The number of events a ring keeps by default, as Resilience4j's.
pub(crate) const DEFAULT_RECENT: u32 = 100;

/// One event as a spec's recent events keep it: see
/// [`Registry::recent_events`](crate::Registry::recent_events).
#[derive(Debug, Clone, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[non_exhaustive]
pub struct Recorded {
    /// Its place among every event of the registry: a later event has a
    /// higher number, whichever spec published it (numbers of events not
    /// kept are skipped).
    pub seq: u64,
    /// When it was published, in milliseconds since the Unix epoch (the
    /// wall clock: for people, not for measuring).
    pub at_ms: u64,
    /// How many times it happened in a row: more than 1 for a run of
    /// rejections by one instance, counted into the run's first entry
    /// (`at_ms` is the first one's).
    pub count: u64,
    /// The event.
    #[cfg_attr(feature = "serde", serde(flatten))]
    pub event: Event,
}

/// One place of a ring.
#[derive(Debug, Default)]
struct Slot {
    /// The event and when it came; `None` until the first one.
    entry: Mutex<Option<(Event, u64)>>,
    /// The `seq` of the event in `entry`, written inside its lock; 0 while
    /// empty. Read without the lock, to skip slots a reader has seen.
    seq: AtomicU64,
    /// The rejections counted into the entry after it (see the module
    /// docs).
    repeats: AtomicU64,
}

/// A ring of `slots.len()` events.
#[derive(Debug)]
pub(crate) struct Ring {
    slots: Box<[Slot]>,
    /// Events written since the ring was made: the next one's position.
    next: AtomicU64,
}

impl Tag for Ring {}

impl Ring {
    fn new(capacity: u32) -> Self {
        Self {
            slots: (0..capacity).map(|_| Slot::default()).collect(),
            next: AtomicU64::new(0),
        }
    }

    fn capacity(&self) -> u32 {
        u32::try_from(self.slots.len()).unwrap_or(u32::MAX)
    }

    fn slot(&self, position: u64) -> &Slot {
        // The ring is not empty when this is called: `len` > 0.
        let len = self.slots.len() as u64;
        &self.slots[(position % len.max(1)) as usize]
    }

    /// Writes `event`, numbered `seq`, at the next place; `false` when a
    /// reader held the place.
    fn write(&self, seq: u64, at_ms: u64, event: Event) -> bool {
        let position = self.next.fetch_add(1, Ordering::AcqRel);
        let slot = self.slot(position);
        let Ok(mut entry) = slot.entry.try_lock() else {
            return false;
        };
        *entry = Some((event, at_ms));
        slot.repeats.store(0, Ordering::Relaxed);
        slot.seq.store(seq, Ordering::Release);
        true
    }

    /// The latest entry, if any.
    #[cfg(feature = "admin")]
    fn last(&self) -> Option<Recorded> {
        let next = self.next.load(Ordering::Acquire);
        if next == 0 || self.slots.is_empty() {
            return None;
        }
        let slot = self.slot(next - 1);
        let entry = slot.entry.lock().unwrap_or_else(PoisonError::into_inner);
        let seq = slot.seq.load(Ordering::Acquire);
        entry.as_ref().map(|(event, at_ms)| Recorded {
            seq,
            at_ms: *at_ms,
            count: slot.repeats.load(Ordering::Relaxed).saturating_add(1),
            event: event.clone(),
        })
    }

    /// The entries newer than `after` (a `seq`), oldest first.
    fn after(&self, after: u64, out: &mut Vec<Recorded>) {
        let next = self.next.load(Ordering::Acquire);
        let len = self.slots.len() as u64;
        for position in next.saturating_sub(len)..next {
            let slot = self.slot(position);
            if slot.seq.load(Ordering::Acquire) <= after {
                continue;
            }
            let entry = slot.entry.lock().unwrap_or_else(PoisonError::into_inner);
            let seq = slot.seq.load(Ordering::Acquire);
            if let Some((event, at_ms)) = entry.as_ref().filter(|_| seq > after) {
                out.push(Recorded {
                    seq,
                    at_ms: *at_ms,
                    count: slot.repeats.load(Ordering::Relaxed).saturating_add(1),
                    event: event.clone(),
                });
            }
        }
    }
}

/// The recent events of one spec (or of the registry itself), in a ring
/// whose size a reload may change.
pub(crate) struct Recent {
    /// The registry's event numbers, shared by all its rings.
    seq: Arc<AtomicU64>,
    /// The ring, one per size it ever had (see `Versions`); a reload that
    /// changes the size copies the events over.
    ring: Versions<Ring>,
}

impl std::fmt::Debug for Recent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Recent")
            .field("capacity", &self.capacity())
            .finish_non_exhaustive()
    }
}

impl Recent {
    /// A ring of `capacity` events, numbered from `seq`.
    pub(crate) fn new(seq: Arc<AtomicU64>, capacity: u32) -> Self {
        Self {
            seq,
            ring: Versions::new(Ring::new(capacity)),
        }
    }

    /// How many events it keeps.
    pub(crate) fn capacity(&self) -> u32 {
        self.ring.get().capacity()
    }

    /// Whether it keeps any event.
    #[inline]
    pub(crate) fn on(&self) -> bool {
        !self.ring.get().slots.is_empty()
    }

    /// Keeps `capacity` events from now on, the latest ones kept so far
    /// among them.
    pub(crate) fn resize(&self, capacity: u32) {
        let was = self.ring.get();
        if was.capacity() == capacity {
            return;
        }
        let mut kept = Vec::new();
        was.after(0, &mut kept);
        let (ring, new) = self
            .ring
            .publish(|r| r.capacity() == capacity, || Ring::new(capacity));
        if !new {
            // A ring of this size from before: its events are older than
            // the ones just copied.
            for slot in ring.slots.iter() {
                let mut entry = slot.entry.lock().unwrap_or_else(PoisonError::into_inner);
                *entry = None;
                slot.seq.store(0, Ordering::Release);
            }
        }
        let skip = kept.len().saturating_sub(capacity as usize);
        for r in kept.into_iter().skip(skip) {
            if ring.write(r.seq, r.at_ms, r.event) {
                let slot = ring.slot(ring.next.load(Ordering::Acquire).saturating_sub(1));
                slot.repeats
                    .store(r.count.saturating_sub(1), Ordering::Relaxed);
            }
        }
    }

    /// Keeps `event`, and returns its number (0 when it was not kept).
    pub(crate) fn record(&self, event: Event) -> u64 {
        let ring = self.ring.get();
        if ring.slots.is_empty() {
            return 0;
        }
        let seq = self.seq.fetch_add(1, Ordering::Relaxed) + 1;
        if ring.write(seq, now_ms(), event) {
            seq
        } else {
            0
        }
    }

    /// Counts one more rejection into the entry numbered `run` (the last
    /// rejection this instance recorded), if it is still the latest of the
    /// ring; `false` if another event came after it, or it is gone.
    pub(crate) fn repeat(&self, run: u64) -> bool {
        if run == 0 {
            return false;
        }
        let ring = self.ring.get();
        let next = ring.next.load(Ordering::Acquire);
        if next == 0 || ring.slots.is_empty() {
            return false;
        }
        let last = ring.slot(next - 1);
        if last.seq.load(Ordering::Acquire) != run {
            return false;
        }
        last.repeats.fetch_add(1, Ordering::Relaxed);
        true
    }

    /// The latest event kept, with its count now: the only entry whose
    /// count can still grow.
    #[cfg(feature = "admin")]
    pub(crate) fn last(&self) -> Option<Recorded> {
        self.ring.get().last()
    }

    /// The events kept newer than `after` (a `seq`; 0 for all), oldest
    /// first.
    pub(crate) fn after(&self, after: u64, out: &mut Vec<Recorded>) {
        self.ring.get().after(after, out);
    }
}

/// The wall clock in ms since the Unix epoch (0 before it).
fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn timed_out(n: u64) -> Event {
        Event::TimedOut {
            spec: "T",
            path: "t",
            after: std::time::Duration::from_millis(n),
        }
    }

    fn seqs(recent: &Recent, after: u64) -> Vec<u64> {
        let mut out = Vec::new();
        recent.after(after, &mut out);
        out.iter().map(|r| r.seq).collect()
    }

    #[test]
    fn a_ring_keeps_the_latest_events_in_order() {
        let recent = Recent::new(Arc::default(), 3);
        for n in 1..=5 {
            assert_eq!(recent.record(timed_out(n)), n);
        }
        assert_eq!(seqs(&recent, 0), [3, 4, 5]);
        assert_eq!(seqs(&recent, 4), [5]);
        assert_eq!(seqs(&recent, 5), Vec::<u64>::new());
    }

    #[test]
    fn a_ring_of_no_events_keeps_none_and_numbers_none() {
        let seq = Arc::new(AtomicU64::new(0));
        let recent = Recent::new(Arc::clone(&seq), 0);
        assert!(!recent.on());
        assert_eq!(recent.record(timed_out(1)), 0);
        assert_eq!(seq.load(Ordering::Relaxed), 0);
        assert!(!recent.repeat(1));
    }

    #[test]
    fn a_repeat_counts_into_the_latest_entry_only() {
        let recent = Recent::new(Arc::default(), 4);
        let run = recent.record(timed_out(1));
        assert!(recent.repeat(run));
        assert!(recent.repeat(run));
        let mut out = Vec::new();
        recent.after(0, &mut out);
        assert_eq!(out[0].count, 3);
        recent.record(timed_out(2));
        assert!(!recent.repeat(run), "another event came after it");
    }

    #[test]
    fn a_slot_a_reader_holds_is_skipped() {
        let recent = Recent::new(Arc::default(), 2);
        let ring = recent.ring.get();
        let held = ring.slots[0]
            .entry
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        assert_eq!(recent.record(timed_out(1)), 0);
        drop(held);
        assert_eq!(recent.record(timed_out(2)), 2);
        assert_eq!(seqs(&recent, 0), [2]);
    }

    /// The guide says what a ring takes: 128 bytes a slot on a 64-bit target
    /// (12.5 KiB for the default 100).
    #[cfg(target_pointer_width = "64")]
    #[test]
    fn a_slot_takes_128_bytes() {
        assert_eq!(std::mem::size_of::<Slot>(), 128);
    }

    #[test]
    fn a_resize_keeps_the_latest_events() {
        let recent = Recent::new(Arc::default(), 4);
        for n in 1..=4 {
            recent.record(timed_out(n));
        }
        recent.resize(2);
        assert_eq!(seqs(&recent, 0), [3, 4]);
        recent.record(timed_out(5));
        recent.resize(4);
        assert_eq!(
            seqs(&recent, 0),
            [4, 5],
            "the old ring of 4 holds only what was copied into it"
        );
    }
}
