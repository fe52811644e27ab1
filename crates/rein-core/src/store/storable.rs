//! What every session store can hold: the one key contract and the one nesting bound,
//! checked the same way by the file, in-memory, Redis and PostgreSQL stores (and
//! available to a user's own store), so that nothing is saved that cannot be loaded.

use serde_json::Value;

use super::key::SessionKey;
use super::session::{StoreError, StoreErrorKind};
use crate::message::{ContentBlock, Msg};

/// The deepest JSON nesting any value inside a stored message may have (a tool call's
/// arguments, a metadata value), counted from the value itself: 96. A store's own
/// format adds at most 8 levels around it (the session envelope, the message, its
/// content block), which keeps every stored session under serde_json's 128-level
/// parsing limit. A save with a deeper value fails with
/// [`StoreErrorKind::Unstorable`] and writes nothing. Tool arguments are bounded tighter
/// at admission ([`MAX_ARGUMENT_DEPTH`](crate::tool::MAX_ARGUMENT_DEPTH)).
pub const MAX_STORED_DEPTH: usize = 96;

/// The largest session a store saves or loads by default, in bytes of its stored form
/// (the JSON history): 32 MiB. A save of more fails with [`StoreErrorKind::TooLarge`]
/// and writes nothing; a load of a larger stored value fails the same way before it is
/// read whole. Set per store (`FileSessionStore::max_session_bytes`, and the same
/// method on the Redis and PostgreSQL builders).
pub const DEFAULT_MAX_SESSION_BYTES: usize = 32 * 1024 * 1024;

/// For store implementations: the [`StoreErrorKind::TooLarge`] error of a session of
/// `bytes` bytes over `max`, while `doing` (`"saving"`, `"loading"`); the message names
/// the session, both sizes and the setting that raises the maximum.
pub fn too_large(key: &SessionKey, doing: &str, bytes: u64, max: usize) -> StoreError {
    StoreError::with_kind(
        StoreErrorKind::TooLarge,
        key,
        format!(
            "{doing} the session: it is {bytes} bytes; the store's maximum session size is \
             {max} bytes (max_session_bytes); nothing was written"
        ),
    )
}

/// For store implementations: checks what a save would write against the store's
/// maximum session size.
///
/// # Errors
/// [`too_large`] when `payload` is over `max` bytes.
pub fn check_size(key: &SessionKey, payload: &[u8], max: usize) -> Result<(), StoreError> {
    if payload.len() > max {
        return Err(too_large(key, "saving", payload.len() as u64, max));
    }
    Ok(())
}

/// The longest user id or session id a key may have, in bytes: 1,024.
pub const MAX_KEY_BYTES: usize = 1024;

/// Why no store can hold a session under this key, or `None`: an id contains U+0000
/// (PostgreSQL text cannot hold it, and a C-string API truncates at it), or an id is
/// longer than [`MAX_KEY_BYTES`]. Every other UTF-8 string is a valid id on every store
/// (the empty string, slashes, dots, quotes, glob and `LIKE` characters included).
pub fn key_problem(key: &SessionKey) -> Option<String> {
    let check = |what: &str, id: &str| -> Option<String> {
        if id.contains('\0') {
            return Some(format!(
                "the {what} contains U+0000 (NUL), which no store can hold"
            ));
        }
        if id.len() > MAX_KEY_BYTES {
            return Some(format!(
                "the {what} is {} bytes long; at most {MAX_KEY_BYTES}",
                id.len()
            ));
        }
        None
    };
    check("session id", &key.session_id)
        .or_else(|| key.user_id.as_deref().and_then(|u| check("user id", u)))
}

/// [`key_problem`] as a store error ([`StoreErrorKind::InvalidKey`]), for stores to
/// call at every load and save.
///
/// # Errors
/// The key breaks the key contract.
pub fn check_key(key: &SessionKey) -> Result<(), StoreError> {
    match key_problem(key) {
        None => Ok(()),
        Some(why) => Err(StoreError::with_kind(StoreErrorKind::InvalidKey, key, why)),
    }
}

/// Checks that `messages` can be stored and loaded back by every store: no value nested
/// deeper than [`MAX_STORED_DEPTH`]. Stores call it before they write.
///
/// # Errors
/// [`StoreErrorKind::Unstorable`] naming the message and the field; nothing is written.
pub fn check_storable(key: &SessionKey, messages: &[Msg]) -> Result<(), StoreError> {
    for (i, m) in messages.iter().enumerate() {
        let too_deep = |what: String, depth: usize| {
            StoreError::with_kind(
                StoreErrorKind::Unstorable,
                key,
                format!(
                    "message {i}: {what} is nested {depth} levels deep; a stored value may be \
                     nested at most {MAX_STORED_DEPTH} levels (it could not be loaded back)"
                ),
            )
        };
        for (k, v) in &m.metadata {
            let d = depth(v);
            if d > MAX_STORED_DEPTH {
                return Err(too_deep(format!("metadata `{k}`"), d));
            }
        }
        for block in &m.content {
            if let ContentBlock::ToolUse(u) = block {
                let d = depth(&u.input);
                if d > MAX_STORED_DEPTH {
                    return Err(too_deep(
                        format!("the arguments of tool call `{}`", u.id),
                        d,
                    ));
                }
            }
        }
    }
    Ok(())
}

/// The nesting depth of a JSON value: 1 for a scalar, one more per array or object
/// level. Iterative, so a hostile value cannot overflow the stack; a scalar or a flat
/// object (most tool arguments) allocates nothing.
pub(crate) fn depth(v: &Value) -> usize {
    let nested = |x: &Value| matches!(x, Value::Array(_) | Value::Object(_));
    let flat = match v {
        Value::Array(items) => !items.iter().any(nested),
        Value::Object(map) => !map.values().any(nested),
        _ => return 1,
    };
    let empty = match v {
        Value::Array(items) => items.is_empty(),
        Value::Object(map) => map.is_empty(),
        _ => false,
    };
    if flat {
        return if empty { 1 } else { 2 };
    }
    let mut max = 0;
    let mut stack = vec![(v, 1usize)];
    while let Some((v, d)) = stack.pop() {
        max = max.max(d);
        match v {
            Value::Array(items) => stack.extend(items.iter().map(|x| (x, d + 1))),
            Value::Object(map) => stack.extend(map.values().map(|x| (x, d + 1))),
            _ => {}
        }
    }
    max
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn depth_counts_every_level() {
        assert_eq!(depth(&json!(1)), 1);
        assert_eq!(depth(&json!([])), 1);
        assert_eq!(depth(&json!({"a": [1, {"b": 2}]})), 4);
        assert_eq!(depth(&json!({"a": 1, "b": "x"})), 2);
        assert_eq!(depth(&json!([[]])), 2);
    }

    #[test]
    fn a_key_no_store_can_hold_is_named() {
        assert!(key_problem(&SessionKey::new(None, "a/b:*%_?")).is_none());
        assert!(key_problem(&SessionKey::new(None, "")).is_none());
        assert!(
            key_problem(&SessionKey::new(Some("u\0"), "s"))
                .unwrap()
                .contains("user id")
        );
        assert!(
            key_problem(&SessionKey::new(None, &"x".repeat(1025)))
                .unwrap()
                .contains("1025 bytes")
        );
    }
}
