//! How the PostgreSQL store and audit sink reach the server: the pool (built from the
//! URL or the `PG*` variables), a prepared statement on a pooled connection, and the
//! driver's and the pool's failures as store errors by SQLSTATE.

use std::time::Duration;

use deadpool_postgres::{
    Manager, ManagerConfig, Object, Pool, PoolError, RecyclingMethod, Runtime, TimeoutType,
    Timeouts,
};
use tokio_postgres::error::SqlState;
use tokio_postgres::types::ToSql;
use tokio_postgres::{NoTls, Row, Statement};

use rein_core::store::{SessionKey, StoreError, StoreErrorKind};

use super::{PgOptions, PostgresSessionStore, valid_identifier};

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

impl PostgresSessionStore {
    /// A pooled connection, waiting for a free one at most `wait` (`None`: the pool's
    /// own wait timeout). A lease acquisition passes what is left of its lease wait, so
    /// a `Busy` refusal never waits longer for the pool than for the lease.
    pub(super) async fn client(
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
    pub(super) async fn prepared(
        &self,
        key: Option<&SessionKey>,
        what: &str,
        sql: &str,
    ) -> Result<(Object, Statement), StoreError> {
        self.prepared_within(key, what, sql, None).await
    }

    /// [`prepared`](Self::prepared), waiting for a connection at most `wait`.
    pub(super) async fn prepared_within(
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
    pub(super) async fn query(
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
    pub(super) async fn execute(
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
}
