//! Retry settings: their keys, defaults and validation rules.

use std::time::Duration;

use crate::backend::{Backend, LocalShare, Policy};
use crate::settings::{Section, Value};
use crate::spec::Cause;

/// The settings of one retry spec, read from its section.
///
/// | key | default | rule |
/// |---|---|---|
/// | `enabled` | `true` | `false` makes the spec a pass-through (still validated) |
/// | `delay` | required | duration: the wait before the first retry |
/// | `attempts` | required | whole number ≥ 0: retries **after** the first call (`2` = at most 3 calls) |
/// | `delay_step` | `"0s"` | duration added to each further wait; not allowed with `backoff` |
/// | `backoff.type` | `"exponential"` | the only type; the `backoff` table needs `delay` > 0 (or a cause's own delay): with none, every wait is 0 |
/// | `backoff.multiplier` | `2.0` | number > 0 |
/// | `backoff.delay_max` | none | duration ≥ `delay`: cap on each wait (without it, waits grow until they saturate at the largest duration: set it, or an overall `timeout`) |
/// | `jitter.type` | `"none"` | `"none"` or `"full"` |
/// | `jitter.ratio` | `1.0` | number in 0..=1 (> 0: at 0 it has no effect): a wait is uniform in [computed·(1 − ratio), computed]; needs `type = "full"` |
/// | `timeout` | none | duration > 0: overall limit for all calls and waits |
/// | `max_hinted_delay` | none | duration > 0: cap on a wait that a failure asked for (a delay hint such as `Retry-After`; `backoff.delay_max` caps it too) |
/// | `retry_call_not_permitted` | `false` | `true` retries a call that a circuit breaker inside the retry rejected (by default the rejection ends the call at once) |
/// | `retry_budget.enabled` | `true` | the budget exists only if the section does |
/// | `retry_budget.ratio` | `0.1` | 0 or a number ≥ 0.000001: tokens returned by each successful call (counted in millionths of a token) |
/// | `retry_budget.tokens_max` | `100` | whole number ≥ 1 (at most 1000000000 with `backend = "redis"`) |
/// | `retry_budget.tokens_initial` | `10` (or `tokens_max` if smaller) | whole number ≤ `tokens_max` |
/// | `retry_budget.min_tokens_per_second` | `0.0` | 0 or a number ≥ 0.000001: steady refill (counted in millionths of a token) |
/// | `retry_budget.backend` | `"local"` | `"local"` (this process) or `"redis"` (one bucket for every replica, through the section `resilient.redis`) |
/// | `retry_budget.on_backend_failure` | `"deny"` | with `backend = "redis"`: `"deny"`, `"allow"` or `"local"`, what a retry gets while Redis makes no decision |
/// | `retry_budget.local_tokens_max` | required with `"local"` | whole number in 1..=`tokens_max`: the size of this process's own bucket, which decides while Redis makes no decision |
/// | `cause.<cause>.delay` | `delay` | duration (≤ `backoff.delay_max`): the base delay of a retry after a failure of this cause (`transient`, `throttled` or `timeout`: the failure's `Cause`), in place of `delay`; `delay_step`, `backoff` and `jitter` apply to it as to `delay` |
/// | `cause.<cause>.cost` | `1` | whole number in 1..=`retry_budget.tokens_max`: the budget tokens a retry after a failure of this cause takes; needs a local `retry_budget` |
/// | `throttle.k` | `2.0` | number > 1: adaptive throttling exists only if the `throttle` table does; a retry is refused with probability max(0, (requests − k·accepts) / (requests + 1)) over the trailing `window` |
/// | `throttle.window` | `"2m"` | duration > 0: the trailing window of the counts (kept in 16 buckets of `window / 16`) |
/// | `throttle.first_calls` | `false` | `true` refuses a call's first attempt too, with the same probability, before the body runs ([`Error::Throttled`](crate::Error::Throttled)); a refused first call counts in the window as a request |
/// | `attempt_header` | none | an HTTP header name (letters, digits and ``!#$%&'*+-.^_`|~``, kept lower-case): sent on each retry with the number of attempts before it (`1` on the first retry; absent on the first call), by the tower layers, the middleware and [`with_attempt_header`](crate::retry::with_attempt_header) |
/// | `share_outer_budget` | `false` | `true`: a retry of this spec made while its call runs inside another retry's call (a retried fn calling a retried fn) takes its token from the outer spec's `retry_budget`, so that one budget bounds the retries of both levels; outside another retry, or when the outer spec has no budget (a WARN says so), its own budget (if any) applies |
#[derive(Debug, Clone, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct RetrySettings {
    /// `false` turns the spec into a pass-through.
    pub enabled: bool,
    /// The wait before the first retry.
    #[cfg_attr(
        feature = "serde",
        serde(serialize_with = "crate::settings::ser::duration")
    )]
    pub delay: Duration,
    /// Retries after the first call: at most `attempts + 1` calls.
    pub attempts: u32,
    /// Added to each further wait (zero with a backoff, which rejects it).
    #[cfg_attr(
        feature = "serde",
        serde(serialize_with = "crate::settings::ser::duration")
    )]
    pub delay_step: Duration,
    /// Exponential backoff, if configured.
    #[cfg_attr(feature = "serde", serde(skip_serializing_if = "Option::is_none"))]
    pub backoff: Option<Backoff>,
    /// Random spread of each wait.
    pub jitter: Jitter,
    /// Overall limit for all calls and waits.
    #[cfg_attr(
        feature = "serde",
        serde(
            serialize_with = "crate::settings::ser::option_duration",
            skip_serializing_if = "Option::is_none"
        )
    )]
    pub timeout: Option<Duration>,
    /// The retry budget, if its section exists and is enabled.
    #[cfg_attr(
        feature = "serde",
        serde(rename = "retry_budget", skip_serializing_if = "Option::is_none")
    )]
    pub budget: Option<BudgetSettings>,
    /// Whether a circuit breaker's rejection from inside the retry is retried.
    pub retry_call_not_permitted: bool,
    /// Cap on a wait that a failure asked for (a delay hint).
    #[cfg_attr(
        feature = "serde",
        serde(
            serialize_with = "crate::settings::ser::option_duration",
            skip_serializing_if = "Option::is_none"
        )
    )]
    pub max_hinted_delay: Option<Duration>,
    /// Client-side adaptive throttling of retries, if its table exists.
    #[cfg_attr(feature = "serde", serde(skip_serializing_if = "Option::is_none"))]
    pub throttle: Option<ThrottleSettings>,
    /// The header that carries, on each retry, the number of attempts made
    /// before it (lower-case); none by default.
    #[cfg_attr(feature = "serde", serde(skip_serializing_if = "Option::is_none"))]
    pub attempt_header: Option<String>,
    /// Whether a retry made inside another retry's call takes its token
    /// from the outer spec's budget (shown only when set).
    #[cfg_attr(feature = "serde", serde(skip_serializing_if = "std::ops::Not::not"))]
    pub share_outer_budget: bool,
    /// The delay and budget cost of the retries after failures of each
    /// cause (the `cause` table): empty by default.
    #[cfg_attr(
        feature = "serde",
        serde(rename = "cause", skip_serializing_if = "Causes::is_empty")
    )]
    pub causes: Causes,
}

