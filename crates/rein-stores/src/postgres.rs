//! `PostgresSessionStore`: sessions in a PostgreSQL table, saved by a versioned
//! `UPDATE`.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use deadpool_postgres::{
    Manager, ManagerConfig, Object, Pool, PoolError, RecyclingMethod, Runtime, TimeoutType,
    Timeouts,
};
use tokio_postgres::error::SqlState;
use tokio_postgres::types::ToSql;
use tokio_postgres::{NoTls, Row, Statement};

use crate::lease::acquire_polling;
use crate::{
    FORMAT, FORMAT_APPEND, array_bytes, decode_each, decode_messages, encode_each, key_string,
    to_i64,
};
use rein_core::Msg;
use rein_core::store::{Lease, ttl_millis};
use rein_core::store::{SessionKey, StoreError, StoreErrorKind, StoredSession, next_version};

mod sql;

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
/// as [`StoreErrorKind::Corrupt`] and never overwrite it: upgrade every replica.
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
/// # Connection
/// The URL (`postgres://user:password@host:port/db`) comes from the builder, else
/// `DATABASE_URL`, else the libpq variables `PGHOST` (required then), `PGPORT`,
/// `PGUSER`, `PGPASSWORD`, `PGDATABASE`. Connections are plain TCP or Unix sockets (no
/// TLS), pooled by `deadpool-postgres` (default 8); a connection that died with the
/// server is replaced on the next call. A lease acquisition waits for a pooled
/// connection only as long as is left of its lease wait: an exhausted pool makes it a
/// [`StoreErrorKind::Busy`] refusal within [`LeaseConfig::wait`](rein_core::store::LeaseConfig::wait).
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
    /// A larger save fails with [`StoreErrorKind::TooLarge`] and writes nothing; a
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
    /// [`StoreErrorKind::Config`] for an invalid table name, no or a malformed URL,
    /// credentials the server rejects or a missing database;
    /// [`StoreErrorKind::Unavailable`] when the server cannot be reached;
    /// [`StoreErrorKind::Io`] when the migration fails.
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

/// Validates `table` (lowercase identifiers, optionally `schema.` first), builds a
/// pool of `pool_size` connections and connects once (so a wrong URL, password or
/// database fails here); returns the pool and that connection.
pub(crate) async fn open_pool(opts: &PgOptions) -> Result<(Pool, Object), StoreError> {
    let (table, pool_size, connect_timeout) = (&opts.table, opts.pool_size, opts.connect_timeout);
    let config_error = |m: String| StoreError::unkeyed(StoreErrorKind::Config, m);
    let valid = match table.split_once('.') {
        Some((schema, name)) => valid_identifier(schema) && valid_identifier(name),
        None => valid_identifier(table),
    };
    if !valid {
        return Err(config_error(format!(
            "invalid table name {table:?}: use lowercase letters, digits and `_` (not first), \
             at most 48 bytes, optionally `schema.` first"
        )));
    }
    let mut config = pg_config(opts.url.clone())?;
    if config.get_connect_timeout().is_none() {
        config.connect_timeout(connect_timeout);
    }
    let manager = Manager::from_config(
        config,
        NoTls,
        ManagerConfig {
            recycling_method: RecyclingMethod::Fast,
        },
    );
    let pool = Pool::builder(manager)
        .max_size(pool_size)
        .runtime(Runtime::Tokio1)
        .create_timeout(Some(connect_timeout))
        .wait_timeout(Some(connect_timeout * 2))
        .build()
        .map_err(|e| config_error(format!("cannot build the PostgreSQL pool: {e}")))?;
    let client = pool
        .get()
        .await
        .map_err(|e| pool_error(None, "connecting to PostgreSQL", e))?;
    Ok((pool, client))
}

/// The connection configuration from the URL, `DATABASE_URL` or the `PG*` variables.
fn pg_config(url: Option<String>) -> Result<tokio_postgres::Config, StoreError> {
    let url = url.or_else(|| std::env::var("DATABASE_URL").ok());
    if let Some(url) = url {
        return url.parse().map_err(|e: tokio_postgres::Error| {
            StoreError::unkeyed(
                StoreErrorKind::Config,
                format!("the PostgreSQL URL is not valid: {e}"),
            )
        });
    }
    let var = |name: &str| std::env::var(name).ok().filter(|v| !v.is_empty());
    let Some(host) = var("PGHOST") else {
        return Err(StoreError::unkeyed(
            StoreErrorKind::Config,
            "no PostgreSQL URL: pass one to PostgresSessionStoreBuilder::url, or set \
             DATABASE_URL or PGHOST (with PGPORT, PGUSER, PGPASSWORD, PGDATABASE)",
        ));
    };
    let mut config = tokio_postgres::Config::new();
    config.host(&host);
    if let Some(port) = var("PGPORT") {
        let port = port.parse().map_err(|_| {
            StoreError::unkeyed(
                StoreErrorKind::Config,
                format!("PGPORT={port:?} is not a port"),
            )
        })?;
        config.port(port);
    }
    let user = var("PGUSER")
        .or_else(|| var("USER"))
        .unwrap_or_else(|| "postgres".to_owned());
    config.dbname(var("PGDATABASE").unwrap_or_else(|| user.clone()));
    config.user(user);
    if let Some(password) = var("PGPASSWORD") {
        config.password(password);
    }
    Ok(config)
}

