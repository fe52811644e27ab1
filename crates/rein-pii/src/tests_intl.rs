//! Unit tests of the international kinds: E.164 phone numbers, NANP numbers, IBANs and US
//! SSNs, the things that must stay untouched, switching kinds, and streaming.

use super::checks::{IBAN_LENGTHS, iban_len};
use super::{MaskStyle, MaskerConfig, MaskerError, SensitiveDataMasker, SensitiveKind};

fn mask(text: &str) -> String {
    SensitiveDataMasker::default().mask(text).into_owned()
}

fn kinds(text: &str) -> Vec<SensitiveKind> {
    SensitiveDataMasker::default()
        .find(text)
        .into_iter()
        .map(|m| m.kind)
        .collect()
}

fn assert_masked_whole(text: &str, kind: SensitiveKind) {
    assert_eq!(mask(text), "***", "{text}");
    assert_eq!(kinds(text), vec![kind], "{text}");
}

fn assert_untouched(texts: &[&str]) {
    let m = SensitiveDataMasker::default();
    for text in texts {
        assert_eq!(m.mask(text), *text, "{text} was masked: {:?}", m.find(text));
    }
}

// ---------- E.164 phone numbers ----------

#[test]
fn an_e164_number_is_masked_and_an_order_number_is_not() {
    assert_eq!(
        mask("Call +1 415-555-0134 about ORD-2024-000123"),
        "Call *** about ORD-2024-000123"
    );
}

#[test]
fn international_numbers_are_masked_in_their_common_national_groupings() {
    for text in [
        "+1 415-555-0134",
        "+1 (415) 555-0134",
        "+1 (415)555-0134",
        "+14155550134",
        "+1.415.555.0134",
        "+1-415-555-0134",
        "+44 20 7946 0958",
        "+44 (0)20 7946 0958",
        "+442079460958",
        "+49 30 901820",
        "+49 151 12345678",
        "+33 1 23 45 67 89",
        "+81 3-1234-5678",
        "+91 98765 43210",
        "+61 2 9876 5432",
        "+353 1 234 5678",
    ] {
        assert_masked_whole(text, SensitiveKind::Phone);
    }
    assert_eq!(mask("电话+44 20 7946 0958谢谢"), "电话***谢谢");
    assert_eq!(mask("(tel: +1 415 555 0134)."), "(tel: ***).");
    assert_eq!(mask("+1 415-555-0134, +44 20 7946 0958"), "***, ***");
    // Parentheses belong to the group after the country code only, so a following
    // `(415) 555-0134` is a number of its own, not a tail of the first.
    assert_eq!(mask("+44 20 7946 0958 (415) 555-0134"), "*** ***");
}

#[test]
fn a_plus_86_mobile_stays_a_mobile_and_is_a_phone_when_mobile_is_off() {
    assert_eq!(kinds("+86 138 0013 8000"), vec![SensitiveKind::Mobile]);
    let m = SensitiveDataMasker::builder()
        .disable(SensitiveKind::Mobile)
        .build()
        .unwrap();
    assert_eq!(m.mask("电话+86 138 0013 8000"), "电话***");
    assert_eq!(m.find("+86 138 0013 8000")[0].kind, SensitiveKind::Phone);
}

#[test]
fn plus_signs_that_are_not_phone_numbers_are_not_masked() {
    assert_untouched(&[
        "+1 123 555 0134",
        "+28 1234 5678",
        "+30 points",
        "up +15% this week",
        "+1200 users",
        "score +12 345",
        "2+2 = 4",
        "+1-2-3",
        "+0800 1234 5678",
        "+1 415 555 013",
        "ID+44 20 7946 0958",
    ]);
}

// ---------- NANP national numbers ----------

#[test]
fn north_american_numbers_without_plus_one_are_masked() {
    for text in [
        "(415) 555-0134",
        "(415)555-0134",
        "415-555-0134",
        "415.555.0134",
        "1-800-555-0199",
        "1 (800) 555-0199",
    ] {
        assert_masked_whole(text, SensitiveKind::NanpPhone);
    }
    assert_eq!(mask("call (415) 555-0134 today"), "call *** today");
}

#[test]
fn nanp_shapes_with_impossible_codes_or_in_longer_sequences_are_not_masked() {
    assert_untouched(&[
        "123-456-7890",
        "415-155-0134",
        "911-555-0134",
        "2024-415-555-0134",
        "415-555-0134-12",
        "415-555-01345",
        "ext415-555-0134",
        "10.415.555.0134",
    ]);
}

// ---------- US SSNs ----------

#[test]
fn a_hyphenated_us_ssn_is_masked() {
    assert_masked_whole("123-45-6789", SensitiveKind::UsSsn);
    assert_masked_whole("078-05-1120", SensitiveKind::UsSsn);
    assert_eq!(mask("SSN: 123-45-6789."), "SSN: ***.");
}

