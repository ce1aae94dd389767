//! Episodes that could not be delivered, kept on disk until the service takes them: one
//! JSON file per episode in a directory, named by a time-ordered UUID so that a listing is
//! the order they were recorded in. A file is written beside its final name and renamed
//! into place (then the directory is synced), so a crash leaves either the whole episode or
//! nothing. Bounded in entries and bytes: past either bound a new episode is refused, not
//! an old one dropped, so what was kept stays kept. A file holds the caller's arguments as
//! given and when the episode was recorded, by this host's clock (the client dates the
//! episode with it when it is sent; see `MemoryClient::flush_outbox`).

use std::path::{Path, PathBuf};
use std::sync::Mutex;

use chrono::{DateTime, Utc};
use serde_json::{Value, json};

/// An episode waiting: the tool's arguments as the caller gave them, and when it was
/// recorded (none for a file written before the time was kept apart, whose arguments carry
/// it already).
#[derive(Debug, Clone)]
pub struct Entry {
    pub path: PathBuf,
    pub arguments: Value,
    pub recorded_at: Option<DateTime<Utc>>,
}

/// What a flush did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FlushReport {
    /// Delivered (stored, or already stored under their key).
    pub sent: usize,
    /// Refused by the service as invalid: dropped, as sending them again cannot help.
    pub dropped: usize,
    /// Still waiting.
    pub remaining: usize,
}

#[derive(Debug, thiserror::Error)]
pub enum OutboxError {
    #[error("the outbox is full ({entries} episodes, {bytes} bytes)")]
    Full { entries: usize, bytes: u64 },
    #[error("the outbox at {path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

#[derive(Debug)]
pub struct Outbox {
    dir: PathBuf,
    max_entries: usize,
    max_bytes: u64,
    /// Entries and bytes on disk, counted at open and kept as entries come and go.
    held: Mutex<(usize, u64)>,
}

impl Outbox {
    /// Opens (creating) the outbox in `dir`, counting what a previous run left there.
    pub fn open(dir: &Path, max_entries: usize, max_bytes: u64) -> Result<Outbox, OutboxError> {
        let io = |source| OutboxError::Io {
            path: dir.to_owned(),
            source,
        };
        std::fs::create_dir_all(dir).map_err(io)?;
        let mut held = (0, 0);
        for entry in std::fs::read_dir(dir).map_err(io)? {
            let entry = entry.map_err(io)?;
            let name = entry.file_name();
            let name = name.to_string_lossy();
            if name.starts_with(".tmp-") {
                // A write a crash interrupted: never renamed, so never acknowledged as kept.
                let _ = std::fs::remove_file(entry.path());
            } else if name.ends_with(".json") {
                held.0 += 1;
                held.1 += entry.metadata().map_err(io)?.len();
            }
        }
        Ok(Outbox {
            dir: dir.to_owned(),
            max_entries,
            max_bytes,
            held: Mutex::new(held),
        })
    }

    /// Keeps `episode` (the tool's arguments), recorded at `recorded_at`, on disk.
    pub fn push(&self, episode: &Value, recorded_at: DateTime<Utc>) -> Result<(), OutboxError> {
        let file = json!({"arguments": episode, "recorded_at": recorded_at});
        let bytes = serde_json::to_vec(&file).expect("a JSON value serialises");
        let mut held = self.held.lock().unwrap_or_else(|p| p.into_inner());
        if held.0 >= self.max_entries || held.1 + bytes.len() as u64 > self.max_bytes {
            return Err(OutboxError::Full {
                entries: held.0,
                bytes: held.1,
            });
        }
        let id = uuid::Uuid::now_v7();
        let path = self.dir.join(format!("{id}.json"));
        let tmp = self.dir.join(format!(".tmp-{id}"));
        let io = |source| OutboxError::Io {
            path: path.clone(),
            source,
        };
        {
            use std::io::Write;
            let mut file = std::fs::File::create(&tmp).map_err(io)?;
            file.write_all(&bytes).map_err(io)?;
            file.sync_all().map_err(io)?;
        }
        std::fs::rename(&tmp, &path).map_err(io)?;
        std::fs::File::open(&self.dir)
            .and_then(|d| d.sync_all())
            .map_err(io)?;
        held.0 += 1;
        held.1 += bytes.len() as u64;
        Ok(())
    }

