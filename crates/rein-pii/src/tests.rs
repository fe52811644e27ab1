//! Unit tests of e-mail, match resolution, styles, errors, config and streaming support.

use std::borrow::Cow;

use regex::Regex;

use super::{
    MaskStyle, MaskerConfig, MaskerError, SensitiveDataMasker, SensitiveKind, SensitiveMatch,
};

fn mask(text: &str) -> String {
    SensitiveDataMasker::default().mask(text).into_owned()
}

fn kinds(masker: &SensitiveDataMasker, text: &str) -> Vec<SensitiveKind> {
    masker.find(text).into_iter().map(|m| m.kind).collect()
}

// ---------- e-mail ----------

#[test]
fn email_address_is_masked_whole() {
    assert_eq!(mask("邮箱 user.name@example.com 已记录"), "邮箱 *** 已记录");
    assert_eq!(mask("mail a+b%c@sub-domain.example.co.uk."), "mail ***.");
}

#[test]
fn email_whose_local_part_contains_a_mobile_number_is_masked_as_one_email() {
    let m = SensitiveDataMasker::default();
    assert_eq!(m.mask("user13800138000@x.com"), "***");
    assert_eq!(m.mask("13800138000@qq.com"), "***");
    assert_eq!(m.mask("138-0013-8000@qq.com"), "***");
    assert_eq!(
        kinds(&m, "user13800138000@x.com"),
        vec![SensitiveKind::Email]
    );
}

#[test]
fn text_with_at_sign_but_no_valid_domain_is_not_an_email() {
    for text in ["a@b", "a@b.c", "@example.com", "a@.com", "价格 @ 5.00"] {
        assert_eq!(mask(text), text);
    }
}

#[test]
fn email_adjacent_to_cjk_is_masked() {
    assert_eq!(mask("邮箱a.b@example.com已记录"), "邮箱***已记录");
}

#[test]
fn email_scanner_agrees_with_the_reference_regex_on_random_text() {
    let reference = Regex::new(r"[A-Za-z0-9._%+-]+@[A-Za-z0-9.-]+\.[A-Za-z]{2,}").unwrap();
    let m = SensitiveDataMasker::builder()
        .disable(SensitiveKind::Mobile)
        .disable(SensitiveKind::IdCard)
        .disable(SensitiveKind::BankCard)
        .build()
        .unwrap();
    let pieces = [
        "a", "co", "x1", ".", "@", "-", "_", "+", "%", "邮", " ", ".cn", ".com", "@b", "1", "..",
    ];
    let mut state: u64 = 0x9E37_79B9_7F4A_7C15;
    let mut matched = 0;
    for _ in 0..20_000 {
        let mut text = String::new();
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        let len = (state % 12) as usize;
        for _ in 0..len {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            text.push_str(pieces[(state % pieces.len() as u64) as usize]);
        }
        let expected: Vec<_> = reference.find_iter(&text).map(|x| x.range()).collect();
        let got: Vec<_> = m.find(&text).into_iter().map(|x| x.range).collect();
        assert_eq!(got, expected, "text {text:?}");
        matched += expected.len();
    }
    assert!(matched > 500, "only {matched} e-mails generated");
}

// ---------- mixed text, find, overlaps ----------

#[test]
fn mixed_chinese_and_english_text_masks_every_kind() {
    assert_eq!(
        mask("请联系13812345678或邮箱a.b@example.com"),
        "请联系***或邮箱***"
    );
    assert_eq!(
        mask("Call 13800138000, ID 110101199003077213, card 4111111111111111, mail x@y.cn"),
        "Call ***, ID ***, card ***, mail ***"
    );
}

#[test]
fn find_reports_kinds_and_byte_ranges_in_order() {
    let text = "手机13800138000，身份证110101199003077213，卡4111111111111111，邮箱a@b.cn";
    let m = SensitiveDataMasker::default();
    let found = m.find(text);
    let expected_kinds = [
        SensitiveKind::Mobile,
        SensitiveKind::IdCard,
        SensitiveKind::BankCard,
        SensitiveKind::Email,
    ];
    assert_eq!(found.len(), 4);
    for (f, k) in found.iter().zip(expected_kinds) {
        assert_eq!(f.kind, k);
    }
    assert_eq!(&text[found[0].range.clone()], "13800138000");
    assert_eq!(found[0].range, 6..17);
    assert_eq!(&text[found[1].range.clone()], "110101199003077213");
    assert_eq!(&text[found[2].range.clone()], "4111111111111111");
    assert_eq!(&text[found[3].range.clone()], "a@b.cn");
}

