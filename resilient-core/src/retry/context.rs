//! Which retry the running code is a retry of: what the attempt header and
//! the detection of nested retries read.
//!
//! A retry marks the thread while it polls its body's future (or calls a
//! blocking fn's body), every attempt, the first included: one word (the
//! attempt's address) swapped in a thread-local and swapped back, no
//! branch. Code below (an
//! HTTP helper, a retried fn called by the body) reads the mark with
//! [`current_attempt`], which reports retries only; an inner retry reads
//! it to find the outer retry it runs inside.
//!
//! What this does not own: the header itself (the tower layers and the
//! middleware set it on their requests; [`with_attempt_header`] for a
//! `reqwest::RequestBuilder`), and the warning of a nested retry (the
//! inner retry's `failed`, in the parent module).
//!
//! [`with_attempt_header`]: crate::retry::with_attempt_header

use std::cell::Cell;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use crate::registry::Key;

use super::Retry;

thread_local! {
    /// The attempt whose body this thread runs now: null, or the attempt
    /// of an [`Entered`] guard alive on this thread (see there).
    static CURRENT: Cell<*const Attempt> = const { Cell::new(std::ptr::null()) };
}

/// A retry of a call, as the code it runs sees it (see
/// [`current_attempt`]).
#[derive(Clone, Copy)]
pub struct Attempt {
    pub(crate) key: &'static Key<Retry>,
    /// Attempts made before this one: 1 on the first retry, 0 on the first
    /// call.
    pub(crate) previous: u64,
}

impl std::fmt::Debug for Attempt {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Attempt")
            .field("spec", &self.key.name)
            .field("path", &self.key.path)
            .field("previous", &self.previous)
            .finish()
    }
}

impl Attempt {
    /// The name of the retry spec making the attempt (`PetRetry`).
    pub fn spec(&self) -> &'static str {
        self.key.name
    }

    /// The path of its settings (`resilient.retry.pet`).
    pub fn path(&self) -> &'static str {
        self.key.path
    }

    /// The attempts made before this one: `1` on the first retry, as gRPC's
    /// `grpc-previous-rpc-attempts` counts. Never `0`: a first call is no
    /// retry, and [`current_attempt`] does not report it.
    pub fn previous(&self) -> u64 {
        self.previous
    }

    /// The most calls the spec makes in one call: its `attempts` + 1, as
    /// the registry in use says now; `None` when no registry in use holds
    /// the spec.
    pub fn max_calls(&self) -> Option<u64> {
        let retry = crate::registry::lookup(self.key)?;
        let attempts = retry.config.get().settings.attempts;
        Some(u64::from(attempts).saturating_add(1))
    }

    /// The spec's `attempt_header` in the registry in use (lower-case),
    /// `None` when it has none (the default).
    pub fn header_name(&self) -> Option<String> {
        let retry = crate::registry::lookup(self.key)?;
        retry.config.get().settings.attempt_header.clone()
    }
}

/// Sets the attempt header on `headers` when the running code is a retry
/// whose spec has an `attempt_header`: its value is
/// [`Attempt::previous`], the attempts made before this one (`1` on the
/// first retry). Does nothing on a first call, outside a retry, or when
/// the spec has no `attempt_header`; says whether it set the header.
#[cfg(feature = "http")]
pub fn set_attempt_header(headers: &mut http::HeaderMap) -> bool {
    match current_attempt() {
        Some(attempt) => attempt.set_header(headers),
        None => false,
    }
}

impl Attempt {
    /// Sets this retry's attempt header on `headers`, when its spec has
    /// one (see [`set_attempt_header`]).
    #[cfg(feature = "http")]
    pub(crate) fn set_header(&self, headers: &mut http::HeaderMap) -> bool {
        if self.previous == 0 {
            return false;
        }
        let Some(name) = self.header_name() else {
            return false;
        };
        // Validated when the settings were read.
        let Ok(name) = http::HeaderName::from_bytes(name.as_bytes()) else {
            return false;
        };
        headers.insert(name, http::HeaderValue::from(self.previous));
        true
    }
}

/// `builder` with the attempt header when the running code is a retry
/// whose spec has an `attempt_header` (see [`set_attempt_header`]): for a
/// retried fn that sends its request with reqwest 0.13.
///
/// ```no_run
/// use resilient_core::{retryable, RetrySpec};
///
/// #[derive(RetrySpec)]
/// #[spec("resilient.retry.pets")]
/// struct PetsRetry; // with `attempt_header = "x-retry-attempt"`
///
/// #[derive(Debug, thiserror::Error)]
/// enum PetError {
///     #[error(transparent)]
///     Http(#[from] reqwest::Error),
///     #[error(transparent)]
///     Resilience(#[from] resilient_core::Error),
/// }
///
/// #[retryable(PetsRetry)]
/// async fn pet(http: &reqwest::Client, id: u64) -> Result<String, PetError> {
///     let request = http.get(format!("http://pets.local/pets/{id}"));
///     // No header on the first call; `x-retry-attempt: 1` on the first retry.
///     let response = resilient_core::retry::with_attempt_header(request).send().await?;
///     Ok(response.error_for_status()?.text().await?)
/// }
/// ```
#[cfg(feature = "reqwest")]
pub fn with_attempt_header(builder: reqwest::RequestBuilder) -> reqwest::RequestBuilder {
    let Some(attempt) = current_attempt() else {
        return builder;
    };
    match attempt.header_name() {
        Some(name) => builder.header(name, attempt.previous),
        None => builder,
    }
}

