//! Reads, validates and installs the settings of every resilient spec from a
//! [`config::Config`], at startup.
//!
//! ```no_run
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let settings = config::Config::builder()
//!     .add_source(config::File::with_name("resilient"))
//!     .add_source(config::Environment::with_prefix("APP").separator("__"))
//!     .build()?;
//! // Validates every spec linked into the binary and reports every problem at once.
//! resilient_config::init(&settings)?;
//! # Ok(())
//! # }
//! ```
//!
//! Each spec's settings sit at its absolute path (`#[spec("resilient.retry.pet")]`
//! reads the table `resilient.retry.pet`); nothing is inherited from a default
//! section. A missing section, a missing required key, a value that breaks a
//! rule and an unknown key (with the nearest known key suggested) are all
//! errors, and [`init`] returns all of them in one [`ConfigError`].
//!
//! Keys are `snake_case`. The `config` crate lower-cases keys read from
//! environment variables, so `APP__RESILIENT__RETRY__PET__DELAY_STEP=10ms`
//! overrides `delay_step`; a camelCase key could never be overridden that way.
//!
//! # Reload
//!
//! [`reload`] reads the configuration again while the application runs:
//! with any problem nothing changes (every problem is reported, as at
//! startup); otherwise each spec whose settings changed runs the new ones
//! for the calls that start afterwards, and keeps its state (see
//! [`Registry::reload`](resilient_core::Registry::reload)).
//!
//! # Tests
//!
//! A test binary links the specs of every test in it. Build a registry for the
//! specs a test uses with [`build`] and run the test inside
//! [`Registry::scope`](resilient_core::Registry::scope): tests then run in
//! parallel in one process, each with its own state, and need no section for
//! the specs of other tests.
//!
//! ```
//! use resilient_core::{Registry, RetrySpec};
//!
//! #[derive(RetrySpec)]
//! #[spec("resilient.retry.pet")]
//! pub struct PetRetry;
//!
//! let settings = config::Config::builder()
//!     .set_override("resilient.retry.pet.delay", "10ms")?
//!     .set_override("resilient.retry.pet.attempts", 2)?
//!     .build()?;
//! let registry = resilient_config::build(Registry::builder().spec::<PetRetry>(), &settings)?;
//! assert!(registry.contains::<PetRetry>());
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use std::collections::BTreeMap;
use std::fmt;

use resilient_core::registry::AlreadyInstalled;
use resilient_core::settings::{Problem, Value};
use resilient_core::{Registry, RegistryBuilder, Reloaded};

/// Why the settings could not be installed.
///
/// Its `Debug` output is its `Display` output, the list of problems, so that
/// `fn main() -> Result<(), Box<dyn Error>>` prints a readable report when
/// `init(&settings)?` fails.
#[non_exhaustive]
pub enum ConfigError {
    /// One or more specs have missing or invalid settings; every problem of
    /// every spec is listed.
    Invalid(Vec<Problem>),
    /// A registry was installed before.
    AlreadyInstalled(AlreadyInstalled),
    /// [`reload`] found no installed registry: call [`init`] first.
    NotInstalled,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ConfigError::Invalid(problems) => {
                let n = problems.len();
                write!(
                    f,
                    "invalid resilient configuration ({n} problem{}):",
                    if n == 1 { "" } else { "s" }
                )?;
                for problem in problems {
                    write!(f, "\n  - {problem}")?;
                }
                Ok(())
            }
            ConfigError::AlreadyInstalled(e) => e.fmt(f),
            ConfigError::NotInstalled => f.write_str(
                "no resilient registry is installed to reload: call `resilient_config::init` first",
            ),
        }
    }
}

impl fmt::Debug for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

impl std::error::Error for ConfigError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            ConfigError::Invalid(_) | ConfigError::NotInstalled => None,
            ConfigError::AlreadyInstalled(e) => Some(e),
        }
    }
}

impl ConfigError {
    /// The problems found; empty for [`ConfigError::AlreadyInstalled`] and
    /// [`ConfigError::NotInstalled`].
    pub fn problems(&self) -> &[Problem] {
        match self {
            ConfigError::Invalid(problems) => problems,
            ConfigError::AlreadyInstalled(_) | ConfigError::NotInstalled => &[],
        }
    }
}

/// Validates the settings of every spec linked into the binary and installs
/// the registry for the whole process.
///
/// # Errors
///
/// [`ConfigError::Invalid`] with every problem of every spec, or
/// [`ConfigError::AlreadyInstalled`] when called a second time.
pub fn init(config: &config::Config) -> Result<(), ConfigError> {
    build(Registry::builder(), config)?
        .install()
        .map_err(ConfigError::AlreadyInstalled)
}