#[test]
fn find_range_of_plus_86_mobile_includes_the_plus() {
    let m = SensitiveDataMasker::default();
    assert_eq!(
        m.find("电话+86 138 0013 8000"),
        vec![SensitiveMatch {
            kind: SensitiveKind::Mobile,
            range: 6..23
        }]
    );
}

#[test]
fn find_returns_nothing_for_clean_text() {
    assert!(
        SensitiveDataMasker::default()
            .find("没有敏感信息 42")
            .is_empty()
    );
}

#[test]
fn overlapping_candidates_merge_leftmost_first_so_no_part_of_a_match_stays_in_clear() {
    let m = SensitiveDataMasker::builder()
        .extra_pattern("order", r"ORDER-[0-9]+")
        .extra_pattern("tail", r"8000 trailing")
        .build()
        .unwrap();
    // The extra pattern starts leftmost and wins over the mobile number inside it.
    assert_eq!(
        kinds(&m, "ORDER-13800138000"),
        vec![SensitiveKind::Custom("order".into())]
    );
    // The mobile number starts first and is reported; the overlapping extra match
    // extends it, so its tail is masked too.
    assert_eq!(
        kinds(&m, "13800138000 trailing"),
        vec![SensitiveKind::Mobile]
    );
    assert_eq!(m.mask("13800138000 trailing"), "***");
    // A card number written straight into an e-mail address: both masked.
    let d = SensitiveDataMasker::default();
    assert_eq!(d.mask("4111 1111 1111 1111-li.wei@example.com"), "***");
}

#[test]
fn masking_is_deterministic_and_matches_find() {
    let m = SensitiveDataMasker::builder()
        .extra_pattern("word", r"[a-z]{3}[0-9]")
        .build()
        .unwrap();
    let text = "abc13800138000 x@y.com 4111 1111 1111 1111 abc1";
    let found = m.find(text);
    let mut rebuilt = String::new();
    let mut last = 0;
    for f in &found {
        rebuilt.push_str(&text[last..f.range.start]);
        rebuilt.push_str("***");
        last = f.range.end;
    }
    rebuilt.push_str(&text[last..]);
    assert_eq!(m.mask(text), rebuilt);
    assert_eq!(m.mask(text), m.mask(text));
}

// ---------- Cow and no-op behaviour ----------

#[test]
fn mask_borrows_when_nothing_matches() {
    let m = SensitiveDataMasker::default();
    for text in [
        "",
        "hello world",
        "订单 20260613001 已发货",
        "价格 12.50 @ shop",
        "１２３４５",
    ] {
        let cow = m.mask(text);
        assert!(matches!(cow, Cow::Borrowed(_)), "{text}");
        assert_eq!(cow, text);
    }
}

#[test]
fn mask_returns_owned_when_something_matched() {
    let cow = SensitiveDataMasker::default().mask("13800138000");
    assert!(matches!(cow, Cow::Owned(_)));
}

#[test]
fn empty_input_is_returned_unchanged() {
    assert_eq!(SensitiveDataMasker::default().mask(""), "");
}

#[test]
fn all_kinds_disabled_means_no_rules_and_unchanged_text() {
    let m = SensitiveDataMasker::builder()
        .disable(SensitiveKind::Mobile)
        .disable(SensitiveKind::IdCard)
        .disable(SensitiveKind::BankCard)
        .disable(SensitiveKind::Email)
        .disable(SensitiveKind::Phone)
        .disable(SensitiveKind::NanpPhone)
        .disable(SensitiveKind::Iban)
        .disable(SensitiveKind::UsSsn)
        .build()
        .unwrap();
    assert!(!m.has_rules());
    let text = "13800138000 a@b.com 4111111111111111 +1 415-555-0134 123-45-6789 \
                DE89370400440532013000 (415) 555-0134";
    assert!(matches!(m.mask(text), Cow::Borrowed(_)));
    assert!(SensitiveDataMasker::default().has_rules());
}

#[test]
fn disabling_one_kind_leaves_the_others_active() {
    let m = SensitiveDataMasker::builder()
        .disable(SensitiveKind::Email)
        .build()
        .unwrap();
    assert_eq!(m.mask("13800138000 a@b.com"), "*** a@b.com");
}

// ---------- replacement and styles ----------

#[test]
fn replacement_with_dollar_and_backslash_is_inserted_literally() {
    let m = SensitiveDataMasker::builder()
        .replacement(r"$1\0${x}$")
        .build()
        .unwrap();
    assert_eq!(m.mask("a 13800138000 b"), r"a $1\0${x}$ b");
}

