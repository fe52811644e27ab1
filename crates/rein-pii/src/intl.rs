//! Detectors of the international kinds: E.164 phone numbers, North American numbers,
//! IBANs and US social security numbers. Each is asked about one ASCII digit run `s..e`
//! found by the scanner and looks back (for a `+`, a `(` or IBAN letters) and forward
//! from it; all are bounded (at most 15 phone digits, 34 IBAN characters), so the scan
//! stays linear.

use super::checks::{iban_checksum_ok, iban_len, nanp_part_ok, phone_digits_ok, ssn_ok};
use super::scan::digit_run_end;
use super::{Candidate, Inner, KindId, char_at, char_before};

/// Most digits in an E.164 number, country code included.
const MAX_PHONE_DIGITS: usize = 15;
/// Longest IBAN (without spaces).
const MAX_IBAN: usize = 34;

impl Inner {
    /// An IBAN whose check digits start at `s`. Tried before the other digit kinds, so an
    /// IBAN's BBAN digits are never judged alone.
    pub(super) fn iban_at(&self, text: &str, s: usize, e: usize) -> Option<Candidate> {
        let b = text.as_bytes();
        if !self.enabled.on(KindId::Iban)
            || e - s < 2
            || s < 2
            || !b[s - 2].is_ascii_uppercase()
            || !b[s - 1].is_ascii_uppercase()
        {
            return None;
        }
        let start = s - 2;
        let before = char_before(text, start);
        if before.is_some_and(|c| c.is_ascii_alphanumeric()) || self.blocks(before) {
            return None;
        }
        let len = iban_len(&b[start..s])?;
        let mut buf = [0u8; MAX_IBAN];
        let mut spaced = None;
        let mut p = start;
        for (n, slot) in buf.iter_mut().enumerate().take(len) {
            // Printed IBANs have a single space after every group of four.
            if n > 0 && n % 4 == 0 {
                let space = b.get(p) == Some(&b' ');
                if *spaced.get_or_insert(space) != space {
                    return None;
                }
                p += usize::from(space);
            }
            let c = *b.get(p)?;
            if !(c.is_ascii_digit() || c.is_ascii_uppercase()) {
                return None;
            }
            *slot = c;
            p += 1;
        }
        let after = char_at(text, p);
        if after.is_some_and(|c| c.is_ascii_alphanumeric()) || self.blocks(after) {
            return None;
        }
        iban_checksum_ok(&buf[..len]).then_some(Candidate {
            start,
            end: p,
            kind: KindId::Iban,
        })
    }

    /// The international, NANP or SSN candidate around the digit run `s..e`, tried when
    /// the Chinese kinds found nothing there.
    ///
    /// Inlined: most digit runs (every one in `1 1 1…`) are neither after a `+` nor
    /// three digits long, and this check then costs a few instructions instead of the
    /// frame of the detectors behind it.
    #[inline]
    pub(super) fn intl_at(&self, text: &str, s: usize, e: usize) -> Option<Candidate> {
        let plus = s > 0 && text.as_bytes().get(s - 1) == Some(&b'+');
        if plus {
            self.phone_at(text, s)
        } else if e - s == 3 {
            self.ssn_or_nanp_at(text, s, e)
        } else if e - s == 10 {
            self.bare_nanp_at(text, s, e)
        } else {
            None
        }
    }

    /// [`Inner::intl_at`] for a run of three digits not after a `+`.
    #[inline(never)]
    fn ssn_or_nanp_at(&self, text: &str, s: usize, e: usize) -> Option<Candidate> {
        self.ssn_at(text, s, e).or_else(|| self.nanp_at(text, s, e))
    }

    /// An E.164 number whose `+` is at `s - 1`: the longest run of digit groups (single
    /// space, `-` or `.` between them; the group after the country code may be in
    /// parentheses) whose digits form
    /// a plausible number ([`phone_digits_ok`]).
    #[inline(never)]
    fn phone_at(&self, text: &str, s: usize) -> Option<Candidate> {
        if !self.enabled.on(KindId::Phone) {
            return None;
        }
        let b = text.as_bytes();
        let plus = s - 1;
        if self.blocks(char_before(text, plus)) {
            return None;
        }
        let mut digits = [0u8; MAX_PHONE_DIGITS];
        let mut n = 0;
        let mut best = None;
        // Parentheses only around the group after the country code: `+1 (415) …`,
        // `+44 (0)20 …`.
        let mut groups = 0;
        let mut p = s;
        loop {
            groups += 1;
            let in_paren = p > 0 && b[p - 1] == b'(';
            let ge = digit_run_end(b, p);
            if n + (ge - p) > MAX_PHONE_DIGITS {
                break;
            }
            digits[n..n + (ge - p)].copy_from_slice(&b[p..ge]);
            n += ge - p;
            let mut end = ge;
            if in_paren {
                if b.get(ge) != Some(&b')') {
                    break;
                }
                end = ge + 1;
            }
            let next = b.get(end).copied();
            // A group glued to a letter: the whole token is not a phone number.
            if next.is_some_and(|c| !c.is_ascii_digit()) && self.blocks(char_at(text, end)) {
                return None;
            }
            if phone_digits_ok(&digits[..n]) && !next.is_some_and(|c| c.is_ascii_digit()) {
                best = Some(end);
            }
            p = match next {
                // Only after `)`: `(0)20`.
                Some(c) if c.is_ascii_digit() => end,
                Some(b' ' | b'-' | b'.') => match b.get(end + 1) {
                    Some(c) if c.is_ascii_digit() => end + 1,
                    Some(b'(') if groups == 1 => end + 2,
                    _ => break,
                },
                Some(b'(') if groups == 1 => end + 1,
                _ => break,
            };
            if !b.get(p).is_some_and(u8::is_ascii_digit) {
                break;
            }
        }
        best.map(|end| Candidate {
            start: plus,
            end,
            kind: KindId::Phone,
        })
    }

