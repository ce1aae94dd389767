//! Where an orchestrator memory came from (orchestrator_memory_subsystem.md, "Provenance and
//! Auditability"): the kind of source, the file when it was one, the conversation, workflow
//! run and step, and who captured it. A file-backed source names its file by an absolute,
//! canonical path; the database refuses any other (migration 29).

use std::path::{Component, Path, PathBuf};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::domain::text::check_identifier_text;
use crate::error::{ErrorCode, MemoryError, MemoryResult};

crate::domain::string_enum! {
    /// What kind of source a memory came from.
    SourceType {
        /// A workflow step's parsed output.
        WorkflowOutput => "workflow_output",
        /// A channel message captured as it came in.
        ChannelTranscript => "channel_transcript",
        /// A file dropped in the orchestrator's ingest folder.
        IngestFile => "ingest_file",
        /// A diagnostics investigation's finding.
        Diagnostics => "diagnostics",
        /// Written by hand (a person, an admin tool).
        Manual => "manual",
    }
}

impl SourceType {
    fn parse_alias(_: &str) -> Option<Self> {
        None
    }
}

crate::domain::string_enum! {
    /// Who captured a memory.
    CapturedBy {
        /// An extractor (deterministic or a model) read it out of a text.
        Extractor => "extractor",
        /// A person said it.
        User => "user",
        /// The orchestrator recorded it.
        System => "system",
    }
}

impl CapturedBy {
    fn parse_alias(_: &str) -> Option<Self> {
        None
    }
}

/// The longest source path, in bytes.
pub const MAX_PATH_BYTES: usize = 4096;

/// A memory's provenance, as given and as stored.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Source {
    pub source_type: SourceType,
    /// Absolute canonical path of the file, when the source is one (always for
    /// `ingest_file`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source_path: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conversation_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workflow_run_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub step_id: Option<String>,
    pub captured_by: CapturedBy,
}

impl Source {
    /// Validates a source: a path (required for `ingest_file`) absolute and canonical, the
    /// ids identifier-like.
    pub fn checked(self) -> MemoryResult<Source> {
        match (&self.source_path, self.source_type) {
            (Some(path), _) => check_canonical_path(path)?,
            (None, SourceType::IngestFile) => {
                return Err(MemoryError::new(
                    ErrorCode::InvalidSourcePath,
                    "an `ingest_file` source names its file in `sourcePath`",
                ));
            }
            (None, _) => {}
        }
        for (field, value) in [
            ("conversationId", &self.conversation_id),
            ("workflowRunId", &self.workflow_run_id),
            ("stepId", &self.step_id),
        ] {
            if let Some(value) = value {
                check_identifier_text(field, value)?;
            }
        }
        Ok(self)
    }

    /// What makes two sources the same: every field. Sources are stored once each.
    pub fn fingerprint(&self) -> Vec<u8> {
        let mut hash = Sha256::new();
        let fields = [
            Some(self.source_type.as_str()),
            self.source_path.as_deref(),
            self.conversation_id.as_deref(),
            self.workflow_run_id.as_deref(),
            self.step_id.as_deref(),
            Some(self.captured_by.as_str()),
        ];
        for field in fields {
            match field {
                Some(value) => {
                    hash.update([1]);
                    hash.update((value.len() as u64).to_be_bytes());
                    hash.update(value);
                }
                None => hash.update([0]),
            }
        }
        hash.finalize().to_vec()
    }
}

/// The lexically canonical form of `path`: absolute, `.` dropped, `..` applied, no
/// repeated or trailing separator. Refuses a relative path and a `..` above the root. (It
/// does not follow symbolic links: the ingest step resolves those on the file system, and
/// checks where they lead.)
pub fn canonical_path(path: &str) -> MemoryResult<PathBuf> {
    let invalid = |why: &str| {
        MemoryError::new(
            ErrorCode::InvalidSourcePath,
            format!("`sourcePath` {path:?} {why}"),
        )
    };
    if path.len() > MAX_PATH_BYTES {
        return Err(invalid(&format!("is longer than {MAX_PATH_BYTES} bytes")));
    }
    if path.chars().any(char::is_control) {
        return Err(invalid("holds control characters"));
    }
    let path = Path::new(path);
    if !path.is_absolute() {
        return Err(invalid("is not absolute"));
    }
    let mut canonical = PathBuf::from("/");
    for component in path.components() {
        match component {
            Component::RootDir | Component::CurDir => {}
            Component::ParentDir => {
                if !canonical.pop() {
                    return Err(invalid("climbs above the root"));
                }
            }
            Component::Normal(part) => canonical.push(part),
            Component::Prefix(_) => return Err(invalid("is not a POSIX path")),
        }
    }
    Ok(canonical)
}

