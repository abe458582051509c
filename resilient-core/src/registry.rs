//! The registry: one shared instance per spec, built from validated settings.
//!
//! An application builds one registry from every spec linked into the binary
//! and installs it once, at startup (`resilient_config::init` does both). Tests
//! build registries for the specs they use and run their code inside
//! [`Registry::scope`] (one task) or under [`Registry::set_default`] (one
//! thread), so that tests in one process do not share state.
//!
//! A call finds its spec's instance in the first of: the task's scope, the
//! thread's default, the installed registry. While any scope or default is
//! alive in the process, the installed registry is never used: a call that no
//! scope or default reaches (a task spawned onto another thread, say) fails
//! with [`Error::NotConfigured`] rather than silently running with the
//! application's settings.

use std::any::TypeId;
use std::cell::RefCell;
use std::collections::HashMap;
use std::future::Future;
use std::marker::PhantomData;
use std::rc::Rc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};

use crate::circuit_breaker::{Breaker, CircuitBreakerSettings};
use crate::concurrency::{ConcurrencyLimitSettings, Limiter};
use crate::error::Error;
use crate::rate_limiter::{RateLimiter, RateLimiterSettings};
use crate::retry::{Retry, RetrySettings};
use crate::settings::{Problem, Section, Value};
use crate::spec::{Spec, SpecEntry, SpecKind};
use crate::timeout::{Timeout, TimeoutSettings};

static INSTALLED: OnceLock<Registry> = OnceLock::new();

tokio::task_local! {
    static SCOPED: Registry;
}

thread_local! {
    static DEFAULT: RefCell<Option<Registry>> = const { RefCell::new(None) };
}

/// Scopes and defaults alive in the process.
static ACTIVE: AtomicUsize = AtomicUsize::new(0);

/// Counts one scope or default as alive while it exists.
struct Active;

impl Active {
    fn enter() -> Self {
        ACTIVE.fetch_add(1, Ordering::AcqRel);
        Active
    }
}

