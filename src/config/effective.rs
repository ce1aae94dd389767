//! The effective configuration as TOML, for `check-config`: every key with the value it has
//! after the defaults, the file and the environment are layered, so an operator sees what
//! the service will run with. Secrets (API keys, the database password) are redacted.

use figment::value::{Dict, Value};

use super::ConfigError;

/// Keys whose values are secrets wherever they appear.
const SECRET_KEYS: &[&str] = &[
    "key",
    "api_key",
    "hash_key",
    "audit_key",
    "master_key",
    "previous_master_keys",
];

/// `given` as TOML, secrets redacted.
pub(super) fn render(mut given: Dict) -> Result<String, ConfigError> {
    redact(&mut given);
    toml::to_string_pretty(&given)
        .map_err(|e| ConfigError::Parse(format!("cannot print the configuration: {e}")))
}

fn redact(dict: &mut Dict) {
    for (key, value) in dict.iter_mut() {
        if SECRET_KEYS.contains(&key.as_str()) {
            match value {
                Value::String(tag, text) if !text.is_empty() => {
                    *value = Value::String(*tag, "<redacted>".into());
                }
                Value::Array(_, items) => {
                    for item in items {
                        if let Value::String(tag, _) = item {
                            *item = Value::String(*tag, "<redacted>".into());
                        }
                    }
                }
                _ => {}
            }
        } else if key == "headers" {
            if let Value::Dict(_, headers) = value {
                for header in headers.values_mut() {
                    if let Value::String(tag, _) = header {
                        *header = Value::String(*tag, "<redacted>".into());
                    }
                }
            }
        } else if key == "database_url" || key == "read_urls" {
            match value {
                Value::String(_, url) => *url = without_password(url),
                Value::Array(_, items) => {
                    for item in items {
                        if let Value::String(_, url) = item {
                            *url = without_password(url);
                        }
                    }
                }
                _ => {}
            }
        } else {
            redact_value(value);
        }
    }
}

fn redact_value(value: &mut Value) {
    match value {
        Value::Dict(_, dict) => redact(dict),
        Value::Array(_, items) => items.iter_mut().for_each(redact_value),
        _ => {}
    }
}

/// `postgres://user:secret@host/db` -> `postgres://user:<redacted>@host/db`.
pub(super) fn without_password(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    let Some((credentials, host)) = rest.rsplit_once('@') else {
        return url.to_owned();
    };
    match credentials.split_once(':') {
        Some((user, _)) => format!("{scheme}://{user}:<redacted>@{host}"),
        None => url.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwords_in_urls_are_redacted() {
        assert_eq!(
            without_password("postgres://app:s3cr@t@db:5432/memory"),
            "postgres://app:<redacted>@db:5432/memory"
        );
        assert_eq!(
            without_password("postgres://db/memory"),
            "postgres://db/memory"
        );
        assert_eq!(without_password(""), "");
    }
}
