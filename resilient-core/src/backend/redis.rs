//! The Redis backend: one multiplexed connection per registry, one script
//! run per decision, a circuit breaker of this crate around it.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use redis::aio::MultiplexedConnection;

use super::{Ask, Decision, RedisSettings, Unavailable};
use crate::circuit_breaker::{Breaker, CircuitBreakerSettings, Permit, WindowSettings};
use crate::registry::Mechanism;

use crate::spec::SpecKind;
use crate::telemetry::{Listeners, Switches, Telemetry};

/// The fixed window, as the local limiter keeps it (see `roll` there), in
/// µs of the Redis server's clock: the window's start and the permits taken
/// in it, one string `"start taken"`. Reserved permits fill the windows
/// that follow, back to back. ARGV: limit, period, max_wait, and how many
/// permits due now the caller would take (a lease); the answer: admitted
/// (0 or 1), the wait until due, the permits granted, and how long those
/// due now stay in the window.
const FIXED_WINDOW: &str = r"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local limit = tonumber(ARGV[1])
local period = tonumber(ARGV[2])
local max_wait = tonumber(ARGV[3])
local start, taken = now, 0
local word = redis.call('GET', KEYS[1])
if word then
  local s, n = string.match(word, '^(%d+) (%d+)$')
  if s then
    start, taken = tonumber(s), tonumber(n)
    local elapsed = now - start
    if elapsed >= period then
      local passed = math.floor(elapsed / period)
      local left = taken - passed * limit
      if left > 0 then
        start, taken = start + passed * period, left
      else
        start, taken = now, 0
      end
    end
  end
end
if taken < limit and start <= now then
  local granted = math.min(tonumber(ARGV[4]), limit - taken)
  local left = start + period - now
  redis.call('SET', KEYS[1], string.format('%d %d', start, taken + granted), 'PX', math.max(1, math.ceil(left / 1000)))
  return {1, 0, granted, left}
end
local due = start
if taken >= limit then
  due = start + math.floor(taken / limit) * period
end
local wait = math.max(due - now, 0)
if wait > max_wait then
  return {0, wait, 0, 0}
end
taken = taken + 1
local last = start + (math.floor((taken - 1) / limit) + 1) * period
redis.call('SET', KEYS[1], string.format('%d %d', start, taken), 'PX', math.max(1, math.ceil((last - now) / 1000)))
return {1, wait, 1, 0}
";

/// The token bucket (GCRA), as the local limiter keeps it: the theoretical
/// arrival time, in µs of the Redis server's clock. ARGV and answer as for
/// the fixed window; permits granted at once count as arrivals now, and
/// stay valid for as many intervals as were granted.
const TOKEN_BUCKET: &str = r"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local interval = tonumber(ARGV[1])
local tolerance = tonumber(ARGV[2])
local max_wait = tonumber(ARGV[3])
local tat = tonumber(redis.call('GET', KEYS[1]) or 0) or 0
local from = math.max(tat, now)
local wait = math.max(from - now - tolerance, 0)
if wait > max_wait then
  return {0, wait, 0, 0}
end
local granted = 1
if wait == 0 then
  granted = math.min(tonumber(ARGV[4]), math.floor((now + tolerance - from) / interval) + 1)
end
local nxt = from + granted * interval
redis.call('SET', KEYS[1], string.format('%d', nxt), 'PX', math.max(1, math.ceil((nxt - now) / 1000)))
return {1, wait, granted, granted * interval}
";

/// The backend of one registry.
pub(crate) struct RedisBackend {
    client: redis::Client,
    settings: RedisSettings,
    shown: String,
    /// The connection in use and its generation: a call that finds it
    /// broken drops that generation only, not a newer one.
    conn: Mutex<Option<(u64, MultiplexedConnection)>>,
    generation: AtomicU64,
    /// One caller connects at a time; the others wait for its connection.
    connecting: tokio::sync::Mutex<()>,
    /// The backend's own failures: while open, a decision is not tried.
    breaker: Breaker,
    /// An outage was logged, and its end is not yet.
    down: AtomicBool,
    /// The runtime async decisions ran on: where a blocking fn's decision
    /// runs.
    runtime: OnceLock<tokio::runtime::Handle>,
    fixed_window: redis::Script,
    token_bucket: redis::Script,
}

