//! Token sketches against the exact token vectors: a sketch's layout and pinned projections,
//! its measure following MaxSim (alone, with neighbours, in sets, from a question in bytes),
//! the lookup table's sums, and a sketch of another format or damaged read as none.

use ndarray::Axis;

use super::*;
use crate::embedder::token_vectors::max_sim;

fn measure(q: &SketchQuery, sketch: &[u8]) -> Option<f32> {
    q.measure_all([sketch]).pop().flatten()
}

/// A deterministic vector per seed, spread over every dimension.
fn vector(seed: u32) -> Vec<f32> {
    (0..DIMENSIONS as u32)
        .map(|d| ((seed * 7919 + d * 104_729) % 1000) as f32 / 1000.0 - 0.5)
        .collect()
}

fn text(words: &[(&str, u32)]) -> TokenVectors {
    let rows = words.iter().flat_map(|(_, s)| vector(*s)).collect();
    let tokens: Vec<&str> = words.iter().map(|(w, _)| *w).collect();
    TokenVectors::new(rows, &tokens)
}

/// A sketch is its format byte and 64 bytes a content token; a text without one keeps
/// every token, as a question does.
#[test]
fn a_sketch_is_its_format_and_sixty_four_bytes_a_content_token() {
    let s = sketch(&text(&[("the", 4), ("garden", 1), ("party", 2), ("?", 3)]));
    assert_eq!(s.len(), 1 + 2 * 64);
    assert_eq!(s[0], FORMAT);
    let content = sketch(&text(&[("garden", 1), ("party", 2)]));
    assert_eq!(s, content, "the same content tokens, the same sketch");
    assert_eq!(sketch(&text(&[("what", 9), ("?", 3)])).len(), 1 + 2 * 64);
    assert_eq!(sketch(&text(&[])), vec![FORMAT]);
}

/// The projections never change: a sketch stored by this version means the same to every
/// later one. The first projections of the first dimension, pinned (computed apart from
/// this code, with Python's hashlib).
#[test]
fn the_projections_are_pinned() {
    let mut axis = vec![0f32; DIMENSIONS];
    axis[0] = 1.0;
    let s = sketch(&TokenVectors::new(axis, &["garden"]));
    assert_eq!(s[1..9], [210, 16, 16, 13, 226, 18, 117, 53]);
}

/// Against sketches, a question ranks texts as the exact measure does, and a text that
/// holds the question's words comes near 1.
#[test]
fn the_measure_follows_the_exact_one() {
    let query = text(&[("what", 9), ("garden", 1), ("party", 2)]);
    let texts = [
        text(&[("the", 8), ("garden", 1), ("party", 2)]),
        text(&[("a", 8), ("garden", 1), ("fair", 5)]),
        text(&[("quantum", 6), ("flux", 7)]),
    ];
    let q = SketchQuery::new(&query);
    let measures: Vec<f32> = texts
        .iter()
        .map(|t| measure(&q, &sketch(t)).unwrap())
        .collect();
    let exact: Vec<f32> = texts.iter().map(|t| max_sim(&query, t)).collect();
    assert!(
        measures[0] > measures[1] && measures[1] > measures[2],
        "{measures:?}"
    );
    assert!(exact[0] > exact[1] && exact[1] > exact[2], "{exact:?}");
    // A token against its own sketch: the mean |projection| over their root mean
    // square, about 0.8 (sqrt(2 / pi)) rather than 1; the ranking is what counts.
    assert!(measures[0] > 0.7, "{measures:?}");
}

