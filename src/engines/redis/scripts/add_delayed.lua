-- Adds a delayed message, due at Redis's clock (TIME) plus the delay.
-- KEYS[1] delayed zset; ARGV[1] delay in ms, ARGV[2] the member ({"nonce","body","headers"}).
-- NX: the same member sent again (its first reply was lost) keeps its first due time.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZADD', KEYS[1], 'NX', now + math.floor(tonumber(ARGV[1])), ARGV[2])
return 1
