//! The registry: one shared instance per spec, built from validated settings,
//! and reconfigured in place when the settings are reloaded.
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
//!
//! The registry knows no mechanism: each spec's derive records what its
//! mechanism needs ([`SpecEntry`]), and each mechanism's instance implements
//! [`Mechanism`].
//!
//! # Reload
//!
//! [`Registry::reload`] reads and validates every spec's section again,
//! with the same report of every problem as at startup. With any problem,
//! nothing changes. Otherwise each spec whose settings changed runs them for
//! the calls that start afterwards, and keeps the state that fits them (a
//! breaker its state, counts and open-wait deadline, a limit its calls in
//! flight, a rate limiter the permits spent, a budget its tokens); a call
//! in flight finishes under the settings it started with.

mod entry;
mod keyed;
mod mechanism;
mod readiness;
mod shared;
mod snapshot;
mod unread;
pub(crate) mod uses;
pub(crate) use uses::{CrossCheck, Finding};

use std::any::{Any, TypeId};
use std::cell::RefCell;
use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::hash::{BuildHasherDefault, Hasher};
use std::marker::PhantomData;
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};

pub(crate) use crate::versions::{Pinned, Tag, Versions};
pub(crate) use entry::{CallInstance, Key, Shared};
pub use entry::{Slot, Spec, SpecEntry};
pub use mechanism::Mechanism;
pub(crate) use mechanism::Sealed;
pub use readiness::{Readiness, ReadinessRule, Ready, Reason};
#[doc(hidden)]
pub use shared::Context;
pub(crate) use shared::SectionEntry;
pub use shared::{BackendSnapshot, BackendUse};
use snapshot::KeyTable;
pub use snapshot::{KeyStatus, KeysSnapshot, Part, Snapshot, SpecSnapshot};

use crate::error::{Error, Unconfigured};
use crate::keyed::{KeyRef, KeySettings};
use crate::settings::{self, Problem, Section, Value, UNKNOWN_KEY};
use crate::telemetry::{
    Event, GlobalTelemetry, Listeners, Recent, Recorded, Telemetry, TelemetrySettings,
};
use entry::{AnySettings, Instance, KeyedInstances};
pub(crate) use keyed::Keyed;
#[doc(hidden)]
pub use mechanism::KeyShare;

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
#[derive(Clone)]
pub struct Registry {
    /// Behind one `Arc`: a scope's clone of the registry is one increment.
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Registry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Registry")
            .field(
                "specs",
                &self
                    .inner
                    .specs
                    .iter()
                    .map(|h| h.entry.path)
                    .collect::<Vec<_>>(),
            )
            .finish()
    }
}

struct Inner {
    /// Sorted by path, then name.
    specs: Vec<Held>,
    by_type: HashMap<TypeId, usize, BuildHasherDefault<TypeIdHasher>>,
    listeners: Arc<Listeners>,
    /// The registry's own recent events: fallbacks, rejected reloads.
    recent: Recent,
    /// The global telemetry switches; the fallbacks' and reloads' own.
    logging: AtomicBool,
    metrics: AtomicBool,
    /// The global switches as configured, and the reload that changes them.
    global: Mutex<GlobalTelemetry>,
    /// What its own sections built (a shared backend), for its specs.
    context: Context,
    /// Built for every spec linked into the binary: a reload checks for
    /// configuration that no spec reads, as the build did (see [`unread`]).
    whole: bool,
}

/// One spec of a registry: what it is, its instance, and what its
/// settings were read from (for the reload's list of changed keys).
struct Held {
    entry: SpecEntry,
    instance: Arc<dyn Instance>,
    /// The same instance, as a scoped call takes it (by its type).
    any: Arc<dyn Any + Send + Sync>,
    /// The instances of its keys, for a spec that takes `key = ..`.
    keyed: Option<Arc<dyn KeyedInstances>>,
    /// The same, as a scoped call takes them (by their type).
    keyed_any: Option<Arc<dyn Any + Send + Sync>>,
    section: Mutex<Read>,
    /// Its `readiness` rule ([`ReadinessRule::code`]; 0 for a kind that
    /// takes none), reloaded with its section.
    readiness: AtomicU8,
}

/// Hashes a [`TypeId`], which is a hash already, by keeping its bits: a
/// scoped call finds its spec's instance without hashing it again.
#[derive(Default)]
struct TypeIdHasher(u64);

impl Hasher for TypeIdHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        // `TypeId` writes a `u64` (below); anything else, folded in.
        for &b in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(b);
        }
    }

    fn write_u64(&mut self, n: u64) {
        self.0 ^= n;
    }
}

/// One spec's section as last applied.
struct Read {
    raw: Value,
}

