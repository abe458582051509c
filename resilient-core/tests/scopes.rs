//! Test scopes: which registry a call uses, in spawned tasks, on one thread
//! and on several. This binary installs a registry (with `attempts = 3`) so
//! that a call reaching it would show: every test here counts body runs.

#![allow(clippy::expect_used)] // a test that panics on an unexpected outcome is the point

mod support;
use support::*;

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Once};

use resilient_core::settings::Value;
use resilient_core::{retryable, Error, RetrySpec};

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

fn not_configured(out: &Result<(), TestError>) -> bool {
    matches!(out, Err(TestError::Resilience(Error::NotConfigured { .. })))
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
    assert!(not_configured(&out), "{out:?}");
    assert_eq!(runs.load(Ordering::SeqCst), 0, "the body never ran");
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
    assert!(not_configured(&out), "{out:?}");
    assert_eq!(runs.load(Ordering::SeqCst), 0);
}
