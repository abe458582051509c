//! Keyed breakers opened by several threads at once: the ejections that
//! `keys.max_open_percent` counts must all come back when they close.

#![allow(clippy::expect_used)]

mod support;
use support::*;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use resilient_core::circuit_breaker::State;
use resilient_core::CircuitBreakerSpec;

#[derive(CircuitBreakerSpec)]
#[spec("keyed.race.host")]
struct RaceBreaker;

const THREADS: usize = 2;
const ROUNDS: usize = 2_000;
const KEYS: usize = 8;

/// Spins until every thread reached round `round`'s line.
fn line(arrived: &AtomicUsize, round: usize) {
    arrived.fetch_add(1, Ordering::AcqRel);
    while arrived.load(Ordering::Acquire) < (round + 1) * THREADS {
        std::hint::spin_loop();
    }
}

/// Two threads fail on key "k0" at once, round after round, with the
/// window one failure short of opening: the first failures to land all
/// see it past its threshold. After each round the key is reset, so no
/// key is open; at the end every key fails, and every key must open
/// (`max_open_percent` is the default 100).
#[test]
fn breakers_opened_by_threads_at_once_give_every_ejection_back() {
    let r = registry::<RaceBreaker>(table([
        ("failure_rate_threshold", int(50)),
        ("minimum_required_calls", int(2)),
        ("wait_duration_in_open_state", s("1h")),
        ("permitted_calls_in_half_open_state", int(1)),
        ("count_based", table([("window_size", int(100))])),
        ("keys", table([("max", int(100))])),
    ]));
    let _default = r.set_default();
    for k in 0..KEYS {
        let h = RaceBreaker::for_key(&format!("k{k}")).expect("configured");
        h.acquire().expect("closed").success();
    }
    let (start, end) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let threads: Vec<_> = (0..THREADS)
        .map(|t| {
            let (r, start, end) = (r.clone(), Arc::clone(&start), Arc::clone(&end));
            std::thread::spawn(move || {
                let _default = r.set_default();
                let h = RaceBreaker::for_key("k0").expect("configured");
                for round in 0..ROUNDS {
                    if t == 0 {
                        h.reset();
                        h.acquire().expect("closed").failure();
                    }
                    let permit = {
                        line(&start, round);
                        h.acquire()
                    };
                    if let Ok(p) = permit {
                        p.failure();
                    }
                    line(&end, round);
                }
                if t == 0 {
                    h.reset();
                }
            })
        })
        .collect();
    for t in threads {
        t.join().expect("thread");
    }
    let leaked = keys::<RaceBreaker>(&r).ejected;
    for k in 0..KEYS {
        let h = RaceBreaker::for_key(&format!("k{k}")).expect("configured");
        for _ in 0..2 {
            if let Ok(p) = h.acquire() {
                p.failure();
            }
        }
    }
    let open = (0..KEYS)
        .filter(|k| {
            RaceBreaker::for_key(&format!("k{k}"))
                .expect("configured")
                .state()
                == State::Open
        })
        .count();
    assert_eq!(
        (leaked, open),
        (0, KEYS),
        "(ejections held with every key closed, keys open once all fail)"
    );
}