/// A spec's section read and validated, not applied yet.
struct Pending {
    raw: Value,
    own: TelemetrySettings,
    /// Its `readiness` rule, for a kind that takes one.
    readiness: Option<ReadinessRule>,
    /// The `keys` table of a spec that takes `key = ..`.
    keys: Option<KeySettings>,
    settings: AnySettings,
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

/// The name problems with the global telemetry section go by.
const GLOBAL: &str = "telemetry switches";

/// The section of `entry` in `root`, as a value (`Nil` when absent).
fn raw_section(root: &Value, path: &str) -> Value {
    settings::at(root, path).cloned().unwrap_or(Value::Nil)
}

/// Reads the global telemetry switches (optional) from `root`.
fn read_global(root: &Value, problems: &mut Vec<Problem>) -> Option<GlobalTelemetry> {
    let mut section = Section::optional(GLOBAL, GlobalTelemetry::PATH, root, problems);
    let global = GlobalTelemetry::read(&mut section);
    section.finish();
    global
}

/// Each value nested deeper than [`settings::MAX_DEPTH`] in what the
/// registry reads (the sections of `entries`, the optional sections, and
/// everything under `resilient`), as one problem per section: found before
/// anything else follows the tree, since the checks and the copies of a
/// section that follow would each have to go as deep.
fn too_deep<'e>(root: &Value, entries: impl Iterator<Item = &'e SpecEntry>) -> Vec<Problem> {
    let problem = |spec: &'static str, path: &'static str, (key, depth): (String, usize)| {
        Problem {
            spec,
            path,
            key,
            rule: format!(
                "is nested {depth} levels deep; configuration is read to a depth of {} levels from its root (a section's settings are a few levels below its path): remove the value, or flatten it",
                settings::MAX_DEPTH
            ),
            found: None,
        }
    };
    let mut problems: Vec<Problem> = entries
        .filter_map(|e| settings::too_deep(root, e.path).map(|d| problem(e.name, e.path, d)))
        .collect();
    if problems.is_empty() {
        let others = SectionEntry::all()
            .map(|s| s.path)
            .filter(|p| !p.starts_with("resilient."));
        problems.extend(
            std::iter::once(unread::RESERVED)
                .chain(others)
                .filter_map(|path| settings::too_deep(root, path).map(|d| problem("", path, d))),
        );
    }
    problems
}

/// Where the value at a dotted path came from, as far as the configuration's
/// source tells (a file's name, the environment), for a problem with
/// configuration that no spec reads. `resilient_config` gives the `config`
/// crate's origins.
pub type Origin<'a> = &'a dyn Fn(&str) -> Option<String>;

/// Reads and validates the section of every entry of `entries` (but the
/// ones whose paths specs of other kinds share) from `root`; with `whole`
/// (every spec of the binary), reports the configuration no spec reads.
fn read_all<'e>(
    entries: impl Iterator<Item = &'e SpecEntry> + Clone,
    shared: &[&'static str],
    root: &Value,
    whole: Option<Origin<'_>>,
    problems: &mut Vec<Problem>,
) -> Vec<Option<Pending>> {
    let mut claims: Vec<unread::Claim> = entries
        .clone()
        .map(|e| unread::Claim {
            name: e.name,
            path: e.path,
            optional: false,
        })
        .collect();
    let blocked = unread::blocked(root, &claims, problems);
    if let Some(origin) = whole {
        claims.push(unread::Claim {
            name: GLOBAL,
            path: GlobalTelemetry::PATH,
            optional: true,
        });
        claims.extend(SectionEntry::all().map(|s| unread::Claim {
            name: s.name,
            path: s.path,
            optional: true,
        }));
        unread::unread(root, &claims, origin, problems);
    }
    let before = problems.len();
    let read: Vec<Option<Pending>> = entries
        .map(|entry| {
            if shared.contains(&entry.path) || blocked.contains(&entry.path) {
                return None;
            }
            let mut section = Section::root(entry.name, entry.path, root, problems);
            let own = TelemetrySettings::read(&mut section);
            let readiness = ReadinessRule::read(&mut section, entry);
            let settings = entry.read(&mut section);
            let keys = entry
                .keyed()
                .then(|| KeySettings::read(&mut section, entry.ejects()).ok_or(()));
            section.finish();
            Some(Pending {
                raw: raw_section(root, entry.path),
                own: own?,
                readiness: readiness?,
                keys: keys.transpose().ok()?,
                settings: settings?,
            })
        })
        .collect();
    // A misspelt key is looked for where it was written: name the file, or
    // that an environment variable set it (where the source tells).
    if let Some(origin) = whole {
        for problem in &mut problems[before..] {
            if problem.key.is_empty() || !problem.rule.starts_with(UNKNOWN_KEY) {
                continue;
            }
            if let Some(from) = origin(&format!("{}.{}", problem.path, problem.key)) {
                problem.rule = format!("{} ({from})", problem.rule);
            }
        }
    }
    read
}

/// Checks each spec's settings (`read`, in the order of `entries`) against
/// what the registry's own sections built.
/// Checks each spec's settings in `context`, then the specs against each
/// other along the annotated fns' chains (once each spec is valid alone);
/// returns the warnings to log if the registry is built.
fn check_all(
    entries: &[SpecEntry],
    read: &[Option<Pending>],
    context: &Context,
    problems: &mut Vec<Problem>,
) -> Vec<String> {
    let alone = problems.len();
    for (entry, pending) in entries.iter().zip(read) {
        let Some(pending) = pending else { continue };
        if let Some((key, rule)) = entry.check(&pending.settings, context) {
            problems.push(Problem {
                spec: entry.name,
                path: entry.path,
                key: key.to_owned(),
                rule,
                found: None,
            });
        }
    }
    if problems.len() > alone {
        return Vec::new();
    }
    let specs: Vec<uses::Checked<'_>> = entries
        .iter()
        .zip(read)
        .filter_map(|(entry, pending)| {
            let pending = pending.as_ref()?;
            Some((entry, &*pending.settings, pending.keys.as_ref()))
        })
        .collect();
    uses::cross_check(&specs, problems)
}

fn sorted(mut problems: Vec<Problem>) -> Vec<Problem> {
    problems.sort_by(|a, b| (a.path, &a.key, a.spec).cmp(&(b.path, &b.key, b.spec)));
    problems
}

impl RegistryBuilder {
    /// A builder of a registry of no spec, for a unit test.
    #[cfg(all(test, feature = "admin"))]
    pub(crate) fn none() -> Self {
        Self {
            only: Some(Vec::new()),
        }
    }

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

    /// Reads and validates each spec's section in `root`, and the global
    /// telemetry switches (the optional section `resilient.telemetry`).
    ///
    /// # Errors
    ///
    /// Every problem of every spec, sorted by path then key.
    pub fn build(self, root: &Value) -> Result<Registry, Vec<Problem>> {
        self.build_with_origins(root, &|_| None)
    }

