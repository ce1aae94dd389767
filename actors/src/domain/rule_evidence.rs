//! What a rule's evidence (helpful and harmful marks, age) says about it: its effectiveness
//! and the maturity it has earned (memory_project_plan.md "Rule Maturity & Effectiveness").
//!
//! Harmful evidence weighs four times helpful evidence. Promotions need the configured
//! successes, effectiveness and (for `proven`) age; harmful evidence demotes a rule to the
//! highest level its evidence still supports; enough harm at low effectiveness inverts it
//! into an `anti_pattern` warning, which is final.

use super::maturity::Maturity;
use serde::Deserialize;

/// A promotion threshold for rules.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Promotion {
    pub min_successes: u32,
    pub min_effectiveness: f64,
    #[serde(default)]
    pub min_age_days: f64,
}

/// When a harmful rule is inverted into an anti-pattern.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AntiPatternTrigger {
    pub min_harmful: u32,
    pub max_effectiveness: f64,
}

/// When rules are promoted and inverted (`[rules]` in the configuration).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RuleThresholds {
    pub promote_to_established: Promotion,
    pub promote_to_proven: Promotion,
    pub harmful_to_antipattern: AntiPatternTrigger,
}

/// `success / (success + 4 * harmful + 0.01)`, in [0, 1).
pub fn effectiveness(success_count: i32, harmful_count: i32) -> f64 {
    let success = f64::from(success_count.max(0));
    let harmful = f64::from(harmful_count.max(0));
    success / (success + 4.0 * harmful + 0.01)
}

/// The evidence behind a rule at one moment.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Evidence {
    pub success_count: i32,
    pub harmful_count: i32,
    pub age_days: f64,
}

impl Evidence {
    pub fn effectiveness(&self) -> f64 {
        effectiveness(self.success_count, self.harmful_count)
    }

    /// The highest trust level this evidence supports (never `anti_pattern`).
    pub fn supported_level(&self, rules: &RuleThresholds) -> Maturity {
        let e = self.effectiveness();
        let meets = |p: &Promotion| {
            self.success_count >= p.min_successes as i32
                && e >= p.min_effectiveness
                && self.age_days >= p.min_age_days
        };
        if meets(&rules.promote_to_proven) {
            Maturity::Proven
        } else if meets(&rules.promote_to_established) {
            Maturity::Established
        } else {
            Maturity::Candidate
        }
    }

    /// Whether this evidence turns the rule into an anti-pattern.
    pub fn calls_for_inversion(&self, rules: &RuleThresholds) -> bool {
        let t = &rules.harmful_to_antipattern;
        self.harmful_count >= t.min_harmful as i32 && self.effectiveness() < t.max_effectiveness
    }
}

/// Which way new evidence may move a rule: helpful marks and the passing of time only
/// promote; harmful marks only demote (or invert).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    Up,
    Down,
}

/// The maturity a rule at `current` moves to on `evidence`.
pub fn next_maturity(
    current: Maturity,
    evidence: &Evidence,
    direction: Direction,
    rules: &RuleThresholds,
) -> Maturity {
    if current == Maturity::AntiPattern {
        return Maturity::AntiPattern;
    }
    if evidence.calls_for_inversion(rules) {
        return Maturity::AntiPattern;
    }
    let supported = evidence.supported_level(rules);
    match direction {
        Direction::Up if rank(supported) > rank(current) => supported,
        Direction::Down if rank(supported) < rank(current) => supported,
        _ => current,
    }
}

