//! The single byte-level pass of the built-in kinds: digit runs and `@` are the only
//! triggers, found eight bytes at a time; the Chinese mobile, ID and card shapes are judged
//! here, the international ones in `intl`.

use super::checks::{
    card_prefix_ok, email_at, id_checksum_ok, id15_valid, luhn_ok, mainland_region, mobile_valid,
    num, valid_date,
};
use super::{Candidate, Inner, KindId, MAX_GROUPS, char_at, char_before};

impl Inner {
    /// Whether any kind found from a digit run is on (every built-in kind but e-mail).
    fn digits_on(&self) -> bool {
        KindId::BUILTIN
            .iter()
            .any(|&k| k != KindId::Email && self.enabled.on(k))
    }

    /// One pass over the bytes: digit runs and `@` are the only triggers. All candidates are
    /// ASCII, so byte offsets are always `char` boundaries.
    pub(super) fn scan_builtin(&self, text: &str, out: &mut Vec<Candidate>) {
        let digits_on = self.digits_on();
        let email_on = self.enabled.on(KindId::Email);
        if !digits_on && !email_on {
            return;
        }
        let b = text.as_bytes();
        let mut i = 0;
        let mut email_floor = 0;
        let mut triggers = Triggers::new(b, digits_on, email_on);
        while let Some(next) = triggers.next(i) {
            i = next;
            if b[i] == b'@' {
                match email_at(b, i, email_floor) {
                    Some(r) => {
                        out.push(Candidate {
                            start: r.start,
                            end: r.end,
                            kind: KindId::Email,
                        });
                        email_floor = r.end;
                        i = r.end;
                    }
                    None => i += 1,
                }
            } else {
                i = self.scan_digits(text, i, out);
            }
        }
    }

    /// Judges the digit run starting at `s` (and, if grouped, its following groups). Returns
    /// the index to continue scanning from (always > `s`).
    ///
    /// Order: an IBAN (its BBAN digits are never judged alone); a `+` number other than
    /// `+86` as an international phone number; then the Chinese kinds (`+86…` stays a
    /// [`KindId::Mobile`]); then, if they found nothing, the international kinds.
    fn scan_digits(&self, text: &str, s: usize, out: &mut Vec<Candidate>) -> usize {
        let b = text.as_bytes();
        let e = digit_run_end(b, s);
        if let Some(c) = self.iban_at(text, s, e) {
            out.push(c);
            return c.end;
        }
        if s > 0
            && b[s - 1] == b'+'
            && !b[s..].starts_with(b"86")
            && let Some(c) = self.intl_at(text, s, e)
        {
            out.push(c);
            return c.end.max(e);
        }
        let before = out.len();
        let next = self.scan_chinese(text, s, e, out);
        if out.len() == before
            && let Some(c) = self.intl_at(text, s, e)
        {
            out.push(c);
            return c.end.max(next);
        }
        next
    }

    /// The Chinese mobile, ID and card shapes of the digit run `s..e`.
    fn scan_chinese(&self, text: &str, s: usize, e: usize, out: &mut Vec<Candidate>) -> usize {
        let b = text.as_bytes();
        // Only a run of 2–4 digits followed by a separator can open a group sequence
        // (`86`, `0086`, `138`, `4111`), and only a run of 11–19 digits can match alone
        // (17 + `X` included). Anything else is rejected before the neighbour checks:
        // this keeps adversarial input such as `1 1 1 …` cheap.
        let len = e - s;
        let may_group = self.checks.grouped_numbers
            && (2..=4).contains(&len)
            && matches!(b.get(e), Some(&sep) if sep == b' ' || sep == b'-')
            // Not a later group of its sequence (`12 12 12 …`): that was judged with
            // the sequence's first group.
            && !(s >= 2 && b.get(e) == Some(&b[s - 1]) && b[s - 2].is_ascii_digit());
        if !may_group && !(11..=19).contains(&len) {
            return e;
        }
        let prev = char_before(text, s);
        if may_group && let Some(c) = self.grouped_at(text, s, e, prev) {
            out.push(c);
            return c.end;
        }
        self.single_run(text, s, e, prev, out)
    }

