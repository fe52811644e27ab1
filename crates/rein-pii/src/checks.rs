//! Validators of the built-in kinds (Luhn, card prefix, ID region/date/checksum, IBAN
//! mod-97 and lengths, SSN ranges, E.164 country codes, NANP area codes) and the
//! e-mail scanner. All take ASCII bytes.

use std::ops::Range;

pub(super) fn mobile_valid(d: &[u8]) -> bool {
    d.len() == 11 && d[0] == b'1' && (b'3'..=b'9').contains(&d[1])
}

pub(super) fn mainland_region(a: u8, b: u8) -> bool {
    matches!(
        (a, b),
        (b'1', b'1'..=b'5')
            | (b'2', b'1'..=b'3')
            | (b'3', b'1'..=b'7')
            | (b'4', b'1'..=b'6')
            | (b'5', b'0'..=b'4')
            | (b'6', b'1'..=b'5')
    )
}

pub(super) fn num(d: &[u8]) -> u32 {
    d.iter()
        .fold(0u32, |acc, &c| acc * 10 + u32::from(c.wrapping_sub(b'0')))
}

pub(super) fn valid_date(y: u32, m: u32, d: u32) -> bool {
    if !(1900..=2099).contains(&y) || !(1..=12).contains(&m) || d == 0 {
        return false;
    }
    let leap = (y.is_multiple_of(4) && !y.is_multiple_of(100)) || y.is_multiple_of(400);
    let days = match m {
        2 if leap => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    };
    d <= days
}

/// Legacy 15-digit ID: region, then `YYMMDD` (19YY), then a 3-digit sequence number.
pub(super) fn id15_valid(d: &[u8]) -> bool {
    d.len() == 15
        && mainland_region(d[0], d[1])
        && valid_date(1900 + num(&d[6..8]), num(&d[8..10]), num(&d[10..12]))
}

/// GB 11643-1999 ISO 7064 MOD 11-2 check character.
pub(super) fn id_checksum_ok(t: &[u8]) -> bool {
    const WEIGHTS: [u32; 17] = [7, 9, 10, 5, 8, 4, 2, 1, 6, 3, 7, 9, 10, 5, 8, 4, 2];
    const CHECK: &[u8; 11] = b"10X98765432";
    let sum: u32 = t
        .iter()
        .zip(WEIGHTS)
        .map(|(&c, w)| u32::from(c.wrapping_sub(b'0')) * w)
        .sum();
    CHECK[(sum % 11) as usize] == t[17].to_ascii_uppercase()
}

pub(super) fn card_prefix_ok(d: &[u8]) -> bool {
    !matches!(d, [b'0' | b'1', ..] | [b'2', b'0' | b'1', ..])
}

pub(super) fn luhn_ok(d: &[u8]) -> bool {
    let sum: u32 = d
        .iter()
        .rev()
        .enumerate()
        .map(|(i, &c)| {
            let v = u32::from(c.wrapping_sub(b'0'));
            if i % 2 == 1 {
                let v2 = v * 2;
                if v2 > 9 { v2 - 9 } else { v2 }
            } else {
                v
            }
        })
        .sum();
    sum.is_multiple_of(10)
}

const LOCAL: u8 = 1;
const DOMAIN: u8 = 2;

/// E-mail byte classes, one table load instead of a chain of comparisons per byte.
static EMAIL_CLASS: [u8; 256] = {
    let mut table = [0u8; 256];
    let mut i = 0;
    while i < 256 {
        let c = i as u8;
        let alnum = c.is_ascii_alphanumeric();
        if alnum || matches!(c, b'.' | b'_' | b'%' | b'+' | b'-') {
            table[i] |= LOCAL;
        }
        if alnum || matches!(c, b'.' | b'-') {
            table[i] |= DOMAIN;
        }
        i += 1;
    }
    table
};

fn is_local_byte(c: u8) -> bool {
    EMAIL_CLASS[c as usize] & LOCAL != 0
}

fn is_domain_byte(c: u8) -> bool {
    EMAIL_CLASS[c as usize] & DOMAIN != 0
}

