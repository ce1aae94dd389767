//! Redaction before persistence (memory_butler.md §10): what butlers are told (card numbers,
//! API keys, private keys pasted into a chat) is found by detectors and masked, hashed,
//! dropped or refused before a write reaches a transaction, so the row, its embedding, its
//! full-text index and its event only ever hold the redacted text.
//!
//! A policy names an action per detector: the built-ins (`detectors.rs`) and custom
//! patterns from the configuration, globally and per tenant. `mask` writes `[name]`; `hash`
//! writes `[name:<12 hex>]`, a keyed hash of the tenant and the value, so equal values still
//! match each other and nothing else; `drop` removes the span (and a metadata value whole);
//! `refuse` fails the write as `invalid_input`, naming the detector. What fired is counted
//! per detector ([`Findings`]) for the event; the spans themselves are kept nowhere.

pub mod detectors;

use std::collections::{BTreeMap, HashMap};

use hmac::{Hmac, KeyInit, Mac};
use regex::{Regex, RegexSet};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use sha2::Sha256;

use crate::error::{ErrorCode, MemoryError, MemoryResult};

/// What to do with a detected span.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RedactionAction {
    /// Leave it.
    Off,
    /// Replace it with `[detector]`.
    Mask,
    /// Replace it with `[detector:<keyed hash>]`.
    Hash,
    /// Remove it (a metadata value it is found in goes whole).
    Drop,
    /// Refuse the write.
    Refuse,
}

/// A detector of the configuration's own: a name (what a mask says) and a pattern.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CustomDetector {
    pub name: String,
    pub pattern: String,
    pub action: RedactionAction,
}

/// Actions per built-in detector (those not named keep the level below's) and custom
/// detectors: the global policy, or a tenant's changes to it.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct PolicySettings {
    pub detectors: BTreeMap<String, RedactionAction>,
    pub custom: Vec<CustomDetector>,
}

/// How many spans each detector found in one write.
pub type Findings = BTreeMap<String, u32>;

/// One compiled detector with its action.
struct Detector {
    name: String,
    regex: Regex,
    group: usize,
    check: fn(&str) -> bool,
    action: RedactionAction,
}

/// The enabled detectors of one policy, in priority order (custom ones first), and a set
/// that says at once which of them match anywhere in a text.
struct Policy {
    detectors: Vec<Detector>,
    any: RegexSet,
}

/// Every tenant's policy, compiled once.
pub struct Redactor {
    global: Policy,
    tenants: HashMap<String, Policy>,
    key: Vec<u8>,
}

impl std::fmt::Debug for Redactor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Redactor")
            .field("detectors", &self.global.detectors.len())
            .field("tenants", &self.tenants.len())
            .finish_non_exhaustive()
    }
}

/// What redaction made of a text.
pub struct Redacted {
    pub text: String,
    /// Whether a `drop` fired in it.
    pub dropped: bool,
}

impl Redactor {
    /// Compiles the global policy and each tenant's; `hash_key` keys the `hash` action.
    /// Errors name the setting at fault.
    pub fn new(
        global: &PolicySettings,
        tenants: &BTreeMap<String, PolicySettings>,
        hash_key: &str,
    ) -> Result<Redactor, String> {
        let default_actions = default_actions();
        let merged = |tenant: Option<&PolicySettings>| -> Result<Policy, String> {
            let mut actions = default_actions.clone();
            let mut custom = Vec::new();
            for settings in std::iter::once(global).chain(tenant) {
                for (name, action) in &settings.detectors {
                    if !actions.contains_key(name.as_str()) {
                        return Err(format!(
                            "redaction detector `{name}` is not built in (built-in: {})",
                            detectors::names().collect::<Vec<_>>().join(", ")
                        ));
                    }
                    actions.insert(name.clone(), *action);
                }
                custom.extend(settings.custom.iter().cloned());
            }
            compile(&actions, &custom)
        };
        let uses_hash = std::iter::once(global)
            .chain(tenants.values())
            .flat_map(|s| {
                s.detectors
                    .values()
                    .copied()
                    .chain(s.custom.iter().map(|c| c.action))
            })
            .any(|a| a == RedactionAction::Hash);
        if uses_hash && hash_key.len() < 16 {
            return Err(
                "redaction.hash_key: a `hash` action needs a key of at least 16 characters".into(),
            );
        }
        Ok(Redactor {
            global: merged(None)?,
            tenants: tenants
                .iter()
                .map(|(tenant, settings)| Ok((tenant.clone(), merged(Some(settings))?)))
                .collect::<Result<_, String>>()?,
            key: hash_key.as_bytes().to_vec(),
        })
    }

