//! An orchestrator's own log, `memory/logs/memory.log` (orchestrator_memory_subsystem.md,
//! "Runtime Filesystem Layout"): one JSON line per thing its memory did on disk — a file
//! ingested or rejected (with the reasons), a file left for later — so whoever drops files
//! sees what became of them without access to the service's log. The service's log says
//! the same (the lines here are also traced).

use std::io::Write;
use std::path::Path;

use chrono::{DateTime, SecondsFormat, Utc};
use serde_json::{Value, json};

/// Appends `event` with its `fields` (an object) to the log at `path`. A failure to write
/// is traced, never raised: the file's outcome does not depend on its log line.
pub(crate) fn append(path: &Path, at: DateTime<Utc>, level: &str, event: &str, fields: Value) {
    let mut line = json!({
        "ts": at.to_rfc3339_opts(SecondsFormat::Millis, true),
        "level": level,
        "event": event,
    });
    if let (Some(line), Value::Object(fields)) = (line.as_object_mut(), fields) {
        line.extend(fields);
    }
    let written = (|| {
        let mut file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)?;
        // One write per line: lines of two writers never interleave within a line.
        let mut bytes = serde_json::to_vec(&line).map_err(std::io::Error::other)?;
        bytes.push(b'\n');
        file.write_all(&bytes)
    })();
    if let Err(e) = written {
        tracing::warn!(path = %path.display(), error = %e, "memory.log not written");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_are_appended_as_json_objects() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("memory.log");
        let at = DateTime::parse_from_rfc3339("2026-11-25T10:00:00Z")
            .unwrap()
            .with_timezone(&Utc);
        append(
            &path,
            at,
            "info",
            "ingest_processed",
            json!({"file": "a.md"}),
        );
        append(
            &path,
            at,
            "warn",
            "ingest_rejected",
            json!({"file": "b.pdf"}),
        );
        let text = std::fs::read_to_string(&path).unwrap();
        let lines: Vec<Value> = text
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(lines.len(), 2);
        assert_eq!(lines[0]["event"], "ingest_processed");
        assert_eq!(lines[0]["ts"], "2026-11-25T10:00:00.000Z");
        assert_eq!(lines[1]["file"], "b.pdf");
        assert_eq!(lines[1]["level"], "warn");
    }
}