/// The e-mail address around the `@` at `at`, with the same result as the leftmost-first regex
/// `[A-Za-z0-9._%+-]+@[A-Za-z0-9.-]+\.[A-Za-z]{2,}` searched from `floor`.
pub(super) fn email_at(b: &[u8], at: usize, floor: usize) -> Option<Range<usize>> {
    if at == floor || !is_local_byte(b[at - 1]) {
        return None;
    }
    // The domain first: it does not depend on the local part, and most `@` without an
    // address (`a@a@a@…`) fail here, before the backward scan.
    let end = domain_end(b, at + 1)?;
    let mut s = at - 1;
    while s > floor && is_local_byte(b[s - 1]) {
        s -= 1;
    }
    Some(s..end)
}

/// The end of the greedy e-mail domain starting at `ds`, if there is one.
fn domain_end(b: &[u8], ds: usize) -> Option<usize> {
    let mut de = ds;
    while de < b.len() && is_domain_byte(b[de]) {
        de += 1;
    }
    // The greedy domain ends after the letter run following the last '.' (not the first
    // domain byte) that is followed by at least two letters.
    let mut end = None;
    let mut q = ds + 1;
    while q < de {
        if b[q] == b'.' {
            let mut k = q + 1;
            while k < de && b[k].is_ascii_alphabetic() {
                k += 1;
            }
            if k - (q + 1) >= 2 {
                end = Some(k);
            }
            q = k.max(q + 1);
        } else {
            q += 1;
        }
    }
    end
}

/// Keeps the first `head` and last 4 ASCII alphanumerics of the last `tail` (or all) of
/// them and stars the alphanumerics in between; other characters (separators, `+`) are kept.
pub(super) fn partial_digits(out: &mut String, matched: &str, tail: Option<usize>, head: usize) {
    // Full-width digits count as digits: a match may have been detected through them.
    let unit = |c: char| c.is_ascii_alphanumeric() || matches!(c, '０'..='９');
    let total = matched.chars().filter(|&c| unit(c)).count();
    let n = tail.map_or(total, |t| t.min(total));
    let skip = total - n;
    let mut idx = 0;
    for ch in matched.chars() {
        if unit(ch) {
            let keep = idx < skip || idx - skip < head || idx - skip >= n.saturating_sub(4);
            out.push(if keep { ch } else { '*' });
            idx += 1;
        } else {
            out.push(ch);
        }
    }
}

/// The length of the ITU-T E.164 country code at the start of `d` (digits after a `+`),
/// or `None` when `d` does not start with an assigned code.
///
/// A table rather than the `phonenumber` crate: detection needs only "is this a country
/// code and how long is it" on the hot path of a byte scanner, and country codes form a
/// small prefix-free set that changes rarely (the last new zone was 2001). `phonenumber`
/// would add a large metadata build and per-candidate parsing for per-country national
/// number plans, which this detector deliberately does not judge (it accepts 8–15 digits
/// in all, except for `+1`). Within the three-digit zones every code is accepted, assigned
/// or spare: over-masking a spare code is the safe direction.
pub(super) fn country_code_len(d: &[u8]) -> Option<usize> {
    let (&a, &b) = (d.first()?, d.get(1)?);
    if a == b'1' || a == b'7' {
        return Some(1);
    }
    let two = num(&[a, b]);
    const TWO_DIGIT: [u32; 44] = [
        20, 27, 30, 31, 32, 33, 34, 36, 39, 40, 41, 43, 44, 45, 46, 47, 48, 49, 51, 52, 53, 54, 55,
        56, 57, 58, 60, 61, 62, 63, 64, 65, 66, 81, 82, 84, 86, 90, 91, 92, 93, 94, 95, 98,
    ];
    const THREE_DIGIT_ZONES: [u32; 23] = [
        21, 22, 23, 24, 25, 26, 29, 35, 37, 38, 42, 50, 59, 67, 68, 69, 80, 85, 87, 88, 96, 97, 99,
    ];
    if TWO_DIGIT.contains(&two) {
        Some(2)
    } else if THREE_DIGIT_ZONES.contains(&two) && d.len() >= 3 {
        Some(3)
    } else {
        None
    }
}

/// A North American area code or exchange: `[2-9]xx`, not `x11` (service codes).
pub(super) fn nanp_part_ok(d: &[u8]) -> bool {
    matches!(d, [b'2'..=b'9', b, c] if !(*b == b'1' && *c == b'1'))
}

/// `d` (all digits after the `+`, at most 15) is a plausible international number: an
/// assigned country code, 8–15 digits in all, and for `+1` a valid 10-digit NANP number.
pub(super) fn phone_digits_ok(d: &[u8]) -> bool {
    let Some(cc) = country_code_len(d) else {
        return false;
    };
    if d[0] == b'1' {
        return d.len() == 11 && nanp_part_ok(&d[1..4]) && nanp_part_ok(&d[4..7]);
    }
    (8..=15).contains(&d.len()) && d.len() >= cc + 5
}

