//! A tenant's vocabulary (migration 36): the words its memories hold, each with the vector
//! the model gives it alone, which a search widens its keyword query with
//! (`domain::widening`). The indexer finds the words of the rows it embeds that the
//! vocabulary lacks (`new_words`), embeds them with the rows and stores both in one
//! statement (`embedding_backlog.rs`, `learn_words`); rows embedded before (or while
//! widening was off) are walked once (`learn_walked_words`, `vocabulary_complete`); a purge,
//! an episode cleanup or a fact sealed in place takes the words of what it erases that no
//! other memory of the tenant holds (`forget_words`).

use sqlx::PgConnection;
use uuid::Uuid;

use super::Store;
use crate::domain::memory_type::MemoryType;
use crate::domain::widening::Neighbour;
use crate::error::MemoryResult;

/// A word of a row the vocabulary lacks: its lexeme (as the full-text index stems it), the
/// word it most often stands for in the row's batch (lower case), and a row that holds it.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct NewWord {
    pub tenant_id: String,
    pub id: Uuid,
    pub lexeme: String,
    pub word: String,
}

/// The longest word the vocabulary keeps, in characters: longer "words" are identifiers,
/// hashes or run-together text, no word a question would be widened to.
const LONGEST_WORD: i32 = 32;

/// A CTE, `learnt`, inserting the words a statement's `embedded` rows (a CTE of their
/// `tenant_id, id`) hold: `$first` to `$first + 4` are the words' tenants, rows, lexemes,
/// words and vectors, `$1` their model. A word whose row is not in `embedded` (purged
/// meanwhile) is not learnt: in one statement with what locks the rows (the embedding's
/// update, or a walk's `FOR KEY SHARE`), a purge either waits for both or finds neither.
pub fn learn_words(first: usize) -> String {
    let [tenants, rows, lexemes, words, vectors] =
        [first, first + 1, first + 2, first + 3, first + 4];
    format!(
        "learnt AS (
             INSERT INTO word_vectors (tenant_id, lexeme, word, embedding_version_id, embedding)
             SELECT w.tenant_id, w.lexeme, w.word, $1, w.embedding::halfvec
             FROM unnest(${tenants}::text[], ${rows}::uuid[], ${lexemes}::text[], ${words}::text[],
                         ${vectors}::vector[]) AS w(tenant_id, id, lexeme, word, embedding)
             JOIN embedded e ON e.tenant_id = w.tenant_id AND e.id = w.id
             ON CONFLICT (tenant_id, lexeme) DO UPDATE
                 SET word = excluded.word,
                     embedding_version_id = excluded.embedding_version_id,
                     embedding = excluded.embedding
                 WHERE word_vectors.embedding_version_id <> excluded.embedding_version_id
             RETURNING 1)"
    )
}

/// New words with their vectors, as the columns `learn_words` binds: tenants, rows,
/// lexemes, words, vectors.
pub type WordColumns = (
    Vec<String>,
    Vec<Uuid>,
    Vec<String>,
    Vec<String>,
    Vec<pgvector::Vector>,
);

/// `words` and their `vectors` (in order) as the columns `learn_words` binds.
pub fn word_columns(words: Vec<NewWord>, vectors: Vec<pgvector::Vector>) -> WordColumns {
    let mut columns: WordColumns = Default::default();
    for word in words {
        columns.0.push(word.tenant_id);
        columns.1.push(word.id);
        columns.2.push(word.lexeme);
        columns.3.push(word.word);
    }
    columns.4 = vectors;
    columns
}