/// The kind of a PostgreSQL failure by its SQLSTATE (credentials, missing database or
/// table, privileges: `Config`; shutdown: `Unavailable`) or, without one, by whether
/// the connection is gone (`Unavailable`).
fn pg_kind(e: &tokio_postgres::Error) -> StoreErrorKind {
    if let Some(code) = e.code() {
        let config = [
            SqlState::INVALID_PASSWORD,
            SqlState::INVALID_AUTHORIZATION_SPECIFICATION,
            SqlState::INVALID_CATALOG_NAME,
            SqlState::UNDEFINED_TABLE,
            SqlState::INSUFFICIENT_PRIVILEGE,
        ];
        let down = [
            SqlState::ADMIN_SHUTDOWN,
            SqlState::CRASH_SHUTDOWN,
            SqlState::CANNOT_CONNECT_NOW,
            SqlState::TOO_MANY_CONNECTIONS,
        ];
        if config.contains(code) {
            return StoreErrorKind::Config;
        }
        if down.contains(code) {
            return StoreErrorKind::Unavailable;
        }
        return StoreErrorKind::Io;
    }
    let io = std::error::Error::source(e).is_some_and(|s| s.is::<std::io::Error>());
    if e.is_closed() || io {
        StoreErrorKind::Unavailable
    } else {
        StoreErrorKind::Io
    }
}

fn keyed(key: Option<&SessionKey>, kind: StoreErrorKind, message: String) -> StoreError {
    match key {
        Some(key) => StoreError::with_kind(kind, key, message),
        None => StoreError::unkeyed(kind, message),
    }
}

pub(crate) fn pg_error(
    key: Option<&SessionKey>,
    what: &str,
    e: &tokio_postgres::Error,
) -> StoreError {
    let detail = match e.as_db_error() {
        Some(db) => format!("{}: {}", db.severity(), db.message()),
        None => match std::error::Error::source(e) {
            Some(source) => format!("{e}: {source}"),
            None => e.to_string(),
        },
    };
    keyed(
        key,
        pg_kind(e),
        format!("PostgreSQL: {what} failed: {detail}"),
    )
}