    fn grouped_at(&self, text: &str, s: usize, e: usize, prev: Option<char>) -> Option<Candidate> {
        let b = text.as_bytes();
        let sep = *b.get(e)?;
        if sep != b' ' && sep != b'-' {
            return None;
        }
        if !b.get(e + 1).is_some_and(u8::is_ascii_digit) {
            return None;
        }
        // Not the first group of its sequence: the sequence was judged when it started.
        if s >= 2 && b[s - 1] == sep && b[s - 2].is_ascii_digit() {
            return None;
        }
        let mut groups = [(0usize, 0usize); MAX_GROUPS];
        groups[0] = (s, e);
        let mut count = 1;
        let mut end = e;
        while b.get(end) == Some(&sep) && b.get(end + 1).is_some_and(u8::is_ascii_digit) {
            if count == MAX_GROUPS {
                return None;
            }
            let gs = end + 1;
            let ge = digit_run_end(b, gs);
            groups[count] = (gs, ge);
            count += 1;
            end = ge;
        }
        if self.blocks(prev) || self.blocks(char_at(text, end)) {
            return None;
        }
        let groups = &groups[..count];
        let lens = |g: &[(usize, usize)]| -> ([usize; MAX_GROUPS], usize) {
            let mut l = [0; MAX_GROUPS];
            for (slot, (gs, ge)) in l.iter_mut().zip(g) {
                *slot = ge - gs;
            }
            (l, g.len())
        };
        let first = &b[groups[0].0..groups[0].1];
        let cc = first == b"86" || first == b"0086";
        if self.enabled.on(KindId::Mobile) {
            let rest = if cc { &groups[1..] } else { groups };
            let (l, n) = lens(rest);
            let shape_ok = matches!(&l[..n], [3, 4, 4]) || (cc && matches!(&l[..n], [11]));
            if shape_ok {
                let mut buf = [0u8; 11];
                if concat_digits(b, rest, &mut buf) == 11 && mobile_valid(&buf) {
                    let start = if cc && s > 0 && b[s - 1] == b'+' {
                        s - 1
                    } else {
                        s
                    };
                    return Some(Candidate {
                        start,
                        end,
                        kind: KindId::Mobile,
                    });
                }
            }
        }
        if self.enabled.on(KindId::BankCard) && !cc {
            let (l, n) = lens(groups);
            let shape_ok = matches!(
                &l[..n],
                [4, 4, 4, 4] | [4, 4, 4, 4, 1..=3] | [4, 6, 5] | [4, 6, 4]
            );
            if shape_ok {
                let mut buf = [0u8; 19];
                let len = concat_digits(b, groups, &mut buf);
                if self.card_valid(&buf[..len]) {
                    return Some(Candidate {
                        start: s,
                        end,
                        kind: KindId::BankCard,
                    });
                }
            }
        }
        None
    }

    fn single_run(
        &self,
        text: &str,
        s: usize,
        e: usize,
        prev: Option<char>,
        out: &mut Vec<Candidate>,
    ) -> usize {
        let b = text.as_bytes();
        let len = e - s;
        if self.enabled.on(KindId::IdCard) && len == 17 && matches!(b.get(e), Some(b'X' | b'x')) {
            let after = char_at(text, e + 1);
            if !self.blocks(prev) && !self.blocks(after) && self.id18_valid(&b[s..=e]) {
                out.push(Candidate {
                    start: s,
                    end: e + 1,
                    kind: KindId::IdCard,
                });
                return e + 1;
            }
        }
        if self.blocks(prev) || self.blocks(char_at(text, e)) {
            return e;
        }
        let d = &b[s..e];
        let plus_start = if s > 0 && b[s - 1] == b'+' { s - 1 } else { s };
        let national = match len {
            11 => Some(d),
            13 if d.starts_with(b"86") => Some(&d[2..]),
            15 if d.starts_with(b"0086") => Some(&d[4..]),
            _ => None,
        };
        let found = if self.enabled.on(KindId::Mobile) && national.is_some_and(mobile_valid) {
            Some((KindId::Mobile, if len == 11 { s } else { plus_start }))
        } else if self.enabled.on(KindId::IdCard)
            && ((len == 18 && self.id18_valid(d)) || (len == 15 && id15_valid(d)))
        {
            Some((KindId::IdCard, s))
        } else if self.enabled.on(KindId::BankCard) && self.card_valid(d) {
            Some((KindId::BankCard, s))
        } else {
            None
        };
        if let Some((kind, start)) = found {
            out.push(Candidate {
                start,
                end: e,
                kind,
            });
        }
        e
    }

    /// Whether a neighbouring character prevents a digit run from matching.
    pub(super) fn blocks(&self, c: Option<char>) -> bool {
        match c {
            None => false,
            Some(c) if c.is_ascii_digit() => true,
            Some('０'..='９') => true,
            Some(c) => {
                self.checks.alnum_boundary
                    && (c.is_ascii_alphabetic()
                        || c == '_'
                        || matches!(c, 'Ａ'..='Ｚ' | 'ａ'..='ｚ'))
            }
        }
    }

