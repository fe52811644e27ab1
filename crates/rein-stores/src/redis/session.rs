//! Loading and saving sessions on Redis: a load reads the hash and the whole list in
//! one script; a save checks the stored format, key, version (and, fenced, the lease)
//! and rewrites only the list's tail from the first changed message, so its cost and
//! the bytes it sends do not grow with the history. A session in the whole-history
//! format (`rein-session/1`) loads as before and is converted by its first save.

use rein_core::Msg;
use rein_core::store::{
    Lease, SessionKey, StoreError, StoreErrorKind, StoredSession, next_version,
};

use super::RedisSessionStore;
use super::connection::redis_error;
use crate::{
    FORMAT, FORMAT_APPEND, array_bytes, decode_each, decode_messages, encode_each, key_string,
};

/// What one run of the save script did.
enum Saved {
    /// Saved: the new version.
    Version(u64),
    /// Nothing written: the session is in the whole-history format; run again with
    /// nothing unchanged to convert it.
    Convert,
}

pub(super) fn corrupt(key: &SessionKey, why: &str) -> StoreError {
    StoreError::with_kind(
        StoreErrorKind::Corrupt,
        key,
        format!("the stored value is not a rein session ({why}); it is never overwritten"),
    )
}

/// A stored version in the one grammar saves accept (`^[1-9][0-9]*$`, within `u64`): a
/// session that loads can always be saved again, so a malformed version fails closed
/// at load, before any tool of the call runs.
fn parse_version(bytes: &[u8]) -> Option<u64> {
    let digits = bytes.first().is_some_and(|b| (b'1'..=b'9').contains(b))
        && bytes.iter().all(u8::is_ascii_digit);
    if !digits {
        return None;
    }
    std::str::from_utf8(bytes).ok()?.parse().ok()
}

pub(super) fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

impl RedisSessionStore {
    pub(super) async fn inner_load(&self, key: &SessionKey) -> Result<StoredSession, StoreError> {
        rein_core::store::check_key(key)?;
        let mut conn = self.conn();
        let reply: Vec<Vec<u8>> = self
            .scripts
            .load
            .key(self.data_key(key))
            .key(self.messages_key(key))
            .arg(self.max_bytes)
            .invoke_async(&mut conn)
            .await
            .map_err(|e| redis_error(Some(key), "loading the session", e))?;
        self.decode_load(key, &reply)
    }

    /// The session in a reply of the load function (see `scripts`), or why it cannot
    /// be loaded.
    pub(super) fn decode_load(
        &self,
        key: &SessionKey,
        reply: &[Vec<u8>],
    ) -> Result<StoredSession, StoreError> {
        match reply {
            [status] if status == b"none" => Ok(StoredSession::default()),
            [status, why] if status == b"corrupt" => Err(corrupt(key, &text(why))),
            [status, n] if status == b"too_large" => Err(rein_core::store::too_large(
                key,
                "loading",
                text(n).parse().unwrap_or(u64::MAX),
                self.max_bytes,
            )),
            [status, format, version, stored_key, messages] if status == b"ok1" => {
                let version = self.check_loaded(key, FORMAT, format, version, stored_key)?;
                let messages = decode_messages(key, messages, "the Redis hash")?;
                Ok(StoredSession::new(messages, version))
            }
            [status, format, version, stored_key, length, messages @ ..] if status == b"ok2" => {
                let version = self.check_loaded(key, FORMAT_APPEND, format, version, stored_key)?;
                if text(length).parse::<usize>().ok() != Some(messages.len()) {
                    return Err(corrupt(
                        key,
                        &format!(
                            "its length field says {} messages, its list holds {}",
                            text(length),
                            messages.len()
                        ),
                    ));
                }
                let messages = decode_each(key, messages, "the Redis message list")?;
                Ok(StoredSession::new(messages, version))
            }
            _ => Err(StoreError::with_kind(
                StoreErrorKind::Io,
                key,
                "Redis: unexpected reply from the load script",
            )),
        }
    }

    /// The version of a loaded hash in `want` format holding this session, or why it is
    /// corrupt.
    fn check_loaded(
        &self,
        key: &SessionKey,
        want: &str,
        format: &[u8],
        version: &[u8],
        stored_key: &[u8],
    ) -> Result<u64, StoreError> {
        if format != want.as_bytes() {
            return Err(corrupt(key, &format!("format `{}`", text(format))));
        }
        if stored_key != key_string(key).as_bytes() {
            return Err(corrupt(key, "it holds another session"));
        }
        parse_version(version).ok_or_else(|| {
            corrupt(
                key,
                &format!(
                    "its `version` field `{}` is not a positive integer without sign or \
                     leading zero (what a save writes)",
                    text(version)
                ),
            )
        })
    }

    /// A save of `messages`, the first `unchanged` of which the store holds at
    /// `expected` (see `SessionStore::save_from`): one script trims the list to them and
    /// appends the rest. A session still in the whole-history format is converted by a
    /// second run of the script with nothing unchanged (once per session).
    pub(super) async fn inner_save(
        &self,
        key: &SessionKey,
        messages: &[Msg],
        unchanged: usize,
        expected: u64,
        lease: Option<&Lease>,
    ) -> Result<u64, StoreError> {
        self.save_releasing(key, messages, unchanged, expected, lease, false)
            .await
    }

