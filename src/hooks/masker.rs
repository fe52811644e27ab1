//! Sensitive-data masking for final replies, tool results and streamed text.

use std::borrow::Cow;
use std::fmt;
use std::ops::Range;
use std::sync::{Arc, LazyLock};

use regex::Regex;
use serde::{Deserialize, Serialize};

/// The default replacement string, `***`.
pub const DEFAULT_REPLACEMENT: &str = "***";

/// Maximum number of groups in a separated number (`4-4-4-4-3`).
const MAX_GROUPS: usize = 5;

/// The kind of a sensitive match, for audit counting and [`MaskerBuilder::disable`].
///
/// The configuration name of each kind (see [`SensitiveKind::name`]) is `mobile`, `id_card`,
/// `bank_card`, `email`, or the configured name of an extra pattern.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum SensitiveKind {
    /// A Chinese mainland mobile number (config name `mobile`).
    Mobile,
    /// An 18-digit or 15-digit resident ID number (config name `id_card`).
    IdCard,
    /// A 13–19-digit bank card number (config name `bank_card`).
    BankCard,
    /// An e-mail address (config name `email`).
    Email,
    /// A match of the extra pattern with this configured name.
    Custom(String),
}

impl SensitiveKind {
    /// The configuration name: `mobile`, `id_card`, `bank_card`, `email`, or the extra pattern's name.
    #[must_use]
    pub fn name(&self) -> &str {
        match self {
            Self::Mobile => "mobile",
            Self::IdCard => "id_card",
            Self::BankCard => "bank_card",
            Self::Email => "email",
            Self::Custom(name) => name,
        }
    }

    /// The built-in kind with this configuration name (`mobile`, `id_card`, `bank_card`,
    /// `email`; exact, lower case), or `None`.
    #[must_use]
    pub fn builtin_from_name(name: &str) -> Option<Self> {
        match name {
            "mobile" => Some(Self::Mobile),
            "id_card" => Some(Self::IdCard),
            "bank_card" => Some(Self::BankCard),
            "email" => Some(Self::Email),
            _ => None,
        }
    }
}

impl fmt::Display for SensitiveKind {
    /// Writes [`SensitiveKind::name`].
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// One sensitive match found by [`SensitiveDataMasker::find`].
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct SensitiveMatch {
    /// What was found.
    pub kind: SensitiveKind,
    /// Byte range of the whole match in the searched text (always on `char` boundaries).
    /// For `+86` mobile numbers it includes the `+`.
    pub range: Range<usize>,
}

/// How a match is replaced. The default is [`MaskStyle::Replace`].
///
/// In configuration files the values are `replace`, `placeholder` and `partial`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum MaskStyle {
    /// Replace the whole match with the configured replacement string (default `***`),
    /// inserted literally (`$1` and `\` have no special meaning).
    #[default]
    Replace,
    /// Replace the whole match with a typed placeholder: `[PHONE]`, `[ID_CARD]`,
    /// `[BANK_CARD]`, `[EMAIL]`, or `[<name>]` for an extra pattern. The replacement string is unused.
    Placeholder,
    /// Keep a little of the match: for mobile numbers the first 3 and last 4 digits of the
    /// 11-digit national number (`138****8000`; a `+86` prefix and separators are kept); for ID
    /// and card numbers the first 3 and last 4 characters (digits or `X`), other digits become
    /// `*`; for e-mail the first character of the local part, then `***`, then `@` and the
    /// domain (`u***@example.com`). Extra-pattern matches get the replacement string.
    Partial,
}

/// An error building a [`SensitiveDataMasker`].
///
/// Each message is complete on its own (it includes the underlying regex error), so the error
/// has no `source()`.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum MaskerError {
    /// An extra pattern did not compile. Names the pattern and carries the regex error.
    #[error("extra pattern `{name}` is not a valid regex: {error}")]
    InvalidPattern {
        /// The configured pattern name.
        name: String,
        /// The regex compilation error.
        error: regex::Error,
    },
    /// An extra pattern name is empty, duplicated, or the name of a built-in kind.
    #[error("extra pattern name {name:?} is invalid: {reason}")]
    InvalidPatternName {
        /// The offending name.
        name: String,
        /// Why it is rejected.
        reason: &'static str,
    },
    /// A kind to disable is neither a built-in kind nor the name of a configured extra pattern.
    #[error(
        "unknown sensitive kind {name:?}: expected mobile, id_card, bank_card, email or the name of an extra pattern"
    )]
    UnknownKind {
        /// The unknown name.
        name: String,
    },
    /// An error in a [`MaskerConfig`], naming the config key (for example `extra_patterns[1].regex`).
    #[error("masker config `{key}`: {error}")]
    Config {
        /// The config key, e.g. `extra_patterns[1].regex`, `extra_patterns[0].name`, `disabled[2]`.
        key: String,
        /// The error at that key.
        error: Box<MaskerError>,
    },
}

