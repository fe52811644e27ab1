//! Sensitive-data masking for text and streamed text: Chinese mobile and ID-card numbers,
//! bank cards (Luhn-checked), e-mail addresses, international phones (E.164, NANP), IBANs
//! (mod-97), US SSNs and patterns of your own, found in one byte-level pass and replaced
//! by a fixed string or a partial mask. [`SensitiveDataMasker`] masks whole texts;
//! [`SensitiveDataMasker::stable_prefix_len`] tells a streaming masker how much of a
//! growing text can be emitted without ever showing part of a number. Used by rein's
//! masking and audit hooks; depends on nothing of rein.

use std::borrow::Cow;
use std::fmt;
use std::ops::Range;
use std::sync::{Arc, LazyLock};

use regex::Regex;
use serde::{Deserialize, Serialize};

mod checks;
mod config;
mod intl;
mod normalise;
mod scan;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_chinese;
#[cfg(test)]
mod tests_intl;

pub use config::{MaskerBuilder, MaskerConfig, NamedPattern};

/// The default replacement string, `***`.
pub const DEFAULT_REPLACEMENT: &str = "***";

/// Maximum number of groups in a separated number (`4-4-4-4-3`).
const MAX_GROUPS: usize = 5;

/// The kind of a sensitive match, for audit counting and [`MaskerBuilder::disable`].
///
/// The configuration name of each kind (see [`SensitiveKind::name`]) is `mobile`, `id_card`,
/// `bank_card`, `email`, `phone`, `nanp_phone`, `iban`, `us_ssn`, or the configured name of
/// an extra pattern. Every built-in kind is detected by default; see
/// [`SensitiveDataMasker`] for the exact shapes.
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
    /// An international phone number written with `+` and a country code, e.g.
    /// `+1 (415) 555-0134`, `+44 20 7946 0958` (config name `phone`).
    Phone,
    /// A North American (NANP) number without `+1`: `(415) 555-0134`, `415-555-0134`,
    /// `415.555.0134`, `415 555 0134`, bare `4155550134`, optionally after `1-` (config
    /// name `nanp_phone`).
    NanpPhone,
    /// An IBAN with a valid ISO 13616 mod-97 checksum and country length (config name `iban`).
    Iban,
    /// A US social security number `AAA-GG-SSSS` outside the SSA's never-issued ranges
    /// (config name `us_ssn`).
    UsSsn,
    /// A match of the extra pattern with this configured name.
    Custom(String),
}

/// The configuration names of the built-in kinds, in [`KindId`] order.
pub(crate) const BUILTIN_NAMES: [&str; BUILTIN_COUNT] = [
    "mobile",
    "id_card",
    "bank_card",
    "email",
    "phone",
    "nanp_phone",
    "iban",
    "us_ssn",
];

/// Number of built-in kinds.
pub(crate) const BUILTIN_COUNT: usize = 8;

impl SensitiveKind {
    /// The configuration name: `mobile`, `id_card`, `bank_card`, `email`, `phone`,
    /// `nanp_phone`, `iban`, `us_ssn`, or the extra pattern's name.
    #[must_use]
    pub fn name(&self) -> &str {
        match self.builtin_id() {
            Some(id) => BUILTIN_NAMES[id.index()],
            None => match self {
                Self::Custom(name) => name,
                _ => "",
            },
        }
    }

    /// The built-in kind with this configuration name (`mobile`, `id_card`, `bank_card`,
    /// `email`, `phone`, `nanp_phone`, `iban`, `us_ssn`; exact, lower case), or `None`.
    #[must_use]
    pub fn builtin_from_name(name: &str) -> Option<Self> {
        let i = BUILTIN_NAMES.iter().position(|n| *n == name)?;
        Some(KindId::BUILTIN[i].public())
    }