    /// As [`build`](Self::build), with `origin` naming where a value came
    /// from in a problem with configuration that no spec reads (checked
    /// when the builder covers every spec linked into the binary).
    ///
    /// # Errors
    ///
    /// Every problem, sorted by path then key.
    pub fn build_with_origins(
        self,
        root: &Value,
        origin: Origin<'_>,
    ) -> Result<Registry, Vec<Problem>> {
        let whole = self.only.is_none();
        let mut entries: Vec<SpecEntry> = match self.only {
            Some(only) => only,
            None => SpecEntry::all().copied().collect(),
        };
        entries.sort_by(|a, b| (a.path, a.name).cmp(&(b.path, b.name)));
        let deep = too_deep(root, entries.iter());
        if !deep.is_empty() {
            return Err(deep);
        }
        let mut problems = Vec::new();
        let global = read_global(root, &mut problems);
        let listeners = Arc::new(Listeners::default());
        let context = Context::build(
            root,
            &mut problems,
            &listeners,
            TelemetrySettings::default().under(global.unwrap_or_default()),
        );
        let shared = shared_sections(&entries, &mut problems);
        let read = read_all(
            entries.iter(),
            &shared,
            root,
            whole.then_some(origin),
            &mut problems,
        );
        let warnings = check_all(&entries, &read, &context, &mut problems);
        context.dedupe_near(&mut problems);
        let Some(global) = global.filter(|_| problems.is_empty()) else {
            return Err(sorted(problems));
        };
        let mut specs = Vec::with_capacity(entries.len());
        for (entry, pending) in entries.into_iter().zip(read) {
            let Some(Pending {
                raw,
                own,
                readiness,
                keys,
                settings,
            }) = pending
            else {
                continue;
            };
            let telemetry = Telemetry::new(
                entry.name,
                entry.path,
                entry.kind,
                entry.outcomes(),
                own.under(global),
                Arc::clone(&listeners),
            );
            let Some(instance) = entry.build(settings, telemetry) else {
                continue;
            };
            instance.attach(&context);
            let any = Arc::clone(&instance).into_any();
            let keyed = keys.and_then(|keys| entry.build_keyed(&any, keys));
            specs.push(Held {
                entry,
                any,
                instance,
                keyed_any: keyed.as_ref().map(|k| Arc::clone(k).into_any()),
                keyed,
                section: Mutex::new(Read { raw }),
                readiness: AtomicU8::new(readiness.map_or(0, ReadinessRule::code)),
            });
        }
        let by_type = specs
            .iter()
            .enumerate()
            .map(|(i, h)| ((h.entry.type_id)(), i))
            .collect();
        let recent = Recent::new(Arc::clone(&listeners.seq), global.recent_events);
        let registry = Registry {
            inner: Arc::new(Inner {
                specs,
                by_type,
                listeners,
                recent,
                logging: AtomicBool::new(global.logging),
                metrics: AtomicBool::new(global.metrics),
                global: Mutex::new(global),
                context,
                whole,
            }),
        };
        registry.warn_no_effect(warnings);
        Ok(registry)
    }
}

/// What a [`Registry::reload`] changed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[non_exhaustive]
pub struct Reloaded {
    /// The global telemetry switches' keys that changed, as in
    /// [`SpecChange::keys`].
    pub global: Vec<String>,
    /// Each spec whose section changed, in path order.
    pub specs: Vec<SpecChange>,
}

/// What a reload changed for one spec.
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[non_exhaustive]
pub struct SpecChange {
    /// The spec type's name.
    pub spec: &'static str,
    /// Its config path.
    pub path: &'static str,
    /// Each key that changed, as `key: old -> new` (`unset` for a key that
    /// was not, or is no longer, written).
    pub keys: Vec<String>,
    /// What of the spec's state did not carry over, in words (empty when
    /// all of it did, or when the settings are the same, written another
    /// way).
    pub notes: Vec<String>,
}

impl Registry {
    /// A builder; see [`RegistryBuilder`].
    pub fn builder() -> RegistryBuilder {
        RegistryBuilder::default()
    }

    /// Whether the registry holds an instance of spec `S`.
    pub fn contains<S: Spec>(&self) -> bool {
        self.inner.by_type.contains_key(&TypeId::of::<S>())
    }

    /// The number of specs in the registry.
    pub fn len(&self) -> usize {
        self.inner.specs.len()
    }

    /// Whether the registry holds no spec.
    pub fn is_empty(&self) -> bool {
        self.inner.specs.is_empty()
    }

