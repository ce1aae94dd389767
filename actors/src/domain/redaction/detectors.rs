//! The built-in detectors: what each finds, and the check that keeps look-alikes out (a
//! card number passes Luhn, an IBAN its mod-97 check, an SSN the ranges never issued, an IP
//! address its octets). Patterns are `regex` (linear time whatever the input); a detector's
//! secret may be one group of its match (`password: <secret>` keeps the label).

use regex::Regex;

/// A built-in detector: its name (what a mask says), its pattern, which group is the
/// secret, and the check a match must pass.
pub struct Builtin {
    pub name: &'static str,
    pub pattern: &'static str,
    /// The capture group holding the secret (0: the whole match).
    pub group: usize,
    pub check: fn(&str) -> bool,
}

fn any(_: &str) -> bool {
    true
}

/// Every built-in detector, in priority order: where two matches overlap, the earlier
/// detector's wins (a private key is not reported as high-entropy text).
pub const BUILTINS: &[Builtin] = &[
    Builtin {
        name: "private_key",
        pattern: r"-----BEGIN [A-Z0-9 ]*PRIVATE KEY-----(?s:.*?)(?:-----END [A-Z0-9 ]*PRIVATE KEY-----|\z)",
        group: 0,
        check: any,
    },
    Builtin {
        name: "bearer_token",
        pattern: r"(?i)\bbearer\s+([A-Za-z0-9\-._~+/]{16,}=*)",
        group: 1,
        check: any,
    },
    Builtin {
        name: "api_key",
        pattern: concat!(
            r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b",
            r"|\bgh[pousr]_[A-Za-z0-9]{36,}\b",
            r"|\bgithub_pat_[A-Za-z0-9_]{22,}",
            r"|\bxox[abprs]-[A-Za-z0-9-]{10,}",
            r"|\bsk-(?:ant-|proj-)?[A-Za-z0-9_-]{20,}",
            r"|\b[sr]k_(?:live|test)_[A-Za-z0-9]{16,}",
            r"|\bAIza[0-9A-Za-z_-]{35}",
            r"|\beyJ[A-Za-z0-9_-]{10,}\.eyJ[A-Za-z0-9_-]{10,}\.[A-Za-z0-9_-]{10,}",
        ),
        group: 0,
        check: any,
    },
    Builtin {
        name: "credential",
        pattern: r#"(?i)\b(?:[a-z0-9]+[_-])?(?:password|passwd|pwd|passphrase|secret|api[_ -]?key|access[_ -]?token|auth[_ -]?token|client[_ -]?secret)\b\s*(?:is|[:=])\s*["']?([^\s"',;]{6,})"#,
        group: 1,
        check: any,
    },
    Builtin {
        name: "payment_card",
        pattern: r"\b\d(?:[ -]?\d){12,18}\b",
        group: 0,
        check: is_card_number,
    },
    Builtin {
        name: "us_ssn",
        pattern: r"\b\d{3}-\d{2}-\d{4}\b",
        group: 0,
        check: is_ssn,
    },
    Builtin {
        name: "iban",
        pattern: r"\b[A-Z]{2}\d{2}(?: ?[A-Z0-9]{4}){2,7}(?: ?[A-Z0-9]{1,3})?\b",
        group: 0,
        check: is_iban,
    },
    Builtin {
        name: "email",
        pattern: r"(?i)\b[a-z0-9._%+-]+@[a-z0-9-]+(?:\.[a-z0-9-]+)*\.[a-z]{2,}\b",
        group: 0,
        check: any,
    },
    Builtin {
        name: "phone",
        pattern: r"(?:\+\d{1,3}[ .-]?)?(?:\(\d{1,4}\)[ .-]?|\b\d{2,4}[ .-])\d{3,4}[ .-]\d{3,4}\b|\+\d{8,15}\b",
        group: 0,
        check: is_phone,
    },
    Builtin {
        name: "ip_address",
        pattern: r"\b(?:\d{1,3}\.){3}\d{1,3}\b|(?:[0-9A-Fa-f]{0,4}:){2,7}[0-9A-Fa-f]{0,4}",
        group: 0,
        check: is_ip,
    },
    Builtin {
        name: "high_entropy",
        pattern: r"[A-Za-z0-9+/_=-]{24,}",
        group: 0,
        check: is_high_entropy,
    },
];

