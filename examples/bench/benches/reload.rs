//! Reloading a registry of 100 specs (20 of each kind with settings):
//! every spec's section read and validated again, its changes listed, and
//! its new settings published.

use std::hint::black_box;

use criterion::Criterion;
use resilient_core::settings::Value;
use resilient_core::{
    CircuitBreakerSpec, ConcurrencyLimitSpec, RateLimiterSpec, Registry, RegistryBuilder,
    RetrySpec, TimeoutSpec,
};

/// Declares the specs of one kind, and a fn that adds them to a builder.
macro_rules! specs {
    ($add:ident, $derive:ident: $($name:ident $path:literal),+) => {
        $(
            #[derive($derive)]
            #[spec($path)]
            struct $name;
        )+
        fn $add(builder: RegistryBuilder) -> RegistryBuilder {
            builder $(.spec::<$name>())+
        }
    };
}

specs!(retry, RetrySpec:
    R00 "reload.retry.s00", R01 "reload.retry.s01", R02 "reload.retry.s02", R03 "reload.retry.s03",
    R04 "reload.retry.s04", R05 "reload.retry.s05", R06 "reload.retry.s06", R07 "reload.retry.s07",
    R08 "reload.retry.s08", R09 "reload.retry.s09", R10 "reload.retry.s10", R11 "reload.retry.s11",
    R12 "reload.retry.s12", R13 "reload.retry.s13", R14 "reload.retry.s14", R15 "reload.retry.s15",
    R16 "reload.retry.s16", R17 "reload.retry.s17", R18 "reload.retry.s18", R19 "reload.retry.s19");
specs!(breaker, CircuitBreakerSpec:
    B00 "reload.breaker.s00", B01 "reload.breaker.s01", B02 "reload.breaker.s02", B03 "reload.breaker.s03",
    B04 "reload.breaker.s04", B05 "reload.breaker.s05", B06 "reload.breaker.s06", B07 "reload.breaker.s07",
    B08 "reload.breaker.s08", B09 "reload.breaker.s09", B10 "reload.breaker.s10", B11 "reload.breaker.s11",
    B12 "reload.breaker.s12", B13 "reload.breaker.s13", B14 "reload.breaker.s14", B15 "reload.breaker.s15",
    B16 "reload.breaker.s16", B17 "reload.breaker.s17", B18 "reload.breaker.s18", B19 "reload.breaker.s19");
specs!(timeout, TimeoutSpec:
    T00 "reload.timeout.s00", T01 "reload.timeout.s01", T02 "reload.timeout.s02", T03 "reload.timeout.s03",
    T04 "reload.timeout.s04", T05 "reload.timeout.s05", T06 "reload.timeout.s06", T07 "reload.timeout.s07",
    T08 "reload.timeout.s08", T09 "reload.timeout.s09", T10 "reload.timeout.s10", T11 "reload.timeout.s11",
    T12 "reload.timeout.s12", T13 "reload.timeout.s13", T14 "reload.timeout.s14", T15 "reload.timeout.s15",
    T16 "reload.timeout.s16", T17 "reload.timeout.s17", T18 "reload.timeout.s18", T19 "reload.timeout.s19");
specs!(limit, ConcurrencyLimitSpec:
    L00 "reload.limit.s00", L01 "reload.limit.s01", L02 "reload.limit.s02", L03 "reload.limit.s03",
    L04 "reload.limit.s04", L05 "reload.limit.s05", L06 "reload.limit.s06", L07 "reload.limit.s07",
    L08 "reload.limit.s08", L09 "reload.limit.s09", L10 "reload.limit.s10", L11 "reload.limit.s11",
    L12 "reload.limit.s12", L13 "reload.limit.s13", L14 "reload.limit.s14", L15 "reload.limit.s15",
    L16 "reload.limit.s16", L17 "reload.limit.s17", L18 "reload.limit.s18", L19 "reload.limit.s19");
specs!(rate, RateLimiterSpec:
    Q00 "reload.rate.s00", Q01 "reload.rate.s01", Q02 "reload.rate.s02", Q03 "reload.rate.s03",
    Q04 "reload.rate.s04", Q05 "reload.rate.s05", Q06 "reload.rate.s06", Q07 "reload.rate.s07",
    Q08 "reload.rate.s08", Q09 "reload.rate.s09", Q10 "reload.rate.s10", Q11 "reload.rate.s11",
    Q12 "reload.rate.s12", Q13 "reload.rate.s13", Q14 "reload.rate.s14", Q15 "reload.rate.s15",
    Q16 "reload.rate.s16", Q17 "reload.rate.s17", Q18 "reload.rate.s18", Q19 "reload.rate.s19");

fn table<const N: usize>(pairs: [(&str, Value); N]) -> Value {
    Value::Table(pairs.into_iter().map(|(k, v)| (k.to_owned(), v)).collect())
}

fn s(v: &str) -> Value {
    Value::Str(v.into())
}

/// The sections of the 100 specs; `b` changes one key of each.
fn sections(b: bool) -> Value {
    let n = if b { 3 } else { 2 };
    let section = |kind: &str| match kind {
        "retry" => table([("delay", s("100ms")), ("attempts", Value::Int(n))]),
        "breaker" => table([
            ("failure_rate_threshold", Value::Int(50)),
            ("minimum_required_calls", Value::Int(n)),
            ("wait_duration_in_open_state", s("10s")),
            ("permitted_calls_in_half_open_state", Value::Int(1)),
            ("count_based", table([("window_size", Value::Int(100))])),
        ]),
        "timeout" => table([("duration", s(if b { "2s" } else { "1s" }))]),
        "limit" => table([("limit", Value::Int(10 * n))]),
        _ => table([
            ("limit_for_period", Value::Int(10 * n)),
            ("limit_refresh_period", s("1s")),
        ]),
    };
    let kinds = ["retry", "breaker", "timeout", "limit", "rate"].map(|kind| {
        let specs = (0..20).map(|i| (format!("s{i:02}"), section(kind)));
        (kind.to_owned(), Value::Table(specs.collect()))
    });
    table([("reload", Value::Table(kinds.into_iter().collect()))])
}

pub(crate) fn reload(c: &mut Criterion) {
    let builder = [retry, breaker, timeout, limit, rate]
        .into_iter()
        .fold(Registry::builder(), |b, add| add(b));
    let registry = match builder.build(&sections(false)) {
        Ok(r) => r,
        Err(problems) => panic!("{problems:?}"),
    };
    assert_eq!(registry.len(), 100);
    let (a, b) = (sections(false), sections(true));
    let mut g = c.benchmark_group("reload");
    // Each reload changes one key of every spec: 100 specs reconfigured.
    let mut flip = false;
    g.bench_function("100 specs, each changed", |bench| {
        bench.iter(|| {
            flip = !flip;
            let to = if flip { &b } else { &a };
            match registry.reload(black_box(to)) {
                Ok(r) => black_box(r.specs.len()),
                Err(problems) => panic!("{problems:?}"),
            }
        });
    });
    g.bench_function("100 specs, none changed", |bench| {
        bench.iter(|| match registry.reload(black_box(&a)) {
            Ok(r) => black_box(r.specs.len()),
            Err(problems) => panic!("{problems:?}"),
        });
    });
    g.finish();
}
