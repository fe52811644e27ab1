//! `RedisSessionStore`: sessions in Redis, saved by a Lua compare-and-set.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use redis::aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig};
use redis::{Cmd, ErrorKind, Pipeline, RedisError, RedisFuture, Script, Value};

use crate::lease::acquire_polling;
use crate::{FORMAT, decode_messages, encode_messages, key_string};
use rein_core::Msg;
use rein_core::store::Lease;
use rein_core::store::{SessionKey, StoreError, StoreErrorKind, StoredSession, next_version};

/// Loads a session hash: `{'none'}`, `{'corrupt', why}`, `{'too_large', bytes}` (its
/// messages are over ARGV[1] bytes: not read) or `{'ok', format, version, key, messages}`.
const LOAD: &str = r"
local t = redis.call('TYPE', KEYS[1]).ok
if t == 'none' then return {'none'} end
if t ~= 'hash' then return {'corrupt', 'the key holds a ' .. t .. ', not a session hash'} end
local n = redis.call('HSTRLEN', KEYS[1], 'messages')
if n > tonumber(ARGV[1]) then return {'too_large', string.format('%d', n)} end
local h = redis.call('HMGET', KEYS[1], 'format', 'version', 'key', 'messages')
return {'ok', h[1] or '', h[2] or '', h[3] or '', h[4] or ''}
";

/// Compare-and-set of a session. KEYS: data hash, user index set, lease. ARGV: expected
/// version, new version, key string, messages, session id, lease token ('' = unfenced),
/// fence. Returns `{'ok', version}`, `{'conflict', found}`, `{'corrupt', why}` or
/// `{'lost', why}`.
const SAVE: &str = r"
local t = redis.call('TYPE', KEYS[1]).ok
local found = '0'
local fence = 0
if t == 'hash' then
  local h = redis.call('HMGET', KEYS[1], 'format', 'version', 'key', 'fence')
  if h[1] ~= 'rein-session/1' then return {'corrupt', 'its format field is not rein-session/1'} end
  if not h[2] or not string.match(h[2], '^[1-9][0-9]*$') then return {'corrupt', 'its version field is not a positive integer'} end
  if h[3] ~= ARGV[3] then return {'corrupt', 'it holds another session'} end
  found = h[2]
  fence = tonumber(h[4] or '0') or 0
elseif t ~= 'none' then
  return {'corrupt', 'the key holds a ' .. t .. ', not a session hash'}
end
if ARGV[6] ~= '' then
  if redis.call('GET', KEYS[3]) ~= ARGV[6] then return {'lost', 'the lease expired or another holder took the session over'} end
  if fence > tonumber(ARGV[7]) then return {'lost', 'a later lease (fence ' .. string.format('%d', fence) .. ') already saved the session'} end
  fence = tonumber(ARGV[7])
end
if found ~= ARGV[1] then return {'conflict', found} end
redis.call('HSET', KEYS[1], 'format', 'rein-session/1', 'version', ARGV[2], 'key', ARGV[3], 'fence', string.format('%d', fence), 'messages', ARGV[4])
if found == '0' then redis.call('SADD', KEYS[2], ARGV[5]) end
return {'ok', ARGV[2]}
";

/// KEYS: data hash, user index. ARGV: session id. Returns the number of keys removed.
const DELETE: &str = r"
local n = redis.call('DEL', KEYS[1])
redis.call('SREM', KEYS[2], ARGV[1])
return n
";

/// KEYS: lease, fence counter, data hash. ARGV: token, TTL in ms. Returns the new fence,
/// or 0. The fence is above the one the session was last saved with even when the
/// counter key was evicted or deleted (it is then re-seeded from the session), so a
/// lost counter never makes every later holder's writes fail.
const ACQUIRE: &str = r"
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  local f = redis.call('INCR', KEYS[2])
  if redis.call('TYPE', KEYS[3]).ok == 'hash' then
    local saved = tonumber(redis.call('HGET', KEYS[3], 'fence') or '0') or 0
    if f <= saved then
      f = saved + 1
      redis.call('SET', KEYS[2], string.format('%d', f))
    end
  end
  return f
end
return 0
";

/// KEYS: lease. ARGV: token, TTL in ms. Returns 1 when renewed.
const RENEW: &str = r"
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('PEXPIRE', KEYS[1], ARGV[2]) end
return 0
";

