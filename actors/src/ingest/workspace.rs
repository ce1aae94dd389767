//! Where an orchestrator's dropped files may lead (orchestrator_memory_subsystem.md, "Memory
//! source path resolution must obey workspace isolation and shared-workspace allowlists"):
//! inside its own folder, or inside a configured shared folder (`memory.ingest.shared_paths`),
//! and never into another orchestrator's folder, shared or not. Paths are resolved on the
//! file system (symbolic links followed, `..` applied) before they are judged, so neither a
//! link nor a `..` leads out.

use std::path::{Path, PathBuf};

use crate::domain::orchestrator::ingest_file::Reason;
use crate::domain::orchestrator::source::canonical_path;

/// The folders an orchestrator's files may come from, canonical.
#[derive(Debug, Clone)]
pub(crate) struct Workspace {
    /// `<root>/<orchestrator>`.
    own: PathBuf,
    /// `<root>`: every orchestrator's folder is under it.
    root: PathBuf,
    shared: Vec<PathBuf>,
}

impl Workspace {
    /// The workspace of the orchestrator whose folder is `own` (which exists), under `root`.
    /// Shared folders that do not exist are left out (and said so in the log).
    pub fn new(root: &Path, own: &Path, shared: &[PathBuf]) -> std::io::Result<Workspace> {
        let shared = shared
            .iter()
            .filter_map(|path| match path.canonicalize() {
                Ok(path) => Some(path),
                Err(e) => {
                    tracing::warn!(path = %path.display(), error = %e, "memory.ingest.shared_paths: a folder that cannot be read is left out");
                    None
                }
            })
            .collect();
        Ok(Workspace {
            own: own.canonicalize()?,
            root: root.canonicalize()?,
            shared,
        })
    }

    /// The canonical path of the file `entry` (a dropped file, or a link to one) when it is
    /// a regular file inside the workspace; else why not.
    pub fn resolve(&self, entry: &Path) -> Result<PathBuf, Reason> {
        let target = entry.canonicalize().map_err(|e| {
            Reason::new(
                "unreadable",
                format!("{} cannot be resolved: {e}", entry.display()),
            )
        })?;
        self.judge(&target)?;
        if !target.is_file() {
            return Err(Reason::new(
                "not_a_file",
                format!("{} is not a regular file", target.display()),
            ));
        }
        Ok(target)
    }

    /// Whether `path`, a path a JSON document gives as its `sourcePath`, is inside the
    /// workspace: given canonical, and, if it exists, resolving to itself (no link out).
    pub fn check_given(&self, path: &str) -> Result<(), Reason> {
        let canonical = canonical_path(path).map_err(Reason::from)?;
        if canonical.as_os_str() != path {
            return Err(Reason::new(
                "invalid_source_path",
                format!("`sourcePath` {path:?} is not canonical: {canonical:?}"),
            ));
        }
        self.judge(&canonical)?;
        match canonical.canonicalize() {
            Ok(resolved) if resolved != canonical => {
                self.judge(&resolved)?;
                Err(Reason::new(
                    "invalid_source_path",
                    format!("`sourcePath` {path:?} is a link to {}", resolved.display()),
                ))
            }
            _ => Ok(()),
        }
    }

    /// Inside its own folder, or a shared one but no other orchestrator's.
    fn judge(&self, target: &Path) -> Result<(), Reason> {
        if target.starts_with(&self.own) {
            return Ok(());
        }
        if target.starts_with(&self.root) {
            return Err(Reason::new(
                "other_orchestrator",
                format!("{} is in another orchestrator's folder", target.display()),
            ));
        }
        if self.shared.iter().any(|s| target.starts_with(s)) {
            return Ok(());
        }
        Err(Reason::new(
            "path_outside_workspace",
            format!(
                "{} is outside the orchestrator's folder and every shared one",
                target.display()
            ),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    struct Tree {
        _dir: tempfile::TempDir,
        base: PathBuf,
        workspace: Workspace,
    }

    fn tree() -> Tree {
        let dir = tempfile::tempdir().unwrap();
        let base = dir.path().canonicalize().unwrap();
        for d in [
            "root/o1/memory/ingest",
            "root/o2/memory/ingest",
            "shared",
            "elsewhere",
        ] {
            std::fs::create_dir_all(base.join(d)).unwrap();
        }
        for f in [
            "root/o1/memory/ingest/a.md",
            "root/o2/memory/ingest/b.md",
            "shared/s.md",
            "elsewhere/e.md",
        ] {
            std::fs::write(base.join(f), "x").unwrap();
        }
        let workspace = Workspace::new(
            &base.join("root"),
            &base.join("root/o1"),
            &[base.join("shared"), base.join("missing")],
        )
        .unwrap();
        Tree {
            _dir: dir,
            base,
            workspace,
        }
    }

    #[test]
    fn files_and_links_resolve_inside_the_workspace_only() {
        let t = tree();
        let ingest = t.base.join("root/o1/memory/ingest");
        assert_eq!(
            t.workspace.resolve(&ingest.join("a.md")).unwrap(),
            ingest.join("a.md")
        );
        let link = |name: &str, to: &str| {
            symlink(t.base.join(to), ingest.join(name)).unwrap();
            t.workspace.resolve(&ingest.join(name))
        };
        assert_eq!(
            link("s.md", "shared/s.md").unwrap(),
            t.base.join("shared/s.md")
        );
        assert_eq!(
            link("e.md", "elsewhere/e.md").unwrap_err().code,
            "path_outside_workspace"
        );
        assert_eq!(
            link("b.md", "root/o2/memory/ingest/b.md").unwrap_err().code,
            "other_orchestrator"
        );
        // A link that climbs out with `..` is judged where it lands.
        symlink("../../../../elsewhere/e.md", ingest.join("up.md")).unwrap();
        assert_eq!(
            t.workspace.resolve(&ingest.join("up.md")).unwrap_err().code,
            "path_outside_workspace"
        );
        assert_eq!(
            link("gone.md", "nowhere.md").unwrap_err().code,
            "unreadable"
        );
        std::fs::create_dir(ingest.join("dir.md")).unwrap();
        assert_eq!(
            t.workspace
                .resolve(&ingest.join("dir.md"))
                .unwrap_err()
                .code,
            "not_a_file"
        );
    }

    #[test]
    fn a_given_source_path_must_be_canonical_and_inside() {
        let t = tree();
        let path = |p: &str| t.base.join(p).to_string_lossy().into_owned();
        assert!(t.workspace.check_given(&path("shared/s.md")).is_ok());
        assert!(t.workspace.check_given(&path("shared/not-yet.md")).is_ok());
        assert!(t.workspace.check_given(&path("root/o1/notes/x.md")).is_ok());
        let code = |p: &str| t.workspace.check_given(p).unwrap_err().code;
        assert_eq!(
            code(&path("shared/../elsewhere/e.md")),
            "invalid_source_path"
        );
        assert_eq!(code(&path("elsewhere/e.md")), "path_outside_workspace");
        assert_eq!(
            code(&path("root/o2/memory/ingest/b.md")),
            "other_orchestrator"
        );
        assert_eq!(code("relative/x.md"), "invalid_source_path");
        symlink(t.base.join("elsewhere/e.md"), t.base.join("shared/out.md")).unwrap();
        assert_eq!(code(&path("shared/out.md")), "path_outside_workspace");
    }
}
