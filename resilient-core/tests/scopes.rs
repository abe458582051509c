//! Test scopes: which registry a call uses, in spawned tasks, on one thread
//! and on several. This binary installs a registry (with `attempts = 3`) so
//! that a call reaching it would show: every test here counts body runs.

#![allow(clippy::expect_used)] // a test that panics on an unexpected outcome is the point

mod support;
use support::*;

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Once};

use resilient_core::settings::Value;
use resilient_core::{retryable, Error, RetrySpec, Unconfigured};

#[derive(RetrySpec)]
#[spec("scopes.retry.main")]
struct R;

#[derive(RetrySpec)]
#[spec("scopes.retry.other")]
struct Other;

#[derive(Debug, thiserror::Error)]
enum TestError {
    #[error("down")]
    Down,
    #[error(transparent)]
    Resilience(#[from] Error),
}

#[retryable(R)]
async fn always_down(runs: &AtomicU32) -> Result<(), TestError> {
    runs.fetch_add(1, Ordering::SeqCst);
    Err(TestError::Down)
}

fn attempts(n: i128) -> Value {
    table([("delay", s("0s")), ("attempts", int(n))])
}

/// The application's registry: 1 call + 3 retries.
fn install() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        registry::<R>(attempts(3)).install().expect("first install");
    });
}

fn reason(out: &Result<(), TestError>) -> Option<Unconfigured> {
    match out {
        Err(TestError::Resilience(Error::NotConfigured { reason, .. })) => Some(*reason),
        _ => None,
    }
}

/// A task spawned onto another worker inside a scope is outside the scope:
/// its call fails with `NotConfigured` and runs nothing, instead of running
/// four times with the installed settings.
#[test]
fn a_task_outside_the_scope_never_uses_the_installed_registry() {
    install();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_time()
        .build()
        .expect("runtime");
    let scoped = registry::<R>(attempts(0));
    let runs = Arc::new(AtomicU32::new(0));
    let out = rt.block_on(scoped.scope(async {
        let runs = Arc::clone(&runs);
        tokio::spawn(async move { always_down(&runs).await })
            .await
            .expect("task")
    }));
    assert_eq!(
        reason(&out),
        Some(Unconfigured::OutsideTestRegistry),
        "{out:?}"
    );
    let message = out.map_err(|e| e.to_string()).expect_err("not configured");
    assert!(
        message.contains("registry.set_default_on(&mut builder)"),
        "the message names the way that works: {message}"
    );
    assert_eq!(runs.load(Ordering::SeqCst), 0, "the body never ran");
}

/// A multi-thread runtime built with `set_default_on`: every worker (and
/// blocking thread) uses the test's registry, so 64 tasks spawned from
/// anywhere each run the body once (`attempts = 0`), not four times with
/// the installed settings, and none fails with `NotConfigured`.
#[test]
fn set_default_on_covers_every_thread_of_a_multi_thread_runtime() {
    install();
    let test = registry::<R>(attempts(0));
    let rt = test
        .set_default_on(
            tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_time(),
        )
        .build()
        .expect("runtime");
    let runs = Arc::new(AtomicU32::new(0));
    let threads = Arc::new(std::sync::Mutex::new(std::collections::BTreeSet::new()));
    let outs = rt.block_on(async {
        let tasks: Vec<_> = (0..64)
            .map(|_| {
                let (runs, threads) = (Arc::clone(&runs), Arc::clone(&threads));
                tokio::spawn(async move {
                    // Spawned again from the worker it runs on, as a server
                    // spawns a task per request.
                    tokio::spawn(async move {
                        tokio::task::yield_now().await;
                        if let Ok(mut t) = threads.lock() {
                            t.insert(format!("{:?}", std::thread::current().id()));
                        }
                        always_down(&runs).await
                    })
                    .await
                    .expect("task")
                })
            })
            .collect();
        let mut outs = Vec::new();
        for t in tasks {
            outs.push(t.await.expect("task"));
        }
        outs.push(
            tokio::task::spawn_blocking({
                let runs = Arc::clone(&runs);
                move || tokio::runtime::Handle::current().block_on(always_down(&runs))
            })
            .await
            .expect("blocking task"),
        );
        outs
    });
    assert!(
        outs.iter().all(|o| matches!(o, Err(TestError::Down))),
        "{outs:?}"
    );
    assert_eq!(runs.load(Ordering::SeqCst), 65, "one run per call");
    // Spawned tasks run on the workers, never on the thread that blocks
    // on the runtime: none of these calls could have found a default set
    // by the test itself.
    let me = format!("{:?}", std::thread::current().id());
    let threads = threads.lock().expect("threads").clone();
    assert!(!threads.is_empty() && !threads.contains(&me), "{threads:?}");
}

