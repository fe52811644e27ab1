//! [`PostgresAuditSink`]: audit records of every replica in one PostgreSQL table.

use std::fmt;
use std::sync::Arc;

use deadpool_postgres::Pool;

use crate::postgres::{PgOptions, open_pool, pg_builder_setters, pg_error, pool_error};
use rein_core::StoreError;
use rein_hooks::{AuditRecord, AuditSink, AuditSinkError};

/// The default table name.
const DEFAULT_TABLE: &str = "rein_audit";

/// An [`AuditSink`] that inserts records into a PostgreSQL table (feature `postgres`),
/// so the audit of every replica lands in one place.
///
/// The [`AuditHook`](rein_hooks::AuditHook) hands records to
/// [`write_batch`](AuditSink::write_batch) from its background task (never on the
/// agent's path); each batch is **one** `INSERT … SELECT … FROM unnest(…)` statement,
/// so it lands whole or not at all. A batch that fails (server down, table dropped)
/// reports every record as failed: they are logged and counted in
/// [`AuditStats::dropped`](rein_hooks::AuditStats::dropped), the call never fails.
///
/// # Table
/// With the table name `t` (default `rein_audit`; lowercase letters, digits and `_`,
/// optionally `schema.` first), [`PostgresAuditSinkBuilder::connect`] runs this
/// idempotent migration (in one transaction, under an advisory lock, so replicas
/// starting together do not race), unless turned off with
/// [`PostgresAuditSinkBuilder::migrate`]:
///
/// ```sql
/// CREATE TABLE IF NOT EXISTS t (
///     id          bigserial PRIMARY KEY,      -- insertion order
///     ts          timestamptz NOT NULL,       -- the record's ts_ms
///     kind        text NOT NULL,              -- the record's type: tool-call, tool-denied, …
///     agent       text NOT NULL,
///     agent_id    text NOT NULL,
///     session_id  text NOT NULL,
///     run_id      text NOT NULL,
///     user_id     text,
///     tool        text,
///     record      text NOT NULL,              -- the whole record, as its JSON line
///     written_at  timestamptz NOT NULL DEFAULT now()
/// );
/// CREATE INDEX IF NOT EXISTS t_session ON t (session_id, ts);
/// ```
///
/// `record` is `text`, not `jsonb` (`jsonb` rejects `\u0000`, which a record may
/// carry); `record::jsonb` works in queries on records without it. Personal data in
/// `record` is masked as the hook's [`AuditConfig`](rein_hooks::AuditConfig) says.
///
/// # Connection
/// As [`PostgresSessionStore`](super::PostgresSessionStore): the URL from the builder,
/// else `DATABASE_URL`, else the `PG*` variables; a pool (default 2 connections).
#[derive(Clone)]
pub struct PostgresAuditSink {
    pool: Pool,
    table: Arc<str>,
    insert: Arc<str>,
}

impl fmt::Debug for PostgresAuditSink {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PostgresAuditSink")
            .field("table", &self.table)
            .finish_non_exhaustive()
    }
}

/// Configures and connects a [`PostgresAuditSink`]; from [`PostgresAuditSink::builder`].
#[derive(Clone, Debug)]
pub struct PostgresAuditSinkBuilder {
    opts: PgOptions,
}

impl Default for PostgresAuditSinkBuilder {
    fn default() -> Self {
        Self {
            // The hook writes one batch at a time.
            opts: PgOptions::new(DEFAULT_TABLE, 2),
        }
    }
}

impl PostgresAuditSinkBuilder {
    pg_builder_setters!("rein_audit", 2, "the table");

