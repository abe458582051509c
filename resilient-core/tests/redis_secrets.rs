//! A Redis URL's password never leaves the configuration: not in a
//! startup problem (a bad URL, a bad port, a bad database, an unreachable
//! or refusing server), a reload's problem, a log line, a metric's labels,
//! an event, the snapshot or the settings' `Debug`. In a binary of its
//! own: the log lines are captured on this thread.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;
use support::redis::{self as server, Server};
use support::*;

use std::sync::{Arc, Mutex};

use resilient_core::backend::RedisSettings;
use resilient_core::settings::{Section, Value};
use resilient_core::{RateLimiterSpec, Registry, RetrySpec, Spec};

#[derive(RateLimiterSpec)]
#[spec("redis_secrets.limit")]
struct Limit;

#[derive(RetrySpec)]
#[spec("redis_secrets.retry")]
struct Retry;

const SECRET: &str = "s3cret-Pa55";

fn limit() -> Value {
    table([
        ("limit_for_period", int(10)),
        ("limit_refresh_period", s("1s")),
        ("backend", s("redis")),
    ])
}

fn redis(url: &str, required: bool) -> Value {
    table([
        ("url", s(url)),
        ("timeout", s("50ms")),
        ("connect_timeout", s("200ms")),
        ("require_at_startup", boolean(required)),
    ])
}

fn sections(url: &str, required: bool) -> Vec<(&'static str, Value)> {
    vec![
        (Limit::PATH, limit()),
        ("resilient.redis", redis(url, required)),
    ]
}

/// Everything a registry built from `url` says: its problems, or its
/// `Debug`, its snapshot, and what a reload to `reload_url` says.
fn said_by(url: &str, required: bool, out: &mut Vec<String>) -> Option<Registry> {
    match Registry::builder()
        .spec::<Limit>()
        .build(&root(sections(url, required)))
    {
        Err(problems) => {
            out.extend(problems.iter().map(|p| format!("{p} {p:?}")));
            None
        }
        Ok(r) => {
            out.push(format!("{r:?} {:?}", r.snapshot()));
            Some(r)
        }
    }
}

fn closed_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .unwrap()
}