    /// A redactor that redacts nothing.
    pub fn disabled() -> Redactor {
        let off = default_actions()
            .into_keys()
            .map(|name| (name, RedactionAction::Off))
            .collect();
        Redactor {
            global: compile(&off, &[]).expect("a policy of no detector compiles"),
            tenants: HashMap::new(),
            key: Vec::new(),
        }
    }

    fn policy(&self, tenant: &str) -> &Policy {
        self.tenants.get(tenant).unwrap_or(&self.global)
    }

    /// `text` with `tenant`'s policy applied; `findings` counts what fired. A `refuse`
    /// fails with the detector named, never the span.
    pub fn text(
        &self,
        tenant: &str,
        field: &str,
        text: &str,
        findings: &mut Findings,
    ) -> MemoryResult<Redacted> {
        let policy = self.policy(tenant);
        let matched = policy.any.matches(text);
        if !matched.matched_any() {
            return Ok(Redacted {
                text: text.to_owned(),
                dropped: false,
            });
        }
        // Every span of every detector that matched somewhere, then the first of
        // overlapping ones by position, the higher-priority detector on a tie.
        let mut spans: Vec<(usize, usize, usize)> = Vec::new();
        for index in matched.iter() {
            let detector = &policy.detectors[index];
            for captures in detector.regex.captures_iter(text) {
                if let Some(m) = captures.get(detector.group)
                    && (detector.check)(m.as_str())
                {
                    spans.push((m.start(), m.end(), index));
                }
            }
        }
        spans.sort_by_key(|&(start, end, index)| (start, index, std::cmp::Reverse(end)));
        let mut kept: Vec<(usize, usize, usize)> = Vec::new();
        for span in spans {
            if kept.last().is_none_or(|last| span.0 >= last.1) {
                kept.push(span);
            }
        }
        if let Some(&(_, _, index)) = kept
            .iter()
            .find(|&&(_, _, i)| policy.detectors[i].action == RedactionAction::Refuse)
        {
            let name = &policy.detectors[index].name;
            return Err(MemoryError::new(
                ErrorCode::RedactionRefused,
                format!("`{field}` holds what the `{name}` detector refuses to store"),
            ));
        }
        let mut out = String::with_capacity(text.len());
        let mut at = 0;
        let mut dropped = false;
        for (start, end, index) in kept {
            let detector = &policy.detectors[index];
            out.push_str(&text[at..start]);
            match detector.action {
                RedactionAction::Mask => {
                    out.push('[');
                    out.push_str(&detector.name);
                    out.push(']');
                }
                RedactionAction::Hash => {
                    out.push('[');
                    out.push_str(&detector.name);
                    out.push(':');
                    out.push_str(&self.keyed_hash(tenant, &text[start..end]));
                    out.push(']');
                }
                RedactionAction::Drop => dropped = true,
                // Off and refuse never reach here (off is not compiled, refuse failed above).
                RedactionAction::Off | RedactionAction::Refuse => {
                    out.push_str(&text[start..end]);
                }
            }
            at = end;
            *findings.entry(detector.name.clone()).or_default() += 1;
        }
        out.push_str(&text[at..]);
        Ok(Redacted { text: out, dropped })
    }

    /// Every string in `value` (metadata) redacted; a value in which a `drop` fired is
    /// removed whole.
    pub fn json(
        &self,
        tenant: &str,
        field: &str,
        value: &mut Value,
        findings: &mut Findings,
    ) -> MemoryResult<()> {
        match value {
            Value::String(s) => {
                let redacted = self.text(tenant, field, s, findings)?;
                *value = if redacted.dropped {
                    Value::Null
                } else {
                    Value::String(redacted.text)
                };
            }
            Value::Array(items) => {
                let mut kept = Vec::with_capacity(items.len());
                for mut item in std::mem::take(items) {
                    let was_null = item.is_null();
                    self.json(tenant, field, &mut item, findings)?;
                    // A value a `drop` fired in comes back null; a null given stays.
                    if was_null || !item.is_null() {
                        kept.push(item);
                    }
                }
                *items = kept;
            }
            Value::Object(map) => {
                let mut gone = Vec::new();
                for (key, item) in map.iter_mut() {
                    let was_null = item.is_null();
                    self.json(tenant, field, item, findings)?;
                    if item.is_null() && !was_null {
                        gone.push(key.clone());
                    }
                }
                for key in gone {
                    map.remove(&key);
                }
            }
            _ => {}
        }
        Ok(())
    }

