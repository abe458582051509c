//! Circuit breaker settings: their keys, defaults and validation rules.

use std::time::Duration;

use crate::settings::{Section, Value};

/// The settings of one circuit breaker spec, read from its section.
///
/// | key | default | rule |
/// |---|---|---|
/// | `enabled` | `true` | `false` makes the spec a pass-through (still validated) |
/// | `type` | `"ring_buffer"` | `"ring_buffer"`, `"striped_approx"`, `"fixed_window"` or `"time_based"` |
/// | `failure_rate_threshold` | required | whole number in 1..=100: the failure rate, in percent, that opens the breaker |
/// | `minimum_required_calls` | required | whole number ≥ 1, ≤ `count_based.window_size`: calls in the window before the rate counts |
/// | `wait_duration_in_open_state` | required | duration in 0..=1461d: how long an open breaker rejects calls before it lets probes through |
/// | `permitted_calls_in_half_open_state` | required | whole number in 1..=65535: probes in half-open; all must succeed to close |
/// | `count_based.window_size` | required unless `time_based` | whole number ≥ 1: the last calls counted (at most 2097151 for `fixed_window`, 4194304 for `ring_buffer`, `stripes`·65535 for `striped_approx`) |
/// | `count_based.striped_approx.stripes` | `16` | whole number in 1..=64: independent parts of the window, to spread contention |
/// | `time_based.window_duration` | required for `time_based` | duration > 0: the time the window covers |
/// | `time_based.sample_count` | `16` | whole number in 1..=1024: buckets the window is cut into |
/// | `time_based.counter_stripes` | `16` | whole number in 1..=64: counters per bucket, to spread contention |
/// | `slow_call.duration_threshold` | none | duration > 0: a call slower than this is slow |
/// | `slow_call.rate_threshold` | required with `slow_call` | whole number in 1..=100: the slow-call rate, in percent, that opens the breaker |
/// | `max_wait_in_half_open` | none | duration in (0, 1461d]: a half-open breaker whose probes have not all completed by then opens again |
#[derive(Debug, Clone, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct CircuitBreakerSettings {
    /// `false` turns the spec into a pass-through.
    pub enabled: bool,
    /// What the breaker counts, and over which window.
    #[cfg_attr(feature = "serde", serde(flatten))]
    pub window: WindowSettings,
    /// The failure rate, in percent, that opens the breaker.
    pub failure_rate_threshold: u8,
    /// Calls the window must hold before a rate counts.
    pub minimum_required_calls: u32,
    /// How long an open breaker rejects calls.
    #[cfg_attr(
        feature = "serde",
        serde(serialize_with = "crate::settings::ser::duration")
    )]
    pub wait_duration_in_open_state: Duration,
    /// Probes admitted in half-open.
    pub permitted_calls_in_half_open_state: u16,
    /// Slow-call detection, if configured.
    #[cfg_attr(feature = "serde", serde(skip_serializing_if = "Option::is_none"))]
    pub slow_call: Option<SlowCall>,
    /// How long half-open may wait for its probes.
    #[cfg_attr(
        feature = "serde",
        serde(
            serialize_with = "crate::settings::ser::option_duration",
            skip_serializing_if = "Option::is_none"
        )
    )]
    pub max_wait_in_half_open: Option<Duration>,
}

/// The window a breaker counts outcomes in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(
    feature = "serde",
    derive(serde::Serialize),
    serde(tag = "type", rename_all = "snake_case")
)]
pub enum WindowSettings {
    /// The last `window_size` calls, in `stripes` independent parts.
    StripedApprox {
        /// Calls counted.
        window_size: u32,
        /// Independent parts of the window.
        stripes: u32,
    },
    /// Tumbling windows of `window_size` calls: counts restart when full.
    FixedWindow {
        /// Calls per window.
        window_size: u32,
    },
    /// Exactly the last `window_size` calls.
    RingBuffer {
        /// Calls counted.
        window_size: u32,
    },
    /// The calls of the last `window_duration`, in `sample_count` buckets.
    TimeBased {
        /// The time covered.
        #[cfg_attr(
            feature = "serde",
            serde(serialize_with = "crate::settings::ser::duration")
        )]
        window_duration: Duration,
        /// Buckets.
        sample_count: u32,
        /// Counters per bucket.
        counter_stripes: u32,
    },
}

impl WindowSettings {
    /// The bytes a breaker's window holds, about: one word per call of a
    /// count-based window with slots, one 64-byte counter per bucket and
    /// stripe of a time-based one, a few words for a fixed window.
    pub(crate) fn bytes(&self) -> u64 {
        match *self {
            WindowSettings::RingBuffer { window_size }
            | WindowSettings::StripedApprox { window_size, .. } => u64::from(window_size) * 8,
            WindowSettings::FixedWindow { .. } => 64,
            WindowSettings::TimeBased {
                sample_count,
                counter_stripes,
                ..
            } => {
                u64::from(sample_count) * u64::from(counter_stripes.max(1).next_power_of_two()) * 64
            }
        }
    }
}

