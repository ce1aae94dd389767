//! The detectors against a corpus of what they must find and what they must leave alone
//! (dates, times, version numbers, order ids, amounts, ids, commit hashes, prose), and the
//! actions. `corpus_counts` prints each detector's false positives and negatives.

use proptest::prelude::*;

use super::*;

/// (detector, text that holds one such secret, the secret).
const POSITIVES: &[(&str, &str, &str)] = &[
    (
        "email",
        "write to jane.doe+news@example.co.uk today",
        "jane.doe+news@example.co.uk",
    ),
    (
        "email",
        "Contact: BOB@Mail.Example.org.",
        "BOB@Mail.Example.org",
    ),
    (
        "phone",
        "call me on +1 415 555 2671 tonight",
        "+1 415 555 2671",
    ),
    ("phone", "office (415) 555-2671 ext 2", "(415) 555-2671"),
    ("phone", "UK: +44 20 7946 0958", "+44 20 7946 0958"),
    ("phone", "mobile 415-555-2671", "415-555-2671"),
    ("phone", "whatsapp +4915112345678", "+4915112345678"),
    (
        "payment_card",
        "my card is 4111 1111 1111 1111 exp 12/27",
        "4111 1111 1111 1111",
    ),
    ("payment_card", "amex 378282246310005", "378282246310005"),
    (
        "payment_card",
        "mc 5555-5555-5555-4444",
        "5555-5555-5555-4444",
    ),
    (
        "payment_card",
        "card 2223003122003222 please",
        "2223003122003222",
    ),
    (
        "payment_card",
        "discover 6011111111111117",
        "6011111111111117",
    ),
    (
        "iban",
        "IBAN DE89 3704 0044 0532 0130 00 for rent",
        "DE89 3704 0044 0532 0130 00",
    ),
    (
        "iban",
        "send to GB29NWBK60161331926819",
        "GB29NWBK60161331926819",
    ),
    (
        "iban",
        "FR1420041010050500013M02606",
        "FR1420041010050500013M02606",
    ),
    ("us_ssn", "SSN 123-45-6789 on file", "123-45-6789"),
    ("us_ssn", "ssn: 536-22-1234", "536-22-1234"),
    (
        "ip_address",
        "server at 192.168.1.20 is down",
        "192.168.1.20",
    ),
    (
        "ip_address",
        "ipv6 2001:db8::8a2e:370:7334 works",
        "2001:db8::8a2e:370:7334",
    ),
    ("ip_address", "loopback ::1 only", "::1"),
    (
        "bearer_token",
        "Authorization: Bearer abcdefghijklmnop.qrstuvwx-yz0123",
        "abcdefghijklmnop.qrstuvwx-yz0123",
    ),
    (
        "api_key",
        "aws AKIAIOSFODNN7EXAMPLE key",
        "AKIAIOSFODNN7EXAMPLE",
    ),
    (
        "api_key",
        "token ghp_abcdefghijklmnopqrstuvwxyz0123456789",
        "ghp_abcdefghijklmnopqrstuvwxyz0123456789",
    ),
    (
        "api_key",
        "OPENAI sk-proj-abcdefghijklmnopqrstuvwxyz012345",
        "sk-proj-abcdefghijklmnopqrstuvwxyz012345",
    ),
    (
        "api_key",
        "stripe sk_live_abcdefghijklmnop1234",
        "sk_live_abcdefghijklmnop1234",
    ),
    (
        "api_key",
        "slack xoxb-123456789012-abcdefghij",
        "xoxb-123456789012-abcdefghij",
    ),
    (
        "api_key",
        "google AIzaSyA1234567890abcdefghijklmnopqrstu0",
        "AIzaSyA1234567890abcdefghijklmnopqrstu0",
    ),
    (
        "api_key",
        "jwt eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U",
        "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U",
    ),
    (
        "credential",
        "my password is hunter2hunter",
        "hunter2hunter",
    ),
    ("credential", "db_password: S3cr3t!value", "S3cr3t!value"),
    ("credential", "api_key=abc123def456", "abc123def456"),
    (
        "private_key",
        "-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEA7\n-----END RSA PRIVATE KEY-----",
        "MIIEowIBAAKCAQEA7",
    ),
    (
        "private_key",
        "here: -----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAA",
        "b3BlbnNzaC1rZXktdjEAAAAA",
    ),
    (
        "high_entropy",
        "the token is Zk9xQ2w7Rm1pT3VyV0hYbEp6N3E",
        "Zk9xQ2w7Rm1pT3VyV0hYbEp6N3E",
    ),
    (
        "high_entropy",
        "secret 8fK2mP9qL4xR7tV1wY3zB6nC0dH5jG",
        "8fK2mP9qL4xR7tV1wY3zB6nC0dH5jG",
    ),
];

