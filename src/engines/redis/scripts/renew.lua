-- Renews the claims of consumer ARGV[2] in group ARGV[1] on the entries ARGV[4..]: resets
-- their idle time to ARGV[3] ms (0: a renewal; the claim threshold: a release that any
-- consumer's next XAUTOCLAIM takes at once). Only entries still pending for this consumer:
-- one another consumer took over is never taken back.
-- KEYS[1] stream. Returns the ids renewed.
local renewed = {}
for i = 4, #ARGV do
  local pending = redis.pcall('XPENDING', KEYS[1], ARGV[1], ARGV[i], ARGV[i], 1, ARGV[2])
  if type(pending) == 'table' and not pending.err and #pending == 1 then
    redis.call('XCLAIM', KEYS[1], ARGV[1], ARGV[2], 0, ARGV[i], 'IDLE', ARGV[3], 'JUSTID')
    renewed[#renewed + 1] = ARGV[i]
  end
end
return renewed
