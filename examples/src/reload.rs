//! Reloads the installed registry when its configuration file changes.
//!
//! The file is polled: every `every`, it is read whole and compared with
//! what was read last. A polled read, not a file watcher (`notify`, inotify):
//! a Kubernetes ConfigMap is mounted as a symlink that the kubelet swaps for
//! a new one, which a watch on the file misses, and whose modification
//! time is not reliable; a comparison of the contents sees every change
//! however the file was replaced, adds no dependency, and costs one small
//! read per poll. A reload with an unchanged file would do nothing anyway,
//! but would count as one in `resilient_reloads_total`.

use std::path::PathBuf;
use std::time::Duration;

use resilient_core::Reloaded;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

/// A running watch of one configuration file.
#[derive(Debug)]
pub struct Watch {
    /// The polling task; abort it to stop watching.
    pub task: JoinHandle<()>,
    /// Each reload's outcome, in order (the registry also logs it): what
    /// changed, or why nothing did (the file could not be read as
    /// configuration, or its settings have problems).
    pub reloads: mpsc::UnboundedReceiver<Result<Reloaded, BoxError>>,
}

/// Why a reload changed nothing.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// Watches `path`: when its contents change, builds the configuration
/// again with `load` (which reads the file, and whatever else the
/// application's configuration reads, such as environment overrides) and
/// reloads the installed registry with it.
pub fn watch<F>(path: PathBuf, every: Duration, load: F) -> Watch
where
    F: Fn() -> Result<config::Config, config::ConfigError> + Send + 'static,
{
    let (tx, reloads) = mpsc::unbounded_channel();
    // Read now, not when the task first runs: an edit made right after this
    // call is a change.
    let mut seen = std::fs::read(&path).ok();
    let task = tokio::spawn(async move {
        let mut ticks = tokio::time::interval(every);
        loop {
            ticks.tick().await;
            // A file being replaced can be missing for a moment: try again
            // at the next tick.
            let Ok(now) = tokio::fs::read(&path).await else {
                continue;
            };
            if seen.as_ref() == Some(&now) {
                continue;
            }
            seen = Some(now);
            let outcome = match load() {
                Ok(config) => resilient_config::reload(&config).map_err(BoxError::from),
                Err(e) => Err(BoxError::from(e)),
            };
            if tx.send(outcome).is_err() {
                return;
            }
        }
    });
    Watch { task, reloads }
}