/// What a retry spec's `cause.<cause>` tables say, by [`Cause`]: a cause
/// without a table retries as the spec's own keys say.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct Causes {
    /// `cause.transient`.
    #[cfg_attr(feature = "serde", serde(skip_serializing_if = "Option::is_none"))]
    pub transient: Option<CauseSettings>,
    /// `cause.throttled`.
    #[cfg_attr(feature = "serde", serde(skip_serializing_if = "Option::is_none"))]
    pub throttled: Option<CauseSettings>,
    /// `cause.timeout`.
    #[cfg_attr(feature = "serde", serde(skip_serializing_if = "Option::is_none"))]
    pub timeout: Option<CauseSettings>,
}

impl Causes {
    /// The table of `cause`, if the spec has one.
    pub fn get(&self, cause: Cause) -> Option<&CauseSettings> {
        match cause {
            Cause::Transient => self.transient.as_ref(),
            Cause::Throttled => self.throttled.as_ref(),
            Cause::Timeout => self.timeout.as_ref(),
        }
    }

    fn slot(&mut self, cause: Cause) -> &mut Option<CauseSettings> {
        match cause {
            Cause::Transient => &mut self.transient,
            Cause::Throttled => &mut self.throttled,
            Cause::Timeout => &mut self.timeout,
        }
    }

