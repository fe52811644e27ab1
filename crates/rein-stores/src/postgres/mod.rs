//! `PostgresSessionStore`: sessions in PostgreSQL tables, every save one versioned
//! statement.
//!
//! A session is a row (version, fence, format, message count and bytes) plus one row
//! per message; a lease is a row with a token, a fence and an expiry. Every check and
//! the write it guards are in one statement, so in one transaction: a save updates the
//! session row only `WHERE version = $expected` (and, fenced, while the lease row is
//! held and no later fence saved) and rewrites only the message rows from the first
//! changed one (`session`). A leased call is two round trips, not four (`lease`): the
//! acquisition and the load are two statements pipelined on one connection (the load
//! runs after the acquisition committed, so it sees every earlier holder's save), and
//! the call's last save releases the lease in its own statement. `connection` owns the
//! pool (whose wait a lease acquisition bounds by its lease wait) and maps failures to
//! store errors; `sql` builds the statements once from the validated table name.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use deadpool_postgres::Pool;

use rein_core::Msg;
use rein_core::store::{SessionKey, StoreError};

mod connection;
mod lease;
mod session;
mod sql;

pub(crate) use connection::{open_pool, pg_error, pool_error};
use sql::Sql;

/// The default table name.
const DEFAULT_TABLE: &str = "rein_sessions";

/// A [`SessionStore`](rein_core::SessionStore) on PostgreSQL (feature `postgres`), with [`SessionAdmin`](rein_core::store::SessionAdmin) and
/// [`SessionLeases`](rein_core::store::SessionLeases).
///
/// # Tables
/// With the table name `t` (default `rein_sessions`; lowercase letters, digits and `_`,
/// optionally `schema.` first), [`PostgresSessionStoreBuilder::connect`] runs this
/// idempotent migration (in one transaction, under an advisory lock, so replicas
/// starting together do not race), unless [`PostgresSessionStoreBuilder::migrate`] is
/// turned off:
///
/// ```sql
/// CREATE TABLE IF NOT EXISTS t (
///     session_key text PRIMARY KEY,          -- JSON array [user or null, session]
///     user_id     text,
///     session_id  text NOT NULL,
///     version     bigint NOT NULL,           -- 1, 2, … (a missing row is version 0)
///     fence       bigint NOT NULL DEFAULT 0, -- fence of the last fenced save
///     format      text NOT NULL,             -- 'rein-session/2' ('/1': see below)
///     messages    text NOT NULL,             -- '' ('/1': the whole JSON history)
///     updated_at  timestamptz NOT NULL DEFAULT now()
/// );
/// ALTER TABLE t ADD COLUMN IF NOT EXISTS msg_count bigint;  -- how many messages
/// ALTER TABLE t ADD COLUMN IF NOT EXISTS msg_bytes bigint;  -- bytes of their JSON
/// CREATE INDEX IF NOT EXISTS t_user ON t (user_id, session_id);
/// CREATE TABLE IF NOT EXISTS t_messages (
///     session_key text NOT NULL,
///     idx         bigint NOT NULL,           -- 0, 1, … in the conversation's order
///     message     text NOT NULL,             -- one JSON message
///     PRIMARY KEY (session_key, idx)
/// );
/// CREATE TABLE IF NOT EXISTS t_leases (
///     session_key text PRIMARY KEY,
///     token       text NOT NULL,
///     fence       bigint NOT NULL,           -- +1 on every acquisition (a deleted row
///                                            -- restarts above the session's saved fence)
///     expires_at  timestamptz NOT NULL
/// );
/// ```
///
/// Messages are `text`, not `jsonb`: `jsonb` rejects `\u0000` in strings, which a
/// conversation may contain. A save is one statement (so one transaction): an `UPDATE
/// … WHERE session_key = $1 AND version = $expected` of the session row (an `INSERT …
/// ON CONFLICT DO NOTHING` for version 0) that, only when it changed the row, upserts
/// the message rows the save writes (from index `unchanged` on, see
/// [`SessionStore::save_from`](rein_core::SessionStore::save_from)) and deletes those
/// past the new end, so the bytes a call writes (WAL included) do not grow with the
/// history. No row changed means a `Conflict` (or `Corrupt`, for a row whose format is
/// not a rein session's, which is never overwritten). A load reads the session row and
/// its messages in one statement (one snapshot).
///
/// A row saved before this layout (format `rein-session/1`, the whole history in
/// `messages`) loads as before and is converted by its first save (one more statement,
/// with the whole history). Replicas running an older version refuse a converted row
/// as [`StoreErrorKind::Corrupt`](rein_core::store::StoreErrorKind::Corrupt) and never overwrite it: upgrade every replica.
///
/// # Leases
/// Leases are rows of `t_leases` with an expiry, not advisory locks: an advisory lock
/// belongs to a database connection, and a pooled connection goes back to the pool (and
/// to other tasks) between statements, so holding one for a call would pin a connection
/// per running call; it has no TTL (a hung but connected replica would hold it forever)
/// and no fencing token. A lease row works over any pooled connection (and through
/// transaction-mode poolers), expires after its TTL by the server's clock, and its fence
/// survives releases. A fenced save checks the lease row in the same statement
/// (`FOR SHARE`, so a takeover waits for it).
///
/// A leased call is two round trips: the acquisition and the load are two statements
/// sent together on one connection
/// ([`SessionLeases::acquire_and_load`](rein_core::store::SessionLeases::acquire_and_load);
/// the server runs the load after the acquisition committed, so it sees every earlier
/// holder's save), and the last fenced save releases the lease in its own statement
/// ([`SessionLeases::save_fenced_and_release`](rein_core::store::SessionLeases::save_fenced_and_release)).
///
/// # Connection
/// The URL (`postgres://user:password@host:port/db`) comes from the builder, else
/// `DATABASE_URL`, else the libpq variables `PGHOST` (required then), `PGPORT`,
/// `PGUSER`, `PGPASSWORD`, `PGDATABASE`. Connections are plain TCP or Unix sockets (no
/// TLS), pooled by `deadpool-postgres` (default 8); a connection that died with the
/// server is replaced on the next call. A lease acquisition waits for a pooled
/// connection only as long as is left of its lease wait: an exhausted pool makes it a
/// [`StoreErrorKind::Busy`](rein_core::store::StoreErrorKind::Busy) refusal within [`LeaseConfig::wait`](rein_core::store::LeaseConfig::wait).
#[derive(Clone)]
pub struct PostgresSessionStore {
    pool: Pool,
    table: Arc<str>,
    sql: Arc<Sql>,
    /// The largest history saved or loaded, in bytes of its JSON.
    max_bytes: usize,
}