/// Texts in which no detector may find anything.
const NEGATIVES: &[&str] = &[
    "We met on 2024-01-15 at 12:30:45 and again on 15/01/2024.",
    "Upgrade to version 1.2.3, then 10.4.17-beta, see RFC 9110.",
    "Order ORD-2024-000123 shipped; invoice INV-98765, ticket #4521.",
    "It cost $1,299.99 or 1 000 000 yen, about 12.5% more.",
    "The meeting id is 550e8400-e29b-41d4-a716-446655440000.",
    "Commit 9fceb02d0ae598e95dc970b74767f19372d61af8 fixed it.",
    "Flight LH 441 leaves at 09:45 from gate B22, seat 14C.",
    "Supercalifragilisticexpialidocious is a long word indeed.",
    "Her zip code is 94107 and the building has 42 floors.",
    "Temperature 36.6C, blood pressure 120/80, weight 70.5 kg.",
    "The score was 3-2; the series stands at 2-1.",
    "Read chapter 12.3.4 and section 4.2.",
    "Timestamp 20240115123045 in the log.",
    "ISBN 978-3-16-148410-0 is on the shelf.",
    "The password policy requires twelve characters.",
    "Take the 7:15 train, platform 9.",
    "Measured 1234 5678 steps over two days.",
    "The file is at src/actors/indexer.rs line 240.",
];

fn all_on() -> Redactor {
    let detectors = detectors::names()
        .map(|n| (n.to_owned(), RedactionAction::Mask))
        .collect();
    let settings = PolicySettings {
        detectors,
        custom: Vec::new(),
    };
    Redactor::new(&settings, &BTreeMap::new(), "").unwrap()
}

#[test]
fn corpus_counts() {
    let redactor = all_on();
    let (mut false_negatives, mut false_positives) = (0, 0);
    for (detector, text, secret) in POSITIVES {
        let mut findings = Findings::new();
        let out = redactor.text("t", "content", text, &mut findings).unwrap();
        let found = out.text.contains(&format!("[{detector}]")) && !out.text.contains(secret);
        if !found {
            false_negatives += 1;
            eprintln!("missed {detector}: {text:?} -> {:?} {findings:?}", out.text);
        }
    }
    for text in NEGATIVES {
        let mut findings = Findings::new();
        let out = redactor.text("t", "content", text, &mut findings).unwrap();
        if !findings.is_empty() {
            false_positives += 1;
            eprintln!("false positive: {text:?} -> {:?} {findings:?}", out.text);
        }
    }
    let per_detector: BTreeMap<&str, usize> =
        POSITIVES.iter().fold(BTreeMap::new(), |mut m, (d, _, _)| {
            *m.entry(*d).or_default() += 1;
            m
        });
    eprintln!(
        "corpus: {} positives over {} detectors {per_detector:?}, {} negatives; \
         false negatives {false_negatives}, false positives {false_positives}",
        POSITIVES.len(),
        per_detector.len(),
        NEGATIVES.len()
    );
    assert_eq!((false_negatives, false_positives), (0, 0));
    // Every detector has samples.
    for name in detectors::names() {
        assert!(
            per_detector.contains_key(name),
            "{name} has no positive sample"
        );
    }
}

#[test]
fn the_default_policy_masks_secrets_and_keeps_contact_details() {
    let redactor = Redactor::new(&PolicySettings::default(), &BTreeMap::new(), "").unwrap();
    let mut findings = Findings::new();
    let text = "Mail jane@example.com, card 4111 1111 1111 1111, key AKIAIOSFODNN7EXAMPLE";
    let out = redactor.text("t", "content", text, &mut findings).unwrap();
    assert_eq!(
        out.text,
        "Mail jane@example.com, card [payment_card], key [api_key]"
    );
    assert_eq!(findings.get("payment_card"), Some(&1));
    assert_eq!(findings.get("api_key"), Some(&1));
    assert_eq!(findings.get("email"), None);
}

#[test]
fn hash_is_keyed_stable_and_per_tenant() {
    let settings = PolicySettings {
        detectors: BTreeMap::from([("email".to_owned(), RedactionAction::Hash)]),
        custom: Vec::new(),
    };
    assert!(Redactor::new(&settings, &BTreeMap::new(), "short").is_err());
    let redactor = Redactor::new(&settings, &BTreeMap::new(), "a key of sixteen+").unwrap();
    let other = Redactor::new(&settings, &BTreeMap::new(), "another key of 16").unwrap();
    let mut f = Findings::new();
    let mut out =
        |r: &Redactor, tenant: &str, text: &str| r.text(tenant, "c", text, &mut f).unwrap().text;
    let a = out(&redactor, "t1", "from jane@example.com");
    assert_eq!(a, out(&redactor, "t1", "from jane@example.com"));
    assert!(a.starts_with("from [email:") && a.len() == "from [email:".len() + 13);
    assert_ne!(a, out(&redactor, "t1", "from john@example.com"));
    assert_ne!(a, out(&redactor, "t2", "from jane@example.com"));
    assert_ne!(a, out(&other, "t1", "from jane@example.com"));
}

