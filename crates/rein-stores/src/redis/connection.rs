//! How the Redis store talks to the server: the shared connection, retried once when
//! the manager refuses a command before sending it, and the client's failures as store
//! errors.

use redis::aio::{ConnectionLike, ConnectionManager};
use redis::{Cmd, ErrorKind, Pipeline, RedisError, RedisFuture, Value};

use rein_core::store::{SessionKey, StoreError, StoreErrorKind};

/// The kind of a Redis failure: credentials and configuration are `Config`, transport
/// failures `Unavailable`, a value of the wrong type `Corrupt`, the rest `Io`.
fn redis_kind(e: &RedisError) -> StoreErrorKind {
    match e.code() {
        Some("NOAUTH" | "WRONGPASS" | "NOPERM") => return StoreErrorKind::Config,
        Some("LOADING" | "MASTERDOWN" | "TRYAGAIN" | "BUSY") => {
            return StoreErrorKind::Unavailable;
        }
        Some("WRONGTYPE") => return StoreErrorKind::Corrupt,
        _ => {}
    }
    match e.kind() {
        ErrorKind::AuthenticationFailed | ErrorKind::InvalidClientConfig => StoreErrorKind::Config,
        _ if e.is_io_error()
            || e.is_connection_refusal()
            || e.is_timeout()
            || e.is_connection_dropped() =>
        {
            StoreErrorKind::Unavailable
        }
        _ => StoreErrorKind::Io,
    }
}

pub(super) fn redis_error(key: Option<&SessionKey>, what: &str, e: RedisError) -> StoreError {
    let kind = redis_kind(&e);
    let message = format!("Redis: {what} failed: {e}");
    match key {
        Some(key) => StoreError::with_kind(kind, key, message),
        None => StoreError::unkeyed(kind, message),
    }
    .with_source(e)
}

/// The store's connection for one operation: the shared `ConnectionManager`, with one
/// retry of a command refused for want of a connection. The manager keeps the outcome of
/// its last reconnection attempt, so the first command after the server is back would
/// otherwise fail with the stale "connection refused" (and only start the reconnection);
/// a refused command was never sent, so sending it again is safe even for a save.
pub(super) struct Retrying(pub(super) ConnectionManager);

impl ConnectionLike for Retrying {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        Box::pin(async move {
            match self.0.req_packed_command(cmd).await {
                Err(e) if e.is_connection_refusal() => self.0.req_packed_command(cmd).await,
                other => other,
            }
        })
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        Box::pin(async move {
            match self.0.req_packed_commands(pipeline, offset, count).await {
                Err(e) if e.is_connection_refusal() => {
                    self.0.req_packed_commands(pipeline, offset, count).await
                }
                other => other,
            }
        })
    }

    fn get_db(&self) -> i64 {
        self.0.get_db()
    }
}
