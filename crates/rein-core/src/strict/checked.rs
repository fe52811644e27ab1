//! Checked deserialization shared by both workspace formats: every rule runs inside the
//! visitor of the node it checks, so failures carry that node's position.

use std::cell::Cell;
use std::fmt;
use std::path::Path;

use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Unexpected, Visitor};

use super::{SpecError, SpecErrorKind};

// ---------------------------------------------------------------------------------------------
// Checked deserialization shared by both formats
// ---------------------------------------------------------------------------------------------

/// The structured part of the first failure; serde errors themselves only carry text and
/// a position.
pub(crate) struct Detail {
    pub(crate) kind: SpecErrorKind,
    pub(crate) key: Option<String>,
    pub(crate) message: String,
}

impl Detail {
    pub(crate) fn into_error(self, file: &Path, line: Option<usize>) -> SpecError {
        SpecError {
            kind: self.kind,
            file: file.to_path_buf(),
            line,
            key: self.key,
            message: self.message,
        }
    }
}

#[derive(Default)]
pub(crate) struct Ctx(Cell<Option<Detail>>);

impl Ctx {
    /// Records the failure (the first one wins) and returns a serde error for the
    /// deserializer to position.
    pub(crate) fn fail<E: de::Error>(
        &self,
        kind: SpecErrorKind,
        key: Option<&str>,
        message: String,
    ) -> E {
        let err = E::custom(&message);
        self.note(kind, key, message);
        err
    }

    /// Records a failure unless one is already recorded.
    pub(crate) fn note(&self, kind: SpecErrorKind, key: Option<&str>, message: String) {
        let first = self.0.take().unwrap_or(Detail {
            kind,
            key: key.map(str::to_owned),
            message,
        });
        self.0.set(Some(first));
    }

    pub(crate) fn take(&self) -> Option<Detail> {
        self.0.take()
    }
}

/// Where a value sits: the key it belongs to (`None` for keys themselves).
#[derive(Clone, Copy)]
pub(crate) struct Site<'a> {
    pub(crate) ctx: &'a Ctx,
    pub(crate) key: Option<&'a str>,
}

impl<'a> Site<'a> {
    pub(crate) fn key(ctx: &'a Ctx, key: &'a str) -> Self {
        Self {
            ctx,
            key: Some(key),
        }
    }

    pub(crate) fn invalid<E: de::Error>(self, message: String) -> E {
        self.ctx
            .fail(SpecErrorKind::InvalidValue, self.key, message)
    }

    pub(crate) fn reject<E: de::Error>(self, expected: &str, found: Unexpected<'_>) -> E {
        self.invalid(format!("expected {expected}, found {found}"))
    }
}

/// A validation rule for one node; every input type it does not override is rejected with
/// ``expected <expected()>, found <what>``.
pub(crate) trait Rule: Sized {
    type Out;

    fn expected(&self) -> &'static str;

    fn str<E: de::Error>(self, at: Site<'_>, v: &str) -> Result<Self::Out, E> {
        Err(at.reject(self.expected(), Unexpected::Str(v)))
    }

    fn bool<E: de::Error>(self, at: Site<'_>, v: bool) -> Result<Self::Out, E> {
        Err(at.reject(self.expected(), Unexpected::Bool(v)))
    }

    fn int<E: de::Error>(self, at: Site<'_>, v: i128) -> Result<Self::Out, E> {
        Err(at.reject(
            self.expected(),
            Unexpected::Other(&format!("integer `{v}`")),
        ))
    }

    fn float<E: de::Error>(self, at: Site<'_>, v: f64) -> Result<Self::Out, E> {
        Err(at.reject(self.expected(), Unexpected::Float(v)))
    }

    fn seq<'de, A: SeqAccess<'de>>(self, at: Site<'_>, _seq: A) -> Result<Self::Out, A::Error> {
        Err(at.reject(self.expected(), Unexpected::Seq))
    }

    fn map<'de, A: MapAccess<'de>>(self, at: Site<'_>, _map: A) -> Result<Self::Out, A::Error> {
        Err(at.reject(self.expected(), Unexpected::Map))
    }
}

/// Deserializes one node with `rule`, so that failures carry that node's position.
pub(crate) struct Check<'a, R> {
    pub(crate) at: Site<'a>,
    pub(crate) rule: R,
}

impl<'a, R> Check<'a, R> {
    pub(crate) fn new(at: Site<'a>, rule: R) -> Self {
        Self { at, rule }
    }
}

