//! A butler's view over REST (`/api/butlers/{name}/memory/{stats,facts,rules,episodes}`) and
//! on the dashboard (`/butlers/{name}/memory` and the pages its links open) shows what that
//! butler sees (memory_project_plan.md: `scope IN ('global', butler_name)` for facts and
//! rules, `butler = butler_name` for episodes), to its tenant's admin exactly as to the
//! butler's own key: not what the key reads, not what the butler wrote. Another butler's
//! key is refused.

use std::collections::BTreeSet;

use serde_json::{Value, json};

use crate::dashboard::{element, page, sign_in};
use crate::helpers::*;

/// A fact and a rule written together: their ids.
struct Pair {
    fact: String,
    rule: String,
}

async fn pair(client: &McpClient, what: &str, args: Value) -> Pair {
    let id = |v: Value| v["id"].as_str().unwrap().to_owned();
    let mut fact = json!({"subject": "ann", "predicate": what, "content": format!("Ann {what}")});
    let mut rule = json!({"content": format!("Mind that Ann {what}")});
    for (k, v) in args.as_object().unwrap() {
        fact[k] = v.clone();
        rule[k] = v.clone();
    }
    Pair {
        fact: id(client.ok("memory_store_fact", fact).await),
        rule: id(client.ok("memory_store_rule", rule).await),
    }
}

/// What health sees and what it does not, in tenant A.
struct Seeded {
    seen: Vec<Pair>,
    unseen: Vec<Pair>,
    episodes: Vec<String>,
    other_episode: String,
}

impl Seeded {
    fn facts(pairs: &[Pair]) -> BTreeSet<String> {
        pairs.iter().map(|p| p.fact.clone()).collect()
    }

    fn rules(pairs: &[Pair]) -> BTreeSet<String> {
        pairs.iter().map(|p| p.rule.clone()).collect()
    }

    /// Every id health does not see.
    fn hidden(&self) -> Vec<String> {
        let mut ids: Vec<String> = Self::facts(&self.unseen)
            .into_iter()
            .chain(Self::rules(&self.unseen))
            .collect();
        ids.push(self.other_episode.clone());
        ids
    }
}

async fn seed(app: &TestApp) -> Seeded {
    let health = app.client(TENANT_A_HEALTH).await;
    let general = app.client(TENANT_A_GENERAL).await;
    let admin = app.client(TENANT_A_ADMIN).await;
    let id = |v: Value| v["id"].as_str().unwrap().to_owned();
    let seen = vec![
        // Global, written by another butler.
        pair(&general, "likes tea", json!({"scope": "global"})).await,
        // The butler's scope, written by the admin without a butler (`_tenant`).
        pair(&admin, "walks daily", json!({"scope": "health"})).await,
        // Written by the butler into global.
        pair(&health, "sleeps early", json!({"scope": "global"})).await,
    ];
    let unseen = vec![
        // Another butler's scope.
        pair(&general, "works nights", json!({"scope": "general"})).await,
        // Another butler's scope, though written as health (what it wrote is not what
        // it sees).
        pair(
            &admin,
            "plays chess",
            json!({"scope": "general", "butler": "health"}),
        )
        .await,
    ];
    let mut episodes = Vec::new();
    for content in ["Ann asked about sleep.", "Ann went for a walk."] {
        episodes.push(id(health
            .ok(
                "memory_store_episode",
                json!({"content": content, "butler": "health"}),
            )
            .await));
    }
    let other_episode = id(general
        .ok(
            "memory_store_episode",
            json!({"content": "Ann asked about her shift.", "butler": "general"}),
        )
        .await);
    Seeded {
        seen,
        unseen,
        episodes,
        other_episode,
    }
}

async fn ok(app: &TestApp, key: &str, path: &str) -> Value {
    let (status, body) = rest(app, key, "GET", path, None, "butler-view").await;
    assert_eq!(status, 200, "{key}: {path}: {body}");
    body
}

fn ids(page: &Value) -> BTreeSet<String> {
    page_ids(page).into_iter().collect()
}