impl MaskerError {
    fn at(self, key: String) -> Self {
        Self::Config {
            key,
            error: Box::new(self),
        }
    }
}

/// Validation switches shared by the builder and the compiled masker.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Checks {
    luhn_check: bool,
    card_prefix_check: bool,
    id_checksum: bool,
    alnum_boundary: bool,
    grouped_numbers: bool,
}

impl Default for Checks {
    fn default() -> Self {
        Self {
            luhn_check: true,
            card_prefix_check: true,
            id_checksum: false,
            alnum_boundary: true,
            grouped_numbers: true,
        }
    }
}

/// Internal, allocation-free kind tag.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum KindId {
    Mobile,
    IdCard,
    BankCard,
    Email,
    Custom(usize),
}

impl KindId {
    fn rank(self) -> usize {
        match self {
            Self::Mobile => 0,
            Self::IdCard => 1,
            Self::BankCard => 2,
            Self::Email => 3,
            Self::Custom(i) => 4 + i,
        }
    }
}

#[derive(Clone, Copy, Debug)]
struct Candidate {
    start: usize,
    end: usize,
    kind: KindId,
}

#[derive(Debug)]
struct ExtraPattern {
    name: String,
    regex: Regex,
    placeholder: String,
}

#[derive(Debug)]
struct Inner {
    replacement: String,
    style: MaskStyle,
    mobile: bool,
    id_card: bool,
    bank_card: bool,
    email: bool,
    checks: Checks,
    extra: Vec<ExtraPattern>,
}