#[test]
fn refuse_names_the_detector_never_the_span() {
    let settings = PolicySettings {
        detectors: BTreeMap::from([("private_key".to_owned(), RedactionAction::Refuse)]),
        custom: Vec::new(),
    };
    let redactor = Redactor::new(&settings, &BTreeMap::new(), "").unwrap();
    let text = "-----BEGIN PRIVATE KEY-----\nMIIEvQIBADANBg\n-----END PRIVATE KEY-----";
    let error = redactor
        .text("t", "content", text, &mut Findings::new())
        .err()
        .unwrap();
    assert_eq!(error.code, ErrorCode::RedactionRefused);
    assert!(error.message.contains("private_key") && error.message.contains("content"));
    assert!(!error.message.contains("MIIE"));
}

#[test]
fn drop_removes_spans_from_text_and_values_from_metadata() {
    let settings = PolicySettings {
        detectors: BTreeMap::from([("us_ssn".to_owned(), RedactionAction::Drop)]),
        custom: vec![CustomDetector {
            name: "employee_id".into(),
            pattern: r"\bEMP-\d{6}\b".into(),
            action: RedactionAction::Mask,
        }],
    };
    let redactor = Redactor::new(&settings, &BTreeMap::new(), "").unwrap();
    let mut findings = Findings::new();
    let out = redactor
        .text(
            "t",
            "content",
            "ssn 123-45-6789 of EMP-004211",
            &mut findings,
        )
        .unwrap();
    assert_eq!(out.text, "ssn  of [employee_id]");
    assert!(out.dropped);
    let mut metadata = serde_json::json!({
        "ssn": "123-45-6789", "note": "ok", "ids": ["EMP-000001", "123-45-6789", null], "n": 3,
        "none": null
    });
    redactor
        .json("t", "metadata", &mut metadata, &mut findings)
        .unwrap();
    assert_eq!(
        metadata,
        serde_json::json!({"note": "ok", "ids": ["[employee_id]", null], "n": 3, "none": null})
    );
    assert_eq!(findings.get("us_ssn"), Some(&3));
}

#[test]
fn tenants_override_the_global_policy_and_bad_settings_are_named() {
    let tenants = BTreeMap::from([(
        "strict".to_owned(),
        PolicySettings {
            detectors: BTreeMap::from([("email".to_owned(), RedactionAction::Mask)]),
            custom: Vec::new(),
        },
    )]);
    let redactor = Redactor::new(&PolicySettings::default(), &tenants, "").unwrap();
    let mut f = Findings::new();
    let text = "jane@example.com";
    assert_eq!(
        redactor.text("strict", "c", text, &mut f).unwrap().text,
        "[email]"
    );
    assert_eq!(
        redactor.text("other", "c", text, &mut f).unwrap().text,
        text
    );
    let unknown = PolicySettings {
        detectors: BTreeMap::from([("emails".to_owned(), RedactionAction::Mask)]),
        custom: Vec::new(),
    };
    let error = Redactor::new(&unknown, &BTreeMap::new(), "").err().unwrap();
    assert!(error.contains("`emails`"), "{error}");
    let bad = PolicySettings {
        detectors: BTreeMap::new(),
        custom: vec![CustomDetector {
            name: "x".into(),
            pattern: "(".into(),
            action: RedactionAction::Mask,
        }],
    };
    assert!(Redactor::new(&bad, &BTreeMap::new(), "").is_err());
}

/// A card number that passes Luhn, from 15 random digits after a Visa 4.
fn visa(digits: &[u32]) -> String {
    let mut d: Vec<u32> = std::iter::once(4).chain(digits.iter().copied()).collect();
    for check in 0..10 {
        d.push(check);
        if super::detectors::BUILTINS
            .iter()
            .find(|b| b.name == "payment_card")
            .is_some_and(|b| (b.check)(&d.iter().map(|x| x.to_string()).collect::<String>()))
        {
            break;
        }
        d.pop();
    }
    d.iter().map(|x| x.to_string()).collect()
}

proptest! {
    /// Whatever surrounds a secret, the redacted text does not hold it.
    #[test]
    fn no_secret_survives(
        before in "[a-zA-Z ,.]{0,40}",
        after in "[a-zA-Z ,.]{0,40}",
        digits in proptest::collection::vec(0u32..10, 14),
        key in "[A-Z0-9]{16}",
    ) {
        let redactor = Redactor::new(&PolicySettings::default(), &BTreeMap::new(), "").unwrap();
        let card = visa(&digits);
        let aws = format!("AKIA{key}");
        for secret in [card.as_str(), aws.as_str()] {
            let text = format!("{before} {secret} {after}");
            let out = redactor.text("t", "c", &text, &mut Findings::new()).unwrap();
            prop_assert!(!out.text.contains(secret), "{text:?} -> {:?}", out.text);
        }
    }
}
