//! The Redis backend: one multiplexed connection per registry, one script
//! run per decision, a circuit breaker of this crate around it.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};
use std::sync::{mpsc, Arc, Mutex, OnceLock, PoisonError};
use std::time::{Duration, Instant};

use super::conn::{AsyncConn, BlockingConn, Client};
use super::{
    Ask, BackendSnapshot, BackendState, BackendUse, BudgetAnswer, BudgetAsk, Decision, Keys,
    RedisSettings, Unavailable, MAX_ARG,
};
use crate::circuit_breaker::{Breaker, CircuitBreakerSettings, Permit, WindowSettings};
use crate::registry::Mechanism;
use crate::spec::SpecKind;
use crate::telemetry::{Event, Listeners, Recorded, Switches, Telemetry};

/// The backend's name: its telemetry's, its metrics' `backend` label.
const NAME: &str = "redis";

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
    -- A window begun after now: the server's clock stepped back (or this
    -- is a replica whose clock is behind); it began now.
    start, taken = math.min(tonumber(s), now), tonumber(n)
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
-- No permit is owed further ahead than the burst, one interval and the
-- longest wait: beyond, the server's clock stepped back.
tat = math.min(tat, now + tolerance + interval + max_wait)
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

/// A retry budget (see `retry::budget`), in millionths of a token and µs
/// of the Redis server's clock: `"tokens refilled_at"`. ARGV: the bucket's
/// size, its start, the refill per second, the tokens deposited since the
/// last decision (successes, tokens given back), and whether a token is
/// wanted (0 or 1). The refill comes first, then the deposit, then the
/// withdrawal; the answer: the tokens granted (0 or 1) and those left. A
/// bucket unused for a day is dropped: it starts again at its start.
const BUDGET: &str = r"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local max = tonumber(ARGV[1])
local rate = tonumber(ARGV[3])
local tokens, at = tonumber(ARGV[2]), now
local word = redis.call('GET', KEYS[1])
if word then
  local a, b = string.match(word, '^(%d+) (%d+)$')
  if a then
    -- A refill mark after now: the server's clock stepped back; from now.
    tokens, at = math.min(tonumber(a), max), math.min(tonumber(b), now)
  end
end
if rate > 0 then
  local due = math.floor(rate * (now - at) / 1000000)
  if due > 0 then
    tokens = math.min(max, tokens + due)
    -- The mark moves by the time paid for, rounded up: a fraction of a
    -- token not yet paid is kept, and none is paid twice.
    at = math.min(now, at + math.ceil(due * 1000000 / rate))
  end
else
  at = now
end
tokens = math.min(max, tokens + tonumber(ARGV[4]))
local granted = 0
if tonumber(ARGV[5]) > 0 and tokens >= 1000000 then
  tokens, granted = tokens - 1000000, 1
end
redis.call('SET', KEYS[1], string.format('%d %d', tokens, at), 'PX', 86400000)
return {granted, tokens}
";

/// A retry budget's answer, asked for `ask`.
fn budget_answer(reply: &[i64], ask: &BudgetAsk) -> Result<BudgetAnswer, Failure> {
    let max = i64::try_from(ask.max.min(MAX_ARG)).unwrap_or(i64::MAX);
    match *reply {
        [granted @ (0 | 1), tokens]
            if (0..=max).contains(&tokens) && (ask.want || granted == 0) =>
        {
            Ok(BudgetAnswer {
                granted: granted == 1,
                tokens: tokens.unsigned_abs(),
            })
        }
        _ => Err(Failure::Garbage(format!("{reply:?}"))),
    }
}

