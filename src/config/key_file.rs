//! Secrets the service makes for itself when the configuration names none (the bootstrap
//! admin key, the audit key): kept in a file of `data_dir`, created once with mode 0600 and
//! read back on every start, so they survive restarts.

use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

/// The key in `path` when it holds one of at least `min_chars` characters; otherwise a new
/// random one (`prefix` and 64 hex digits) written there.
pub fn key_in_file(path: &Path, prefix: &str, min_chars: usize) -> std::io::Result<String> {
    if let Ok(text) = std::fs::read_to_string(path)
        && text.trim().chars().count() >= min_chars
    {
        return Ok(text.trim().to_owned());
    }
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let key = format!(
        "{prefix}{}{}",
        uuid::Uuid::new_v4().simple(),
        uuid::Uuid::new_v4().simple()
    );
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(true)
        .write(true)
        .mode(0o600)
        .open(path)?;
    writeln!(file, "{key}")?;
    Ok(key)
}
