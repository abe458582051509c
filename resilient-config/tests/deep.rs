//! A configuration that nests a value 100,000 levels deep (a JSON file or
//! an application's own `config::Source` can) is converted, refused at
//! startup and refused at a reload with one problem each, on a thread with
//! a 2 MiB stack: resilient follows no value by recursion. The `config`
//! crate's own value tree is built and dropped on a thread with a large
//! stack, since dropping it recurses (that is `config`'s, not ours).

#![allow(clippy::expect_used, clippy::unwrap_used)] // a test that panics on an unexpected outcome is the point

use resilient_core::{Registry, RetrySpec};

#[derive(RetrySpec)]
#[spec("resilient.retry.deep")]
struct DeepRetry;

const LEVELS: usize = 100_000;

fn table(pairs: Vec<(&str, config::Value)>) -> config::Value {
    let map: config::Map<String, config::Value> =
        pairs.into_iter().map(|(k, v)| (k.to_owned(), v)).collect();
    config::Value::new(None, config::ValueKind::Table(map))
}

/// `resilient.retry.deep` with `attempts`, and `extra` nested `depth` deep.
fn config_with(attempts: i64, depth: usize) -> config::Config {
    let mut extra = config::Value::new(None, config::ValueKind::I64(1));
    for _ in 0..depth {
        extra = table(vec![("a", extra)]);
    }
    let mut section = vec![
        (
            "attempts",
            config::Value::new(None, config::ValueKind::I64(attempts)),
        ),
        (
            "delay",
            config::Value::new(None, config::ValueKind::String("10ms".into())),
        ),
    ];
    if depth > 0 {
        section.push(("extra", extra));
    }
    let mut config = config::Config::default();
    config.cache = table(vec![(
        "resilient",
        table(vec![("retry", table(vec![("deep", table(section))]))]),
    )]);
    config
}

/// Runs `f` on a thread with a 2 MiB stack.
fn on_a_small_stack<T: Send>(f: impl FnOnce() -> T + Send) -> T {
    std::thread::scope(|s| {
        std::thread::Builder::new()
            .stack_size(2 << 20)
            .spawn_scoped(s, f)
            .unwrap()
            .join()
            .unwrap()
    })
}

#[test]
fn a_config_nested_100_000_levels_deep_is_refused_at_startup_and_at_reload() {
    // `config`'s own tree: built and dropped where its recursion fits.
    std::thread::Builder::new()
        .stack_size(1 << 30)
        .spawn(|| {
            let deep = config_with(5, LEVELS);
            on_a_small_stack(|| {
                let value = resilient_config::to_value(&deep.cache);
                drop(value);

                let err = resilient_config::build(Registry::builder().spec::<DeepRetry>(), &deep)
                    .expect_err("refused at startup");
                assert_eq!(err.problems().len(), 1, "{err}");
                assert_eq!(err.problems()[0].key, "extra.a.a.a.a.a.a.a.…");

                let registry = resilient_config::build(
                    Registry::builder().spec::<DeepRetry>(),
                    &config_with(2, 0),
                )
                .expect("valid");
                let err = resilient_config::reload_registry(&registry, &deep)
                    .expect_err("refused at reload");
                assert_eq!(
                    err.to_string(),
                    format!(
                        "invalid resilient configuration (1 problem):\n  \
                         - DeepRetry at `resilient.retry.deep`: key `extra.a.a.a.a.a.a.a.…` is nested {} levels deep; \
                         configuration is read to a depth of 64 levels from its root \
                         (a section's settings are a few levels below its path): remove the value, or flatten it",
                        LEVELS + 4
                    )
                );
                let handle = registry.sync_scope(DeepRetry::get).unwrap();
                assert_eq!(handle.settings().attempts, 2, "the running settings stay");
            });
            drop(deep);
        })
        .unwrap()
        .join()
        .unwrap();
}

#[test]
fn a_config_converted_keeps_every_value_in_place() {
    let config = config::Config::builder()
        .set_override("resilient.retry.deep.attempts", 3)
        .unwrap()
        .set_override("resilient.retry.deep.delay", "10ms")
        .unwrap()
        .set_override("app.list", vec![1, 2, 3])
        .unwrap()
        .set_override("app.empty", Vec::<i64>::new())
        .unwrap()
        .build()
        .unwrap();
    let value = resilient_config::to_value(&config.cache);
    use resilient_core::settings::Value as V;
    let V::Table(root) = &value else {
        panic!("a table: {value:?}")
    };
    let V::Table(app) = &root["app"] else {
        panic!("a table")
    };
    assert_eq!(app["list"], V::List(vec![V::Int(1), V::Int(2), V::Int(3)]));
    assert_eq!(app["empty"], V::List(vec![]));
    let V::Table(resilient) = &root["resilient"] else {
        panic!("a table")
    };
    let V::Table(retry) = &resilient["retry"] else {
        panic!("a table")
    };
    let V::Table(deep) = &retry["deep"] else {
        panic!("a table")
    };
    assert_eq!(deep["attempts"], V::Int(3));
    assert_eq!(deep["delay"], V::Str("10ms".into()));
    assert_eq!(deep.len(), 2);
}