/// Finds and masks Chinese mobile numbers, resident ID numbers, bank card numbers, e-mail
/// addresses and configured extra patterns.
///
/// [`SensitiveDataMasker`] finds personal data in a string and replaces every **whole match**
/// (there is never a partial match inside a longer token). It is shared by the masking hook and
/// the audit hook, is cheap to clone (an [`Arc`] around precompiled state) and is `Send + Sync`.
///
/// # What the default masker masks
///
/// [`SensitiveDataMasker::default()`] replaces each of the following with `***`:
///
/// | kind | accepted shape (ASCII digits only) | validation |
/// |---|---|---|
/// | [`SensitiveKind::Mobile`] | 11 digits `1[3-9]xxxxxxxxx`; optionally prefixed by `86`, `+86`, `0086`; optionally grouped `3-4-4` with one consistent separator (`138 0013 8000`, `138-0013-8000`, `+86 138 0013 8000`, `+86 13800138000`) | prefix `1[3-9]` only |
/// | [`SensitiveKind::IdCard`] (18) | 17 digits + digit or `X`/`x` | region (first two digits are a province-level code `11`–`15`, `21`–`23`, `31`–`37`, `41`–`46`, `50`–`54`, `61`–`65`, `71`, `81`–`83`, or `91`–`96` for the 2023 foreigners' permanent-residence card) and birth date `YYYYMMDD` (year 1900–2099, real calendar day, leap years); GB 11643 mod-11 checksum only with [`MaskerBuilder::id_checksum`] (off by default) |
/// | [`SensitiveKind::IdCard`] (15, legacy) | 15 digits | mainland region (`11`–`65` as above) and birth date `19YYMMDD` |
/// | [`SensitiveKind::BankCard`] | 13–19 digits; or grouped `4-4-4-4`, `4-4-4-4-n` (n = 1–3), `4-6-5`, `4-6-4` with one consistent separator | Luhn (on by default, [`MaskerBuilder::luhn_check`]) and issuer prefix (on by default, [`MaskerBuilder::card_prefix_check`]): no leading `0` or `1`, no leading `20` or `21` (no card scheme issues these; they are the shapes of epoch-millisecond timestamps and date-prefixed order numbers) |
/// | [`SensitiveKind::Email`] | `[A-Za-z0-9._%+-]+@[A-Za-z0-9.-]+\.[A-Za-z]{2,}` (leftmost, longest domain), implemented without a regex | none |
///
/// # Tokens and boundaries
///
/// Digit rules never look *inside* a run of digits: the maximal run of ASCII digits `0`–`9`
/// (plus a trailing `X`/`x` for an 18-character ID) is judged as **one** candidate by its length.
/// An 11-digit mobile number inside a 20-digit number is therefore not masked, and neither is any
/// run of 20 or more digits. A run is also not masked when it touches:
///
/// * a full-width digit `０`–`９` (always: a mixed run is one number, and full-width or other
///   non-ASCII digits are never matched themselves);
/// * an ASCII letter, `_`, or a full-width Latin letter, when `alnum_boundary` is on (the
///   default). So `SF13800138000`, `ORD202606130012345` and `ID11010119900307721X` are left
///   alone, and so is `mobile13800138000` (a deliberate trade-off; write `mobile:1380…` or
///   turn the option off).
///
/// Everything else is a boundary: CJK characters, punctuation, whitespace, `+`, `-`, `.`, `,`.
/// `联系13800138000处理` is masked. Grouped numbers need one consistent separator (a single
/// ASCII space or a single `-`) and the whole group sequence is judged as one candidate;
/// `138 0013-8000` (mixed separators) and `138 0013 8000 2` (an extra group) are not masked.
/// With `+86`/`0086` the `+` and country code are part of the match.
///
/// # What is deliberately not masked
///
/// Full-width digits (`１３８００１３８０００`); numbers split by other characters
/// (`138.0013.8000`, `(138)00138000`, double spaces); landlines; passport numbers; Hong Kong,
/// Macau and Taiwan document numbers; 11-digit numbers starting `10`–`12`; 12-digit numbers;
/// ID numbers with an impossible region or birth date; card numbers failing Luhn or the prefix
/// rule (when those checks are on). Bare 11-digit numbers starting `13`–`19` (for example some
/// order ids) *are* masked: by shape they are indistinguishable from mobile numbers, and
/// over-masking is the safe direction.
///
/// # Overlaps
///
/// All candidates (built-in and extra patterns) are resolved together, deterministically:
/// the candidate that starts **leftmost** wins; among those starting at the same byte the
/// **longest** wins; remaining ties go to built-in kinds (mobile, ID, card, e-mail) before extra
/// patterns, and extra patterns in configuration order. A candidate overlapping an accepted
/// one extends it to the union of both ranges (the accepted kind is reported), so no part
/// of a detected value is left in clear: `user13800138000@x.com` is masked as one e-mail
/// address, and a card number written straight into an e-mail address masks both.
///
/// # Streaming
///
/// The masker is stateless. To mask streamed chunks without leaking a number split across
/// chunks, keep a carry-over buffer and emit only up to
/// [`SensitiveDataMasker::stable_prefix_len`].
///
/// # Cost
///
/// Built-in kinds are found in a single byte-level pass with no regex. Text without an ASCII
/// digit and without `@` is skipped after one scan, and when nothing matches [`SensitiveDataMasker::mask`]
/// returns [`Cow::Borrowed`] without allocating. Each extra pattern costs one regex pass.
///
/// Cloning is cheap (one [`Arc`] increment); the type is `Send + Sync`. Build a customised
/// masker with [`SensitiveDataMasker::builder`] or [`MaskerConfig::build`].
#[derive(Clone, Debug)]
pub struct SensitiveDataMasker {
    inner: Arc<Inner>,
}

static DEFAULT_MASKER: LazyLock<SensitiveDataMasker> = LazyLock::new(|| SensitiveDataMasker {
    inner: Arc::new(Inner {
        replacement: DEFAULT_REPLACEMENT.to_owned(),
        style: MaskStyle::Replace,
        mobile: true,
        id_card: true,
        bank_card: true,
        email: true,
        checks: Checks::default(),
        extra: Vec::new(),
    }),
});

impl Default for SensitiveDataMasker {
    /// All four built-in kinds on, replacement `***`, [`MaskStyle::Replace`], Luhn and card
    /// prefix checks on, ID checksum off, `alnum_boundary` on, grouped numbers on, no extra
    /// patterns. Returns a clone of one shared instance (no compilation, no allocation).
    fn default() -> Self {
        DEFAULT_MASKER.clone()
    }
}

impl SensitiveDataMasker {
    /// A builder starting from the [`Default`] settings.
    pub fn builder() -> MaskerBuilder {
        MaskerBuilder::default()
    }

