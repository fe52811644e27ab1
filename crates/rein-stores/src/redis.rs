//! `RedisSessionStore`: sessions in Redis, saved by a Lua compare-and-set.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use redis::aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig};
use redis::{Cmd, ErrorKind, Pipeline, RedisError, RedisFuture, Script, Value};

use crate::lease::acquire_polling;
use crate::{
    FORMAT, FORMAT_APPEND, array_bytes, decode_each, decode_messages, encode_each, key_string,
};
use rein_core::Msg;
use rein_core::store::Lease;
use rein_core::store::{SessionKey, StoreError, StoreErrorKind, StoredSession, next_version};

/// Loads a session. KEYS: data hash, message list. ARGV: the largest history read, in
/// bytes of its JSON. Returns `{'none'}`, `{'corrupt', why}`, `{'too_large', bytes}`
/// (not read), `{'ok1', format, version, key, messages}` (a session of the whole-history
/// format, its JSON in the hash field `messages`) or `{'ok2', format, version, key,
/// length, m1, m2, …}` (one JSON message per list element).
const LOAD: &str = r"
local t = redis.call('TYPE', KEYS[1]).ok
if t == 'none' then return {'none'} end
if t ~= 'hash' then return {'corrupt', 'the key holds a ' .. t .. ', not a session hash'} end
local h = redis.call('HMGET', KEYS[1], 'format', 'version', 'key', 'length', 'bytes')
if h[1] ~= 'rein-session/2' then
  local n = redis.call('HSTRLEN', KEYS[1], 'messages')
  if n > tonumber(ARGV[1]) then return {'too_large', string.format('%d', n)} end
  return {'ok1', h[1] or '', h[2] or '', h[3] or '', redis.call('HGET', KEYS[1], 'messages') or ''}
