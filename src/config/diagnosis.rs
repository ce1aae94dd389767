//! Saying everything that is wrong with a configuration at once. serde stops at the first
//! error it meets, so when the whole does not load, each section the user changed is tried
//! alone over the documented defaults, and every section's error is reported, each as
//! `key: problem` with the file or environment variable it came from, without figment's
//! profile prefix (`default.`).

use figment::value::{Dict, Value};
use figment::{Figment, Profile, Source};

/// Every error figment reports, as `key: problem (origin)`.
pub(super) fn describe(error: figment::Error) -> Vec<String> {
    error
        .into_iter()
        .map(|e| {
            let key = e.path.join(".");
            let origin = match e.metadata.as_ref() {
                Some(m) => match &m.source {
                    Some(Source::File(path)) => format!(" (in {})", path.display()),
                    _ if m.name.contains("environment") => format!(
                        " (from {})",
                        m.interpolate(e.profile.as_ref().unwrap_or(&Profile::Default), &e.path)
                    ),
                    _ => String::new(),
                },
                None => String::new(),
            };
            if key.is_empty() {
                format!("{}{origin}", e.kind)
            } else {
                format!("{key}: {}{origin}", e.kind)
            }
        })
        .collect()
}

/// The problems of each key that differs from the defaults, each tried alone over them with
/// `check` (which loads a configuration and lists what is wrong with it): first each
/// top-level key, and within a section that has problems, each of its keys, so that two
/// mistakes in one section are both named. Problems that only keys together have are not
/// found here. Each problem says where its value came from (`figment` has the origins).
pub(super) fn per_key(
    figment: &Figment,
    documented: &Dict,
    given: &Dict,
    check: impl Fn(Figment) -> Vec<String>,
) -> Vec<String> {
    let try_alone = |path: &[&str], value: &Value| {
        let mut alone = documented.clone();
        set(&mut alone, path, value.clone());
        let alone = Figment::from(figment::providers::Serialized::defaults(Value::from(alone)));
        let origin = origin(figment, path, value);
        check(alone)
            .into_iter()
            .map(|problem| format!("{problem}{origin}"))
            .collect::<Vec<_>>()
    };
    let mut out = Vec::new();
    for (key, value) in given {
        let Some(default) = documented.get(key) else {
            continue;
        };
        if default == value {
            continue;
        }
        let problems = try_alone(&[key], value);
        match (value, default) {
            (Value::Dict(_, section), Value::Dict(_, defaults)) if problems.len() == 1 => {
                let inner: Vec<String> = section
                    .iter()
                    .filter(|(k, v)| defaults.get(*k) != Some(*v))
                    .flat_map(|(k, v)| try_alone(&[key, k], v))
                    .collect();
                // A problem of the section as a whole (two keys that disagree) shows only
                // when the section is tried whole.
                out.extend(if inner.is_empty() { problems } else { inner });
            }
            _ => out.extend(problems),
        }
    }
    out
}

/// Where `value` (at `path`) came from, as ` (in FILE)` or ` (from VARIABLE)`, or nothing
/// for the defaults and for fragments given in code.
pub(super) fn origin(figment: &Figment, path: &[&str], value: &Value) -> String {
    let Some(metadata) = figment.get_metadata(value.tag()) else {
        return String::new();
    };
    match &metadata.source {
        Some(Source::File(path)) => format!(" (in {})", path.display()),
        _ if metadata.name.contains("environment") => format!(
            " (from {}{})",
            super::ENV_PREFIX,
            path.join("__").to_uppercase()
        ),
        _ => String::new(),
    }
}

fn set(dict: &mut Dict, path: &[&str], value: Value) {
    match path {
        [] => {}
        [key] => {
            dict.insert((*key).to_owned(), value);
        }
        [key, rest @ ..] => {
            if let Some(Value::Dict(_, inner)) = dict.get_mut(*key) {
                set(inner, rest, value);
            }
        }
    }
}
