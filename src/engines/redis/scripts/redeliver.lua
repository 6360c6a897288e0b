-- Rejects entry ARGV[2]: stores the copy, then acknowledges and deletes the entry, as one
-- atomic unit (write before remove: an error between the two duplicates, never loses).
-- Fenced by the claim: no copy is made, and nothing is removed, unless the entry is still
-- pending in the group for this consumer (ARGV[8]); a delivery whose lease lapsed and that
-- another consumer took over is not settled by the stale one.
-- KEYS[1] stream, KEYS[2] delayed zset; ARGV: group, id, body, headers, delay ms, member
-- (the delayed form of the copy), nonce, consumer. Returns the copy's id (entry id or nonce),
-- or false.
-- (A stream or group that is gone answers XPENDING with an error: nothing to settle then.)
local pending = redis.pcall('XPENDING', KEYS[1], ARGV[1], ARGV[2], ARGV[2], 1)
if type(pending) ~= 'table' or pending.err or #pending == 0 or pending[1][2] ~= ARGV[8] then
  return false
end
local copy
local delay = tonumber(ARGV[5])
if delay > 0 then
  local t = redis.call('TIME')
  local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  redis.call('ZADD', KEYS[2], now + math.floor(delay), ARGV[6])
  copy = ARGV[7]
else
  copy = redis.call('XADD', KEYS[1], '*', 'body', ARGV[3], 'headers', ARGV[4])
end
redis.call('XACK', KEYS[1], ARGV[1], ARGV[2])
redis.call('XDEL', KEYS[1], ARGV[2])
return copy