impl std::fmt::Debug for RedisBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisBackend")
            .field("url", &self.shown)
            .finish_non_exhaustive()
    }
}

/// Why a decision was not made, for the log and the metric.
enum Failure {
    Connect(String),
    Timeout,
    Redis(redis::RedisError),
    Garbage(String),
}

impl Failure {
    fn reason(&self) -> &'static str {
        match self {
            Failure::Connect(_) => "connect",
            Failure::Timeout => "timeout",
            Failure::Redis(_) => "error",
            Failure::Garbage(_) => "garbage",
        }
    }
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Failure::Connect(e) => write!(f, "could not connect: {e}"),
            Failure::Timeout => f.write_str("no answer within `timeout`"),
            Failure::Redis(e) => write!(f, "{e}"),
            Failure::Garbage(e) => write!(f, "answered what is not a decision: {e}"),
        }
    }
}

/// The backend breaker's settings: the last 10 decisions, open at 50%
/// failures once 5 are counted, for 1 s, then one probe.
fn breaker_settings() -> CircuitBreakerSettings {
    CircuitBreakerSettings {
        enabled: true,
        window: WindowSettings::RingBuffer { window_size: 10 },
        failure_rate_threshold: 50,
        minimum_required_calls: 5,
        wait_duration_in_open_state: Duration::from_secs(1),
        permitted_calls_in_half_open_state: 1,
        slow_call: None,
        max_wait_in_half_open: None,
    }
}

/// The largest number a script takes: sums with the server's clock (in µs,
/// about 2^51 today) stay exact in Lua's doubles.
const MAX_ARG: u64 = 1 << 50;

fn micros(d: Duration) -> u64 {
    u64::try_from(d.as_micros())
        .unwrap_or(u64::MAX)
        .min(MAX_ARG)
}

impl RedisBackend {
    /// A backend for `settings`, not connected yet.
    pub(crate) fn new(
        settings: RedisSettings,
        listeners: &Arc<Listeners>,
        switches: Switches,
    ) -> Result<Self, String> {
        let client = redis::Client::open(settings.url.as_str())
            .map_err(|e| format!("must be a Redis URL (`redis://host:port`): {e}"))?;
        let telemetry = Telemetry::new(
            "RedisBackend",
            RedisSettings::PATH,
            SpecKind::CIRCUIT_BREAKER,
            <Breaker as Mechanism>::OUTCOMES,
            switches,
            Arc::clone(listeners),
        );
        Ok(Self {
            client,
            shown: settings.shown_url(),
            settings,
            conn: Mutex::new(None),
            generation: AtomicU64::new(0),
            connecting: tokio::sync::Mutex::new(()),
            breaker: <Breaker as Mechanism>::build(breaker_settings(), telemetry),
            down: AtomicBool::new(false),
            runtime: OnceLock::new(),
            fixed_window: redis::Script::new(FIXED_WINDOW),
            token_bucket: redis::Script::new(TOKEN_BUCKET),
        })
    }

    pub(crate) fn settings(&self) -> &RedisSettings {
        &self.settings
    }

    /// Connects and sends `PING`, blocking the thread, within
    /// `connect_timeout` and `timeout`: the startup check. `Err` says what
    /// was tried and what happened.
    pub(crate) fn ping_blocking(&self) -> Result<(), String> {
        let tried = format!(
            "connected with `connect_timeout` = {:?} and sent PING with `timeout` = {:?}",
            self.settings.connect_timeout, self.settings.timeout
        );
        let mut conn = self
            .client
            .get_connection_with_timeout(self.settings.connect_timeout)
            .map_err(|e| format!("{tried}: {e}"))?;
        conn.set_read_timeout(Some(self.settings.timeout))
            .and_then(|()| redis::cmd("PING").query::<String>(&mut conn))
            .map(drop)
            .map_err(|e| format!("{tried}: {e}"))
    }