    /// Makes this the registry of the whole process.
    ///
    /// # Errors
    ///
    /// [`AlreadyInstalled`] when one was installed before; the first stays.
    pub fn install(self) -> Result<(), AlreadyInstalled> {
        INSTALLED.set(self).map_err(|_| AlreadyInstalled)?;
        // The installed registry lives as long as the process: each spec's
        // slot can hold a plain reference to its instance.
        if let Some(installed) = INSTALLED.get() {
            for held in &installed.inner.specs {
                held.entry.install(&*held.instance);
                if let Some(keyed) = &held.keyed {
                    held.entry.install_keyed(&**keyed);
                }
            }
        }
        Ok(())
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
    /// not covered: build that runtime with
    /// [`set_default_on`](Self::set_default_on), or wrap each request's
    /// future in [`scope`](Self::scope). While a default or scope is alive,
    /// a call that neither covers fails with [`Error::NotConfigured`]
    /// ([`Unconfigured::OutsideTestRegistry`]); it never uses the installed
    /// registry.
    pub fn set_default(&self) -> DefaultGuard {
        ACTIVE.fetch_add(1, Ordering::AcqRel);
        let previous = DEFAULT.with(|d| d.borrow_mut().replace(self.clone()));
        DefaultGuard {
            previous,
            _not_send: PhantomData,
        }
    }

    /// Makes this registry the default of every thread that the runtime
    /// `builder` builds starts (its workers and its blocking threads), as
    /// [`set_default`](Self::set_default) does for one thread: what a test
    /// of a server on a multi-thread runtime needs, whose requests run on
    /// any worker.
    ///
    /// It sets the builder's `on_thread_start` and `on_thread_stop` hooks
    /// (tokio keeps one of each, so a hook set before is replaced). Each
    /// thread keeps the registry until it stops; the runtime's threads
    /// stop when it is dropped or shut down.
    ///
    /// ```
    /// # use resilient_core::{Registry, RetrySpec};
    /// # #[derive(RetrySpec)] #[spec("resilient.retry.pet")] pub struct PetRetry;
    /// # async fn serve() {}
    /// # fn demo(registry: Registry) -> std::io::Result<()> {
    /// let runtime = registry
    ///     .set_default_on(tokio::runtime::Builder::new_multi_thread().enable_all())
    ///     .build()?;
    /// // A server spawned on it, and every task it spawns on any worker,
    /// // uses `registry`.
    /// runtime.block_on(async { tokio::spawn(serve()).await })?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn set_default_on<'b>(
        &self,
        builder: &'b mut tokio::runtime::Builder,
    ) -> &'b mut tokio::runtime::Builder {
        thread_local! {
            static RUNTIME_DEFAULT: RefCell<Option<DefaultGuard>> = const { RefCell::new(None) };
        }
        let registry = self.clone();
        builder
            .on_thread_start(move || {
                let guard = registry.set_default();
                let _ = RUNTIME_DEFAULT.try_with(|d| *d.borrow_mut() = Some(guard));
            })
            .on_thread_stop(|| {
                let _ = RUNTIME_DEFAULT.try_with(|d| d.borrow_mut().take());
            })
    }

    /// The instance of spec type `type_id`, if it is an `M`.
    fn find<M: Mechanism>(&self, type_id: TypeId) -> Option<Arc<M>> {
        let held = self.inner.specs.get(*self.inner.by_type.get(&type_id)?)?;
        Arc::clone(&held.any).downcast::<M>().ok()
    }

    /// The keyed instances of spec type `type_id`, if it is an `M` spec.
    fn find_keyed<M: Mechanism>(&self, type_id: TypeId) -> Option<Arc<Keyed<M>>> {
        let held = self.inner.specs.get(*self.inner.by_type.get(&type_id)?)?;
        Arc::clone(held.keyed_any.as_ref()?)
            .downcast::<Keyed<M>>()
            .ok()
    }

    /// The spec at `path` (the first, in name order, if several share it).
    pub(crate) fn entry_at(&self, path: &str) -> Option<SpecEntry> {
        self.inner
            .specs
            .iter()
            .find(|h| h.entry.path == path)
            .map(|h| h.entry)
    }

    /// The paths of the specs of kind `kind`, in path order.
    pub(crate) fn paths_of(&self, kind: crate::spec::SpecKind) -> Vec<&'static str> {
        self.inner
            .specs
            .iter()
            .filter(|h| h.entry.kind == kind)
            .map(|h| h.entry.path)
            .collect()
    }

    /// The instance of the spec at `path`, if it is an `M`: for what
    /// names a spec by its path (an operator's action).
    pub(crate) fn instance_at<M: Mechanism>(&self, path: &str) -> Option<(SpecEntry, Arc<M>)> {
        self.inner
            .specs
            .iter()
            .filter(|h| h.entry.path == path)
            .find_map(|h| Some((h.entry, Arc::clone(&h.any).downcast::<M>().ok()?)))
    }

    /// The keyed instances of the spec at `path`, if it is an `M` spec
    /// that takes keys.
    pub(crate) fn keyed_at<M: Mechanism>(&self, path: &str) -> Option<Arc<Keyed<M>>> {
        self.inner
            .specs
            .iter()
            .filter(|h| h.entry.path == path)
            .find_map(|h| {
                Arc::clone(h.keyed_any.as_ref()?)
                    .downcast::<Keyed<M>>()
                    .ok()
            })
    }

    /// The installed registry, if [`install`](Self::install) was called: for
    /// a health endpoint's [`snapshot`](Self::snapshot), or to
    /// [`subscribe`](Self::subscribe) to the application's events.
    pub fn installed() -> Option<&'static Registry> {
        INSTALLED.get()
    }

    /// Calls `listener` with every [`Event`] of every spec of this registry,
    /// of each `#[fallback]` taken while it is the registry in use, and of
    /// its reloads, for as long as the registry lives or until
    /// [`unsubscribe`](Self::unsubscribe).
    ///
    /// A listener runs on the thread of the call that published the event,
    /// inside that call: keep it short (count, or send to a channel), and do
    /// not call annotated fns from it.
    ///
    /// ```
    /// # use std::sync::{Arc, atomic::{AtomicU64, Ordering}};
    /// # use resilient_core::{Registry, telemetry::Event};
    /// # fn demo(registry: &Registry) {
    /// let retries = Arc::new(AtomicU64::new(0));
    /// let counter = Arc::clone(&retries);
    /// let subscription = registry.subscribe(move |event| {
    ///     if let Event::RetryScheduled { .. } = event {
    ///         counter.fetch_add(1, Ordering::Relaxed);
    ///     }
    /// });
    /// // ... and when it is no longer wanted:
    /// registry.unsubscribe(subscription);
    /// # }
    /// ```
    pub fn subscribe(&self, listener: impl Fn(&Event) + Send + Sync + 'static) -> Subscription {
        Subscription(self.inner.listeners.add(None, Box::new(listener)))
    }

    /// Calls `listener` with every [`Event`] of spec `S` (see
    /// [`subscribe`](Self::subscribe)).
    pub fn subscribe_to<S: Spec>(
        &self,
        listener: impl Fn(&Event) + Send + Sync + 'static,
    ) -> Subscription {
        Subscription(
            self.inner
                .listeners
                .add(Some((S::NAME, S::PATH)), Box::new(listener)),
        )
    }

    /// Stops the listener that [`subscribe`](Self::subscribe) or
    /// [`subscribe_to`](Self::subscribe_to) returned `subscription` for;
    /// `false` if it was stopped before (or is another registry's). An event
    /// being handed to it on another thread at that moment may still reach
    /// it once.
    pub fn unsubscribe(&self, subscription: Subscription) -> bool {
        self.inner.listeners.remove(subscription.0)
    }

    /// The latest events of every spec of this registry, and of the
    /// registry itself (fallbacks taken while it is in use, rejected
    /// reloads), oldest first: kept whether or not anyone listens, so that
    /// what happened before anyone looked can be read (Resilience4j's
    /// event buffer).
    ///
    /// Each spec keeps its latest `telemetry.recent_events` (100 unless
    /// configured, the global `resilient.telemetry.recent_events`), its
    /// keys' included; the registry keeps the global number of its own. A
    /// run of rejections by one instance, with no other event of its spec
    /// between them, is one entry with its [`count`](Recorded::count).
    ///
    /// ```
    /// # use resilient_core::{Registry, telemetry::Event};
    /// # fn demo(registry: &Registry) {
    /// for recorded in registry.recent_events() {
    ///     if let Event::StateTransition { spec, to, .. } = &recorded.event {
    ///         println!("#{} at {} ms: {spec} -> {to}", recorded.seq, recorded.at_ms);
    ///     }
    /// }
    /// # }
    /// ```
    pub fn recent_events(&self) -> Vec<Recorded> {
        self.recent_after(0)
    }

    /// The latest events of the spec at `path` (its keys' included), oldest
    /// first; `None` when the registry has no spec there. See
    /// [`recent_events`](Self::recent_events).
    pub fn recent_events_of(&self, path: &str) -> Option<Vec<Recorded>> {
        let mut out = Vec::new();
        let mut found = false;
        for held in self.inner.specs.iter().filter(|h| h.entry.path == path) {
            found = true;
            held.instance.telemetry().recent().after(0, &mut out);
        }
        found.then(|| {
            out.sort_by_key(|r| r.seq);
            out
        })
    }

    /// Whether a listener is subscribed.
    #[cfg(all(test, feature = "admin"))]
    pub(crate) fn listening(&self) -> bool {
        self.inner.listeners.any()
    }

    /// The latest event of each spec's ring (and the registry's, and its
    /// backends'), with its count now: where a run of rejections grows.
    #[cfg(feature = "admin")]
    pub(crate) fn recent_latest(&self) -> Vec<Recorded> {
        let mut out: Vec<Recorded> = self
            .inner
            .specs
            .iter()
            .filter_map(|h| h.instance.telemetry().recent().last())
            .chain(self.inner.recent.last())
            .collect();
        let mut backends = Vec::new();
        self.inner.context.recent(0, &mut backends);
        out.extend(backends.into_iter().max_by_key(|r| r.seq));
        out
    }

    /// The number given to the latest event (kept or not).
    #[cfg(feature = "admin")]
    pub(crate) fn last_event_seq(&self) -> u64 {
        self.inner.listeners.seq.load(Ordering::Relaxed)
    }

    /// Every event kept with a number above `after`, oldest first.
    pub(crate) fn recent_after(&self, after: u64) -> Vec<Recorded> {
        let mut out = Vec::new();
        for held in &self.inner.specs {
            held.instance.telemetry().recent().after(after, &mut out);
        }
        self.inner.recent.after(after, &mut out);
        self.inner.context.recent(after, &mut out);
        out.sort_by_key(|r| r.seq);
        out
    }

    /// The state of every spec now, sorted by path: what a health endpoint
    /// shows. Serializable with the `serde` feature.
    ///
    /// Each spec's counts are read one after the other, without stopping
    /// calls: a snapshot taken under load is a close view, not an atomic one.
    pub fn snapshot(&self) -> Snapshot {
        let held: Vec<_> = self
            .inner
            .specs
            .iter()
            .map(|h| (h, h.section.lock().unwrap_or_else(PoisonError::into_inner)))
            .collect();
        let sections: Vec<(&'static str, &'static str, &Value)> = held
            .iter()
            .map(|(h, read)| (h.entry.name, h.entry.path, &read.raw))
            .collect();
        let backends = self.inner.context.snapshots(&sections);
        drop(sections);
        drop(held);
        Snapshot {
            backends,
            specs: self
                .inner
                .specs
                .iter()
                .map(|h| {
                    SpecSnapshot::new(
                        &h.entry,
                        ReadinessRule::from_code(h.readiness.load(Ordering::Relaxed)),
                        (h.instance.status(), h.instance.unhealthy()),
                        h.instance.settings(),
                        h.keyed
                            .as_ref()
                            .map(|k| KeyTable::new(k.settings(), h.entry.ejects())),
                        h.keyed
                            .as_ref()
                            .map(|k| k.snapshot())
                            .filter(|k| k.count > 0 || k.overflowed > 0),
                    )
                })
                .collect(),
        }
    }

    /// Reads and validates every spec's section in `root` again, as
    /// [`RegistryBuilder::build`] does, and applies what changed.
    ///
    /// With any problem nothing changes: every spec keeps running its
    /// settings, and the problems (all of them, as at startup) are returned
    /// and logged at ERROR. Otherwise each spec whose settings changed runs
    /// the new ones for the calls that start from now on, keeping the state
    /// that fits them (see the [module docs](self)); a call in flight
    /// finishes under the settings it started with. Each change is logged at
    /// INFO (target `resilient::registry`, the keys with their old and new
    /// values), published as [`Event::Reloaded`], and counted in
    /// `resilient_reloads_total` (with the global metrics switch).
    ///
    /// A section that disappears is a problem, as at startup: every spec of
    /// the registry needs its section. An optional table that disappears
    /// (`retry_budget`, `backoff`, a spec's `telemetry`) takes its defaults
    /// back, as it would at startup. Specs are those the registry was built
    /// with: a section of another spec is not read.
    ///
    /// From a `config::Config`, `resilient_config::reload_registry(&registry,
    /// &config)` (or `resilient_config::reload(&config)` for the installed
    /// registry) converts the configuration and returns a rejection as the
    /// same report as at startup.
    ///
    /// # Errors
    ///
    /// Every problem of every spec, sorted by path then key.
    pub fn reload(&self, root: &Value) -> Result<Reloaded, Vec<Problem>> {
        self.reload_with_origins(root, &|_| None)
    }

    /// As [`reload`](Self::reload), with `origin` naming where a value
    /// came from (see [`RegistryBuilder::build_with_origins`]).
    ///
    /// # Errors
    ///
    /// Every problem, sorted by path then key.
    pub fn reload_with_origins(
        &self,
        root: &Value,
        origin: Origin<'_>,
    ) -> Result<Reloaded, Vec<Problem>> {
        let inner = &*self.inner;
        // One reload at a time: two would interleave their settings.
        let mut global_was = inner.global.lock().unwrap_or_else(PoisonError::into_inner);
        let deep = too_deep(root, inner.specs.iter().map(|h| &h.entry));
        if !deep.is_empty() {
            self.rejected(&deep);
            return Err(deep);
        }
        let mut problems = Vec::new();
        let global = read_global(root, &mut problems);
        let read = read_all(
            inner.specs.iter().map(|h| &h.entry),
            &[],
            root,
            inner.whole.then_some(origin),
            &mut problems,
        );
        let changed = inner.context.changed(root);
        let mut warnings = Vec::new();
        if changed.is_empty() {
            let entries: Vec<SpecEntry> = inner.specs.iter().map(|h| h.entry).collect();
            warnings = check_all(&entries, &read, &inner.context, &mut problems);
        }
        problems.extend(changed);
        let Some(global) = global.filter(|_| problems.is_empty()) else {
            let problems = sorted(problems);
            self.rejected(&problems);
            return Err(problems);
        };
        let mut reloaded = Reloaded {
            global: diff(&global_value(*global_was), &global_value(global)),
            specs: Vec::new(),
        };
        *global_was = global;
        inner.logging.store(global.logging, Ordering::Relaxed);
        inner.metrics.store(global.metrics, Ordering::Relaxed);
        inner.recent.resize(global.recent_events);
        for (held, pending) in inner.specs.iter().zip(read) {
            let Some(Pending {
                raw,
                own,
                readiness,
                keys,
                settings,
            }) = pending
            else {
                continue;
            };
            held.readiness
                .store(readiness.map_or(0, ReadinessRule::code), Ordering::Relaxed);
            let mut applied = held.section.lock().unwrap_or_else(PoisonError::into_inner);
            let telemetry = held.instance.telemetry();
            let switches = own.under(global);
            telemetry.switch(switches);
            held.instance.telemetry_switched();
            let keyed_notes = match (&held.keyed, keys) {
                (Some(keyed), Some(keys)) => keyed.reconfigure(&settings, keys, switches),
                _ => Vec::new(),
            };
            let mut notes = held.instance.reconfigure(settings).unwrap_or_default();
            notes.extend(
                keyed_notes
                    .into_iter()
                    .map(|n| format!("every key's instance: {n}")),
            );
            let keys = diff(&applied.raw, &raw);
            *applied = Read { raw };
            drop(applied);
            if keys.is_empty() && notes.is_empty() {
                continue;
            }
            let (spec, path) = (held.entry.name, held.entry.path);
            if telemetry.logging() {
                let notes = notes.iter().map(|n| format!(" ({n})")).collect::<String>();
                tracing::info!(
                    target: "resilient::registry",
                    spec, path,
                    "reloaded `{spec}` at `{path}`: {}{notes}",
                    keys.join("; ")
                );
            }
            telemetry.emit(|| Event::Reloaded {
                spec,
                path,
                keys: keys.clone(),
            });
            reloaded.specs.push(SpecChange {
                spec,
                path,
                keys,
                notes,
            });
        }
        if !reloaded.global.is_empty() && global.logging {
            tracing::info!(
                target: "resilient::registry",
                path = GlobalTelemetry::PATH,
                "reloaded the global telemetry switches at `{}`: {}",
                GlobalTelemetry::PATH,
                reloaded.global.join("; ")
            );
        }
        if global.metrics {
            metrics::counter!("resilient_reloads_total", "result" => "applied").increment(1);
        }
        self.warn_no_effect(warnings);
        Ok(reloaded)
    }

    /// Every spec of the registry with the settings it runs.
    pub(crate) fn spec_settings(&self) -> Vec<(SpecEntry, Arc<dyn Part>)> {
        self.inner
            .specs
            .iter()
            .map(|h| (h.entry, h.instance.settings()))
            .collect()
    }

    /// Logs at WARN each setting that none of the annotated fns using its
    /// spec can make act (see `uses`): valid, so not a problem, but most
    /// likely not what its author meant.
    /// With them, `checked`: what the checks of specs against each other
    /// found that may be meant.
    fn warn_no_effect(&self, checked: Vec<String>) {
        let held: Vec<_> = self
            .inner
            .specs
            .iter()
            .map(|h| (h, h.section.lock().unwrap_or_else(PoisonError::into_inner)))
            .collect();
        let raws: Vec<&Value> = held.iter().map(|(_, read)| &read.raw).collect();
        let sections = self.inner.context.unused(&raws);
        let lines = uses::no_effect(held.iter().map(|(h, read)| (&h.entry, &read.raw)));
        for line in lines.into_iter().chain(sections).chain(checked) {
            tracing::warn!(target: "resilient::registry", "{line}");
        }
    }

    /// Tells of a reload that found `problems`: nothing was applied.
    fn rejected(&self, problems: &[Problem]) {
        let n = problems.len();
        let list: String = problems.iter().map(|p| format!("\n  - {p}")).collect();
        tracing::error!(
            target: "resilient::registry",
            problems = n,
            "configuration reload rejected, every spec keeps its running settings ({n} problem{}):{list}",
            if n == 1 { "" } else { "s" }
        );
        self.inner.publish(Event::ReloadRejected { problems: n });
        if self.inner.metrics.load(Ordering::Relaxed) {
            metrics::counter!("resilient_reloads_total", "result" => "rejected").increment(1);
        }
    }
}

