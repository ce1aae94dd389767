//! Purge (memory_butler.md §10): erasure, unlike `memory_forget`'s reversible tombstone. A
//! purge deletes what it names everywhere the content lives and rewrites the content of the
//! purged entities' past events to a marker; the stream keeps every event, in order, plus
//! one `*_purged` event per entity with who, when, why and a keyed hash of what was erased,
//! so an auditor holding the key can tell whether a given text was purged, and nobody
//! without it can.
//!
//! A fact is purged with its whole supersession chain (the versions it replaced and those
//! that replaced it): they are one statement's history, and keeping an older version of a
//! purged statement would keep what the purge was for.

use std::collections::BTreeSet;

use hmac::{Hmac, KeyInit, Mac};
use serde::Serialize;
use sha2::Sha256;
use uuid::Uuid;

use super::memory_type::MemoryType;
use super::text::{Limits, check_required_reason};
use crate::error::{ErrorCode, MemoryError, MemoryResult};

/// What a purge erases.
#[derive(Debug, Clone, PartialEq)]
pub enum PurgeTarget {
    /// One record (a fact with its supersession chain).
    Record { memory_type: MemoryType, id: Uuid },
    /// The records about a subject: facts whose subject it is, and every record whose text
    /// mentions it. Without `confirm`, only the list of candidates; with it, the confirmed
    /// candidates.
    Subject {
        subject: String,
        confirm: Option<Vec<Uuid>>,
    },
    /// Every record of one butler: its episodes, and the facts and rules it wrote.
    Butler(String),
    /// Every record of the tenant, which names itself as a confirmation (it must be the
    /// caller's).
    Tenant(String),
}

super::string_enum! {
    /// The kind of purge, as recorded in each `*_purged` event.
    PurgeScope {
        Record => "record",
        Subject => "subject",
        Butler => "butler",
        Tenant => "tenant",
    }
}

impl PurgeScope {
    fn parse_alias(_: &str) -> Option<Self> {
        None
    }
}

impl PurgeTarget {
    pub fn scope(&self) -> PurgeScope {
        match self {
            PurgeTarget::Record { .. } => PurgeScope::Record,
            PurgeTarget::Subject { .. } => PurgeScope::Subject,
            PurgeTarget::Butler(_) => PurgeScope::Butler,
            PurgeTarget::Tenant(_) => PurgeScope::Tenant,
        }
    }
}

/// The ids a purge deletes, by type.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PurgeSet {
    pub episodes: Vec<Uuid>,
    pub facts: Vec<Uuid>,
    pub rules: Vec<Uuid>,
}

impl PurgeSet {
    /// The set of these records.
    pub fn of<'a>(records: impl IntoIterator<Item = (MemoryType, &'a Uuid)>) -> PurgeSet {
        let mut set = PurgeSet::default();
        for (memory_type, id) in records {
            match memory_type {
                MemoryType::Episode => set.episodes.push(*id),
                MemoryType::Fact => set.facts.push(*id),
                MemoryType::Rule => set.rules.push(*id),
            }
        }
        set
    }

    /// The ids of each type.
    pub fn by_type(&self) -> [(MemoryType, &[Uuid]); 3] {
        [
            (MemoryType::Episode, &self.episodes),
            (MemoryType::Fact, &self.facts),
            (MemoryType::Rule, &self.rules),
        ]
    }

    /// Every id, whatever its type.
    pub fn all_ids(&self) -> Vec<Uuid> {
        self.by_type()
            .into_iter()
            .flat_map(|(_, ids)| ids)
            .copied()
            .collect()
    }

    pub fn counts(&self) -> PurgeCounts {
        PurgeCounts {
            episodes: self.episodes.len() as u64,
            facts: self.facts.len() as u64,
            rules: self.rules.len() as u64,
        }
    }
}

/// How many records of each type.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, schemars::JsonSchema)]
pub struct PurgeCounts {
    pub episodes: u64,
    pub facts: u64,
    pub rules: u64,
}

/// One record of a purge's answer: a candidate (with a preview of its text, for the person
/// confirming) or a purged record (with the keyed hash of what was erased).
#[derive(Debug, Clone, PartialEq, Serialize, schemars::JsonSchema)]
pub struct PurgeRecord {
    #[serde(rename = "type")]
    pub memory_type: MemoryType,
    pub id: Uuid,
    /// A candidate's text, shortened: what a confirmation agrees to erase.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub preview: Option<String>,
    /// A candidate by subject: `subject` (a fact about it) or `text` (its text mentions it).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub matched: Option<String>,
    /// A purged record: HMAC-SHA-256 of what was erased, under the audit key.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub content_hash: Option<String>,
}

/// The answer of a purge, or of its dry run.
#[derive(Debug, Clone, PartialEq, Serialize, schemars::JsonSchema)]
pub struct Purge {
    /// Nothing was erased: these are what a purge would erase.
    pub dry_run: bool,
    pub scope: PurgeScope,
    /// Names the purge in its `*_purged` events; absent for a dry run.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub purge_id: Option<Uuid>,
    pub counts: PurgeCounts,
    /// The records, at most [`MAX_LISTED`] of them (the audit stream has every one).
    pub records: Vec<PurgeRecord>,
    /// More records than are listed.
    pub truncated: bool,
    /// Past events whose content was rewritten to the marker.
    pub events_rewritten: u64,
}

