//! Counting tokens for the context budget with a real tokenizer (any Hugging Face
//! `tokenizer.json`), never a character heuristic.

use std::num::NonZeroUsize;
use std::path::Path;
use std::sync::{Arc, Mutex};

use lru::LruCache;
use tokenizers::{NormalizerWrapper, PreTokenizerWrapper, Tokenizer};

use super::{EmbedError, shared_tokenizer};
use crate::domain::context_block::TokenCounter;

/// Lines (one memory each) whose counts are remembered: a context block is mostly the
/// same lines from one request to the next.
const LINE_CACHE: usize = 16_384;

/// Texts up to this size are cached by their content; whole blocks are not.
const LINE_BYTES: usize = 2048;

/// A tokenizer without padding or truncation, counting tokens without special tokens.
pub struct TokenizerCounter {
    tokenizer: Arc<Tokenizer>,
    lines: Mutex<LruCache<String, usize>>,
    /// No token spans whitespace (see `splits_at_whitespace`).
    additive: bool,
}

impl TokenizerCounter {
    /// Loads the tokenizer at `path` (shared with the embedder when it reads the same file),
    /// which neither pads nor truncates: counting must see every token.
    pub fn load(path: &Path) -> Result<Self, EmbedError> {
        let tokenizer = shared_tokenizer(path).map_err(|e| {
            EmbedError::Load(format!(
                "context tokenizer {}: {e} (set retrieval.context.tokenizer_path)",
                path.display()
            ))
        })?;
        Ok(TokenizerCounter {
            additive: splits_at_whitespace(&tokenizer),
            tokenizer,
            lines: Mutex::new(LruCache::new(
                NonZeroUsize::new(LINE_CACHE).expect("non-zero"),
            )),
        })
    }

    fn encode(&self, text: &str) -> usize {
        match self.tokenizer.encode_fast(text, false) {
            Ok(encoding) => encoding.len(),
            // Unencodable text must not slip past the budget: count it pessimistically.
            Err(_) => text.len(),
        }
    }
}

/// Whether the tokenizer splits text at every whitespace character, dropping it, before its
/// model sees the pieces, and normalizes character by character: then no token spans a
/// newline, and a text's count is the sum of its newline-separated parts' counts. True of
/// BERT-style tokenizers (MiniLM's); not of byte-level BPE or SentencePiece, which keep
/// whitespace inside tokens.
fn splits_at_whitespace(tokenizer: &Tokenizer) -> bool {
    let pre_tokenizer = matches!(
        tokenizer.get_pre_tokenizer(),
        Some(
            PreTokenizerWrapper::BertPreTokenizer(_)
                | PreTokenizerWrapper::Whitespace(_)
                | PreTokenizerWrapper::WhitespaceSplit(_)
        )
    );
    fn per_character(normalizer: &NormalizerWrapper) -> bool {
        match normalizer {
            NormalizerWrapper::BertNormalizer(_)
            | NormalizerWrapper::Lowercase(_)
            | NormalizerWrapper::StripAccents(_)
            | NormalizerWrapper::NFC(_)
            | NormalizerWrapper::NFD(_)
            | NormalizerWrapper::NFKC(_)
            | NormalizerWrapper::NFKD(_) => true,
            NormalizerWrapper::Sequence(sequence) => sequence.as_ref().iter().all(per_character),
            _ => false,
        }
    }
    let normalizer = tokenizer.get_normalizer().is_none_or(per_character);
    pre_tokenizer && normalizer
}

impl TokenCounter for TokenizerCounter {
    fn additive(&self) -> bool {
        self.additive
    }

    fn count(&self, text: &str) -> usize {
        if text.len() > LINE_BYTES {
            return self.encode(text);
        }
        if let Some(n) = self
            .lines
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(text)
        {
            return *n;
        }
        let n = self.encode(text);
        self.lines
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .put(text.to_owned(), n);
        n
    }
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use tokenizers::models::bpe::{BPE, Vocab};
    use tokenizers::pre_tokenizers::byte_level::ByteLevel;
    use uuid::Uuid;

    use super::*;
    use crate::domain::context_block::{Line, Quotas, assemble};

    /// A byte-level BPE `tokenizer.json` (the kind GPT-2 and its successors use), built
    /// here: every byte is a token, and merges make ` tea` one.
    fn bpe_file(dir: &Path) -> PathBuf {
        let mut alphabet: Vec<char> = ByteLevel::alphabet().into_iter().collect();
        alphabet.sort();
        let mut vocab = Vocab::default();
        for (i, c) in alphabet.iter().enumerate() {
            vocab.insert(c.to_string(), i as u32);
        }
        let merges: Vec<(String, String)> = [("Ġ", "t"), ("Ġt", "e"), ("Ġte", "a")]
            .iter()
            .map(|(a, b)| (a.to_string(), b.to_string()))
            .collect();
        for (a, b) in &merges {
            let next = vocab.len() as u32;
            vocab.insert(format!("{a}{b}"), next);
        }
        let bpe = BPE::builder()
            .vocab_and_merges(vocab, merges)
            .build()
            .expect("a valid BPE model");
        let mut tokenizer = Tokenizer::new(bpe);
        tokenizer.with_pre_tokenizer(Some(ByteLevel::default()));
        let path = dir.join("tokenizer.json");
        tokenizer.save(&path, false).expect("saved");
        path
    }

    /// The budget can be counted with the consuming model's own tokenizer, byte-level BPE
    /// included: such a tokenizer keeps whitespace inside its tokens, so a block is counted
    /// whole, and stays within its budget by that count.
    #[test]
    fn a_bpe_tokenizer_counts_the_budget_as_its_model_would() {
        let dir = tempfile::tempdir().unwrap();
        let counter = TokenizerCounter::load(&bpe_file(dir.path())).unwrap();
        assert!(
            !counter.additive(),
            "byte-level BPE is not additive across lines"
        );
        assert_eq!(counter.count("tea"), 1, "one merged token");
        assert_eq!(counter.count("zzz"), 4, "a space and three bytes");
        let lines: Vec<Line> = (0..40)
            .map(|i| Line {
                id: Uuid::from_u128(i),
                text: format!("- tea number {i} brewed\n"),
            })
            .collect();
        let quotas = Quotas {
            facts: 1.0,
            rules: 0.0,
            episodes: 0.0,
        };
        let block = assemble([lines, vec![], vec![]], 120, quotas, &counter);
        assert!(block.dropped > 0);
        assert!(block.tokens_used <= 120, "{}", block.tokens_used);
        assert!(counter.count(&block.text) <= 120);
    }
}
