//! Request lineage (memory_butler.md §11): the caller's `request_context`, carried into every
//! event row and echoed in every response so a trace can be followed across services.

use serde::{Deserialize, Serialize};
use uuid::Uuid;

use super::text::check_identifier_text;
use crate::error::MemoryResult;

/// Optional lineage metadata a caller attaches to a read or write.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RequestContext {
    /// The caller's request id; preserved in responses and in the audit stream.
    pub request_id: String,
    /// A sub-request within the request.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subrequest_id: Option<String>,
    /// A segment within the request.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub segment_id: Option<String>,
}

/// Lineage that always has a request id: the caller's, or one the service generated.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, schemars::JsonSchema)]
pub struct Lineage {
    pub request_id: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub subrequest_id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub segment_id: Option<String>,
    /// Whether `request_id` was generated here rather than given by the caller.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub generated: bool,
}

impl Lineage {
    /// Validates the caller's context, or generates a request id when there is none.
    pub fn resolve(context: Option<RequestContext>) -> MemoryResult<Lineage> {
        match context {
            Some(ctx) => {
                check_identifier_text("request_context.request_id", &ctx.request_id)?;
                if let Some(sub) = &ctx.subrequest_id {
                    check_identifier_text("request_context.subrequest_id", sub)?;
                }
                if let Some(seg) = &ctx.segment_id {
                    check_identifier_text("request_context.segment_id", seg)?;
                }
                Ok(Lineage {
                    request_id: ctx.request_id,
                    subrequest_id: ctx.subrequest_id,
                    segment_id: ctx.segment_id,
                    generated: false,
                })
            }
            None => Ok(Lineage::generated()),
        }
    }

    /// Lineage for work the service starts itself (sweeps, consolidation, tests).
    pub fn generated() -> Lineage {
        Lineage {
            request_id: format!("srv-{}", Uuid::now_v7()),
            subrequest_id: None,
            segment_id: None,
            generated: true,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn caller_request_id_is_kept_and_missing_one_is_generated() {
        let given = Lineage::resolve(Some(RequestContext {
            request_id: "req-1".into(),
            subrequest_id: Some("sub".into()),
            segment_id: None,
        }))
        .unwrap();
        assert_eq!(given.request_id, "req-1");
        assert!(!given.generated);
        let generated = Lineage::resolve(None).unwrap();
        assert!(generated.request_id.starts_with("srv-"));
        assert!(generated.generated);
    }

    #[test]
    fn empty_request_id_is_invalid() {
        let err = Lineage::resolve(Some(RequestContext::default())).unwrap_err();
        assert_eq!(err.class(), crate::error::ErrorClass::InvalidInput);
    }
}