impl<'de, R: Rule> DeserializeSeed<'de> for Check<'_, R> {
    type Value = R::Out;

    fn deserialize<D: Deserializer<'de>>(self, de: D) -> Result<R::Out, D::Error> {
        let (at, expected) = (self.at, self.rule.expected());
        de.deserialize_any(self).inspect_err(|_| {
            // Inputs the visitor does not handle (tags, bytes, ...) fail inside serde
            // without a detail; name the key anyway. An earlier detail wins.
            let message = format!("expected {expected}");
            at.ctx.note(SpecErrorKind::InvalidValue, at.key, message);
        })
    }
}

impl<'de, R: Rule> Visitor<'de> for Check<'_, R> {
    type Value = R::Out;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.rule.expected())
    }

    fn visit_bool<E: de::Error>(self, v: bool) -> Result<R::Out, E> {
        self.rule.bool(self.at, v)
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<R::Out, E> {
        self.rule.int(self.at, v.into())
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<R::Out, E> {
        self.rule.int(self.at, v.into())
    }

    fn visit_i128<E: de::Error>(self, v: i128) -> Result<R::Out, E> {
        self.rule.int(self.at, v)
    }

    fn visit_u128<E: de::Error>(self, v: u128) -> Result<R::Out, E> {
        match i128::try_from(v) {
            Ok(v) => self.rule.int(self.at, v),
            Err(_) => Err(self
                .at
                .reject(self.rule.expected(), Unexpected::Other("integer"))),
        }
    }

    fn visit_f64<E: de::Error>(self, v: f64) -> Result<R::Out, E> {
        self.rule.float(self.at, v)
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<R::Out, E> {
        self.rule.str(self.at, v)
    }

    fn visit_unit<E: de::Error>(self) -> Result<R::Out, E> {
        Err(self
            .at
            .reject(self.rule.expected(), Unexpected::Other("null")))
    }

    fn visit_none<E: de::Error>(self) -> Result<R::Out, E> {
        self.visit_unit()
    }

    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<R::Out, A::Error> {
        self.rule.seq(self.at, seq)
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<R::Out, A::Error> {
        self.rule.map(self.at, map)
    }
}

/// A mapping key: must be one of `known` and not in `seen`.
pub(crate) struct KeyRule<'s> {
    pub(crate) known: &'static [&'static str],
    pub(crate) seen: &'s [&'static str],
}

pub(crate) fn key_check<'a>(
    ctx: &'a Ctx,
    known: &'static [&'static str],
    seen: &'a [&'static str],
) -> Check<'a, KeyRule<'a>> {
    Check::new(Site { ctx, key: None }, KeyRule { known, seen })
}

impl Rule for KeyRule<'_> {
    type Out = &'static str;

    fn expected(&self) -> &'static str {
        "a key name"
    }

    fn str<E: de::Error>(self, at: Site<'_>, v: &str) -> Result<&'static str, E> {
        if let Some(&key) = self.known.iter().find(|&&key| key == v) {
            if self.seen.contains(&key) {
                return Err(Site {
                    key: Some(key),
                    ..at
                }
                .invalid("duplicate key".to_owned()));
            }
            return Ok(key);
        }
        let message = match (v, suggest(v, self.known)) {
            ("name" | "id", _) => {
                "unknown key; the subagent id is the file name, not a key".to_owned()
            }
            (_, Some(key)) => format!("unknown key; did you mean `{key}`?"),
            (_, None) => {
                let known: Vec<String> = self.known.iter().map(|k| format!("`{k}`")).collect();
                format!("unknown key; expected one of {}", known.join(", "))
            }
        };
        Err(at.ctx.fail(SpecErrorKind::UnknownKey, Some(v), message))
    }
}

