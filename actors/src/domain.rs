//! The memory domain: validated types, states, the answers the engine gives, and pure rules
//! (decay, scoring, maturity, context assembly, the heuristic extractor). No IO lives here,
//! and nothing here knows the configuration: the weights and thresholds it needs are its
//! own types, which the configuration is made of.

pub mod author;
pub mod bm25;
pub mod bundle;
pub mod caller;
pub mod consolidation_status;
pub mod context_block;
pub mod cron;
pub mod decay;
pub mod diversity;
pub mod episode;
pub mod event;
pub mod extraction;
pub mod extractor_status;
pub mod fact;
pub mod feedback;
pub mod governance;
pub mod grounding;
pub mod heuristic_extractor;
pub mod intent;
pub mod intent_routing;
pub mod listing;
pub mod maturity;
pub mod memory_type;
pub mod orchestrator;
pub mod permanence;
pub mod provenance;
pub mod purge;
pub mod record;
pub mod redaction;
pub mod relation;
pub mod request_context;
pub mod rerank;
pub mod result_quality;
pub mod rule;
pub mod rule_evidence;
pub mod scoring;
pub mod sealed_bytes;
pub mod search;
pub mod shard_key;
pub mod stated_time;
pub mod stats;
pub mod sweep;
pub mod text;
pub mod time_window;
pub mod validity;
pub mod widening;

/// Declares a closed set of lowercase string values stored in TEXT columns: serde, schema,
/// `as_str`, `FromStr` (with the canonical list in the error) and `TryFrom<String>` for sqlx.
macro_rules! string_enum {
    (
        $(#[$meta:meta])*
        $name:ident { $($(#[$vmeta:meta])* $variant:ident => $text:literal),+ $(,)? }
    ) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord,
                 serde::Serialize, serde::Deserialize, schemars::JsonSchema)]
        pub enum $name {
            $($(#[$vmeta])* #[serde(rename = $text)] $variant),+
        }

        impl $name {
            /// Every value, in declaration order.
            #[allow(dead_code, reason = "not every closed set needs its list")]
            pub const ALL: &'static [$name] = &[$($name::$variant),+];

            pub fn as_str(self) -> &'static str {
                match self {
                    $($name::$variant => $text),+
                }
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl std::str::FromStr for $name {
            type Err = $crate::error::MemoryError;

            fn from_str(s: &str) -> Result<Self, Self::Err> {
                match s {
                    $($text => Ok($name::$variant),)+
                    _ => $name::parse_alias(s).ok_or_else(|| {
                        $crate::error::MemoryError::new(
                            $crate::error::ErrorCode::UnknownValue,
                            format!(
                                "unknown {} `{}`, expected one of: {}",
                                stringify!($name),
                                s,
                                [$($text),+].join(", ")
                            ),
                        )
                    }),
                }
            }
        }

        impl TryFrom<String> for $name {
            type Error = $crate::error::MemoryError;

            fn try_from(s: String) -> Result<Self, Self::Error> {
                s.parse()
            }
        }
    };
}
pub(crate) use string_enum;