#[test]
fn empty_replacement_deletes_matches() {
    let m = SensitiveDataMasker::builder()
        .replacement("")
        .build()
        .unwrap();
    assert_eq!(m.mask("电话13800138000。"), "电话。");
}

#[test]
fn custom_replacement_and_extra_pattern_work_together() {
    let m = SensitiveDataMasker::builder()
        .replacement("[已隐藏]")
        .extra_pattern("secret", r"SECRET-\d+")
        .build()
        .unwrap();
    assert_eq!(m.mask("token SECRET-12345"), "token [已隐藏]");
    assert_eq!(
        kinds(&m, "token SECRET-12345"),
        vec![SensitiveKind::Custom("secret".into())]
    );
}

#[test]
fn placeholder_style_writes_typed_placeholders() {
    let m = SensitiveDataMasker::builder()
        .style(MaskStyle::Placeholder)
        .extra_pattern("secret", r"SECRET-\d+")
        .build()
        .unwrap();
    assert_eq!(
        m.mask("13800138000 110101199003077213 4111111111111111 a@b.cn SECRET-1"),
        "[PHONE] [ID_CARD] [BANK_CARD] [EMAIL] [secret]"
    );
}

#[test]
fn partial_style_keeps_first_three_and_last_four() {
    let m = SensitiveDataMasker::builder()
        .style(MaskStyle::Partial)
        .extra_pattern("secret", r"SECRET-\d+")
        .build()
        .unwrap();
    assert_eq!(m.mask("电话13800138000"), "电话138****8000");
    assert_eq!(m.mask("+86 138 0013 8000"), "+86 138 **** 8000");
    assert_eq!(m.mask("11010119900307721X"), "110***********721X");
    assert_eq!(m.mask("4111 1111 1111 1111"), "411* **** **** 1111");
    assert_eq!(m.mask("user.name@example.com"), "u***@example.com");
    assert_eq!(m.mask("SECRET-1"), "***");
}

// ---------- errors ----------

#[test]
fn invalid_extra_pattern_is_a_build_error_naming_the_pattern_and_regex_error() {
    let err = SensitiveDataMasker::builder()
        .extra_pattern("broken_one", "(unclosed")
        .build()
        .unwrap_err();
    assert!(matches!(&err, MaskerError::InvalidPattern { name, .. } if name == "broken_one"));
    let msg = err.to_string();
    assert!(msg.contains("broken_one"), "{msg}");
    assert!(msg.contains("unclosed group"), "{msg}");
}

#[test]
fn extra_pattern_names_must_be_non_empty_unique_and_not_built_in() {
    for builder in [
        SensitiveDataMasker::builder().extra_pattern("", "x"),
        SensitiveDataMasker::builder().extra_pattern("mobile", "x"),
        SensitiveDataMasker::builder()
            .extra_pattern("a", "x")
            .extra_pattern("a", "y"),
    ] {
        assert!(matches!(
            builder.build(),
            Err(MaskerError::InvalidPatternName { .. })
        ));
    }
}

#[test]
fn disabling_a_custom_kind_removes_that_extra_pattern() {
    let m = SensitiveDataMasker::builder()
        .disable(SensitiveKind::Custom("secret".into()))
        .extra_pattern("secret", r"SECRET-\d+")
        .extra_pattern("other", r"OTHER-\d+")
        .build()
        .unwrap();
    assert_eq!(m.mask("SECRET-1 OTHER-2"), "SECRET-1 ***");
    let err = SensitiveDataMasker::builder()
        .disable(SensitiveKind::Custom("nope".into()))
        .build()
        .unwrap_err();
    assert!(matches!(err, MaskerError::UnknownKind { name } if name == "nope"));
}

// ---------- config ----------

#[test]
fn config_deserializes_from_json_and_builds() {
    let cfg: MaskerConfig = serde_json::from_str(
        r#"{
            "replacement": "[hidden]",
            "extra_patterns": [{"name": "secret", "regex": "SECRET-\\d+"}],
            "disabled": ["email"],
            "luhn_check": false
        }"#,
    )
    .unwrap();
    assert!(!cfg.luhn_check);
    assert!(cfg.card_prefix_check);
    let m = cfg.build().unwrap();
    assert_eq!(
        m.mask("a@b.com 6222021234567890123 SECRET-9"),
        "a@b.com [hidden] [hidden]"
    );
}

