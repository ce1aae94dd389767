//! The three memory classes: episodes (what happened), facts (what is true), rules (how to behave).

super::string_enum! {
    /// Which table a memory lives in.
    MemoryType {
        Episode => "episode",
        Fact => "fact",
        Rule => "rule",
    }
}

impl MemoryType {
    fn parse_alias(_: &str) -> Option<Self> {
        None
    }

    /// The table that holds this type. Only `store/` interpolates it into SQL.
    pub fn table(self) -> &'static str {
        match self {
            MemoryType::Episode => "episodes",
            MemoryType::Fact => "facts",
            MemoryType::Rule => "rules",
        }
    }

    /// The table of the second stage's token sketches of this type's rows (migration 32).
    pub fn sketch_table(self) -> &'static str {
        match self {
            MemoryType::Episode => "episode_sketches",
            MemoryType::Fact => "fact_sketches",
            MemoryType::Rule => "rule_sketches",
        }
    }
}
