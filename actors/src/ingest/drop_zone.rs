//! An orchestrator's folder on disk (orchestrator_memory_subsystem.md, "Runtime Filesystem
//! Layout"): `<root>/<orchestratorId>/memory/` with `ingest/`, `ingest/processed/`,
//! `ingest/rejected/`, `bulletins/` and `logs/memory.log`. Made when the service starts; a
//! file waiting in `ingest/` is found by listing it, and leaves it by one rename into
//! `processed/` or `rejected/`, under a name no earlier file took.

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use super::manifest::Outcome;
use super::workspace::Workspace;
use crate::domain::orchestrator::status::IngestCounts;

/// One orchestrator's folder.
#[derive(Debug, Clone)]
pub(crate) struct DropZone {
    pub orchestrator: String,
    /// `.../memory/ingest`, canonical.
    pub ingest: PathBuf,
    /// `.../memory/logs/memory.log`.
    pub log: PathBuf,
    pub workspace: Workspace,
}

/// What a listing found.
#[derive(Debug, Default)]
pub(crate) struct Listing {
    /// Files to read, by name.
    pub ready: Vec<PathBuf>,
    /// Whether some file was changed too recently to be read yet.
    pub settling: bool,
}

impl DropZone {
    /// The folder of `orchestrator` under `root`, made if missing.
    pub fn open(root: &Path, orchestrator: &str, shared: &[PathBuf]) -> std::io::Result<DropZone> {
        let memory = root.join(orchestrator).join("memory");
        for dir in ["ingest/processed", "ingest/rejected", "bulletins", "logs"] {
            std::fs::create_dir_all(memory.join(dir))?;
        }
        let workspace = Workspace::new(root, &root.join(orchestrator), shared)?;
        let memory = memory.canonicalize()?;
        Ok(DropZone {
            orchestrator: orchestrator.to_owned(),
            ingest: memory.join("ingest"),
            log: memory.join("logs").join("memory.log"),
            workspace,
        })
    }

    /// The folder files of `outcome` go to.
    pub fn folder(&self, outcome: Outcome) -> PathBuf {
        self.ingest.join(outcome.folder())
    }

    /// The entries of `ingest/` to read, in name order: files, links and stray folders,
    /// but not `processed/` and `rejected/`, nor names a writer uses while writing (a
    /// leading `.`, a `.tmp`, `.part`, `.partial`, `.swp` or `~` ending). One changed less
    /// than `settle` ago waits (unless `settle` is zero).
    pub fn list(&self, settle: Duration) -> std::io::Result<Listing> {
        let mut listing = Listing::default();
        let now = SystemTime::now();
        for entry in std::fs::read_dir(&self.ingest)? {
            let entry = entry?;
            let name = entry.file_name();
            let Some(name) = name.to_str() else {
                // Not UTF-8: read anyway, and rejected for its name by the extension check.
                listing.ready.push(entry.path());
                continue;
            };
            if in_progress(name) || ["processed", "rejected"].contains(&name) {
                continue;
            }
            let path = entry.path();
            let changed = std::fs::metadata(&path)
                .or_else(|_| std::fs::symlink_metadata(&path))
                .and_then(|m| m.modified());
            let young = changed.is_ok_and(|at| now.duration_since(at).unwrap_or_default() < settle);
            if young {
                listing.settling = true;
            } else {
                listing.ready.push(path);
            }
        }
        listing.ready.sort();
        Ok(listing)
    }

    /// A name in the folder of `outcome` that neither a file nor a manifest has: `name`
    /// itself, else `name` with `tag` (a content hash's start) before its extension, else
    /// with a counter too.
    pub fn free_name(&self, outcome: Outcome, name: &str, tag: &str) -> String {
        let folder = self.folder(outcome);
        let taken = |candidate: &str| {
            [candidate.to_owned(), format!("{candidate}.manifest.json")]
                .iter()
                .any(|n| std::fs::symlink_metadata(folder.join(n)).is_ok())
        };
        let (stem, extension) = match name.rsplit_once('.') {
            Some((stem, extension)) if !stem.is_empty() => (stem, format!(".{extension}")),
            _ => (name, String::new()),
        };
        let mut candidate = name.to_owned();
        let mut n = 1;
        while taken(&candidate) {
            candidate = if n == 1 {
                format!("{stem}.{tag}{extension}")
            } else {
                format!("{stem}.{tag}.{n}{extension}")
            };
            n += 1;
        }
        candidate
    }
}