    /// The oldest `n` entries, oldest first.
    pub fn oldest(&self, n: usize) -> Vec<Entry> {
        let Ok(entries) = std::fs::read_dir(&self.dir) else {
            return Vec::new();
        };
        let mut paths: Vec<PathBuf> = entries
            .filter_map(Result::ok)
            .map(|e| e.path())
            .filter(|p| p.extension().is_some_and(|x| x == "json"))
            .collect();
        paths.sort();
        paths
            .into_iter()
            .take(n)
            .filter_map(|path| {
                let value: Value = std::fs::read(&path)
                    .ok()
                    .and_then(|b| serde_json::from_slice(&b).ok())?;
                Some(Entry::read(path, value))
            })
            .collect()
    }

    /// Forgets a delivered (or refused) entry.
    pub fn remove(&self, path: &Path) {
        let size = std::fs::metadata(path).map(|m| m.len()).unwrap_or(0);
        if std::fs::remove_file(path).is_ok() {
            let mut held = self.held.lock().unwrap_or_else(|p| p.into_inner());
            held.0 = held.0.saturating_sub(1);
            held.1 = held.1.saturating_sub(size);
        }
    }

    /// Entries waiting.
    pub fn len(&self) -> usize {
        self.held.lock().unwrap_or_else(|p| p.into_inner()).0
    }
}

impl Entry {
    /// An entry from its file's JSON: `{"arguments", "recorded_at"}`, or the arguments alone
    /// as the client wrote them before (already dated).
    fn read(path: PathBuf, mut file: Value) -> Entry {
        match file.get_mut("arguments").map(Value::take) {
            Some(arguments) if arguments.is_object() => Entry {
                path,
                arguments,
                recorded_at: file["recorded_at"]
                    .as_str()
                    .and_then(|t| DateTime::parse_from_rfc3339(t).ok())
                    .map(|t| t.with_timezone(&Utc)),
            },
            _ => Entry {
                path,
                arguments: file,
                recorded_at: None,
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn entries_come_back_in_order_survive_a_reopen_and_are_bounded() {
        let dir = tempfile::tempdir().unwrap();
        let outbox = Outbox::open(dir.path(), 3, 1 << 20).unwrap();
        for i in 0..3 {
            outbox
                .push(&json!({"content": format!("episode {i}")}), Utc::now())
                .unwrap();
        }
        assert!(matches!(
            outbox.push(&json!({"content": "one too many"}), Utc::now()),
            Err(OutboxError::Full { entries: 3, .. })
        ));
        // A crash mid-write leaves a temporary file, which is not an entry.
        std::fs::write(dir.path().join(".tmp-x"), b"{\"content\":").unwrap();
        let reopened = Outbox::open(dir.path(), 3, 1 << 20).unwrap();
        assert_eq!(reopened.len(), 3);
        let oldest = reopened.oldest(10);
        let contents: Vec<&str> = oldest
            .iter()
            .map(|e| e.arguments["content"].as_str().unwrap())
            .collect();
        assert_eq!(contents, ["episode 0", "episode 1", "episode 2"]);
        reopened.remove(&oldest[0].path);
        assert_eq!(reopened.len(), 2);
        assert!(!dir.path().join(".tmp-x").exists());
    }

    #[test]
    fn the_byte_bound_holds_too() {
        let dir = tempfile::tempdir().unwrap();
        let outbox = Outbox::open(dir.path(), 100, 150).unwrap();
        let one = json!({"content": "x".repeat(20)});
        outbox.push(&one, Utc::now()).unwrap();
        assert!(outbox.push(&one, Utc::now()).is_err());
    }

    /// An entry keeps the caller's arguments apart from when it was recorded; a file of the
    /// arguments alone (as written before) reads as arguments already dated.
    #[test]
    fn an_entry_keeps_its_recorded_time_apart() {
        let dir = tempfile::tempdir().unwrap();
        let outbox = Outbox::open(dir.path(), 10, 1 << 20).unwrap();
        let recorded = "2026-03-01T10:00:00.123456Z"
            .parse::<DateTime<Utc>>()
            .unwrap();
        outbox.push(&json!({"content": "new"}), recorded).unwrap();
        let old = json!({"content": "old", "occurred_at": "2026-02-01T00:00:00Z"});
        std::fs::write(
            dir.path().join(format!("{}.json", uuid::Uuid::now_v7())),
            old.to_string(),
        )
        .unwrap();
        let entries = Outbox::open(dir.path(), 10, 1 << 20).unwrap().oldest(10);
        assert_eq!(entries[0].arguments, json!({"content": "new"}));
        assert_eq!(entries[0].recorded_at, Some(recorded));
        assert_eq!(entries[1].arguments, old);
        assert_eq!(entries[1].recorded_at, None);
    }
}
