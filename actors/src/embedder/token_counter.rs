//! Counting tokens for the context budget with a real tokenizer (any Hugging Face
//! `tokenizer.json`), never a character heuristic.

use std::path::Path;

use tokenizers::Tokenizer;

use super::EmbedError;
use crate::domain::context::TokenCounter;

/// A tokenizer without padding or truncation, counting tokens without special tokens.
pub struct TokenizerCounter {
    tokenizer: Tokenizer,
}

impl TokenizerCounter {
    pub fn load(path: &Path) -> Result<Self, EmbedError> {
        let mut tokenizer = Tokenizer::from_file(path).map_err(|e| {
            EmbedError::Load(format!(
                "context tokenizer {}: {e} (set retrieval.context.tokenizer_path)",
                path.display()
            ))
        })?;
        // Counting must see every token: the file's own padding and truncation would lie.
        tokenizer.with_padding(None);
        tokenizer
            .with_truncation(None)
            .map_err(|e| EmbedError::Load(format!("context tokenizer: {e}")))?;
        Ok(TokenizerCounter { tokenizer })
    }
}

impl TokenCounter for TokenizerCounter {
    fn count(&self, text: &str) -> usize {
        match self.tokenizer.encode(text, false) {
            Ok(encoding) => encoding.len(),
            // Unencodable text must not slip past the budget: count it pessimistically.
            Err(_) => text.len(),
        }
    }
}
