//! The SQL of `PostgresSessionStore`, built once per store from the validated table
//! name.

use crate::{FORMAT, FORMAT_APPEND};

/// The SQL statements of one table (built once from the validated name).
pub(super) struct Sql {
    pub(super) migrate: String,
    pub(super) load: String,
    pub(super) insert: String,
    pub(super) update: String,
    pub(super) insert_fenced: String,
    pub(super) update_fenced: String,
    pub(super) insert_fenced_release: String,
    pub(super) update_fenced_release: String,
    pub(super) load_leased: String,
    pub(super) probe_save: String,
    pub(super) lease_held: String,
    pub(super) delete: String,
    pub(super) list_user: String,
    pub(super) list_none: String,
    pub(super) acquire: String,
    pub(super) renew: String,
    pub(super) release: String,
    pub(super) acquire_queued: String,
    pub(super) leave: String,
    pub(super) signal: String,
    pub(super) signalled: String,
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
        let m = quote(&format!("{name}_messages"));
        let w = quote(&format!("{name}_waiters"));
        let arrivals = quote(&format!("{name}_arrivals"));
        let queued = quote(&format!("{name}_acquire_queued"));
        let user_index = quote(&format!("{name}_user"));
        // The per-session lock of a queued attempt: the table's name and the key.
        let lock_space = format!("'{name}:'");
        // The sequence's name as a string literal for nextval (regclass text).
        let arrivals_lit = arrivals.replace('\'', "''");
        let held = |token: &str| {
            format!(
                "held AS (SELECT 1 FROM {l} WHERE session_key = $1 AND token = {token} \
                 AND expires_at > clock_timestamp() FOR SHARE),"
            )
        };
        let columns = "session_key, user_id, session_id, version, fence, format, messages, msg_count, msg_bytes";
        // The rows of the messages written (`texts`, from index `from`) once the session
        // row `s` changed, replacing any stored at those indexes, and the removal of
        // stored rows past the new end.
        // With `release`, the lease of the token `$token` is released in the same
        // statement, once the session row changed (nothing is released otherwise).
        let release = |token: &str| {
            format!(
                "rel AS (UPDATE {l} SET token = '', expires_at = '-infinity'
                         WHERE session_key = $1 AND token = {token}
                           AND EXISTS (SELECT 1 FROM s)),"
            )
        };
        let rows = |from: &str, texts: &str| {
            format!(
                "d AS (DELETE FROM {m} WHERE session_key = $1
                         AND idx >= {from} + cardinality({texts}::text[])
                         AND EXISTS (SELECT 1 FROM s)),
                 i AS (INSERT INTO {m} (session_key, idx, message)
                       SELECT $1, {from} + u.o - 1, u.x
                       FROM unnest({texts}::text[]) WITH ORDINALITY AS u(x, o)
                       WHERE EXISTS (SELECT 1 FROM s)
                       ON CONFLICT (session_key, idx) DO UPDATE SET message = EXCLUDED.message)
                 SELECT 1 FROM s"
            )
        };
        // $1 key, $2 expected version, $3 new version, $4 unchanged, $5 texts, $6 their
        // bytes, $7 the largest history (bytes of its JSON); fenced: $8 token, $9 fence.
        let update = |fenced: bool, releasing: bool| {
            let (with_held, from_held, set_fence, check_fence) = if fenced {
                (held("$8"), ", held", "fence = $9,", "AND fence <= $9")
            } else {
                (String::new(), "", "", "")
            };
            let rel = if releasing {
                release("$8")
            } else {
                String::new()
            };
            let bytes = "CASE WHEN $4 = 0 THEN $6 ELSE msg_bytes - r.n + $6 END";
            format!(
                "WITH {with_held}
                 r AS (SELECT COALESCE(sum(octet_length(message)), 0)::bigint AS n
                       FROM {m} WHERE session_key = $1 AND idx >= $4),
                 s AS (UPDATE {t} SET version = $3, {set_fence} format = '{FORMAT_APPEND}',
                         messages = '', msg_count = $4 + cardinality($5::text[]),
                         msg_bytes = {bytes}, updated_at = now()
                       FROM r{from_held}
                       WHERE session_key = $1 AND version = $2 {check_fence}
                         AND (format = '{FORMAT_APPEND}' OR (format = '{FORMAT}' AND $4 = 0))
                         AND COALESCE(msg_count, 0) >= $4
                         AND {bytes} + greatest($4 + cardinality($5::text[]) - 1, 0) + 2 <= $7
                       RETURNING 1),
                 {rel}
                 {}",
                rows("$4", "$5")
            )
        };
        // $1 key, $2 user, $3 session, $4 texts, $5 their bytes; fenced: $6 token, $7 fence.
        let insert = |fenced: bool, releasing: bool| {
            let (with_held, from_held, fence) = if fenced {
                (held("$6"), " FROM held", "$7")
            } else {
                (String::new(), "", "0")
            };
            let rel = if releasing {
                release("$6")
            } else {
                String::new()
            };
            format!(
                "WITH {with_held}
                 s AS (INSERT INTO {t} ({columns})
                       SELECT $1, $2, $3, 1, {fence}, '{FORMAT_APPEND}', '',
                              cardinality($4::text[]), $5{from_held}
                       ON CONFLICT (session_key) DO NOTHING
                       RETURNING 1),
                 {rel}
                 {}",
                rows("0", "$4")
            )
        };
        // $1 key, $2 the largest history sent back (a larger one is not read out):
        // format, version, the whole-history text (format 1), the history's size, the
        // message count and the messages (format 2), in one snapshot.
        let load_columns = format!(
            "format, version,
             CASE WHEN format <> '{FORMAT_APPEND}' AND octet_length(messages) <= $2::bigint
                  THEN messages END,
             CASE WHEN format = '{FORMAT_APPEND}'
                  THEN msg_bytes + greatest(msg_count - 1, 0) + 2
                  ELSE octet_length(messages)::bigint END,
             msg_count,
             CASE WHEN format = '{FORMAT_APPEND}'
                   AND msg_bytes + greatest(msg_count - 1, 0) + 2 <= $2::bigint
                  THEN ARRAY(SELECT message FROM {m} WHERE session_key = $1 ORDER BY idx) END"
        );
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
                 -- ALTER TABLE and CREATE INDEX lock the table before they find there is
                 -- nothing to do, and a replica migrating while another runs calls then
                 -- deadlocks with a call's load: they run only when something is missing.
                 DO $m$ BEGIN
                   IF NOT EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = '{t}'::regclass
                                    AND attname = 'msg_count' AND NOT attisdropped) THEN
                     ALTER TABLE {t} ADD COLUMN IF NOT EXISTS msg_count bigint;
                   END IF;
                   IF NOT EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = '{t}'::regclass
                                    AND attname = 'msg_bytes' AND NOT attisdropped) THEN
                     ALTER TABLE {t} ADD COLUMN IF NOT EXISTS msg_bytes bigint;
                   END IF;
                   IF to_regclass('{user_index}') IS NULL THEN
                     CREATE INDEX IF NOT EXISTS \"{name}_user\" ON {t} (user_id, session_id);
                   END IF;
                 END $m$;
                 CREATE TABLE IF NOT EXISTS {m} (
                     session_key text NOT NULL,
                     idx         bigint NOT NULL,
                     message     text NOT NULL,
                     PRIMARY KEY (session_key, idx)
                 );
                 CREATE TABLE IF NOT EXISTS {l} (
                     session_key text PRIMARY KEY,
                     token       text NOT NULL,
                     fence       bigint NOT NULL,
                     expires_at  timestamptz NOT NULL
                 );
                 DO $m$ BEGIN
                   IF NOT EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = '{l}'::regclass
                                    AND attname = 'signal' AND NOT attisdropped) THEN
                     ALTER TABLE {l} ADD COLUMN IF NOT EXISTS signal text;
                   END IF;
                 END $m$;
                 CREATE SEQUENCE IF NOT EXISTS {arrivals};
                 -- Unlogged: entries live seconds, and a join or a refresh then commits
                 -- without a WAL flush (after a server crash, waiters simply join again).
                 CREATE UNLOGGED TABLE IF NOT EXISTS {w} (
                     session_key text NOT NULL,
                     token       text NOT NULL,
                     arrival     bigint NOT NULL,
                     expires_at  timestamptz NOT NULL,
                     PRIMARY KEY (session_key, token)
                 );
                 CREATE OR REPLACE FUNCTION {queued}(
                     p_key text, p_token text, p_ttl float8, p_life float8, p_max bigint)
                 RETURNS bigint LANGUAGE plpgsql AS $fn$
                 DECLARE n bigint; mine boolean; head text; f bigint;
                 BEGIN
                   PERFORM pg_advisory_xact_lock(hashtextextended({lock_space} || p_key, 0));
                   DELETE FROM {w} WHERE session_key = p_key AND expires_at <= clock_timestamp();
                   SELECT count(*), bool_or(token = p_token) INTO n, mine
                     FROM {w} WHERE session_key = p_key;
                   mine := COALESCE(mine, false);
                   IF NOT mine AND n > 0 THEN
                     IF n >= p_max THEN RETURN -1; END IF;
                     INSERT INTO {w} VALUES (p_key, p_token, nextval('{arrivals_lit}'),
                       clock_timestamp() + p_life * interval '1 millisecond');
                     RETURN 0;
                   END IF;
                   IF mine THEN
                     -- Refreshed once half its life has passed: most attempts write nothing.
                     UPDATE {w} SET expires_at = clock_timestamp() + p_life * interval '1 millisecond'
                       WHERE session_key = p_key AND token = p_token
                         AND expires_at < clock_timestamp() + p_life / 2 * interval '1 millisecond';
                     SELECT token INTO head FROM {w} WHERE session_key = p_key
                       ORDER BY arrival LIMIT 1;
                     IF head <> p_token THEN RETURN 0; END IF;
                   END IF;
                   -- A live lease is seen without locking its row: the upsert below
                   -- would lock it, and a lock per poll queues the holder's own save.
                   IF NOT EXISTS (SELECT 1 FROM {l} WHERE session_key = p_key
                                    AND expires_at > clock_timestamp()) THEN
                     INSERT INTO {l} AS l (session_key, token, fence, expires_at, signal)
                     VALUES (p_key, p_token,
                       1 + COALESCE((SELECT s.fence FROM {t} s WHERE s.session_key = p_key), 0),
                       clock_timestamp() + p_ttl * interval '1 millisecond', NULL)
                     ON CONFLICT (session_key) DO UPDATE
                       SET token = EXCLUDED.token, fence = GREATEST(l.fence + 1, EXCLUDED.fence),
                           expires_at = EXCLUDED.expires_at, signal = NULL
                       WHERE l.expires_at <= clock_timestamp()
                     RETURNING l.fence INTO f;
                   END IF;
                   IF f IS NULL THEN
                     IF mine THEN RETURN 0; END IF;
                     IF n >= p_max THEN RETURN -1; END IF;
                     INSERT INTO {w} VALUES (p_key, p_token, nextval('{arrivals_lit}'),
                       clock_timestamp() + p_life * interval '1 millisecond');
                     RETURN 0;
                   END IF;
                   IF mine THEN
                     DELETE FROM {w} WHERE session_key = p_key AND token = p_token;
                   END IF;
                   RETURN f;
                 END $fn$;
                 COMMIT;"
            ),
            load: format!("SELECT {load_columns} FROM {t} WHERE session_key = $1"),
            // As `load` ($3 the token), only while the lease is held by that token, with
            // its fence first: no row when it is not held; NULL session columns when
            // the session was never saved. Sent right after `acquire` on the same
            // connection, so it runs once the acquisition committed.
            load_leased: format!(
                "SELECT l.fence, {load_columns}
                 FROM {l} l LEFT JOIN {t} USING (session_key)
                 WHERE session_key = $1 AND l.token = $3 AND l.expires_at > clock_timestamp()"
            ),
            insert: insert(false, false),
            update: update(false, false),
            insert_fenced: insert(true, false),
            update_fenced: update(true, false),
            insert_fenced_release: insert(true, true),
            update_fenced_release: update(true, true),
            // $1 key, $2 unchanged: why an update changed nothing.
            probe_save: format!(
                "SELECT format, version, fence, msg_count, msg_bytes,
                        (SELECT COALESCE(sum(octet_length(message)), 0)::bigint
                         FROM {m} WHERE session_key = $1 AND idx >= $2)
                 FROM {t} WHERE session_key = $1"
            ),
            lease_held: format!(
                "SELECT 1 FROM {l} WHERE session_key = $1 AND token = $2 AND expires_at > clock_timestamp()"
            ),
            // The session row first, then its messages (the order a save locks them in).
            delete: format!(
                "WITH s AS (DELETE FROM {t} WHERE session_key = $1 RETURNING 1),
                      m AS (DELETE FROM {m} WHERE session_key = $1
                              AND (SELECT count(*) FROM s) >= 0)
                 SELECT count(*) FROM s"
            ),
            list_user: format!(
                "SELECT session_id FROM {t} WHERE user_id = $1 ORDER BY session_id"
            ),
            list_none: format!(
                "SELECT session_id FROM {t} WHERE user_id IS NULL ORDER BY session_id"
            ),
            // A caller that does not queue takes the lease only when no one waits. A live
            // lease is seen without locking its row: the upsert would lock it, and a lock
            // per poll queues the holder's own save behind the pollers.
            acquire: format!(
                "INSERT INTO {l} AS l (session_key, token, fence, expires_at, signal)
                 SELECT $1, $2,
                   1 + COALESCE((SELECT s.fence FROM {t} s WHERE s.session_key = $1), 0),
                   clock_timestamp() + $3::float8 * interval '1 millisecond', NULL
                 WHERE NOT EXISTS (SELECT 1 FROM {w} q
                                   WHERE q.session_key = $1 AND q.expires_at > clock_timestamp())
                   AND NOT EXISTS (SELECT 1 FROM {l} h
                                   WHERE h.session_key = $1 AND h.expires_at > clock_timestamp())
                 ON CONFLICT (session_key) DO UPDATE
                   SET token = EXCLUDED.token, fence = GREATEST(l.fence + 1, EXCLUDED.fence),
                       expires_at = EXCLUDED.expires_at, signal = NULL
                   WHERE l.expires_at <= clock_timestamp()
                 RETURNING fence"
            ),
            // $1 key, $2 token, $3 TTL ms, $4 waiter TTL ms, $5 most waiters: -1 full,
            // 0 waiting, else the fence.
            acquire_queued: format!("SELECT {queued}($1, $2, $3, $4, $5)"),
            leave: format!("DELETE FROM {w} WHERE session_key = $1 AND token = $2"),
            // A rollback is never weakened to an interrupt.
            signal: format!(
                "UPDATE {l} SET signal = CASE WHEN signal = 'rollback' THEN signal ELSE $2 END
                 WHERE session_key = $1 AND token <> '' AND expires_at > clock_timestamp()"
            ),
            signalled: format!("SELECT signal FROM {l} WHERE session_key = $1 AND token = $2"),
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