impl Drop for Active {
    fn drop(&mut self) {
        ACTIVE.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Keeps a registry the default of the current thread; dropping it restores
/// the previous default. Returned by [`Registry::set_default`].
#[must_use = "the default lasts only as long as the guard"]
#[derive(Debug)]
pub struct DefaultGuard {
    previous: Option<Registry>,
    /// The guard restores a thread-local: it must be dropped on its thread.
    _not_send: PhantomData<Rc<()>>,
}

impl Drop for DefaultGuard {
    fn drop(&mut self) {
        let previous = self.previous.take();
        let _ = DEFAULT.try_with(|d| *d.borrow_mut() = previous);
        ACTIVE.fetch_sub(1, Ordering::AcqRel);
    }
}

#[derive(Debug)]
enum Instance {
    Retry(Arc<Retry>),
    CircuitBreaker(Arc<Breaker>),
    Timeout(Arc<Timeout>),
    ConcurrencyLimit(Arc<Limiter>),
    RateLimiter(Arc<RateLimiter>),
}

/// The shared instances of a set of specs; cheap to clone.
///
/// ```
/// use resilient_core::settings::Value;
/// use resilient_core::{Registry, RetrySpec};
///
/// #[derive(RetrySpec)]
/// #[spec("resilient.retry.pet")]
/// pub struct PetRetry;
///
/// # fn table(pairs: Vec<(&str, Value)>) -> Value {
/// #     Value::Table(pairs.into_iter().map(|(k, v)| (k.to_owned(), v)).collect())
/// # }
/// let root = table(vec![("resilient", table(vec![("retry", table(vec![("pet", table(vec![
///     ("delay", Value::Str("10ms".into())),
///     ("attempts", Value::Int(2)),
/// ]))]))]))]);
/// let registry = Registry::builder().spec::<PetRetry>().build(&root).unwrap();
/// assert!(registry.contains::<PetRetry>());
/// ```
#[derive(Debug, Clone)]
pub struct Registry {
    instances: Arc<HashMap<TypeId, Instance>>,
}

/// Builds a [`Registry`] for every spec in the binary, or for a chosen set.
#[derive(Debug, Default)]
pub struct RegistryBuilder {
    only: Option<Vec<SpecEntry>>,
}

/// The registry is already installed; it can be installed once per process.
#[derive(Debug, thiserror::Error)]
#[error("a resilient registry is already installed; install it once, at startup (tests can use `Registry::scope` instead)")]
pub struct AlreadyInstalled;

impl RegistryBuilder {
    /// Limits the registry to the given spec (call once per spec). Without any
    /// call, the registry covers every spec linked into the binary, which is
    /// what an application wants; a test names the specs it uses, so that the
    /// sections of other tests' specs need not be in its configuration.
    #[must_use]
    pub fn spec<S: Spec>(mut self) -> Self {
        let entry = SpecEntry::of::<S>();
        let only = self.only.get_or_insert_with(Vec::new);
        if !only.iter().any(|e| (e.type_id)() == (entry.type_id)()) {
            only.push(entry);
        }
        self
    }

    /// Reads and validates each spec's section in `root`.
    ///
    /// # Errors
    ///
    /// Every problem of every spec, sorted by path then key.
    pub fn build(self, root: &Value) -> Result<Registry, Vec<Problem>> {
        let entries: Vec<&SpecEntry> = match &self.only {
            Some(only) => only.iter().collect(),
            None => SpecEntry::all().collect(),
        };
        let mut problems = Vec::new();
        let mut instances = HashMap::with_capacity(entries.len());
        let shared = crate::settings::shared_sections(&entries, &mut problems);
        for entry in entries.into_iter().filter(|e| !shared.contains(&e.path)) {
            let mut section = Section::root(entry.name, entry.path, root, &mut problems);
            let instance = match entry.kind {
                SpecKind::Retry => RetrySettings::read(&mut section)
                    .map(|s| Instance::Retry(Arc::new(Retry::new(s)))),
                SpecKind::CircuitBreaker => CircuitBreakerSettings::read(&mut section).map(|s| {
                    Instance::CircuitBreaker(Arc::new(Breaker::new(entry.name, entry.path, s)))
                }),
                SpecKind::Timeout => TimeoutSettings::read(&mut section)
                    .map(|settings| Instance::Timeout(Arc::new(Timeout { settings }))),
                SpecKind::ConcurrencyLimit => ConcurrencyLimitSettings::read(&mut section)
                    .map(|s| Instance::ConcurrencyLimit(Arc::new(Limiter::new(s)))),
                SpecKind::RateLimiter => RateLimiterSettings::read(&mut section)
                    .map(|s| Instance::RateLimiter(Arc::new(RateLimiter::new(s)))),
            };
            section.finish();
            if let Some(instance) = instance {
                instances.insert((entry.type_id)(), instance);
            }
        }
        if problems.is_empty() {
            Ok(Registry {
                instances: Arc::new(instances),
            })
        } else {
            problems.sort_by(|a, b| (a.path, &a.key, a.spec).cmp(&(b.path, &b.key, b.spec)));
            Err(problems)
        }
    }
}

impl Registry {
    /// A builder; see [`RegistryBuilder`].
    pub fn builder() -> RegistryBuilder {
        RegistryBuilder::default()
    }

    /// Whether the registry holds an instance of spec `S`.
    pub fn contains<S: Spec>(&self) -> bool {
        self.instances.contains_key(&TypeId::of::<S>())
    }

    /// The number of specs in the registry.
    pub fn len(&self) -> usize {
        self.instances.len()
    }

    /// Whether the registry holds no spec.
    pub fn is_empty(&self) -> bool {
        self.instances.is_empty()
    }

    /// Makes this the registry of the whole process.
    ///
    /// # Errors
    ///
    /// [`AlreadyInstalled`] when one was installed before; the first stays.
    pub fn install(self) -> Result<(), AlreadyInstalled> {
        INSTALLED.set(self).map_err(|_| AlreadyInstalled)
    }

    /// Runs `fut` with this registry in place of the installed one.
    ///
    /// Annotated fns called while `fut` runs use this registry's instances
    /// (and only those: a spec it lacks gives [`Error::NotConfigured`], never
    /// the installed registry's instance). The scope is task-local: a task
    /// spawned inside `fut` is outside it. On a current-thread runtime (a
    /// plain `#[tokio::test]`), [`set_default`](Self::set_default) covers
    /// spawned tasks too. This lets tests in one process run in parallel,
    /// each with its own settings and state.
    pub async fn scope<F: Future>(&self, fut: F) -> F::Output {
        let _active = Active::enter();
        SCOPED.scope(self.clone(), fut).await
    }

    /// Runs `f` with this registry in place of the installed one: the
    /// synchronous [`scope`](Self::scope), for example to take a spec's handle
    /// (`registry.sync_scope(PetBreaker::get)`), which then works anywhere.
    pub fn sync_scope<R>(&self, f: impl FnOnce() -> R) -> R {
        let _active = Active::enter();
        SCOPED.sync_scope(self.clone(), f)
    }

    /// Makes this registry the current thread's default until the guard is
    /// dropped, as `tracing::subscriber::set_default` does for subscribers.
    ///
    /// Every call on this thread that no [`scope`](Self::scope) covers uses
    /// it, including calls in tasks spawned onto this thread. On a
    /// current-thread runtime (`#[tokio::test]`'s default) that is every
    /// task, so a server spawned in the test, and the tasks it spawns per
    /// request, all see the test's settings:
    ///
    /// ```
    /// # use resilient_core::{Registry, RetrySpec};
    /// # #[derive(RetrySpec)] #[spec("resilient.retry.pet")] pub struct PetRetry;
    /// # async fn serve() {}
    /// # fn demo(registry: Registry) {
    /// # let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
    /// # rt.block_on(async {
    /// let _guard = registry.set_default();
    /// let server = tokio::spawn(serve()); // its calls use `registry`
    /// # let _ = server.await;
    /// # });
    /// # }
    /// ```
    ///
    /// Tasks that run on other threads (a multi-thread runtime's workers) are
    /// not covered: wrap each request's future in [`scope`](Self::scope)
    /// there. While a default or scope is alive, a call that neither covers
    /// fails with [`Error::NotConfigured`]; it never uses the installed
    /// registry.
    pub fn set_default(&self) -> DefaultGuard {
        ACTIVE.fetch_add(1, Ordering::AcqRel);
        let previous = DEFAULT.with(|d| d.borrow_mut().replace(self.clone()));
        DefaultGuard {
            previous,
            _not_send: PhantomData,
        }
    }

    fn instance(&self, type_id: TypeId) -> Option<&Instance> {
        self.instances.get(&type_id)
    }
}

/// The instance `pick` takes from the registry in use: the task's scope, the
/// thread's default, or (while no scope or default is alive anywhere) the
/// installed registry.
fn lookup<T>(
    spec: &'static str,
    path: &'static str,
    type_id: TypeId,
    pick: impl Fn(&Instance) -> Option<&Arc<T>>,
) -> Result<Arc<T>, Error> {
    let find = |r: &Registry| r.instance(type_id).and_then(&pick).map(Arc::clone);
    let found = if ACTIVE.load(Ordering::Acquire) == 0 {
        INSTALLED.get().and_then(find)
    } else {
        match SCOPED.try_with(find) {
            Ok(found) => found,
            Err(_) => DEFAULT
                .try_with(|d| d.borrow().as_ref().and_then(find))
                .ok()
                .flatten(),
        }
    };
    found.ok_or(Error::NotConfigured { spec, path })
}

/// The retry instance of a spec from the registry in use.
pub(crate) fn lookup_retry(
    spec: &'static str,
    path: &'static str,
    type_id: TypeId,
) -> Result<Arc<Retry>, Error> {
    lookup(spec, path, type_id, |i| match i {
        Instance::Retry(r) => Some(r),
        _ => None,
    })
}

/// The breaker of a spec from the registry in use.
pub(crate) fn lookup_breaker(
    spec: &'static str,
    path: &'static str,
    type_id: TypeId,
) -> Result<Arc<Breaker>, Error> {
    lookup(spec, path, type_id, |i| match i {
        Instance::CircuitBreaker(b) => Some(b),
        _ => None,
    })
}

/// The timeout of a spec from the registry in use.
pub(crate) fn lookup_timeout(
    spec: &'static str,
    path: &'static str,
    type_id: TypeId,
) -> Result<Arc<Timeout>, Error> {
    lookup(spec, path, type_id, |i| match i {
        Instance::Timeout(t) => Some(t),
        _ => None,
    })
}

/// The concurrency limiter of a spec from the registry in use.
pub(crate) fn lookup_concurrency(
    spec: &'static str,
    path: &'static str,
    type_id: TypeId,
) -> Result<Arc<Limiter>, Error> {
    lookup(spec, path, type_id, |i| match i {
        Instance::ConcurrencyLimit(l) => Some(l),
        _ => None,
    })
}

/// The rate limiter of a spec from the registry in use.
pub(crate) fn lookup_rate(
    spec: &'static str,
    path: &'static str,
    type_id: TypeId,
) -> Result<Arc<RateLimiter>, Error> {
    lookup(spec, path, type_id, |i| match i {
        Instance::RateLimiter(r) => Some(r),
        _ => None,
    })
}