impl fmt::Debug for PostgresSessionStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PostgresSessionStore")
            .field("table", &self.table)
            .finish_non_exhaustive()
    }
}

/// Configures and connects a [`PostgresSessionStore`]; from
/// [`PostgresSessionStore::builder`].
#[derive(Clone, Debug)]
pub struct PostgresSessionStoreBuilder {
    opts: PgOptions,
    max_bytes: usize,
}

impl Default for PostgresSessionStoreBuilder {
    fn default() -> Self {
        Self {
            opts: PgOptions::new(DEFAULT_TABLE, 8),
            max_bytes: rein_core::store::DEFAULT_MAX_SESSION_BYTES,
        }
    }
}

/// Where and how a PostgreSQL-backed type connects (shared by the builders of the
/// session store and the audit sink).
#[derive(Clone, Debug)]
pub(crate) struct PgOptions {
    pub(crate) url: Option<String>,
    pub(crate) table: String,
    pub(crate) pool_size: usize,
    pub(crate) connect_timeout: Duration,
    pub(crate) migrate: bool,
}

impl PgOptions {
    pub(crate) fn new(table: &str, pool_size: usize) -> Self {
        Self {
            url: None,
            table: table.to_owned(),
            pool_size,
            connect_timeout: Duration::from_secs(5),
            migrate: true,
        }
    }
}

