//! What a recording hides: the [`Redactor`] trait, and applying it to texts, to texts
//! streamed in pieces (keeping the pieces' boundaries) and to JSON values.

use std::borrow::Cow;
use std::ops::Range;
use std::sync::Arc;

use serde_json::Value;

/// One span a [`Redactor`] hides: the bytes `range` of the text are replaced by
/// `replacement`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Redaction {
    /// Byte range in the searched text.
    pub range: Range<usize>,
    /// What is written instead (e.g. `[redacted:email]`).
    pub replacement: String,
}

impl Redaction {
    /// The span `range`, replaced by `replacement`.
    pub fn new(range: Range<usize>, replacement: impl Into<String>) -> Self {
        Self {
            range,
            replacement: replacement.into(),
        }
    }
}

/// Finds what a recording must not contain: personal data, secrets, anything else a
/// fixture committed to a repository must not hold.
///
/// [`find`](Redactor::find) returns the spans to replace. Spans may come in any order and
/// may overlap (overlapping spans are merged, keeping the first one's replacement);
/// spans out of range, empty or not on `char` boundaries are ignored. A redactor must be
/// deterministic, and should be idempotent (its own replacements contain nothing it
/// finds): a replay redacts requests whose assistant messages were rebuilt from already
/// redacted chunks, and compares them with what the recording redacted.
///
/// `rein::model::replay::PiiRedactor` (the `rein-pii` masker plus common secret shapes)
/// is the one to use; a closure `Fn(&str) -> Vec<Redaction>` is a redactor too, and
/// `Vec<Arc<dyn Redactor>>` combines several (a user's redactor next to the masker).
pub trait Redactor: Send + Sync + 'static {
    /// The spans of `text` to replace.
    fn find(&self, text: &str) -> Vec<Redaction>;

    /// A short name written in the fixture's header (default `"custom"`).
    fn name(&self) -> &str {
        "custom"
    }
}

impl<F> Redactor for F
where
    F: Fn(&str) -> Vec<Redaction> + Send + Sync + 'static,
{
    fn find(&self, text: &str) -> Vec<Redaction> {
        self(text)
    }
}

/// Hides nothing: a recording written with it holds the run verbatim. Only for runs
/// with nothing to hide (the header says `"redactor":"none"`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NoRedaction;

impl Redactor for NoRedaction {
    fn find(&self, _text: &str) -> Vec<Redaction> {
        Vec::new()
    }

    fn name(&self) -> &str {
        "none"
    }
}

impl<R: Redactor + ?Sized> Redactor for Arc<R> {
    fn find(&self, text: &str) -> Vec<Redaction> {
        (**self).find(text)
    }

    fn name(&self) -> &str {
        (**self).name()
    }
}

/// Several redactors: the spans every one of them finds in the same text, merged where
/// they overlap (the header names the chain `"chain"`).
impl Redactor for Vec<Arc<dyn Redactor>> {
    fn find(&self, text: &str) -> Vec<Redaction> {
        self.iter().flat_map(|r| r.find(text)).collect()
    }

    fn name(&self) -> &str {
        "chain"
    }
}

/// Sorted, valid, non-overlapping spans of `found` for `text`.
fn normalise(text: &str, mut found: Vec<Redaction>) -> Vec<Redaction> {
    found.retain(|r| {
        r.range.start < r.range.end
            && r.range.end <= text.len()
            && text.is_char_boundary(r.range.start)
            && text.is_char_boundary(r.range.end)
    });
    found.sort_by_key(|r| r.range.start);
    let mut out: Vec<Redaction> = Vec::with_capacity(found.len());
    for r in found {
        match out.last_mut() {
            Some(last) if r.range.start < last.range.end => {
                last.range.end = last.range.end.max(r.range.end);
            }
            _ => out.push(r),
        }
    }
    out
}

/// `text` with every span `redactor` finds replaced. Borrowed when nothing is found.
pub fn redact_text<'a>(redactor: &dyn Redactor, text: &'a str) -> Cow<'a, str> {
    let spans = normalise(text, redactor.find(text));
    if spans.is_empty() {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len());
    let mut last = 0;
    for s in &spans {
        out.push_str(&text[last..s.range.start]);
        out.push_str(&s.replacement);
        last = s.range.end;
    }
    out.push_str(&text[last..]);
    Cow::Owned(out)
}