/// Read with its neighbours, a text covers the question words they hold, at `share` of
/// their likeness: a reply without the question's words rises above one that has none
/// of them next to it; its own words still count in full, and share 0 reads it alone.
#[test]
fn a_text_read_with_its_neighbours_covers_what_they_hold() {
    let q = SketchQuery::new(&text(&[("garden", 1), ("party", 2)]));
    let asked = sketch(&text(&[("garden", 1), ("party", 2)]));
    let reply = sketch(&text(&[("hiking", 5), ("lake", 6)]));
    let other = sketch(&text(&[("quantum", 7), ("flux", 8)]));
    let damaged = vec![FORMAT, 1, 2];
    let near = |share| {
        q.measure_all_near(
            [
                (reply.as_slice(), vec![asked.as_slice(), damaged.as_slice()]),
                (reply.as_slice(), vec![other.as_slice()]),
                (asked.as_slice(), vec![other.as_slice()]),
                (reply.as_slice(), vec![]),
                (damaged.as_slice(), vec![asked.as_slice()]),
            ],
            share,
        )
    };
    let m: Vec<f32> = near(0.7).into_iter().take(4).map(Option::unwrap).collect();
    let alone = measure(&q, &reply).unwrap();
    assert!(
        m[0] > alone + 0.3,
        "the turn before holds the question: {m:?}"
    );
    assert!(
        (m[1] - alone).abs() < 0.05,
        "a neighbour without it lends little: {m:?}"
    );
    assert_eq!(
        m[2],
        measure(&q, &asked).unwrap(),
        "its own words count in full"
    );
    assert!(m[0] < m[2], "a neighbour's words count at a share");
    assert_eq!(m[3], alone, "no neighbours: read alone");
    assert_eq!(near(0.7)[4], None, "its own sketch damaged");
    let unshared = near(0.0);
    assert_eq!(unshared[0], Some(alone), "share 0: read alone");
}

/// The question's bytes measure as its exact projections would: within a hundredth.
#[test]
fn a_question_in_bytes_measures_as_in_floats() {
    let query = text(&[("what", 9), ("garden", 1), ("party", 2)]);
    let q = SketchQuery::new(&query);
    assert_eq!(q.bytes(), 2 * (SKETCH_BITS + 4), "two content tokens");
    let rows: Vec<f32> = query.content_rows().flatten().copied().collect();
    let mut exact = project(&rows);
    for mut row in exact.rows_mut() {
        let norm = row.dot(&row).sqrt();
        row /= norm * (SKETCH_BITS as f32).sqrt();
    }
    for seeds in [[1, 2, 3], [4, 5, 6], [1, 7, 8]] {
        let passage = sketch(&text(&[("x", seeds[0]), ("b", seeds[1]), ("c", seeds[2])]));
        let signs = Array2::from_shape_fn((SKETCH_BITS, 3), |(b, t)| {
            if passage[1 + t * TOKEN_BYTES + b / 8] >> (b % 8) & 1 == 1 {
                1.0f32
            } else {
                -1.0
            }
        });
        let best = exact
            .dot(&signs)
            .map_axis(Axis(1), |r| r.fold(f32::MIN, |a, &b| a.max(b)));
        let want = best.mean().unwrap();
        let got = measure(&q, &passage).unwrap();
        assert!((got - want).abs() < 0.01, "{got} against {want}");
    }
}

/// The table's integers give each pair of tokens its exact sum of signed levels, for
/// questions longer than one table entry's lanes, the best match per question token.
#[test]
fn the_table_sums_as_the_levels_and_signs_do() {
    let words: Vec<(&str, u32)> = (0..11).map(|w| ("word", 40 + w)).collect();
    let q = SketchQuery::new(&text(&words));
    assert_eq!(q.scales.len(), 11, "two groups of lanes");
    let passage = sketch(&text(&[("x", 3), ("b", 41), ("c", 47), ("d", 9)]));
    let want: f32 = q
        .levels
        .chunks_exact(SKETCH_BITS)
        .zip(&q.scales)
        .map(|(levels, scale)| {
            let best = passage[1..]
                .chunks_exact(TOKEN_BYTES)
                .map(|token| {
                    (0..SKETCH_BITS)
                        .map(|b| {
                            let level = i32::from(levels[b]);
                            if token[b / 8] >> (b % 8) & 1 == 1 {
                                level
                            } else {
                                -level
                            }
                        })
                        .sum::<i32>()
                })
                .max()
                .unwrap();
            best as f32 * scale
        })
        .sum::<f32>()
        / 11.0;
    let got = measure(&q, &passage).unwrap();
    assert!(
        (got - want).abs() <= 1e-6 * want.abs().max(1.0),
        "{got} against {want}"
    );
}