/// Slow-call detection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct SlowCall {
    /// A call slower than this is slow.
    #[cfg_attr(
        feature = "serde",
        serde(serialize_with = "crate::settings::ser::duration")
    )]
    pub duration_threshold: Duration,
    /// The slow-call rate, in percent, that opens the breaker.
    pub rate_threshold: u8,
}

/// Window sizes the packed counters can hold.
pub(crate) const FIXED_WINDOW_MAX: u64 = (1 << 21) - 1;
pub(crate) const RING_BUFFER_MAX: u64 = 1 << 22;
const STRIPE_MAX: u64 = 65_535;

impl CircuitBreakerSettings {
    /// Reads and validates a circuit breaker section, recording every problem
    /// found. `None` when there was at least one.
    pub fn read(s: &mut Section<'_>) -> Option<Self> {
        s.alias("minimum_number_of_calls", "minimum_required_calls", |_| {
            "the same minimum under this project's name".into()
        });
        s.alias("sliding_window_size", "count_based.window_size", |_| {
            "a count-based window's size is `window_size` in the `count_based` table; a time-based window's length is `time_based.window_duration`, a duration, not a number of seconds".into()
        });
        s.alias("sliding_window_type", "type", |_| {
            "the window is chosen with `type`: `\"ring_buffer\"` for Resilience4j's COUNT_BASED, `\"time_based\"` for its TIME_BASED".into()
        });
        s.alias("failure_ratio", "failure_rate_threshold", ratio_note);
        s.alias("break_duration", "wait_duration_in_open_state", |_| {
            "the same wait under this project's name".into()
        });
        s.alias(
            "permitted_number_of_calls_in_half_open_state",
            "permitted_calls_in_half_open_state",
            |_| "the same number of probes under this project's name".into(),
        );
        s.alias(
            "slow_call_duration_threshold",
            "slow_call.duration_threshold",
            |_| "the slow-call settings are in the `slow_call` table".into(),
        );
        s.alias(
            "slow_call_rate_threshold",
            "slow_call.rate_threshold",
            |_| "the slow-call settings are in the `slow_call` table".into(),
        );
        s.alias("max_wait_duration_in_half_open_state", "max_wait_in_half_open", |_| {
            "the same deadline; where Resilience4j's `0` means no deadline, leave `max_wait_in_half_open` out".into()
        });
        let enabled = s.bool("enabled", true);
        let kind = s.choice(
            "type",
            &[
                "striped_approx",
                "fixed_window",
                "ring_buffer",
                "time_based",
            ],
            "ring_buffer",
        );
        let threshold = s.percent("failure_rate_threshold");
        let minimum = s.int("minimum_required_calls", None, 1, u64::from(u32::MAX));
        let wait = s
            .duration("wait_duration_in_open_state", true)
            .flatten()
            .and_then(|d| within_clock(s, "wait_duration_in_open_state", d));
        let permitted = s.int("permitted_calls_in_half_open_state", None, 1, 65_535);

        let window = match kind {
            // The type itself is wrong (reported): leave its tables alone.
            None => {
                s.has("count_based");
                s.has("time_based");
                None
            }
            Some("time_based") => {
                unused(s, "count_based", "time_based");
                match s.table("time_based", read_time_window) {
                    Some(window) => window,
                    None => required(s, "time_based", "time_based", "window_duration"),
                }
            }
            Some(kind) => {
                unused(s, "time_based", kind);
                let with_stripes = kind == "striped_approx";
                match s.table("count_based", |c| {
                    read_count_window(c, kind, with_stripes, minimum)
                }) {
                    Some(window) => window,
                    None => required(s, "count_based", kind, "window_size"),
                }
            }
        };

        let slow_call = s.table("slow_call", |sc| {
            let threshold = match sc.duration("duration_threshold", true) {
                Some(Some(d)) if d.is_zero() => {
                    sc.invalid("duration_threshold", "must be > 0");
                    None
                }
                other => other.flatten(),
            };
            let rate = sc.percent("rate_threshold");
            Some(SlowCall {
                duration_threshold: threshold?,
                rate_threshold: u8::try_from(rate?).ok()?,
            })
        });
        let max_wait = match s.duration("max_wait_in_half_open", false) {
            Some(Some(d)) if d.is_zero() => {
                s.invalid(
                    "max_wait_in_half_open",
                    "must be > 0 (leave it out to wait for the probes however long they take)",
                );
                Some(None)
            }
            Some(Some(d)) => Some(within_clock(s, "max_wait_in_half_open", d)),
            other => other,
        };

        Some(Self {
            enabled: enabled?,
            window: window?,
            failure_rate_threshold: u8::try_from(threshold?).ok()?,
            minimum_required_calls: u32::try_from(minimum?).ok()?,
            wait_duration_in_open_state: wait?,
            permitted_calls_in_half_open_state: u16::try_from(permitted?).ok()?,
            slow_call: match slow_call {
                None => None,
                Some(sc) => Some(sc?),
            },
            max_wait_in_half_open: match max_wait {
                None => None,
                Some(d) => Some(d?),
            },
        })
    }
}

