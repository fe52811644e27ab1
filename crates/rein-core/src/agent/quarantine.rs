//! Quarantined content: documents the model refers to by handle and never reads.
//!
//! A tool that declares [`ToolCapabilities::quarantined`](crate::ToolCapabilities::quarantined)
//! has its results kept out of the model's context: after its `PostActing` hooks (which
//! see, mask and audit the real text), the result the model reads becomes a handle
//! (`$doc1`, `$doc2`, … numbered in the order the session quarantined them, so every
//! replica names a document alike) and one sentence saying what it is. The text and its
//! label are stored in the tool message's metadata under [`QUARANTINE_KEY`], so they
//! persist with the session and survive compaction (the messages that hold them are
//! never summarized away: see below).
//!
//! The model can pass a handle as a tool argument: any string argument that contains
//! `$docN` has it replaced with the document's text **after** `PreActing` — hooks see
//! the handle, and [`PreActingEvent::argument_label`](crate::hook::PreActingEvent::argument_label)
//! gives the label of what the handles stand for. A call naming a handle the session
//! does not hold is refused with an error result naming it. The tool's result then
//! carries the documents' labels (data flows through the tool), unless the tool endorses
//! it ([`ToolContext::endorse_result`](crate::ToolContext::endorse_result)) — what an
//! extraction tool does for a bool or a choice among values the model listed.
//!
//! The model's own context stays at the label of what it did read, so a policy that
//! stops state-changing calls under untrusted context does not stop a planner that only
//! moved untrusted documents around by handle.

use std::collections::HashMap;

use serde_json::{Map, Value};

use crate::label::Label;
use crate::message::{Msg, ToolResult};

/// Metadata key of a tool message's quarantined documents: an object from handle
/// (`"$doc1"`) to `{"label": "untrusted/public", "text": "..."}`.
pub const QUARANTINE_KEY: &str = "rein.quarantine";

/// The prefix of every handle.
pub const HANDLE_PREFIX: &str = "$doc";

/// The session's quarantined documents, by handle.
#[derive(Debug, Default)]
pub(crate) struct Handles {
    docs: HashMap<String, (Label, String)>,
}

impl Handles {
    /// The documents stored in `messages` (an unreadable entry reads as the top label
    /// with no text: a call naming it is refused).
    pub(crate) fn of(messages: &[Msg]) -> Self {
        let mut docs = HashMap::new();
        for m in messages {
            let Some(Value::Object(map)) = m.metadata.get(QUARANTINE_KEY) else {
                continue;
            };
            for (handle, doc) in map {
                let label = doc
                    .get("label")
                    .and_then(Value::as_str)
                    .and_then(|s| s.parse().ok())
                    .unwrap_or(Label::TOP);
                if let Some(text) = doc.get("text").and_then(Value::as_str) {
                    docs.insert(handle.clone(), (label, text.to_owned()));
                }
            }
        }
        Self { docs }
    }

    /// How many documents the session holds (the next handle is `$doc{len+1}`).
    pub(crate) fn len(&self) -> usize {
        self.docs.len()
    }

    /// The join of the labels of the documents `value` names (unknown handles: none).
    pub(crate) fn label_of(&self, value: &Value) -> Label {
        let mut label = Label::BOTTOM;
        visit_handles(value, &mut |h| {
            if let Some((l, _)) = self.docs.get(h) {
                label = label.join(*l);
            }
        });
        label
    }

    /// `value` with every handle replaced by its document's text; `Ok(None)` when it
    /// names none.
    ///
    /// # Errors
    /// The first handle the session does not hold.
    pub(crate) fn substitute(&self, value: &Value) -> Result<Option<Value>, String> {
        let mut found = false;
        let mut unknown = None;
        visit_handles(value, &mut |h| {
            found = true;
            if unknown.is_none() && !self.docs.contains_key(h) {
                unknown = Some(h.to_owned());
            }
        });
        if let Some(h) = unknown {
            return Err(h);
        }
        if !found {
            return Ok(None);
        }
        Ok(Some(self.replace(value)))
    }

    fn replace(&self, value: &Value) -> Value {
        match value {
            Value::String(s) => Value::String(self.replace_str(s)),
            Value::Array(a) => Value::Array(a.iter().map(|v| self.replace(v)).collect()),
            Value::Object(o) => Value::Object(
                o.iter()
                    .map(|(k, v)| (k.clone(), self.replace(v)))
                    .collect::<Map<_, _>>(),
            ),
            other => other.clone(),
        }
    }