/// Refuses confirmations of ids the candidates did not list; answers the confirmed
/// candidates as a set by type.
pub fn confirmed_set(candidates: &[PurgeRecord], confirm: &[Uuid]) -> MemoryResult<PurgeSet> {
    let listed: BTreeSet<Uuid> = candidates.iter().map(|c| c.id).collect();
    if let Some(stray) = confirm.iter().find(|id| !listed.contains(id)) {
        return Err(MemoryError::new(
            ErrorCode::NotACandidate,
            format!(
                "{stray} is not among the records about this subject; purge it by its type and id"
            ),
        ));
    }
    let confirmed: BTreeSet<&Uuid> = confirm.iter().collect();
    Ok(PurgeSet::of(
        candidates
            .iter()
            .filter(|c| confirmed.contains(&c.id))
            .map(|c| (c.memory_type, &c.id)),
    ))
}

impl Purge {
    /// The candidates of a purge by subject, for a person to confirm.
    pub fn candidates(scope: PurgeScope, mut candidates: Vec<PurgeRecord>) -> Purge {
        let counts = PurgeSet::of(candidates.iter().map(|c| (c.memory_type, &c.id))).counts();
        let truncated = candidates.len() > MAX_LISTED;
        candidates.truncate(MAX_LISTED);
        Purge {
            dry_run: true,
            scope,
            purge_id: None,
            counts,
            records: candidates,
            truncated,
            events_rewritten: 0,
        }
    }

    /// A dry run's answer: what `set` holds, by type and id (the first [`MAX_LISTED`]).
    pub fn would_erase(scope: PurgeScope, set: &PurgeSet) -> Purge {
        let records = set
            .by_type()
            .into_iter()
            .flat_map(|(memory_type, ids)| {
                ids.iter().map(move |id| PurgeRecord {
                    memory_type,
                    id: *id,
                    preview: None,
                    matched: None,
                    content_hash: None,
                })
            })
            .take(MAX_LISTED)
            .collect();
        Purge {
            dry_run: true,
            scope,
            purge_id: None,
            counts: set.counts(),
            records,
            truncated: set.all_ids().len() > MAX_LISTED,
            events_rewritten: 0,
        }
    }
}

/// A purge's reason, checked: required (it is recorded with every purged record's event)
/// and bounded like every reason.
pub fn purge_reason(reason: String, limits: &Limits) -> MemoryResult<String> {
    check_required_reason(reason, limits, "a purge, for the audit,")
}

/// Most records a purge's answer lists.
pub const MAX_LISTED: usize = 1000;

/// HMAC-SHA-256 under the audit key over the tenant, the record's type and id, and the
/// erased fields (as PostgreSQL's canonical JSON text of them), in hex: recomputing it from
/// a suspected text tells whether that text was purged.
pub fn content_hash(
    key: &[u8],
    tenant: &str,
    memory_type: MemoryType,
    id: Uuid,
    erased: &str,
) -> String {
    let mut mac =
        <Hmac<Sha256> as KeyInit>::new_from_slice(key).expect("HMAC takes a key of any length");
    for part in [tenant, memory_type.as_str(), &id.to_string(), erased] {
        mac.update(part.as_bytes());
        mac.update(&[0x1f]);
    }
    crate::domain::text::hex(&mac.finalize().into_bytes())
}

/// The first characters of a text, for a preview.
pub fn preview(text: &str) -> String {
    const CHARS: usize = 200;
    match text.char_indices().nth(CHARS) {
        Some((end, _)) => format!("{}…", &text[..end]),
        None => text.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_hash_depends_on_key_record_and_text() {
        let id = Uuid::nil();
        let h = |key: &[u8], text: &str| content_hash(key, "t", MemoryType::Fact, id, text);
        assert_eq!(h(b"key-one", "a"), h(b"key-one", "a"));
        assert_ne!(h(b"key-one", "a"), h(b"key-two", "a"));
        assert_ne!(h(b"key-one", "a"), h(b"key-one", "b"));
        assert_ne!(
            h(b"key-one", "a"),
            content_hash(b"key-one", "t", MemoryType::Rule, id, "a")
        );
        assert_eq!(h(b"k", "a").len(), 64);
    }

    #[test]
    fn only_listed_candidates_can_be_confirmed() {
        let candidate = |memory_type, n| PurgeRecord {
            memory_type,
            id: Uuid::from_u128(n),
            preview: Some("text".into()),
            matched: Some("text".into()),
            content_hash: None,
        };
        let candidates = [
            candidate(MemoryType::Fact, 1),
            candidate(MemoryType::Episode, 2),
        ];
        let set = confirmed_set(&candidates, &[Uuid::from_u128(2)]).unwrap();
        assert_eq!(set.episodes, vec![Uuid::from_u128(2)]);
        assert!(set.facts.is_empty());
        let err = confirmed_set(&candidates, &[Uuid::from_u128(3)]).unwrap_err();
        assert_eq!(err.code, ErrorCode::NotACandidate);
    }

    #[test]
    fn a_preview_is_cut_on_a_character() {
        assert_eq!(preview("short"), "short");
        let long = "é".repeat(300);
        let cut = preview(&long);
        assert_eq!(cut.chars().count(), 201);
        assert!(cut.ends_with('…'));
    }
}