/// The longest wait a breaker measures: its period stamps keep 2^47 µs.
pub(crate) const WAIT_MAX: Duration = Duration::from_secs(1461 * 24 * 3600);

/// `d`, if a breaker's clock can measure it; else a problem.
fn within_clock(s: &mut Section<'_>, key: &'static str, d: Duration) -> Option<Duration> {
    if d <= WAIT_MAX {
        return Some(d);
    }
    s.invalid(key, "must be at most 1461d (4 years)");
    None
}

/// Reports `key` as not used by `type = kind`, if it is there.
fn unused(s: &mut Section<'_>, key: &'static str, kind: &str) {
    if s.present(key) {
        s.problem(
            key,
            format!(
                "is not used by `type = \"{kind}\"`; remove it, or choose the type it belongs to"
            ),
            None,
        );
    }
}

/// Reports the window table `key` as required by `type = kind`, unless it is
/// there but not a table (already reported).
fn required(
    s: &mut Section<'_>,
    key: &'static str,
    kind: &str,
    inner: &str,
) -> Option<WindowSettings> {
    if s.exists() && !s.has(key) {
        s.problem(
            key,
            format!("is required for `type = \"{kind}\"` (at least `{inner}`)"),
            None,
        );
    }
    None
}

fn read_time_window(t: &mut Section<'_>) -> Option<WindowSettings> {
    let duration = match t.duration("window_duration", true) {
        Some(Some(d)) if d.is_zero() => {
            t.invalid("window_duration", "must be > 0");
            None
        }
        other => other.flatten(),
    };
    let samples = t.int("sample_count", Some(16), 1, 1024);
    let stripes = t.int("counter_stripes", Some(16), 1, 64);
    if let (Some(d), Some(n)) = (duration, samples) {
        if d.as_nanos() < u128::from(n) {
            t.invalid(
                "window_duration",
                format!(
                    "is too short for `sample_count` = {n}: each bucket must last at least 1ns"
                ),
            );
            return None;
        }
    }
    Some(WindowSettings::TimeBased {
        window_duration: duration?,
        sample_count: u32::try_from(samples?).ok()?,
        counter_stripes: u32::try_from(stripes?).ok()?,
    })
}

/// Reads a count-based window and checks it against its type's limits and
/// `minimum_required_calls`.
fn read_count_window(
    c: &mut Section<'_>,
    kind: &str,
    with_stripes: bool,
    minimum: Option<u64>,
) -> Option<WindowSettings> {
    let size = c.int("window_size", None, 1, u64::from(u32::MAX));
    let stripes = if with_stripes {
        c.table("striped_approx", |sa| sa.int("stripes", Some(16), 1, 64))
            .unwrap_or(Some(16))
    } else {
        unused(c, "striped_approx", kind);
        Some(16)
    };
    let (size, stripes) = (size?, stripes?);
    let max = match kind {
        "fixed_window" => FIXED_WINDOW_MAX,
        "striped_approx" => stripes * STRIPE_MAX,
        _ => RING_BUFFER_MAX,
    };
    if size > max {
        c.invalid(
            "window_size",
            format!("can't be greater than {max} for `type = \"{kind}\"`"),
        );
        return None;
    }
    if let Some(minimum) = minimum {
        if minimum > size {
            // Reported at the top-level key, where the user set it.
            c.problem_at_root(
                "minimum_required_calls",
                format!("can't be greater than `count_based.window_size` ({size}): the window could never hold enough calls to open the breaker"),
                Some(&Value::Int(i128::from(minimum))),
            );
            return None;
        }
    }
    let window_size = u32::try_from(size).ok()?;
    Some(match kind {
        "fixed_window" => WindowSettings::FixedWindow { window_size },
        "striped_approx" => WindowSettings::StripedApprox {
            window_size,
            stripes: u32::try_from(stripes).ok()?,
        },
        _ => WindowSettings::RingBuffer { window_size },
    })
}

/// How `failure_rate_threshold` differs from Polly's `failure_ratio`, with
/// the value the user wrote when it is a fraction.
fn ratio_note(found: &Value) -> String {
    let fraction = match found {
        Value::Float(x) => Some(*x),
        Value::Str(s) => s.trim().parse::<f64>().ok(),
        _ => None,
    };
    let (written, percent) = match fraction {
        Some(x) if x > 0.0 && x <= 1.0 => (x.to_string(), (x * 100.0).round().max(1.0)),
        _ => ("0.5".to_owned(), 50.0),
    };
    format!(
        "`failure_rate_threshold` is a whole percent, where `failure_ratio` (Polly) is a fraction: `failure_ratio = {written}` is `failure_rate_threshold = {percent}`"
    )
}