/// A listener registered with [`Registry::subscribe`]: give it to
/// [`Registry::unsubscribe`] to stop it.
/// Dropping it keeps the listener for the registry's life.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Subscription(u64);

/// The global switches as a section, for the reload's list of changes.
fn global_value(g: GlobalTelemetry) -> Value {
    let switch = |on| Value::Table(BTreeMap::from([("enabled".to_owned(), Value::Bool(on))]));
    Value::Table(BTreeMap::from([
        ("logging".to_owned(), switch(g.logging)),
        ("metrics".to_owned(), switch(g.metrics)),
        (
            "recent_events".to_owned(),
            Value::Int(i128::from(g.recent_events)),
        ),
    ]))
}

impl Inner {
    /// Publishes an event of the registry itself (no spec's): to the
    /// listeners, and among the registry's recent events.
    fn publish(&self, event: Event) {
        if self.listeners.any() {
            self.listeners.emit("", "", &event);
        }
        self.recent.record(event);
    }
}

/// The keys whose values differ between two sections, each as
/// `key: old -> new`, sorted.
fn diff(old: &Value, new: &Value) -> Vec<String> {
    let (mut before, mut after) = (BTreeMap::new(), BTreeMap::new());
    flatten("", old, &mut before);
    flatten("", new, &mut after);
    let keys: std::collections::BTreeSet<&String> = before.keys().chain(after.keys()).collect();
    keys.into_iter()
        .filter_map(|k| {
            let (b, a) = (before.get(k), after.get(k));
            (b != a).then(|| {
                format!(
                    "{k}: {} -> {}",
                    b.map_or("unset", String::as_str),
                    a.map_or("unset", String::as_str)
                )
            })
        })
        .collect()
}

