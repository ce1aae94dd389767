//! How a sealed fact's ciphertext is written in the audit stream: standard base64, so the
//! event says exactly what was stored without being readable.

use base64::Engine as _;

/// Serialises `Some(bytes)` as a base64 string (`None` is skipped by the field's attribute).
pub fn serialize<S: serde::Serializer>(bytes: &Option<Vec<u8>>, out: S) -> Result<S::Ok, S::Error> {
    match bytes {
        Some(bytes) => out.serialize_str(&base64::engine::general_purpose::STANDARD.encode(bytes)),
        None => out.serialize_none(),
    }
}