    fn builtin_id(&self) -> Option<KindId> {
        Some(match self {
            Self::Mobile => KindId::Mobile,
            Self::IdCard => KindId::IdCard,
            Self::BankCard => KindId::BankCard,
            Self::Email => KindId::Email,
            Self::Phone => KindId::Phone,
            Self::NanpPhone => KindId::NanpPhone,
            Self::Iban => KindId::Iban,
            Self::UsSsn => KindId::UsSsn,
            Self::Custom(_) => return None,
        })
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
    /// Replace the whole match with a typed placeholder: `[PHONE]` (mobile, phone and
    /// NANP numbers), `[ID_CARD]`, `[BANK_CARD]`, `[EMAIL]`, `[IBAN]`, `[SSN]`, or `[<name>]`
    /// for an extra pattern. The replacement string is unused.
    Placeholder,
    /// Keep a little of the match: for mobile numbers the first 3 and last 4 digits of the
    /// 11-digit national number (`138****8000`; a `+86` prefix and separators are kept); for ID
    /// and card numbers, international and NANP phone numbers the first 3 and last 4
    /// characters (digits or `X`), other digits become `*` (`+1 41*-***-0134`); for an IBAN
    /// the first 4 and last 4 (`DE89 **** **** **** **30 00`); for an SSN the last 4
    /// (`***-**-6789`); for e-mail the first character of the local part, then `***`, then `@` and the
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
        "unknown sensitive kind {name:?}: expected mobile, id_card, bank_card, email, phone, nanp_phone, iban, us_ssn or the name of an extra pattern{hint}",
        hint = config::kind_hint(name)
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

/// Internal, allocation-free kind tag. The built-in kinds are in [`BUILTIN_NAMES`] order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum KindId {
    Mobile,
    IdCard,
    BankCard,
    Email,
    Phone,
    NanpPhone,
    Iban,
    UsSsn,
    Custom(usize),
}

impl KindId {
    const BUILTIN: [KindId; BUILTIN_COUNT] = [
        Self::Mobile,
        Self::IdCard,
        Self::BankCard,
        Self::Email,
        Self::Phone,
        Self::NanpPhone,
        Self::Iban,
        Self::UsSsn,
    ];

    /// Position in [`BUILTIN_NAMES`]; extra patterns follow the built-ins.
    fn index(self) -> usize {
        match self {
            Self::Mobile => 0,
            Self::IdCard => 1,
            Self::BankCard => 2,
            Self::Email => 3,
            Self::Phone => 4,
            Self::NanpPhone => 5,
            Self::Iban => 6,
            Self::UsSsn => 7,
            Self::Custom(i) => BUILTIN_COUNT + i,
        }
    }

    /// Tie-break order among candidates with the same range: built-ins first.
    fn rank(self) -> usize {
        self.index()
    }

    fn public(self) -> SensitiveKind {
        match self {
            Self::Mobile => SensitiveKind::Mobile,
            Self::IdCard => SensitiveKind::IdCard,
            Self::BankCard => SensitiveKind::BankCard,
            Self::Email => SensitiveKind::Email,
            Self::Phone => SensitiveKind::Phone,
            Self::NanpPhone => SensitiveKind::NanpPhone,
            Self::Iban => SensitiveKind::Iban,
            Self::UsSsn => SensitiveKind::UsSsn,
            Self::Custom(_) => SensitiveKind::Custom(String::new()),
        }
    }
}

/// Which built-in kinds are on, indexed by [`KindId::index`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Enabled([bool; BUILTIN_COUNT]);

impl Enabled {
    const ALL: Self = Self([true; BUILTIN_COUNT]);

    fn on(self, kind: KindId) -> bool {
        self.0.get(kind.index()).copied().unwrap_or(false)
    }