/// KEYS: lease. ARGV: token. Returns 1 when released.
const RELEASE: &str = r"
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
";

struct Scripts {
    load: Script,
    save: Script,
    delete: Script,
    acquire: Script,
    renew: Script,
    release: Script,
}

/// A [`SessionStore`](rein_core::SessionStore) on Redis (feature `redis`), with [`SessionAdmin`](rein_core::store::SessionAdmin) and
/// [`SessionLeases`](rein_core::store::SessionLeases).
///
/// # Keys
/// With the key prefix `p` (default `rein:`) and `k` the session key as the JSON array
/// `[user or null, session]`:
/// - `p` `session:` `k` — a hash: `format` (`rein-session/1`), `version`, `key` (`k`),
///   `fence` (of the last fenced save) and `messages` (the JSON history);
/// - `p` `user:` + the user as JSON (`"alice"` or `null`) — a set of the user's session
///   ids (for [`SessionAdmin::list`](rein_core::store::SessionAdmin::list));
/// - `p` `lease:` `k` — the lease token, expiring after the TTL (`SET NX PX`);
/// - `p` `fence:` `k` — the fence counter (never expires; if it is evicted or deleted,
///   the next acquisition re-seeds it above the session's saved fence).
///
/// Every save runs one Lua script that checks the stored format, key and version (and
/// the lease, for a fenced save) and writes only if all match, so it is atomic with
/// respect to loads and other savers. A key that holds anything else is
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
            scripts: Arc::new(Scripts {
                load: Script::new(LOAD),
                save: Script::new(SAVE),
                delete: Script::new(DELETE),
                acquire: Script::new(ACQUIRE),
                renew: Script::new(RENEW),
                release: Script::new(RELEASE),
            }),
        })
    }
}

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

fn redis_error(key: Option<&SessionKey>, what: &str, e: RedisError) -> StoreError {
    let kind = redis_kind(&e);
    let message = format!("Redis: {what} failed: {e}");
    match key {
        Some(key) => StoreError::with_kind(kind, key, message),
        None => StoreError::unkeyed(kind, message),
    }
    .with_source(e)
}