    /// No cause has a table.
    pub fn is_empty(&self) -> bool {
        Cause::ALL.iter().all(|c| self.get(*c).is_none())
    }
}

/// One `cause.<cause>` table of a retry spec: at least one key is set.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct CauseSettings {
    /// The base delay of a retry after a failure of this cause, in place of
    /// the spec's `delay`; `None`: the spec's `delay`.
    #[cfg_attr(
        feature = "serde",
        serde(
            serialize_with = "crate::settings::ser::option_duration",
            skip_serializing_if = "Option::is_none"
        )
    )]
    pub delay: Option<Duration>,
    /// The budget tokens such a retry takes; `None`: one.
    #[cfg_attr(feature = "serde", serde(skip_serializing_if = "Option::is_none"))]
    pub cost: Option<u32>,
}

/// Client-side adaptive throttling (Google SRE book, "Handling Overload"):
/// over a trailing `window`, every attempt counts as a request, and an
/// attempt the spec's classification does not retry (a success, or a
/// failure it ignores) as an accept. A retry is then refused with
/// probability `max(0, (requests − k·accepts) / (requests + 1))`: the
/// attempts that reach a dependency stay near `k` times those it accepts.
/// The first call of each call is throttled only with `first_calls = true`.
#[derive(Debug, Clone, Copy, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct ThrottleSettings {
    /// How many requests per accept pass before retries are refused, > 1.
    pub k: f64,
    /// The trailing window of the counts.
    #[cfg_attr(
        feature = "serde",
        serde(serialize_with = "crate::settings::ser::duration")
    )]
    pub window: Duration,
    /// Whether a call's first attempt is refused too, with the same
    /// probability (the SRE book's client-side throttling of requests):
    /// refused, the call ends with [`Error::Throttled`](crate::Error::Throttled)
    /// before the body runs, and counts in the window as a request that was
    /// not accepted. `false` (the default) refuses retries only.
    pub first_calls: bool,
}

/// Exponential backoff: the `k`-th retry waits `delay · multiplier^(k−1)`,
/// capped at `delay_max`.
#[derive(Debug, Clone, Copy, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct Backoff {
    /// Growth factor of each wait, > 0.
    pub multiplier: f64,
    /// Cap on each wait.
    #[cfg_attr(
        feature = "serde",
        serde(
            serialize_with = "crate::settings::ser::option_duration",
            skip_serializing_if = "Option::is_none"
        )
    )]
    pub delay_max: Option<Duration>,
}

/// Random spread of each wait.
#[derive(Debug, Clone, Copy, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct Jitter {
    /// Whether jitter applies (`type = "full"`).
    #[cfg_attr(
        feature = "serde",
        serde(rename = "type", serialize_with = "jitter_type")
    )]
    pub full: bool,
    /// Fraction of the computed wait that is random, in 0..=1.
    pub ratio: f64,
}

/// A token bucket that limits retries across all calls of a spec.
#[derive(Debug, Clone, Copy, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct BudgetSettings {
    /// Tokens returned to the bucket by each successful call.
    pub ratio: f64,
    /// The bucket's size.
    pub tokens_max: u32,
    /// Tokens in the bucket at startup.
    pub tokens_initial: u32,
    /// Tokens added per second whatever the calls do.
    pub min_tokens_per_second: f64,
    /// Where the tokens are kept (a retry budget's only: a hedging budget
    /// is always local).
    pub backend: Backend,
    /// What a retry gets while a shared backend makes no decision.
    pub on_backend_failure: OnBudgetBackendFailure,
}

/// What a retry gets while the shared backend of its budget cannot decide
/// (it is down, slow past `timeout`, or answers what is not a decision).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[cfg_attr(
    feature = "serde",
    derive(serde::Serialize),
    serde(tag = "policy", rename_all = "snake_case")
)]
pub enum OnBudgetBackendFailure {
    /// No retry: the call ends with its failure, as with an empty bucket.
    #[default]
    Deny,
    /// The retry goes ahead without a token.
    Allow,
    /// A bucket of this process decides, of `tokens_max` tokens and the
    /// budget's other settings; this process's successes keep it filled.
    Local {
        /// The size of this process's bucket.
        tokens_max: u32,
    },
}