fn rank(m: Maturity) -> u8 {
    match m {
        Maturity::AntiPattern => 0,
        Maturity::Candidate => 1,
        Maturity::Established => 2,
        Maturity::Proven => 3,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use proptest::prelude::*;

    fn rules() -> RuleThresholds {
        RuleThresholds {
            promote_to_established: Promotion {
                min_successes: 5,
                min_effectiveness: 0.6,
                min_age_days: 0.0,
            },
            promote_to_proven: Promotion {
                min_successes: 15,
                min_effectiveness: 0.8,
                min_age_days: 30.0,
            },
            harmful_to_antipattern: AntiPatternTrigger {
                min_harmful: 3,
                max_effectiveness: 0.3,
            },
        }
    }

    fn ev(success_count: i32, harmful_count: i32, age_days: f64) -> Evidence {
        Evidence {
            success_count,
            harmful_count,
            age_days,
        }
    }

    #[test]
    fn the_plans_worked_example() {
        // "helps 10 times but causes harm twice: 10 / (10 + 8) = 0.56"
        assert!((effectiveness(10, 2) - 0.5553).abs() < 1e-3);
        assert_eq!(effectiveness(0, 0), 0.0);
    }

    #[test]
    fn promotions_happen_at_the_exact_thresholds() {
        let r = rules();
        let up = |m, e| next_maturity(m, &e, Direction::Up, &r);
        assert_eq!(
            up(Maturity::Candidate, ev(4, 0, 100.0)),
            Maturity::Candidate
        );
        assert_eq!(
            up(Maturity::Candidate, ev(5, 0, 0.0)),
            Maturity::Established
        );
        assert_eq!(
            up(Maturity::Established, ev(15, 0, 29.9)),
            Maturity::Established
        );
        assert_eq!(up(Maturity::Established, ev(15, 0, 30.0)), Maturity::Proven);
        // 15 successes with one harm: 15 / 19.01 = 0.789 < 0.8.
        assert_eq!(
            up(Maturity::Established, ev(15, 1, 90.0)),
            Maturity::Established
        );
        // 17 / 21.01 = 0.809: straight from candidate to proven.
        assert_eq!(up(Maturity::Candidate, ev(17, 1, 90.0)), Maturity::Proven);
    }

    #[test]
    fn harm_demotes_to_what_the_evidence_supports_and_never_promotes() {
        let r = rules();
        let down = |m, e| next_maturity(m, &e, Direction::Down, &r);
        // 15 / (15 + 4 + .01) = 0.789: no longer proven, still established.
        assert_eq!(
            down(Maturity::Proven, ev(15, 1, 90.0)),
            Maturity::Established
        );
        // 5 / (5 + 4 + .01) = 0.555: below established.
        assert_eq!(
            down(Maturity::Established, ev(5, 1, 90.0)),
            Maturity::Candidate
        );
        // A harmful mark on a candidate whose counts would support more does not promote.
        assert_eq!(
            down(Maturity::Candidate, ev(50, 1, 90.0)),
            Maturity::Candidate
        );
    }

    #[test]
    fn three_harms_at_low_effectiveness_invert_for_good() {
        let r = rules();
        assert_eq!(
            next_maturity(Maturity::Candidate, &ev(0, 2, 0.0), Direction::Down, &r),
            Maturity::Candidate
        );
        assert_eq!(
            next_maturity(Maturity::Candidate, &ev(0, 3, 0.0), Direction::Down, &r),
            Maturity::AntiPattern
        );
        // 3 harms but effectiveness 10 / 22.01 = 0.45: not inverted.
        assert_eq!(
            next_maturity(Maturity::Established, &ev(10, 3, 0.0), Direction::Down, &r),
            Maturity::Candidate
        );
        assert_eq!(
            next_maturity(Maturity::AntiPattern, &ev(100, 0, 99.0), Direction::Up, &r),
            Maturity::AntiPattern
        );
    }

    proptest! {
        #[test]
        fn effectiveness_is_a_share_that_help_raises_and_harm_lowers(
            s in 0i32..10_000, h in 0i32..10_000,
        ) {
            let e = effectiveness(s, h);
            prop_assert!((0.0..1.0).contains(&e));
            prop_assert!(effectiveness(s + 1, h) >= e);
            prop_assert!(effectiveness(s, h + 1) <= e);
            // Harm weighs four times: h harms cost more than 3h missing successes would.
            if s > 0 && h > 0 {
                prop_assert!(effectiveness(s, h) < effectiveness(s, 0) * s as f64 / (s as f64 + 3.0 * h as f64));
            }
        }

        #[test]
        fn helpful_evidence_never_demotes_and_harmful_never_promotes(
            s in 0i32..40, h in 0i32..6, age in 0.0f64..100.0, start in 0usize..3,
        ) {
            let r = rules();
            let current = [Maturity::Candidate, Maturity::Established, Maturity::Proven][start];
            let e = ev(s, h, age);
            let up = next_maturity(current, &e, Direction::Up, &r);
            let down = next_maturity(current, &e, Direction::Down, &r);
            if up != Maturity::AntiPattern {
                prop_assert!(rank(up) >= rank(current));
            }
            prop_assert!(rank(down) <= rank(current));
            // Whatever the direction, the result never claims more than the evidence supports
            // unless it was already there.
            if up != current && up != Maturity::AntiPattern {
                prop_assert_eq!(up, e.supported_level(&r));
            }
        }
    }
}