pub(crate) fn pool_error(key: Option<&SessionKey>, what: &str, e: PoolError) -> StoreError {
    match e {
        PoolError::Backend(e) => pg_error(key, what, &e),
        PoolError::Timeout(t) => keyed(
            key,
            StoreErrorKind::Unavailable,
            format!("PostgreSQL: {what} failed: no connection within the timeout ({t:?})"),
        ),
        other => keyed(
            key,
            StoreErrorKind::Other,
            format!("PostgreSQL: {what} failed: {other}"),
        ),
    }
}

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

    /// A pooled connection, waiting for a free one at most `wait` (`None`: the pool's
    /// own wait timeout). A lease acquisition passes what is left of its lease wait, so
    /// a `Busy` refusal never waits longer for the pool than for the lease.
    async fn client(
        &self,
        key: Option<&SessionKey>,
        wait: Option<Duration>,
    ) -> Result<Object, StoreError> {
        let got = match wait {
            None => self.pool.get().await,
            Some(wait) => {
                let timeouts = Timeouts {
                    wait: Some(wait),
                    ..self.pool.timeouts()
                };
                self.pool.timeout_get(&timeouts).await
            }
        };
        got.map_err(|e| match (e, key, wait) {
            (PoolError::Timeout(TimeoutType::Wait), Some(key), Some(wait)) => {
                StoreError::with_kind(
                    StoreErrorKind::Busy,
                    key,
                    format!(
                        "no PostgreSQL connection came free within the lease wait ({wait:?}; \
                         all {} pooled connections are busy); nothing ran",
                        self.pool.status().max_size
                    ),
                )
            }
            (e, _, _) => pool_error(key, "getting a connection", e),
        })
    }

    /// A pooled connection and `sql` prepared on it (once per connection).
    async fn prepared(
        &self,
        key: Option<&SessionKey>,
        what: &str,
        sql: &str,
    ) -> Result<(Object, Statement), StoreError> {
        self.prepared_within(key, what, sql, None).await
    }

    /// [`prepared`](Self::prepared), waiting for a connection at most `wait`.
    async fn prepared_within(
        &self,
        key: Option<&SessionKey>,
        what: &str,
        sql: &str,
        wait: Option<Duration>,
    ) -> Result<(Object, Statement), StoreError> {
        let client = self.client(key, wait).await?;
        let statement = client
            .prepare_cached(sql)
            .await
            .map_err(|e| pg_error(key, what, &e))?;
        Ok((client, statement))
    }

    /// Runs a statement and returns its rows.
    async fn query(
        &self,
        key: Option<&SessionKey>,
        what: &str,
        sql: &str,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Vec<Row>, StoreError> {
        let (client, statement) = self.prepared(key, what, sql).await?;
        client
            .query(&statement, params)
            .await
            .map_err(|e| pg_error(key, what, &e))
    }

    /// Runs a statement and returns how many rows it changed.
    async fn execute(
        &self,
        key: Option<&SessionKey>,
        what: &str,
        sql: &str,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<u64, StoreError> {
        let (client, statement) = self.prepared(key, what, sql).await?;
        client
            .execute(&statement, params)
            .await
            .map_err(|e| pg_error(key, what, &e))
    }

    async fn inner_load(&self, key: &SessionKey) -> Result<StoredSession, StoreError> {
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
        let Some(row) = rows.first() else {
            return Ok(StoredSession::default());
        };
        let decode = |e: tokio_postgres::Error| corrupt(key, &e.to_string());
        let format: String = row.try_get(0).map_err(decode)?;
        let version: i64 = row.try_get(1).map_err(decode)?;
        let size: Option<i64> = row.try_get(3).map_err(decode)?;
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
            let count: Option<i64> = row.try_get(4).map_err(decode)?;
            let (Some(count), Some(_)) = (count, size) else {
                return Err(corrupt(key, "its msg_count or msg_bytes is NULL"));
            };
            let Some(texts) = row.try_get::<_, Option<Vec<String>>>(5).map_err(decode)? else {
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
        let Some(messages) = row.try_get::<_, Option<String>>(2).map_err(decode)? else {
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
    async fn inner_save(
        &self,
        key: &SessionKey,
        messages: &[Msg],
        unchanged: usize,
        expected: u64,
        lease: Option<&Lease>,
    ) -> Result<u64, StoreError> {
        let unchanged = unchanged.min(messages.len());
        match self
            .save_statement(key, messages, unchanged, expected, lease)
            .await
        {
            Err(NotSaved::Convert) if unchanged > 0 => self
                .save_statement(key, messages, 0, expected, lease)
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
                self.query(Some(key), what, &self.sql.insert_fenced, &params)
                    .await?
            }
            (Some(_), _) => {
                let params: [&(dyn ToSql + Sync); 9] =
                    [&k, &old, &new, &from, &texts, &bytes, &max, &token, &fence];
                self.query(Some(key), what, &self.sql.update_fenced, &params)
                    .await?
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

    async fn inner_delete(&self, key: &SessionKey) -> Result<bool, StoreError> {
        let k = key_string(key);
        let what = "deleting the session";
        let rows = self.query(Some(key), what, &self.sql.delete, &[&k]).await?;
        let n: i64 = match rows.first() {
            Some(row) => row.try_get(0).map_err(|e| pg_error(Some(key), what, &e))?,
            None => 0,
        };
        Ok(n > 0)
    }

    async fn inner_list(&self, user_id: Option<&str>) -> Result<Vec<SessionKey>, StoreError> {
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

    async fn inner_acquire(
        &self,
        key: &SessionKey,
        ttl: Duration,
        wait: Duration,
    ) -> Result<Lease, StoreError> {
        rein_core::store::check_key(key)?;
        let k = key_string(key);
        // The lease wait bounds the pool wait too: an attempt waits for a connection
        // only as long as is left of it (a `Busy` refusal, not the pool's timeout).
        let deadline = tokio::time::Instant::now() + wait;
        acquire_polling(key, ttl, wait, |token, ttl_ms| {
            let k = &k;
            async move {
                // At most 86,400,000 ms: exact as a float.
                let ms = ttl_ms as f64;
                let left = deadline.saturating_duration_since(tokio::time::Instant::now());
                let what = "acquiring the lease";
                let (client, statement) = self
                    .prepared_within(Some(key), what, &self.sql.acquire, Some(left))
                    .await?;
                let rows = client
                    .query(&statement, &[k, &token, &ms])
                    .await
                    .map_err(|e| pg_error(Some(key), what, &e))?;
                Ok(match rows.first() {
                    Some(row) => {
                        let fence: i64 = row
                            .try_get(0)
                            .map_err(|e| pg_error(Some(key), "acquiring the lease", &e))?;
                        Some(u64::try_from(fence).unwrap_or(0))
                    }
                    None => None,
                })
            }
        })
        .await
    }

    async fn inner_renew(&self, lease: &Lease) -> Result<(), StoreError> {
        let key = lease.key();
        let ms = ttl_millis(key, lease.ttl())? as f64;
        let (k, token) = (key_string(key), lease.token());
        let n = self
            .execute(
                Some(key),
                "renewing the lease",
                &self.sql.renew,
                &[&k, &token, &ms],
            )
            .await?;
        if n == 0 {
            return Err(StoreError::with_kind(
                StoreErrorKind::LeaseLost,
                key,
                "the lease expired or another holder took the session over",
            ));
        }
        Ok(())
    }

    async fn inner_release(&self, lease: &Lease) -> Result<bool, StoreError> {
        let key = lease.key();
        let (k, token) = (key_string(key), lease.token());
        let n = self
            .execute(
                Some(key),
                "releasing the lease",
                &self.sql.release,
                &[&k, &token],
            )
            .await?;
        Ok(n > 0)
    }
}

engine_store_traits!(PostgresSessionStore);
