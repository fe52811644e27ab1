//! `RedisSessionStore`: sessions in Redis, every check and write in one Lua script.
//!
//! A session is a hash (format, version, fence, message count and bytes) and a list of
//! JSON messages; a lease is a key with a token and a TTL next to a fence counter.
//! Every operation is one script (`scripts`), so what it checks and what it writes are
//! one atomic step on the server: a save compares the version (and, fenced, the
//! lease's token and fence) and writes only the messages the call changed
//! (`session`); an acquisition sets the lease and raises the fence, and can load the
//! session in the same script, and the last save of a leased call can release the
//! lease in its own script (`lease`): a leased call is then two round trips, not
//! four. `connection` maps the client's failures to store errors and retries a command
//! the manager refused before sending it.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use redis::aio::{ConnectionManager, ConnectionManagerConfig};

use crate::key_string;
use rein_core::Msg;
use rein_core::store::{SessionKey, StoreError, StoreErrorKind};

mod connection;
mod lease;
mod scripts;
mod session;

use connection::{Retrying, redis_error};
use scripts::Scripts;

/// A [`SessionStore`](rein_core::SessionStore) on Redis (feature `redis`), with [`SessionAdmin`](rein_core::store::SessionAdmin) and
/// [`SessionLeases`](rein_core::store::SessionLeases).
///
/// # Keys
/// With the key prefix `p` (default `rein:`) and `k` the session key as the JSON array
/// `[user or null, session]`:
/// - `p` `session:` `k` — a hash: `format` (`rein-session/2`), `version`, `key` (`k`),
///   `fence` (of the last fenced save), `length` (how many messages) and `bytes` (the
///   bytes of their JSON texts, for the session size bound);
/// - `p` `messages:` `k` — a list: one JSON message per element, oldest first;
/// - `p` `user:` + the user as JSON (`"alice"` or `null`) — a set of the user's session
///   ids (for [`SessionAdmin::list`](rein_core::store::SessionAdmin::list));
/// - `p` `lease:` `k` — the lease token, expiring after the TTL (`SET NX PX`);
/// - `p` `fence:` `k` — the fence counter (never expires; if it is evicted or deleted,
///   the next acquisition re-seeds it above the session's saved fence).
///
/// Every save runs one Lua script that checks the stored format, key and version (and
/// the lease, for a fenced save) and writes only if all match, so it is atomic with
/// respect to loads and other savers. A save writes only what changed
/// ([`SessionStore::save_from`](rein_core::SessionStore::save_from)): it trims the list
/// to the unchanged messages (`LTRIM`) and appends the rest (`RPUSH`), so the bytes a
/// call writes do not grow with the history; a load reads the hash and the whole list
/// in one script. Under a lease, the acquisition loads in its own script
/// ([`SessionLeases::acquire_and_load`](rein_core::store::SessionLeases::acquire_and_load))
/// and the last fenced save releases in its own
/// ([`SessionLeases::save_fenced_and_release`](rein_core::store::SessionLeases::save_fenced_and_release)):
/// a leased call is two round trips.
///
/// A session saved before this layout (format `rein-session/1`: the whole history in
/// the hash field `messages`) loads as before and is converted by its first save (one
/// more script run, with the whole history). Replicas running an older version refuse
/// a converted session as [`StoreErrorKind::Corrupt`] and never overwrite it: upgrade
/// every replica. A key that holds anything else is
/// [`StoreErrorKind::Corrupt`] and never overwritten. Meant for a single Redis server
/// (or a primary with replicas); Redis Cluster is not supported, as a save touches keys
/// of several hash slots.
///
/// The connection is tokio's `ConnectionManager` (one multiplexed connection, shared by
/// clones), which reconnects by itself: while the server is down calls fail with
/// [`StoreErrorKind::Unavailable`], and the next call after it is back works.
///
/// ```no_run
/// # async fn demo() -> Result<(), rein::StoreError> {
/// use rein::store::RedisSessionStore;
/// let store = RedisSessionStore::builder()
///     .url("redis://127.0.0.1:6379")
///     .key_prefix("myapp:rein:")
///     .connect()
///     .await?;
/// # let _ = store; Ok(()) }
/// ```
#[derive(Clone)]
pub struct RedisSessionStore {
    conn: ConnectionManager,
    prefix: Arc<str>,
    scripts: Arc<Scripts>,
    /// The largest history saved or loaded, in bytes of its JSON.
    max_bytes: usize,
}

impl fmt::Debug for RedisSessionStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisSessionStore")
            .field("prefix", &self.prefix)
            .finish_non_exhaustive()
    }
}

/// Configures and connects a [`RedisSessionStore`]; from [`RedisSessionStore::builder`].
#[derive(Clone, Debug)]
pub struct RedisSessionStoreBuilder {
    url: Option<String>,
    prefix: String,
    connect_timeout: Duration,
    response_timeout: Duration,
    connect_retries: usize,
    max_bytes: usize,
}

impl Default for RedisSessionStoreBuilder {
    fn default() -> Self {
        Self {
            url: None,
            prefix: "rein:".to_owned(),
            connect_timeout: Duration::from_secs(5),
            response_timeout: Duration::from_secs(10),
            connect_retries: 2,
            max_bytes: rein_core::store::DEFAULT_MAX_SESSION_BYTES,
        }
    }
}

