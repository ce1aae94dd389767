//! Validity: the lifecycle state of a fact or rule.
//!
//! Facts use all five states; rules use all but `superseded` (DECISIONS.md #5). `fading` is a
//! live state: a fading fact still blocks a second live fact on the same subject/predicate
//! (DECISIONS.md #4). Legacy `forgotten` is accepted as input and normalised to `retracted`.

super::string_enum! {
    /// Lifecycle state of a fact or rule.
    Validity {
        Active => "active",
        Fading => "fading",
        Superseded => "superseded",
        Expired => "expired",
        #[serde(alias = "forgotten")]
        Retracted => "retracted",
    }
}

impl Validity {
    fn parse_alias(s: &str) -> Option<Self> {
        (s == "forgotten").then_some(Validity::Retracted)
    }

    /// Live states: at most one live fact per `(tenant, scope, subject, predicate)`.
    pub fn is_live(self) -> bool {
        matches!(self, Validity::Active | Validity::Fading)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn forgotten_normalises_to_retracted() {
        assert_eq!(
            "forgotten".parse::<Validity>().unwrap(),
            Validity::Retracted
        );
        let v: Validity = serde_json::from_str("\"forgotten\"").unwrap();
        assert_eq!(v, Validity::Retracted);
        assert_eq!(serde_json::to_string(&v).unwrap(), "\"retracted\"");
    }

    #[test]
    fn only_active_and_fading_are_live() {
        let live: Vec<_> = Validity::ALL.iter().filter(|v| v.is_live()).collect();
        assert_eq!(live, vec![&Validity::Active, &Validity::Fading]);
    }
}