#[test]
fn empty_config_equals_the_defaults() {
    let cfg: MaskerConfig = serde_json::from_str("{}").unwrap();
    assert_eq!(cfg, MaskerConfig::default());
    assert_eq!(cfg.replacement, "***");
    assert!(cfg.luhn_check && cfg.card_prefix_check && !cfg.id_checksum);
    assert!(cfg.alnum_boundary && cfg.grouped_numbers);
    assert_eq!(cfg.style, MaskStyle::Replace);
    let m = cfg.build().unwrap();
    assert_eq!(m.mask("13800138000 a@b.com"), "*** ***");
}

#[test]
fn config_style_is_deserialized_by_snake_case_name() {
    let cfg: MaskerConfig = serde_json::from_str(r#"{"style": "partial"}"#).unwrap();
    assert_eq!(cfg.build().unwrap().mask("13800138000"), "138****8000");
}

#[test]
fn config_with_unknown_key_is_rejected() {
    let err = serde_json::from_str::<MaskerConfig>(r#"{"replacment": "x"}"#).unwrap_err();
    assert!(err.to_string().contains("replacment"), "{err}");
    let err = serde_json::from_str::<MaskerConfig>(
        r#"{"extra_patterns": [{"name": "a", "regex": "b", "flags": "i"}]}"#,
    )
    .unwrap_err();
    assert!(err.to_string().contains("flags"), "{err}");
}

#[test]
fn config_error_for_bad_regex_names_the_key_and_pattern() {
    let cfg: MaskerConfig = serde_json::from_str(
        r#"{"extra_patterns": [{"name": "ok", "regex": "a+"}, {"name": "bad", "regex": "[z-a]"}]}"#,
    )
    .unwrap();
    let err = cfg.build().unwrap_err();
    match &err {
        MaskerError::Config { key, error } => {
            assert_eq!(key, "extra_patterns[1].regex");
            assert!(
                matches!(**error, MaskerError::InvalidPattern { ref name, .. } if name == "bad")
            );
        }
        other => panic!("unexpected {other:?}"),
    }
    let msg = err.to_string();
    assert!(
        msg.contains("extra_patterns[1].regex") && msg.contains("`bad`"),
        "{msg}"
    );
}

#[test]
fn config_error_for_bad_name_or_unknown_disabled_kind_names_the_key() {
    let cfg: MaskerConfig =
        serde_json::from_str(r#"{"extra_patterns": [{"name": "", "regex": "a"}]}"#).unwrap();
    assert!(
        cfg.build()
            .unwrap_err()
            .to_string()
            .contains("extra_patterns[0].name")
    );
    let cfg: MaskerConfig = serde_json::from_str(r#"{"disabled": ["mobile", "phnoe"]}"#).unwrap();
    let err = cfg.build().unwrap_err();
    assert!(
        matches!(&err, MaskerError::Config { key, .. } if key == "disabled[1]"),
        "{err}"
    );
    assert!(err.to_string().contains("did you mean `phone`?"), "{err}");
}

#[test]
fn config_may_disable_a_configured_extra_pattern_by_name() {
    let cfg: MaskerConfig = serde_json::from_str(
        r#"{"extra_patterns": [{"name": "s", "regex": "S-\\d"}], "disabled": ["s", "s"]}"#,
    )
    .unwrap();
    assert_eq!(cfg.build().unwrap().mask("S-1"), "S-1");
}

// ---------- type properties ----------

#[test]
fn masker_is_send_sync_clone_and_cheap_to_clone() {
    fn assert_traits<T: Send + Sync + Clone + std::fmt::Debug + 'static>() {}
    assert_traits::<SensitiveDataMasker>();
    assert_traits::<MaskerError>();
    let a = SensitiveDataMasker::default();
    let b = a.clone();
    assert_eq!(b.mask("13800138000"), "***");
}

#[test]
fn kind_names_round_trip_through_builtin_from_name() {
    for k in [
        SensitiveKind::Mobile,
        SensitiveKind::IdCard,
        SensitiveKind::BankCard,
        SensitiveKind::Email,
        SensitiveKind::Phone,
        SensitiveKind::NanpPhone,
        SensitiveKind::Iban,
        SensitiveKind::UsSsn,
    ] {
        assert_eq!(SensitiveKind::builtin_from_name(k.name()), Some(k.clone()));
        assert_eq!(k.to_string(), k.name());
    }
    assert_eq!(SensitiveKind::Custom("x".into()).name(), "x");
}

#[test]
fn masking_random_mixed_text_never_panics_and_keeps_char_boundaries() {
    let m = SensitiveDataMasker::builder()
        .extra_pattern("w", "[a-z]+9")
        .build()
        .unwrap();
    let alphabet: Vec<char> = "0123456789 -+@.aX电１x_".chars().collect();
    let mut state: u64 = 0x2545_F491_4F6C_DD1D;
    for _ in 0..20_000 {
        let mut text = String::new();
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        let len = (state % 40) as usize;
        for _ in 0..len {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            text.push(alphabet[(state % alphabet.len() as u64) as usize]);
        }
        let found = m.find(&text);
        let mut last = 0;
        for f in &found {
            assert!(
                f.range.start >= last && f.range.end > f.range.start,
                "{text:?}"
            );
            assert!(text.is_char_boundary(f.range.start) && text.is_char_boundary(f.range.end));
            last = f.range.end;
        }
        let _ = m.mask(&text);
    }
}

// ---------- streaming support ----------

/// A deterministic generator: `next(n)` is in `0..n`.
fn xorshift(mut state: u64) -> impl FnMut(usize) -> usize {
    move |n| {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        (state % n as u64) as usize
    }
}

#[test]
fn stable_prefix_len_stops_before_an_unfinished_number_or_address() {
    let m = SensitiveDataMasker::default();
    assert_eq!(m.stable_prefix_len("电话1380013"), "电话".len());
    assert_eq!(m.stable_prefix_len("call +86 138 0013"), "call ".len());
    assert_eq!(m.stable_prefix_len("mail me: user.na"), "mail me: ".len());
    assert_eq!(m.stable_prefix_len("完成。"), "完成。".len());
    assert_eq!(m.stable_prefix_len("13800138000"), 0);
    assert_eq!(m.stable_prefix_len(""), 0);
}

#[test]
fn masking_the_stable_prefix_then_the_rest_equals_masking_the_whole_text() {
    let m = SensitiveDataMasker::default();
    let pieces = [
        "1",
        "38",
        "0013",
        "8000",
        " ",
        "-",
        "+86",
        "a",
        "@",
        "x.cn",
        "。",
        "X",
        "SF",
        "4111",
        "1111",
        "11010119900307721",
        "电",
        ",",
        "１",
        ".",
        "\n",
    ];
    let mut next = xorshift(0x1234_5678_9ABC_DEF1);
    let mut checked_masked = 0;
    for _ in 0..30_000 {
        let mut head = String::new();
        for _ in 0..next(8) {
            head.push_str(pieces[next(pieces.len())]);
        }
        let mut more = String::new();
        for _ in 0..next(6) {
            more.push_str(pieces[next(pieces.len())]);
        }
        let n = m.stable_prefix_len(&head);
        let whole = format!("{head}{more}");
        let streamed = format!("{}{}", m.mask(&head[..n]), m.mask(&whole[n..]));
        assert_eq!(streamed, m.mask(&whole), "head {head:?} more {more:?}");
        if m.mask(&head[..n]) != head[..n] {
            checked_masked += 1;
        }
    }
    assert!(
        checked_masked > 100,
        "only {checked_masked} prefixes contained a match"
    );
}

#[test]
fn the_word_at_a_time_trigger_search_agrees_with_a_byte_at_a_time_search() {
    use super::scan::Triggers;
    let alphabet: Vec<u8> = [
        b'0', b'9', b'/', b':', b'@', b'?', b'A', b' ', 0x00, 0x7F, 0x80,
    ]
    .into_iter()
    .chain("电１".bytes())
    .collect();
    let mut next = xorshift(0x9E37_79B9_7F4A_7C15);
    for _ in 0..20_000 {
        let bytes: Vec<u8> = (0..next(40))
            .map(|_| alphabet[next(alphabet.len())])
            .collect();
        for (digits, at) in [(true, true), (true, false), (false, true)] {
            let mut triggers = Triggers::new(&bytes, digits, at);
            // Walk forward by random steps, as the scanner does.
            let mut from = 0;
            while from <= bytes.len() {
                let expected = bytes[from..]
                    .iter()
                    .position(|&c| (digits && c.is_ascii_digit()) || (at && c == b'@'))
                    .map(|p| from + p);
                assert_eq!(
                    triggers.next(from),
                    expected,
                    "{bytes:?} from {from} digits {digits} at {at}"
                );
                from += 1 + next(3);
            }
        }
    }
}

#[test]
fn a_space_after_a_full_width_digit_does_not_end_a_streamable_prefix() {
    let m = SensitiveDataMasker::default();
    let text =
        " -+8600130013@001311010559\n.11010511010580001101058000993.08000@+3３ 910013110105０";
    let n = m.stable_prefix_len(text);
    let streamed = format!("{}{}", m.mask(&text[..n]), m.mask(&text[n..]));
    assert_eq!(streamed, m.mask(text), "split at {n}");
}
