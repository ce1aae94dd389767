//! A `tokenizer.json` loaded once per process, whoever asks for it: the embedder (which
//! truncates for the model) and the context's token counter (which must see every token)
//! read the same file by default, and a WordPiece vocabulary costs about 4.5 MB each time it
//! is loaded. So the shared tokenizer neither pads nor truncates: each user does what it
//! needs on the encodings.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock, Weak};

use tokenizers::Tokenizer;

/// Loaded tokenizers by path, kept while one of their users lives.
static LOADED: OnceLock<Mutex<HashMap<PathBuf, Weak<Tokenizer>>>> = OnceLock::new();

/// The tokenizer at `path`, without padding or truncation, shared with every other user of
/// the same file in this process.
pub fn shared_tokenizer(path: &Path) -> Result<Arc<Tokenizer>, String> {
    let key = path.canonicalize().unwrap_or_else(|_| path.to_path_buf());
    let mut loaded = LOADED
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|p| p.into_inner());
    if let Some(tokenizer) = loaded.get(&key).and_then(Weak::upgrade) {
        return Ok(tokenizer);
    }
    let mut tokenizer = Tokenizer::from_file(path).map_err(|e| e.to_string())?;
    tokenizer.with_padding(None);
    tokenizer.with_truncation(None).map_err(|e| e.to_string())?;
    let tokenizer = Arc::new(tokenizer);
    loaded.retain(|_, held| held.strong_count() > 0);
    loaded.insert(key, Arc::downgrade(&tokenizer));
    Ok(tokenizer)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Two users of one file share one tokenizer; once both are gone the next user loads
    /// it again (nothing is kept for a file no one uses).
    #[test]
    fn one_file_is_loaded_once_while_used() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("tokenizer.json");
        let model = tokenizers::models::wordlevel::WordLevel::builder()
            .vocab([("[UNK]".to_owned(), 0), ("tea".to_owned(), 1)].into())
            .unk_token("[UNK]".to_owned())
            .build()
            .unwrap();
        Tokenizer::new(model).save(&path, false).unwrap();
        let a = shared_tokenizer(&path).unwrap();
        let b = shared_tokenizer(&dir.path().join(".").join("tokenizer.json")).unwrap();
        assert!(Arc::ptr_eq(&a, &b));
        assert!(a.get_truncation().is_none() && a.get_padding().is_none());
        let weak = Arc::downgrade(&a);
        drop((a, b));
        assert!(weak.upgrade().is_none());
        let c = shared_tokenizer(&path).unwrap();
        assert_eq!(c.get_vocab_size(false), 2);
    }
}