#[test]
fn ssns_in_never_issued_ranges_or_without_hyphens_are_not_masked() {
    assert_untouched(&[
        "000-12-3456",
        "666-12-3456",
        "900-12-3456",
        "999-12-3456",
        "123-00-4567",
        "123-45-0000",
        "123456789",
        "123 45 6789",
        "123-45-6789-0",
        "1-123-45-6789",
        "A123-45-6789",
    ]);
}

// ---------- IBANs ----------

#[test]
fn ibans_with_a_valid_checksum_are_masked_with_or_without_spaces() {
    for text in [
        "DE89 3704 0044 0532 0130 00",
        "DE89370400440532013000",
        "GB29 NWBK 6016 1331 9268 19",
        "GB29NWBK60161331926819",
        "FR14 2004 1010 0505 0001 3M02 606",
        "NL91ABNA0417164300",
        "CH93 0076 2011 6238 5295 7",
        "BE68 5390 0754 7034",
    ] {
        assert_masked_whole(text, SensitiveKind::Iban);
    }
    assert_eq!(mask("IBAN: DE89 3704 0044 0532 0130 00."), "IBAN: ***.");
}

#[test]
fn iban_shapes_with_a_bad_checksum_length_case_or_country_are_not_masked() {
    assert_untouched(&[
        "DE89 3704 0044 0532 0130 01",
        "DE89 3704 0044 0532 0130 0",
        "de89 3704 0044 0532 0130 00",
        "ZZ12 3456 7890 1234",
        "DE89 37040044 0532 0130 00",
        "XDE89370400440532013000",
        "DE893704004405320130001",
    ]);
}

#[test]
fn the_iban_length_table_is_sorted_and_answers_known_countries() {
    assert!(IBAN_LENGTHS.windows(2).all(|w| w[0].0 < w[1].0));
    assert_eq!(iban_len(b"DE"), Some(22));
    assert_eq!(iban_len(b"NO"), Some(15));
    assert_eq!(iban_len(b"RU"), Some(33));
    assert_eq!(iban_len(b"LC"), Some(32));
    assert_eq!(iban_len(b"US"), None);
}

// ---------- things that stay untouched ----------

#[test]
fn order_numbers_timestamps_dates_amounts_uuids_versions_ips_and_tracking_numbers_stay_untouched() {
    assert_untouched(&[
        // order numbers
        "ORD-2024-000123",
        "order #100234567",
        "PO 4500012345",
        "INV-2024-06-13-0042",
        // ISO timestamps and dates
        "2024-06-13T10:15:30Z",
        "2024-06-13T10:15:30+08:00",
        "2024-06-13 10:15:30.123456+0800",
        "2024-06-13",
        "13.06.2024",
        "06/13/2024",
        "1718236800",
        // amounts
        "$1,234,567.89",
        "1 234 567,00 €",
        "€1.234.567,89",
        "USD 12,345.00",
        "+1,234.56",
        // UUIDs
        "123e4567-e89b-12d3-a456-426614174000",
        "550e8400-e29b-41d4-a716-446655440000",
        "12345678-1234-5678-1234-567812345678",
        // version strings
        "v1.2.3",
        "1.0.0-rc.1",
        "release 2.10.415",
        "Python 3.12.4",
        // IPv4 addresses
        "192.168.1.100",
        "10.0.0.255",
        "203.0.113.42",
        "255.255.255.0",
        // tracking numbers and long integers
        "1Z999AA10123456784",
        "9400 1000 0000 0000 0000 00",
        "7489 1234 5678",
        "12345678901234567890123",
        "ISBN 978-3-16-148410-0",
        "555-0134",
    ]);
}

// ---------- styles ----------

#[test]
fn placeholder_and_partial_styles_cover_the_new_kinds() {
    let m = SensitiveDataMasker::builder()
        .style(MaskStyle::Placeholder)
        .build()
        .unwrap();
    assert_eq!(
        m.mask("+1 415-555-0134 (415) 555-0134 DE89370400440532013000 123-45-6789"),
        "[PHONE] [PHONE] [IBAN] [SSN]"
    );
    let m = SensitiveDataMasker::builder()
        .style(MaskStyle::Partial)
        .build()
        .unwrap();
    assert_eq!(m.mask("+1 415-555-0134"), "+1 41*-***-0134");
    assert_eq!(
        m.mask("DE89 3704 0044 0532 0130 00"),
        "DE89 **** **** **** **30 00"
    );
    assert_eq!(m.mask("123-45-6789"), "***-**-6789");
}

// ---------- switching ----------

