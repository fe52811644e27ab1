//! Loading and saving sessions on PostgreSQL: a load reads the session row and its
//! message rows in one statement (one snapshot); a save is one statement that changes
//! the session row only at the expected version (and, fenced, under the held lease)
//! and, only then, rewrites the message rows from the first changed one, so the bytes
//! it writes (WAL included) do not grow with the history. When it changes nothing, a
//! probe says why (lease, corrupt row, fence, version, size). A row in the
//! whole-history format (`rein-session/1`) loads as before and is converted by its
//! first save.

use tokio_postgres::Row;
use tokio_postgres::types::ToSql;

use rein_core::Msg;
use rein_core::store::{
    Lease, SessionKey, StoreError, StoreErrorKind, StoredSession, next_version,
};

use super::PostgresSessionStore;
use super::connection::pg_error;
use crate::{
    FORMAT, FORMAT_APPEND, array_bytes, decode_each, decode_messages, encode_each, key_string,
    to_i64,
};

/// Why a save statement wrote nothing.
enum NotSaved {
    /// The row is in the whole-history format: save again with nothing unchanged.
    Convert,
    /// Any other reason.
    Error(StoreError),
}

impl From<StoreError> for NotSaved {
    fn from(e: StoreError) -> Self {
        Self::Error(e)
    }
}

impl NotSaved {
    fn into_error(self, key: &SessionKey) -> StoreError {
        match self {
            Self::Error(e) => e,
            Self::Convert => StoreError::with_kind(
                StoreErrorKind::Io,
                key,
                "PostgreSQL: a full rewrite could not convert the session row",
            ),
        }
    }
}

fn corrupt(key: &SessionKey, why: &str) -> StoreError {
    StoreError::with_kind(
        StoreErrorKind::Corrupt,
        key,
        format!("the stored row is not a rein session ({why}); it is never overwritten"),
    )
}

impl PostgresSessionStore {
    pub(super) async fn inner_load(&self, key: &SessionKey) -> Result<StoredSession, StoreError> {
        rein_core::store::check_key(key)?;
        let k = key_string(key);
        let max = i64::try_from(self.max_bytes).unwrap_or(i64::MAX);
        let rows = self
            .query(
                Some(key),
                "loading the session",
                &self.sql.load,
                &[&k, &max],
            )
            .await?;
        match rows.first() {
            Some(row) => self.decode_row(key, row, 0),
            None => Ok(StoredSession::default()),
        }
    }

    /// The session in the load columns of `row` from column `at` on (see `sql`); a
    /// NULL format is a session never saved.
    pub(super) fn decode_row(
        &self,
        key: &SessionKey,
        row: &Row,
        at: usize,
    ) -> Result<StoredSession, StoreError> {
        let decode = |e: tokio_postgres::Error| corrupt(key, &e.to_string());
        let Some(format) = row.try_get::<_, Option<String>>(at).map_err(decode)? else {
            return Ok(StoredSession::default());
        };
        let version: i64 = row.try_get(at + 1).map_err(decode)?;
        let size: Option<i64> = row.try_get(at + 3).map_err(decode)?;
        let too_large = || {
            rein_core::store::too_large(
                key,
                "loading",
                size.and_then(|s| u64::try_from(s).ok()).unwrap_or(0),
                self.max_bytes,
            )
        };
        let version = u64::try_from(version)
            .ok()
            .filter(|v| *v > 0)
            .ok_or_else(|| corrupt(key, &format!("version {version}")))?;
        if format == FORMAT_APPEND {
            let count: Option<i64> = row.try_get(at + 4).map_err(decode)?;
            let (Some(count), Some(_)) = (count, size) else {
                return Err(corrupt(key, "its msg_count or msg_bytes is NULL"));
            };
            let Some(texts) = row
                .try_get::<_, Option<Vec<String>>>(at + 5)
                .map_err(decode)?
            else {
                return Err(too_large());
            };
            if usize::try_from(count).ok() != Some(texts.len()) {
                return Err(corrupt(
                    key,
                    &format!(
                        "its msg_count is {count}, its messages table holds {}",
                        texts.len()
                    ),
                ));
            }
            let messages = decode_each(key, &texts, "the session's message rows")?;
            return Ok(StoredSession::new(messages, version));
        }
        if format != FORMAT {
            return Err(corrupt(key, &format!("format `{format}`")));
        }
        let Some(messages) = row.try_get::<_, Option<String>>(at + 2).map_err(decode)? else {
            return Err(too_large());
        };
        let messages = decode_messages(key, messages.as_bytes(), "the session row")?;
        Ok(StoredSession::new(messages, version))
    }

