-- Stores a batch of due messages once, however often it is sent: the first run adds the
-- entries and records their ids under the batch's marker key (KEYS[2], kept ARGV[1] ms); a
-- repeat of the same batch (sent again because the reply to the first run was lost) finds the
-- marker and answers the ids the first run stored, adding nothing.
-- A first attempt made as a transaction (writes.rs, `transaction_request`) marks the batch
-- with '*' and records no ids: its entries were added together, in the millisecond the
-- marker was set, so they are the first run of entries from then that carry the batch's
-- bodies and headers. None are found when they were read and deleted since: the batch was
-- stored all the same, and the answer is an empty list.
-- KEYS[1] stream; ARGV[2..] body, headers, body, headers, … Returns the entry ids in order.
local stored = redis.call('GET', KEYS[2])
if stored == '*' then
  local count = (#ARGV - 1) / 2
  local now = redis.call('TIME')
  local now_ms = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
  local set_at = now_ms - (tonumber(ARGV[1]) - redis.call('PTTL', KEYS[2]))
  -- A few milliseconds either side: the clock read by SET and by TIME may differ by one.
  local entries = redis.call('XRANGE', KEYS[1], string.format('%.0f', set_at - 5),
    string.format('%.0f', set_at + 5), 'COUNT', 4096)
  for first = 1, #entries - count + 1 do
    local ids = {}
    for i = 0, count - 1 do
      local fields = entries[first + i][2]
      if fields[1] ~= 'body' or fields[2] ~= ARGV[2 + 2 * i]
        or fields[3] ~= 'headers' or fields[4] ~= ARGV[3 + 2 * i] then
        break
      end
      ids[#ids + 1] = entries[first + i][1]
    end
    if #ids == count then
      return ids
    end
  end
  return {}
end
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
