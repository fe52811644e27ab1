//! [`MaskerBuilder`] and the serde [`MaskerConfig`]: which kinds are on, the checks, the
//! replacement, extra patterns.

use std::sync::Arc;

use regex::Regex;
use serde::{Deserialize, Serialize};

use super::{
    BUILTIN_NAMES, Checks, DEFAULT_REPLACEMENT, Enabled, ExtraPattern, Inner, MaskStyle,
    MaskerError, SensitiveDataMasker, SensitiveKind,
};

/// Builder for a customised [`SensitiveDataMasker`]; start with [`SensitiveDataMasker::builder`].
///
/// Defaults: replacement `***`, [`MaskStyle::Replace`], all eight built-in kinds enabled
/// (`mobile`, `id_card`, `bank_card`, `email`, `phone`, `nanp_phone`, `iban`, `us_ssn`),
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

    /// Turns off one kind (every built-in kind is on by default). A built-in kind stops
    /// being detected, e.g. `.disable(SensitiveKind::NanpPhone)`; `Custom(name)` removes the
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

    /// Recognise Chinese mobile and card numbers split into groups by one consistent
    /// separator (space or `-`): mobile `3-4-4` with an optional `86`/`+86`/`0086` group,
    /// cards `4-4-4-4(-n)`, `4-6-5`, `4-6-4` (default **on**). International phone
    /// numbers, NANP numbers, SSNs and IBANs are always recognised in their grouped
    /// shapes (see [`SensitiveDataMasker`]).
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
    let mut enabled = Enabled::ALL;
    let mut removed = vec![false; patterns.len()];
    for (kind, index) in disabled {
        if let Some(id) = kind.builtin_id() {
            if let Some(slot) = enabled.0.get_mut(id.index()) {
                *slot = false;
            }
            continue;
        }
        // Every built-in kind was handled above.
        let SensitiveKind::Custom(name) = kind else {
            continue;
        };
        match patterns.iter().position(|p| p.name == name) {
            Some(pos) => removed[pos] = true,
            None => {
                let err = MaskerError::UnknownKind { name };
                return Err(match index {
                    Some(i) => err.at(format!("disabled[{i}]")),
                    None => err,
                });
            }
        }
    }
    let mut flags = removed.into_iter();
    patterns.retain(|_| !flags.next().unwrap_or(false));
    Ok(SensitiveDataMasker {
        inner: Arc::new(Inner {
            replacement,
            style,
            enabled,
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
    /// Kinds to turn off by name (default none: every built-in kind is on): `mobile`,
    /// `id_card`, `bank_card`, `email`, `phone`, `nanp_phone`, `iban`, `us_ssn`, or an
    /// extra pattern's name. Unknown names are errors naming the key and the closest kind.
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

/// `"; did you mean `x`?"` for the built-in kind name closest to `name` (a likely typo or
/// a common alias), or `""`.
pub(super) fn kind_hint(name: &str) -> String {
    const ALIASES: &[(&str, &str)] = &[
        ("ssn", "us_ssn"),
        ("social_security", "us_ssn"),
        ("nanp", "nanp_phone"),
        ("us_phone", "nanp_phone"),
        ("phone_number", "phone"),
        ("telephone", "phone"),
        ("intl_phone", "phone"),
        ("e164", "phone"),
        ("cn_mobile", "mobile"),
        ("card", "bank_card"),
        ("credit_card", "bank_card"),
        ("id", "id_card"),
        ("mail", "email"),
    ];
    let folded: String = name
        .chars()
        .map(|c| {
            if c == '-' {
                '_'
            } else {
                c.to_ascii_lowercase()
            }
        })
        .collect();
    let alias = ALIASES.iter().find(|(a, _)| *a == folded).map(|(_, k)| *k);
    let near = || {
        BUILTIN_NAMES
            .iter()
            .map(|k| (edits(&folded, k), *k))
            .filter(|(d, k)| *d <= (k.len() / 3).max(2))
            .min_by_key(|(d, _)| *d)
            .map(|(_, k)| k)
    };
    match alias.or_else(near) {
        Some(k) => format!("; did you mean `{k}`?"),
        None => String::new(),
    }
}

/// Levenshtein distance over bytes (kind names are ASCII).
fn edits(a: &str, b: &str) -> usize {
    let b = b.as_bytes();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, &ca) in a.as_bytes().iter().enumerate() {
        let mut diag = row[0];
        row[0] = i + 1;
        for (j, &cb) in b.iter().enumerate() {
            let up = row[j + 1];
            row[j + 1] = if ca == cb {
                diag
            } else {
                1 + diag.min(row[j]).min(up)
            };
            diag = up;
        }
    }
    row[b.len()]
}