/// Under `set_default` on a current-thread runtime, every task (the test's,
/// a spawned "server" and the tasks it spawns per request) uses the test's
/// registry: `attempts = 0`, one run per request.
#[test]
fn set_default_covers_tasks_spawned_on_a_current_thread_runtime() {
    install();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .expect("runtime");
    let test = registry::<R>(attempts(0));
    let _guard = test.set_default();
    let runs = Arc::new(AtomicU32::new(0));
    let answers = rt.block_on(async {
        let (requests, mut incoming) =
            tokio::sync::mpsc::channel::<tokio::sync::oneshot::Sender<Result<(), TestError>>>(8);
        let server = {
            let runs = Arc::clone(&runs);
            tokio::spawn(async move {
                while let Some(reply) = incoming.recv().await {
                    let runs = Arc::clone(&runs);
                    tokio::spawn(async move {
                        let _ = reply.send(always_down(&runs).await);
                    });
                }
            })
        };
        let mut answers = Vec::new();
        for _ in 0..5 {
            let (reply, answer) = tokio::sync::oneshot::channel();
            requests.send(reply).await.expect("server up");
            answers.push(answer.await.expect("answered"));
        }
        drop(requests);
        server.await.expect("server");
        answers
    });
    assert!(
        answers.iter().all(|a| matches!(a, Err(TestError::Down))),
        "{answers:?}"
    );
    assert_eq!(runs.load(Ordering::SeqCst), 5, "one run per request");
}

/// A scope wins over the thread's default, and dropping the guard restores
/// the previous default.
#[test]
fn the_scope_wins_over_the_default_and_guards_nest() {
    install();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .expect("runtime");
    let (none, one) = (registry::<R>(attempts(0)), registry::<R>(attempts(1)));
    let runs = AtomicU32::new(0);
    let count = |f: &dyn Fn()| {
        runs.store(0, Ordering::SeqCst);
        f();
        runs.load(Ordering::SeqCst)
    };
    let _outer = one.set_default();
    assert_eq!(count(&|| drop(rt.block_on(always_down(&runs)))), 2);
    assert_eq!(
        count(&|| drop(rt.block_on(none.scope(always_down(&runs))))),
        1,
        "the scope"
    );
    {
        let _inner = none.set_default();
        assert_eq!(count(&|| drop(rt.block_on(always_down(&runs)))), 1);
    }
    assert_eq!(
        count(&|| drop(rt.block_on(always_down(&runs)))),
        2,
        "the outer default again"
    );
}

/// A registry built without the spec gives `NotConfigured` inside its
/// scope, never the installed registry's instance.
#[test]
fn a_scope_without_the_spec_gives_not_configured() {
    install();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .expect("runtime");
    let empty = registry::<Other>(attempts(0));
    let runs = AtomicU32::new(0);
    let out = rt.block_on(empty.scope(always_down(&runs)));
    assert_eq!(reason(&out), Some(Unconfigured::NotInRegistry), "{out:?}");
    assert_eq!(runs.load(Ordering::SeqCst), 0);
}
