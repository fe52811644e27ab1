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
/// form starts with `0xC2`, `0xE2`, `0xE3` or `0xEF`, so other bytes (most of CJK text,
/// `0xE4`–`0xE9`) are skipped without decoding.
fn has_normalised(text: &str) -> bool {
    text.bytes().enumerate().any(|(i, b)| {
        matches!(b, 0xC2 | 0xE2 | 0xE3 | 0xEF)
            && text
                .get(i..)
                .and_then(|t| t.chars().next())
                .is_some_and(|c| norm(c).is_some())
    })
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