impl RedisSessionStoreBuilder {
    /// The largest session saved or loaded, in bytes of its JSON history (default
    /// [`DEFAULT_MAX_SESSION_BYTES`](rein_core::store::DEFAULT_MAX_SESSION_BYTES), 32 MiB).
    /// A larger save fails with [`StoreErrorKind::TooLarge`] and writes nothing; a
    /// larger stored history fails its load the same way, and the server never sends it.
    #[must_use]
    pub fn max_session_bytes(mut self, bytes: usize) -> Self {
        self.max_bytes = bytes;
        self
    }

    /// The server URL (`redis://[user:password@]host:port[/db]`). Default: the `REDIS_URL`
    /// environment variable.
    #[must_use]
    pub fn url(mut self, url: impl Into<String>) -> Self {
        self.url = Some(url.into());
        self
    }

    /// The prefix of every key the store writes (default `rein:`), to share a database
    /// with other data or between applications.
    #[must_use]
    pub fn key_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.prefix = prefix.into();
        self
    }

    /// How long one connection attempt may take (default 5 s).
    #[must_use]
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// How long one command may wait for its reply (default 10 s); past it the call fails
    /// with [`StoreErrorKind::Unavailable`].
    #[must_use]
    pub fn response_timeout(mut self, timeout: Duration) -> Self {
        self.response_timeout = timeout;
        self
    }

    /// How many times a connection is retried (with exponential backoff from 100 ms)
    /// before a call fails (default 2).
    #[must_use]
    pub fn connect_retries(mut self, retries: usize) -> Self {
        self.connect_retries = retries;
        self
    }

    /// Connects and checks the server answers (a `PING`, so wrong credentials fail here).
    ///
    /// # Errors
    /// [`StoreErrorKind::Config`] for no URL (neither given nor in `REDIS_URL`), a
    /// malformed one, a prefix longer than 256 bytes or credentials the server rejects;
    /// [`StoreErrorKind::Unavailable`] when the server cannot be reached.
    pub async fn connect(self) -> Result<RedisSessionStore, StoreError> {
        let url = match self.url {
            Some(url) => url,
            None => std::env::var("REDIS_URL").map_err(|_| {
                StoreError::unkeyed(
                    StoreErrorKind::Config,
                    "no Redis URL: pass one to RedisSessionStoreBuilder::url or set REDIS_URL",
                )
            })?,
        };
        if self.prefix.len() > 256 {
            return Err(StoreError::unkeyed(
                StoreErrorKind::Config,
                format!(
                    "the Redis key prefix is {} bytes; at most 256",
                    self.prefix.len()
                ),
            ));
        }
        let client = redis::Client::open(url.as_str()).map_err(|e| {
            StoreError::unkeyed(
                StoreErrorKind::Config,
                format!("the Redis URL is not valid: {e}"),
            )
            .with_source(e)
        })?;
        let config = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(self.connect_timeout))
            .set_response_timeout(Some(self.response_timeout))
            .set_number_of_retries(self.connect_retries);
        let mut conn = client
            .get_connection_manager_with_config(config)
            .await
            .map_err(|e| redis_error(None, "connecting to Redis", e))?;
        let _: String = redis::cmd("PING")
            .query_async(&mut conn)
            .await
            .map_err(|e| redis_error(None, "the first command (PING)", e))?;
        Ok(RedisSessionStore {
            conn,
            max_bytes: self.max_bytes,
            prefix: self.prefix.into(),
            scripts: Arc::new(Scripts::new()),
        })
    }
}

impl RedisSessionStore {
    fn conn(&self) -> Retrying {
        Retrying(self.conn.clone())
    }

    /// A builder (URL from `REDIS_URL` unless given, prefix `rein:`).
    pub fn builder() -> RedisSessionStoreBuilder {
        RedisSessionStoreBuilder::default()
    }

    /// Connects to `url` with the default settings.
    ///
    /// # Errors
    /// As [`RedisSessionStoreBuilder::connect`].
    pub async fn connect(url: &str) -> Result<Self, StoreError> {
        Self::builder().url(url).connect().await
    }

    /// The key prefix.
    pub fn key_prefix(&self) -> &str {
        &self.prefix
    }

    /// The Redis key of a session's hash.
    pub fn data_key(&self, key: &SessionKey) -> String {
        format!("{}session:{}", self.prefix, key_string(key))
    }

    fn user_key(&self, user_id: Option<&str>) -> String {
        format!("{}user:{}", self.prefix, serde_json::json!(user_id))
    }

    fn lease_key(&self, key: &SessionKey) -> String {
        format!("{}lease:{}", self.prefix, key_string(key))
    }

    /// The Redis key of a session's message list (one JSON message per element).
    pub fn messages_key(&self, key: &SessionKey) -> String {
        format!("{}messages:{}", self.prefix, key_string(key))
    }

    fn fence_key(&self, key: &SessionKey) -> String {
        format!("{}fence:{}", self.prefix, key_string(key))
    }

    /// The queue of waiters (a sorted set by arrival), their expiries (a hash), the
    /// arrival counter and the holder's signal.
    fn queue_keys(&self, key: &SessionKey) -> [String; 4] {
        let k = key_string(key);
        ["queue", "waiters", "arrivals", "signal"].map(|what| format!("{}{what}:{k}", self.prefix))
    }
}

engine_store_traits!(RedisSessionStore);
