//! all-MiniLM-L6-v2 on ONNX Runtime (loaded dynamically from the configured library) with
//! the `tokenizers` crate: mean pooling over the attention mask, then L2 normalisation, with
//! longest-in-batch padding and truncation at `max_tokens`, as sentence-transformers does;
//! or, for the second stage, each text's token vectors before pooling.

use std::sync::{Arc, OnceLock};

use ort::session::Session;
use ort::session::builder::GraphOptimizationLevel;
use ort::value::Tensor;
use tokenizers::{PostProcessor, Tokenizer, TruncationDirection};

use super::{
    DIMENSIONS, EmbedError, Embedded, Embedder, EmbedderConfig, ModelInfo, TokenVectors,
    shared_tokenizer,
};

/// ONNX Runtime allows one environment per process; every session shares it.
static ENVIRONMENT: OnceLock<Result<ort::environment::Environment, String>> = OnceLock::new();

fn environment(
    config: &EmbedderConfig,
) -> Result<&'static ort::environment::Environment, EmbedError> {
    let env = ENVIRONMENT.get_or_init(|| {
        let path = &config.onnxruntime_path;
        if !path.is_file() {
            return Err(format!(
                "ONNX Runtime library not found at {} (run scripts/setup, or set embedder.onnxruntime_path)",
                path.display()
            ));
        }
        ort::init_from(path)
            .map_err(|e| format!("loading ONNX Runtime from {}: {e}", path.display()))?
            .with_name("butler-memory")
            .with_telemetry(false)
            .build()
            .map_err(|e| format!("creating the ONNX Runtime environment: {e}"))
    });
    env.as_ref().map_err(|e| EmbedError::Load(e.clone()))
}

/// One inference session with its tokenizer.
pub struct MiniLm {
    info: ModelInfo,
    tokenizer: Arc<Tokenizer>,
    session: Session,
    /// Most padded tokens in one inference call (`embedder.max_batch_tokens`).
    max_batch_tokens: usize,
    /// Longest input in tokens, special tokens included (`embedder.max_tokens`).
    max_tokens: usize,
}

impl MiniLm {
    /// Loads the tokenizer the sessions share (with the token counter too, when it reads
    /// the same file). The shipped tokenizer.json pads every input to 128 and truncates
    /// there; the model is meant to see up to 256 tokens. The shared tokenizer does neither:
    /// `encode` truncates at `max_tokens` and `run` pads each inference call to its longest
    /// text.
    pub fn load_tokenizer(config: &EmbedderConfig) -> Result<Arc<Tokenizer>, EmbedError> {
        shared_tokenizer(&config.tokenizer_path).map_err(|e| {
            EmbedError::Load(format!(
                "tokenizer {}: {e} (run scripts/setup, or set embedder.tokenizer_path)",
                config.tokenizer_path.display()
            ))
        })
    }

    /// Loads one session of the model.
    pub fn load(config: &EmbedderConfig, tokenizer: Arc<Tokenizer>) -> Result<MiniLm, EmbedError> {
        let env = environment(config)?;
        if !config.model_path.is_file() {
            return Err(EmbedError::Load(format!(
                "model not found at {} (run scripts/setup, or set embedder.model_path)",
                config.model_path.display()
            )));
        }
        let load =
            |e: ort::Error| EmbedError::Load(format!("model {}: {e}", config.model_path.display()));
        let session = Session::builder(env)
            .map_err(load)?
            .with_optimization_level(GraphOptimizationLevel::Level3)
            .map_err(|e| load(e.into()))?
            .with_intra_threads(config.intra_threads.get())
            .map_err(|e| load(e.into()))?
            // Spinning threads burn the cores the database and the other workers need; on a
            // loaded 2-core machine it halved throughput.
            .with_intra_op_spinning(false)
            .map_err(|e| load(e.into()))?
            .with_inter_op_spinning(false)
            .map_err(|e| load(e.into()))?
            // Memory patterns pre-plan buffers for one input shape; ours change every batch.
            .with_memory_pattern(false)
            .map_err(|e| load(e.into()))?
            .commit_from_file(&config.model_path)
            .map_err(load)?;
        Ok(MiniLm {
            info: ModelInfo {
                name: config.model_name.clone(),
                sha256: config.model_sha256.clone(),
                dimensions: DIMENSIONS,
                pooling: "mean",
            },
            tokenizer,
            session,
            max_batch_tokens: config.max_batch_tokens,
            max_tokens: config.max_tokens,
        })
    }
}

impl Embedder for MiniLm {
    fn info(&self) -> &ModelInfo {
        &self.info
    }

    fn embed(&mut self, texts: &[String]) -> Result<Vec<Vec<f32>>, EmbedError> {
        self.each_call(texts, |hidden, seq, encodings, mask| {
            (0..encodings.len())
                .map(|b| pooled(hidden, seq, b, mask))
                .collect()
        })
    }

    fn token_vectors(&mut self, texts: &[String]) -> Result<Vec<TokenVectors>, EmbedError> {
        self.each_call(texts, |hidden, seq, encodings, _| {
            encodings
                .iter()
                .enumerate()
                .map(|(b, encoding)| token_vectors(hidden, seq, b, encoding))
                .collect()
        })
    }

