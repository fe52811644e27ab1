//! Masking inside JSON string literals of a tool result.
//!
//! A tool result rendered as JSON (an MCP resource or resource link, structured
//! content, any tool returning `serde_json::to_string(..)`) escapes a newline as the two
//! characters `\n`: the `n` sticks to the number after it, and the masker, which never
//! masks a number glued to a letter, skips it. So each string literal that contains an
//! escape is decoded, the decoded text is masked, and the literal is replaced by the
//! JSON encoding of the masked text (still valid JSON, same structure).

use std::borrow::Cow;

use rein_pii::SensitiveDataMasker;

/// A tool result's text masked: first inside its JSON string literals (see
/// [`mask_json_strings`]), then as a whole; `None` when nothing needed masking.
pub(super) fn mask_tool_text(masker: &SensitiveDataMasker, text: &str) -> Option<String> {
    let strings = mask_json_strings(masker, text);
    match masker.mask(strings.as_deref().unwrap_or(text)) {
        Cow::Owned(masked) => Some(masked),
        Cow::Borrowed(_) => strings,
    }
}

/// `text` with every JSON string literal holding an escape replaced by the literal of
/// its masked decoded value, or `None` when no literal needed masking.
///
/// A literal starts at a `"` and ends at the next unescaped `"`; a raw control
/// character (a real line end) cannot be inside one, so a stray quote in prose only
/// starts a candidate that ends at the end of its line. Linear in `text`, plus the
/// masker's cost on the literals with escapes.
pub(super) fn mask_json_strings(masker: &SensitiveDataMasker, text: &str) -> Option<String> {
    let bytes = text.as_bytes();
    let mut out: Option<String> = None;
    // Bytes of `text` before this are already in `out`.
    let mut copied = 0;
    let mut i = 0;
    while let Some(open) = bytes[i..].iter().position(|&b| b == b'"').map(|p| p + i) {
        let mut j = open + 1;
        let mut escaped = false;
        let close = loop {
            match bytes.get(j) {
                None => break None,
                Some(b'\\') => {
                    escaped = true;
                    j += 2;
                }
                Some(b'"') => break Some(j),
                Some(&b) if b < 0x20 => break None,
                Some(_) => j += 1,
            }
        };
        let Some(close) = close else {
            // Not a literal: look for the next one from where this candidate failed.
            if j >= bytes.len() {
                break;
            }
            i = j;
            continue;
        };
        i = close + 1;
        if !escaped {
            continue;
        }
        let literal = &text[open..=close];
        let Ok(decoded) = serde_json::from_str::<String>(literal) else {
            continue;
        };
        if let Cow::Owned(masked) = masker.mask(&decoded) {
            let out = out.get_or_insert_with(|| String::with_capacity(text.len()));
            out.push_str(&text[copied..open]);
            // Encoding a string as JSON cannot fail.
            out.push_str(&serde_json::to_string(&masked).unwrap_or_else(|_| "\"\"".to_owned()));
            copied = close + 1;
        }
    }
    let mut out = out?;
    out.push_str(&text[copied..]);
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn masker() -> SensitiveDataMasker {
        SensitiveDataMasker::builder().build().unwrap()
    }

    #[test]
    fn an_escaped_line_end_before_the_data_does_not_hide_it() {
        let rendered = serde_json::json!({"type": "resource", "resource": {
            "uri": "file:///c.txt",
            "text": "SSN:\n123-45-6789\ncard:\n4111111111111111"}})
        .to_string();
        assert_eq!(
            masker().mask(&rendered),
            rendered,
            "the masker alone skips it"
        );
        let masked = mask_json_strings(&masker(), &rendered).unwrap();
        let value: serde_json::Value = serde_json::from_str(&masked).unwrap();
        assert_eq!(value["resource"]["text"], "SSN:\n***\ncard:\n***");
        assert_eq!(value["resource"]["uri"], "file:///c.txt");
    }

    #[test]
    fn prose_quotes_and_literals_without_escapes_are_left_alone() {
        let m = masker();
        for text in [
            "a 5\" screen\nand \"a quote\" and \"an open one",
            "{\"a\": \"no escapes 4111111111111111\"}",
            "\"\\",
            "\"bad escape \\q 4111111111111111\\n\"",
            "",
        ] {
            assert_eq!(mask_json_strings(&m, text), None, "{text:?}");
        }
        // A stray quote ends at its line; the literal on the next line is still found.
        let text = "he said \"hi\n{\"t\":\"x\\n4111111111111111\"}";
        assert_eq!(
            mask_json_strings(&m, text).unwrap(),
            "he said \"hi\n{\"t\":\"x\\n***\"}"
        );
    }
}