    /// Validates the table name, connects and runs the migration.
    ///
    /// # Errors
    /// [`StoreErrorKind::Config`](rein_core::StoreErrorKind::Config) for an invalid table
    /// name, no or a malformed URL, credentials the server rejects or a missing
    /// database; [`StoreErrorKind::Unavailable`](rein_core::StoreErrorKind::Unavailable)
    /// when the server cannot be reached; [`StoreErrorKind::Io`](rein_core::StoreErrorKind::Io)
    /// when the migration fails.
    pub async fn connect(self) -> Result<PostgresAuditSink, StoreError> {
        let (pool, client) = open_pool(&self.opts).await?;
        let table = self.opts.table;
        // `table` is validated: lowercase identifiers, optionally schema-qualified.
        let (t, index) = match table.split_once('.') {
            Some((schema, name)) => (
                format!("\"{schema}\".\"{name}\""),
                format!("{name}_session"),
            ),
            None => (format!("\"{table}\""), format!("{table}_session")),
        };
        if self.opts.migrate {
            let migrate = format!(
                "BEGIN;
                 SELECT pg_advisory_xact_lock(7317116273459143252);
                 CREATE TABLE IF NOT EXISTS {t} (
                     id          bigserial PRIMARY KEY,
                     ts          timestamptz NOT NULL,
                     kind        text NOT NULL,
                     agent       text NOT NULL,
                     agent_id    text NOT NULL,
                     session_id  text NOT NULL,
                     run_id      text NOT NULL,
                     user_id     text,
                     tool        text,
                     record      text NOT NULL,
                     written_at  timestamptz NOT NULL DEFAULT now()
                 );
                 CREATE INDEX IF NOT EXISTS \"{index}\" ON {t} (session_id, ts);
                 COMMIT;"
            );
            client
                .batch_execute(&migrate)
                .await
                .map_err(|e| pg_error(None, "creating the audit table", &e))?;
        }
        drop(client);
        let insert = format!(
            "INSERT INTO {t} (ts, kind, agent, agent_id, session_id, run_id, user_id, tool, record) \
             SELECT to_timestamp(ts / 1000.0), kind, agent, agent_id, session_id, run_id, user_id, tool, record \
             FROM unnest($1::bigint[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[], \
                         $7::text[], $8::text[], $9::text[]) \
             AS r(ts, kind, agent, agent_id, session_id, run_id, user_id, tool, record)"
        );
        Ok(PostgresAuditSink {
            pool,
            table: table.into(),
            insert: insert.into(),
        })
    }
}

impl PostgresAuditSink {
    /// A builder with the defaults (table `rein_audit`, URL from the environment).
    pub fn builder() -> PostgresAuditSinkBuilder {
        PostgresAuditSinkBuilder::default()
    }

    /// The table name.
    pub fn table(&self) -> &str {
        &self.table
    }

    /// Inserts the records in one statement.
    async fn insert(&self, records: &[AuditRecord]) -> Result<(), StoreError> {
        let n = records.len();
        let mut ts = Vec::with_capacity(n);
        let (mut kind, mut agent, mut agent_id) = (
            Vec::with_capacity(n),
            Vec::with_capacity(n),
            Vec::with_capacity(n),
        );
        let (mut session, mut run, mut user, mut tool, mut line) = (
            Vec::with_capacity(n),
            Vec::with_capacity(n),
            Vec::with_capacity(n),
            Vec::with_capacity(n),
            Vec::with_capacity(n),
        );
        for r in records {
            ts.push(i64::try_from(r.ts_ms).unwrap_or(i64::MAX));
            kind.push(r.kind.as_str().to_owned());
            agent.push(r.agent.clone());
            agent_id.push(r.agent_id.clone());
            session.push(r.session_id.clone());
            run.push(r.run_id.clone());
            user.push(r.user_id.clone());
            tool.push(r.tool.clone());
            line.push(r.to_json_line());
        }
        let client = self
            .pool
            .get()
            .await
            .map_err(|e| pool_error(None, "writing audit records", e))?;
        client
            .execute(
                &*self.insert,
                &[
                    &ts, &kind, &agent, &agent_id, &session, &run, &user, &tool, &line,
                ],
            )
            .await
            .map_err(|e| pg_error(None, "writing audit records", &e))?;
        Ok(())
    }
}

impl AuditSink for PostgresAuditSink {
    async fn write(&self, record: AuditRecord) -> Result<(), AuditSinkError> {
        self.insert(std::slice::from_ref(&record))
            .await
            .map_err(|e| AuditSinkError::new(e.to_string()))
    }

    async fn write_batch(&self, records: Vec<AuditRecord>) -> Vec<Result<(), AuditSinkError>> {
        if records.is_empty() {
            return Vec::new();
        }
        match self.insert(&records).await {
            Ok(()) => records.iter().map(|_| Ok(())).collect(),
            Err(e) => records
                .iter()
                .map(|_| Err(AuditSinkError::new(e.to_string())))
                .collect(),
        }
    }
}