/// The retry the running code is a retry of, if it is one: called from a
/// retried fn's body (or any code it calls on the same thread, in the same
/// poll), `Some` from the first retry on, `None` on the first call and
/// outside any retry.
///
/// Retries nest: the answer is that of the innermost retry that is on a
/// retry. A retried fn called by a retried body, on its own first call,
/// sees its caller's retry.
///
/// ```
/// use resilient_core::retry::current_attempt;
///
/// // Outside any retry.
/// assert!(current_attempt().is_none());
/// ```
pub fn current_attempt() -> Option<Attempt> {
    marked().filter(|a| a.previous != 0)
}

/// The attempt the thread runs now, a first call included.
#[allow(unsafe_code)] // one read of the mark an alive guard set (below)
pub(crate) fn marked() -> Option<Attempt> {
    let mark = CURRENT.try_with(Cell::get).ok()?;
    // SAFETY: the mark is null or was set by an `Entered` guard on this
    // thread that is still alive (each guard puts back the mark it found
    // when it drops, guards drop in the reverse of their order, and a
    // guard cannot outlive the attempt it borrows): so it points at a live
    // `Attempt`, only ever read through shared references.
    unsafe { mark.as_ref() }.copied()
}

/// Marks the thread as running an attempt while it exists, and puts back
/// what was there when dropped (also when the body panics). No branch: one
/// word, the attempt's address, swapped in a thread-local and swapped
/// back, the first call too (which [`current_attempt`] does not report).
/// The guard borrows the attempt, so the address stays valid while it is
/// the mark.
struct Entered<'a> {
    /// What the thread was marked with before.
    before: *const Attempt,
    _attempt: std::marker::PhantomData<&'a Attempt>,
}

impl<'a> Entered<'a> {
    #[inline(always)]
    fn new(attempt: &'a Attempt) -> Self {
        Entered {
            before: CURRENT.with(|c| c.replace(attempt)),
            _attempt: std::marker::PhantomData,
        }
    }
}

impl Drop for Entered<'_> {
    #[inline(always)]
    fn drop(&mut self) {
        CURRENT.with(|c| c.set(self.before));
    }
}

pin_project_lite::pin_project! {
    /// A body's future, polled with the thread marked as running `attempt`
    /// when it is a retry.
    #[doc(hidden)]
    pub struct InAttempt<F> {
        attempt: Attempt,
        #[pin]
        fut: F,
    }
}

impl<F> InAttempt<F> {
    /// `fut`, polled as `attempt` (nothing marked on a first call).
    #[inline(always)]
    pub(crate) fn new(attempt: Attempt, fut: F) -> Self {
        InAttempt { attempt, fut }
    }
}

impl<F: Future> Future for InAttempt<F> {
    type Output = F::Output;

    #[inline(always)]
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let this = self.project();
        // One call of the inner poll: it stays inlined as without a mark.
        let _entered = Entered::new(this.attempt);
        this.fut.poll(cx)
    }
}

pin_project_lite::pin_project! {
    /// A future polled with the thread marked as running the attempt that
    /// made it, if a retry's attempt made it. Not a public API.
    #[doc(hidden)]
    pub struct InMarked<F> {
        attempt: Option<Attempt>,
        #[pin]
        fut: F,
    }
}

impl<F> InMarked<F> {
    /// `fut`, polled as `attempt`.
    #[inline(always)]
    #[cfg_attr(not(feature = "reqwest-middleware"), allow(dead_code))]
    pub(crate) fn new(attempt: Option<Attempt>, fut: F) -> Self {
        InMarked { attempt, fut }
    }
}

impl<F: Future> Future for InMarked<F> {
    type Output = F::Output;

    #[inline(always)]
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let this = self.project();
        match this.attempt {
            Some(attempt) => {
                let _entered = Entered::new(attempt);
                this.fut.poll(cx)
            }
            None => this.fut.poll(cx),
        }
    }
}

/// Calls `body` with the thread marked as running `attempt`, if there is
/// one: a stack's part that waited, starting the parts inside it in the
/// attempt it was admitted in.
#[inline(always)]
#[cfg_attr(not(feature = "tower"), allow(dead_code))]
pub(crate) fn call_in_if<R>(attempt: Option<Attempt>, body: impl FnOnce() -> R) -> R {
    // One call of `body`: it is inlined once.
    let _entered = attempt.as_ref().map(Entered::new);
    body()
}

/// Calls `body` with the thread marked as running `attempt` when it is a
/// retry: a blocking fn's attempt, or a layer's call of its inner service.
#[inline(always)]
pub(crate) fn call_in<R>(attempt: Attempt, body: impl FnOnce() -> R) -> R {
    // One call of `body`: it is inlined once.
    let _entered = Entered::new(&attempt);
    body()
}