/// Each leaf of `value` under its dotted key, as a problem would show it.
fn flatten(prefix: &str, value: &Value, out: &mut BTreeMap<String, String>) {
    match value {
        Value::Table(t) => {
            for (k, v) in t {
                let key = if prefix.is_empty() {
                    k.clone()
                } else {
                    format!("{prefix}.{k}")
                };
                flatten(&key, v, out);
            }
        }
        Value::Nil => {}
        Value::List(items) => {
            let shown: Vec<String> = items.iter().map(ToString::to_string).collect();
            out.insert(prefix.to_owned(), format!("[{}]", shown.join(", ")));
        }
        other => {
            out.insert(prefix.to_owned(), other.to_string());
        }
    }
}

/// Reports each path that specs of different kinds share, once, naming
/// them all, and returns those paths: their sections are not read, since one
/// table cannot hold the settings of two mechanisms and reading it for each
/// would report every key of one as unknown to the other.
fn shared_sections(entries: &[SpecEntry], problems: &mut Vec<Problem>) -> Vec<&'static str> {
    let mut shared = Vec::new();
    for entry in entries {
        if shared.contains(&entry.path) {
            continue;
        }
        let mut on_path: Vec<&SpecEntry> =
            entries.iter().filter(|e| e.path == entry.path).collect();
        if on_path.iter().all(|e| e.kind == entry.kind) {
            continue;
        }
        on_path.sort_by_key(|e| e.name);
        let named = on_path
            .iter()
            .map(|e| format!("`{}` (a {} spec)", e.name, e.kind))
            .collect::<Vec<_>>()
            .join(", ");
        problems.push(Problem {
            spec: on_path[0].name,
            path: entry.path,
            key: String::new(),
            rule: format!(
                "is the section of specs of different kinds: {named}; one section configures one mechanism, so give each spec its own path in `#[spec(\"..\")]`"
            ),
            found: None,
        });
        shared.push(entry.path);
    }
    shared
}

