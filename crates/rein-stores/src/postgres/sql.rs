//! The SQL of `PostgresSessionStore`, built once per store from the validated table
//! name.

use crate::FORMAT;

/// The SQL statements of one table (built once from the validated name).
pub(super) struct Sql {
    pub(super) migrate: String,
    pub(super) load: String,
    pub(super) insert: String,
    pub(super) update: String,
    pub(super) insert_fenced: String,
    pub(super) update_fenced: String,
    pub(super) probe: String,
    pub(super) lease_held: String,
    pub(super) delete: String,
    pub(super) list_user: String,
    pub(super) list_none: String,
    pub(super) acquire: String,
    pub(super) renew: String,
    pub(super) release: String,
}

impl Sql {
    pub(super) fn new(table: &str) -> Self {
        // `table` is validated: lowercase identifiers, optionally schema-qualified.
        let (schema, name) = match table.split_once('.') {
            Some((schema, name)) => (Some(schema), name),
            None => (None, table),
        };
        let quote = |n: &str| match schema {
            Some(s) => format!("\"{s}\".\"{n}\""),
            None => format!("\"{n}\""),
        };
        let t = quote(name);
        let l = quote(&format!("{name}_leases"));
        let held = format!(
            "SELECT 1 FROM {l} WHERE session_key = $1 AND token = $5 AND expires_at > clock_timestamp() FOR SHARE"
        );
        let columns = "session_key, user_id, session_id, version, fence, format, messages";
        Self {
            migrate: format!(
                "BEGIN;
                 SELECT pg_advisory_xact_lock(7317116273459143251);
                 CREATE TABLE IF NOT EXISTS {t} (
                     session_key text PRIMARY KEY,
                     user_id     text,
                     session_id  text NOT NULL,
                     version     bigint NOT NULL,
                     fence       bigint NOT NULL DEFAULT 0,
                     format      text NOT NULL,
                     messages    text NOT NULL,
                     updated_at  timestamptz NOT NULL DEFAULT now()
                 );
                 CREATE INDEX IF NOT EXISTS \"{name}_user\" ON {t} (user_id, session_id);
                 CREATE TABLE IF NOT EXISTS {l} (
                     session_key text PRIMARY KEY,
                     token       text NOT NULL,
                     fence       bigint NOT NULL,
                     expires_at  timestamptz NOT NULL
                 );
                 COMMIT;"
            ),
            // $1 key, $2 the largest history sent back (a larger one is not read out).
            load: format!(
                "SELECT format, version,
                        CASE WHEN octet_length(messages) <= $2::bigint THEN messages END,
                        octet_length(messages)::bigint
                 FROM {t} WHERE session_key = $1"
            ),
            // $1 key, $2 user, $3 session, $4 messages.
            insert: format!(
                "INSERT INTO {t} ({columns}) VALUES ($1, $2, $3, 1, 0, '{FORMAT}', $4)
                 ON CONFLICT (session_key) DO NOTHING"
            ),
            // $1 key, $2 expected version, $3 new version, $4 messages.
            update: format!(
                "UPDATE {t} SET version = $3, messages = $4, updated_at = now()
                 WHERE session_key = $1 AND version = $2 AND format = '{FORMAT}'"
            ),
            // As `insert`, plus $5 lease token, $6 fence.
            insert_fenced: format!(
                "WITH held AS ({held})
                 INSERT INTO {t} ({columns})
                 SELECT $1, $2, $3, 1, $6, '{FORMAT}', $4 FROM held
                 ON CONFLICT (session_key) DO NOTHING"
            ),
            // As `update`, plus $5 lease token, $6 fence.
            update_fenced: format!(
                "WITH held AS ({held})
                 UPDATE {t} SET version = $3, messages = $4, fence = $6, updated_at = now()
                 FROM held
                 WHERE session_key = $1 AND version = $2 AND format = '{FORMAT}' AND fence <= $6"
            ),
            probe: format!("SELECT format, version, fence FROM {t} WHERE session_key = $1"),
            lease_held: format!(
                "SELECT 1 FROM {l} WHERE session_key = $1 AND token = $2 AND expires_at > clock_timestamp()"
            ),
            delete: format!("DELETE FROM {t} WHERE session_key = $1"),
            list_user: format!(
                "SELECT session_id FROM {t} WHERE user_id = $1 ORDER BY session_id"
            ),
            list_none: format!(
                "SELECT session_id FROM {t} WHERE user_id IS NULL ORDER BY session_id"
            ),
            acquire: format!(
                "INSERT INTO {l} AS l (session_key, token, fence, expires_at)
                 VALUES ($1, $2,
                   1 + COALESCE((SELECT s.fence FROM {t} s WHERE s.session_key = $1), 0),
                   clock_timestamp() + $3::float8 * interval '1 millisecond')
                 ON CONFLICT (session_key) DO UPDATE
                   SET token = EXCLUDED.token, fence = GREATEST(l.fence + 1, EXCLUDED.fence),
                       expires_at = EXCLUDED.expires_at
                   WHERE l.expires_at <= clock_timestamp()
                 RETURNING fence"
            ),
            renew: format!(
                "UPDATE {l} SET expires_at = clock_timestamp() + $3::float8 * interval '1 millisecond'
                 WHERE session_key = $1 AND token = $2 AND expires_at > clock_timestamp()"
            ),
            release: format!(
                "UPDATE {l} SET token = '', expires_at = '-infinity'
                 WHERE session_key = $1 AND token = $2 AND expires_at > clock_timestamp()"
            ),
        }
    }
}