    /// True when at least one built-in kind is enabled or one extra pattern is configured.
    /// When false, [`mask`](Self::mask) always returns its input borrowed.
    #[must_use]
    pub fn has_rules(&self) -> bool {
        let i = &*self.inner;
        i.mobile || i.id_card || i.bank_card || i.email || !i.extra.is_empty()
    }

    /// Masks every match (see [`find`](Self::find) for which ones) according to the
    /// [`MaskStyle`]. Returns [`Cow::Borrowed`] with the input, without allocating, when
    /// nothing matched; otherwise a new string. The replacement is inserted literally; an empty
    /// replacement deletes the matches.
    #[must_use]
    pub fn mask<'a>(&self, text: &'a str) -> Cow<'a, str> {
        let mut cands = Vec::new();
        self.collect(text, &mut cands);
        if cands.is_empty() {
            return Cow::Borrowed(text);
        }
        let mut out = String::with_capacity(text.len());
        let mut last = 0;
        for c in &cands {
            out.push_str(&text[last..c.start]);
            self.inner
                .write_replacement(&mut out, &text[c.start..c.end], c.kind);
            last = c.end;
        }
        out.push_str(&text[last..]);
        Cow::Owned(out)
    }

    /// The matches [`mask`](Self::mask) would replace: non-overlapping, sorted by start,
    /// resolved leftmost-then-longest (see the type documentation). Ranges are byte ranges
    /// into `text`. Extra-pattern matches of zero length are ignored.
    #[must_use]
    pub fn find(&self, text: &str) -> Vec<SensitiveMatch> {
        let mut cands = Vec::new();
        self.collect(text, &mut cands);
        cands
            .into_iter()
            .map(|c| SensitiveMatch {
                kind: self.inner.kind(c.kind),
                range: c.start..c.end,
            })
            .collect()
    }

    /// For streaming: the byte length `n` of the longest prefix of `text` that can be masked
    /// and emitted now. For the built-in kinds, whatever `more` is appended later,
    /// `mask(&text[..n]) + mask(&(text[n..] + more)) == mask(text + more)`, so a streaming
    /// hook emits `mask(&text[..n])` and carries `text[n..]` over to the next chunk.
    ///
    /// `n` is just after the last *hard boundary*: a character that can neither be part of
    /// nor change the judgement of a match — anything except ASCII letters and digits,
    /// `. _ % + - @`, full-width digits and letters, and a space that follows an ASCII digit
    /// (it may separate digit groups). Returns 0 when there is none (one long token), and
    /// `text.len()` when `text` ends with a hard boundary. The carry-over can grow without
    /// bound on text without boundaries (a long URL), so callers should cap it and flush.
    /// Extra patterns are not considered: a pattern that can match across a hard boundary
    /// needs a larger carry-over.
    #[must_use]
    pub fn stable_prefix_len(&self, text: &str) -> usize {
        for (i, c) in text.char_indices().rev() {
            if !is_soft(c, || char_before(text, i)) {
                return i + c.len_utf8();
            }
        }
        0
    }

    /// The literal replacement string (default `***`); a streaming masker writes it for a
    /// token it has to mask whole.
    pub(crate) fn replacement(&self) -> &str {
        &self.inner.replacement
    }

    fn collect(&self, text: &str, out: &mut Vec<Candidate>) {
        let inner = &*self.inner;
        inner.scan_builtin(text, out);
        for (idx, pattern) in inner.extra.iter().enumerate() {
            for m in pattern.regex.find_iter(text) {
                if !m.is_empty() {
                    out.push(Candidate {
                        start: m.start(),
                        end: m.end(),
                        kind: KindId::Custom(idx),
                    });
                }
            }
        }
        if out.len() > 1 {
            out.sort_unstable_by(|a, b| {
                a.start
                    .cmp(&b.start)
                    .then(b.end.cmp(&a.end))
                    .then(a.kind.rank().cmp(&b.kind.rank()))
            });
            // A candidate overlapping an accepted one extends it: the masked range is
            // the union, so no part of a detected value is ever left in clear (a card
            // number running into an e-mail address masks both).
            let mut kept: usize = 0;
            for i in 0..out.len() {
                if kept > 0 && out[i].start < out[kept - 1].end {
                    let end = out[i].end;
                    let prev = &mut out[kept - 1];
                    prev.end = prev.end.max(end);
                } else {
                    out.swap(kept, i);
                    kept += 1;
                }
            }
            out.truncate(kept);
        }
    }
}

