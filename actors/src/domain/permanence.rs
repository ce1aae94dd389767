//! Permanence categories and the decay rate each one implies (memory_project_plan.md,
//! "Permanence Categories").

super::string_enum! {
    /// How long a fact or rule is expected to stay true.
    Permanence {
        /// Identity: name, birthday, allergies. Never decays.
        Permanent => "permanent",
        /// Long-term preferences, professional info. Half-life about 346 days.
        Stable => "stable",
        /// Current interests, opinions, projects. Half-life about 87 days.
        Standard => "standard",
        /// Temporary states, short-term plans. Half-life about 23 days.
        Volatile => "volatile",
        /// What happened today. Half-life about 7 days.
        Ephemeral => "ephemeral",
    }
}

impl Permanence {
    /// The permanence of a fact or rule stored without one.
    pub const DEFAULT: Permanence = Permanence::Standard;

    fn parse_alias(_: &str) -> Option<Self> {
        None
    }

    /// The decay rate λ (per day) in `confidence * exp(-λ * days)`.
    pub fn decay_rate(self) -> f64 {
        match self {
            Permanence::Permanent => 0.0,
            Permanence::Stable => 0.002,
            Permanence::Standard => 0.008,
            Permanence::Volatile => 0.03,
            Permanence::Ephemeral => 0.1,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn half_lives_match_the_contract_table() {
        let half_life = |p: Permanence| std::f64::consts::LN_2 / p.decay_rate();
        assert_eq!(Permanence::Permanent.decay_rate(), 0.0);
        assert_eq!(half_life(Permanence::Stable).round(), 347.0);
        assert_eq!(half_life(Permanence::Standard).round(), 87.0);
        assert_eq!(half_life(Permanence::Volatile).round(), 23.0);
        assert_eq!(half_life(Permanence::Ephemeral).round(), 7.0);
    }

    #[test]
    fn unknown_value_lists_the_canonical_ones() {
        let err = "forever".parse::<Permanence>().unwrap_err();
        assert_eq!(err.code, crate::error::ErrorCode::UnknownValue);
        assert!(
            err.message
                .contains("permanent, stable, standard, volatile, ephemeral")
        );
    }
}