    /// `t` is 18 bytes: 17 ASCII digits then a digit or `X`/`x`.
    fn id18_valid(&self, t: &[u8]) -> bool {
        t.len() == 18
            && t[..17].iter().all(u8::is_ascii_digit)
            && (t[17].is_ascii_digit() || t[17] == b'X' || t[17] == b'x')
            && (mainland_region(t[0], t[1])
                || matches!(
                    (t[0], t[1]),
                    (b'7', b'1') | (b'8', b'1'..=b'3') | (b'9', b'1'..=b'6')
                ))
            && valid_date(num(&t[6..10]), num(&t[10..12]), num(&t[12..14]))
            && (!self.checks.id_checksum || id_checksum_ok(t))
    }

    fn card_valid(&self, d: &[u8]) -> bool {
        (13..=19).contains(&d.len())
            && (!self.checks.card_prefix_check || card_prefix_ok(d))
            && (!self.checks.luhn_check || luhn_ok(d))
    }
}

/// Flags (`0x80` in the byte's lane) of the bytes of `x` that are ASCII digits (when
/// `digits`) or `@` (when `at`). Exact per byte: no sum carries into the next byte.
fn trigger_flags(x: u64, digits: bool, at: bool) -> u64 {
    const LO: u64 = 0x0101_0101_0101_0101;
    const HI: u64 = 0x8080_8080_8080_8080;
    const LOW7: u64 = LO * 0x7F;
    let mut hits = 0;
    if digits {
        // Bytes strictly between 0x2F and 0x3A; `!x` drops bytes >= 0x80.
        let low = x & LOW7;
        hits |= (LO * (0x7F + 0x3A)).wrapping_sub(low) & !x & (low + LO * (0x7F - 0x2F)) & HI;
    }
    if at {
        // Zero bytes of `x ^ "@@@@@@@@"`.
        let y = x ^ (LO * u64::from(b'@'));
        hits |= !(((y & LOW7) + LOW7) | y) & HI;
    }
    hits
}

/// The trigger bytes of the built-in scan (ASCII digits and `@`), found eight bytes at a
/// time (SWAR). The flags of the last word read are kept, so input where every other
/// byte is a trigger (`1 1 1 …`, `a@a@…`) does not re-read a word per trigger.
pub(crate) struct Triggers<'a> {
    b: &'a [u8],
    digits: bool,
    at: bool,
    /// `flags` covers the bytes `base..end` (`end - base` is 8 or 0).
    base: usize,
    end: usize,
    flags: u64,
}

impl<'a> Triggers<'a> {
    pub(crate) fn new(b: &'a [u8], digits: bool, at: bool) -> Self {
        Self {
            b,
            digits,
            at,
            base: 0,
            end: 0,
            flags: 0,
        }
    }

    /// The first trigger at or after `from`. `from` never decreases between calls.
    pub(crate) fn next(&mut self, from: usize) -> Option<usize> {
        // Bytes before `base` were scanned by an earlier call and hold no trigger.
        let from = from.max(self.base);
        if from < self.end {
            self.flags &= u64::MAX << ((from - self.base) * 8);
            if self.flags != 0 {
                return Some(self.base + (self.flags.trailing_zeros() / 8) as usize);
            }
        }
        let mut i = from.max(self.end);
        while let Some(chunk) = self.b.get(i..i + 8) {
            let mut word = [0u8; 8];
            word.copy_from_slice(chunk);
            let flags = trigger_flags(u64::from_le_bytes(word), self.digits, self.at);
            if flags != 0 {
                (self.base, self.end, self.flags) = (i, i + 8, flags);
                return Some(i + (flags.trailing_zeros() / 8) as usize);
            }
            i += 8;
        }
        (self.base, self.end, self.flags) = (i, i, 0);
        let (digits, at) = (self.digits, self.at);
        self.b
            .get(i..)?
            .iter()
            .position(|&c| (digits && c.is_ascii_digit()) || (at && c == b'@'))
            .map(|off| i + off)
    }
}

pub(super) fn digit_run_end(b: &[u8], mut i: usize) -> usize {
    while i < b.len() && b[i].is_ascii_digit() {
        i += 1;
    }
    i
}

/// Copies the digits of `groups` into `buf`; returns how many were copied (at most `buf.len()`).
fn concat_digits(b: &[u8], groups: &[(usize, usize)], buf: &mut [u8]) -> usize {
    let mut n = 0;
    for &(gs, ge) in groups {
        for &d in &b[gs..ge] {
            if n == buf.len() {
                return n;
            }
            buf[n] = d;
            n += 1;
        }
    }
    n
}
