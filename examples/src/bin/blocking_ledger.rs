//! Blocking fns under the attributes: eight threads share a ledger client
//! whose driver is blocking. A `block` limit of 2 lets two queries run at
//! once (the others wait for a connection), a retry absorbs the driver's
//! transient failures, and a breaker with a plain-fn fallback answers once
//! the ledger is down. The same specs would serve an `async fn` as well.
//!
//! Run with `cargo run -p examples --bin blocking_ledger`.

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::Duration;

use resilient_core::prelude::*;
use resilient_core::Registry;

/// The ledger's retry: two retries, 5 ms apart (the thread sleeps).
#[derive(RetrySpec)]
#[spec("resilient.retry.ledger")]
pub struct LedgerRetry;

/// The ledger's breaker, shared by every caller, blocking or async.
#[derive(CircuitBreakerSpec)]
#[spec("resilient.circuitbreaker.ledger")]
pub struct LedgerBreaker;

/// The ledger's connections: two, and a caller waits for one.
#[derive(ConcurrencyLimitSpec)]
#[spec("resilient.concurrency.ledger")]
pub struct LedgerPool;

const CONFIG: &str = r#"
[resilient.retry.ledger]
attempts = 2
delay = "5ms"

[resilient.circuitbreaker.ledger]
failure_rate_threshold = 50
minimum_required_calls = 4
wait_duration_in_open_state = "30s"
permitted_calls_in_half_open_state = 1
count_based = { window_size = 4 }

[resilient.concurrency.ledger]
limit = 2
policy = "block"
max_wait = "5s"
"#;

#[derive(Debug, thiserror::Error)]
enum LedgerError {
    #[error("the ledger is down")]
    Down,
    #[error(transparent)]
    Resilience(#[from] resilient_core::Error),
}

/// A blocking driver: each query holds the thread for 2 ms; while the
/// ledger is up, the first query of every third account fails (a dropped
/// connection); once it is down, every query fails.
#[derive(Default)]
struct Driver {
    queries: AtomicUsize,
    in_flight: AtomicUsize,
    peak: AtomicUsize,
    down: AtomicBool,
    dropped: Mutex<HashSet<u64>>,
}

impl Driver {
    fn query(&self, account: u64) -> Result<i64, LedgerError> {
        self.queries.fetch_add(1, Ordering::SeqCst);
        let now = self.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
        self.peak.fetch_max(now, Ordering::SeqCst);
        thread::sleep(Duration::from_millis(2));
        self.in_flight.fetch_sub(1, Ordering::SeqCst);
        let first_of_third = account.is_multiple_of(3)
            && self
                .dropped
                .lock()
                .map(|mut d| d.insert(account))
                .unwrap_or(false);
        if self.down.load(Ordering::SeqCst) || first_of_third {
            return Err(LedgerError::Down);
        }
        Ok(i64::try_from(account).unwrap_or(i64::MAX) * 100)
    }
}

struct Ledger {
    driver: Driver,
}

impl Ledger {
    #[fallback(method = "last_known(account)")]
    #[circuit_breakable(LedgerBreaker)]
    #[retryable(LedgerRetry)]
    #[concurrency_limit(LedgerPool)]
    fn balance(&self, account: u64) -> Result<i64, LedgerError> {
        self.driver.query(account)
    }

    fn last_known(&self, _account: u64) -> Result<i64, LedgerError> {
        Ok(-1)
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let config = config::Config::builder()
        .add_source(config::File::from_str(CONFIG, config::FileFormat::Toml))
        .build()?;
    resilient_config::build(
        Registry::builder()
            .spec::<LedgerRetry>()
            .spec::<LedgerBreaker>()
            .spec::<LedgerPool>(),
        &config,
    )?
    .install()?;

    let ledger = Arc::new(Ledger {
        driver: Driver::default(),
    });
    // Lookups answered by the ledger (the fallback answers -1).
    let answered = |ledger: &Arc<Ledger>| {
        let threads: Vec<_> = (0..8)
            .map(|t| {
                let ledger = Arc::clone(ledger);
                thread::spawn(move || {
                    (0..10)
                        .filter(|i| ledger.balance(t * 10 + i).is_ok_and(|b| b >= 0))
                        .count()
                })
            })
            .collect();
        threads
            .into_iter()
            .map(|t| t.join().unwrap_or(0))
            .sum::<usize>()
    };

    let served = answered(&ledger);
    let d = &ledger.driver;
    println!(
        "ledger up: 80 lookups on 8 threads, {served} answered by the ledger in {} queries, at most {} at once",
        d.queries.load(Ordering::SeqCst),
        d.peak.load(Ordering::SeqCst)
    );
    d.down.store(true, Ordering::SeqCst);
    let served = answered(&ledger);
    let breaker = LedgerBreaker::get()?;
    println!(
        "ledger down: {served} answered by the ledger, {} by the fallback, breaker {:?}",
        80 - served,
        breaker.metrics().state
    );
    Ok(())
}
