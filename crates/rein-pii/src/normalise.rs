//! Separator normalisation for detection: real text writes numbers with no-break and
//! thin spaces, invisible joiners, soft and non-breaking hyphens and full-width digits,
//! which the byte-level scan does not read as digits or separators. The built-in scan
//! runs a second time on a normalised copy, and its matches are mapped back to the
//! original text, so the original span (separators included) is masked.

use super::Candidate;

/// What a character becomes in the normalised copy.
enum Norm {
    /// Replaced by this ASCII byte.
    Ascii(u8),
    /// Dropped (invisible inside a number).
    Drop,
}

/// The normalisation of `c`, or `None` to copy it unchanged.
fn norm(c: char) -> Option<Norm> {
    Some(match c {
        // No-break, figure, punctuation, thin, hair, narrow no-break and ideographic
        // spaces: written between digit groups like a space.
        '\u{a0}' | '\u{2007}' | '\u{2008}' | '\u{2009}' | '\u{200a}' | '\u{202f}' | '\u{3000}' => {
            Norm::Ascii(b' ')
        }
        // Hyphen, non-breaking hyphen, figure dash, en dash, minus sign, full-width
        // hyphen-minus.
        '\u{2010}' | '\u{2011}' | '\u{2012}' | '\u{2013}' | '\u{2212}' | '\u{ff0d}' => {
            Norm::Ascii(b'-')
        }
        // Soft hyphen, zero-width space / non-joiner / joiner, word joiner, BOM.
        '\u{ad}' | '\u{200b}' | '\u{200c}' | '\u{200d}' | '\u{2060}' | '\u{feff}' => Norm::Drop,
        // Full-width digits and plus sign.
        '０'..='９' => Norm::Ascii(b'0' + (c as u32 - '０' as u32) as u8),
        '＋' => Norm::Ascii(b'+'),
        _ => return None,
    })
}

/// Whether `c` is one of the characters normalised for detection (for the streaming
/// boundary rule: such a character may continue a number).
pub(crate) fn is_normalised(c: char) -> bool {
    norm(c).is_some()
}

/// Whether `text` holds a character [`norm`] changes. Every such character's UTF-8
/// form starts with `0xC2`, `0xE2`, `0xE3` or `0xEF`: those lead bytes (and `0xC3`,
/// which shares the test) are found eight bytes at a time, so other text (most of CJK
/// text, `0xE4`–`0xE9`) is skipped without decoding.
fn has_normalised(text: &str) -> bool {
    const LO: u64 = 0x0101_0101_0101_0101;
    const HI: u64 = LO * 0x80;
    const LOW7: u64 = LO * 0x7F;
    // The zero bytes of `y`, flagged `0x80` in their lane; exact per byte (no carries).
    let zero = |y: u64| !(((y & LOW7) + LOW7) | y) & HI;
    let b = text.as_bytes();
    // Decided on the bytes after the lead byte, without decoding: CJK punctuation
    // (`、`, `，`, `（`) shares these lead bytes and is common.
    let normalised_at = |i: usize| {
        matches!(
            b.get(i..).unwrap_or_default(),
            [0xC2, 0xA0 | 0xAD, ..]
                | [0xE3, 0x80, 0x80, ..]
                | [0xEF, 0xBB, 0xBF, ..]
                | [0xE2, 0x80, 0x87..=0x8D | 0x90..=0x93 | 0xAF, ..]
                | [0xE2, 0x81, 0xA0, ..]
                | [0xE2, 0x88, 0x92, ..]
                | [0xEF, 0xBC, 0x8B | 0x8D | 0x90..=0x99, ..]
        )
    };
    let mut i = 0;
    while let Some(chunk) = b.get(i..i + 8) {
        let mut word = [0u8; 8];
        word.copy_from_slice(chunk);
        let x = u64::from_le_bytes(word);
        // `x & 0xDE == 0xC2` holds for 0xC2, 0xC3, 0xE2 and 0xE3.
        let mut hits = zero((x & (LO * 0xDE)) ^ (LO * 0xC2)) | zero(x ^ (LO * 0xEF));
        while hits != 0 {
            if normalised_at(i + (hits.trailing_zeros() / 8) as usize) {
                return true;
            }
            hits &= hits - 1;
        }
        i += 8;
    }
    b.get(i..)
        .unwrap_or_default()
        .iter()
        .enumerate()
        .any(|(j, &x)| matches!(x, 0xC2 | 0xE2 | 0xE3 | 0xEF) && normalised_at(i + j))
}

/// A normalised copy of a text and, per byte of it, the byte range of the original
/// character it came from.
pub(super) struct Normalised {
    pub(super) text: String,
    origin: Vec<(usize, usize)>,
}

impl Normalised {
    /// The normalised copy of `text`, or `None` when no character of it is normalised
    /// (then the first scan saw everything).
    pub(super) fn of(text: &str) -> Option<Self> {
        if text.is_ascii() || !has_normalised(text) {
            return None;
        }
        let mut out = String::with_capacity(text.len());
        let mut origin = Vec::with_capacity(text.len());
        for (i, c) in text.char_indices() {
            let end = i + c.len_utf8();
            match norm(c) {
                Some(Norm::Ascii(b)) => {
                    out.push(char::from(b));
                    origin.push((i, end));
                }
                Some(Norm::Drop) => {}
                None => {
                    out.push(c);
                    origin.extend((i..end).map(|j| (j, j + 1)));
                }
            }
        }
        Some(Self { text: out, origin })
    }

    /// `c` (a candidate in the normalised copy) as the range of the original text it
    /// covers; `None` for an empty or out-of-range candidate.
    pub(super) fn map_back(&self, c: Candidate) -> Option<Candidate> {
        if c.end <= c.start {
            return None;
        }
        let (start, _) = *self.origin.get(c.start)?;
        let (_, end) = *self.origin.get(c.end - 1)?;
        Some(Candidate {
            start,
            end,
            kind: c.kind,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_byte_scan_finds_exactly_the_normalised_characters_at_every_offset() {
        for c in (0x80..0x1_0000).filter_map(char::from_u32) {
            let one = c.to_string();
            assert_eq!(has_normalised(&one), norm(c).is_some(), "{c:?}");
        }
        for pad in 0..17 {
            for c in ['\u{a0}', '\u{2011}', '\u{3000}', '\u{feff}', '５', '＋'] {
                let text = format!("{}{c}{}", "中".repeat(pad), "b".repeat(pad % 5));
                assert!(has_normalised(&text), "{pad} {c:?}");
            }
            for c in ['é', '、', '，', '（', '—', 'x'] {
                let text = format!("{}{c}{}", "a".repeat(pad), "b".repeat(pad % 3));
                assert!(!has_normalised(&text), "{pad} {c:?}");
            }
        }
    }
}
