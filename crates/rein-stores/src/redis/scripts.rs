//! The Lua scripts of `RedisSessionStore`: each one runs atomically on the server, so
//! every check and the write it guards are one step with respect to other clients.
//!
//! A script answers with a status word first (`ok`, `conflict`, `corrupt`, …) and its
//! values after it; the Rust side maps the word to a result or a `StoreError`.

use redis::Script;

/// The load, as a Lua function of the data hash, the message list and the largest
/// history read (in bytes of its JSON). Returns `{'none'}`, `{'corrupt', why}`,
/// `{'too_large', bytes}` (not read), `{'ok1', format, version, key, messages}` (a
/// session of the whole-history format, its JSON in the hash field `messages`) or
/// `{'ok2', format, version, key, length, m1, m2, …}` (one JSON message per list
/// element).
const LOAD_FUNCTION: &str = r"
local function load(data, list, max)
  local t = redis.call('TYPE', data).ok
  if t == 'none' then return {'none'} end
  if t ~= 'hash' then return {'corrupt', 'the key holds a ' .. t .. ', not a session hash'} end
  local h = redis.call('HMGET', data, 'format', 'version', 'key', 'length', 'bytes')
  if h[1] ~= 'rein-session/2' then
    local n = redis.call('HSTRLEN', data, 'messages')
    if n > max then return {'too_large', string.format('%d', n)} end
    return {'ok1', h[1] or '', h[2] or '', h[3] or '', redis.call('HGET', data, 'messages') or ''}
  end
  local len = tonumber(h[4] or '')
  local bytes = tonumber(h[5] or '')
  if not len or not bytes then return {'corrupt', 'its length or bytes field is not a number'} end
  local size = bytes + math.max(len - 1, 0) + 2
  if size > max then return {'too_large', string.format('%d', size)} end
  local r = {'ok2', h[1], h[2] or '', h[3] or '', string.format('%d', len)}
  for _, m in ipairs(redis.call('LRANGE', list, 0, -1)) do r[#r + 1] = m end
  return r
end
";

/// Loads a session. KEYS: data hash, message list. ARGV: the largest history read.
/// Returns what the load function does.
const LOAD: &str = "return load(KEYS[1], KEYS[2], tonumber(ARGV[1]))";

/// The acquisition, as a Lua function of the lease, the fence counter, the data hash,
/// the token and the TTL in ms. Returns the new fence, or 0 (another holder has the
/// lease). The fence is above the one the session was last saved with even when the
/// counter key was evicted or deleted (it is then re-seeded from the session), so a
/// lost counter never makes every later holder's writes fail.
const ACQUIRE_FUNCTION: &str = r"
local function acquire(lease, counter, data, token, ttl)
  if redis.call('SET', lease, token, 'NX', 'PX', ttl) then
    local f = redis.call('INCR', counter)
    if redis.call('TYPE', data).ok == 'hash' then
      local saved = tonumber(redis.call('HGET', data, 'fence') or '0') or 0
      if f <= saved then
        f = saved + 1
        redis.call('SET', counter, string.format('%d', f))
      end
    end
    return f
  end
  return 0
end
";

/// The queue of waiters, as Lua functions: the server's clock in ms, and the purge of
/// waiters whose entry expired (a sorted set of tokens by arrival, and a hash of each
/// token's expiry).
const QUEUE_FUNCTIONS: &str = r"
local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local function purge(queue, waiters, now)
  for _, m in ipairs(redis.call('ZRANGE', queue, 0, -1)) do
    local d = tonumber(redis.call('HGET', waiters, m) or '0') or 0
    if d <= now then
      redis.call('ZREM', queue, m)
      redis.call('HDEL', waiters, m)
    end
  end
  return redis.call('ZCARD', queue)
end
";

/// KEYS: lease, fence counter, data hash, queue, waiters. ARGV: token, TTL in ms.
/// Returns the new fence, or 0 (held, or callers wait in the queue: a caller that does
/// not queue never passes one that does).
const ACQUIRE: &str = r"
if purge(KEYS[4], KEYS[5], now_ms()) > 0 then return 0 end
return acquire(KEYS[1], KEYS[2], KEYS[3], ARGV[1], ARGV[2])
";

/// Acquires the lease and, when it got it, loads the session in the same script (so
/// the load sees every save of an earlier holder). KEYS: lease, fence counter, data
/// hash, message list, queue, waiters. ARGV: token, TTL in ms, the largest history
/// read. Returns `{'busy'}` (held, or callers wait in the queue), or the fence
/// followed by what the load function returns.
const ACQUIRE_LOAD: &str = r"
local f = 0
if purge(KEYS[5], KEYS[6], now_ms()) == 0 then
  f = acquire(KEYS[1], KEYS[2], KEYS[3], ARGV[1], ARGV[2])
end
if f == 0 then return {'busy'} end
local r = load(KEYS[3], KEYS[4], tonumber(ARGV[3]))
table.insert(r, 1, string.format('%d', f))
return r
";

/// One attempt of a queued acquisition, loading the session when it gets the lease.
/// KEYS: lease, fence counter, data hash, message list, queue, waiters, arrival
/// counter. ARGV: token, TTL in ms, the largest history read, the waiter TTL in ms,
/// the most callers that may wait. A caller not yet in the queue takes a free lease
/// at once when no one waits, else joins the queue (unless it is full); a caller in
/// the queue refreshes its entry and takes the lease when it is the head and the lease
/// is free. Returns `{'full'}`, `{'waiting'}`, or the fence followed by what the load
/// function returns. The queue's keys expire when no waiter refreshes them.
const ACQUIRE_QUEUED: &str = r"
local now = now_ms()
local life = tonumber(ARGV[4])
local n = purge(KEYS[5], KEYS[6], now)
local f = 0
if not redis.call('ZSCORE', KEYS[5], ARGV[1]) then
  if n == 0 then f = acquire(KEYS[1], KEYS[2], KEYS[3], ARGV[1], ARGV[2]) end
  if f == 0 then
    if n >= tonumber(ARGV[5]) then return {'full'} end
    redis.call('ZADD', KEYS[5], redis.call('INCR', KEYS[7]), ARGV[1])
    redis.call('HSET', KEYS[6], ARGV[1], string.format('%d', now + life))
    for i = 5, 7 do redis.call('PEXPIRE', KEYS[i], 2 * life) end
    return {'waiting'}
  end
else
  redis.call('HSET', KEYS[6], ARGV[1], string.format('%d', now + life))
  for i = 5, 7 do redis.call('PEXPIRE', KEYS[i], 2 * life) end
  if redis.call('ZRANGE', KEYS[5], 0, 0)[1] ~= ARGV[1] then return {'waiting'} end
  f = acquire(KEYS[1], KEYS[2], KEYS[3], ARGV[1], ARGV[2])
  if f == 0 then return {'waiting'} end
  redis.call('ZREM', KEYS[5], ARGV[1])
  redis.call('HDEL', KEYS[6], ARGV[1])
end
local r = load(KEYS[3], KEYS[4], tonumber(ARGV[3]))
table.insert(r, 1, string.format('%d', f))
return r
";

/// KEYS: queue, waiters. ARGV: token. Removes a waiter that gave up.
const LEAVE: &str = r"
redis.call('ZREM', KEYS[1], ARGV[1])
redis.call('HDEL', KEYS[2], ARGV[1])
return 1
";

/// KEYS: lease, signal. ARGV: signal name. Signals the holder of the lease (the signal
/// names its token; a rollback is never weakened to an interrupt). Returns 1 when a
/// holder was signalled, 0 when no one holds the lease. The signal expires after a day.
const SIGNAL: &str = r"
local holder = redis.call('GET', KEYS[1])
if not holder then return 0 end
local kind = ARGV[1]
local cur = redis.call('GET', KEYS[2])
if cur and cur == 'rollback ' .. holder then kind = 'rollback' end
redis.call('SET', KEYS[2], kind .. ' ' .. holder, 'PX', 86400000)
return 1
";

/// Compare-and-set of a session, writing only what changed. KEYS: data hash, user index
/// set, lease, message list. ARGV: expected version, new version, key string, session
/// id, lease token ('' = unfenced), fence, unchanged (messages kept: the list is
/// trimmed to them), the largest history in bytes of its JSON, release ('1': delete
/// the lease if this token holds it, once the save is written), then one JSON text per
/// message written after them. Returns `{'ok', version}`, `{'conflict', found}`,
/// `{'corrupt', why}`, `{'lost', why}`, `{'short', length}` (fewer than `unchanged`
/// messages stored), `{'convert'}` (a whole-history session: save again with
/// unchanged 0, which converts it) or `{'too_large', bytes}`; only `ok` released.
///
/// Its cost does not grow with the history: `HMGET` of fixed fields, `LRANGE` of the
/// replaced tail only, `LTRIM` and `RPUSH` of what changed.
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
for i = 10, #ARGV do bytes = bytes + #ARGV[i] end
local n = unchanged + #ARGV - 9
local size = bytes + math.max(n - 1, 0) + 2
if size > tonumber(ARGV[8]) then return {'too_large', string.format('%d', size)} end
if unchanged == 0 then
  redis.call('DEL', KEYS[4])
elseif unchanged < len then
  redis.call('LTRIM', KEYS[4], 0, unchanged - 1)
end
local i = 10
while i <= #ARGV do
  local j = math.min(i + 999, #ARGV)
  redis.call('RPUSH', KEYS[4], unpack(ARGV, i, j))
  i = j + 1
end
redis.call('HSET', KEYS[1], 'format', 'rein-session/2', 'version', ARGV[2], 'key', ARGV[3], 'fence', string.format('%d', fence), 'length', string.format('%d', n), 'bytes', string.format('%d', bytes))
if fmt == 'rein-session/1' then redis.call('HDEL', KEYS[1], 'messages') end
if found == '0' then redis.call('SADD', KEYS[2], ARGV[4]) end
if ARGV[9] == '1' and ARGV[5] ~= '' then redis.call('DEL', KEYS[3]) end
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

/// The scripts of one store (their SHA-1 computed once; `EVALSHA`, falling back to
/// `EVAL` when the server does not have a script cached).
pub(super) struct Scripts {
    pub(super) load: Script,
    pub(super) save: Script,
    pub(super) delete: Script,
    pub(super) acquire: Script,
    pub(super) acquire_load: Script,
    pub(super) acquire_queued: Script,
    pub(super) leave: Script,
    pub(super) signal: Script,
    pub(super) renew: Script,
    pub(super) release: Script,
}

impl Scripts {
    pub(super) fn new() -> Self {
        Self {
            load: Script::new(&format!("{LOAD_FUNCTION}{LOAD}")),
            save: Script::new(SAVE),
            delete: Script::new(DELETE),
            acquire: Script::new(&format!("{ACQUIRE_FUNCTION}{QUEUE_FUNCTIONS}{ACQUIRE}")),
            acquire_load: Script::new(&format!(
                "{LOAD_FUNCTION}{ACQUIRE_FUNCTION}{QUEUE_FUNCTIONS}{ACQUIRE_LOAD}"
            )),
            acquire_queued: Script::new(&format!(
                "{LOAD_FUNCTION}{ACQUIRE_FUNCTION}{QUEUE_FUNCTIONS}{ACQUIRE_QUEUED}"
            )),
            leave: Script::new(LEAVE),
            signal: Script::new(SIGNAL),
            renew: Script::new(RENEW),
            release: Script::new(RELEASE),
        }
    }
}
