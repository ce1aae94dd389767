//! A found episode's conversation neighbours: the episodes up to `reach` turns before and
//! after it in its session, or, for an episode without one, the butler's session-less
//! episodes stored before and after it, each stored and happened within
//! `episodes.conversation_gap_secs` of the found one. Search brings them along (`domain::scoring`), so a turn is found with the
//! turns that explain it.

use std::collections::{HashMap, HashSet};

use super::{Filter, typed};
use crate::domain::memory_type::MemoryType;
use crate::domain::search::{Candidate, SessionNeighbours};
use crate::error::MemoryResult;
use crate::store::Store;
use crate::store::columns::happened;

/// One session link: `neighbour` is `distance` turns before or after `of` in their
/// session, with its candidate columns.
#[derive(Debug, sqlx::FromRow)]
struct NeighbourRow {
    of: uuid::Uuid,
    distance: i64,
    #[sqlx(flatten)]
    neighbour: Candidate,
}

/// The found episodes (`$5`, `$9`-`$12`), with where they are (butler, session, times) from
/// the search's own rows rather than looked up again by key: 40 lookups across the monthly
/// partitions were a third of the statement (docs/benchmarks.md, "The keyword list's exact
/// score, and neighbours without a lookup"); and how many turns each side each reaches.
macro_rules! found_episodes {
    () => {
        "WITH c AS MATERIALIZED (
             SELECT c.id, c.butler, c.session_id, c.created_at, c.happened,
                    make_interval(secs => $6::float8) AS gap,
                    CASE WHEN c.n <= $8 THEN $7 ELSE 1 END AS turns
             FROM unnest($5::uuid[], $9::text[], $10::text[], $11::timestamptz[],
                         $12::timestamptz[])
                  WITH ORDINALITY AS c(id, butler, session_id, created_at, happened, n)
             WHERE c.session_id IS NOT NULL OR $6::float8 > 0)"
    };
}