    /// A save of `messages`, the first `unchanged` of which the store holds at
    /// `expected` (see `SessionStore::save_from`): one statement checks the version (and
    /// the lease), updates the session row and replaces the message rows from index
    /// `unchanged` on. A row still in the whole-history format is converted by a second
    /// statement with nothing unchanged (once per session).
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

    /// [`inner_save`](Self::inner_save); with `release` (and a lease), the statement
    /// that writes also releases the lease (nothing is released when nothing is
    /// written).
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
            .save_statement(key, messages, unchanged, expected, lease, release)
            .await
        {
            Err(NotSaved::Convert) if unchanged > 0 => self
                .save_statement(key, messages, 0, expected, lease, release)
                .await
                .map_err(|e| e.into_error(key)),
            saved => saved.map_err(|e| e.into_error(key)),
        }
    }

    async fn save_statement(
        &self,
        key: &SessionKey,
        messages: &[Msg],
        unchanged: usize,
        expected: u64,
        lease: Option<&Lease>,
        release: bool,
    ) -> Result<u64, NotSaved> {
        rein_core::store::check_key(key)?;
        rein_core::store::check_storable(key, &messages[unchanged..])?;
        let version = next_version(key, expected)?;
        let new = to_i64(key, "version", version)?;
        let old = to_i64(key, "version", expected)?;
        let from = to_i64(
            key,
            "message index",
            u64::try_from(unchanged).unwrap_or(u64::MAX),
        )?;
        let texts = encode_each(key, &messages[unchanged..])?;
        let bytes: usize = texts.iter().map(String::len).sum();
        let bytes = u64::try_from(bytes).unwrap_or(u64::MAX);
        let floor = array_bytes(u64::try_from(texts.len()).unwrap_or(u64::MAX), bytes);
        if floor > u64::try_from(self.max_bytes).unwrap_or(u64::MAX) {
            return Err(rein_core::store::too_large(key, "saving", floor, self.max_bytes).into());
        }
        let written = (u64::try_from(texts.len()).unwrap_or(u64::MAX), bytes);
        let bytes = to_i64(key, "session size", bytes)?;
        let max = i64::try_from(self.max_bytes).unwrap_or(i64::MAX);
        let k = key_string(key);
        if expected == 0 && unchanged > 0 {
            return Err(self
                .why_not_saved(key, &k, unchanged, written, expected, lease)
                .await);
        }
        let fence = lease.map(|l| to_i64(key, "fence", l.fence())).transpose()?;
        let token = lease.map(Lease::token);
        let what = "saving the session";
        let rows = match (lease, expected) {
            (None, 0) => {
                let params: [&(dyn ToSql + Sync); 5] =
                    [&k, &key.user_id, &key.session_id, &texts, &bytes];
                self.query(Some(key), what, &self.sql.insert, &params)
                    .await?
            }
            (None, _) => {
                let params: [&(dyn ToSql + Sync); 7] =
                    [&k, &old, &new, &from, &texts, &bytes, &max];
                self.query(Some(key), what, &self.sql.update, &params)
                    .await?
            }
            (Some(_), 0) => {
                let params: [&(dyn ToSql + Sync); 7] = [
                    &k,
                    &key.user_id,
                    &key.session_id,
                    &texts,
                    &bytes,
                    &token,
                    &fence,
                ];
                let sql = if release {
                    &self.sql.insert_fenced_release
                } else {
                    &self.sql.insert_fenced
                };
                self.query(Some(key), what, sql, &params).await?
            }
            (Some(_), _) => {
                let params: [&(dyn ToSql + Sync); 9] =
                    [&k, &old, &new, &from, &texts, &bytes, &max, &token, &fence];
                let sql = if release {
                    &self.sql.update_fenced_release
                } else {
                    &self.sql.update_fenced
                };
                self.query(Some(key), what, sql, &params).await?
            }
        };
        if rows.len() == 1 {
            return Ok(version);
        }
        Err(self
            .why_not_saved(key, &k, unchanged, written, expected, lease)
            .await)
    }

    /// Why a save changed no row: the lease, a corrupt row, a later fence, the version,
    /// a row to convert, fewer stored messages than `unchanged`, or the size.
    async fn why_not_saved(
        &self,
        key: &SessionKey,
        k: &String,
        unchanged: usize,
        written: (u64, u64),
        expected: u64,
        lease: Option<&Lease>,
    ) -> NotSaved {
        let lost = |why: &str| {
            StoreError::with_kind(
                StoreErrorKind::LeaseLost,
                key,
                format!("nothing saved: {why}"),
            )
        };
        if let Some(lease) = lease {
            let token = lease.token();
            match self
                .query(
                    Some(key),
                    "checking the lease",
                    &self.sql.lease_held,
                    &[k, &token],
                )
                .await
            {
                Ok(rows) if rows.is_empty() => {
                    return lost("the lease expired or another holder took the session over")
                        .into();
                }
                Ok(_) => {}
                Err(e) => return e.into(),
            }
        }
        let from = i64::try_from(unchanged).unwrap_or(i64::MAX);
        let rows = match self
            .query(
                Some(key),
                "reading the stored version",
                &self.sql.probe_save,
                &[k, &from],
            )
            .await
        {
            Ok(rows) => rows,
            Err(e) => return e.into(),
        };
        let Some(row) = rows.first() else {
            if expected == 0 && unchanged > 0 {
                return rein_core::store::unchanged_beyond_stored(key, unchanged, 0, 0).into();
            }
            return StoreError::conflict(key, expected, 0).into();
        };
        let format: String = row.try_get(0).unwrap_or_default();
        let version: i64 = row.try_get(1).unwrap_or(0);
        let fence: i64 = row.try_get(2).unwrap_or(0);
        let count: Option<i64> = row.try_get(3).unwrap_or(None);
        let bytes: Option<i64> = row.try_get(4).unwrap_or(None);
        let removed: i64 = row.try_get(5).unwrap_or(0);
        if format != FORMAT && format != FORMAT_APPEND {
            return corrupt(key, &format!("format `{format}`")).into();
        }
        if let Some(lease) = lease
            && u64::try_from(fence).unwrap_or(0) > lease.fence()
        {
            return lost(&format!(
                "a later lease (fence {fence}) already saved the session"
            ))
            .into();
        }
        let version = u64::try_from(version).unwrap_or(0);
        if version != expected {
            return StoreError::conflict(key, expected, version).into();
        }
        if format == FORMAT {
            return NotSaved::Convert;
        }
        let count = usize::try_from(count.unwrap_or(0)).unwrap_or(0);
        if count < unchanged {
            return rein_core::store::unchanged_beyond_stored(key, unchanged, count, version)
                .into();
        }
        // Only the size is left: report the history the save would have made.
        let kept = if unchanged == 0 {
            0
        } else {
            u64::try_from(bytes.unwrap_or(0).saturating_sub(removed)).unwrap_or(0)
        };
        let size = array_bytes(
            u64::try_from(unchanged)
                .unwrap_or(u64::MAX)
                .saturating_add(written.0),
            kept.saturating_add(written.1),
        );
        rein_core::store::too_large(key, "saving", size, self.max_bytes).into()
    }

    pub(super) async fn inner_delete(&self, key: &SessionKey) -> Result<bool, StoreError> {
        let k = key_string(key);
        let what = "deleting the session";
        let rows = self.query(Some(key), what, &self.sql.delete, &[&k]).await?;
        let n: i64 = match rows.first() {
            Some(row) => row.try_get(0).map_err(|e| pg_error(Some(key), what, &e))?,
            None => 0,
        };
        Ok(n > 0)
    }

    pub(super) async fn inner_list(
        &self,
        user_id: Option<&str>,
    ) -> Result<Vec<SessionKey>, StoreError> {
        let rows = match user_id {
            Some(user) => {
                self.query(None, "listing the sessions", &self.sql.list_user, &[&user])
                    .await?
            }
            None => {
                self.query(None, "listing the sessions", &self.sql.list_none, &[])
                    .await?
            }
        };
        rows.iter()
            .map(|row| {
                row.try_get::<_, String>(0)
                    .map(|id| SessionKey::new(user_id, &id))
                    .map_err(|e| pg_error(None, "listing the sessions", &e))
            })
            .collect()
    }
}