impl Store {
    /// The words of `texts` (of the rows `rows`, each its tenant and id, in order) that their
    /// tenants' vocabularies lack for model `version`. Words are split and stemmed as
    /// `to_tsvector('english', ..)` does (its parser, and its stemming dictionary for the
    /// token types it stems), so a word's lexeme is the one the full-text index holds;
    /// numbers, addresses and stop words are no words here.
    #[tracing::instrument(target = "otel", name = "db.new_words", skip_all, fields(db.system.name = "postgresql", db.operation.name = "SELECT"))]
    pub async fn new_words(
        &self,
        version: i16,
        rows: &[(String, Uuid)],
        texts: &[String],
    ) -> MemoryResult<Vec<NewWord>> {
        let (tenants, ids): (Vec<&str>, Vec<Uuid>) =
            rows.iter().map(|(t, id)| (t.as_str(), *id)).unzip();
        Ok(sqlx::query_as(
            "SELECT DISTINCT ON (w.tenant_id, w.lexeme)
                    w.tenant_id, (array_agg(w.id))[1] AS id, w.lexeme, w.word
             FROM (SELECT t.tenant_id, t.id, lower(p.token) AS word,
                          (ts_lexize('english_stem', p.token))[1] AS lexeme
                   FROM unnest($2::text[], $3::uuid[], $4::text[]) AS t(tenant_id, id, text),
                        ts_parse('default', t.text) AS p
                   JOIN ts_token_type('default') AS k ON k.tokid = p.tokid
                   WHERE k.alias IN ('asciiword', 'word', 'hword_asciipart', 'hword_part')
                     AND length(p.token) <= $5) w
             WHERE w.lexeme IS NOT NULL AND w.lexeme !~ '[''\\\\]'
               AND NOT EXISTS (SELECT 1 FROM word_vectors v
                               WHERE v.tenant_id = w.tenant_id AND v.lexeme = w.lexeme
                                 AND v.embedding_version_id = $1)
             GROUP BY w.tenant_id, w.lexeme, w.word
             ORDER BY w.tenant_id, w.lexeme, count(*) DESC, w.word",
        )
        .bind(version)
        .bind(tenants)
        .bind(ids)
        .bind(texts)
        .bind(LONGEST_WORD)
        .fetch_all(self.pool())
        .await?)
    }

    /// Learns `words` (with their `vectors`, of model `version`) of rows of `memory_type`
    /// a walk read, for those rows that still hold an embedding of that model (locked while
    /// the words go in); returns how many words were stored.
    #[tracing::instrument(target = "otel", name = "db.learn_walked_words", skip_all, fields(db.system.name = "postgresql", db.operation.name = "INSERT"))]
    pub async fn learn_walked_words(
        &self,
        memory_type: MemoryType,
        version: i16,
        words: Vec<NewWord>,
        vectors: Vec<pgvector::Vector>,
    ) -> MemoryResult<u64> {
        if words.is_empty() {
            return Ok(0);
        }
        let sql = format!(
            "WITH embedded AS (
                 SELECT t.tenant_id, t.id FROM {table} t
                 WHERE (t.tenant_id, t.id) IN (SELECT * FROM unnest($2::text[], $3::uuid[]))
                   AND t.embedding_version_id = $1
                 FOR KEY SHARE),
             {learnt}
             SELECT count(*) FROM learnt",
            table = memory_type.table(),
            learnt = learn_words(2),
        );
        let (tenants, rows, lexemes, spelled, vectors) = word_columns(words, vectors);
        let stored: i64 = sqlx::query_scalar(sqlx::AssertSqlSafe(sql))
            .bind(version)
            .bind(tenants)
            .bind(rows)
            .bind(lexemes)
            .bind(spelled)
            .bind(vectors)
            .fetch_one(self.writer())
            .await?;
        Ok(stored as u64)
    }

    /// Whether every row the model `version` embedded has had its words learnt.
    pub async fn vocabulary_complete(&self, version: i16) -> MemoryResult<bool> {
        Ok(sqlx::query_scalar(
            "SELECT EXISTS (SELECT 1 FROM vocabulary_complete WHERE embedding_version_id = $1)",
        )
        .bind(version)
        .fetch_one(self.pool())
        .await?)
    }

    /// Records whether every row the model `version` embedded has had its words learnt:
    /// `true` when a walk is done, `false` at the start of an instance that will not learn
    /// them.
    pub async fn set_vocabulary_complete(&self, version: i16, complete: bool) -> MemoryResult<()> {
        let sql = if complete {
            "INSERT INTO vocabulary_complete (embedding_version_id) VALUES ($1)
             ON CONFLICT DO NOTHING"
        } else {
            "DELETE FROM vocabulary_complete WHERE embedding_version_id = $1"
        };
        sqlx::query(sql)
            .bind(version)
            .execute(self.writer())
            .await?;
        Ok(())
    }

    /// The nearest words of each of `lexemes` in the tenant's vocabulary of model
    /// `version`: `per_word` a word, besides itself (and besides the other query words,
    /// which come first when near: up to as many more are looked at). A query word the
    /// vocabulary lacks has none.
    #[tracing::instrument(target = "otel", name = "db.word_neighbours", skip_all, fields(db.system.name = "postgresql", db.operation.name = "SELECT"))]
    pub async fn word_neighbours(
        &self,
        tenant_id: &str,
        version: i16,
        lexemes: &[String],
        per_word: usize,
    ) -> MemoryResult<Vec<Neighbour>> {
        if lexemes.is_empty() || per_word == 0 {
            return Ok(Vec::new());
        }
        let depth = (per_word + lexemes.len()) as i64;
        let rows: Vec<(String, String, f64)> = sqlx::query_as(
            "SELECT q.lexeme, n.lexeme, 1 - n.distance
             FROM word_vectors q
             CROSS JOIN LATERAL (
                 SELECT v.lexeme, (v.embedding <=> q.embedding)::float8 AS distance
                 FROM word_vectors v
                 WHERE v.tenant_id = $1 AND v.embedding_version_id = $2
                 ORDER BY v.embedding <=> q.embedding LIMIT $4) n
             WHERE q.tenant_id = $1 AND q.lexeme = ANY($3) AND q.embedding_version_id = $2",
        )
        .bind(tenant_id)
        .bind(version)
        .bind(lexemes)
        .bind(depth)
        .fetch_all(self.pool())
        .await?;
        Ok(rows
            .into_iter()
            .map(|(of, lexeme, likeness)| Neighbour {
                of,
                lexeme,
                likeness,
            })
            .collect())
    }
}

