//! Token sketches: a text's token vectors kept small enough to store beside its embedding,
//! so that the second stage reads a stored memory without running the model again. Each
//! token keeps the signs of [`SKETCH_BITS`] fixed projections of its vector (SimHash): the
//! angle between two vectors survives in how many signs they share. The question's tokens
//! stay exact and are projected the same way, so a measure is a table lookup and an addition
//! per four signs and eight question tokens. Only content tokens are sketched, the ones a
//! question asks with. On LoCoMo the sketches keep the second stage's gain
//! (docs/benchmarks.md, "A second stage" and "Sketches of content words").
//!
//! The projections are directions of +1 and -1 derived from sha256, not from a random
//! generator: a sketch stored today must mean the same to every later version. A sketch
//! starts with its format byte; a sketch of another format is read as none.

use std::sync::LazyLock;

use ndarray::{Array2, ArrayView2};
use sha2::{Digest, Sha256};

use super::DIMENSIONS;
use super::token_vectors::TokenVectors;

/// Projections per token: 64 bytes a token.
pub const SKETCH_BITS: usize = 512;
const TOKEN_BYTES: usize = SKETCH_BITS / 8;
/// The first byte of every sketch: these projections, this layout.
const FORMAT: u8 = 1;

/// The projections as a `SKETCH_BITS` x `DIMENSIONS` matrix of signs: sign `d` of
/// projection `b` is bit `d` of sha256("butler-memory token sketch 1", b, d / 256). One
/// projection a row, so that a question's few tokens are projected by dot products, and its
/// transpose is the right-hand side of the matrix product that projects many tokens at once.
static PROJECTIONS: LazyLock<Array2<f32>> = LazyLock::new(|| {
    let mut matrix = Array2::zeros((SKETCH_BITS, DIMENSIONS));
    for b in 0..SKETCH_BITS {
        let mut bits = Vec::with_capacity(DIMENSIONS / 8);
        for block in 0..DIMENSIONS.div_ceil(256) as u32 {
            let mut hash = Sha256::new();
            hash.update(b"butler-memory token sketch 1");
            hash.update((b as u32).to_le_bytes());
            hash.update(block.to_le_bytes());
            bits.extend_from_slice(&hash.finalize());
        }
        for d in 0..DIMENSIONS {
            matrix[[b, d]] = if bits[d / 8] >> (d % 8) & 1 == 1 {
                1.0
            } else {
                -1.0
            };
        }
    }
    matrix
});

/// Token rows a matrix product projects at once when sketching. The product (ndarray's,
/// matrixmultiply's kernel: tens of times faster than a loop of dot products) copies the whole
/// projection matrix into a packing buffer of half a megabyte on every call, so texts are
/// sketched together rather than one product each, in chunks that bound the product's output.
const CHUNK_ROWS: usize = 256;

/// Every projection of every row of `rows` (whole rows of `DIMENSIONS`): one row each, by
/// one matrix product. Each row's projections are the same whatever rows come with it (the
/// product sums every output in the same order), so a text sketches alike alone or in a batch.
fn project(rows: &[f32]) -> Array2<f32> {
    let view = ArrayView2::from_shape((rows.len() / DIMENSIONS, DIMENSIONS), rows)
        .expect("token vectors come in whole rows");
    view.dot(&PROJECTIONS.t())
}

/// Each projection's signs, eight dimensions a byte: bit `i` of byte `g` is set where
/// dimension `8 g + i` counts `+1`. What a question's projection by tables reads.
static PROJECTION_SIGNS: LazyLock<Vec<[u8; DIMENSION_BYTES]>> = LazyLock::new(|| {
    PROJECTIONS
        .rows()
        .into_iter()
        .map(|row| {
            let mut bytes = [0u8; DIMENSION_BYTES];
            for (d, sign) in row.iter().enumerate() {
                if *sign > 0.0 {
                    bytes[d / 8] |= 1 << (d % 8);
                }
            }
            bytes
        })
        .collect()
});