fn corrupt(key: &SessionKey, why: &str) -> StoreError {
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

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// The store's connection for one operation: the shared `ConnectionManager`, with one
/// retry of a command refused for want of a connection. The manager keeps the outcome of
/// its last reconnection attempt, so the first command after the server is back would
/// otherwise fail with the stale "connection refused" (and only start the reconnection);
/// a refused command was never sent, so sending it again is safe even for a save.
struct Retrying(ConnectionManager);

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

    fn fence_key(&self, key: &SessionKey) -> String {
        format!("{}fence:{}", self.prefix, key_string(key))
    }

    async fn inner_load(&self, key: &SessionKey) -> Result<StoredSession, StoreError> {
        rein_core::store::check_key(key)?;
        let mut conn = self.conn();
        let reply: Vec<Vec<u8>> = self
            .scripts
            .load
            .key(self.data_key(key))
            .arg(self.max_bytes)
            .invoke_async(&mut conn)
            .await
            .map_err(|e| redis_error(Some(key), "loading the session", e))?;
        match reply.as_slice() {
            [status] if status == b"none" => Ok(StoredSession::default()),
            [status, why] if status == b"corrupt" => Err(corrupt(key, &text(why))),
            [status, n] if status == b"too_large" => Err(rein_core::store::too_large(
                key,
                "loading",
                text(n).parse().unwrap_or(u64::MAX),
                self.max_bytes,
            )),
            [status, format, version, stored_key, messages] if status == b"ok" => {
                if format.as_slice() != FORMAT.as_bytes() {
                    return Err(corrupt(key, &format!("format `{}`", text(format))));
                }
                if stored_key.as_slice() != key_string(key).as_bytes() {
                    return Err(corrupt(key, "it holds another session"));
                }
                let version = parse_version(version).ok_or_else(|| {
                    corrupt(
                        key,
                        &format!(
                            "its `version` field `{}` is not a positive integer without sign or \
                             leading zero (what a save writes)",
                            text(version)
                        ),
                    )
                })?;
                let messages = decode_messages(key, messages, "the Redis hash")?;
                Ok(StoredSession::new(messages, version))
            }
            _ => Err(StoreError::with_kind(
                StoreErrorKind::Io,
                key,
                "Redis: unexpected reply from the load script",
            )),
        }
    }

    async fn inner_save(
        &self,
        key: &SessionKey,
        messages: &[Msg],
        expected: u64,
        lease: Option<&Lease>,
    ) -> Result<u64, StoreError> {
        rein_core::store::check_key(key)?;
        rein_core::store::check_storable(key, messages)?;
        if lease.is_some_and(|l| l.token().is_empty()) {
            // The script reads an empty token as "unfenced": such a lease is never held.
            return Err(StoreError::with_kind(
                StoreErrorKind::LeaseLost,
                key,
                "nothing saved: a lease with an empty token is not held",
            ));
        }
        let version = next_version(key, expected)?;
        let payload = encode_messages(key, messages)?;
        rein_core::store::check_size(key, payload.as_bytes(), self.max_bytes)?;
        let mut conn = self.conn();
        let reply: Vec<Vec<u8>> = self
            .scripts
            .save
            .key(self.data_key(key))
            .key(self.user_key(key.user_id.as_deref()))
            .key(self.lease_key(key))
            .arg(expected.to_string())
            .arg(version.to_string())
            .arg(key_string(key))
            .arg(payload)
            .arg(&key.session_id)
            .arg(lease.map_or("", Lease::token))
            .arg(lease.map_or(0, Lease::fence).to_string())
            .invoke_async(&mut conn)
            .await
            .map_err(|e| redis_error(Some(key), "saving the session", e))?;
        match reply.as_slice() {
            [status, _] if status == b"ok" => Ok(version),
            [status, found] if status == b"conflict" => {
                let found = text(found).parse().unwrap_or(0);
                Err(StoreError::conflict(key, expected, found))
            }
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

    async fn inner_delete(&self, key: &SessionKey) -> Result<bool, StoreError> {
        let mut conn = self.conn();
        let removed: u64 = self
            .scripts
            .delete
            .key(self.data_key(key))
            .key(self.user_key(key.user_id.as_deref()))
            .arg(&key.session_id)
            .invoke_async(&mut conn)
            .await
            .map_err(|e| redis_error(Some(key), "deleting the session", e))?;
        Ok(removed > 0)
    }

    async fn inner_list(&self, user_id: Option<&str>) -> Result<Vec<SessionKey>, StoreError> {
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

    async fn inner_acquire(
        &self,
        key: &SessionKey,
        ttl: Duration,
        wait: Duration,
    ) -> Result<Lease, StoreError> {
        rein_core::store::check_key(key)?;
        let (lease_key, fence_key, data_key) =
            (self.lease_key(key), self.fence_key(key), self.data_key(key));
        acquire_polling(key, ttl, wait, |token, ttl_ms| {
            let mut conn = self.conn();
            let (lease_key, fence_key, data_key) = (&lease_key, &fence_key, &data_key);
            async move {
                let fence: u64 = self
                    .scripts
                    .acquire
                    .key(lease_key)
                    .key(fence_key)
                    .key(data_key)
                    .arg(token)
                    .arg(ttl_ms)
                    .invoke_async(&mut conn)
                    .await
                    .map_err(|e| redis_error(Some(key), "acquiring the lease", e))?;
                Ok((fence > 0).then_some(fence))
            }
        })
        .await
    }

    async fn inner_renew(&self, lease: &Lease) -> Result<(), StoreError> {
        let key = lease.key();
        let ttl_ms = rein_core::store::ttl_millis(key, lease.ttl())?;
        let mut conn = self.conn();
        let renewed: u64 = self
            .scripts
            .renew
            .key(self.lease_key(key))
            .arg(lease.token())
            .arg(ttl_ms)
            .invoke_async(&mut conn)
            .await
            .map_err(|e| redis_error(Some(key), "renewing the lease", e))?;
        if renewed == 0 {
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
        let mut conn = self.conn();
        let released: u64 = self
            .scripts
            .release
            .key(self.lease_key(key))
            .arg(lease.token())
            .invoke_async(&mut conn)
            .await
            .map_err(|e| redis_error(Some(key), "releasing the lease", e))?;
        Ok(released > 0)
    }
}

engine_store_traits!(RedisSessionStore);