impl RetrySettings {
    /// Reads and validates a retry section, recording every problem found.
    /// `None` when there was at least one.
    pub fn read(s: &mut Section<'_>) -> Option<Self> {
        s.alias("max_attempts", "attempts", attempts_note);
        s.alias("max_retries", "attempts", |_| {
            "the same count, the retries after the first call, under this project's name".into()
        });
        s.alias("retries", "attempts", |_| {
            "the same count, the retries after the first call, under this project's name".into()
        });
        s.alias("wait_duration", "delay", |_| {
            "`delay` is the wait before the first retry; without `delay_step` or `backoff` every wait is `delay`, as with Resilience4j's `wait_duration`".into()
        });
        s.alias("max_delay", "backoff.delay_max", |_| {
            "the cap on each wait is `delay_max` in the `backoff` table".into()
        });
        s.alias(
            "exponential_backoff_multiplier",
            "backoff.multiplier",
            |_| "the growth of the waits is `multiplier` in the `backoff` table".into(),
        );
        let enabled = s.bool("enabled", true);
        let delay = s.duration("delay", true).flatten();
        let attempts = s.int("attempts", None, 0, u64::from(u32::MAX));
        let delay_step = s
            .duration("delay_step", false)
            .unwrap_or(Some(Duration::ZERO));
        // Keys of the nested tables, written one level too high.
        s.misplaced("multiplier", "backoff");
        s.misplaced("delay_max", "backoff");
        s.misplaced("tokens_max", "retry_budget");
        s.misplaced("tokens_initial", "retry_budget");
        s.misplaced("min_tokens_per_second", "retry_budget");
        if s.has("delay_step") && s.has("backoff") {
            // With backoff, each wait is `delay·multiplier^(k−1)`: a step
            // would be accepted and mean nothing.
            s.problem(
                "delay_step",
                "cannot be combined with `backoff`, whose waits grow by `backoff.multiplier`; remove `delay_step` (for waits that grow by a fixed step), or remove `backoff`",
                None,
            );
        }
        let delay_written = s.written("delay");
        let backoff = s.table("backoff", |b| {
            let _type = b.choice("type", &["exponential"], "exponential");
            let multiplier = b.float("multiplier", Some(2.0), "must be a number > 0", |m| m > 0.0);
            let delay_max = b.duration("delay_max", false);
            if let (Some(Some(max)), Some(delay)) = (delay_max, delay) {
                if max < delay {
                    b.invalid(
                        "delay_max",
                        format!(
                            "must be ≥ `delay` ({}) or the cap would shorten even the first wait",
                            delay_written
                                .unwrap_or_else(|| humantime::format_duration(delay).to_string())
                        ),
                    );
                    return None;
                }
            }
            Some(Backoff {
                multiplier: multiplier?,
                delay_max: match delay_max {
                    None => None,
                    Some(d) => Some(d?),
                },
            })
        });
        let jitter = s
            .table("jitter", |j| {
                let typed = j.has("type");
                let kind = j.choice("type", &["none", "full"], "none");
                if !typed && j.has("ratio") {
                    j.problem(
                        "ratio",
                        "has no effect without `type = \"full\"` (jitter is off by default); add `type = \"full\"`, or remove `ratio`",
                        None,
                    );
                    return None;
                }
                let ratio = j.float("ratio", Some(1.0), "must be a number in 0..=1", |r| {
                    (0.0..=1.0).contains(&r)
                });
                if kind == Some("full") && ratio == Some(0.0) {
                    j.invalid(
                        "ratio",
                        "has no effect at 0: a wait drawn in [computed·(1 − ratio), computed] is the computed wait; set a ratio > 0 (1 draws from the whole wait), or remove the `jitter` table",
                    );
                    return None;
                }
                Some(Jitter {
                    full: kind? == "full",
                    ratio: ratio?,
                })
            })
            .unwrap_or(Some(Jitter {
                full: false,
                ratio: 1.0,
            }));
        let retry_call_not_permitted = s.bool("retry_call_not_permitted", false);
        let timeout = match s.duration("timeout", false) {
            Some(Some(d)) if d.is_zero() => {
                s.invalid("timeout", "must be > 0 (leave it out for no overall limit)");
                Some(None)
            }
            other => other,
        };
        let max_hinted_delay = match s.duration("max_hinted_delay", false) {
            Some(Some(d)) if d.is_zero() => {
                s.invalid(
                    "max_hinted_delay",
                    "must be > 0 (a zero cap would retry at once whatever the failure asked for; leave it out to cap hints by `backoff.delay_max` only)",
                );
                Some(None)
            }
            other => other,
        };
        let budget = s.table("retry_budget", |b| read_budget(b, true));
        let limits = CauseLimits {
            delay_max: backoff.flatten().and_then(|b| b.delay_max),
            budget: budget.flatten().flatten(),
        };
        let causes = s
            .table("cause", |c| read_causes(c, &limits))
            .unwrap_or(Some(Causes::default()));
        // Every wait is `delay` · multiplier^k: with no delay, none grows,
        // unless a cause's own delay does.
        let cause_delays = causes.as_ref().is_some_and(|c| {
            Cause::ALL.iter().any(|k| {
                c.get(*k)
                    .is_some_and(|t| t.delay.is_some_and(|d| !d.is_zero()))
            })
        });
        if delay.is_some_and(|d| d.is_zero()) && matches!(backoff, Some(Some(_))) && !cause_delays {
            s.problem(
                "backoff",
                "has no effect with `delay` = 0: every wait is `delay` × `multiplier`^k, 0; set `delay` > 0, or remove `backoff`",
                None,
            );
        }
        s.misplaced("k", "throttle");
        s.misplaced("window", "throttle");
        s.misplaced("first_calls", "throttle");
        let throttle = s.table("throttle", read_throttle);
        let attempt_header = read_attempt_header(s);
        let share_outer_budget = s.bool("share_outer_budget", false);
        Some(Self {
            enabled: enabled?,
            delay: delay?,
            attempts: u32::try_from(attempts?).ok()?,
            delay_step: delay_step?,
            backoff: match backoff {
                None => None,
                Some(b) => Some(b?),
            },
            jitter: jitter?,
            timeout: match timeout {
                None => None,
                Some(t) => Some(t?),
            },
            budget: match budget {
                None => None,
                Some(b) => b?,
            },
            retry_call_not_permitted: retry_call_not_permitted?,
            max_hinted_delay: match max_hinted_delay {
                None => None,
                Some(d) => Some(d?),
            },
            throttle: match throttle {
                None => None,
                Some(t) => Some(t?),
            },
            attempt_header: attempt_header?,
            share_outer_budget: share_outer_budget?,
            causes: causes?,
        })
    }

