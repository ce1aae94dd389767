//! Validation of caller-supplied text and JSON: sizes, identifiers, and what PostgreSQL
//! cannot store (NUL characters in TEXT and `\u0000` in JSONB), so that bad input is an
//! `invalid_input` error and never a database error.

use serde::Deserialize;
use serde_json::Value;

use crate::error::{ErrorCode, MemoryError, MemoryResult};

/// Size limits on what callers may store. Loaded from `[limits]` in the configuration.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Limits {
    /// Maximum size of `content`, in bytes of UTF-8.
    pub max_content_bytes: usize,
    /// Maximum size of `metadata`, serialised as JSON, in bytes.
    pub max_metadata_bytes: usize,
    /// Maximum number of tags on one fact or rule.
    pub max_tags: usize,
    /// Maximum length of one tag, in characters.
    pub max_tag_chars: usize,
    /// Maximum length of a fact's subject or predicate, in characters.
    pub max_key_chars: usize,
    /// Maximum number of links given with one store call.
    pub max_links: usize,
    /// Maximum size of a reason (a harmful mark's, a forget's), in bytes of UTF-8.
    pub max_reason_bytes: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_content_bytes: 32 * 1024,
            max_metadata_bytes: 16 * 1024,
            max_tags: 32,
            max_tag_chars: 64,
            max_key_chars: 200,
            max_links: 32,
            max_reason_bytes: 1024,
        }
    }
}

/// Longest identifier-like value (butler, scope, session and request ids), in characters.
pub const MAX_IDENTIFIER_CHARS: usize = 200;

/// Checks memory content: not blank, within the size limit, storable. Returns it trimmed.
pub fn check_content(field: &str, content: &str, limits: &Limits) -> MemoryResult<String> {
    let trimmed = content.trim();
    if trimmed.is_empty() {
        return Err(MemoryError::new(
            ErrorCode::EmptyContent,
            format!("`{field}` must not be empty"),
        ));
    }
    if trimmed.len() > limits.max_content_bytes {
        return Err(MemoryError::new(
            ErrorCode::ContentTooLarge,
            format!(
                "`{field}` is {} bytes; the limit is {} bytes",
                trimmed.len(),
                limits.max_content_bytes
            ),
        ));
    }
    check_storable(field, trimmed)?;
    Ok(trimmed.to_owned())
}

/// Checks a reason a caller gives (for a harmful mark, for forgetting): optional, within
/// `limits.max_reason_bytes`, storable. It is kept as given.
pub fn check_reason(
    field: &str,
    reason: Option<String>,
    limits: &Limits,
) -> MemoryResult<Option<String>> {
    if let Some(reason) = &reason {
        if reason.len() > limits.max_reason_bytes {
            return Err(MemoryError::new(
                ErrorCode::ContentTooLarge,
                format!(
                    "`{field}` is {} bytes; the limit is {} bytes",
                    reason.len(),
                    limits.max_reason_bytes
                ),
            ));
        }
        check_storable(field, reason)?;
    }
    Ok(reason)
}

/// Checks a reason that must be given (a purge, a decision about a rule: `what`), else
/// `empty_value`; otherwise as [`check_reason`].
pub fn check_required_reason(reason: String, limits: &Limits, what: &str) -> MemoryResult<String> {
    check_reason("reason", Some(reason), limits)?
        .filter(|r| !r.trim().is_empty())
        .ok_or_else(|| MemoryError::new(ErrorCode::EmptyValue, format!("{what} needs a `reason`")))
}

/// Checks a request id, session id or similar opaque identifier.
pub fn check_identifier_text(field: &str, value: &str) -> MemoryResult<()> {
    if value.trim().is_empty() {
        return Err(MemoryError::new(
            ErrorCode::EmptyValue,
            format!("`{field}` must not be empty"),
        ));
    }
    if value.chars().count() > MAX_IDENTIFIER_CHARS {
        return Err(MemoryError::new(
            ErrorCode::ValueTooLong,
            format!("`{field}` is longer than {MAX_IDENTIFIER_CHARS} characters"),
        ));
    }
    if value.chars().any(char::is_control) {
        return Err(MemoryError::new(
            ErrorCode::InvalidCharacters,
            format!("`{field}` must not contain control characters"),
        ));
    }
    Ok(())
}

