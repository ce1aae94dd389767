//! The orchestrator memory's settings (orchestrator_memory_subsystem.md, "Configuration
//! Additions"): the `[memory]` section of the configuration, with the spec's key names.
//! Unknown keys are refused; `memory.scope.cross_orchestrator = true` is refused in v1.

use std::num::NonZeroU32;
use std::path::PathBuf;

use serde::Deserialize;

crate::domain::string_enum! {
    /// When a bulletin is generated. v1 has one mode.
    BulletinMode {
        /// Before every message's selector and step context is assembled.
        EveryMessage => "every_message",
    }
}

impl BulletinMode {
    fn parse_alias(_: &str) -> Option<Self> {
        None
    }
}

crate::domain::string_enum! {
    /// What reads typed memories out of dropped text files and captured texts.
    MemoryExtractorKind {
        /// Their visible structure: labels, checklists, typed headings, paragraphs.
        Deterministic => "deterministic",
        /// The OpenAI-compatible endpoint of `[consolidation.llm]`.
        Llm => "llm",
    }
}

impl MemoryExtractorKind {
    fn parse_alias(_: &str) -> Option<Self> {
        None
    }
}

/// `[memory]`
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MemorySettings {
    /// Whether the orchestrator memory answers at all; when not, its tools answer
    /// `unavailable` with the reason, and bulletins are empty.
    pub enabled: bool,
    pub bulletin_mode: BulletinMode,
    /// A bulletin's size limit, in the service's tokens.
    pub bulletin_max_tokens: NonZeroU32,
    /// Where each orchestrator's folder is (`<root>/<orchestratorId>/memory/...`): empty
    /// is `<data_dir>/orchestrators` (set by the edge, which knows `data_dir`).
    #[serde(default)]
    pub root: PathBuf,
    pub retrieval: MemoryRetrievalSettings,
    pub ingest: IngestSettings,
    pub scope: ScopeSettings,
    /// The orchestrators this service knows: the tenants of its `orchestrator` keys (set
    /// by the edge, which reads the keys). Their folders are made and watched.
    #[serde(skip)]
    pub orchestrators: Vec<String>,
}

/// `[memory.retrieval]`
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MemoryRetrievalSettings {
    /// Candidates kept after the merge, before the bulletin compresses them.
    pub top_n: NonZeroU32,
    /// The k of reciprocal rank fusion.
    pub rrf_k: NonZeroU32,
}

/// `[memory.ingest]`
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct IngestSettings {
    pub enabled: bool,
    /// Files larger than this are rejected unread.
    pub max_file_size_mb: NonZeroU32,
    /// What reads `.md` and `.txt` files (and `orchestrator_capture`'s texts).
    pub extractor: MemoryExtractorKind,
    /// How often every ingest folder is listed again, as a safety net for changes the
    /// file-system watch missed (a network file system, a full event queue).
    pub rescan_secs: NonZeroU32,
    /// How long a file must be left unchanged before it is read, so that a file still being
    /// written is not read half-way (writers that rename a finished file into `ingest/` need
    /// no wait, but cannot be told apart).
    pub settle_ms: u32,
    /// Folders outside the orchestrator's own that a dropped file may lead to (a symbolic
    /// link into a shared workspace) or a JSON document's `sourcePath` may name. Absolute.
    #[serde(default)]
    pub shared_paths: Vec<PathBuf>,
}

impl IngestSettings {
    /// The size limit, in bytes.
    pub fn max_file_bytes(&self) -> u64 {
        u64::from(self.max_file_size_mb.get()) * 1024 * 1024
    }
}

/// `[memory.scope]`
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScopeSettings {
    /// Recall across orchestrators: must be `false` in v1.
    pub cross_orchestrator: bool,
}

impl MemorySettings {
    /// What the types cannot refuse, each naming its key. `llm_endpoint`: whether
    /// `[consolidation.llm]` names an endpoint (base URL and model), which the `llm`
    /// extractor reads with.
    pub fn problems(&self, llm_endpoint: bool) -> Vec<String> {
        let mut out = Vec::new();
        if self.ingest.extractor == MemoryExtractorKind::Llm && !llm_endpoint {
            out.push(
                "memory.ingest.extractor: `llm` reads with the endpoint of [consolidation.llm]: \
                 set its base_url and model"
                    .to_owned(),
            );
        }
        if self.scope.cross_orchestrator {
            out.push(
                "memory.scope.cross_orchestrator: must be false (recall across orchestrators \
                 is not allowed in v1)"
                    .to_owned(),
            );
        }
        if self.retrieval.top_n.get() > 200 {
            out.push("memory.retrieval.top_n: at most 200".to_owned());
        }
        if self.bulletin_max_tokens.get() > 100_000 {
            out.push("memory.bulletin_max_tokens: at most 100000".to_owned());
        }
        if self.ingest.max_file_size_mb.get() > 1024 {
            out.push("memory.ingest.max_file_size_mb: at most 1024".to_owned());
        }
        if self.ingest.settle_ms > 60_000 {
            out.push("memory.ingest.settle_ms: at most 60000".to_owned());
        }
        for path in &self.ingest.shared_paths {
            if !path.is_absolute() {
                out.push(format!(
                    "memory.ingest.shared_paths: {} is not absolute",
                    path.display()
                ));
            }
        }
        out
    }
}
