-- Promotes due delayed messages to the stream, atomically: a member is appended and then
-- removed in the same script (write before remove: an error between the two duplicates, never
-- loses), so no crash window loses it and no other drainer promotes it twice.
-- KEYS[1] delayed zset, KEYS[2] stream; ARGV[1] most members to promote in this call.
-- Time is Redis's own (TIME), in epoch milliseconds like the scores.
-- Returns { promoted, dropped (undecodable members), ms until the next member is due or -1 }.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'LIMIT', 0, tonumber(ARGV[1]))
local promoted, dropped = 0, 0
for _, member in ipairs(due) do
  local ok, m = pcall(cjson.decode, member)
  if ok and type(m) == 'table' and type(m.body) == 'string' and type(m.headers) == 'string' then
    redis.call('XADD', KEYS[2], '*', 'body', m.body, 'headers', m.headers)
    promoted = promoted + 1
  else
    dropped = dropped + 1
  end
  redis.call('ZREM', KEYS[1], member)
end
local next_member = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
local wait = -1
if next_member[2] then
  wait = math.max(0, math.floor(tonumber(next_member[2]) - now))
end
return { promoted, dropped, wait }