/// The backend of one registry.
pub(crate) struct RedisBackend {
    client: Client,
    settings: RedisSettings,
    shown: String,
    /// The connection async decisions use, and its generation: a call that
    /// finds it broken drops that generation only, not a newer one.
    /// Shared with the task that connects, which fills it however long
    /// its caller waited.
    conn: Arc<Mutex<Option<(u64, AsyncConn)>>>,
    generation: Arc<AtomicU64>,
    /// One caller connects at a time; the others wait for its connection.
    connecting: tokio::sync::Mutex<()>,
    /// Connection attempts begun: a caller that waited for another's
    /// attempt takes its failure instead of beginning one more, so that no
    /// caller waits for two.
    attempts: AtomicU64,
    /// Idle connections of blocking decisions (a handle's `try_acquire`, a
    /// blocking fn), which need no runtime: a decision takes one, or opens
    /// one, and puts it back after (up to [`IDLE_BLOCKING`] are kept), so
    /// that threads never wait for each other's round trips. Shared with
    /// the threads that open them: one that opens after its caller stopped
    /// waiting leaves it here.
    blocking: Arc<Mutex<Vec<BlockingConn>>>,
    /// The backend's own failures: while open, a decision is not tried.
    /// Its telemetry is the backend's: name `redis`, kind `backend`, no
    /// metrics of a breaker.
    breaker: Breaker,
    /// An outage was logged, and its end is not yet.
    down: AtomicBool,
    /// Whether it answers, as the last decision found
    /// ([`BackendState`]'s code), and since when (ms since the Unix epoch).
    health: AtomicU8,
    since_ms: AtomicU64,
    /// Decisions that failed since the start.
    failures: AtomicU64,
    /// Whether the registry records metrics (the global switch), and the
    /// gauge `resilient_backend_up`, registered once the state is known.
    metrics: bool,
    up: OnceLock<metrics::Gauge>,
    fixed_window: Script,
    token_bucket: Script,
    budget: Script,
}

/// A script and its source: run by its hash (`EVALSHA`), or by its source
/// (`EVAL`, which also loads it) when the server does not have it.
struct Script {
    hash: redis::Script,
    source: &'static str,
}

impl Script {
    fn new(source: &'static str) -> Self {
        Self {
            hash: redis::Script::new(source),
            source,
        }
    }

    /// A run of this script on `key` with `args`.
    fn run(&self, key: String, args: Vec<u64>) -> Run<'_> {
        Run {
            script: self,
            key,
            args,
        }
    }
}

/// One run of a script: at most two round trips (`EVALSHA`, then `EVAL`
/// after a `NOSCRIPT`), each within what is left of the decision's
/// `timeout` (the client's own `invoke` makes three, each with a timeout of
/// its own).
struct Run<'a> {
    script: &'a Script,
    key: String,
    args: Vec<u64>,
}

impl Run<'_> {
    fn command(&self, name: &str, script: &str) -> redis::Cmd {
        let mut cmd = redis::cmd(name);
        cmd.arg(script).arg(1).arg(&self.key);
        for a in &self.args {
            cmd.arg(*a);
        }
        cmd
    }

    fn evalsha(&self) -> redis::Cmd {
        self.command("EVALSHA", self.script.hash.get_hash())
    }

    fn eval(&self) -> redis::Cmd {
        self.command("EVAL", self.script.source)
    }
}

/// Whether `e` is what only a Redis Cluster's node answers: a key served
/// by another node (`MOVED`, `ASK`), or a cluster without its slots.
fn cluster_reply(e: &redis::RedisError) -> bool {
    use redis::ServerErrorKind::{Ask, ClusterDown, Moved};
    matches!(
        e.kind(),
        redis::ErrorKind::Server(Moved | Ask | ClusterDown)
    )
}

/// Whether the server answered that it does not have the script (a
/// restarted or flushed Redis).
fn no_script(e: &redis::RedisError) -> bool {
    e.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::NoScript)
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
    /// Not in a tokio runtime with the drivers a client needs.
    Runtime(&'static str),
}

