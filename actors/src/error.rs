//! The engine's one error type, `MemoryError`: a code from the catalogue (`error/code.rs`),
//! a message for people, and a retry hint when retrying helps.
//!
//! Every error says whose fault it is through [`ErrorClass`]: `invalid_input`, `forbidden`
//! and `not_found` are the caller's and never worth retrying; `overloaded` and `unavailable`
//! are transient, so callers (who fail open) may retry; `conflict` means the caller raced
//! another writer; `integrity` means a mutation would break an invariant and was refused
//! (fail closed); `internal` is a bug. The edge turns this into `{class, code, message}`.

mod causes;
mod code;

use std::fmt;

use serde::Serialize;

pub use causes::with_causes;
pub use code::ErrorCode;

/// The class of an error, as it appears on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorClass {
    InvalidInput,
    Forbidden,
    NotFound,
    Conflict,
    Overloaded,
    Unavailable,
    Integrity,
    Internal,
}

impl ErrorClass {
    /// Every class, for metrics that must show zero counts too.
    pub const ALL: [ErrorClass; 8] = [
        ErrorClass::InvalidInput,
        ErrorClass::Forbidden,
        ErrorClass::NotFound,
        ErrorClass::Conflict,
        ErrorClass::Overloaded,
        ErrorClass::Unavailable,
        ErrorClass::Integrity,
        ErrorClass::Internal,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            ErrorClass::InvalidInput => "invalid_input",
            ErrorClass::Forbidden => "forbidden",
            ErrorClass::NotFound => "not_found",
            ErrorClass::Conflict => "conflict",
            ErrorClass::Overloaded => "overloaded",
            ErrorClass::Unavailable => "unavailable",
            ErrorClass::Integrity => "integrity",
            ErrorClass::Internal => "internal",
        }
    }

    /// The HTTP status of this class, for the HTTP endpoints.
    pub fn http_status(self) -> u16 {
        match self {
            ErrorClass::InvalidInput => 400,
            ErrorClass::Forbidden => 403,
            ErrorClass::NotFound => 404,
            // Both refuse a change because of the record's state (a race, an invariant).
            ErrorClass::Conflict | ErrorClass::Integrity => 409,
            ErrorClass::Overloaded => 429,
            ErrorClass::Unavailable => 503,
            ErrorClass::Internal => 500,
        }
    }

    /// Whether a caller may retry the same request and expect a different outcome.
    pub fn is_retryable(self) -> bool {
        match self {
            ErrorClass::Overloaded | ErrorClass::Unavailable | ErrorClass::Conflict => true,
            ErrorClass::InvalidInput
            | ErrorClass::Forbidden
            | ErrorClass::NotFound
            | ErrorClass::Integrity
            | ErrorClass::Internal => false,
        }
    }
}

impl fmt::Display for ErrorClass {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// An error from the memory engine: what went wrong (its code, and through it its class)
/// and a message that says it in words.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{message}")]
pub struct MemoryError {
    pub code: ErrorCode,
    pub message: String,
    /// For `overloaded`: how long the caller should wait before retrying.
    pub retry_after_ms: Option<u64>,
}

impl MemoryError {
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        MemoryError {
            code,
            message: message.into(),
            retry_after_ms: None,
        }
    }

    /// An `overloaded` refusal with the time to wait before retrying.
    pub fn overloaded(code: ErrorCode, message: impl Into<String>, retry_after_ms: u64) -> Self {
        MemoryError {
            retry_after_ms: Some(retry_after_ms),
            ..Self::new(code, message)
        }
    }

    pub fn not_found(entity: impl fmt::Display, id: impl fmt::Display) -> Self {
        Self::new(ErrorCode::NotFound, format!("{entity} {id} not found"))
    }

    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::Internal, message)
    }

    pub fn class(&self) -> ErrorClass {
        self.code.class()
    }
}

/// Database errors are classified by what they mean to the caller; SQL text and driver
/// details go to the log, never onto the wire.
impl From<sqlx::Error> for MemoryError {
    fn from(err: sqlx::Error) -> Self {
        match &err {
            sqlx::Error::PoolTimedOut | sqlx::Error::PoolClosed | sqlx::Error::Io(_) => {
                tracing::warn!(error = %err, "database unreachable");
                MemoryError::new(
                    ErrorCode::DatabaseUnavailable,
                    "the database is unavailable",
                )
            }
            sqlx::Error::RowNotFound => MemoryError::not_found("record", "(unknown)"),
            sqlx::Error::Database(db) => {
                let code = db.code().map(|c| c.into_owned()).unwrap_or_default();
                match code.as_str() {
                    // unique_violation: another writer got there first.
                    "23505" => MemoryError::new(
                        ErrorCode::UniqueViolation,
                        "a concurrent write conflicted with this one; retry",
                    ),
                    // check_violation, not_null_violation, foreign_key_violation, and the
                    // append-only trigger (raise_exception): the database refused a state that
                    // breaks an invariant.
                    "23514" | "23502" | "23503" | "P0001" => {
                        tracing::error!(error = %err, "integrity violation refused by the database");
                        MemoryError::new(
                            ErrorCode::ConstraintViolation,
                            format!(
                                "the database refused a state that breaks an invariant ({})",
                                db.constraint().unwrap_or("trigger")
                            ),
                        )
                    }
                    // serialization_failure, deadlock_detected, lock_not_available
                    "40001" | "40P01" | "55P03" => MemoryError::new(
                        ErrorCode::SerializationFailure,
                        "a concurrent write conflicted with this one; retry",
                    ),
                    // query_canceled (statement_timeout), admin_shutdown, cannot_connect_now
                    "57014" | "57P01" | "57P03" => {
                        tracing::warn!(error = %err, "database did not answer in time");
                        MemoryError::new(
                            ErrorCode::DatabaseUnavailable,
                            "the database did not answer in time",
                        )
                    }
                    _ => {
                        tracing::error!(error = %err, "unexpected database error");
                        MemoryError::internal("unexpected database error")
                    }
                }
            }
            _ => {
                tracing::error!(error = %err, "unexpected database error");
                MemoryError::internal("unexpected database error")
            }
        }
    }
}

/// Result alias for the engine.
pub type MemoryResult<T> = Result<T, MemoryError>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transient_classes_are_retryable_and_caller_faults_are_not() {
        assert!(ErrorClass::Overloaded.is_retryable());
        assert!(ErrorClass::Unavailable.is_retryable());
        assert!(!ErrorClass::InvalidInput.is_retryable());
        assert!(!ErrorClass::Integrity.is_retryable());
        assert_eq!(ErrorClass::ALL.len(), 8);
    }

    #[test]
    fn pool_timeout_is_unavailable() {
        let err = MemoryError::from(sqlx::Error::PoolTimedOut);
        assert_eq!(err.class(), ErrorClass::Unavailable);
        assert_eq!(err.code, ErrorCode::DatabaseUnavailable);
    }
}