fn sum(breakdown: &Value) -> i64 {
    breakdown
        .as_object()
        .unwrap_or_else(|| panic!("a breakdown: {breakdown}"))
        .values()
        .map(|n| n.as_i64().unwrap())
        .sum()
}

/// Statistics without what moves with the clock between two calls.
fn settled(mut stats: Value) -> Value {
    stats.as_object_mut().unwrap().remove("computed_at");
    for backlog in ["consolidation_backlog", "episodes"] {
        let at = if backlog == "episodes" {
            &mut stats[backlog]["backlog"]
        } else {
            &mut stats[backlog]
        };
        at.as_object_mut().unwrap().remove("oldest_age_seconds");
    }
    stats
}

#[tokio::test]
async fn a_butlers_view_over_rest_is_what_the_butler_sees_whoever_looks() {
    let app = spawn_app().await;
    let seeded = seed(&app).await;
    let facts = Seeded::facts(&seeded.seen);
    let rules = Seeded::rules(&seeded.seen);
    let episodes: BTreeSet<String> = seeded.episodes.iter().cloned().collect();
    // What the butler's own key reads of its tenant, the reference for its view, once the
    // indexer has embedded the episodes, the facts and the rules (it moves their counts
    // meanwhile: episodes' `unembedded`, facts' and rules' `embedding` breakdown).
    let as_health = eventually(std::time::Duration::from_secs(30), || async {
        let stats = ok(&app, TENANT_A_HEALTH, "/api/memory/stats").await;
        let pending = |kind: &str| {
            stats[kind]["breakdown"]["embedding"]
                .get("pending")
                .cloned()
        };
        match (
            stats["episodes"]["unembedded"].as_i64(),
            pending("facts"),
            pending("rules"),
        ) {
            (Some(0), None, None) => Ok(settled(stats)),
            _ => Err(stats.to_string()),
        }
    })
    .await
    .unwrap();
    for key in [TENANT_A_ADMIN, TENANT_A_HEALTH] {
        let view = |list: &str| format!("/api/butlers/health/memory/{list}");
        let page = ok(&app, key, &view("facts")).await;
        assert_eq!(ids(&page), facts, "{key}: {page}");
        assert_eq!(page["total"], 3, "{key}: {page}");
        let page = ok(&app, key, &view("rules")).await;
        assert_eq!(ids(&page), rules, "{key}: {page}");
        assert_eq!(page["total"], 3, "{key}: {page}");
        let page = ok(&app, key, &view("episodes")).await;
        assert_eq!(ids(&page), episodes, "{key}: {page}");
        assert_eq!(page["total"], 2, "{key}: {page}");

        let stats = ok(&app, key, &view("stats")).await;
        assert_eq!(
            stats["scopes"],
            json!(["global", "health"]),
            "{key}: {stats}"
        );
        assert_eq!(stats["butlers"], json!(["health"]), "{key}: {stats}");
        assert_eq!(stats["facts"]["total"], 3, "{key}: {stats}");
        assert_eq!(stats["rules"]["total"], 3, "{key}: {stats}");
        assert_eq!(stats["episodes"]["total"], 2, "{key}: {stats}");
        assert_eq!(stats["consolidation_backlog"]["size"], 2, "{key}: {stats}");
        let (f, r) = (&stats["facts"]["breakdown"], &stats["rules"]["breakdown"]);
        assert_eq!(sum(&f["effective_confidence"]), 3, "{key}: {stats}");
        assert_eq!(sum(&f["permanence"]), 3, "{key}: {stats}");
        assert_eq!(sum(&r["maturity"]), 3, "{key}: {stats}");
        assert_eq!(sum(&r["effectiveness"]), 3, "{key}: {stats}");
        assert_eq!(
            settled(stats),
            as_health,
            "{key}: as the butler's key reads it"
        );

        // Narrowed within the view: one of its two scopes; `source_butler` a filter.
        let own = ok(&app, key, &view("facts?scope=health")).await;
        assert_eq!(ids(&own), BTreeSet::from([seeded.seen[1].fact.clone()]));
        let own = ok(&app, key, &view("stats?scope=health")).await;
        assert_eq!(own["rules"]["total"], 1, "{key}: {own}");
        let written = ok(&app, key, &view("rules?source_butler=health")).await;
        assert_eq!(ids(&written), BTreeSet::from([seeded.seen[2].rule.clone()]));
        for (path, status, code) in [
            (view("facts?scope=general"), 403, "scope_forbidden"),
            (view("stats?scope=general"), 403, "scope_forbidden"),
            (view("episodes?butler=general"), 400, "invalid_arguments"),
            (view("stats?butler=general"), 400, "invalid_arguments"),
        ] {
            let (got, body) = rest(&app, key, "GET", &path, None, "butler-view").await;
            assert_eq!(
                (got, body["code"].as_str()),
                (status, Some(code)),
                "{key}: {path}: {body}"
            );
        }
    }
    // Another butler's key: refused, whatever the view.
    for list in ["stats", "facts", "rules", "episodes"] {
        let path = format!("/api/butlers/health/memory/{list}");
        let (status, body) = rest(&app, TENANT_A_GENERAL, "GET", &path, None, "butler-view").await;
        assert_eq!(
            (status, body["code"].as_str()),
            (403, Some("other_butler")),
            "{path}: {body}"
        );
    }
    app.stop().await;
}