    /// The connection in use, made now if there is none.
    async fn connection(&self) -> Result<(u64, MultiplexedConnection), Failure> {
        if let Some(c) = self.current() {
            return Ok(c);
        }
        let _one = self.connecting.lock().await;
        if let Some(c) = self.current() {
            return Ok(c);
        }
        let config = redis::AsyncConnectionConfig::new()
            .set_connection_timeout(Some(self.settings.connect_timeout))
            .set_response_timeout(Some(self.settings.timeout));
        // In a task of its own: the client panics on a runtime without an
        // IO driver, and that must be a failure of the backend, not of the
        // call.
        let client = self.client.clone();
        let connect = tokio::spawn(async move {
            client
                .get_multiplexed_async_connection_with_config(&config)
                .await
        });
        let conn = match tokio::time::timeout(self.settings.connect_timeout, connect).await {
            Err(_) => {
                return Err(Failure::Connect(format!(
                    "no connection within `connect_timeout` ({:?})",
                    self.settings.connect_timeout
                )))
            }
            Ok(Err(e)) if e.is_panic() => {
                return Err(Failure::Connect(
                    "the tokio runtime has no IO driver: build it with `enable_all()` (or `enable_io()`)".into(),
                ))
            }
            Ok(Err(e)) => return Err(Failure::Connect(e.to_string())),
            Ok(Ok(Err(e))) => return Err(Failure::Connect(e.to_string())),
            Ok(Ok(Ok(conn))) => conn,
        };
        let generation = self.generation.fetch_add(1, Ordering::Relaxed) + 1;
        if let Ok(mut slot) = self.conn.lock() {
            *slot = Some((generation, conn.clone()));
        }
        Ok((generation, conn))
    }

    fn current(&self) -> Option<(u64, MultiplexedConnection)> {
        self.conn.lock().ok().and_then(|c| c.clone())
    }

    /// Drops connection `generation` after an error that broke it; the next
    /// decision connects again.
    fn broken(&self, generation: u64) {
        if let Ok(mut slot) = self.conn.lock() {
            if slot.as_ref().is_some_and(|(g, _)| *g == generation) {
                *slot = None;
            }
        }
    }

    /// Asks Redis for one permit of the limiter whose keys are `key`, due
    /// within `max_wait`.
    pub(crate) async fn decide(
        &self,
        key: &super::Keys,
        ask: Ask,
        max_wait: Duration,
        want: u64,
    ) -> Result<Decision, Unavailable> {
        let _ = self.runtime.get_or_init(tokio::runtime::Handle::current);
        let Ok(permit) = Permit::new(&self.breaker) else {
            return Err(self.unavailable());
        };
        match tokio::time::timeout(self.settings.timeout, self.run(key, ask, max_wait, want)).await
        {
            Ok(Ok(answer)) => {
                permit.success();
                if self.down.swap(false, Ordering::AcqRel) {
                    tracing::info!(
                        target: "resilient::backend",
                        url = %self.shown,
                        "the Redis backend answers again; rate limiters decide there again"
                    );
                }
                Ok(answer)
            }
            Ok(Err(failure)) => {
                permit.failure();
                Err(self.failed(&failure))
            }
            Err(_) => {
                permit.failure();
                Err(self.failed(&Failure::Timeout))
            }
        }
    }

