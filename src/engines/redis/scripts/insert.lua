-- Stores a batch of due messages once, however often it is sent: the first run adds the
-- entries and records their ids under the batch's marker key (KEYS[2], kept ARGV[1] ms); a
-- repeat of the same batch (sent again because the reply to the first run was lost) finds the
-- marker and answers the ids the first run stored, adding nothing.
-- KEYS[1] stream; ARGV[2..] body, headers, body, headers, … Returns the entry ids in order.
local stored = redis.call('GET', KEYS[2])
if stored then
  local ids = {}
  for id in string.gmatch(stored, '%S+') do
    ids[#ids + 1] = id
  end
  return ids
end
local ids = {}
for i = 2, #ARGV, 2 do
  ids[#ids + 1] = redis.call('XADD', KEYS[1], '*', 'body', ARGV[i], 'headers', ARGV[i + 1])
end
redis.call('SET', KEYS[2], table.concat(ids, ' '), 'PX', ARGV[1])
return ids