    fn any(self) -> bool {
        self.0.iter().any(|&b| b)
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
    enabled: Enabled,
    checks: Checks,
    extra: Vec<ExtraPattern>,
}

/// Finds and masks phone numbers (Chinese mainland mobiles, international `+` numbers,
/// North American numbers), Chinese resident ID numbers, bank card numbers, IBANs, US social
/// security numbers, e-mail addresses and configured extra patterns.
///
/// [`SensitiveDataMasker`] finds personal data in a string and replaces every **whole match**
/// (there is never a partial match inside a longer token). It is shared by the masking hook and
/// the audit hook, is cheap to clone (an [`Arc`] around precompiled state) and is `Send + Sync`.
///
/// # What the default masker masks
///
/// [`SensitiveDataMasker::default()`] replaces each of the following with `***`:
///
/// | kind | accepted shape (digits and separators as read after normalisation, below) | validation |
/// |---|---|---|
/// | [`SensitiveKind::Mobile`] | 11 digits `1[3-9]xxxxxxxxx`; optionally prefixed by `86`, `+86`, `0086`; optionally grouped `3-4-4` with one consistent separator (`138 0013 8000`, `138-0013-8000`, `+86 138 0013 8000`, `+86 13800138000`) | prefix `1[3-9]` only |
/// | [`SensitiveKind::IdCard`] (18) | 17 digits + digit or `X`/`x` | region (first two digits are a province-level code `11`–`15`, `21`–`23`, `31`–`37`, `41`–`46`, `50`–`54`, `61`–`65`, `71`, `81`–`83`, or `91`–`96` for the 2023 foreigners' permanent-residence card) and birth date `YYYYMMDD` (year 1900–2099, real calendar day, leap years); GB 11643 mod-11 checksum only with [`MaskerBuilder::id_checksum`] (off by default) |
/// | [`SensitiveKind::IdCard`] (15, legacy) | 15 digits | mainland region (`11`–`65` as above) and birth date `19YYMMDD` |
/// | [`SensitiveKind::BankCard`] | 13–19 digits; or grouped `4-4-4-4`, `4-4-4-4-n` (n = 1–3), `4-6-5`, `4-6-4` with one consistent separator | Luhn (on by default, [`MaskerBuilder::luhn_check`]) and issuer prefix (on by default, [`MaskerBuilder::card_prefix_check`]): no leading `0` or `1`, no leading `20` or `21` (no card scheme issues these; they are the shapes of epoch-millisecond timestamps and date-prefixed order numbers) |
/// | [`SensitiveKind::Email`] | `[A-Za-z0-9._%+-]+@[A-Za-z0-9.-]+\.[A-Za-z]{2,}` (leftmost, longest domain), implemented without a regex | none |
/// | [`SensitiveKind::Phone`] | `+`, a country code, then digit groups separated by single spaces, `-` or `.`, the group after the country code optionally in parentheses (`+1 (415) 555-0134`, `+1 415-555-0134`, `+44 20 7946 0958`, `+44 (0)20 7946 0958`, `+49 30 901820`, `+33 1 23 45 67 89`, `+14155550134`); the longest valid run of groups is taken | the country code is an assigned ITU-T E.164 code (table, not a library: see `checks::country_code_len`); 8–15 digits in all; for `+1` exactly 10 national digits with area code and exchange `[2-9]xx` (not `x11`); the `+` must not follow a letter or digit |
/// | [`SensitiveKind::NanpPhone`] | North American numbers without `+1`: `(415) 555-0134`, `(415)555-0134`, `415-555-0134`, `415.555.0134`, `415 555 0134`, bare ten digits `4155550134`, optionally after `1-`, `1 ` or `1.` (`1-800-555-0199`, `1 415 555 0134`) | area code and exchange `[2-9]xx`, not `x11`; not part of a longer group sequence (`2024-415-555-0134`, `12 415 555 0134`); a bare run of exactly ten digits (so ten-digit order numbers starting `2`–`9` with a valid exchange are masked too: over-masking is the safe direction; epoch-second timestamps start with `1` and are not) |
/// | [`SensitiveKind::Iban`] | ISO 13616: two upper-case country letters, two check digits, the BBAN (upper-case letters and digits), either contiguous (`DE89370400440532013000`) or in the printed groups of four separated by single spaces (`DE89 3704 0044 0532 0130 00`) | the country's IBAN length (SWIFT registry table) and the mod-97 checksum; lower-case IBANs are not detected |
/// | [`SensitiveKind::UsSsn`] | `AAA-GG-SSSS` with hyphens (`123-45-6789`) | not a never-issued range: area `000`, `666` or `900`–`999`, group `00`, serial `0000`; not part of a longer group sequence. Unhyphenated nine digits and `123 45 6789` are **not** detected (nine-digit runs are mostly order numbers, ZIP+4 codes and ids) |
///
/// Every built-in kind is on by default; switch one off with [`MaskerBuilder::disable`] or
/// the `disabled` list of [`MaskerConfig`] (names: `mobile`, `id_card`, `bank_card`,
/// `email`, `phone`, `nanp_phone`, `iban`, `us_ssn`). A `+86` mobile number is reported as
/// [`SensitiveKind::Mobile`]; with `mobile` off it is still masked as a `phone`.
///
/// # Separators and full-width digits
///
/// Detection reads through the characters real text puts inside numbers: no-break,
/// figure, punctuation, thin, hair, narrow no-break and ideographic spaces (U+00A0,
/// U+2007, U+2008, U+2009, U+200A, U+202F, U+3000) count as a space; hyphen,
/// non-breaking hyphen, figure dash, en dash, minus sign and full-width hyphen-minus
/// (U+2010–U+2013, U+2212, U+FF0D) as `-`; soft hyphens, zero-width spaces, non-joiners
/// and joiners, word joiners and BOMs (U+00AD, U+200B–U+200D, U+2060, U+FEFF) are
/// ignored; full-width digits `０`–`９` and `＋` count as ASCII. The scan runs on the
/// text as written and on this normalised reading, and a match in either masks the
/// **original** span (separators included); so `4111\u{a0}1111\u{a0}1111\u{a0}1111`,
/// `４１１１１１１１１１１１１１１１` and `138\u{200b}0013\u{200b}8000` are masked, while a
/// number found without normalising is never lost to it. Other characters (letters,
/// other punctuation, other scripts' digits) are not read through.
///
/// # Tokens and boundaries
///
/// Digit rules never look *inside* a run of digits: the maximal run of ASCII digits `0`–`9`
/// (plus a trailing `X`/`x` for an 18-character ID) is judged as **one** candidate by its length.
/// An 11-digit mobile number inside a 20-digit number is therefore not masked, and neither is any
/// run of 20 or more digits. A run is also not masked when it touches:
///
/// * a full-width digit `０`–`９` (always: a mixed run is one number, judged whole in the
///   normalised reading; other scripts' digits are never matched);
/// * an ASCII letter, `_`, or a full-width Latin letter, when `alnum_boundary` is on (the
///   default). So `SF13800138000`, `ORD202606130012345` and `ID11010119900307721X` are left
///   alone, and so is `mobile13800138000` (a deliberate trade-off; write `mobile:1380…` or
///   turn the option off).
///
/// The same boundary rule applies to the international kinds: the character before a
/// phone number's `+`, an IBAN's country letters, a NANP number's `(` or area code and an
/// SSN must not be a letter or digit (`ID+1 415…`, `XDE89…` are not matched), nor may the
/// character after the last digit or letter.
///
/// Everything else is a boundary: CJK characters, punctuation, whitespace, `+`, `-`, `.`, `,`.
/// `联系13800138000处理` is masked. Grouped numbers need one consistent separator (a single
/// space or a single `-`, as read after normalisation) and the whole group sequence is judged as one candidate;
/// `138 0013-8000` (mixed separators) and `138 0013 8000 2` (an extra group) are not masked.
/// With `+86`/`0086` the `+` and country code are part of the match.
///
/// # What is deliberately not masked
///
/// Numbers split by other characters
/// (`138.0013.8000`, `(138)00138000`, double spaces); national numbers of other countries
/// written without `+` (`020 7946 0958`, `030 901820`: indistinguishable from other
/// numbers); Chinese landlines; passport numbers; Hong Kong,
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
/// **longest** wins; remaining ties go to built-in kinds (in the order mobile, ID, card,
/// e-mail, phone, NANP phone, IBAN, SSN) before extra
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
/// Built-in kinds are found in a single byte-level pass with no regex: every kind is found
/// from a run of ASCII digits (looking back for a `+`, `(` or IBAN letters) or an `@`.
/// Text holding a character read through for detection (see above; found by a byte scan
/// of non-ASCII text) is scanned a second time on a normalised copy. Text without an
/// ASCII digit, `@` or such a character is skipped after one scan, and when nothing
/// matches [`SensitiveDataMasker::mask`]
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
        enabled: Enabled::ALL,
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
        i.enabled.any() || !i.extra.is_empty()
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
    /// `. _ % + - @ ( )`, full-width digits and letters, the separators read through for
    /// detection, and a space that follows an ASCII or full-width digit or upper-case
    /// letter, `)` or such a separator (it may separate the groups of a number or an IBAN). Returns 0 when there is none (one long token), and
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
    pub fn replacement(&self) -> &str {
        &self.inner.replacement
    }

