//! A deterministic stand-in embedder for unit tests of logic around embeddings (batching,
//! storage, ranking plumbing). It hashes words into buckets, so texts sharing words are
//! similar; it knows nothing of meaning. Never used by the service.

use super::minilm::normalize;
use super::{DIMENSIONS, EmbedError, Embedder, ModelInfo, TokenVectors};

/// Bag-of-words feature hashing into [`DIMENSIONS`] buckets.
pub struct HashingEmbedder {
    info: ModelInfo,
}

impl Default for HashingEmbedder {
    fn default() -> Self {
        HashingEmbedder {
            info: ModelInfo {
                name: "hashing-test-embedder".into(),
                sha256: "none".into(),
                dimensions: DIMENSIONS,
                pooling: "sum",
            },
        }
    }
}

impl Embedder for HashingEmbedder {
    fn info(&self) -> &ModelInfo {
        &self.info
    }

    fn embed(&mut self, texts: &[String]) -> Result<Vec<Vec<f32>>, EmbedError> {
        Ok(texts
            .iter()
            .map(|text| {
                let mut v = vec![0f32; DIMENSIONS];
                for word in words(text) {
                    v[bucket(word)] += 1.0;
                }
                normalize(&mut v);
                v
            })
            .collect())
    }

    /// A token per word, its vector the word's bucket alone.
    fn token_vectors(&mut self, texts: &[String]) -> Result<Vec<TokenVectors>, EmbedError> {
        Ok(texts
            .iter()
            .map(|text| {
                let tokens: Vec<&str> = words(text).collect();
                let mut rows = vec![0f32; tokens.len() * DIMENSIONS];
                for (i, word) in tokens.iter().enumerate() {
                    rows[i * DIMENSIONS + bucket(word)] = 1.0;
                }
                TokenVectors::new(rows, &tokens)
            })
            .collect())
    }
}

fn words(text: &str) -> impl Iterator<Item = &str> {
    text.split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
}

/// The word's bucket. FNV-1a: stable across runs and platforms, unlike the std hasher.
fn bucket(word: &str) -> usize {
    let hash = word
        .to_lowercase()
        .bytes()
        .fold(0xcbf29ce484222325u64, |h, b| {
            (h ^ u64::from(b)).wrapping_mul(0x100000001b3)
        });
    (hash % DIMENSIONS as u64) as usize
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shared_words_make_similar_vectors() {
        let mut e = HashingEmbedder::default();
        let v = e
            .embed(&[
                "red apple pie".into(),
                "apple pie".into(),
                "quantum flux".into(),
            ])
            .unwrap();
        let dot = |a: &[f32], b: &[f32]| a.iter().zip(b).map(|(x, y)| x * y).sum::<f32>();
        assert!(dot(&v[0], &v[1]) > dot(&v[0], &v[2]));
        assert!((dot(&v[0], &v[0]) - 1.0).abs() < 1e-5);
    }
}