    /// The wait before retry number `retry` (1 for the wait before the second
    /// call), before jitter. Never overflows: it saturates at the backoff's
    /// `delay_max`, or at [`Duration::MAX`].
    ///
    /// This is the wait after a failure of the default cause,
    /// [`Cause::Transient`]: from `cause.transient.delay` if the spec sets
    /// it, else from `delay` (see [`cause_base_delay`](Self::cause_base_delay)).
    pub fn base_delay(&self, retry: u32) -> Duration {
        self.cause_base_delay(Cause::Transient, retry)
    }

    /// The wait before retry number `retry` after a failure of `cause`,
    /// before jitter: as [`base_delay`](Self::base_delay), from the delay
    /// of the cause's table if it sets one.
    pub fn cause_base_delay(&self, cause: Cause, retry: u32) -> Duration {
        self.base_delay_from(self.cause_delay(cause), retry)
    }

    /// The base delay of a retry after a failure of `cause`.
    fn cause_delay(&self, cause: Cause) -> Duration {
        self.causes
            .get(cause)
            .and_then(|c| c.delay)
            .unwrap_or(self.delay)
    }

    /// [`base_delay`](Self::base_delay) with `delay` as the first wait.
    fn base_delay_from(&self, delay: Duration, retry: u32) -> Duration {
        let k = retry.saturating_sub(1);
        if delay.is_zero() && (self.backoff.is_some() || self.delay_step.is_zero()) {
            return Duration::ZERO;
        }
        match self.backoff {
            None => self
                .delay_step
                .checked_mul(k)
                .and_then(|step| delay.checked_add(step))
                .unwrap_or(Duration::MAX),
            Some(Backoff {
                multiplier,
                delay_max,
            }) => {
                let cap = delay_max.unwrap_or(Duration::MAX);
                if k == 0 {
                    return delay.min(cap);
                }
                let secs = delay.as_secs_f64() * multiplier.powf(f64::from(k));
                match Duration::try_from_secs_f64(secs) {
                    Ok(d) => d.min(cap),
                    // Too large (or not finite): the cap is the answer.
                    Err(_) => cap,
                }
            }
        }
    }

