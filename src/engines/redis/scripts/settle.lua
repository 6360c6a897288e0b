-- Acknowledges and deletes the entries ARGV[5..] that are still pending in group ARGV[1] for
-- consumer ARGV[2]; an entry another consumer took over (its lease lapsed) is left to that
-- consumer: a stale ack must not delete the delivery it is working on.
-- ARGV[3] and ARGV[4] are the lowest and highest of the ids: one XPENDING over that range,
-- filtered by consumer, finds ours (a batch of acks is mostly a run of recent entries), then one
-- XACK and one XDEL settle them.
-- KEYS[1] stream. Returns how many were settled.
-- (A stream or group that is gone answers XPENDING with an error: nothing to settle then.)
local count = #ARGV - 4
local pending = redis.pcall('XPENDING', KEYS[1], ARGV[1], ARGV[3], ARGV[4], count + 10000, ARGV[2])
if type(pending) ~= 'table' or pending.err then
  return 0
end
local mine = {}
for _, entry in ipairs(pending) do
  mine[entry[1]] = true
end
local ids = {}
for i = 5, #ARGV do
  if mine[ARGV[i]] then
    ids[#ids + 1] = ARGV[i]
  end
end
if #ids == 0 then
  return 0
end
redis.call('XACK', KEYS[1], ARGV[1], unpack(ids))
redis.call('XDEL', KEYS[1], unpack(ids))
return #ids
