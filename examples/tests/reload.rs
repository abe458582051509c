//! The example's watch reloads the installed registry when the file
//! changes, including when the file is a symlink swapped for another, as
//! Kubernetes mounts a ConfigMap. One test in this binary: it installs the
//! process's registry.

use std::path::Path;
use std::time::Duration;

use examples::petstore::{PetRetry, PetTimeout};
use resilient_core::{RetrySpec, TimeoutSpec};

fn settings(attempts: u32, timeout: &str) -> String {
    format!(
        "[resilient.retry.pet]
delay = \"1ms\"
attempts = {attempts}
[resilient.circuitbreaker.pet]
failure_rate_threshold = 100
minimum_required_calls = 10
wait_duration_in_open_state = \"1m\"
permitted_calls_in_half_open_state = 1
count_based = {{ window_size = 10 }}
[resilient.timeout.pet]
duration = \"{timeout}\"
[resilient.concurrency.pets]
limit = 8"
    )
}

/// The next reload's outcome; `None` if none came within 10 s.
async fn next(
    watch: &mut examples::reload::Watch,
) -> Option<Result<resilient_core::Reloaded, examples::reload::BoxError>> {
    tokio::time::timeout(Duration::from_secs(10), watch.reloads.recv())
        .await
        .ok()
        .flatten()
}

fn load(file: &Path) -> Result<config::Config, config::ConfigError> {
    config::Config::builder()
        .add_source(config::File::from(file).format(config::FileFormat::Toml))
        .build()
}

#[cfg(unix)]
#[tokio::test]
async fn an_edited_file_and_a_swapped_symlink_are_reloaded(
) -> Result<(), Box<dyn std::error::Error>> {
    // The layout of a mounted ConfigMap: `resilient.toml -> ..data/resilient.toml`,
    // `..data -> ..v1`; an update writes `..v2` and swaps `..data`.
    let dir = std::env::temp_dir().join(format!("reload-test-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("..v1"))?;
    std::fs::write(dir.join("..v1/resilient.toml"), settings(1, "2s"))?;
    std::os::unix::fs::symlink("..v1", dir.join("..data"))?;
    std::os::unix::fs::symlink("..data/resilient.toml", dir.join("resilient.toml"))?;
    let file = dir.join("resilient.toml");

    resilient_config::init(&load(&file)?)?;
    assert_eq!(PetRetry::get()?.settings().attempts, 1);
    let path = file.clone();
    let mut watch =
        examples::reload::watch(file.clone(), Duration::from_millis(10), move || load(&path));

    // The file behind the links, edited in place.
    std::fs::write(dir.join("..v1/resilient.toml"), settings(2, "2s"))?;
    let first = next(&mut watch).await.ok_or("no reload after an edit")?;
    let first = first.map_err(|e| e.to_string())?;
    assert_eq!(first.specs.len(), 1);
    assert_eq!(first.specs[0].keys, ["attempts: 1 -> 2"]);
    assert_eq!(PetRetry::get()?.settings().attempts, 2);

    // The ConfigMap way: a new version, and `..data` swapped in one rename.
    std::fs::create_dir_all(dir.join("..v2"))?;
    std::fs::write(dir.join("..v2/resilient.toml"), settings(2, "500ms"))?;
    std::os::unix::fs::symlink("..v2", dir.join("..data_tmp"))?;
    std::fs::rename(dir.join("..data_tmp"), dir.join("..data"))?;
    let second = next(&mut watch).await.ok_or("no reload after the swap")?;
    let second = second.map_err(|e| e.to_string())?;
    assert_eq!(second.specs[0].keys, ["duration: \"2s\" -> \"500ms\""]);
    assert_eq!(
        PetTimeout::get()?.settings().duration,
        Duration::from_millis(500)
    );

    // A broken edit: reported, nothing changes.
    std::fs::write(dir.join("..v2/resilient.toml"), settings(2, "soon"))?;
    let third = next(&mut watch)
        .await
        .ok_or("no reload after a broken edit")?;
    let problem = third.err().ok_or("a broken edit was applied")?.to_string();
    assert!(
        problem.contains("`duration` must be a duration"),
        "{problem}"
    );
    assert_eq!(
        PetTimeout::get()?.settings().duration,
        Duration::from_millis(500)
    );
    watch.task.abort();
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}