impl Inner {
    fn kind(&self, k: KindId) -> SensitiveKind {
        match k {
            KindId::Mobile => SensitiveKind::Mobile,
            KindId::IdCard => SensitiveKind::IdCard,
            KindId::BankCard => SensitiveKind::BankCard,
            KindId::Email => SensitiveKind::Email,
            KindId::Custom(i) => SensitiveKind::Custom(
                self.extra
                    .get(i)
                    .map(|p| p.name.clone())
                    .unwrap_or_default(),
            ),
        }
    }

    fn write_replacement(&self, out: &mut String, matched: &str, kind: KindId) {
        match self.style {
            MaskStyle::Replace => out.push_str(&self.replacement),
            MaskStyle::Placeholder => out.push_str(match kind {
                KindId::Mobile => "[PHONE]",
                KindId::IdCard => "[ID_CARD]",
                KindId::BankCard => "[BANK_CARD]",
                KindId::Email => "[EMAIL]",
                KindId::Custom(i) => self
                    .extra
                    .get(i)
                    .map_or(self.replacement.as_str(), |p| p.placeholder.as_str()),
            }),
            MaskStyle::Partial => match kind {
                KindId::Custom(_) => out.push_str(&self.replacement),
                KindId::Email => match (matched.get(..1), matched.find('@')) {
                    (Some(first), Some(at)) => {
                        out.push_str(first);
                        out.push_str("***");
                        out.push_str(&matched[at..]);
                    }
                    _ => out.push_str(&self.replacement),
                },
                KindId::Mobile => partial_digits(out, matched, Some(11)),
                KindId::IdCard | KindId::BankCard => partial_digits(out, matched, None),
            },
        }
    }

    fn digits_on(&self) -> bool {
        self.mobile || self.id_card || self.bank_card
    }