    /// One run for both: the pooled vector and the token vectors of the same hidden states.
    fn embed_with_tokens(&mut self, texts: &[String]) -> Result<Vec<Embedded>, EmbedError> {
        self.each_call(texts, |hidden, seq, encodings, mask| {
            encodings
                .iter()
                .enumerate()
                .map(|(b, encoding)| {
                    (
                        pooled(hidden, seq, b, mask),
                        token_vectors(hidden, seq, b, encoding),
                    )
                })
                .collect()
        })
    }
}

/// Text `b`'s embedding from a call's last hidden state and attention mask.
fn pooled(hidden: &[f32], seq: usize, b: usize, mask: &[i64]) -> Vec<f32> {
    mean_pool(
        &hidden[b * seq * DIMENSIONS..(b + 1) * seq * DIMENSIONS],
        &mask[b * seq..(b + 1) * seq],
    )
}

/// Text `b`'s own token vectors in a call's last hidden state: not [CLS] and [SEP], not
/// padding.
fn token_vectors(
    hidden: &[f32],
    seq: usize,
    b: usize,
    encoding: &tokenizers::Encoding,
) -> TokenVectors {
    let keep: Vec<usize> = (0..encoding.len())
        .filter(|&j| encoding.get_special_tokens_mask()[j] == 0)
        .collect();
    let mut rows = Vec::with_capacity(keep.len() * DIMENSIONS);
    for &j in &keep {
        let at = (b * seq + j) * DIMENSIONS;
        rows.extend_from_slice(&hidden[at..at + DIMENSIONS]);
    }
    let tokens: Vec<&str> = keep
        .iter()
        .map(|&j| encoding.get_tokens()[j].as_str())
        .collect();
    TokenVectors::new(rows, &tokens)
}

impl MiniLm {
    /// Runs `texts` through the model and gives each inference call's output to `read`, in
    /// request order. Tokenises without padding, then runs texts of similar length
    /// together: a call is padded to its longest text and attention costs grow with the
    /// square of that length, so one long text among short ones would multiply the work.
    fn each_call<T>(
        &mut self,
        texts: &[String],
        read: impl Fn(&[f32], usize, &[&tokenizers::Encoding], &[i64]) -> Vec<T>,
    ) -> Result<Vec<T>, EmbedError> {
        if texts.is_empty() {
            return Ok(Vec::new());
        }
        let encodings = self.encode(texts)?;
        let mut order: Vec<usize> = (0..encodings.len()).collect();
        order.sort_by_key(|&i| encodings[i].len());
        let lengths: Vec<usize> = order.iter().map(|&i| encodings[i].len()).collect();
        let mut out: Vec<Option<T>> = (0..encodings.len()).map(|_| None).collect();
        for chunk in chunks(&lengths, self.max_batch_tokens) {
            let call: Vec<&tokenizers::Encoding> = order[chunk.clone()]
                .iter()
                .map(|&i| &encodings[i])
                .collect();
            for (value, &i) in self.run(&call, &read)?.into_iter().zip(&order[chunk]) {
                out[i] = Some(value);
            }
        }
        Ok(out
            .into_iter()
            .map(|v| v.expect("every text is in one call"))
            .collect())
    }
}

impl MiniLm {
    /// Tokenizes as sentence-transformers does: the text cut at `max_tokens` less the special
    /// tokens, then the special tokens added (what a tokenizer configured to truncate does
    /// itself; the shared one is not, for the token counter's sake).
    fn encode(&self, texts: &[String]) -> Result<Vec<tokenizers::Encoding>, EmbedError> {
        let fail = |e: tokenizers::Error| EmbedError::Inference(e.to_string());
        let specials = self
            .tokenizer
            .get_post_processor()
            .map_or(0, |p| p.added_tokens(false));
        let keep = self.max_tokens.saturating_sub(specials).max(1);
        self.tokenizer
            .encode_batch(texts.to_vec(), false)
            .map_err(fail)?
            .into_iter()
            .map(|mut encoding| {
                encoding.truncate(keep, 0, TruncationDirection::Right);
                self.tokenizer
                    .post_process(encoding, None, true)
                    .map_err(fail)
            })
            .collect()
    }
}

/// Most texts in one inference call; batches beyond it gain nothing on a CPU.
const SUB_BATCH: usize = 16;

/// Splits texts sorted by token length into inference calls: at most [`SUB_BATCH`] texts,
/// at most `max_tokens` padded tokens (texts times the longest), and cut where the length
/// more than doubles. A call's activations grow with its padded tokens (attention with
/// their square), and ONNX Runtime keeps its arena at the largest call's size for the life
/// of the session: the token bound is what bounds the service's memory. Smaller calls cost
/// no more CPU per token (docs/benchmarks.md, "Fused attention"). A text alone is one call,
/// whatever its length.
fn chunks(sorted_lengths: &[usize], max_tokens: usize) -> Vec<std::ops::Range<usize>> {
    let mut chunks = Vec::new();
    let mut start = 0;
    while start < sorted_lengths.len() {
        let first = sorted_lengths[start].max(1);
        let mut end = start + 1;
        while end < sorted_lengths.len()
            && end - start < SUB_BATCH
            && sorted_lengths[end] <= 2 * first
            && (end + 1 - start) * sorted_lengths[end] <= max_tokens
        {
            end += 1;
        }
        chunks.push(start..end);
        start = end;
    }
    chunks
}