end
local len = tonumber(h[4] or '')
local bytes = tonumber(h[5] or '')
if not len or not bytes then return {'corrupt', 'its length or bytes field is not a number'} end
local size = bytes + math.max(len - 1, 0) + 2
if size > tonumber(ARGV[1]) then return {'too_large', string.format('%d', size)} end
local r = {'ok2', h[1], h[2] or '', h[3] or '', string.format('%d', len)}
for _, m in ipairs(redis.call('LRANGE', KEYS[2], 0, -1)) do r[#r + 1] = m end
return r
";

/// Compare-and-set of a session, writing only what changed. KEYS: data hash, user index
/// set, lease, message list. ARGV: expected version, new version, key string, session
/// id, lease token ('' = unfenced), fence, unchanged (messages kept: the list is
/// trimmed to them), the largest history in bytes of its JSON, then one JSON text per
/// message written after them. Returns `{'ok', version}`, `{'conflict', found}`,
/// `{'corrupt', why}`, `{'lost', why}`, `{'short', length}` (fewer than `unchanged`
/// messages stored), `{'convert'}` (a whole-history session: save again with
/// unchanged 0, which converts it) or `{'too_large', bytes}`.
const SAVE: &str = r"
local t = redis.call('TYPE', KEYS[1]).ok
local found = '0'
local fence = 0
local fmt = nil
local len = 0
local bytes = 0
if t == 'hash' then
  local h = redis.call('HMGET', KEYS[1], 'format', 'version', 'key', 'fence', 'length', 'bytes')
  fmt = h[1]
  if fmt ~= 'rein-session/1' and fmt ~= 'rein-session/2' then return {'corrupt', 'its format field is not rein-session/1 or rein-session/2'} end
  if not h[2] or not string.match(h[2], '^[1-9][0-9]*$') then return {'corrupt', 'its version field is not a positive integer'} end
  if h[3] ~= ARGV[3] then return {'corrupt', 'it holds another session'} end
  found = h[2]
  fence = tonumber(h[4] or '0') or 0
  if fmt == 'rein-session/2' then
    len = tonumber(h[5] or '')
    bytes = tonumber(h[6] or '')
    if not len or not bytes then return {'corrupt', 'its length or bytes field is not a number'} end
  end
elseif t ~= 'none' then
  return {'corrupt', 'the key holds a ' .. t .. ', not a session hash'}
end
if ARGV[5] ~= '' then
  if redis.call('GET', KEYS[3]) ~= ARGV[5] then return {'lost', 'the lease expired or another holder took the session over'} end
  if fence > tonumber(ARGV[6]) then return {'lost', 'a later lease (fence ' .. string.format('%d', fence) .. ') already saved the session'} end
  fence = tonumber(ARGV[6])
end
if found ~= ARGV[1] then return {'conflict', found} end
local unchanged = tonumber(ARGV[7])
if fmt == 'rein-session/1' and unchanged > 0 then return {'convert'} end
if unchanged > len then return {'short', string.format('%d', len)} end
if unchanged == 0 then
  bytes = 0
elseif unchanged < len then
  for _, m in ipairs(redis.call('LRANGE', KEYS[4], unchanged, -1)) do bytes = bytes - #m end
end
for i = 9, #ARGV do bytes = bytes + #ARGV[i] end
local n = unchanged + #ARGV - 8
local size = bytes + math.max(n - 1, 0) + 2
if size > tonumber(ARGV[8]) then return {'too_large', string.format('%d', size)} end
if unchanged == 0 then
  redis.call('DEL', KEYS[4])
elseif unchanged < len then
  redis.call('LTRIM', KEYS[4], 0, unchanged - 1)
end
local i = 9
while i <= #ARGV do
  local j = math.min(i + 999, #ARGV)
  redis.call('RPUSH', KEYS[4], unpack(ARGV, i, j))
  i = j + 1
end
redis.call('HSET', KEYS[1], 'format', 'rein-session/2', 'version', ARGV[2], 'key', ARGV[3], 'fence', string.format('%d', fence), 'length', string.format('%d', n), 'bytes', string.format('%d', bytes))
if fmt == 'rein-session/1' then redis.call('HDEL', KEYS[1], 'messages') end
if found == '0' then redis.call('SADD', KEYS[2], ARGV[4]) end
return {'ok', ARGV[2]}
";

/// KEYS: data hash, user index, message list. ARGV: session id. Returns the number of
/// keys removed.
const DELETE: &str = r"
local n = redis.call('DEL', KEYS[1])
redis.call('DEL', KEYS[3])
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

/// What one run of the save script did.
enum Saved {
    /// Saved: the new version.
    Version(u64),
    /// Nothing written: the session is in the whole-history format; run again with
    /// nothing unchanged to convert it.
    Convert,
}

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
/// in one script.
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

    /// The Redis key of a session's message list (one JSON message per element).
    pub fn messages_key(&self, key: &SessionKey) -> String {
        format!("{}messages:{}", self.prefix, key_string(key))
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
            .key(self.messages_key(key))
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
            [status, format, version, stored_key, messages] if status == b"ok1" => {
                let version = self.check_loaded(key, FORMAT, format, version, stored_key)?;
                let messages = decode_messages(key, messages, "the Redis hash")?;
                Ok(StoredSession::new(messages, version))
            }
            [status, format, version, stored_key, length, messages @ ..] if status == b"ok2" => {
                let version = self.check_loaded(key, FORMAT_APPEND, format, version, stored_key)?;
                if text(length).parse::<usize>().ok() != Some(messages.len()) {
                    return Err(corrupt(
                        key,
                        &format!(
                            "its length field says {} messages, its list holds {}",
                            text(length),
                            messages.len()
                        ),
                    ));
                }
                let messages = decode_each(key, messages, "the Redis message list")?;
                Ok(StoredSession::new(messages, version))
            }
            _ => Err(StoreError::with_kind(
                StoreErrorKind::Io,
                key,
                "Redis: unexpected reply from the load script",
            )),
        }
    }

    /// The version of a loaded hash in `want` format holding this session, or why it is
    /// corrupt.
    fn check_loaded(
        &self,
        key: &SessionKey,
        want: &str,
        format: &[u8],
        version: &[u8],
        stored_key: &[u8],
    ) -> Result<u64, StoreError> {
        if format != want.as_bytes() {
            return Err(corrupt(key, &format!("format `{}`", text(format))));
        }
        if stored_key != key_string(key).as_bytes() {
            return Err(corrupt(key, "it holds another session"));
        }
        parse_version(version).ok_or_else(|| {
            corrupt(
                key,
                &format!(
                    "its `version` field `{}` is not a positive integer without sign or \
                     leading zero (what a save writes)",
                    text(version)
                ),
            )
        })
    }

    /// A save of `messages`, the first `unchanged` of which the store holds at
    /// `expected` (see `SessionStore::save_from`): one script trims the list to them and
    /// appends the rest. A session still in the whole-history format is converted by a
    /// second run of the script with nothing unchanged (once per session).
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
            .save_script(key, messages, unchanged, expected, lease)
            .await?
        {
            Saved::Version(version) => Ok(version),
            Saved::Convert => match self.save_script(key, messages, 0, expected, lease).await? {
                Saved::Version(version) => Ok(version),
                Saved::Convert => Err(StoreError::with_kind(
                    StoreErrorKind::Io,
                    key,
                    "Redis: unexpected reply from the save script (convert on a full rewrite)",
                )),
            },
        }
    }

    /// One run of the save script with `messages[unchanged..]`.
    async fn save_script(
        &self,
        key: &SessionKey,
        messages: &[Msg],
        unchanged: usize,
        expected: u64,
        lease: Option<&Lease>,
    ) -> Result<Saved, StoreError> {
        rein_core::store::check_key(key)?;
        rein_core::store::check_storable(key, &messages[unchanged..])?;
        if lease.is_some_and(|l| l.token().is_empty()) {
            // The script reads an empty token as "unfenced": such a lease is never held.
            return Err(StoreError::with_kind(
                StoreErrorKind::LeaseLost,
                key,
                "nothing saved: a lease with an empty token is not held",
            ));
        }
        let version = next_version(key, expected)?;
        let written = encode_each(key, &messages[unchanged..])?;
        // What is written alone may already be too large (without a round trip); the
        // script checks the whole history, with the bytes it keeps.
        let written_bytes: usize = written.iter().map(String::len).sum();
        let floor = array_bytes(
            u64::try_from(written.len()).unwrap_or(u64::MAX),
            u64::try_from(written_bytes).unwrap_or(u64::MAX),
        );
        let max = u64::try_from(self.max_bytes).unwrap_or(u64::MAX);
        if floor > max {
            return Err(rein_core::store::too_large(
                key,
                "saving",
                floor,
                self.max_bytes,
            ));
        }
        let mut conn = self.conn();
        let mut invocation = self.scripts.save.prepare_invoke();
        invocation
            .key(self.data_key(key))
            .key(self.user_key(key.user_id.as_deref()))
            .key(self.lease_key(key))
            .key(self.messages_key(key))
            .arg(expected.to_string())
            .arg(version.to_string())
            .arg(key_string(key))
            .arg(&key.session_id)
            .arg(lease.map_or("", Lease::token))
            .arg(lease.map_or(0, Lease::fence).to_string())
            .arg(unchanged)
            .arg(self.max_bytes);
        for text in &written {
            invocation.arg(text.as_str());
        }
        let reply: Vec<Vec<u8>> = invocation
            .invoke_async(&mut conn)
            .await
            .map_err(|e| redis_error(Some(key), "saving the session", e))?;
        match reply.as_slice() {
            [status, _] if status == b"ok" => Ok(Saved::Version(version)),
            [status] if status == b"convert" => Ok(Saved::Convert),
            [status, found] if status == b"conflict" => {
                let found = text(found).parse().unwrap_or(0);
                Err(StoreError::conflict(key, expected, found))
            }
            [status, length] if status == b"short" => {
                Err(rein_core::store::unchanged_beyond_stored(
                    key,
                    unchanged,
                    text(length).parse().unwrap_or(0),
                    expected,
                ))
            }
            [status, bytes] if status == b"too_large" => Err(rein_core::store::too_large(
                key,
                "saving",
                text(bytes).parse().unwrap_or(u64::MAX),
                self.max_bytes,
            )),
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
            .key(self.messages_key(key))
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