/// Groups of eight dimensions: a question row's tables, one each.
const DIMENSION_BYTES: usize = DIMENSIONS / 8;
/// The sign patterns of eight dimensions: one table entry each.
const BYTE_VALUES: usize = 256;

/// Every projection of a question's few rows. A projection is the row's values summed with
/// its signs, so each eight dimensions' 256 signed sums are tabled once a row (an addition
/// each) and a projection is 48 lookups: about 37 K additions a token instead of the 197 K
/// multiplications and additions of 512 dot products, and no packing buffer allocated and
/// filled, as a matrix product would, for a handful of tokens on every query.
fn project_few(rows: &[f32]) -> Array2<f32> {
    let mut out = Array2::zeros((rows.len() / DIMENSIONS, SKETCH_BITS));
    let mut sums = vec![0f32; DIMENSION_BYTES * BYTE_VALUES];
    for (row, mut projected) in rows.chunks_exact(DIMENSIONS).zip(out.rows_mut()) {
        for (eight, table) in row.chunks_exact(8).zip(sums.chunks_exact_mut(BYTE_VALUES)) {
            // Every sign -1, then each dimension's +1 added to the patterns below its bit.
            table[0] = -eight.iter().sum::<f32>();
            for (i, value) in eight.iter().enumerate() {
                let (below, above) = table.split_at_mut(1 << i);
                for (high, low) in above.iter_mut().zip(below.iter()) {
                    *high = low + 2.0 * value;
                }
            }
        }
        for (p, signs) in projected.iter_mut().zip(PROJECTION_SIGNS.iter()) {
            *p = signs
                .iter()
                .zip(sums.chunks_exact(BYTE_VALUES))
                .map(|(&byte, table)| table[usize::from(byte)])
                .sum();
        }
    }
    out
}

/// The sketch of every token of `text`.
#[cfg(test)]
pub fn sketch(text: &TokenVectors) -> Vec<u8> {
    sketch_all([text]).pop().expect("one sketch a text")
}

/// The sketches of `texts`, in order: their content tokens (`TokenVectors::content_rows`)
/// projected together, `CHUNK_ROWS` at a time.
pub fn sketch_all<'a>(texts: impl IntoIterator<Item = &'a TokenVectors>) -> Vec<Vec<u8>> {
    let texts: Vec<&TokenVectors> = texts.into_iter().collect();
    let counts: Vec<usize> = texts.iter().map(|t| t.content_rows().count()).collect();
    let mut sketches: Vec<Vec<u8>> = counts
        .iter()
        .map(|count| {
            let mut out = Vec::with_capacity(1 + count * TOKEN_BYTES);
            out.push(FORMAT);
            out
        })
        .collect();
    let chunk = CHUNK_ROWS.min(counts.iter().sum());
    let mut owners = Vec::with_capacity(chunk);
    let mut rows = Vec::with_capacity(chunk * DIMENSIONS);
    for (owner, text) in texts.iter().enumerate() {
        for row in text.content_rows() {
            rows.extend_from_slice(row);
            owners.push(owner);
            if owners.len() == CHUNK_ROWS {
                append_signs(&rows, &owners, &mut sketches);
                rows.clear();
                owners.clear();
            }
        }
    }
    append_signs(&rows, &owners, &mut sketches);
    sketches
}

/// The signs of `rows`' projections, each appended to the sketch of the text it belongs to.
fn append_signs(rows: &[f32], owners: &[usize], sketches: &mut [Vec<u8>]) {
    if owners.is_empty() {
        return;
    }
    for (token, &owner) in project(rows).rows().into_iter().zip(owners) {
        let mut bytes = [0u8; TOKEN_BYTES];
        for (b, p) in token.iter().enumerate() {
            if *p >= 0.0 {
                bytes[b / 8] |= 1 << (b % 8);
            }
        }
        sketches[owner].extend_from_slice(&bytes);
    }
}

