//! all-MiniLM-L6-v2 on ONNX Runtime (loaded dynamically from the configured library) with
//! the `tokenizers` crate: mean pooling over the attention mask, then L2 normalisation, with
//! longest-in-batch padding and truncation at `max_tokens`, as sentence-transformers does.

use std::sync::{Arc, OnceLock};

use ort::session::Session;
use ort::session::builder::GraphOptimizationLevel;
use ort::value::Tensor;
use tokenizers::{Tokenizer, TruncationParams};

use super::{DIMENSIONS, EmbedError, Embedder, EmbedderConfig, ModelInfo};

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
}

impl MiniLm {
    /// Loads a tokenizer to share between sessions.
    pub fn load_tokenizer(config: &EmbedderConfig) -> Result<Arc<Tokenizer>, EmbedError> {
        let mut tokenizer = Tokenizer::from_file(&config.tokenizer_path).map_err(|e| {
            EmbedError::Load(format!(
                "tokenizer {}: {e} (run scripts/setup, or set embedder.tokenizer_path)",
                config.tokenizer_path.display()
            ))
        })?;
        // The shipped tokenizer.json pads every input to 128 and truncates there; the model
        // is meant to see up to 256 tokens. Padding is done per inference chunk (`run`), to
        // the longest text of the chunk.
        tokenizer.with_padding(None);
        tokenizer
            .with_truncation(Some(TruncationParams {
                max_length: config.max_tokens,
                ..Default::default()
            }))
            .map_err(|e| EmbedError::Load(format!("tokenizer truncation: {e}")))?;
        Ok(Arc::new(tokenizer))
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
        })
    }
}

impl Embedder for MiniLm {
    fn info(&self) -> &ModelInfo {
        &self.info
    }

    fn embed(&mut self, texts: &[String]) -> Result<Vec<Vec<f32>>, EmbedError> {
        if texts.is_empty() {
            return Ok(Vec::new());
        }
        // Tokenise without padding, then run texts of similar length together: a chunk is
        // padded to its longest text and attention costs grow with the square of that
        // length, so one long text among short ones would multiply the work.
        let encodings = self
            .tokenizer
            .encode_batch(texts.to_vec(), true)
            .map_err(|e| EmbedError::Inference(e.to_string()))?;
        let mut order: Vec<usize> = (0..encodings.len()).collect();
        order.sort_by_key(|&i| encodings[i].len());
        let mut out: Vec<Vec<f32>> = vec![Vec::new(); encodings.len()];
        let mut start = 0;
        while start < order.len() {
            // Chunks of at most SUB_BATCH texts, cut where the length more than doubles.
            let first = encodings[order[start]].len().max(1);
            let mut end = start + 1;
            while end < order.len()
                && end - start < SUB_BATCH
                && encodings[order[end]].len() <= 2 * first
            {
                end += 1;
            }
            let chunk: Vec<&tokenizers::Encoding> =
                order[start..end].iter().map(|&i| &encodings[i]).collect();
            for (vector, &i) in self.run(&chunk)?.into_iter().zip(&order[start..end]) {
                out[i] = vector;
            }
            start = end;
        }
        Ok(out)
    }
}

/// Most texts in one inference call; batches beyond it gain nothing on a CPU.
const SUB_BATCH: usize = 16;

impl MiniLm {
    /// One inference call over encodings padded to the longest of them.
    fn run(&mut self, encodings: &[&tokenizers::Encoding]) -> Result<Vec<Vec<f32>>, EmbedError> {
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
        Ok((0..batch)
            .map(|b| {
                mean_pool(
                    &hidden[b * seq * DIMENSIONS..(b + 1) * seq * DIMENSIONS],
                    &mask[b * seq..(b + 1) * seq],
                )
            })
            .collect())
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