/// Redacts the concatenation of `pieces` as one text and cuts it again at the pieces'
/// boundaries, mapped through the replacements: a boundary before a span moves by the
/// length change of the spans before it; a boundary inside a span moves to the end of
/// its replacement. Returns the pieces unchanged when nothing is found.
pub(super) fn redact_pieces(redactor: &dyn Redactor, pieces: &[String]) -> Vec<String> {
    let text: String = pieces.concat();
    let spans = normalise(&text, redactor.find(&text));
    if spans.is_empty() {
        return pieces.to_vec();
    }
    let mut out = String::with_capacity(text.len());
    // (original offset, redacted offset) at each span's start and end.
    let mut marks: Vec<(usize, usize, usize, usize)> = Vec::with_capacity(spans.len());
    let mut last = 0;
    for s in &spans {
        out.push_str(&text[last..s.range.start]);
        let start_out = out.len();
        out.push_str(&s.replacement);
        marks.push((s.range.start, s.range.end, start_out, out.len()));
        last = s.range.end;
    }
    out.push_str(&text[last..]);
    let map = |b: usize| -> usize {
        let mut shift: isize = 0;
        for &(start, end, _, end_out) in &marks {
            if b <= start {
                break;
            }
            if b < end {
                return end_out;
            }
            shift = end_out as isize - end as isize;
        }
        (b as isize + shift) as usize
    };
    let mut result = Vec::with_capacity(pieces.len());
    let mut from_orig = 0;
    let mut from_out = 0;
    for p in pieces {
        let to_orig = from_orig + p.len();
        let to_out = map(to_orig).max(from_out);
        result.push(out[from_out..to_out].to_owned());
        from_orig = to_orig;
        from_out = to_out;
    }
    result
}

/// Redacts a JSON value in place: string values, and numbers whose text the redactor
/// matches (they become the redacted text as a string). Object keys are kept. Returns
/// whether anything changed.
pub(super) fn redact_value(redactor: &dyn Redactor, value: &mut Value) -> bool {
    match value {
        Value::String(s) => match redact_text(redactor, s) {
            Cow::Borrowed(_) => false,
            Cow::Owned(new) => {
                *s = new;
                true
            }
        },
        Value::Number(n) => {
            let text = n.to_string();
            match redact_text(redactor, &text) {
                Cow::Borrowed(_) => false,
                Cow::Owned(new) => {
                    *value = Value::String(new);
                    true
                }
            }
        }
        Value::Array(items) => items
            .iter_mut()
            .fold(false, |changed, v| redact_value(redactor, v) | changed),
        Value::Object(map) => map
            .values_mut()
            .fold(false, |changed, v| redact_value(redactor, v) | changed),
        Value::Null | Value::Bool(_) => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn digits(text: &str) -> Vec<Redaction> {
        let mut out = Vec::new();
        let mut start = None;
        for (i, c) in text.char_indices().chain([(text.len(), ' ')]) {
            match (c.is_ascii_digit(), start) {
                (true, None) => start = Some(i),
                (false, Some(s)) if i - s >= 4 => {
                    out.push(Redaction::new(s..i, "[n]"));
                    start = None;
                }
                (false, Some(_)) => start = None,
                _ => {}
            }
        }
        out
    }

    #[test]
    fn a_number_split_over_pieces_is_redacted_and_the_boundaries_are_mapped() {
        let pieces = vec![
            "card 41".to_owned(),
            "111111 ok".to_owned(),
            " bye".to_owned(),
        ];
        let out = redact_pieces(&digits, &pieces);
        assert_eq!(out, ["card [n]", " ok", " bye"]);
        assert_eq!(out.concat(), redact_text(&digits, &pieces.concat()));
    }

    #[test]
    fn a_piece_inside_a_span_becomes_empty_and_untouched_pieces_keep_their_text() {
        let pieces: Vec<String> = ["a 12", "34", "56 b", " c"].map(str::to_owned).into();
        assert_eq!(redact_pieces(&digits, &pieces), ["a [n]", "", " b", " c"]);
        let clean: Vec<String> = ["no ", "digits"].map(str::to_owned).into();
        assert_eq!(redact_pieces(&digits, &clean), clean);
    }

    #[test]
    fn invalid_and_overlapping_spans_are_ignored_or_merged() {
        let r = |_: &str| {
            vec![
                Redaction::new(Range { start: 4, end: 2 }, "x"),
                Redaction::new(0..99, "x"),
                Redaction::new(2..5, "[a]"),
                Redaction::new(0..3, "[b]"),
            ]
        };
        assert_eq!(redact_text(&r, "abcdefg"), "[b]fg");
    }

    #[test]
    fn a_chain_applies_every_redactor_and_merges_their_spans() {
        let words = |text: &str| match text.find("secret") {
            Some(i) => vec![Redaction::new(i..i + 6, "[s]")],
            None => Vec::new(),
        };
        let chain: Vec<Arc<dyn Redactor>> = vec![Arc::new(digits), Arc::new(words)];
        assert_eq!(redact_text(&chain, "secret 12345 ok"), "[s] [n] ok");
        assert_eq!(chain.name(), "chain");
    }

    #[test]
    fn json_numbers_that_match_become_redacted_strings() {
        let mut v = serde_json::json!({"card": 4111111111111111u64, "n": 12, "s": ["x 5555"]});
        assert!(redact_value(&digits, &mut v));
        assert_eq!(
            v,
            serde_json::json!({"card": "[n]", "n": 12, "s": ["x [n]"]})
        );
    }
}