    fn collect(&self, text: &str, out: &mut Vec<Candidate>) {
        let inner = &*self.inner;
        inner.scan_builtin(text, out);
        // Numbers written with no-break spaces, joiners, soft hyphens or full-width
        // digits: detected on a normalised copy, masked over the original span. Both
        // scans count (their overlaps merge below), so normalising never hides a match.
        if let Some(norm) = normalise::Normalised::of(text) {
            let from = out.len();
            inner.scan_builtin(&norm.text, out);
            let mapped: Vec<Candidate> =
                out.drain(from..).filter_map(|c| norm.map_back(c)).collect();
            out.extend(mapped);
        }
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
            KindId::Custom(i) => SensitiveKind::Custom(
                self.extra
                    .get(i)
                    .map(|p| p.name.clone())
                    .unwrap_or_default(),
            ),
            builtin => builtin.public(),
        }
    }

    fn write_replacement(&self, out: &mut String, matched: &str, kind: KindId) {
        match self.style {
            MaskStyle::Replace => out.push_str(&self.replacement),
            MaskStyle::Placeholder => out.push_str(match kind {
                KindId::Mobile | KindId::Phone | KindId::NanpPhone => "[PHONE]",
                KindId::IdCard => "[ID_CARD]",
                KindId::BankCard => "[BANK_CARD]",
                KindId::Email => "[EMAIL]",
                KindId::Iban => "[IBAN]",
                KindId::UsSsn => "[SSN]",
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
                KindId::Mobile => checks::partial_digits(out, matched, Some(11), 3),
                KindId::IdCard | KindId::BankCard | KindId::Phone | KindId::NanpPhone => {
                    checks::partial_digits(out, matched, None, 3)
                }
                KindId::Iban => checks::partial_digits(out, matched, None, 4),
                KindId::UsSsn => checks::partial_digits(out, matched, None, 0),
            },
        }
    }
}

/// Whether `c` can be part of, or change the judgement of, a built-in match (see
/// [`SensitiveDataMasker::stable_prefix_len`]); `prev` yields the character before it
/// (only asked for a space, which is soft after an ASCII digit, an upper-case ASCII letter
/// or `)`: the groups of phone numbers and IBANs are separated by single spaces).
pub fn is_soft(c: char, prev: impl FnOnce() -> Option<char>) -> bool {
    c.is_ascii_alphanumeric()
        || matches!(c, '.' | '_' | '%' | '+' | '-' | '@' | '(' | ')')
        || matches!(c, '０'..='９' | 'Ａ'..='Ｚ' | 'ａ'..='ｚ')
        // The separators read through for detection may continue a number.
        || normalise::is_normalised(c)
        || (c == ' '
            && prev().is_some_and(|p| {
                p.is_ascii_digit()
                    || p.is_ascii_uppercase()
                    || p == ')'
                    // Full-width digits and letters, and the separators read through,
                    // may be followed by the space between two groups of one number.
                    || matches!(p, '０'..='９' | 'Ａ'..='Ｚ')
                    || normalise::is_normalised(p)
            }))
}

/// Maximum number of groups in a separated Chinese mobile or card number, for the
/// streaming masker.
pub const MAX_NUMBER_GROUPS: usize = MAX_GROUPS;

fn char_before(text: &str, i: usize) -> Option<char> {
    text.get(..i).and_then(|t| t.chars().next_back())
}

fn char_at(text: &str, i: usize) -> Option<char> {
    text.get(i..).and_then(|t| t.chars().next())
}
