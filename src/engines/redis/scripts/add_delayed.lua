-- Adds delayed messages, each due at Redis's clock (TIME) plus its delay. A key of another
-- type fails the first ZADD, before anything is added.
-- KEYS[1] delayed zset; ARGV: delay in ms, member ({"nonce","body","headers"}), delay, member, …
-- NX: a member sent again (its first reply was lost) keeps its first due time.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
for i = 1, #ARGV, 2 do
  redis.call('ZADD', KEYS[1], 'NX', now + math.floor(tonumber(ARGV[i])), ARGV[i + 1])
end
return #ARGV / 2
