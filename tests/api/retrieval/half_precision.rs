//! Embeddings are stored at half precision (migration 34, pgvector's `halfvec`): a store
//! embedded at full precision keeps every vector through the migration, to within what half
//! precision holds, and its vector indexes are built again for the new type and still give
//! the nearest rows in order.

use crate::helpers::*;

/// The last migration with embeddings at full precision.
const FULL_PRECISION: i64 = 20261122000033;

/// A unit vector of 384 components, one per `seed`, as the model's are (components of
/// either sign, about 0.05 each).
fn unit_vector(seed: u32) -> Vec<f64> {
    let raw: Vec<f64> = (0..384)
        .map(|k| ((k as f64 + 1.0) * (f64::from(seed) + 1.0) * 0.37).sin())
        .collect();
    let norm = raw.iter().map(|x| x * x).sum::<f64>().sqrt();
    raw.into_iter().map(|x| x / norm).collect()
}

fn text(vector: &[f64]) -> String {
    let parts: Vec<String> = vector.iter().map(|x| format!("{x:.9}")).collect();
    format!("[{}]", parts.join(","))
}

fn cosine(a: &[f64], b: &[f64]) -> f64 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

#[tokio::test]
async fn the_migration_keeps_stored_embeddings_at_half_precision() {
    let (_database, pool) = database_at(FULL_PRECISION).await;
    let version = registered_model(&pool).await;
    let vectors: Vec<Vec<f64>> = (1..=6).map(unit_vector).collect();
    for (i, vector) in vectors.iter().enumerate() {
        sqlx::query(
            "INSERT INTO episodes (id, tenant_id, butler, content, created_at, last_referenced_at,
                                   expires_at, embedding, embedding_version_id)
             VALUES (('00000000-0000-7000-8000-00000000000' || $1)::uuid, 'tenant-a', 'health',
                     'Episode ' || $1, now(), now(), now() + interval '1 year', $2::vector, $3)",
        )
        .bind(i.to_string())
        .bind(text(vector))
        .bind(version)
        .execute(&pool)
        .await
        .unwrap();
    }

    butler_memory_actors::MIGRATOR.run(&pool).await.unwrap();

    for table in ["episodes", "facts", "rules", "orchestrator_memories"] {
        let (column, index): (String, String) = sqlx::query_as(
            "SELECT format_type(a.atttypid, a.atttypmod), i.indexdef
             FROM pg_attribute a, pg_indexes i
             WHERE a.attrelid = $1::regclass AND a.attname = 'embedding'
               AND i.tablename = $1 AND i.indexname = $1 || '_embedding'",
        )
        .bind(table)
        .fetch_one(&pool)
        .await
        .unwrap();
        assert_eq!(column, "halfvec(384)", "{table}");
        assert!(
            index.contains("hnsw (embedding halfvec_cosine_ops)"),
            "{index}"
        );
    }
    // Each vector is its old self to within half precision: 11 bits a component.
    for (i, vector) in vectors.iter().enumerate() {
        let distance: f64 = sqlx::query_scalar(
            "SELECT embedding::vector <=> $2::vector FROM episodes
             WHERE id = ('00000000-0000-7000-8000-00000000000' || $1)::uuid",
        )
        .bind(i.to_string())
        .bind(text(vector))
        .fetch_one(&pool)
        .await
        .unwrap();
        assert!(distance.abs() < 1e-5, "vector {i} moved by {distance}");
    }
    // Through the rebuilt index, nearest first, as exact cosine orders them.
    let query = unit_vector(40);
    let mut expected: Vec<(usize, f64)> = vectors
        .iter()
        .enumerate()
        .map(|(i, v)| (i, cosine(&query, v)))
        .collect();
    expected.sort_by(|a, b| b.1.total_cmp(&a.1));
    let mut conn = pool.acquire().await.unwrap();
    sqlx::query("SET enable_seqscan = off")
        .execute(&mut *conn)
        .await
        .unwrap();
    let plan: Vec<String> = sqlx::query_scalar(
        "EXPLAIN SELECT id FROM episodes ORDER BY embedding <=> $1::vector::halfvec LIMIT 6",
    )
    .bind(text(&query))
    .fetch_all(&mut *conn)
    .await
    .unwrap();
    assert!(
        plan.iter().any(|line| line.contains("embedding_idx")),
        "{plan:?}"
    );
    let found: Vec<(String, f64)> = sqlx::query_as(
        "SELECT right(id::text, 1), 1 - (embedding <=> $1::vector::halfvec) FROM episodes
         ORDER BY embedding <=> $1::vector::halfvec LIMIT 6",
    )
    .bind(text(&query))
    .fetch_all(&mut *conn)
    .await
    .unwrap();
    let found_order: Vec<String> = found.iter().map(|(id, _)| id.clone()).collect();
    let expected_order: Vec<String> = expected.iter().map(|(i, _)| i.to_string()).collect();
    assert_eq!(found_order, expected_order);
    for ((_, stored), (_, exact)) in found.iter().zip(&expected) {
        assert!((stored - exact).abs() < 1e-3, "{stored} against {exact}");
    }
}