/// A question ready to be measured against sketches: its content tokens' projections, each
/// row scaled to unit length and by 1 / sqrt(SKETCH_BITS), so that its product with a
/// token's signs estimates their cosine (times sqrt(2 / pi)). Kept as one signed byte per
/// projection and a scale per token (half a kilobyte a token, not two): the query cache
/// keeps a question with each query it remembers, and a byte's rounding moves a measure by
/// well under a hundredth.
#[derive(Debug, Clone, PartialEq)]
pub struct SketchQuery {
    /// `SKETCH_BITS` projections per token, each `value / scale` rounded.
    levels: Vec<i8>,
    scales: Vec<f32>,
}

impl SketchQuery {
    pub fn new(query: &TokenVectors) -> SketchQuery {
        let rows: Vec<f32> = query.content_rows().flatten().copied().collect();
        let projected = project_few(&rows);
        let mut levels = Vec::with_capacity(projected.len());
        let mut scales = Vec::with_capacity(projected.nrows());
        let unit = (SKETCH_BITS as f32).sqrt();
        for row in projected.rows() {
            let norm = row.dot(&row).sqrt().max(1e-12) * unit;
            let largest = row.iter().fold(0f32, |m, v| m.max(v.abs())).max(1e-12);
            levels.extend(row.iter().map(|v| (v / largest * 127.0).round() as i8));
            scales.push(largest / 127.0 / norm);
        }
        SketchQuery { levels, scales }
    }

    /// The bytes it holds (a cache weighs it by them).
    pub fn bytes(&self) -> usize {
        self.levels.len() + 4 * self.scales.len()
    }

    /// The question as a table of partial sums, `LANES` question tokens to an entry: for each
    /// group of `LANES` tokens, each nibble of a sketch token (four projections) and each of
    /// its sixteen values, every token's levels added with the signs the value's bits give.
    /// A sketch token's nibbles then pick its sum against eight question tokens at once, a
    /// lookup and an addition each, instead of 512 multiplications per pair of tokens.
    fn table(&self) -> Vec<Entry> {
        let tokens = self.scales.len();
        let mut table = vec![[0i16; LANES]; tokens.div_ceil(LANES) * GROUP_ENTRIES];
        for (t, levels) in self.levels.chunks_exact(SKETCH_BITS).enumerate() {
            let group = &mut table[t / LANES * GROUP_ENTRIES..][..GROUP_ENTRIES];
            for (four, entries) in levels
                .chunks_exact(4)
                .zip(group.chunks_exact_mut(NIBBLE_VALUES))
            {
                for (value, entry) in entries.iter_mut().enumerate() {
                    entry[t % LANES] = four
                        .iter()
                        .enumerate()
                        .map(|(i, &level)| {
                            let level = i16::from(level);
                            if value >> i & 1 == 1 { level } else { -level }
                        })
                        .sum();
                }
            }
        }
        table
    }

    /// [`measure_all_near`](Self::measure_all_near) of texts read alone.
    #[cfg(test)]
    pub fn measure_all<'a>(
        &self,
        sketches: impl IntoIterator<Item = &'a [u8]>,
    ) -> Vec<Option<f32>> {
        self.measure_all_near(sketches.into_iter().map(|s| (s, Vec::new())), 0.0)
    }

    /// How well each sketched text covers the question, in order, read with the turns next
    /// to it: the mean, over the question's content tokens, of each one's best match among
    /// the text's tokens (`token_vectors::max_sim` with the text's side in signs) or, at
    /// `share` of their likeness, among its neighbours' (`near`); `None` for a text whose
    /// own sketch is of another format or damaged (a neighbour's such sketch counts as no
    /// tokens). A reply often answers in none of the question's words, which the turn
    /// before it holds ("what did you do on Sunday?" / "we went hiking"): read with it, the
    /// reply covers both. The question becomes a table of partial sums once (`table`), and
    /// every text token is matched against it in integers: a search measures its whole set
    /// without a multiplication per candidate.
    pub fn measure_all_near<'a>(
        &self,
        texts: impl IntoIterator<Item = (&'a [u8], Vec<&'a [u8]>)>,
        share: f32,
    ) -> Vec<Option<f32>> {
        let table = self.table();
        let tokens = self.scales.len();
        let lanes = tokens.div_ceil(LANES) * LANES;
        let (mut own, mut near) = (vec![i32::MIN; lanes], vec![i32::MIN; lanes]);
        texts
            .into_iter()
            .map(|(sketch, neighbours)| {
                own.fill(i32::MIN);
                let mut matched = fold_best(&table, &mut own, sketch)?;
                near.fill(i32::MIN);
                if share > 0.0 {
                    for neighbour in neighbours {
                        matched |= fold_best(&table, &mut near, neighbour).unwrap_or(false);
                    }
                }
                if !matched || tokens == 0 {
                    return Some(0.0);
                }
                let total: f32 = own
                    .iter()
                    .zip(&near)
                    .zip(&self.scales)
                    .map(|((&o, &n), &scale)| {
                        let near = (n > i32::MIN).then_some(share * n as f32 * scale);
                        let own = (o > i32::MIN).then_some(o as f32 * scale);
                        own.into_iter().chain(near).fold(f32::MIN, f32::max)
                    })
                    .sum();
                Some(total / tokens as f32)
            })
            .collect()
    }
}