/// Checks a butler or scope name: 1 to 64 of `[A-Za-z0-9_.-]`, starting with a letter or digit.
/// Names starting with `_` are reserved for the service (e.g. the `_tenant` shard).
pub fn check_name(field: &str, value: &str) -> MemoryResult<()> {
    let valid = !value.is_empty()
        && value.len() <= 64
        && value.starts_with(|c: char| c.is_ascii_alphanumeric())
        && value
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'));
    if valid {
        Ok(())
    } else {
        Err(MemoryError::new(
            ErrorCode::InvalidName,
            format!(
                "`{field}` must be 1 to 64 of A-Z a-z 0-9 _ - . starting with a letter or digit, got {value:?}"
            ),
        ))
    }
}

/// Normalises a fact's subject or predicate so that "User" and " user " name the same thing:
/// lowercase, trimmed, inner whitespace collapsed to one space.
pub fn normalize_key(field: &str, value: &str, limits: &Limits) -> MemoryResult<String> {
    let normalized = value
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
        .to_lowercase();
    if normalized.is_empty() {
        return Err(MemoryError::new(
            ErrorCode::EmptyValue,
            format!("`{field}` must not be empty"),
        ));
    }
    if normalized.chars().count() > limits.max_key_chars {
        return Err(MemoryError::new(
            ErrorCode::ValueTooLong,
            format!(
                "`{field}` is longer than {} characters",
                limits.max_key_chars
            ),
        ));
    }
    check_storable(field, &normalized)?;
    Ok(normalized)
}

/// Checks tags: bounded count and length, no blanks; returns them trimmed and de-duplicated
/// in first-seen order.
pub fn check_tags(tags: Vec<String>, limits: &Limits) -> MemoryResult<Vec<String>> {
    if tags.len() > limits.max_tags {
        return Err(MemoryError::new(
            ErrorCode::TooManyTags,
            format!("at most {} tags are allowed", limits.max_tags),
        ));
    }
    let mut out: Vec<String> = Vec::with_capacity(tags.len());
    for tag in tags {
        let tag = tag.trim().to_owned();
        if tag.is_empty() || tag.chars().count() > limits.max_tag_chars {
            return Err(MemoryError::new(
                ErrorCode::InvalidTag,
                format!(
                    "each tag must be 1 to {} characters, got {tag:?}",
                    limits.max_tag_chars
                ),
            ));
        }
        check_storable("tags", &tag)?;
        if !out.contains(&tag) {
            out.push(tag);
        }
    }
    Ok(out)
}

/// Checks caller metadata: a JSON object within the size limit with no `\u0000` anywhere.
pub fn check_metadata(metadata: Option<Value>, limits: &Limits) -> MemoryResult<Value> {
    let metadata = metadata.unwrap_or_else(|| Value::Object(Default::default()));
    if !metadata.is_object() {
        return Err(MemoryError::new(
            ErrorCode::InvalidMetadata,
            "`metadata` must be a JSON object",
        ));
    }
    let size = serialised_len(&metadata);
    if size > limits.max_metadata_bytes {
        return Err(MemoryError::new(
            ErrorCode::MetadataTooLarge,
            format!(
                "`metadata` is {size} bytes; the limit is {} bytes",
                limits.max_metadata_bytes
            ),
        ));
    }
    check_json_storable(&metadata)?;
    Ok(metadata)
}