/// The names of the built-in detectors.
pub fn names() -> impl Iterator<Item = &'static str> {
    BUILTINS.iter().map(|b| b.name)
}

/// A compiled built-in.
pub fn compile(builtin: &Builtin) -> Regex {
    Regex::new(builtin.pattern).expect("built-in patterns compile")
}

fn digits(s: &str) -> Vec<u32> {
    s.chars().filter_map(|c| c.to_digit(10)).collect()
}

/// 13 to 19 digits from an issuer's range (Visa, Mastercard, Amex, Discover, JCB, Diners,
/// UnionPay) that pass the Luhn check: a long number is rarely both.
fn is_card_number(s: &str) -> bool {
    let d = digits(s);
    if !(13..=19).contains(&d.len()) {
        return false;
    }
    let prefix = |n: usize| d[..n].iter().fold(0u32, |acc, x| acc * 10 + x);
    let issuer = match d[0] {
        4 => true,
        5 => (51..=55).contains(&prefix(2)),
        2 => (2221..=2720).contains(&prefix(4)),
        3 => matches!(prefix(2), 34 | 37 | 35 | 36 | 38 | 30),
        6 => prefix(4) == 6011 || prefix(2) == 65 || prefix(2) == 62 || prefix(3) >= 644,
        _ => false,
    };
    issuer && luhn(&d)
}

fn luhn(d: &[u32]) -> bool {
    let sum: u32 = d
        .iter()
        .rev()
        .enumerate()
        .map(|(i, &x)| {
            if i % 2 == 1 {
                let y = x * 2;
                if y > 9 { y - 9 } else { y }
            } else {
                x
            }
        })
        .sum();
    sum.is_multiple_of(10)
}

/// Area, group and serial in the ranges the SSA issues (never 000, 666 or 9xx; never 00;
/// never 0000).
fn is_ssn(s: &str) -> bool {
    let parts: Vec<&str> = s.split('-').collect();
    let [area, group, serial] = parts.as_slice() else {
        return false;
    };
    *area != "000"
        && *area != "666"
        && !area.starts_with('9')
        && *group != "00"
        && *serial != "0000"
}

/// The ISO 13616 check: the rearranged number, letters as 10..35, is 1 mod 97.
fn is_iban(s: &str) -> bool {
    let compact: String = s.chars().filter(|c| !c.is_whitespace()).collect();
    if !(15..=34).contains(&compact.len()) {
        return false;
    }
    let (head, tail) = compact.split_at(4);
    let mut remainder = 0u32;
    for c in tail.chars().chain(head.chars()) {
        let value = match c.to_digit(36) {
            Some(v) => v,
            None => return false,
        };
        remainder = if value >= 10 {
            (remainder * 100 + value) % 97
        } else {
            (remainder * 10 + value) % 97
        };
    }
    remainder == 1
}

/// 8 to 15 digits (E.164), with a country code or in a grouped national form.
fn is_phone(s: &str) -> bool {
    let n = digits(s).len();
    (8..=15).contains(&n) && (s.starts_with('+') || s.starts_with('(') || n >= 10)
}

/// A dotted quad of octets, or an IPv6 address that is plainly one (compressed with `::`,
/// or eight groups), so clock times (`12:30:45`) are not.
fn is_ip(s: &str) -> bool {
    if s.contains('.') {
        return s.parse::<std::net::Ipv4Addr>().is_ok();
    }
    (s.contains("::") || s.matches(':').count() == 7)
        && s.len() >= 3
        && s.parse::<std::net::Ipv6Addr>().is_ok()
}

/// A long token that looks random: upper and lower case letters and digits, and more than
/// four bits of Shannon entropy per character. Hex (at most four bits: commit hashes, ids)
/// and words never are.
fn is_high_entropy(s: &str) -> bool {
    let has = |f: fn(&char) -> bool| s.chars().any(|c| f(&c));
    if !(has(char::is_ascii_uppercase)
        && has(char::is_ascii_lowercase)
        && has(char::is_ascii_digit))
    {
        return false;
    }
    let mut counts = [0u32; 128];
    for b in s.bytes() {
        counts[usize::from(b & 0x7f)] += 1;
    }
    let n = s.len() as f64;
    let entropy: f64 = counts
        .iter()
        .filter(|&&c| c > 0)
        .map(|&c| {
            let p = f64::from(c) / n;
            -p * p.log2()
        })
        .sum();
    entropy > 4.0
}