impl<M: Mechanism> Key<M> {
    /// The error of a call whose spec has no instance in the registry in use.
    #[cold]
    pub(crate) fn not_configured(&self) -> Error {
        let reason = unconfigured();
        let error = Error::NotConfigured {
            spec: self.name,
            path: self.path,
            reason,
        };
        let logged = &(self.slot)().not_configured_logged;
        if !logged.load(Ordering::Relaxed) && !logged.swap(true, Ordering::Relaxed) {
            tracing::error!(
                target: "resilient::registry",
                spec = self.name, path = self.path, reason = ?reason,
                "{error}; every call of this spec that finds no settings fails with `NotConfigured` (logged once per spec)"
            );
        }
        error
    }
}

/// Why a call just found no instance of its spec: as [`lookup`] looks.
fn unconfigured() -> Unconfigured {
    if ACTIVE.load(Ordering::Acquire) == 0 {
        return match INSTALLED.get() {
            Some(_) => Unconfigured::NotInRegistry,
            None => Unconfigured::NothingInstalled,
        };
    }
    let in_scope = SCOPED.try_with(|_| ()).is_ok()
        || DEFAULT.try_with(|d| d.borrow().is_some()).unwrap_or(false);
    if in_scope {
        Unconfigured::NotInRegistry
    } else {
        Unconfigured::OutsideTestRegistry
    }
}

