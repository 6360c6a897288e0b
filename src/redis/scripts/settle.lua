-- Acknowledges and deletes the entries ARGV[3..] that are still pending in group ARGV[1]
-- for consumer ARGV[2]; an entry another consumer took over (its lease lapsed) is left to
-- that consumer: a stale ack must not delete the delivery it is working on.
-- KEYS[1] stream. Returns how many were settled.
-- (A stream or group that is gone answers XPENDING with an error: nothing to settle then.)
local settled = 0
for i = 3, #ARGV do
  local pending = redis.pcall('XPENDING', KEYS[1], ARGV[1], ARGV[i], ARGV[i], 1, ARGV[2])
  if type(pending) == 'table' and not pending.err and #pending == 1 then
    redis.call('XACK', KEYS[1], ARGV[1], ARGV[i])
    redis.call('XDEL', KEYS[1], ARGV[i])
    settled = settled + 1
  end
end
return settled