    /// [`decide`](Self::decide) from a thread that may block: run on the
    /// runtime an async decision ran on, the thread parked until the answer
    /// or `timeout`. Without such a runtime, or on a current-thread one
    /// (whose thread this would block), the backend is unavailable.
    pub(crate) fn decide_blocking(
        self: &Arc<Self>,
        key: &Arc<super::Keys>,
        ask: Ask,
        max_wait: Duration,
        want: u64,
    ) -> Result<Decision, Unavailable> {
        let Some(runtime) = self
            .runtime
            .get()
            .cloned()
            .or_else(|| tokio::runtime::Handle::try_current().ok())
        else {
            return Err(self.unavailable());
        };
        let on_current_thread = tokio::runtime::Handle::try_current()
            .is_ok_and(|h| h.runtime_flavor() == tokio::runtime::RuntimeFlavor::CurrentThread);
        if on_current_thread {
            return Err(self.unavailable());
        }
        let (me, key) = (Arc::clone(self), Arc::clone(key));
        let deadline = self
            .settings
            .connect_timeout
            .saturating_add(self.settings.timeout);
        // On a worker thread, a task spawned here would wait in this
        // thread's own next-task slot, which no other worker takes: the
        // thread hands its work over before it blocks.
        let answer = tokio::task::block_in_place(move || {
            let task = runtime.spawn(async move { me.decide(&key, ask, max_wait, want).await });
            crate::blocking::wait_for(task, Some(deadline), || {})
        });
        match answer {
            Some(Ok(answer)) => answer,
            _ => Err(self.unavailable()),
        }
    }

    pub(crate) fn unavailable(&self) -> Unavailable {
        Unavailable {
            retry_after: self
                .breaker
                .until_half_open()
                .unwrap_or(self.settings.timeout),
        }
    }

    /// Counts and, once per outage, logs `failure`.
    fn failed(&self, failure: &Failure) -> Unavailable {
        metrics::counter!(
            "resilient_backend_failures_total",
            "backend" => "redis",
            "reason" => failure.reason()
        )
        .increment(1);
        if !self.down.swap(true, Ordering::AcqRel) {
            tracing::error!(
                target: "resilient::backend",
                url = %self.shown,
                reason = failure.reason(),
                "the Redis backend failed: {failure}; rate limiters apply their `on_backend_failure` until it answers again"
            );
        }
        self.unavailable()
    }

    async fn run(
        &self,
        keys: &super::Keys,
        ask: Ask,
        max_wait: Duration,
        want: u64,
    ) -> Result<Decision, Failure> {
        let (generation, mut conn) = self.connection().await?;
        let mut invocation = match ask {
            Ask::FixedWindow { limit, period } => {
                let mut i = self.fixed_window.key(&*keys.fixed_window);
                i.arg(limit).arg(micros(period));
                i
            }
            Ask::TokenBucket {
                interval,
                tolerance,
            } => {
                let mut i = self.token_bucket.key(&*keys.token_bucket);
                i.arg(micros_up(interval)).arg(micros(tolerance));
                i
            }
        };
        invocation.arg(micros(max_wait)).arg(want.clamp(1, MAX_ARG));
        let reply: Result<Vec<i64>, redis::RedisError> = invocation.invoke_async(&mut conn).await;
        let reply = match reply {
            Ok(reply) => reply,
            Err(e) => {
                if e.is_io_error() || e.is_connection_dropped() || e.is_unrecoverable_error() {
                    self.broken(generation);
                }
                return Err(if e.kind() == redis::ErrorKind::UnexpectedReturnType {
                    Failure::Garbage(e.to_string())
                } else {
                    Failure::Redis(e)
                });
            }
        };
        match reply[..] {
            [admitted @ (0 | 1), wait, granted, valid]
                if wait >= 0
                    && valid >= 0
                    && (0..=i64::try_from(want).unwrap_or(i64::MAX)).contains(&granted)
                    && (admitted == 0) == (granted == 0) =>
            {
                Ok(Decision {
                    admitted: admitted == 1,
                    wait: Duration::from_micros(wait.unsigned_abs()),
                    granted: granted.unsigned_abs(),
                    valid: Duration::from_micros(valid.unsigned_abs()),
                })
            }
            _ => Err(Failure::Garbage(format!("{reply:?}"))),
        }
    }
}

/// A token bucket's interval in whole µs, rounded up: the bucket never
/// gives more than the configured rate.
fn micros_up(d: Duration) -> u64 {
    let us = d.as_nanos().div_ceil(1000);
    u64::try_from(us).unwrap_or(u64::MAX).clamp(1, MAX_ARG)
}