/// The setters of a builder holding `opts: PgOptions`; `$table` and `$pool` are the
/// defaults the docs state, `$tables` what the migration creates.
macro_rules! pg_builder_setters {
    ($table:literal, $pool:literal, $tables:literal) => {
        /// The connection URL. Default: `DATABASE_URL`, else the `PG*` variables.
        #[must_use]
        pub fn url(mut self, url: impl Into<String>) -> Self {
            self.opts.url = Some(url.into());
            self
        }

        #[doc = concat!("The table name (default `", $table, "`): lowercase letters, digits \
            and `_` (not first), at most 48 bytes, optionally `schema.` first. Anything \
            else fails [`connect`](Self::connect) (names are never interpolated unchecked).")]
        #[must_use]
        pub fn table(mut self, table: impl Into<String>) -> Self {
            self.opts.table = table.into();
            self
        }

        #[doc = concat!("The most connections kept open (default ", $pool, ").")]
        #[must_use]
        pub fn pool_size(mut self, size: usize) -> Self {
            self.opts.pool_size = size.max(1);
            self
        }

        /// How long opening one connection may take (default 5 s).
        #[must_use]
        pub fn connect_timeout(mut self, timeout: std::time::Duration) -> Self {
            self.opts.connect_timeout = timeout;
            self
        }

        #[doc = concat!("Whether [`connect`](Self::connect) creates ", $tables, " if missing \
            (default `true`); turn off where the application's role may not create tables \
            and the documented SQL was run by hand.")]
        #[must_use]
        pub fn migrate(mut self, migrate: bool) -> Self {
            self.opts.migrate = migrate;
            self
        }
    };
}
pub(crate) use pg_builder_setters;

/// Whether `name` is a lowercase SQL identifier short enough for the derived names.
fn valid_identifier(name: &str) -> bool {
    let mut bytes = name.bytes();
    matches!(bytes.next(), Some(b'a'..=b'z' | b'_'))
        && bytes.all(|b| matches!(b, b'a'..=b'z' | b'0'..=b'9' | b'_'))
        && name.len() <= 48
}

impl PostgresSessionStoreBuilder {
    pg_builder_setters!(
        "rein_sessions",
        8,
        "the tables (the sessions' and `<table>_leases`)"
    );

    /// The largest session saved or loaded, in bytes of its JSON history (default
    /// [`DEFAULT_MAX_SESSION_BYTES`](rein_core::store::DEFAULT_MAX_SESSION_BYTES), 32 MiB).
    /// A larger save fails with [`StoreErrorKind::TooLarge`](rein_core::store::StoreErrorKind::TooLarge) and writes nothing; a
    /// larger stored history fails its load the same way, and the server never sends it.
    #[must_use]
    pub fn max_session_bytes(mut self, bytes: usize) -> Self {
        self.max_bytes = bytes;
        self
    }

    /// Validates the table name, connects (so a wrong URL, password or database fails
    /// here) and runs the migration.
    ///
    /// # Errors
    /// [`StoreErrorKind::Config`](rein_core::store::StoreErrorKind::Config) for an invalid table name, no or a malformed URL,
    /// credentials the server rejects or a missing database;
    /// [`StoreErrorKind::Unavailable`](rein_core::store::StoreErrorKind::Unavailable) when the server cannot be reached;
    /// [`StoreErrorKind::Io`](rein_core::store::StoreErrorKind::Io) when the migration fails.
    pub async fn connect(self) -> Result<PostgresSessionStore, StoreError> {
        let (pool, client) = open_pool(&self.opts).await?;
        let sql = Sql::new(&self.opts.table);
        if self.opts.migrate {
            client
                .batch_execute(&sql.migrate)
                .await
                .map_err(|e| pg_error(None, "creating the session tables", &e))?;
        }
        drop(client);
        Ok(PostgresSessionStore {
            pool,
            table: self.opts.table.into(),
            sql: Arc::new(sql),
            max_bytes: self.max_bytes,
        })
    }
}

impl PostgresSessionStore {
    /// A builder (URL from `DATABASE_URL` / `PG*` unless given, table `rein_sessions`).
    pub fn builder() -> PostgresSessionStoreBuilder {
        PostgresSessionStoreBuilder::default()
    }

    /// Connects to `url` with the default settings (and runs the migration).
    ///
    /// # Errors
    /// As [`PostgresSessionStoreBuilder::connect`].
    pub async fn connect(url: &str) -> Result<Self, StoreError> {
        Self::builder().url(url).connect().await
    }

    /// The table name.
    pub fn table(&self) -> &str {
        &self.table
    }
}

engine_store_traits!(PostgresSessionStore);