/// Runs `f` with the registry in use (as a call would find it), if there is
/// one.
fn with_registry_in_use(f: impl FnOnce(Option<&Registry>)) {
    if ACTIVE.load(Ordering::Acquire) == 0 {
        f(INSTALLED.get());
        return;
    }
    match SCOPED.try_with(Registry::clone) {
        Ok(r) => f(Some(&r)),
        Err(_) => {
            let r = DEFAULT.try_with(|d| d.borrow().clone()).ok().flatten();
            f(r.as_ref());
        }
    }
}

/// A `#[fallback]` of fn `function` answered a failure: its log line, event
/// and metric, under the global telemetry switches of the registry in use
/// (a fallback has no spec of its own).
pub(crate) fn fallback_taken(function: &'static str) {
    with_registry_in_use(|registry| {
        let (logging, metrics) = match registry {
            Some(r) => (
                r.inner.logging.load(Ordering::Relaxed),
                r.inner.metrics.load(Ordering::Relaxed),
            ),
            None => (true, false),
        };
        if logging {
            crate::telemetry::on_caller_span(crate::telemetry::span_fields::FALLBACK, function);
            tracing::debug!(target: "resilient::fallback", r#fn = function, "fallback taken");
        }
        if metrics {
            metrics::counter!("resilient_fallbacks_total", "function" => function).increment(1);
        }
        if let Some(r) = registry {
            r.inner.publish(Event::FallbackTaken { function });
        }
    });
}

/// The instance of `key`'s spec in the registry in use: the task's scope,
/// the thread's default, or (while no scope or default is alive anywhere)
/// the installed registry, through the spec's slot. Inlined into each call,
/// so that the spec's slot is a static the call reads directly.
#[inline(always)]
pub(crate) fn lookup<M: Mechanism>(key: &Key<M>) -> Option<Shared<M>> {
    if ACTIVE.load(Ordering::Acquire) == 0 {
        let instance = (key.slot)().instance.get().copied()?;
        return Some(CallInstance::Borrowed(instance));
    }
    lookup_scoped(key)
}

/// The instance of `of` among the keyed instances of `key`'s spec in the
/// registry in use (see [`lookup`]).
#[inline(always)]
pub(crate) fn lookup_keyed<M: Mechanism>(key: &Key<M>, of: KeyRef<'_>) -> Option<Shared<M>> {
    if ACTIVE.load(Ordering::Acquire) == 0 {
        let keyed = (key.slot)().keyed.get().copied()?;
        return Some(CallInstance::Owned(keyed.get(of)));
    }
    lookup_keyed_scoped(key, of)
}

/// [`lookup_keyed`] while a scope or default registry is alive.
#[inline(never)]
fn lookup_keyed_scoped<M: Mechanism>(key: &Key<M>, of: KeyRef<'_>) -> Option<Shared<M>> {
    in_scope(|r| r.find_keyed::<M>((key.type_id)())).map(|keyed| CallInstance::Owned(keyed.get(of)))
}

/// [`lookup`] while a scope or default registry is alive: the rare path.
#[inline(never)]
fn lookup_scoped<M: Mechanism>(key: &Key<M>) -> Option<Shared<M>> {
    in_scope(|r| r.find::<M>((key.type_id)())).map(CallInstance::Owned)
}

/// What `find` finds in the registry of the task's scope, or else of the
/// thread's default.
fn in_scope<T>(find: impl Fn(&Registry) -> Option<T>) -> Option<T> {
    match SCOPED.try_with(&find) {
        Ok(found) => found,
        Err(_) => DEFAULT
            .try_with(|d| d.borrow().as_ref().and_then(&find))
            .ok()
            .flatten(),
    }
}

/// The handle of spec `S`'s instance in the registry in use: what each
/// mechanism's `get()` builds its handle from.
pub(crate) fn handle<S: Spec>() -> Result<Shared<S::Mechanism>, Error> {
    let key = const { &Key::of::<S>() };
    lookup(key).ok_or_else(|| key.not_configured())
}

/// The handle of the instance of `of`, among the keyed instances of spec
/// `S` in the registry in use.
pub(crate) fn handle_keyed<S: Spec>(of: KeyRef<'_>) -> Result<Shared<S::Mechanism>, Error> {
    let key = const { &Key::of::<S>() };
    lookup_keyed(key, of).ok_or_else(|| key.not_configured())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table<const N: usize>(pairs: [(&str, Value); N]) -> Value {
        Value::Table(pairs.into_iter().map(|(k, v)| (k.to_owned(), v)).collect())
    }

    #[test]
    fn a_diff_names_changed_added_and_removed_keys_with_their_values() {
        let old = table([
            ("delay", Value::Str("100ms".into())),
            ("attempts", Value::Int(2)),
            ("backoff", table([("multiplier", Value::Int(2))])),
        ]);
        let new = table([
            ("delay", Value::Str("200ms".into())),
            ("attempts", Value::Int(2)),
            ("timeout", Value::Str("1s".into())),
        ]);
        assert_eq!(
            diff(&old, &new),
            vec![
                "backoff.multiplier: 2 -> unset",
                "delay: \"100ms\" -> \"200ms\"",
                "timeout: unset -> \"1s\"",
            ]
        );
    }
}