    /// The wait for a failure that asked for `hint`: the hint, capped by
    /// `backoff.delay_max` and `max_hinted_delay`. No jitter: the hint is
    /// the dependency's own word.
    pub fn hinted_delay(&self, hint: Duration) -> Duration {
        let delay_max = self.backoff.and_then(|b| b.delay_max);
        [delay_max, self.max_hinted_delay]
            .into_iter()
            .flatten()
            .fold(hint, Duration::min)
    }

    /// The wait before retry number `retry`, jitter applied. `random` maps a
    /// bound to a uniform value in `0..=bound`. As
    /// [`base_delay`](Self::base_delay), the wait after a failure of the
    /// default cause.
    pub(crate) fn delay(&self, retry: u32, random: impl FnOnce(u128) -> u128) -> Duration {
        self.jittered(self.base_delay(retry), random)
    }

    /// The wait before retry number `retry` after a failure of `cause`,
    /// jitter applied (see [`delay`](Self::delay)).
    pub(crate) fn cause_delay_jittered(
        &self,
        cause: Cause,
        retry: u32,
        random: impl FnOnce(u128) -> u128,
    ) -> Duration {
        self.jittered(self.cause_base_delay(cause, retry), random)
    }

    /// `computed` with the spec's jitter applied.
    fn jittered(&self, computed: Duration, random: impl FnOnce(u128) -> u128) -> Duration {
        if !self.jitter.full || self.jitter.ratio <= 0.0 {
            return computed;
        }
        let nanos = computed.as_nanos();
        // `as` saturates for floats, and ratio ≤ 1 keeps the bound ≤ nanos.
        let bound = ((nanos as f64) * self.jitter.ratio) as u128;
        let bound = bound.min(nanos);
        if bound == 0 {
            return computed;
        }
        let jittered = nanos - bound + random(bound).min(bound);
        from_nanos(jittered)
    }
}

/// `jitter.type` as the config writes it.
#[cfg(feature = "serde")]
fn jitter_type<S: serde::Serializer>(full: &bool, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(if *full { "full" } else { "none" })
}

fn from_nanos(nanos: u128) -> Duration {
    let secs = nanos / 1_000_000_000;
    match u64::try_from(secs) {
        Ok(secs) => Duration::new(secs, (nanos % 1_000_000_000) as u32),
        Err(_) => Duration::MAX,
    }
}

/// Reads `attempt_header`: `Some(None)` when absent, `None` after a problem.
/// A name an HTTP request cannot carry is reported here, at startup, rather
/// than found missing at a server.
fn read_attempt_header(s: &mut Section<'_>) -> Option<Option<String>> {
    if !s.has("attempt_header") {
        return Some(None);
    }
    let name = s.text("attempt_header", None)?;
    if name.is_empty() {
        s.invalid(
            "attempt_header",
            "must be a header name, such as \"x-retry-attempt\" (leave it out to send no header)",
        );
        return None;
    }
    if let Some(c) = name.chars().find(|&c| !is_token_char(c)) {
        s.invalid(
            "attempt_header",
            format!(
                "must be an HTTP header name: letters, digits and !#$%&'*+-.^_`|~ only, and {c:?} is none of them (for example \"x-retry-attempt\")"
            ),
        );
        return None;
    }
    Some(Some(name.to_ascii_lowercase()))
}

/// A character of an HTTP token (RFC 9110, 5.6.2), which a header name is.
fn is_token_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || "!#$%&'*+-.^_`|~".contains(c)
}

/// What a `cause.<cause>` table is checked against: the settings read
/// before it.
struct CauseLimits {
    delay_max: Option<Duration>,
    budget: Option<BudgetSettings>,
}