    /// One pass over the bytes: digit runs and `@` are the only triggers. All candidates are
    /// ASCII, so byte offsets are always `char` boundaries.
    fn scan_builtin(&self, text: &str, out: &mut Vec<Candidate>) {
        let digits_on = self.digits_on();
        let email_on = self.email;
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
    fn scan_digits(&self, text: &str, s: usize, out: &mut Vec<Candidate>) -> usize {
        let b = text.as_bytes();
        let e = digit_run_end(b, s);
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
        if self.mobile {
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
        if self.bank_card && !cc {
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
        if self.id_card && len == 17 && matches!(b.get(e), Some(b'X' | b'x')) {
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
        let found = if self.mobile && national.is_some_and(mobile_valid) {
            Some((KindId::Mobile, if len == 11 { s } else { plus_start }))
        } else if self.id_card
            && ((len == 18 && self.id18_valid(d)) || (len == 15 && id15_valid(d)))
        {
            Some((KindId::IdCard, s))
        } else if self.bank_card && self.card_valid(d) {
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
    fn blocks(&self, c: Option<char>) -> bool {
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

/// Whether `c` can be part of, or change the judgement of, a built-in match (see
/// [`SensitiveDataMasker::stable_prefix_len`]); `prev` yields the character before it
/// (only asked for a space, which is soft after an ASCII digit).
pub(crate) fn is_soft(c: char, prev: impl FnOnce() -> Option<char>) -> bool {
    c.is_ascii_alphanumeric()
        || matches!(c, '.' | '_' | '%' | '+' | '-' | '@')
        || matches!(c, '０'..='９' | 'Ａ'..='Ｚ' | 'ａ'..='ｚ')
        || (c == ' ' && prev().is_some_and(|p| p.is_ascii_digit()))
}

/// Maximum number of groups in a separated number, for the streaming masker.
pub(crate) const MAX_NUMBER_GROUPS: usize = MAX_GROUPS;

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

fn digit_run_end(b: &[u8], mut i: usize) -> usize {
    while i < b.len() && b[i].is_ascii_digit() {
        i += 1;
    }
    i
}

fn char_before(text: &str, i: usize) -> Option<char> {
    text.get(..i).and_then(|t| t.chars().next_back())
}

fn char_at(text: &str, i: usize) -> Option<char> {
    text.get(i..).and_then(|t| t.chars().next())
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

fn mobile_valid(d: &[u8]) -> bool {
    d.len() == 11 && d[0] == b'1' && (b'3'..=b'9').contains(&d[1])
}

fn mainland_region(a: u8, b: u8) -> bool {
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

fn num(d: &[u8]) -> u32 {
    d.iter()
        .fold(0u32, |acc, &c| acc * 10 + u32::from(c.wrapping_sub(b'0')))
}

fn valid_date(y: u32, m: u32, d: u32) -> bool {
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
fn id15_valid(d: &[u8]) -> bool {
    d.len() == 15
        && mainland_region(d[0], d[1])
        && valid_date(1900 + num(&d[6..8]), num(&d[8..10]), num(&d[10..12]))
}

/// GB 11643-1999 ISO 7064 MOD 11-2 check character.
fn id_checksum_ok(t: &[u8]) -> bool {
    const WEIGHTS: [u32; 17] = [7, 9, 10, 5, 8, 4, 2, 1, 6, 3, 7, 9, 10, 5, 8, 4, 2];
    const CHECK: &[u8; 11] = b"10X98765432";
    let sum: u32 = t
        .iter()
        .zip(WEIGHTS)
        .map(|(&c, w)| u32::from(c.wrapping_sub(b'0')) * w)
        .sum();
    CHECK[(sum % 11) as usize] == t[17].to_ascii_uppercase()
}

fn card_prefix_ok(d: &[u8]) -> bool {
    !matches!(d, [b'0' | b'1', ..] | [b'2', b'0' | b'1', ..])
}

fn luhn_ok(d: &[u8]) -> bool {
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
fn email_at(b: &[u8], at: usize, floor: usize) -> Option<Range<usize>> {
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

/// Keeps the first 3 and last 4 ASCII alphanumerics of the last `tail` (or all) of them and
/// stars the alphanumerics in between; other characters (separators, `+`) are kept.
fn partial_digits(out: &mut String, matched: &str, tail: Option<usize>) {
    let total = matched.bytes().filter(u8::is_ascii_alphanumeric).count();
    let n = tail.map_or(total, |t| t.min(total));
    let skip = total - n;
    let mut idx = 0;
    for ch in matched.chars() {
        if ch.is_ascii_alphanumeric() {
            let keep = idx < skip || idx - skip < 3 || idx - skip >= n.saturating_sub(4);
            out.push(if keep { ch } else { '*' });
            idx += 1;
        } else {
            out.push(ch);
        }
    }
}

/// Builder for a customised [`SensitiveDataMasker`]; start with [`SensitiveDataMasker::builder`].
///
/// Defaults: replacement `***`, [`MaskStyle::Replace`], all built-in kinds enabled,
/// `luhn_check` on, `card_prefix_check` on, `id_checksum` off, `alnum_boundary` on,
/// `grouped_numbers` on, no extra patterns.
#[derive(Clone, Debug)]
#[must_use = "a MaskerBuilder does nothing until `build()` is called"]
pub struct MaskerBuilder {
    replacement: String,
    style: MaskStyle,
    disabled: Vec<SensitiveKind>,
    checks: Checks,
    extra: Vec<(String, String)>,
}

impl Default for MaskerBuilder {
    fn default() -> Self {
        Self {
            replacement: DEFAULT_REPLACEMENT.to_owned(),
            style: MaskStyle::Replace,
            disabled: Vec::new(),
            checks: Checks::default(),
            extra: Vec::new(),
        }
    }
}

impl MaskerBuilder {
    /// The replacement string (default `***`), inserted literally (no `$` or `\` expansion).
    /// An empty string is allowed and deletes matches. Used by [`MaskStyle::Replace`], and by
    /// [`MaskStyle::Partial`] for extra-pattern matches.
    pub fn replacement(mut self, replacement: impl Into<String>) -> Self {
        self.replacement = replacement.into();
        self
    }

    /// How matches are replaced (default [`MaskStyle::Replace`]).
    pub fn style(mut self, style: MaskStyle) -> Self {
        self.style = style;
        self
    }

    /// Turns off one kind. A built-in kind stops being detected; `Custom(name)` removes the
    /// extra pattern with that name (regardless of call order). Disabling a `Custom` name
    /// that no extra pattern has makes [`build`](Self::build) fail with
    /// [`MaskerError::UnknownKind`].
    pub fn disable(mut self, kind: SensitiveKind) -> Self {
        self.disabled.push(kind);
        self
    }

    /// Require card numbers to pass the Luhn check (default **on**). Turn off to mask every
    /// 13–19-digit run that passes the prefix rule.
    pub fn luhn_check(mut self, on: bool) -> Self {
        self.checks.luhn_check = on;
        self
    }

    /// Reject card numbers starting with `0`, `1`, `20` or `21` (default **on**): no card
    /// scheme issues these, and they are the shapes of epoch-millisecond timestamps and
    /// date-prefixed order numbers.
    pub fn card_prefix_check(mut self, on: bool) -> Self {
        self.checks.card_prefix_check = on;
        self
    }

    /// Require 18-digit ID numbers to carry a correct GB 11643 mod-11 check character
    /// (default **off**, so mistyped or synthetic IDs are still masked). Region and birth date
    /// are always validated.
    pub fn id_checksum(mut self, on: bool) -> Self {
        self.checks.id_checksum = on;
        self
    }

    /// Treat ASCII letters, `_` and full-width Latin letters as part of a token (default
    /// **on**), so digit runs glued to them (`SF13800138000`) are not masked. When off, only
    /// digits (ASCII or full-width) block a match.
    pub fn alnum_boundary(mut self, on: bool) -> Self {
        self.checks.alnum_boundary = on;
        self
    }

    /// Recognise numbers split into groups by one consistent separator (space or `-`):
    /// mobile `3-4-4` with an optional `86`/`+86`/`0086` group, cards `4-4-4-4(-n)`, `4-6-5`,
    /// `4-6-4` (default **on**).
    pub fn grouped_numbers(mut self, on: bool) -> Self {
        self.checks.grouped_numbers = on;
        self
    }

    /// Adds an extra pattern (a [`regex`] crate pattern, matched as-is against the text and
    /// reported as [`SensitiveKind::Custom`]`(name)`). Names must be non-empty, unique and not
    /// a built-in kind name; zero-length matches are ignored. Checked in [`build`](Self::build).
    pub fn extra_pattern(mut self, name: impl Into<String>, regex: impl Into<String>) -> Self {
        self.extra.push((name.into(), regex.into()));
        self
    }

    /// Compiles the masker.
    ///
    /// # Errors
    ///
    /// [`MaskerError::InvalidPattern`] naming the pattern when an extra pattern does not
    /// compile, [`MaskerError::InvalidPatternName`] for an empty, duplicate or built-in name,
    /// and [`MaskerError::UnknownKind`] when disabling an unknown custom name.
    pub fn build(self) -> Result<SensitiveDataMasker, MaskerError> {
        let disabled = self.disabled.into_iter().map(|k| (k, None)).collect();
        let extra = self.extra.into_iter().map(|(n, r)| (n, r, None)).collect();
        assemble(self.replacement, self.style, self.checks, extra, disabled)
    }
}

/// Shared by the builder and the config. A `Some(key)` wraps errors in [`MaskerError::Config`].
fn assemble(
    replacement: String,
    style: MaskStyle,
    checks: Checks,
    extra: Vec<(String, String, Option<usize>)>,
    disabled: Vec<(SensitiveKind, Option<usize>)>,
) -> Result<SensitiveDataMasker, MaskerError> {
    let mut patterns: Vec<ExtraPattern> = Vec::with_capacity(extra.len());
    for (name, regex, index) in extra {
        let key = |field: &str| index.map(|i| format!("extra_patterns[{i}].{field}"));
        let reason = if name.is_empty() {
            Some("must not be empty")
        } else if SensitiveKind::builtin_from_name(&name).is_some() {
            Some("is the name of a built-in kind")
        } else if patterns.iter().any(|p| p.name == name) {
            Some("is used by another extra pattern")
        } else {
            None
        };
        if let Some(reason) = reason {
            let err = MaskerError::InvalidPatternName { name, reason };
            return Err(match key("name") {
                Some(k) => err.at(k),
                None => err,
            });
        }
        let compiled = match Regex::new(&regex) {
            Ok(r) => r,
            Err(error) => {
                let err = MaskerError::InvalidPattern { name, error };
                return Err(match key("regex") {
                    Some(k) => err.at(k),
                    None => err,
                });
            }
        };
        patterns.push(ExtraPattern {
            placeholder: format!("[{name}]"),
            name,
            regex: compiled,
        });
    }
    let (mut mobile, mut id_card, mut bank_card, mut email) = (true, true, true, true);
    let mut removed = vec![false; patterns.len()];
    for (kind, index) in disabled {
        match kind {
            SensitiveKind::Mobile => mobile = false,
            SensitiveKind::IdCard => id_card = false,
            SensitiveKind::BankCard => bank_card = false,
            SensitiveKind::Email => email = false,
            SensitiveKind::Custom(name) => match patterns.iter().position(|p| p.name == name) {
                Some(pos) => removed[pos] = true,
                None => {
                    let err = MaskerError::UnknownKind { name };
                    return Err(match index {
                        Some(i) => err.at(format!("disabled[{i}]")),
                        None => err,
                    });
                }
            },
        }
    }
    let mut flags = removed.into_iter();
    patterns.retain(|_| !flags.next().unwrap_or(false));
    Ok(SensitiveDataMasker {
        inner: Arc::new(Inner {
            replacement,
            style,
            mobile,
            id_card,
            bank_card,
            email,
            checks,
            extra: patterns,
        }),
    })
}

/// A named extra pattern in a [`MaskerConfig`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NamedPattern {
    /// Non-empty, unique, not a built-in kind name; reported as [`SensitiveKind::Custom`].
    pub name: String,
    /// A [`regex`] crate pattern.
    pub regex: String,
}

/// Serde-deserializable masker settings. Every key is optional (missing keys take the
/// defaults below) and unknown keys are rejected.
///
/// ```json
/// { "replacement": "***", "style": "replace", "disabled": ["email"],
///   "extra_patterns": [{ "name": "secret", "regex": "SECRET-\\d+" }],
///   "luhn_check": true, "card_prefix_check": true, "id_checksum": false,
///   "alnum_boundary": true, "grouped_numbers": true }
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct MaskerConfig {
    /// Literal replacement string (default `"***"`; empty deletes matches). See [`MaskerBuilder::replacement`].
    pub replacement: String,
    /// Replacement style (default `"replace"`). See [`MaskStyle`].
    pub style: MaskStyle,
    /// Extra patterns (default none). See [`MaskerBuilder::extra_pattern`].
    pub extra_patterns: Vec<NamedPattern>,
    /// Kinds to turn off by name: `mobile`, `id_card`, `bank_card`, `email`, or an extra
    /// pattern's name (default none). Unknown names are errors.
    pub disabled: Vec<String>,
    /// Luhn check for cards (default `true`). See [`MaskerBuilder::luhn_check`].
    pub luhn_check: bool,
    /// Card issuer-prefix rule (default `true`). See [`MaskerBuilder::card_prefix_check`].
    pub card_prefix_check: bool,
    /// ID check-character validation (default `false`). See [`MaskerBuilder::id_checksum`].
    pub id_checksum: bool,
    /// Letters glue to digit runs (default `true`). See [`MaskerBuilder::alnum_boundary`].
    pub alnum_boundary: bool,
    /// Grouped numbers (default `true`). See [`MaskerBuilder::grouped_numbers`].
    pub grouped_numbers: bool,
}

impl Default for MaskerConfig {
    fn default() -> Self {
        let c = Checks::default();
        Self {
            replacement: DEFAULT_REPLACEMENT.to_owned(),
            style: MaskStyle::Replace,
            extra_patterns: Vec::new(),
            disabled: Vec::new(),
            luhn_check: c.luhn_check,
            card_prefix_check: c.card_prefix_check,
            id_checksum: c.id_checksum,
            alnum_boundary: c.alnum_boundary,
            grouped_numbers: c.grouped_numbers,
        }
    }
}

impl MaskerConfig {
    /// Compiles the configured masker.
    ///
    /// # Errors
    ///
    /// [`MaskerError::Config`] naming the key: `extra_patterns[i].name` (empty, duplicate or
    /// built-in name), `extra_patterns[i].regex` (does not compile; the message names the
    /// pattern and the regex error), or `disabled[i]` (unknown kind name).
    pub fn build(&self) -> Result<SensitiveDataMasker, MaskerError> {
        let checks = Checks {
            luhn_check: self.luhn_check,
            card_prefix_check: self.card_prefix_check,
            id_checksum: self.id_checksum,
            alnum_boundary: self.alnum_boundary,
            grouped_numbers: self.grouped_numbers,
        };
        let extra = self
            .extra_patterns
            .iter()
            .enumerate()
            .map(|(i, p)| (p.name.clone(), p.regex.clone(), Some(i)))
            .collect();
        let disabled = self
            .disabled
            .iter()
            .enumerate()
            .map(|(i, name)| {
                let kind = SensitiveKind::builtin_from_name(name)
                    .unwrap_or_else(|| SensitiveKind::Custom(name.clone()));
                (kind, Some(i))
            })
            .collect();
        assemble(
            self.replacement.clone(),
            self.style,
            checks,
            extra,
            disabled,
        )
    }
}
