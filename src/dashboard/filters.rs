//! A page's filters, read exactly as the REST API reads its query (the same types, the same
//! validation), after dropping the fields an HTML form sends empty and the parameters that
//! only steer the page (`done`, what just happened).

use butler_memory_actors::{ErrorCode, MemoryError, MemoryResult};
use serde::de::DeserializeOwned;

/// Parameters of the page itself, never of the query it runs.
const PAGE_ONLY: [&str; 1] = ["done"];

/// `raw` (a request's query string) as `T`: empty values dropped, a bad value a clear
/// `invalid_arguments` error.
pub fn parse<T: DeserializeOwned>(raw: Option<&str>) -> MemoryResult<T> {
    let pairs: Vec<(String, String)> = serde_urlencoded::from_str(raw.unwrap_or(""))
        .map_err(|e| MemoryError::new(ErrorCode::InvalidArguments, e.to_string()))?;
    let kept: Vec<(String, String)> = pairs
        .into_iter()
        .filter(|(k, v)| !v.trim().is_empty() && !PAGE_ONLY.contains(&k.as_str()))
        .collect();
    let query = serde_urlencoded::to_string(&kept)
        .map_err(|e| MemoryError::new(ErrorCode::InvalidArguments, e.to_string()))?;
    serde_urlencoded::from_str(&query).map_err(|e| {
        MemoryError::new(
            ErrorCode::InvalidArguments,
            format!("a filter is not valid: {e}"),
        )
    })
}

/// The butler whose view a facts or rules page shows (`butler`, as the links of that
/// butler's page set it: what it sees rather than what the key sees), and the rest of
/// `raw`, for [`parse`].
pub fn view(raw: Option<&str>) -> (Option<String>, String) {
    let raw = raw.unwrap_or("");
    // What cannot be read is left whole, for `parse` to say what is wrong with it.
    let Ok(mut pairs) = serde_urlencoded::from_str::<Vec<(String, String)>>(raw) else {
        return (None, raw.to_owned());
    };
    let butler = pairs
        .iter()
        .rev()
        .find(|(k, v)| k == "butler" && !v.trim().is_empty())
        .map(|(_, v)| v.trim().to_owned());
    pairs.retain(|(k, _)| k != "butler");
    (
        butler,
        serde_urlencoded::to_string(&pairs).unwrap_or_default(),
    )
}

/// The query string `raw` with `cursor` set to `next` (the next page's link).
pub fn with_cursor(raw: Option<&str>, next: &uuid::Uuid) -> String {
    let mut pairs: Vec<(String, String)> =
        serde_urlencoded::from_str(raw.unwrap_or("")).unwrap_or_default();
    pairs.retain(|(k, v)| k != "cursor" && !v.is_empty() && !PAGE_ONLY.contains(&k.as_str()));
    pairs.push(("cursor".into(), next.to_string()));
    serde_urlencoded::to_string(&pairs).unwrap_or_default()
}

/// A posted form, or what is wrong with it (`invalid_arguments`).
pub fn form<T>(
    form: Result<axum::Form<T>, axum::extract::rejection::FormRejection>,
) -> MemoryResult<T> {
    form.map(|axum::Form(f)| f)
        .map_err(|e| MemoryError::new(ErrorCode::InvalidArguments, e.body_text()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use butler_memory_actors::FactQuery;

    #[test]
    fn empty_form_fields_are_no_filter_and_bad_ones_are_refused() {
        let q: FactQuery = parse(Some("subject=&permanence=stable&done=edited")).unwrap();
        assert_eq!(q.subject, None);
        assert!(q.permanence.is_some());
        let bad = parse::<FactQuery>(Some("permanence=forever")).unwrap_err();
        assert_eq!(bad.code, ErrorCode::InvalidArguments);
        assert!(parse::<FactQuery>(Some("nonsense=1")).is_err());
    }

    #[test]
    fn a_butlers_view_is_taken_apart_from_the_filters() {
        let (butler, rest) = view(Some("subject=ann&butler=health&done=edited"));
        assert_eq!(butler.as_deref(), Some("health"));
        let q: FactQuery = parse(Some(&rest)).unwrap();
        assert_eq!(q.subject.as_deref(), Some("ann"));
        let (butler, rest) = view(Some("butler=&q=tea"));
        assert_eq!((butler, rest.as_str()), (None, "q=tea"));
    }

    #[test]
    fn the_next_page_keeps_the_filters() {
        let id = uuid::Uuid::nil();
        let next = with_cursor(Some("subject=ann&cursor=x&q="), &id);
        assert_eq!(next, format!("subject=ann&cursor={id}"));
    }
}
