-- What the idle consumers of one process may have to claim that no new stream entry announces:
-- a delayed member now due (added by any sender), entries pending longer than the claim idle
-- time (a stalled consumer's), or a stream or group that vanished (the claim reports it).
-- Reads only.
-- For consumer i: KEYS[2i-1] its delayed zset, KEYS[2i] its stream; ARGV[2i-1] its group,
-- ARGV[2i] its claim idle time in ms (stalled entries are looked for), '-' (only whether the
-- stream and group still exist) or '' (the delayed zset only).
-- Time is Redis's own (TIME), in epoch milliseconds like the scores.
-- Returns the indices i (from 1) of the consumers that have something to claim; an error
-- (no such group, say) counts as something, so that its claim reports it.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local due = {}
-- Empty zsets do not exist: one EXISTS over them all spares a ZRANGE each while no queue has
-- delayed members (the usual case of idle queues).
local zsets = {}
for i = 1, #KEYS / 2 do
  zsets[i] = KEYS[2 * i - 1]
end
local any_delayed = #zsets > 0 and redis.call('EXISTS', unpack(zsets)) > 0
for i = 1, #KEYS / 2 do
  local found = false
  if any_delayed then
    local head = redis.call('ZRANGE', KEYS[2 * i - 1], 0, 0, 'WITHSCORES')
    found = head[2] ~= nil and tonumber(head[2]) <= now
  end
  if not found and ARGV[2 * i] ~= '' then
    -- Also how a vanished stream or group is found (its XPENDING fails).
    local summary = redis.pcall('XPENDING', KEYS[2 * i], ARGV[2 * i - 1])
    if type(summary) ~= 'table' or summary.err then
      found = true
    elseif summary[1] > 0 and ARGV[2 * i] ~= '-' then
      local stale = redis.call('XPENDING', KEYS[2 * i], ARGV[2 * i - 1], 'IDLE', ARGV[2 * i], '-', '+', 1)
      found = #stale > 0
    end
  end
  if found then
    due[#due + 1] = i
  end
end
return due