/// Raises each question token's best sum in `best` to its best match among `sketch`'s
/// tokens; whether the sketch had any, `None` for one of another format or a damaged one.
fn fold_best(table: &[Entry], best: &mut [i32], sketch: &[u8]) -> Option<bool> {
    let (&format, text) = sketch.split_first()?;
    if format != FORMAT || text.len() % TOKEN_BYTES != 0 {
        return None;
    }
    for token in text.chunks_exact(TOKEN_BYTES) {
        for (group, best) in table
            .chunks_exact(GROUP_ENTRIES)
            .zip(best.chunks_exact_mut(LANES))
        {
            let sums = dot(group, token);
            for (best, sum) in best.iter_mut().zip(sums) {
                *best = (*best).max(sum);
            }
        }
    }
    Some(!text.is_empty())
}

/// Question tokens one table entry holds.
const LANES: usize = 8;
/// Four projections of a sketch token: the table's unit.
const NIBBLES: usize = SKETCH_BITS / 4;
/// The values a nibble takes: the entries the table holds for each.
const NIBBLE_VALUES: usize = 16;
/// The entries of one group of `LANES` question tokens: a sketch token's every nibble, every
/// value.
const GROUP_ENTRIES: usize = NIBBLES * NIBBLE_VALUES;
/// The entries of one sketch byte: its low nibble's values, then its high nibble's.
const BYTE_ENTRIES: usize = 2 * NIBBLE_VALUES;
/// One nibble value's partial sums, one lane per question token of its group.
type Entry = [i16; LANES];
/// Sketch bytes whose partial sums add up in 16 bits: a level is at most 127 in magnitude,
/// an entry at most 4 x 127, and 32 bytes (64 entries) at most 32,512.
const BYTES_IN_16_BITS: usize = 32;

/// One sketch token against a group of the question's table: each lane's sum of its
/// levels with the token's signs.
fn dot(group: &[Entry], token: &[u8]) -> [i32; LANES] {
    let mut sums = [0i32; LANES];
    for (bytes, entries) in token
        .chunks_exact(BYTES_IN_16_BITS)
        .zip(group.chunks_exact(BYTES_IN_16_BITS * BYTE_ENTRIES))
    {
        let mut partial = [0i16; LANES];
        for (&byte, pair) in bytes.iter().zip(entries.chunks_exact(BYTE_ENTRIES)) {
            let low = &pair[usize::from(byte & 15)];
            let high = &pair[NIBBLE_VALUES + usize::from(byte >> 4)];
            for ((p, l), h) in partial.iter_mut().zip(low).zip(high) {
                *p += l + h;
            }
        }
        for (s, p) in sums.iter_mut().zip(partial) {
            *s += i32::from(p);
        }
    }
    sums
}

#[cfg(test)]
mod tests;
