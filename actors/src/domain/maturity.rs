//! Rule maturity: the trust a rule has earned (`candidate -> established -> proven`), or its
//! inversion into an `anti_pattern` warning.

super::string_enum! {
    /// How far a rule has come in earning trust.
    Maturity {
        Candidate => "candidate",
        Established => "established",
        Proven => "proven",
        AntiPattern => "anti_pattern",
    }
}

impl Maturity {
    fn parse_alias(_: &str) -> Option<Self> {
        None
    }
}