impl MiniLm {
    /// One inference call over encodings padded to the longest of them; `read` gets the
    /// last hidden state (`[batch, seq, DIMENSIONS]`), `seq` and the attention mask.
    fn run<T>(
        &mut self,
        encodings: &[&tokenizers::Encoding],
        read: impl Fn(&[f32], usize, &[&tokenizers::Encoding], &[i64]) -> Vec<T>,
    ) -> Result<Vec<T>, EmbedError> {
        let fail = |e: String| EmbedError::Inference(e);
        let batch = encodings.len();
        let seq = encodings.iter().map(|e| e.len()).max().unwrap_or(0).max(1);
        let mut ids = vec![0i64; batch * seq];
        let mut mask = vec![0i64; batch * seq];
        let mut types = vec![0i64; batch * seq];
        for (row, enc) in encodings.iter().enumerate() {
            let at = row * seq;
            for (j, &x) in enc.get_ids().iter().enumerate() {
                ids[at + j] = i64::from(x);
            }
            for (j, &x) in enc.get_attention_mask().iter().enumerate() {
                mask[at + j] = i64::from(x);
            }
            for (j, &x) in enc.get_type_ids().iter().enumerate() {
                types[at + j] = i64::from(x);
            }
        }
        let tensor = |data: Vec<i64>| {
            Tensor::from_array(([batch, seq], data)).map_err(|e| fail(e.to_string()))
        };
        let inputs = ort::inputs![
            "input_ids" => tensor(ids)?,
            "attention_mask" => tensor(mask.clone())?,
            "token_type_ids" => tensor(types)?,
        ];
        let outputs = self.session.run(inputs).map_err(|e| fail(e.to_string()))?;
        let (shape, hidden) = outputs["last_hidden_state"]
            .try_extract_tensor::<f32>()
            .map_err(|e| fail(e.to_string()))?;
        let dims = shape.iter().map(|&d| d as usize).collect::<Vec<_>>();
        if dims != [batch, seq, DIMENSIONS] {
            return Err(fail(format!("unexpected output shape {dims:?}")));
        }
        Ok(read(hidden, seq, encodings, &mask))
    }
}

/// Mean of the token vectors under the attention mask, scaled to unit length.
fn mean_pool(hidden: &[f32], mask: &[i64]) -> Vec<f32> {
    let mut sum = vec![0f32; DIMENSIONS];
    let mut count = 0f32;
    for (token, &m) in hidden.chunks_exact(DIMENSIONS).zip(mask) {
        if m != 0 {
            count += 1.0;
            for (s, v) in sum.iter_mut().zip(token) {
                *s += v;
            }
        }
    }
    let count = count.max(1e-9);
    sum.iter_mut().for_each(|s| *s /= count);
    normalize(&mut sum);
    sum
}

/// Scales a vector to unit length (a zero vector stays zero).
pub(crate) fn normalize(v: &mut [f32]) {
    let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
    if norm > 1e-12 {
        v.iter_mut().for_each(|x| *x /= norm);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The token bound, the text bound and the length cut each end a call; a long text
    /// alone past the bound is still embedded, in a call of its own.
    #[test]
    fn calls_are_bounded_by_padded_tokens_texts_and_length() {
        assert_eq!(chunks(&[10; 40], 512), vec![0..16, 16..32, 32..40]);
        assert_eq!(chunks(&[100; 12], 512), vec![0..5, 5..10, 10..12]);
        assert_eq!(chunks(&[10, 12, 30, 31], 512), vec![0..2, 2..4]);
        assert_eq!(chunks(&[40, 300, 300], 512), vec![0..1, 1..2, 2..3]);
        assert_eq!(chunks(&[], 512), Vec::<std::ops::Range<usize>>::new());
        for (lengths, bound) in [
            (vec![7, 9, 20, 64, 64, 65, 128, 256], 256),
            (vec![1; 100], 8),
        ] {
            let calls = chunks(&lengths, bound);
            assert_eq!(calls.iter().map(|c| c.len()).sum::<usize>(), lengths.len());
            for call in calls {
                let padded = call.len() * lengths[call.end - 1];
                assert!(
                    call.len() == 1 || padded <= bound,
                    "{call:?} of {lengths:?}"
                );
            }
        }
    }

    #[test]
    fn mean_pool_ignores_padding_and_normalises() {
        let mut hidden = vec![0f32; DIMENSIONS * 2];
        hidden[0] = 3.0;
        hidden[DIMENSIONS] = 100.0; // padding token: must not count
        let v = mean_pool(&hidden, &[1, 0]);
        assert!((v[0] - 1.0).abs() < 1e-6);
        assert!(v[1..].iter().all(|&x| x == 0.0));
    }
}