/// The known key that `key` most likely meant: same letters ignoring case, `_` and `-`, or a
/// common alias from other agent frameworks.
pub(crate) fn suggest(key: &str, known: &[&'static str]) -> Option<&'static str> {
    const ALIASES: &[(&str, &str)] = &[
        ("maxiters", "steps"),
        ("maxiterations", "steps"),
        ("maxsteps", "steps"),
        ("iterations", "steps"),
        ("temp", "temperature"),
        ("desc", "description"),
        ("tool", "tools"),
        ("allowedtools", "tools"),
        ("allowed", "allow"),
        ("allowlist", "allow"),
        ("denied", "deny"),
        ("denylist", "deny"),
        ("blocklist", "deny"),
    ];
    let fold = |s: &str| -> String {
        s.chars()
            .filter(|c| !matches!(c, '_' | '-'))
            .flat_map(char::to_lowercase)
            .collect()
    };
    let folded = fold(key);
    known
        .iter()
        .copied()
        .find(|k| fold(k) == folded)
        .or_else(|| {
            ALIASES
                .iter()
                .find(|(alias, _)| *alias == folded)
                .and_then(|(_, target)| known.iter().copied().find(|k| k == target))
        })
}

/// A non-empty string, trimmed.
pub(crate) struct Text;

impl Rule for Text {
    type Out = String;

    fn expected(&self) -> &'static str {
        "a non-empty string"
    }

    fn str<E: de::Error>(self, at: Site<'_>, v: &str) -> Result<String, E> {
        match v.trim() {
            "" => Err(at.invalid("must not be empty".to_owned())),
            v => Ok(v.to_owned()),
        }
    }
}

/// One tool name in a list: a non-empty string, trimmed.
pub(crate) struct Name;

impl Rule for Name {
    type Out = String;

    fn expected(&self) -> &'static str {
        "a tool name (a non-empty string)"
    }

    fn str<E: de::Error>(self, at: Site<'_>, v: &str) -> Result<String, E> {
        match v.trim() {
            "" => Err(at.invalid("tool names must not be empty".to_owned())),
            v => Ok(v.to_owned()),
        }
    }
}

/// A list of tool names (deduplicated, first order kept); with `comma`, a comma-separated
/// string is accepted too.
pub(crate) struct NamesRule {
    pub(crate) comma: bool,
}

impl Rule for NamesRule {
    type Out = Vec<String>;

    fn expected(&self) -> &'static str {
        if self.comma {
            "a list of tool names or a comma-separated string"
        } else {
            "an array of tool names"
        }
    }

    fn str<E: de::Error>(self, at: Site<'_>, v: &str) -> Result<Vec<String>, E> {
        if !self.comma {
            return Err(at.reject(self.expected(), Unexpected::Str(v)));
        }
        let mut names = Vec::new();
        for name in v.split(',').map(str::trim) {
            if name.is_empty() {
                return Err(at.invalid(format!(
                    "empty entry in the comma-separated tool list {v:?}"
                )));
            }
            push_unique(&mut names, name.to_owned());
        }
        Ok(names)
    }

    fn seq<'de, A: SeqAccess<'de>>(
        self,
        at: Site<'_>,
        mut seq: A,
    ) -> Result<Vec<String>, A::Error> {
        let mut names = Vec::new();
        while let Some(name) = seq.next_element_seed(Check::new(at, Name))? {
            push_unique(&mut names, name);
        }
        Ok(names)
    }
}

pub(crate) fn push_unique(names: &mut Vec<String>, name: String) {
    if !names.contains(&name) {
        names.push(name);
    }
}

/// `steps`: an integer in 1..=1000.
pub(crate) struct Steps;

impl Rule for Steps {
    type Out = u32;

    fn expected(&self) -> &'static str {
        "an integer from 1 to 1000"
    }

    fn int<E: de::Error>(self, at: Site<'_>, v: i128) -> Result<u32, E> {
        u32::try_from(v)
            .ok()
            .filter(|n| (1..=1000).contains(n))
            .ok_or_else(|| at.invalid(format!("expected {}, found {v}", self.expected())))
    }
}

/// A bounded sampling parameter; integers are accepted as numbers.
#[derive(Clone, Copy)]
pub(crate) enum Number {
    Temperature,
    TopP,
}

impl Rule for Number {
    type Out = f64;

    fn expected(&self) -> &'static str {
        match self {
            Number::Temperature => "a number from 0.0 to 2.0",
            Number::TopP => "a number greater than 0 and at most 1",
        }
    }

    fn int<E: de::Error>(self, at: Site<'_>, v: i128) -> Result<f64, E> {
        // Exact for every in-range value; large values stay out of range.
        self.float(at, v as f64)
    }

    fn float<E: de::Error>(self, at: Site<'_>, v: f64) -> Result<f64, E> {
        let ok = match self {
            Number::Temperature => (0.0..=2.0).contains(&v),
            Number::TopP => v > 0.0 && v <= 1.0,
        };
        if ok {
            Ok(v)
        } else {
            Err(at.invalid(format!("expected {}, found {v}", self.expected())))
        }
    }
}
