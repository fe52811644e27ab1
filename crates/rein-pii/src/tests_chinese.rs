//! Unit tests of the Chinese kinds: mobile numbers, resident ID numbers, bank cards, and
//! the letter/digit boundaries they share.

use super::{SensitiveDataMasker, SensitiveKind};

fn mask(text: &str) -> String {
    SensitiveDataMasker::default().mask(text).into_owned()
}

fn kinds(masker: &SensitiveDataMasker, text: &str) -> Vec<SensitiveKind> {
    masker.find(text).into_iter().map(|m| m.kind).collect()
}

// ---------- mobile ----------

#[test]
fn mobile_number_surrounded_by_cjk_is_masked_with_default_replacement() {
    assert_eq!(mask("联系13800138000处理"), "联系***处理");
    assert_eq!(mask("联系 13800138000 处理"), "联系 *** 处理");
}

#[test]
fn mobile_number_alone_and_at_text_edges_is_masked() {
    assert_eq!(mask("13800138000"), "***");
    assert_eq!(mask("13800138000。"), "***。");
    assert_eq!(mask("tel: 19912345678"), "tel: ***");
}

#[test]
fn two_mobile_numbers_separated_by_punctuation_or_space_are_both_masked() {
    assert_eq!(mask("13800138000,13900139000"), "***,***");
    assert_eq!(mask("13800138000 13900139000"), "*** ***");
    assert_eq!(mask("13800138000、13900139000"), "***、***");
}

#[test]
fn eleven_digit_number_not_starting_13_to_19_is_not_a_mobile() {
    for text in ["12800138000", "10086100861", "20260613001"] {
        assert_eq!(mask(text), text);
    }
}

#[test]
fn eleven_digit_order_number_starting_with_2_is_not_masked() {
    assert_eq!(mask("订单 20260613001 已发货"), "订单 20260613001 已发货");
}

#[test]
fn ten_and_twelve_digit_runs_are_not_mobile_numbers() {
    assert_eq!(mask("1380013800"), "1380013800");
    assert_eq!(mask("138001380001"), "138001380001");
}

#[test]
fn mobile_number_inside_a_longer_digit_run_is_not_masked() {
    let text = "流水号 99913800138000999999";
    assert_eq!(text.len() - "流水号 ".len(), 20);
    assert_eq!(mask(text), text);
}

#[test]
fn digit_runs_of_twenty_or_more_digits_are_never_masked() {
    for len in 20..=40 {
        let text: String = "6222021234567890128138001380001"
            .chars()
            .cycle()
            .take(len)
            .collect();
        assert_eq!(mask(&text), text, "len {len}");
    }
}

#[test]
fn mobile_number_with_country_code_is_masked_including_the_plus() {
    assert_eq!(mask("电话+8613800138000"), "电话***");
    assert_eq!(mask("电话 8613800138000"), "电话 ***");
    assert_eq!(mask("电话 008613800138000"), "电话 ***");
}

#[test]
fn mobile_number_grouped_with_spaces_or_hyphens_is_masked() {
    assert_eq!(mask("电话 138 0013 8000 谢谢"), "电话 *** 谢谢");
    assert_eq!(mask("电话138-0013-8000"), "电话***");
    assert_eq!(mask("call +86 138 0013 8000"), "call ***");
    assert_eq!(mask("call +86-138-0013-8000."), "call ***.");
    assert_eq!(mask("call +86 13800138000"), "call ***");
}

#[test]
fn grouped_mobile_with_mixed_separators_or_an_extra_group_is_not_masked() {
    assert_eq!(mask("138 0013-8000"), "138 0013-8000");
    assert_eq!(mask("138 0013 8000 2"), "138 0013 8000 2");
}

#[test]
fn grouped_numbers_can_be_turned_off() {
    let m = SensitiveDataMasker::builder()
        .grouped_numbers(false)
        .build()
        .unwrap();
    assert_eq!(m.mask("138 0013 8000"), "138 0013 8000");
    assert_eq!(m.mask("+8613800138000"), "***");
}

// ---------- letters and boundaries ----------

#[test]
fn letter_prefixed_identifiers_are_not_masked_by_default() {
    for text in [
        "SF13800138000",
        "运单SF13800138000",
        "ORD202606130012345",
        "id 4111111111111111abc",
        "user_13800138000",
        "ＳＦ13800138000",
    ] {
        assert_eq!(mask(text), text);
    }
}

#[test]
fn letter_prefixed_identifiers_are_masked_when_alnum_boundary_is_off() {
    let m = SensitiveDataMasker::builder()
        .alnum_boundary(false)
        .build()
        .unwrap();
    assert_eq!(m.mask("SF13800138000"), "SF***");
    assert_eq!(m.mask("x4111111111111111y"), "x***y");
}

#[test]
fn cjk_characters_and_punctuation_are_boundaries_not_digits() {
    assert_eq!(mask("号码是13800138000吗"), "号码是***吗");
    assert_eq!(mask("（13800138000）"), "（***）");
    assert_eq!(mask("[13800138000]"), "[***]");
}

#[test]
fn full_width_digits_are_read_as_digits_and_masked() {
    assert_eq!(mask("电话１３８００１３８０００"), "电话***");
}

#[test]
fn ascii_digits_touching_full_width_digits_form_one_run_and_are_not_masked() {
    let text = "１13800138000";
    assert_eq!(mask(text), text);
    let text = "13800138000２";
    assert_eq!(mask(text), text);
}