/// The lexemes of the rows about to be erased (`ids`, of the tenant's episodes, facts and
/// rules), read before they go: what `forget_words` looks at after.
pub async fn lexemes_of(
    conn: &mut PgConnection,
    tenant_id: &str,
    episodes: &[Uuid],
    facts: &[Uuid],
    rules: &[Uuid],
) -> MemoryResult<Vec<String>> {
    Ok(sqlx::query_scalar(
        "SELECT DISTINCT lexeme FROM (
             SELECT search_vector FROM episodes WHERE tenant_id = $1 AND id = ANY($2)
             UNION ALL SELECT search_vector FROM facts WHERE tenant_id = $1 AND id = ANY($3)
             UNION ALL SELECT search_vector FROM rules WHERE tenant_id = $1 AND id = ANY($4)) r,
             unnest(tsvector_to_array(r.search_vector)) AS lexeme",
    )
    .bind(tenant_id)
    .bind(episodes)
    .bind(facts)
    .bind(rules)
    .fetch_all(conn)
    .await?)
}

/// Drops from the tenant's vocabulary those of `lexemes` that none of its memories holds
/// any longer (after a purge, a cleanup or a fact's sealing took the rows or texts that
/// held them): a word stays only while a memory of the tenant has it. With `None`, every
/// word of the vocabulary goes.
pub async fn forget_words(
    conn: &mut PgConnection,
    tenant_id: &str,
    lexemes: Option<&[String]>,
) -> MemoryResult<u64> {
    let Some(lexemes) = lexemes else {
        return Ok(sqlx::query("DELETE FROM word_vectors WHERE tenant_id = $1")
            .bind(tenant_id)
            .execute(conn)
            .await?
            .rows_affected());
    };
    Ok(sqlx::query(
        "DELETE FROM word_vectors v
         WHERE v.tenant_id = $1 AND v.lexeme = ANY($2)
           AND NOT EXISTS (SELECT 1 FROM episodes x WHERE x.tenant_id = $1
                           AND x.search_vector @@ quote_literal(v.lexeme)::tsquery)
           AND NOT EXISTS (SELECT 1 FROM facts x WHERE x.tenant_id = $1
                           AND x.search_vector @@ quote_literal(v.lexeme)::tsquery)
           AND NOT EXISTS (SELECT 1 FROM rules x WHERE x.tenant_id = $1
                           AND x.search_vector @@ quote_literal(v.lexeme)::tsquery)",
    )
    .bind(tenant_id)
    .bind(lexemes)
    .execute(conn)
    .await?
    .rows_affected())
}