/// The length of a value serialised as compact JSON, counted as it is written rather than
/// built as a string: every episode write checks its metadata this way.
fn serialised_len(value: &Value) -> usize {
    struct Count(usize);
    impl std::io::Write for Count {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            self.0 += bytes.len();
            Ok(bytes.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut count = Count(0);
    // Writing a JSON value fails only if the writer does, and this one never does.
    let _ = serde_json::to_writer(&mut count, value);
    count.0
}

/// Checks an importance rating: a finite number from 0 to 10.
pub fn check_importance(importance: Option<f64>) -> MemoryResult<f64> {
    let value = importance.unwrap_or(5.0);
    if value.is_finite() && (0.0..=10.0).contains(&value) {
        Ok(value)
    } else {
        Err(MemoryError::new(
            ErrorCode::InvalidImportance,
            format!("`importance` must be between 0 and 10, got {value}"),
        ))
    }
}

/// Checks a confidence: a finite number in (0, 1].
pub fn check_confidence(confidence: Option<f64>, default: f64) -> MemoryResult<f64> {
    let value = confidence.unwrap_or(default);
    if value.is_finite() && value > 0.0 && value <= 1.0 {
        Ok(value)
    } else {
        Err(MemoryError::new(
            ErrorCode::InvalidConfidence,
            format!("`confidence` must be greater than 0 and at most 1, got {value}"),
        ))
    }
}

fn check_storable(field: &str, value: &str) -> MemoryResult<()> {
    if value.contains('\0') {
        return Err(MemoryError::new(
            ErrorCode::InvalidCharacters,
            format!("`{field}` must not contain NUL characters"),
        ));
    }
    Ok(())
}

fn check_json_storable(value: &Value) -> MemoryResult<()> {
    match value {
        Value::String(s) => check_storable("metadata", s),
        Value::Array(items) => items.iter().try_for_each(check_json_storable),
        Value::Object(map) => map.iter().try_for_each(|(k, v)| {
            check_storable("metadata", k)?;
            check_json_storable(v)
        }),
        Value::Null | Value::Bool(_) | Value::Number(_) => Ok(()),
    }
}

/// `bytes` in lowercase hexadecimal (digests, ids derived from them).
pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn content_is_trimmed_and_bounded() {
        let limits = Limits {
            max_content_bytes: 5,
            ..Limits::default()
        };
        assert_eq!(check_content("content", "  abc ", &limits).unwrap(), "abc");
        assert_eq!(
            check_content("content", "   ", &limits).unwrap_err().code,
            ErrorCode::EmptyContent
        );
        assert_eq!(
            check_content("content", "abcdef", &limits)
                .unwrap_err()
                .code,
            ErrorCode::ContentTooLarge
        );
        assert_eq!(
            check_content("content", "a\0b", &limits).unwrap_err().code,
            ErrorCode::InvalidCharacters
        );
    }

    #[test]
    fn keys_are_normalised() {
        let limits = Limits::default();
        assert_eq!(
            normalize_key("subject", "  The   User ", &limits).unwrap(),
            "the user"
        );
    }

    #[test]
    fn names_are_restricted() {
        assert!(check_name("butler", "health").is_ok());
        assert!(check_name("butler", "health-2.v1").is_ok());
        assert!(check_name("butler", "_tenant").is_err());
        assert!(check_name("butler", "").is_err());
        assert!(check_name("butler", "a b").is_err());
    }

    #[test]
    fn metadata_must_be_a_storable_object() {
        let limits = Limits::default();
        assert_eq!(check_metadata(None, &limits).unwrap(), json!({}));
        assert!(check_metadata(Some(json!([1])), &limits).is_err());
        assert!(check_metadata(Some(json!({"a": {"b": "x\u{0}y"}})), &limits).is_err());
        let big = json!({"a": "x".repeat(limits.max_metadata_bytes)});
        assert_eq!(
            check_metadata(Some(big), &limits).unwrap_err().code,
            ErrorCode::MetadataTooLarge
        );
    }

    #[test]
    fn metadata_is_measured_as_its_serialised_json() {
        for value in [
            json!({}),
            json!({"quote": "say \"hi\"\n", "café": [1, 2.5, null, true], "nested": {"é": "€"}}),
        ] {
            assert_eq!(serialised_len(&value), value.to_string().len());
        }
        // Exactly at the limit is allowed; one byte over is not.
        let exact = json!({"a": "x".repeat(10 - r#"{"a":""}"#.len())});
        let limits = Limits {
            max_metadata_bytes: 10,
            ..Limits::default()
        };
        assert!(check_metadata(Some(exact), &limits).is_ok());
        let over = json!({"a": "x".repeat(11 - r#"{"a":""}"#.len())});
        assert!(check_metadata(Some(over), &limits).is_err());
    }

    #[test]
    fn tags_are_deduplicated() {
        let tags = check_tags(
            vec!["a".into(), " a ".into(), "b".into()],
            &Limits::default(),
        )
        .unwrap();
        assert_eq!(tags, vec!["a", "b"]);
    }

    #[test]
    fn importance_and_confidence_bounds() {
        assert_eq!(check_importance(None).unwrap(), 5.0);
        assert!(check_importance(Some(11.0)).is_err());
        assert!(check_importance(Some(f64::NAN)).is_err());
        assert!(check_confidence(Some(0.0), 1.0).is_err());
        assert_eq!(check_confidence(None, 0.5).unwrap(), 0.5);
    }
}