    fn replace_str(&self, s: &str) -> String {
        let mut out = String::with_capacity(s.len());
        let mut rest = s;
        while let Some((before, handle, after)) = next_handle(rest) {
            out.push_str(before);
            match self.docs.get(handle) {
                Some((_, text)) => out.push_str(text),
                None => out.push_str(handle),
            }
            rest = after;
        }
        out.push_str(rest);
        out
    }
}

/// Splits `s` at its first handle: the text before, the handle, the text after.
fn next_handle(s: &str) -> Option<(&str, &str, &str)> {
    let mut from = 0;
    while let Some(i) = s[from..].find(HANDLE_PREFIX) {
        let start = from + i;
        let digits = s[start + HANDLE_PREFIX.len()..]
            .bytes()
            .take_while(u8::is_ascii_digit)
            .count();
        if digits > 0 {
            let end = start + HANDLE_PREFIX.len() + digits;
            return Some((&s[..start], &s[start..end], &s[end..]));
        }
        from = start + HANDLE_PREFIX.len();
    }
    None
}

/// Calls `f` with every handle in the strings of `value`.
fn visit_handles<'a>(value: &'a Value, f: &mut impl FnMut(&'a str)) {
    match value {
        Value::String(s) => {
            let mut rest = s.as_str();
            while let Some((_, h, after)) = next_handle(rest) {
                f(h);
                rest = after;
            }
        }
        Value::Array(a) => a.iter().for_each(|v| visit_handles(v, f)),
        Value::Object(o) => o.values().for_each(|v| visit_handles(v, f)),
        _ => {}
    }
}

/// Whether `value` names any handle (cheap: no allocation).
pub(crate) fn names_handles(value: &Value) -> bool {
    let mut any = false;
    visit_handles(value, &mut |_| any = true);
    any
}

/// Quarantines `result` as document `handle`: returns the stored entry and leaves, in
/// its place, what the model reads.
pub(crate) fn quarantine(result: &mut ToolResult, handle: &str, label: Label) -> Value {
    let text = std::mem::take(&mut result.content);
    result.content = format!(
        "{handle} (quarantined: the result of `{}`, {} characters, is stored as document \
         {handle}; you cannot read it. Pass \"{handle}\" as a tool argument to use it, or ask \
         an extraction tool for a small value from it.)",
        result.name,
        text.chars().count()
    );
    let mut doc = Map::new();
    doc.insert("label".into(), Value::String(label.to_string()));
    doc.insert("text".into(), Value::String(text));
    Value::Object(doc)
}

/// The quarantined documents of `messages`, merged into one metadata value (`None`
/// when they hold none).
pub(crate) fn collect(messages: &[Msg]) -> Option<Value> {
    let mut all = Map::new();
    for m in messages {
        if let Some(Value::Object(map)) = m.metadata.get(QUARANTINE_KEY) {
            all.extend(map.iter().map(|(k, v)| (k.clone(), v.clone())));
        }
    }
    (!all.is_empty()).then_some(Value::Object(all))
}

/// Adds a quarantined document to a tool message's metadata.
pub(crate) fn store(msg: &mut Msg, handle: String, doc: Value) {
    let entry = msg
        .metadata
        .entry(QUARANTINE_KEY.to_owned())
        .or_insert_with(|| Value::Object(Map::new()));
    if let Value::Object(map) = entry {
        map.insert(handle, doc);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn handles() -> Handles {
        let mut m = Msg::tool([]);
        store(
            &mut m,
            "$doc1".into(),
            json!({"label": "untrusted/private", "text": "IBAN DE02"}),
        );
        Handles::of(&[m])
    }

    #[test]
    fn handles_in_any_string_of_the_arguments_are_replaced_and_labelled() {
        let h = handles();
        let args = json!({"to": "bob", "body": ["see $doc1.", {"x": "$doc1"}]});
        assert_eq!(
            h.substitute(&args),
            Ok(Some(
                json!({"to": "bob", "body": ["see IBAN DE02.", {"x": "IBAN DE02"}]})
            ))
        );
        assert_eq!(h.label_of(&args), "untrusted/private".parse().unwrap());
        assert_eq!(h.substitute(&json!({"a": "$doc"})), Ok(None));
        assert_eq!(h.substitute(&json!({"a": "$doc12"})), Err("$doc12".into()));
    }
}