/// Refuses a path that is not already in canonical form (`canonical_path`): a stored
/// source path is compared as a string, so `/a/./b` and `/a/b` must not both be stored.
fn check_canonical_path(path: &str) -> MemoryResult<()> {
    let canonical = canonical_path(path)?;
    if canonical.as_os_str() != path {
        return Err(MemoryError::new(
            ErrorCode::InvalidSourcePath,
            format!("`sourcePath` {path:?} is not canonical: {canonical:?}"),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::text::MAX_IDENTIFIER_CHARS;

    fn source(source_type: SourceType, path: Option<&str>) -> Source {
        Source {
            source_type,
            source_path: path.map(str::to_owned),
            conversation_id: None,
            workflow_run_id: None,
            step_id: None,
            captured_by: CapturedBy::System,
        }
    }

    #[test]
    fn every_source_type_and_capturer_parses_and_nothing_else() {
        let kinds = [
            "workflow_output",
            "channel_transcript",
            "ingest_file",
            "diagnostics",
            "manual",
        ];
        assert_eq!(SourceType::ALL.len(), 5);
        for (t, text) in SourceType::ALL.iter().zip(kinds) {
            assert_eq!(text.parse::<SourceType>().unwrap(), *t);
        }
        assert!("file".parse::<SourceType>().is_err());
        for (c, text) in CapturedBy::ALL.iter().zip(["extractor", "user", "system"]) {
            assert_eq!(text.parse::<CapturedBy>().unwrap(), *c);
        }
        assert!("model".parse::<CapturedBy>().is_err());
    }

    #[test]
    fn paths_are_made_canonical_or_refused() {
        let ok = |p: &str| canonical_path(p).unwrap().to_string_lossy().into_owned();
        assert_eq!(ok("/a/b/c.md"), "/a/b/c.md");
        assert_eq!(ok("/a/./b//c.md"), "/a/b/c.md");
        assert_eq!(ok("/a/x/../b/c.md/"), "/a/b/c.md");
        assert_eq!(ok("/"), "/");
        for bad in [
            "a/b.md",
            "./b.md",
            "",
            "/../etc/passwd",
            "/a/../../b",
            "/a\nb",
        ] {
            let err = canonical_path(bad).unwrap_err();
            assert_eq!(err.code, ErrorCode::InvalidSourcePath, "{bad:?}");
        }
        assert!(canonical_path(&format!("/{}", "a".repeat(MAX_PATH_BYTES))).is_err());
    }

    #[test]
    fn a_source_path_must_be_given_canonical_and_a_file_source_needs_one() {
        let checked = |t, p| source(t, p).checked();
        assert!(checked(SourceType::IngestFile, Some("/srv/o1/memory/ingest/a.md")).is_ok());
        assert!(checked(SourceType::WorkflowOutput, None).is_ok());
        for (t, p) in [
            (SourceType::IngestFile, None),
            (
                SourceType::IngestFile,
                Some("/srv/o1/memory/ingest/../../o2/a.md"),
            ),
            (SourceType::Manual, Some("relative/a.md")),
            (SourceType::Manual, Some("/srv//a.md")),
        ] {
            let err = checked(t, p).unwrap_err();
            assert_eq!(err.code, ErrorCode::InvalidSourcePath, "{p:?}");
        }
        let mut bad_id = source(SourceType::ChannelTranscript, None);
        bad_id.conversation_id = Some("x".repeat(MAX_IDENTIFIER_CHARS + 1));
        assert!(bad_id.checked().is_err());
    }

    #[test]
    fn sources_differing_in_any_field_differ() {
        let a = source(SourceType::Manual, None);
        let mut b = a.clone();
        b.step_id = Some("".into());
        assert_ne!(a.fingerprint(), b.fingerprint());
        let mut c = a.clone();
        c.captured_by = CapturedBy::User;
        assert_ne!(a.fingerprint(), c.fingerprint());
        assert_eq!(a.fingerprint(), a.clone().fingerprint());
    }
}