#[test]
fn no_password_reaches_any_output() {
    let Some(live) = server::url("no_password_reaches_any_output") else {
        return;
    };
    let Some(stalled) = Server::start("no_password_reaches_any_output") else {
        return;
    };
    let capture = support::capture::Capture::default();
    let _subscriber = tracing::subscriber::set_default(capture.clone());
    let meters = support::capture::Meters::default();
    let mut out = Vec::new();
    let events = Arc::new(Mutex::new(Vec::new()));

    let live_port = live.rsplit(':').next().unwrap().to_owned();
    let dead = closed_port();
    let bad = [
        // A bad port (the case first reported), a bad database, no host,
        // an unknown scheme, a secret in a Unix socket's query.
        format!("redis://app:{SECRET}@cache:63a9"),
        format!("redis://app:{SECRET}@127.0.0.1:{live_port}/x1"),
        format!("redis://app:{SECRET}@:6379"),
        format!("rdis://app:{SECRET}@cache:6379"),
        format!("unix:///tmp/redis.sock?db=x&pass={SECRET}"),
        format!("redis://:{SECRET}@cache:99999"),
    ];
    for url in &bad {
        let before = out.len();
        assert!(said_by(url, false, &mut out).is_none(), "{url} is refused");
        assert!(out.len() > before, "{url}: a problem");
    }
    // The section written as the URL itself, and the URL under a misspelt
    // key.
    for section in [s(&bad[0]), table([("ulr", s(&bad[0]))])] {
        let built = Registry::builder().spec::<Limit>().build(&root(vec![
            (Limit::PATH, limit()),
            ("resilient.redis", section),
        ]));
        let problems = built.err().unwrap_or_default();
        assert!(!problems.is_empty(), "refused");
        out.extend(problems.iter().map(|p| format!("{p} {p:?}")));
    }
    // The bad port says which part is wrong.
    let port_problem = {
        let mut one = Vec::new();
        said_by(&bad[0], false, &mut one);
        one.join("\n")
    };
    println!("{port_problem}");
    assert!(
        port_problem.contains("port") && port_problem.contains("63a9"),
        "{port_problem}"
    );
    assert!(
        port_problem.contains("app:***@cache:63a9"),
        "{port_problem}"
    );

    // Unreachable, and a server that refuses the password (it has none),
    // both required at startup.
    let unreachable = format!("redis://app:{SECRET}@127.0.0.1:{dead}");
    let refused = format!("redis://app:{SECRET}@127.0.0.1:{live_port}");
    assert!(said_by(&unreachable, true, &mut out).is_none());
    assert!(said_by(&refused, true, &mut out).is_none());

    // Started without them: the calls get the policy, logged, counted,
    // published; a probe of a stalled server fails, logged.
    stalled.pause();
    let stalled_url = format!("redis://app:{SECRET}@127.0.0.1:{}/1", stalled.port);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    for url in [&unreachable, &refused, &stalled_url] {
        let section = with(
            limit(),
            "telemetry",
            table([("metrics", table([("enabled", boolean(true))]))]),
        );
        let r = build(
            Registry::builder().spec::<Limit>().spec::<Retry>(),
            vec![
                (Limit::PATH, section),
                (
                    Retry::PATH,
                    table([
                        ("attempts", int(1)),
                        ("delay", s("1ms")),
                        (
                            "retry_budget",
                            table([("tokens_max", int(5)), ("backend", s("redis"))]),
                        ),
                    ]),
                ),
                ("resilient.redis", redis(url, false)),
            ],
        );
        let seen = Arc::clone(&events);
        let _subscription = r.subscribe(move |e| seen.lock().unwrap().push(format!("{e:?}")));
        metrics::with_local_recorder(&meters, || {
            for _ in 0..8 {
                let e = rt.block_on(r.scope(async { Limit::get()?.acquire().await }));
                out.push(format!(
                    "{e:?} {}",
                    e.as_ref()
                        .map_or_else(ToString::to_string, |()| String::new())
                ));
                let e = r.sync_scope(|| Limit::get()?.try_acquire());
                out.push(format!("{e:?}"));
            }
            std::thread::sleep(std::time::Duration::from_millis(1100));
            let e = rt.block_on(r.scope(async { Limit::get()?.acquire().await }));
            out.push(format!("{e:?}"));
        });
        out.push(format!("{r:?} {:?}", r.snapshot()));
        // A reload to another secret URL: refused, saying so.
        let other = format!("redis://app:{SECRET}-2@127.0.0.1:{dead}");
        if let Err(problems) = r.reload(&root(sections(&other, false))) {
            out.extend(problems.iter().map(|p| format!("{p} {p:?}")));
        }
    }
    stalled.resume();

    // The settings' own `Debug`.
    let mut problems = Vec::new();
    let value = redis(&unreachable, false);
    let config = root(vec![("resilient.redis", value)]);
    let mut section =
        Section::optional("Redis backend", RedisSettings::PATH, &config, &mut problems);
    let settings = RedisSettings::read(&mut section);
    section.finish();
    out.push(format!("{settings:?} {problems:?}"));
    assert!(format!("{settings:?}").contains("app:***@"), "{settings:?}");

    let lines = capture.lines();
    assert!(
        lines.iter().any(|l| l.target == "resilient::backend"),
        "the backend's log was captured: {lines:#?}"
    );
    out.extend(lines.iter().map(|l| format!("{l:?}")));
    out.extend(events.lock().unwrap().iter().cloned());
    out.extend(meters.series());
    let leaked: Vec<&String> = out.iter().filter(|o| o.contains(SECRET)).collect();
    println!(
        "{} outputs read; {} hold the password",
        out.len(),
        leaked.len()
    );
    assert!(leaked.is_empty(), "the password leaked: {leaked:#?}");
}