    /// A US SSN `AAA-GG-SSSS` whose area is the run `s..e`.
    fn ssn_at(&self, text: &str, s: usize, e: usize) -> Option<Candidate> {
        if !self.enabled.on(KindId::UsSsn) {
            return None;
        }
        let b = text.as_bytes();
        let group = group_after(b, e, b'-', 2)?;
        let serial = group_after(b, group.1, b'-', 4)?;
        let end = serial.1;
        if in_longer_sequence(b, s, end) || self.blocks(char_before(text, s)) {
            return None;
        }
        if self.blocks(char_at(text, end)) {
            return None;
        }
        ssn_ok(&b[s..e], &b[group.0..group.1], &b[serial.0..serial.1]).then_some(Candidate {
            start: s,
            end,
            kind: KindId::UsSsn,
        })
    }

    /// A North American number whose area code is the run `s..e`: `(AAA) EEE-NNNN`,
    /// `(AAA)EEE-NNNN`, `AAA-EEE-NNNN` or `AAA.EEE.NNNN`, optionally after a `1` trunk
    /// prefix (`1-800-…`, `1 (800) …`).
    fn nanp_at(&self, text: &str, s: usize, e: usize) -> Option<Candidate> {
        if !self.enabled.on(KindId::NanpPhone) {
            return None;
        }
        let b = text.as_bytes();
        let (mut start, exchange, sep) = if s > 0 && b[s - 1] == b'(' {
            if b.get(e) != Some(&b')') {
                return None;
            }
            let x = if b.get(e + 1) == Some(&b' ') {
                e + 2
            } else {
                e + 1
            };
            (s - 1, group_after(b, x - 1, b[x - 1], 3)?, b'-')
        } else {
            let sep = *b.get(e).filter(|c| matches!(c, b'-' | b'.' | b' '))?;
            (s, group_after(b, e, sep, 3)?, sep)
        };
        let line = group_after(b, exchange.1, sep, 4)?;
        let end = line.1;
        if !nanp_part_ok(&b[s..e]) || !nanp_part_ok(&b[exchange.0..exchange.1]) {
            return None;
        }
        // A `1` trunk prefix joins the match; any other number before it with `-` or `.`
        // makes this part of a longer sequence (`2024-415-555-0134`).
        if start >= 2 && matches!(b[start - 1], b'-' | b'.' | b' ') && b[start - 2] == b'1' {
            let trunk = start - 2;
            if !(trunk > 0 && b[trunk - 1].is_ascii_digit()) {
                start = trunk;
            }
        }
        if in_longer_sequence(b, start, end)
            || (sep == b' ' && in_spaced_sequence(b, start, end))
            || self.blocks(char_before(text, start))
            || self.blocks(char_at(text, end))
        {
            return None;
        }
        Some(Candidate {
            start,
            end,
            kind: KindId::NanpPhone,
        })
    }

    /// A North American number written as ten bare digits (`4155550134`): the run
    /// `s..e` is exactly ten digits with a valid area code and exchange.
    #[inline(never)]
    fn bare_nanp_at(&self, text: &str, s: usize, e: usize) -> Option<Candidate> {
        if !self.enabled.on(KindId::NanpPhone) {
            return None;
        }
        let b = text.as_bytes();
        if !nanp_part_ok(&b[s..s + 3]) || !nanp_part_ok(&b[s + 3..s + 6]) {
            return None;
        }
        if in_longer_sequence(b, s, e)
            || self.blocks(char_before(text, s))
            || self.blocks(char_at(text, e))
        {
            return None;
        }
        Some(Candidate {
            start: s,
            end: e,
            kind: KindId::NanpPhone,
        })
    }
}

/// Whether `start..end` continues a longer space-separated digit sequence
/// (`12 415 555 0134`, `415 555 0134 7`): such a sequence is one longer number.
fn in_spaced_sequence(b: &[u8], start: usize, end: usize) -> bool {
    let before = start >= 2 && b[start - 1] == b' ' && b[start - 2].is_ascii_digit();
    let after = b.get(end) == Some(&b' ') && b.get(end + 1).is_some_and(u8::is_ascii_digit);
    before || after
}

/// The digit group of exactly `len` digits after the separator `sep` at `at`.
fn group_after(b: &[u8], at: usize, sep: u8, len: usize) -> Option<(usize, usize)> {
    if b.get(at) != Some(&sep) {
        return None;
    }
    let gs = at + 1;
    let ge = digit_run_end(b, gs);
    (ge - gs == len).then_some((gs, ge))
}

/// Whether `start..end` continues a longer `-`/`.`-separated digit sequence on either side
/// (`1-123-45-6789`, `123-45-6789-0`, `10.415.555.0134`).
fn in_longer_sequence(b: &[u8], start: usize, end: usize) -> bool {
    let before = start >= 2 && matches!(b[start - 1], b'-' | b'.') && b[start - 2].is_ascii_digit();
    let after =
        matches!(b.get(end), Some(b'-' | b'.')) && b.get(end + 1).is_some_and(u8::is_ascii_digit);
    before || after
}
