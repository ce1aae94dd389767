//! What the benches write besides their Markdown tables: numbers rounded to three decimals
//! (so the JSON stays readable and diffs between runs stay small) and pretty JSON files
//! (`--json`).

use std::path::Path;

use anyhow::Context as _;
use serde_json::Value;

pub use butler_memory::load::report::round3;

/// Writes `value` as pretty JSON to `path`.
pub fn write_json(path: &Path, value: &Value) -> anyhow::Result<()> {
    std::fs::write(path, serde_json::to_string_pretty(value)? + "\n")
        .with_context(|| format!("writing {}", path.display()))
}