/// Reads and validates the settings of every spec of the installed registry
/// from `config` again, and applies what changed; see
/// [`Registry::reload`](resilient_core::Registry::reload).
///
/// With any problem nothing changes: the running settings stay, and every
/// problem is returned (and logged at ERROR). Otherwise each spec whose
/// settings changed runs the new ones for the calls that start from now on,
/// keeping its state (a breaker's state and counts, a limit's calls in
/// flight, a budget's tokens); what changed is returned, logged at INFO and
/// published as an event.
///
/// ```no_run
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let load = || {
///     config::Config::builder()
///         .add_source(config::File::with_name("resilient"))
///         .add_source(config::Environment::with_prefix("APP").separator("__"))
///         .build()
/// };
/// resilient_config::init(&load()?)?;
/// // ... later, when the file has changed:
/// match resilient_config::reload(&load()?) {
///     Ok(reloaded) => println!("{} spec(s) changed", reloaded.specs.len()),
///     Err(e) => eprintln!("kept the running settings: {e}"),
/// }
/// # Ok(())
/// # }
/// ```
///
/// # Errors
///
/// [`ConfigError::Invalid`] with every problem of every spec, or
/// [`ConfigError::NotInstalled`] before [`init`].
pub fn reload(config: &config::Config) -> Result<Reloaded, ConfigError> {
    let registry = Registry::installed().ok_or(ConfigError::NotInstalled)?;
    reload_registry(registry, config)
}

/// As [`reload`], for a registry of your own rather than the installed one
/// (one from [`build`], a test's in [`Registry::scope`]): reads the
/// settings of its specs from `config` again and applies what changed.
///
/// A rejection is the same [`ConfigError`] as at startup, and prints the
/// same report.
///
/// ```
/// use resilient_core::{Registry, RetrySpec};
///
/// #[derive(RetrySpec)]
/// #[spec("resilient.retry.pet")]
/// pub struct PetRetry;
///
/// let load = |attempts: i64| {
///     config::Config::builder()
///         .set_override("resilient.retry.pet.delay", "10ms")?
///         .set_override("resilient.retry.pet.attempts", attempts)?
///         .build()
/// };
/// let registry = resilient_config::build(Registry::builder().spec::<PetRetry>(), &load(2)?)?;
/// let reloaded = resilient_config::reload_registry(&registry, &load(3)?)?;
/// assert_eq!(reloaded.specs[0].keys, ["attempts: 2 -> 3"]);
///
/// let refused = resilient_config::reload_registry(&registry, &load(-1)?).unwrap_err();
/// assert_eq!(
///     refused.to_string(),
///     "invalid resilient configuration (1 problem):\n  \
///      - PetRetry at `resilient.retry.pet`: key `attempts` must be a whole number in 0..=4294967295 (found -1)"
/// );
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
///
/// # Errors
///
/// [`ConfigError::Invalid`] with every problem of every spec; the registry
/// then keeps its running settings.
pub fn reload_registry(
    registry: &Registry,
    config: &config::Config,
) -> Result<Reloaded, ConfigError> {
    registry
        .reload_with_origins(&to_value(&config.cache), &|path| {
            origin(&config.cache, path)
        })
        .map_err(ConfigError::Invalid)
}

/// Builds a registry with `builder` (every spec in the binary, or the specs
/// named with [`RegistryBuilder::spec`]) from `config`, without installing it.
///
/// # Errors
///
/// [`ConfigError::Invalid`] with every problem of every spec.
pub fn build(builder: RegistryBuilder, config: &config::Config) -> Result<Registry, ConfigError> {
    builder
        .build_with_origins(&to_value(&config.cache), &|path| {
            origin(&config.cache, path)
        })
        .map_err(ConfigError::Invalid)
}

/// Where the values at and below the dotted `path` came from, in words:
/// for a problem with configuration that no spec reads.
///
/// The `config` crate keeps an origin on each value: a file source's name
/// (`resilient.toml`, as found on disk; none for `File::from_str`), `"the
/// environment"` for every `Environment` variable (the variable's own name
/// is not kept, so the key it set is named instead), and none for
/// `set_override` or `set_default`. Only the leaves are asked: a table
/// merged from several sources keeps none of its own.
fn origin(root: &config::Value, path: &str) -> Option<String> {
    let mut node = root;
    for part in path.split('.') {
        let config::ValueKind::Table(t) = &node.kind else {
            return None;
        };
        node = t.get(part)?;
    }
    let mut files: Vec<String> = Vec::new();
    let mut env: Vec<String> = Vec::new();
    let mut leaves = vec![(path.to_owned(), node)];
    while let Some((at, value)) = leaves.pop() {
        match &value.kind {
            config::ValueKind::Table(t) => {
                leaves.extend(t.iter().map(|(k, v)| (format!("{at}.{k}"), v)));
            }
            _ => match value.origin() {
                Some("the environment") => env.push(at),
                Some(file) => files.push(format!("`{}`", file_name(file))),
                None => {}
            },
        }
    }
    files.sort_unstable();
    files.dedup();
    env.sort_unstable();
    let mut said = Vec::new();
    if !files.is_empty() {
        said.push(format!("written in {}", files.join(" and ")));
    }
    if !env.is_empty() {
        let keys: Vec<String> = env.iter().map(|k| format!("`{k}`")).collect();
        said.push(format!(
            "set by an environment variable, for {}",
            keys.join(", ")
        ));
    }
    (!said.is_empty()).then(|| said.join("; "))
}

/// A file source's origin as the application named the file.
///
/// The `config` crate keeps a file's path relative to the working
/// directory, so a file named by its absolute path (`/etc/app/resilient.toml`)
/// comes back climbing to the root from wherever the process runs
/// (`../../../etc/app/resilient.toml`). Such a path is joined to the
/// working directory and its `..` resolved, which gives the absolute path
/// back; a path that does not climb is kept as it is.
fn file_name(origin: &str) -> String {
    use std::path::{Component, Path, PathBuf};
    let path = Path::new(origin);
    if !matches!(path.components().next(), Some(Component::ParentDir)) {
        return origin.to_owned();
    }
    let Ok(dir) = std::env::current_dir() else {
        return origin.to_owned();
    };
    let mut out = PathBuf::new();
    for part in dir.join(path).components() {
        match part {
            Component::ParentDir => {
                out.pop();
            }
            Component::CurDir => {}
            other => out.push(other),
        }
    }
    out.display().to_string()
}

/// The `config` crate's value tree as resilient's.
///
/// Converted without recursion: a source that nests values to any depth (a
/// JSON file, a `config::Source` of the application's) cannot exhaust the
/// stack here, and the registry then refuses a value nested too deep with
/// one problem naming it.
pub fn to_value(value: &config::Value) -> Value {
    use config::ValueKind as K;
    /// A table or list being converted, with the items left to convert.
    enum Open<'v> {
        Table(
            Box<dyn Iterator<Item = (&'v String, &'v config::Value)> + 'v>,
            BTreeMap<String, Value>,
            Option<&'v String>,
        ),
        List(std::slice::Iter<'v, config::Value>, Vec<Value>),
    }
    let mut open: Vec<Open<'_>> = Vec::new();
    let mut next = value;
    loop {
        let mut done = match &next.kind {
            K::Nil => Some(Value::Nil),
            K::Boolean(b) => Some(Value::Bool(*b)),
            K::I64(i) => Some(Value::Int(i128::from(*i))),
            K::I128(i) => Some(Value::Int(*i)),
            K::U64(u) => Some(Value::Int(i128::from(*u))),
            // Beyond i128: kept as text, so that it is reported as out of range.
            K::U128(u) => {
                Some(i128::try_from(*u).map_or_else(|_| Value::Str(u.to_string()), Value::Int))
            }
            K::Float(x) => Some(Value::Float(*x)),
            K::String(s) => Some(Value::Str(s.clone())),
            K::Table(t) => {
                open.push(Open::Table(Box::new(t.iter()), BTreeMap::new(), None));
                None
            }
            K::Array(a) => {
                open.push(Open::List(a.iter(), Vec::new()));
                None
            }
        };
        // Up: give the finished value to its table or list, and go down
        // its next item, or finish it too.
        loop {
            let Some(top) = open.last_mut() else {
                return done.unwrap_or(Value::Nil);
            };
            let item = match top {
                Open::Table(items, out, key) => {
                    if let (Some(v), Some(k)) = (done.take(), key.take()) {
                        out.insert(k.clone(), v);
                    }
                    items.next().map(|(k, v)| {
                        *key = Some(k);
                        v
                    })
                }
                Open::List(items, out) => {
                    out.extend(done.take());
                    items.next()
                }
            };
            if let Some(item) = item {
                next = item;
                break;
            }
            done = match open.pop() {
                Some(Open::Table(_, out, _)) => Some(Value::Table(out)),
                Some(Open::List(_, out)) => Some(Value::List(out)),
                None => None,
            };
        }
    }
}

/// Every spec linked into the binary and every annotated fn, explained
/// (see [`resilient_core::explain`]): reads and validates the settings as
/// [`init`] does, without installing anything.
///
/// ```no_run
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let settings = config::Config::builder()
///     .add_source(config::File::with_name("resilient"))
///     .build()?;
/// print!("{}", resilient_config::explain(&settings)?);
/// # Ok(())
/// # }
/// ```
///
/// # Errors
///
/// [`ConfigError::Invalid`] with every problem, as at startup.
pub fn explain(
    config: &config::Config,
) -> Result<resilient_core::explain::Explanation, ConfigError> {
    Ok(build(Registry::builder(), config)?.explain())
}
