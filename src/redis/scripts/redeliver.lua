-- Rejects entry ARGV[2]: acknowledges and deletes it and stores the copy, as one atomic unit.
-- No copy is made if the entry was no longer pending in the group (already settled).
-- KEYS[1] stream, KEYS[2] delayed zset; ARGV: group, id, body, headers, delay ms, member
-- (the delayed form of the copy), nonce. Returns the copy's id (entry id or nonce), or false.
if redis.call('XACK', KEYS[1], ARGV[1], ARGV[2]) == 0 then
  return false
end
redis.call('XDEL', KEYS[1], ARGV[2])
local delay = tonumber(ARGV[5])
if delay > 0 then
  local t = redis.call('TIME')
  local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  redis.call('ZADD', KEYS[2], now + math.floor(delay), ARGV[6])
  return ARGV[7]
end
return redis.call('XADD', KEYS[1], '*', 'body', ARGV[3], 'headers', ARGV[4])