// ---------- ID numbers ----------

#[test]
fn eighteen_digit_id_with_x_is_masked_by_default() {
    assert_eq!(mask("身份证11010119900307721X"), "身份证***");
    assert_eq!(mask("身份证11010119900307721x。"), "身份证***。");
}

#[test]
fn eighteen_digit_id_with_invalid_checksum_is_not_masked_when_checksum_option_is_on() {
    let m = SensitiveDataMasker::builder()
        .id_checksum(true)
        .build()
        .unwrap();
    // The reference test ID has an invalid check character (the correct one is 3).
    assert_eq!(m.mask("11010119900307721X"), "11010119900307721X");
    assert_eq!(m.mask("110101199003077213"), "***");
    assert_eq!(m.mask("44030419851231002X"), "***");
}

#[test]
fn eighteen_digit_id_is_reported_as_id_not_as_card() {
    let m = SensitiveDataMasker::default();
    assert_eq!(kinds(&m, "110101199003077213"), vec![SensitiveKind::IdCard]);
}

#[test]
fn eighteen_digit_number_with_impossible_birth_date_is_not_an_id() {
    // month 13, 30 February, 29 February in a non-leap year, year 1800
    for text in [
        "110101199013077213",
        "110101199002307213",
        "110101199902297213",
        "110101180003077213",
    ] {
        let m = SensitiveDataMasker::default();
        assert!(!kinds(&m, text).contains(&SensitiveKind::IdCard), "{text}");
    }
    // 29 February 2000 is a real day.
    assert_eq!(mask("110105200002291235"), "***");
}

#[test]
fn eighteen_digit_number_with_impossible_region_is_not_an_id() {
    let m = SensitiveDataMasker::default();
    for text in [
        "001011199003077213",
        "991011199003077213",
        "202606130012345678",
    ] {
        assert!(!kinds(&m, text).contains(&SensitiveKind::IdCard), "{text}");
    }
}

#[test]
fn id_with_x_followed_by_letters_is_not_masked() {
    assert_eq!(mask("11010119900307721Xyz"), "11010119900307721Xyz");
}

#[test]
fn fifteen_digit_legacy_id_with_valid_region_and_date_is_masked() {
    assert_eq!(mask("旧身份证110101900307721号"), "旧身份证***号");
}

#[test]
fn fifteen_digit_number_without_a_valid_birth_date_is_not_masked() {
    // date part 901332 (month 13) and region 11: not an ID; leading 1: not a card.
    assert_eq!(mask("110101901332721"), "110101901332721");
    // A 15-digit tracking-style number starting with 7 failing Luhn.
    assert_eq!(mask("运单 773012345678901"), "运单 773012345678901");
}

// ---------- bank cards ----------

#[test]
fn luhn_valid_card_numbers_of_13_to_19_digits_are_masked() {
    assert_eq!(mask("卡号6222021234567890128"), "卡号***");
    assert_eq!(mask("card 4111111111111111."), "card ***.");
    assert_eq!(mask("4000123456789017"), "***");
    let m = SensitiveDataMasker::default();
    assert_eq!(
        kinds(&m, "6222021234567890128"),
        vec![SensitiveKind::BankCard]
    );
}

#[test]
fn non_luhn_card_is_not_masked_by_default_but_is_with_luhn_check_off() {
    // The reference test card fails Luhn.
    assert_eq!(mask("卡号6222021234567890123"), "卡号6222021234567890123");
    assert_eq!(mask("4111111111111112"), "4111111111111112");
    let m = SensitiveDataMasker::builder()
        .luhn_check(false)
        .build()
        .unwrap();
    assert_eq!(m.mask("卡号6222021234567890123"), "卡号***");
    assert_eq!(m.mask("4111111111111112"), "***");
}

#[test]
fn epoch_millisecond_timestamp_is_not_masked_even_when_luhn_valid() {
    // 1718236800005 passes Luhn; the leading 1 rules it out as a card.
    assert_eq!(mask("ts=1718236800005"), "ts=1718236800005");
    let m = SensitiveDataMasker::builder()
        .luhn_check(false)
        .build()
        .unwrap();
    assert_eq!(m.mask("ts=1718236800000"), "ts=1718236800000");
}

#[test]
fn date_prefixed_order_number_is_not_masked_even_when_luhn_valid() {
    // 2026061300123450 passes Luhn; the 20 prefix rules it out as a card.
    assert_eq!(mask("订单2026061300123450"), "订单2026061300123450");
    assert_eq!(mask("订单 2026 0613 0012 3450"), "订单 2026 0613 0012 3450");
}

#[test]
fn card_prefix_check_can_be_turned_off() {
    let m = SensitiveDataMasker::builder()
        .card_prefix_check(false)
        .build()
        .unwrap();
    assert_eq!(m.mask("ts=1718236800005"), "ts=***");
}

#[test]
fn grouped_card_number_is_masked() {
    assert_eq!(mask("卡号 4111 1111 1111 1111 已绑定"), "卡号 *** 已绑定");
    assert_eq!(mask("卡号 6222-0212-3456-7890-128"), "卡号 ***");
    assert_eq!(mask("卡号 4111 1111 1111 1112"), "卡号 4111 1111 1111 1112");
}