#[test]
fn each_new_kind_can_be_switched_off_alone_in_the_builder() {
    let text = "+44 20 7946 0958 (415) 555-0134 DE89370400440532013000 123-45-6789";
    for (kind, left) in [
        (SensitiveKind::Phone, "+44 20 7946 0958 *** *** ***"),
        (SensitiveKind::NanpPhone, "*** (415) 555-0134 *** ***"),
        (SensitiveKind::Iban, "*** *** DE89370400440532013000 ***"),
        (SensitiveKind::UsSsn, "*** *** *** 123-45-6789"),
    ] {
        let m = SensitiveDataMasker::builder()
            .disable(kind.clone())
            .build()
            .unwrap();
        assert_eq!(m.mask(text), left, "{kind}");
    }
}

#[test]
fn the_new_kinds_are_switched_off_by_name_in_the_config() {
    let cfg: MaskerConfig =
        serde_json::from_str(r#"{"disabled": ["phone", "nanp_phone", "iban", "us_ssn"]}"#).unwrap();
    let m = cfg.build().unwrap();
    let text = "+1 415-555-0134 (415) 555-0134 DE89370400440532013000 123-45-6789";
    assert_eq!(m.mask(text), text);
    assert_eq!(m.mask("13800138000"), "***");
}

#[test]
fn an_unknown_kind_name_is_a_typed_error_with_the_closest_name() {
    for (typo, meant) in [
        ("ssn", "us_ssn"),
        ("ibann", "iban"),
        ("nanp", "nanp_phone"),
        ("Phone", "phone"),
        ("emial", "email"),
    ] {
        let err = SensitiveDataMasker::builder()
            .disable(SensitiveKind::Custom(typo.into()))
            .build()
            .unwrap_err();
        assert!(
            matches!(&err, MaskerError::UnknownKind { name } if name == typo),
            "{err:?}"
        );
        assert!(
            err.to_string()
                .contains(&format!("did you mean `{meant}`?")),
            "{typo}: {err}"
        );
    }
    let err = SensitiveDataMasker::builder()
        .disable(SensitiveKind::Custom("zzzzzz".into()))
        .build()
        .unwrap_err();
    assert!(!err.to_string().contains("did you mean"), "{err}");
}

#[test]
fn the_new_kind_names_are_reserved_for_extra_patterns() {
    for name in ["phone", "nanp_phone", "iban", "us_ssn"] {
        assert!(matches!(
            SensitiveDataMasker::builder()
                .extra_pattern(name, "x")
                .build(),
            Err(MaskerError::InvalidPatternName { .. })
        ));
    }
}

// ---------- streaming ----------

/// Streams `chunks` the way a masked stream does without overflow: emit the masked
/// stable prefix, carry the rest.
fn stream(m: &SensitiveDataMasker, chunks: &[&str]) -> String {
    let mut held = String::new();
    let mut out = String::new();
    for c in chunks {
        held.push_str(c);
        let n = m.stable_prefix_len(&held);
        out.push_str(&m.mask(&held[..n]));
        held.drain(..n);
    }
    out.push_str(&m.mask(&held));
    out
}

#[test]
fn a_number_split_across_chunks_is_still_masked_for_every_new_kind() {
    let m = SensitiveDataMasker::default();
    for (chunks, want) in [
        (&["Call +1 (41", "5) 555-01", "34 now"][..], "Call *** now"),
        (&["电话+44 20 79", "46 0958。"][..], "电话***。"),
        (
            &["IBAN DE89 3704 00", "44 0532 0130 00, ok"][..],
            "IBAN ***, ok",
        ),
        (&["IBAN GB29 NW", "BK 6016 1331 9268 19."][..], "IBAN ***."),
        (&["ssn 123-4", "5-6789 ok"][..], "ssn *** ok"),
        (&["tel (415) 5", "55-0134"][..], "tel ***"),
    ] {
        assert_eq!(stream(&m, chunks), want, "{chunks:?}");
    }
}

#[test]
fn masking_the_stable_prefix_then_the_rest_equals_masking_the_whole_text_for_the_new_kinds() {
    let m = SensitiveDataMasker::default();
    let pieces = [
        "+1", "+44", " ", "(415)", "(0)", "555", "-", ".", "0134", "20", "7946", "DE89", "3704",
        "0044", "GB29", "NWBK", "123", "45", "6789", "1", "x", "。", ",", "A", "\n", "ok ",
    ];
    let mut state: u64 = 0x0DDB_1A5E_5BAD_5EED;
    let mut next = move |n: usize| {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        (state % n as u64) as usize
    };
    let mut masked = 0;
    for _ in 0..30_000 {
        let head: String = (0..next(9)).map(|_| pieces[next(pieces.len())]).collect();
        let more: String = (0..next(7)).map(|_| pieces[next(pieces.len())]).collect();
        let n = m.stable_prefix_len(&head);
        let whole = format!("{head}{more}");
        let streamed = format!("{}{}", m.mask(&head[..n]), m.mask(&whole[n..]));
        assert_eq!(streamed, m.mask(&whole), "head {head:?} more {more:?}");
        if m.mask(&whole) != whole {
            masked += 1;
        }
    }
    assert!(masked > 200, "only {masked} texts contained a match");
}