/// What the drop-zone of `orchestrator` under `root` holds, if its folder exists: files
/// waiting in `ingest/` (settling or not), and files in `processed/` and `rejected/`.
pub(crate) fn counts(root: &Path, orchestrator: &str, enabled: bool) -> Option<IngestCounts> {
    let ingest = root.join(orchestrator).join("memory").join("ingest");
    let files = |dir: &Path, keep: &dyn Fn(&str) -> bool| {
        std::fs::read_dir(dir)
            .map(|entries| {
                entries
                    .filter_map(Result::ok)
                    .filter(|e| e.file_name().to_str().is_some_and(keep))
                    .count()
            })
            .unwrap_or(0)
    };
    let stored = |name: &str| !name.ends_with(".manifest.json") && !name.starts_with('.');
    let waiting = |name: &str| !in_progress(name) && !["processed", "rejected"].contains(&name);
    ingest.is_dir().then(|| IngestCounts {
        enabled,
        folder: ingest.to_string_lossy().into_owned(),
        waiting: files(&ingest, &waiting),
        processed: files(&ingest.join("processed"), &stored),
        rejected: files(&ingest.join("rejected"), &stored),
    })
}

/// Whether a name is one a writer gives a file it has not finished.
fn in_progress(name: &str) -> bool {
    name.starts_with('.')
        || name.ends_with('~')
        || [".tmp", ".part", ".partial", ".swp"]
            .iter()
            .any(|suffix| name.ends_with(suffix))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_folders_are_made_and_listing_skips_unfinished_and_settling_files() {
        let dir = tempfile::tempdir().unwrap();
        let zone = DropZone::open(dir.path(), "o1", &[]).unwrap();
        for sub in ["ingest/processed", "ingest/rejected", "bulletins", "logs"] {
            assert!(dir.path().join("o1/memory").join(sub).is_dir(), "{sub}");
        }
        for name in ["b.md", "a.txt", ".a.md", "c.md.tmp", "d.md~", "e.part"] {
            std::fs::write(zone.ingest.join(name), "x").unwrap();
        }
        let listing = zone.list(Duration::ZERO).unwrap();
        let names: Vec<_> = listing
            .ready
            .iter()
            .map(|p| p.file_name().unwrap().to_str().unwrap())
            .collect();
        assert_eq!(names, ["a.txt", "b.md"]);
        assert!(!listing.settling);
        let listing = zone.list(Duration::from_secs(3600)).unwrap();
        assert!(listing.ready.is_empty());
        assert!(listing.settling);
    }

    #[test]
    fn a_taken_name_gets_the_tag_then_a_counter() {
        let dir = tempfile::tempdir().unwrap();
        let zone = DropZone::open(dir.path(), "o1", &[]).unwrap();
        let processed = zone.folder(Outcome::Processed);
        assert_eq!(zone.free_name(Outcome::Processed, "a.md", "abc"), "a.md");
        std::fs::write(processed.join("a.md"), "x").unwrap();
        assert_eq!(
            zone.free_name(Outcome::Processed, "a.md", "abc"),
            "a.abc.md"
        );
        std::fs::write(processed.join("a.abc.md.manifest.json"), "x").unwrap();
        assert_eq!(
            zone.free_name(Outcome::Processed, "a.md", "abc"),
            "a.abc.2.md"
        );
        assert_eq!(zone.free_name(Outcome::Rejected, "a.md", "abc"), "a.md");
        std::fs::write(processed.join("README"), "x").unwrap();
        assert_eq!(
            zone.free_name(Outcome::Processed, "README", "abc"),
            "README.abc"
        );
    }
}