impl Failure {
    fn reason(&self) -> &'static str {
        match self {
            Failure::Connect(_) => "connect",
            Failure::Timeout => "timeout",
            Failure::Redis(_) => "error",
            Failure::Garbage(_) => "garbage",
            Failure::Runtime(_) => "runtime",
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
            Failure::Runtime(e) => f.write_str(e),
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

/// Whether an error broke the multiplexed connection it came on (a reply
/// late past `timeout` does not: the connection matches replies in order).
fn breaks(e: &redis::RedisError) -> bool {
    e.is_io_error() || e.is_connection_dropped() || e.is_unrecoverable_error()
}

fn failure(e: redis::RedisError) -> Failure {
    if e.is_timeout() {
        Failure::Timeout
    } else if e.kind() == redis::ErrorKind::UnexpectedReturnType {
        Failure::Garbage(e.to_string())
    } else {
        Failure::Redis(e)
    }
}

/// The decision in a script's reply, asked for `want` permits.
fn decision(reply: &[i64], want: u64) -> Result<Decision, Failure> {
    let most = i64::try_from(want).unwrap_or(i64::MAX);
    match *reply {
        [admitted @ (0 | 1), wait, granted, valid]
            if wait >= 0
                && valid >= 0
                && (0..=most).contains(&granted)
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

impl RedisBackend {
    /// A backend for `settings`, not connected yet.
    pub(crate) fn new(
        settings: RedisSettings,
        listeners: &Arc<Listeners>,
        switches: Switches,
    ) -> Result<Self, String> {
        let client = Client::open(
            &settings.url,
            &settings.nodes,
            settings.cluster,
            settings.connect_timeout,
            settings.timeout,
        )
        .map_err(|e| settings.scrub(&format!("must be a Redis URL (`redis://host:port`): {e}")))?;
        // The backend's breaker records no breaker metrics: the backend
        // has its own (`resilient_backend_*`).
        let telemetry = Telemetry::new(
            NAME,
            RedisSettings::PATH,
            SpecKind::BACKEND,
            <Breaker as Mechanism>::OUTCOMES,
            Switches {
                metrics: false,
                ..switches
            },
            Arc::clone(listeners),
        );
        Ok(Self {
            client,
            shown: settings.shown_url(),
            settings,
            conn: Arc::default(),
            generation: Arc::default(),
            connecting: tokio::sync::Mutex::new(()),
            attempts: AtomicU64::new(0),
            blocking: Arc::default(),
            breaker: <Breaker as Mechanism>::build(breaker_settings(), telemetry),
            down: AtomicBool::new(false),
            health: AtomicU8::new(BackendState::Unknown.code()),
            since_ms: AtomicU64::new(0),
            failures: AtomicU64::new(0),
            metrics: switches.metrics,
            up: OnceLock::new(),
            fixed_window: Script::new(FIXED_WINDOW),
            token_bucket: Script::new(TOKEN_BUCKET),
            budget: Script::new(BUDGET),
        })
    }

    pub(crate) fn settings(&self) -> &RedisSettings {
        &self.settings
    }

    /// Records what the startup check found: up when Redis answered.
    pub(crate) fn checked(&self, answered: bool) {
        self.mark(if answered {
            BackendState::Up
        } else {
            BackendState::Down
        });
    }

    /// Records that a decision was made (`Up`) or failed (`Down`): at a
    /// change, its time, its event and the gauge. One relaxed load when
    /// nothing changed.
    fn mark(&self, state: BackendState) {
        let code = state.code();
        if self.health.load(Ordering::Relaxed) == code
            || self.health.swap(code, Ordering::AcqRel) == code
        {
            return;
        }
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
        self.since_ms.store(now, Ordering::Relaxed);
        if self.metrics {
            self.up
                .get_or_init(|| metrics::gauge!("resilient_backend_up", "backend" => NAME))
                .set(if state == BackendState::Up { 1.0 } else { 0.0 });
        }
        let t = &self.breaker.telemetry;
        t.emit(|| Event::BackendChanged {
            backend: NAME,
            path: RedisSettings::PATH,
            state,
        });
    }

    /// The backend as the snapshot shows it, used by `used_by`.
    pub(crate) fn snapshot(&self, used_by: Vec<BackendUse>) -> BackendSnapshot {
        let state = BackendState::from_code(self.health.load(Ordering::Acquire));
        BackendSnapshot {
            backend: NAME,
            path: RedisSettings::PATH,
            url: self.shown.clone(),
            state,
            since_ms: (state != BackendState::Unknown)
                .then(|| self.since_ms.load(Ordering::Relaxed)),
            failures: self.failures.load(Ordering::Relaxed),
            breaker: self.breaker.state(),
            readiness: self.settings.readiness,
            used_by,
        }
    }

    /// Its recent events (its breaker's transitions and rejections, its
    /// changes of state) newer than `after`.
    pub(crate) fn recent(&self, after: u64, out: &mut Vec<Recorded>) {
        self.breaker.telemetry.recent().after(after, out);
    }

    /// Connects and sends `PING`, blocking the thread, within
    /// `connect_timeout` and then `timeout`: the startup check. `Err` says
    /// what was tried and what happened.
    pub(crate) fn ping_blocking(&self) -> Result<(), String> {
        let tried = format!(
            "connected with `connect_timeout` = {:?} and sent PING with `timeout` = {:?}",
            self.settings.connect_timeout, self.settings.timeout
        );
        let said = |e: &dyn std::fmt::Display| self.scrub(&format!("{tried}: {e}"));
        // Opened with `timeout` for each read and write.
        let mut conn = self.connect_blocking().map_err(|e| said(&e))?;
        redis::cmd("PING")
            .query::<String>(&mut conn)
            .map(drop)
            .map_err(|e| said(&e))
    }

    /// A blocking connection, open within `connect_timeout` whatever it
    /// takes: the client's own setup (`AUTH`, `SELECT`, two `CLIENT
    /// SETINFO`) waits up to `connect_timeout` for each reply in turn, so
    /// a stalled server would hold the caller for several. The connection
    /// is opened on a thread of its own, bounded by the client alone; one
    /// that opens after its caller stopped waiting is kept among the idle
    /// ones, for the calls that follow.
    fn connect_blocking(&self) -> Result<BlockingConn, Failure> {
        let limit = self.settings.connect_timeout;
        let timeout = self.settings.timeout;
        let (client, idle) = (self.client.clone(), Arc::clone(&self.blocking));
        let (sent, opened) = mpsc::sync_channel(1);
        let spawned = std::thread::Builder::new()
            .name("resilient-redis-connect".into())
            .spawn(move || {
                let conn = client.connect_blocking(limit, timeout);
                if let Err(mpsc::SendError(Ok(conn))) = sent.send(conn) {
                    let mut idle = idle.lock().unwrap_or_else(PoisonError::into_inner);
                    if idle.len() < IDLE_BLOCKING {
                        idle.push(conn);
                    }
                }
            });
        if let Err(e) = spawned {
            return Err(Failure::Connect(format!("no thread to connect on: {e}")));
        }
        match opened.recv_timeout(limit) {
            Ok(Ok(conn)) => Ok(conn),
            Ok(Err(e)) => Err(Failure::Connect(e.to_string())),
            Err(mpsc::RecvTimeoutError::Timeout) => Err(Failure::Connect(format!(
                "no connection within `connect_timeout` ({limit:?})"
            ))),
            Err(mpsc::RecvTimeoutError::Disconnected) => Err(Failure::Connect(
                "the thread that connected ended without a connection".into(),
            )),
        }
    }

    /// The connection in use, made now if there is none, within
    /// `connect_timeout` from the call (its wait for another caller's
    /// attempt included). The connection is made by a task of its own,
    /// bounded by `connect_timeout` too: a caller that stops waiting leaves
    /// it to finish for the calls that follow. A caller that waited for
    /// another's attempt, which failed, takes that failure rather than
    /// making one more.
    async fn connection(&self) -> Result<(u64, AsyncConn), Failure> {
        if let Some(c) = self.current() {
            return Ok(c);
        }
        let limit = self.settings.connect_timeout;
        let late = || {
            Failure::Connect(format!(
                "no connection within `connect_timeout` ({limit:?})"
            ))
        };
        let deadline = tokio::time::Instant::now() + limit;
        let attempts = self.attempts.load(Ordering::Acquire);
        let turn = catch_unwind(AssertUnwindSafe(|| {
            tokio::time::timeout_at(deadline, self.connecting.lock())
        }))
        .map_err(|_| Failure::Runtime(NO_TIMERS))?;
        let _one = turn.await.map_err(|_| late())?;
        if let Some(c) = self.current() {
            return Ok(c);
        }
        if self.attempts.load(Ordering::Acquire) != attempts {
            return Err(Failure::Connect(
                "the connection attempt this call waited for failed".into(),
            ));
        }
        self.attempts.fetch_add(1, Ordering::AcqRel);
        let timeout = self.settings.timeout;
        let (client, slot, generation) = (
            self.client.clone(),
            Arc::clone(&self.conn),
            Arc::clone(&self.generation),
        );
        // In a task of its own also because the client panics on a
        // runtime without an IO driver: that must be a failure of the
        // backend, not of the call.
        let connect = tokio::spawn(async move {
            let conn = client.connect_async(limit, timeout).await?;
            let g = generation.fetch_add(1, Ordering::Relaxed) + 1;
            *slot.lock().unwrap_or_else(PoisonError::into_inner) = Some((g, conn.clone()));
            Ok::<_, redis::RedisError>((g, conn))
        });
        let waited = catch_unwind(AssertUnwindSafe(|| {
            tokio::time::timeout_at(deadline, connect)
        }))
        .map_err(|_| Failure::Runtime(NO_TIMERS))?;
        match waited.await {
            Err(_) => Err(late()),
            Ok(Err(e)) if e.is_panic() => Err(Failure::Runtime(
                "the tokio runtime has no IO driver: build it with `enable_all()` (or `enable_io()`)",
            )),
            Ok(Err(e)) => Err(Failure::Connect(e.to_string())),
            Ok(Ok(Err(e))) => Err(Failure::Connect(e.to_string())),
            Ok(Ok(Ok(conn))) => Ok(conn),
        }
    }

    fn current(&self) -> Option<(u64, AsyncConn)> {
        self.conn
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Drops connection `generation` after an error that broke it; the next
    /// decision connects again.
    fn broken(&self, generation: u64) {
        let mut slot = self.conn.lock().unwrap_or_else(PoisonError::into_inner);
        if slot.as_ref().is_some_and(|(g, _)| *g == generation) {
            *slot = None;
        }
    }

    /// The script run that asks `ask` of `keys`.
    fn invocation(&self, keys: &Keys, ask: Ask, max_wait: Duration, want: u64) -> Run<'_> {
        let key = keys.of(&ask);
        let (script, mut args) = match ask {
            Ask::FixedWindow { limit, period_us } => (&self.fixed_window, vec![limit, period_us]),
            Ask::TokenBucket {
                interval_us,
                tolerance_us,
            } => (&self.token_bucket, vec![interval_us, tolerance_us]),
        };
        args.extend([super::micros(max_wait), want.clamp(1, MAX_ARG)]);
        script.run(key, args)
    }

    /// The script run that asks a retry budget at `key` for `ask`.
    fn budget_invocation(&self, key: &str, ask: &BudgetAsk) -> Run<'_> {
        self.budget.run(
            key.to_owned(),
            vec![
                ask.max.min(MAX_ARG),
                ask.initial.min(ask.max).min(MAX_ARG),
                ask.per_second.min(MAX_ARG),
                ask.deposit.min(ask.max).min(MAX_ARG),
                u64::from(ask.want),
            ],
        )
    }

    /// Asks Redis for one permit of the limiter whose keys are `keys`, due
    /// within `max_wait`, and for up to `want` due now.
    pub(crate) async fn decide(
        &self,
        keys: &Keys,
        ask: Ask,
        max_wait: Duration,
        want: u64,
    ) -> Result<Decision, Unavailable> {
        self.asked(self.invocation(keys, ask, max_wait, want), |reply| {
            decision(reply, want)
        })
        .await
    }

    /// [`decide`](Self::decide) on a connection of its own that needs no
    /// runtime, blocking the thread for the round trip.
    pub(crate) fn decide_blocking(
        &self,
        keys: &Keys,
        ask: Ask,
        max_wait: Duration,
        want: u64,
    ) -> Result<Decision, Unavailable> {
        self.asked_blocking(self.invocation(keys, ask, max_wait, want), |reply| {
            decision(reply, want)
        })
    }

    /// Asks the retry budget at `key` for what `ask` says.
    pub(crate) async fn budget(
        &self,
        key: &str,
        ask: &BudgetAsk,
    ) -> Result<BudgetAnswer, Unavailable> {
        self.asked(self.budget_invocation(key, ask), |reply| {
            budget_answer(reply, ask)
        })
        .await
    }

    /// [`budget`](Self::budget), blocking the thread for the round trip.
    pub(crate) fn budget_blocking(
        &self,
        key: &str,
        ask: &BudgetAsk,
    ) -> Result<BudgetAnswer, Unavailable> {
        self.asked_blocking(self.budget_invocation(key, ask), |reply| {
            budget_answer(reply, ask)
        })
    }

    /// Runs `run` through the breaker, and reads its reply with `read`:
    /// within `connect_timeout` for a connection if one must be opened,
    /// then `timeout` for the script.
    async fn asked<T>(
        &self,
        run: Run<'_>,
        read: impl FnOnce(&[i64]) -> Result<T, Failure>,
    ) -> Result<T, Unavailable> {
        if tokio::runtime::Handle::try_current().is_err() {
            return Err(self.failed(&Failure::Runtime(
                "the call runs outside a tokio runtime, which the Redis client needs",
            )));
        }
        let Ok(permit) = Permit::new(&self.breaker) else {
            return Err(self.unavailable());
        };
        let started = Instant::now();
        let outcome = self.run(run, read).await;
        self.ended(permit, started, outcome)
    }

    /// [`asked`](Self::asked) on a connection of its own that needs no
    /// runtime, blocking the thread for the round trip.
    fn asked_blocking<T>(
        &self,
        run: Run<'_>,
        read: impl FnOnce(&[i64]) -> Result<T, Failure>,
    ) -> Result<T, Unavailable> {
        let Ok(permit) = Permit::new(&self.breaker) else {
            return Err(self.unavailable());
        };
        let started = Instant::now();
        let outcome = self.run_blocking(run, read);
        self.ended(permit, started, outcome)
    }

    /// Records the outcome of a decision begun at `started` with the
    /// breaker and the log: a probe of the breaker that failed says why.
    fn ended<T>(
        &self,
        permit: Permit<'_>,
        started: Instant,
        outcome: Result<T, Failure>,
    ) -> Result<T, Unavailable> {
        match outcome {
            Ok(decision) => {
                permit.success();
                self.mark(BackendState::Up);
                if self.down.swap(false, Ordering::AcqRel) {
                    tracing::info!(
                        target: "resilient::backend",
                        url = %self.shown,
                        "the Redis backend answers again; specs decide there again"
                    );
                }
                Ok(decision)
            }
            Err(failure) => {
                let probe = permit.probe();
                permit.failure();
                let unavailable = self.failed(&failure);
                if probe {
                    let elapsed = started.elapsed();
                    let next = self.breaker.until_half_open().unwrap_or_default();
                    tracing::warn!(
                        target: "resilient::backend",
                        url = %self.shown,
                        reason = failure.reason(),
                        ?elapsed,
                        "the Redis backend's probe failed after {elapsed:?}: {}; specs that use it keep their `on_backend_failure`, the next probe in {next:?}",
                        self.said(&failure)
                    );
                }
                Err(unavailable)
            }
        }
    }

    pub(crate) fn unavailable(&self) -> Unavailable {
        Unavailable
    }

    /// What the log says of `failure`: without the URL's secrets, and
    /// with the setting to change when the server's kind is not the one
    /// `cluster` says.
    fn said(&self, failure: &Failure) -> String {
        let text = self.scrub(&failure.to_string());
        let hint = match failure {
            Failure::Redis(e) if !self.settings.cluster && cluster_reply(e) => {
                "; the server is a node of a Redis Cluster: set `cluster = true` in `resilient.redis` (feature `redis-cluster`)"
            }
            Failure::Connect(e) if self.settings.cluster && e.contains("cluster support disabled") => {
                "; the server is not a node of a Redis Cluster: set `cluster = false` in `resilient.redis`"
            }
            _ => "",
        };
        format!("{text}{hint}")
    }

    /// `text` without the secrets of the URL (a client's error may quote
    /// what it was given).
    fn scrub(&self, text: &str) -> String {
        self.settings.scrub(text)
    }

    /// Counts and, once per outage, logs `failure`.
    fn failed(&self, failure: &Failure) -> Unavailable {
        self.failures.fetch_add(1, Ordering::Relaxed);
        self.mark(BackendState::Down);
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
                "the Redis backend failed: {}; specs that use it apply their `on_backend_failure` until it answers again",
                self.said(failure)
            );
        }
        self.unavailable()
    }

    /// One decision on the multiplexed connection: its `timeout` starts
    /// once it has the connection (one that had to be opened had
    /// `connect_timeout` for that).
    async fn run<T>(
        &self,
        run: Run<'_>,
        read: impl FnOnce(&[i64]) -> Result<T, Failure>,
    ) -> Result<T, Failure> {
        let (generation, mut conn) = self.connection().await?;
        let query = Self::query(&mut conn, &run);
        let asked = catch_unwind(AssertUnwindSafe(move || {
            tokio::time::timeout(self.settings.timeout, query)
        }))
        .map_err(|_| Failure::Runtime(NO_TIMERS))?;
        match asked.await {
            Err(_) => Err(Failure::Timeout),
            Ok(Ok(reply)) => read(&reply),
            Ok(Err(e)) => {
                // A cluster's connection mends itself: it connects again to
                // the nodes it knows and reads their slots (a new one would
                // know only the seeds, which may be the node that died).
                if breaks(&e) && !self.settings.cluster {
                    self.broken(generation);
                }
                Err(failure(e))
            }
        }
    }

    /// `run`'s reply: by its hash, or by its source if the server does
    /// not have it.
    async fn query(conn: &mut AsyncConn, run: &Run<'_>) -> redis::RedisResult<Vec<i64>> {
        match run.evalsha().query_async(conn).await {
            Err(e) if no_script(&e) => run.eval().query_async(conn).await,
            reply => reply,
        }
    }

    /// One decision on a blocking connection: an idle one, or one opened
    /// within `connect_timeout`; then `timeout` for the script, both of
    /// its round trips (`EVALSHA`, and `EVAL` after a `NOSCRIPT`) within
    /// it.
    fn run_blocking<T>(
        &self,
        run: Run<'_>,
        read: impl FnOnce(&[i64]) -> Result<T, Failure>,
    ) -> Result<T, Failure> {
        let idle = self
            .blocking
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .pop();
        let mut conn = match idle {
            Some(conn) => conn,
            None => self.connect_blocking()?,
        };
        let deadline = Instant::now() + self.settings.timeout;
        let reply = match within(&mut conn, &run.evalsha(), deadline) {
            Err(e) if no_script(&e) => within(&mut conn, &run.eval(), deadline),
            reply => reply,
        };
        match reply {
            Ok(reply) => {
                let mut idle = self.blocking.lock().unwrap_or_else(PoisonError::into_inner);
                if idle.len() < IDLE_BLOCKING {
                    idle.push(conn);
                }
                read(&reply)
            }
            // A reply left unread after a timeout would answer the next
            // request: any error ends this connection.
            Err(e) => Err(failure(e)),
        }
    }
}

/// `cmd`'s reply on the blocking `conn`, by `deadline`.
fn within(
    conn: &mut BlockingConn,
    cmd: &redis::Cmd,
    deadline: Instant,
) -> redis::RedisResult<Vec<i64>> {
    let left = deadline.saturating_duration_since(Instant::now());
    if left.is_zero() {
        return Err(std::io::Error::new(std::io::ErrorKind::TimedOut, "no time left").into());
    }
    conn.set_timeout(left)?;
    cmd.query(conn)
}

/// Idle blocking connections kept per backend.
const IDLE_BLOCKING: usize = 4;

const NO_TIMERS: &str =
    "the tokio runtime has no time driver: build it with `enable_all()` (or `enable_time()`)";