/// One side of each found episode: the turns before it (`<`, newest first) or after it
/// (`>`, oldest first) among the episodes `$1`-`$4` let the caller see, `$near` saying which
/// of them are its conversation (a condition's pieces), up to its number of turns.
macro_rules! turns {
    ($side:literal, $order:literal, $($near:tt)+) => {
        concat!(
            "SELECT c.id AS of, n.* FROM c CROSS JOIN LATERAL (
                 SELECT ",
            episode_candidate!(),
            ", 0.0::float8 AS signal,
                        row_number() OVER (ORDER BY ",
            $order,
            ") AS distance
                 FROM episodes e
                 WHERE e.butler = c.butler AND (e.created_at, e.id) ",
            $side,
            " (c.created_at, c.id) AND ",
            $($near)+,
            " AND ",
            episode_filter!(),
            "
                 ORDER BY ",
            $order,
            " LIMIT c.turns) n"
        )
    };
}

/// The turns before and after each found episode in its session.
macro_rules! session_turns {
    () => {
        concat!(
            turns!(
                "<",
                "e.created_at DESC, e.id DESC",
                "e.session_id = c.session_id"
            ),
            " WHERE c.session_id IS NOT NULL UNION ALL ",
            turns!(">", "e.created_at, e.id", "e.session_id = c.session_id"),
            " WHERE c.session_id IS NOT NULL"
        )
    };
}

/// A turn that happened within the conversation gap of the found episode, either side.
macro_rules! happened_near {
    () => {
        concat!(
            happened!("e."),
            " BETWEEN c.happened - c.gap AND c.happened + c.gap"
        )
    };
}

/// For a found episode without a session, the butler's episodes without one stored before
/// and after it within the conversation gap, which also happened within it: an import of
/// several dated conversations stored in one go is not one conversation.
macro_rules! gap_turns {
    () => {
        concat!(
            turns!(
                "<",
                "e.created_at DESC, e.id DESC",
                "e.session_id IS NULL AND e.created_at >= c.created_at - c.gap AND ",
                happened_near!()
            ),
            " WHERE c.session_id IS NULL UNION ALL ",
            turns!(
                ">",
                "e.created_at, e.id",
                "e.session_id IS NULL AND e.created_at <= c.created_at + c.gap AND ",
                happened_near!()
            ),
            " WHERE c.session_id IS NULL"
        )
    };
}

impl Store {
    /// For each episode in `found`, its neighbours in its conversation among the episodes
    /// `filter` lets the caller see: the `reach` episodes before and after it in its
    /// session (one for those after the first `wide` of `found`, the most relevant first),
    /// or for an episode without one, the butler's episodes without one stored before and
    /// after it within `conversation_gap_secs` (0: none). Their ids with their distances,
    /// and the neighbours themselves as candidates (`signal` 0) unless `known` has them
    /// already. One statement, so that session context costs a read one round trip, not
    /// two.
    #[tracing::instrument(target = "otel", name = "db.session_neighbours", skip_all, fields(db.system.name = "postgresql", db.operation.name = "SELECT"))]
    pub async fn session_neighbours(
        &self,
        filter: &Filter<'_>,
        found: &[&Candidate],
        known: &HashSet<uuid::Uuid>,
        conversation_gap_secs: f64,
        reach: u32,
        wide: usize,
    ) -> MemoryResult<(Vec<SessionNeighbours>, Vec<Candidate>)> {
        let ids: Vec<uuid::Uuid> = found.iter().map(|c| c.id).collect();
        let with_session = found.iter().any(|c| c.session_id.is_some());
        let without = conversation_gap_secs > 0.0 && found.iter().any(|c| c.session_id.is_none());
        // Only the branches the found episodes need: each is planned across the monthly
        // partitions, and a tenant's episodes mostly all have a session or none.
        let sql = match (with_session, without) {
            (false, false) => return Ok(session_links(&ids, Vec::new(), known)),
            (true, false) => concat!(found_episodes!(), " ", session_turns!()),
            (false, true) => concat!(found_episodes!(), " ", gap_turns!()),
            (true, true) => concat!(
                found_episodes!(),
                " ",
                session_turns!(),
                " UNION ALL ",
                gap_turns!()
            ),
        };
        let butlers: Vec<Option<&str>> = found.iter().map(|c| c.butler.as_deref()).collect();
        let sessions: Vec<Option<&str>> = found.iter().map(|c| c.session_id.as_deref()).collect();
        let times: Vec<chrono::DateTime<chrono::Utc>> =
            found.iter().map(|c| c.created_at).collect();
        let happened: Vec<chrono::DateTime<chrono::Utc>> =
            found.iter().map(|c| c.happened_at()).collect();
        let mut rows: Vec<NeighbourRow> = sqlx::query_as(sql)
            .bind(&filter.scope.tenant_id)
            .bind(filter.visibility(MemoryType::Episode))
            .bind(filter.now)
            .bind(filter.min_confidence)
            .bind(&ids)
            .bind(conversation_gap_secs)
            .bind(i64::from(reach))
            .bind(i64::try_from(wide).unwrap_or(i64::MAX))
            .bind(&butlers)
            .bind(&sessions)
            .bind(&times)
            .bind(&happened)
            .fetch_all(self.pool())
            .await?;
        // A read in a time window sees no neighbour outside it.
        if let Some(window) = &filter.window {
            rows.retain(|r| window.admits_episode(r.neighbour.happened_at()));
        }
        Ok(session_links(&ids, rows, known))
    }
}

/// Every episode of `ids` with its neighbours (none when it is alone in its session), and
/// the neighbours not `known`, each once, in order of appearance.
fn session_links(
    ids: &[uuid::Uuid],
    rows: Vec<NeighbourRow>,
    known: &HashSet<uuid::Uuid>,
) -> (Vec<SessionNeighbours>, Vec<Candidate>) {
    let mut links: Vec<SessionNeighbours> = ids
        .iter()
        .map(|id| SessionNeighbours {
            id: *id,
            near: Vec::new(),
        })
        .collect();
    let position: HashMap<uuid::Uuid, usize> =
        ids.iter().enumerate().map(|(i, id)| (*id, i)).collect();
    let mut fetched = Vec::new();
    let mut seen = HashSet::new();
    for row in rows {
        let Some(link) = position.get(&row.of).map(|i| &mut links[*i]) else {
            continue;
        };
        let id = row.neighbour.id;
        link.near
            .push((id, u32::try_from(row.distance).unwrap_or(u32::MAX)));
        if !known.contains(&id) && seen.insert(id) {
            fetched.extend(typed(vec![row.neighbour], MemoryType::Episode));
        }
    }
    (links, fetched)
}