#[tokio::test]
async fn a_butlers_page_is_what_the_butler_sees_whoever_looks() {
    let app = spawn_app().await;
    let seeded = seed(&app).await;
    let hidden = seeded.hidden();
    for key in [TENANT_A_ADMIN, TENANT_A_HEALTH] {
        let cookie = sign_in(&app, key).await;
        let shown = page(&app, Some(&cookie), "/butlers/health/memory").await;
        assert_eq!(shown.status, 200, "{key}: {}", shown.body);
        let body = &shown.body;
        for pair in &seeded.seen {
            assert!(body.contains(&pair.fact), "{key}: the fact {}", pair.fact);
            assert!(body.contains(&pair.rule), "{key}: the rule {}", pair.rule);
        }
        for episode in &seeded.episodes {
            assert!(body.contains(episode), "{key}: the episode {episode}");
        }
        for id in &hidden {
            assert!(
                !body.contains(id),
                "{key}: shows {id}, which health does not see"
            );
        }
        for (card, value) in [("facts", 3), ("rules", 3), ("episodes", 2), ("backlog", 2)] {
            let card = element(body, &format!(r#"id="card-{card}""#), "</div></div>");
            let value = format!(r#"<div class="value">{value}</div>"#);
            assert!(card.contains(&value), "{key}: {card}");
        }
        // Its links open all of it, as it sees it.
        for (link, listed) in [
            ("/memory/facts?butler=health", Seeded::facts(&seeded.seen)),
            (
                "/memory/playbook?butler=health",
                Seeded::rules(&seeded.seen),
            ),
            (
                "/memory/episodes?butler=health",
                seeded.episodes.iter().cloned().collect(),
            ),
        ] {
            assert!(body.contains(&format!(r#"href="{link}""#)), "{key}: {link}");
            let all = page(&app, Some(&cookie), link).await;
            assert_eq!(all.status, 200, "{key}: {link}: {}", all.body);
            for id in &listed {
                assert!(all.body.contains(id), "{key}: {link} lists {id}");
            }
            for id in &hidden {
                assert!(!all.body.contains(id), "{key}: {link} shows {id}");
            }
        }
    }
    // Another butler's key: its page and its links are refused.
    let cookie = sign_in(&app, TENANT_A_GENERAL).await;
    for path in [
        "/butlers/health/memory",
        "/memory/facts?butler=health",
        "/memory/playbook?butler=health",
    ] {
        let refused = page(&app, Some(&cookie), path).await;
        assert_eq!(refused.status, 403, "{path}: {}", refused.body);
        assert!(refused.body.contains("other_butler"), "{path}");
    }
    app.stop().await;
}