/// Reads the `cause` table of a retry spec: one table per [`Cause`], by its
/// name (a name that is none of them is an unknown key, with the nearest
/// suggested).
fn read_causes(c: &mut Section<'_>, limits: &CauseLimits) -> Option<Causes> {
    // `cause.delay`: a key of a cause's table, written one level too high.
    for key in ["delay", "cost"] {
        if c.present(key) {
            c.invalid(
                key,
                format!("belongs in the table of a cause: `cause.transient.{key}`, `cause.throttled.{key}` or `cause.timeout.{key}`"),
            );
        }
    }
    let mut causes = Causes::default();
    let mut ok = true;
    for cause in Cause::ALL {
        match c.table(cause.label(), |t| read_cause(t, limits)) {
            None => {}
            Some(Some(t)) if t.delay.is_none() && t.cost.is_none() => {
                // An empty table: a key misspelt in it is reported as
                // unknown already.
                if matches!(c.value(cause.label()), Some(Value::Table(keys)) if keys.is_empty()) {
                    c.invalid(
                        cause.label(),
                        "has no effect: a cause's table sets `delay` (the base delay of its retries) or `cost` (the budget tokens each takes); set one, or remove the table",
                    );
                }
                ok = false;
            }
            Some(Some(t)) => *causes.slot(cause) = Some(t),
            Some(None) => ok = false,
        }
    }
    ok.then_some(causes)
}

/// Reads one `cause.<cause>` table.
fn read_cause(t: &mut Section<'_>, limits: &CauseLimits) -> Option<CauseSettings> {
    let delay = t.duration("delay", false);
    // Absent: 0, the spec's one token (told apart by `has` below).
    let cost = t.int("cost", Some(0), 1, u64::from(u32::MAX));
    let delay = match delay {
        None => None,
        Some(Some(d)) => {
            if let Some(max) = limits.delay_max {
                if d > max {
                    t.invalid(
                        "delay",
                        format!(
                            "must be ≤ `backoff.delay_max` ({}), which caps every wait",
                            humantime::format_duration(max)
                        ),
                    );
                    return None;
                }
            }
            Some(d)
        }
        Some(None) => return None,
    };
    let cost = if t.has("cost") {
        let cost = u32::try_from(cost?).ok()?;
        match limits.budget {
            Some(b) if b.backend == Backend::Redis && cost != 1 => {
                t.invalid(
                    "cost",
                    "must be 1 with `retry_budget.backend = \"redis\"`: a shared bucket gives one token per retry; remove `cost`, or keep the budget local",
                );
                return None;
            }
            Some(b) if cost > b.tokens_max => {
                t.invalid(
                    "cost",
                    format!(
                        "must be ≤ `retry_budget.tokens_max` ({}): a bucket never holds more, and every retry of this cause would be refused",
                        b.tokens_max
                    ),
                );
                return None;
            }
            _ => {}
        }
        Some(cost)
    } else {
        None
    };
    Some(CauseSettings { delay, cost })
}

/// Reads the `throttle` table of a retry spec.
fn read_throttle(t: &mut Section<'_>) -> Option<ThrottleSettings> {
    let k = t.float(
        "k",
        Some(2.0),
        "must be a number > 1 (the SRE book suggests 2: attempts reach the dependency at up to twice the rate it accepts them)",
        |k| k > 1.0,
    );
    let window = match t.duration("window", false) {
        None => Some(Duration::from_secs(120)),
        Some(Some(d)) if d.is_zero() => {
            t.invalid("window", "must be > 0 (the trailing window the counts are kept over; the SRE book uses \"2m\")");
            None
        }
        Some(d) => d,
    };
    let first_calls = t.bool("first_calls", false);
    Some(ThrottleSettings {
        k: k?,
        window: window?,
        first_calls: first_calls?,
    })
}

/// How `attempts` differs from the `max_attempts` of Resilience4j and Spring
/// Retry, with the value the user wrote when it is a count of calls.
fn attempts_note(found: &Value) -> String {
    let calls = match found {
        Value::Int(n) => Some(*n),
        Value::Str(s) => s.trim().parse::<i128>().ok(),
        _ => None,
    };
    let (calls, retries) = match calls {
        Some(n) if n >= 1 => (n, n - 1),
        _ => (3, 2),
    };
    format!(
        "`attempts` counts the retries after the first call, where `max_attempts` (Resilience4j, Spring Retry) counts every call, the first included: `max_attempts = {calls}` is `attempts = {retries}`"
    )
}