/// A US SSN's three parts (ASCII digits) are outside the never-issued ranges: area `000`,
/// `666`, `9xx`; group `00`; serial `0000`.
pub(super) fn ssn_ok(area: &[u8], group: &[u8], serial: &[u8]) -> bool {
    area != b"000"
        && area != b"666"
        && area.first() != Some(&b'9')
        && group != b"00"
        && serial != b"0000"
}

/// IBAN lengths by country (SWIFT IBAN registry, release 2024), sorted by country code.
pub(super) const IBAN_LENGTHS: [(&[u8; 2], u8); 89] = [
    (b"AD", 24),
    (b"AE", 23),
    (b"AL", 28),
    (b"AT", 20),
    (b"AZ", 28),
    (b"BA", 20),
    (b"BE", 16),
    (b"BG", 22),
    (b"BH", 22),
    (b"BI", 27),
    (b"BR", 29),
    (b"BY", 28),
    (b"CH", 21),
    (b"CR", 22),
    (b"CY", 28),
    (b"CZ", 24),
    (b"DE", 22),
    (b"DJ", 27),
    (b"DK", 18),
    (b"DO", 28),
    (b"EE", 20),
    (b"EG", 29),
    (b"ES", 24),
    (b"FI", 18),
    (b"FK", 18),
    (b"FO", 18),
    (b"FR", 27),
    (b"GB", 22),
    (b"GE", 22),
    (b"GI", 23),
    (b"GL", 18),
    (b"GR", 27),
    (b"GT", 28),
    (b"HN", 28),
    (b"HR", 21),
    (b"HU", 28),
    (b"IE", 22),
    (b"IL", 23),
    (b"IQ", 23),
    (b"IS", 26),
    (b"IT", 27),
    (b"JO", 30),
    (b"KW", 30),
    (b"KZ", 20),
    (b"LB", 28),
    (b"LC", 32),
    (b"LI", 21),
    (b"LT", 20),
    (b"LU", 20),
    (b"LV", 21),
    (b"LY", 25),
    (b"MC", 27),
    (b"MD", 24),
    (b"ME", 22),
    (b"MK", 19),
    (b"MN", 20),
    (b"MR", 27),
    (b"MT", 31),
    (b"MU", 30),
    (b"NI", 28),
    (b"NL", 18),
    (b"NO", 15),
    (b"OM", 23),
    (b"PK", 24),
    (b"PL", 28),
    (b"PS", 29),
    (b"PT", 25),
    (b"QA", 29),
    (b"RO", 24),
    (b"RS", 22),
    (b"RU", 33),
    (b"SA", 24),
    (b"SC", 31),
    (b"SD", 18),
    (b"SE", 24),
    (b"SI", 19),
    (b"SK", 24),
    (b"SM", 27),
    (b"SO", 23),
    (b"ST", 25),
    (b"SV", 28),
    (b"TL", 23),
    (b"TN", 24),
    (b"TR", 26),
    (b"UA", 29),
    (b"VA", 22),
    (b"VG", 24),
    (b"XK", 20),
    (b"YE", 30),
];

/// The IBAN length of the country with this two-letter code, if it has IBANs.
pub(super) fn iban_len(country: &[u8]) -> Option<usize> {
    IBAN_LENGTHS
        .binary_search_by(|(c, _)| c.as_slice().cmp(country))
        .ok()
        .map(|i| usize::from(IBAN_LENGTHS[i].1))
}

/// ISO 13616 / ISO 7064 mod 97-10: the first four characters moved to the end, letters as
/// `10`–`35`, the number is 1 modulo 97. `iban` is upper-case letters and digits.
pub(super) fn iban_checksum_ok(iban: &[u8]) -> bool {
    if iban.len() < 5 {
        return false;
    }
    let (head, rest) = iban.split_at(4);
    let mut r: u32 = 0;
    for &c in rest.iter().chain(head) {
        r = match c {
            b'0'..=b'9' => (r * 10 + u32::from(c - b'0')) % 97,
            b'A'..=b'Z' => (r * 100 + u32::from(c - b'A') + 10) % 97,
            _ => return false,
        };
    }
    r == 1
}