    /// A text that must still say something once redacted.
    pub fn content(
        &self,
        tenant: &str,
        text: &str,
        findings: &mut Findings,
    ) -> MemoryResult<String> {
        let redacted = self.text(tenant, "content", text, findings)?;
        if redacted.text.trim().is_empty() {
            return Err(MemoryError::new(
                ErrorCode::EmptyContent,
                "nothing is left of the text once redacted",
            ));
        }
        Ok(redacted.text)
    }

    /// Tags redacted; a tag a `drop` fired in goes.
    pub fn tags(
        &self,
        tenant: &str,
        tags: &[String],
        findings: &mut Findings,
    ) -> MemoryResult<Vec<String>> {
        let mut out = Vec::with_capacity(tags.len());
        for tag in tags {
            let redacted = self.text(tenant, "tags", tag, findings)?;
            if !redacted.dropped && !redacted.text.trim().is_empty() {
                out.push(redacted.text);
            }
        }
        Ok(out)
    }

    /// 12 hex digits of HMAC-SHA-256 over the tenant and the value: stable across restarts
    /// and writes, different across tenants, useless without the key.
    fn keyed_hash(&self, tenant: &str, value: &str) -> String {
        let mut mac = <Hmac<Sha256> as KeyInit>::new_from_slice(&self.key)
            .expect("HMAC takes a key of any length");
        mac.update(tenant.as_bytes());
        mac.update(&[0]);
        mac.update(value.as_bytes());
        crate::domain::text::hex(&mac.finalize().into_bytes()[..6])
    }
}

/// What is redacted unless configured otherwise: secrets (credentials, keys, tokens,
/// random-looking strings) and the numbers that are never needed to help someone (payment
/// cards, US social security numbers) are masked. Contact details and addresses are what a
/// butler is for, so they are kept.
fn default_actions() -> BTreeMap<String, RedactionAction> {
    detectors::names()
        .map(|name| {
            let action = match name {
                "email" | "phone" | "ip_address" | "iban" => RedactionAction::Off,
                _ => RedactionAction::Mask,
            };
            (name.to_owned(), action)
        })
        .collect()
}

fn compile(
    actions: &BTreeMap<String, RedactionAction>,
    custom: &[CustomDetector],
) -> Result<Policy, String> {
    let mut detectors = Vec::new();
    for c in custom {
        if c.action == RedactionAction::Off {
            continue;
        }
        let valid_name = !c.name.is_empty()
            && c.name
                .chars()
                .all(|ch| ch.is_ascii_lowercase() || ch.is_ascii_digit() || ch == '_');
        if !valid_name {
            return Err(format!(
                "redaction custom detector `{}`: a name is lowercase letters, digits and _",
                c.name
            ));
        }
        let regex = Regex::new(&c.pattern)
            .map_err(|e| format!("redaction custom detector `{}`: {e}", c.name))?;
        detectors.push(Detector {
            name: c.name.clone(),
            regex,
            group: 0,
            check: |_| true,
            action: c.action,
        });
    }
    for builtin in detectors::BUILTINS {
        let action = actions
            .get(builtin.name)
            .copied()
            .unwrap_or(RedactionAction::Off);
        if action == RedactionAction::Off {
            continue;
        }
        detectors.push(Detector {
            name: builtin.name.to_owned(),
            regex: detectors::compile(builtin),
            group: builtin.group,
            check: builtin.check,
            action,
        });
    }
    let any = RegexSet::new(detectors.iter().map(|d| d.regex.as_str()))
        .map_err(|e| format!("redaction: {e}"))?;
    Ok(Policy { detectors, any })
}

#[cfg(test)]
mod tests;