/// Reads a budget table (`retry_budget`, and `hedging_budget` of a hedging
/// spec: one bucket, one set of keys and rules; `shared` reads the keys of
/// a shared backend too, which only a retry budget has): `Some(None)` when
/// it says `enabled = false`.
pub(crate) fn read_budget(b: &mut Section<'_>, shared: bool) -> Option<Option<BudgetSettings>> {
    b.alias("max_tokens", "tokens_max", |_| {
        "the same bucket size under this project's name".into()
    });
    b.alias("initial_tokens", "tokens_initial", |_| {
        "the same start under this project's name".into()
    });
    let enabled = b.bool("enabled", true);
    let ratio = b.float("ratio", Some(0.1), "must be a number ≥ 0", |r| r >= 0.0);
    let max = b.int("tokens_max", Some(100), 1, u64::from(u32::MAX));
    // The default start is 10 tokens, or a full bucket if it is smaller.
    let default_initial = max.map_or(10, |max| max.min(10));
    let initial = b.int(
        "tokens_initial",
        Some(default_initial),
        0,
        u64::from(u32::MAX),
    );
    let per_second = b.float(
        "min_tokens_per_second",
        Some(0.0),
        "must be a number ≥ 0",
        |r| r >= 0.0,
    );
    // Counted in millionths of a token: a smaller positive number would
    // round to none, and refill nothing.
    for (key, value) in [("ratio", ratio), ("min_tokens_per_second", per_second)] {
        if value.is_some_and(|x| x > 0.0 && super::budget::scaled(x) == 0) {
            b.invalid(
                key,
                "rounds to 0: the budget counts in millionths of a token, so it would refill nothing; write at least 0.000001, or 0",
            );
            return None;
        }
    }
    if let (Some(max), Some(initial)) = (max, initial) {
        if initial > max {
            b.invalid("tokens_initial", format!("must be ≤ `tokens_max` ({max})"));
            return None;
        }
    }
    let (backend, on_backend_failure) = if shared {
        read_budget_backend(b, max)
    } else {
        (Some(Backend::Local), Some(OnBudgetBackendFailure::Deny))
    };
    let settings = BudgetSettings {
        ratio: ratio?,
        tokens_max: u32::try_from(max?).ok()?,
        tokens_initial: u32::try_from(initial?).ok()?,
        min_tokens_per_second: per_second?,
        backend: backend?,
        on_backend_failure: on_backend_failure?,
    };
    Some(enabled?.then_some(settings))
}

/// The largest shared bucket: its millionths of a token, and their sum with
/// a deposit, stay exact in the doubles of Redis's Lua.
const SHARED_TOKENS_MAX: u64 = 1_000_000_000;

/// Reads a retry budget's `backend`, `on_backend_failure` and
/// `local_tokens_max`; `max` is `tokens_max`, if valid.
fn read_budget_backend(
    b: &mut Section<'_>,
    max: Option<u64>,
) -> (Option<Backend>, Option<OnBudgetBackendFailure>) {
    let share = LocalShare {
        key: "local_tokens_max",
        most: u64::from(u32::MAX),
        of: "tokens_max",
        is: "the size of this process's own bucket, which decides while Redis makes no decision",
        shared: "bucket",
        local: "budget",
        redis_only: &[],
    };
    let (backend, policy) = crate::backend::read_backend(b, &share, max);
    if let (Some(Backend::Redis), Some(max)) = (backend, max) {
        if max > SHARED_TOKENS_MAX {
            b.invalid(
                "tokens_max",
                format!("must be at most {SHARED_TOKENS_MAX} with `backend = \"redis\"`: Redis counts millionths of a token in the doubles of its scripts"),
            );
            return (None, None);
        }
    }
    let policy = policy.map(|p| match p {
        Policy::Deny => OnBudgetBackendFailure::Deny,
        Policy::Allow => OnBudgetBackendFailure::Allow,
        Policy::Local(tokens_max) => OnBudgetBackendFailure::Local { tokens_max },
    });
    (backend, policy)
}