    /// [`inner_save`](Self::inner_save); with `release`, the script that writes also
    /// releases `lease` (nothing is released when nothing is written).
    pub(super) async fn save_releasing(
        &self,
        key: &SessionKey,
        messages: &[Msg],
        unchanged: usize,
        expected: u64,
        lease: Option<&Lease>,
        release: bool,
    ) -> Result<u64, StoreError> {
        let unchanged = unchanged.min(messages.len());
        match self
            .save_script(key, messages, unchanged, expected, lease, release)
            .await?
        {
            Saved::Version(version) => Ok(version),
            Saved::Convert => match self
                .save_script(key, messages, 0, expected, lease, release)
                .await?
            {
                Saved::Version(version) => Ok(version),
                Saved::Convert => Err(StoreError::with_kind(
                    StoreErrorKind::Io,
                    key,
                    "Redis: unexpected reply from the save script (convert on a full rewrite)",
                )),
            },
        }
    }

    /// One run of the save script with `messages[unchanged..]`.
    async fn save_script(
        &self,
        key: &SessionKey,
        messages: &[Msg],
        unchanged: usize,
        expected: u64,
        lease: Option<&Lease>,
        release: bool,
    ) -> Result<Saved, StoreError> {
        rein_core::store::check_key(key)?;
        rein_core::store::check_storable(key, &messages[unchanged..])?;
        if lease.is_some_and(|l| l.token().is_empty()) {
            // The script reads an empty token as "unfenced": such a lease is never held.
            return Err(StoreError::with_kind(
                StoreErrorKind::LeaseLost,
                key,
                "nothing saved: a lease with an empty token is not held",
            ));
        }
        let version = next_version(key, expected)?;
        let written = encode_each(key, &messages[unchanged..])?;
        // What is written alone may already be too large (without a round trip); the
        // script checks the whole history, with the bytes it keeps.
        let written_bytes: usize = written.iter().map(String::len).sum();
        let floor = array_bytes(
            u64::try_from(written.len()).unwrap_or(u64::MAX),
            u64::try_from(written_bytes).unwrap_or(u64::MAX),
        );
        let max = u64::try_from(self.max_bytes).unwrap_or(u64::MAX);
        if floor > max {
            return Err(rein_core::store::too_large(
                key,
                "saving",
                floor,
                self.max_bytes,
            ));
        }
        let mut conn = self.conn();
        let mut invocation = self.scripts.save.prepare_invoke();
        invocation
            .key(self.data_key(key))
            .key(self.user_key(key.user_id.as_deref()))
            .key(self.lease_key(key))
            .key(self.messages_key(key))
            .arg(expected.to_string())
            .arg(version.to_string())
            .arg(key_string(key))
            .arg(&key.session_id)
            .arg(lease.map_or("", Lease::token))
            .arg(lease.map_or(0, Lease::fence).to_string())
            .arg(unchanged)
            .arg(self.max_bytes)
            .arg(if release { "1" } else { "0" });
        for text in &written {
            invocation.arg(text.as_str());
        }
        let reply: Vec<Vec<u8>> = invocation
            .invoke_async(&mut conn)
            .await
            .map_err(|e| redis_error(Some(key), "saving the session", e))?;
        match reply.as_slice() {
            [status, _] if status == b"ok" => Ok(Saved::Version(version)),
            [status] if status == b"convert" => Ok(Saved::Convert),
            [status, found] if status == b"conflict" => {
                let found = text(found).parse().unwrap_or(0);
                Err(StoreError::conflict(key, expected, found))
            }
            [status, length] if status == b"short" => {
                Err(rein_core::store::unchanged_beyond_stored(
                    key,
                    unchanged,
                    text(length).parse().unwrap_or(0),
                    expected,
                ))
            }
            [status, bytes] if status == b"too_large" => Err(rein_core::store::too_large(
                key,
                "saving",
                text(bytes).parse().unwrap_or(u64::MAX),
                self.max_bytes,
            )),
            [status, why] if status == b"corrupt" => Err(corrupt(key, &text(why))),
            [status, why] if status == b"lost" => Err(StoreError::with_kind(
                StoreErrorKind::LeaseLost,
                key,
                format!("nothing saved: {}", text(why)),
            )),
            _ => Err(StoreError::with_kind(
                StoreErrorKind::Io,
                key,
                "Redis: unexpected reply from the save script",
            )),
        }
    }

    pub(super) async fn inner_delete(&self, key: &SessionKey) -> Result<bool, StoreError> {
        let mut conn = self.conn();
        let removed: u64 = self
            .scripts
            .delete
            .key(self.data_key(key))
            .key(self.user_key(key.user_id.as_deref()))
            .key(self.messages_key(key))
            .arg(&key.session_id)
            .invoke_async(&mut conn)
            .await
            .map_err(|e| redis_error(Some(key), "deleting the session", e))?;
        Ok(removed > 0)
    }

    pub(super) async fn inner_list(
        &self,
        user_id: Option<&str>,
    ) -> Result<Vec<SessionKey>, StoreError> {
        let mut conn = self.conn();
        let mut ids: Vec<String> = redis::cmd("SMEMBERS")
            .arg(self.user_key(user_id))
            .query_async(&mut conn)
            .await
            .map_err(|e| redis_error(None, "listing the sessions", e))?;
        ids.sort();
        Ok(ids
            .into_iter()
            .map(|id| SessionKey::new(user_id, &id))
            .collect())
    }
}