/// The largest levels against the signs that agree with them all: 512 x 127 in every
/// lane, no partial sum past 16 bits.
#[test]
fn the_largest_sums_do_not_overflow() {
    for (level, byte) in [(127i8, 0xffu8), (-127, 0x00)] {
        let q = SketchQuery {
            levels: vec![level; 9 * SKETCH_BITS],
            scales: vec![1.0; 9],
        };
        let mut passage = vec![FORMAT];
        passage.extend([byte; TOKEN_BYTES]);
        assert_eq!(measure(&q, &passage), Some(512.0 * 127.0));
    }
}

/// A set measured at once gives each member's own measure, a damaged member among them
/// none, whatever came before it (the best matches start again for each member).
#[test]
fn a_set_measures_as_its_members_one_by_one() {
    let q = SketchQuery::new(&text(&[("garden", 1), ("party", 2)]));
    let members = [
        sketch(&text(&[("garden", 1), ("party", 2)])),
        vec![FORMAT, 1, 2],
        sketch(&text(&[("quantum", 6)])),
        sketch(&text(&[])),
        sketch(&text(&[("a", 8), ("garden", 1), ("fair", 5)])),
    ];
    let together = q.measure_all(members.iter().map(Vec::as_slice));
    let alone: Vec<Option<f32>> = members.iter().map(|m| measure(&q, m)).collect();
    assert_eq!(together, alone);
    assert_eq!(together[1], None);
    assert_eq!(together[3], Some(0.0));
    assert!(
        together[0] > together[4] && together[4] > together[2],
        "{together:?}"
    );
}

/// Texts sketched together (in more than one product) are each sketched as alone, byte
/// for byte: the indexer sketches a batch at once, a late interaction one text.
#[test]
fn texts_sketched_together_are_sketched_as_alone() {
    let texts: Vec<TokenVectors> = (0..60u32)
        .map(|t| {
            let words: Vec<(&str, u32)> = (0..(t % 13)).map(|w| ("w", t * 31 + w)).collect();
            text(&words)
        })
        .collect();
    assert!(
        texts
            .iter()
            .map(|t| t.content_rows().count())
            .sum::<usize>()
            > CHUNK_ROWS
    );
    let together = sketch_all(&texts);
    let alone: Vec<Vec<u8>> = texts.iter().map(sketch).collect();
    assert_eq!(together, alone);
    assert_eq!(together[0], vec![FORMAT]);
    assert_eq!(together[12].len(), 1 + 12 * TOKEN_BYTES);
}

/// A question's few rows, projected by tables, are the matrix product's rows.
#[test]
fn a_questions_projections_are_the_products() {
    let rows: Vec<f32> = (1..4).flat_map(vector).collect();
    let few = project_few(&rows);
    let product = project(&rows);
    assert_eq!(few.dim(), (3, SKETCH_BITS));
    for (a, b) in few.iter().zip(product.iter()) {
        assert!((a - b).abs() <= 1e-4 * b.abs().max(1.0), "{a} against {b}");
    }
}

#[test]
fn a_sketch_of_another_format_or_damaged_is_none() {
    let q = SketchQuery::new(&text(&[("garden", 1)]));
    let mut s = sketch(&text(&[("garden", 1)]));
    assert!(measure(&q, &s).is_some());
    s[0] = 2;
    assert_eq!(measure(&q, &s), None);
    assert_eq!(measure(&q, &[FORMAT, 1, 2, 3]), None);
    assert_eq!(measure(&q, &[]), None);
}
