//! Redis reply parsing, without I/O: stream entries out of XRANGE, XREADGROUP (RESP2 or RESP3)
//! and XAUTOCLAIM replies, and the value helpers the engine reads script replies with.
//! Invariant: a malformed or deleted entry is skipped, never an error, so one bad entry
//! cannot stop a read.

use crate::queue::engine::StoredMessage;
use redis::Value;

/// A stream entry as read: fields other than `body` and `headers` are ignored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    pub id: String,
    pub body: Option<String>,
    pub headers: Option<String>,
}

pub(super) fn complete(entries: Vec<Entry>) -> Vec<StoredMessage> {
    entries
        .into_iter()
        .filter_map(|e| {
            Some(StoredMessage {
                id: e.id,
                body: e.body?,
                headers: e.headers?,
                token: None,
            })
        })
        .collect()
}

/// `<ms>-<seq>`: anything else cannot name an entry (a delayed send's nonce, say).
pub fn is_stream_id(id: &str) -> bool {
    match id.split_once('-') {
        Some((ms, seq)) => {
            !ms.is_empty()
                && !seq.is_empty()
                && ms.bytes().all(|b| b.is_ascii_digit())
                && seq.bytes().all(|b| b.is_ascii_digit())
        }
        None => false,
    }
}

pub(super) fn as_string(value: &Value) -> Option<String> {
    match value {
        Value::BulkString(bytes) => String::from_utf8(bytes.clone()).ok(),
        Value::SimpleString(s) => Some(s.clone()),
        Value::VerbatimString { text, .. } => Some(text.clone()),
        _ => None,
    }
}

pub(super) fn as_i64(value: &Value) -> Option<i64> {
    match value {
        Value::Int(n) => Some(*n),
        other => as_string(other).and_then(|s| s.parse().ok()),
    }
}

/// `[[id, [field, value, …]], …]`; deleted entries (nil) and malformed ones are skipped.
pub fn parse_entries(value: &Value) -> Vec<Entry> {
    let Value::Array(items) = value else {
        return Vec::new();
    };
    items.iter().filter_map(parse_entry).collect()
}

/// `[id, [field, value, …]]`, or None for a deleted (`[id, nil]`) or malformed entry.
fn parse_entry(item: &Value) -> Option<Entry> {
    let Value::Array(pair) = item else {
        return None;
    };
    let id = as_string(pair.first()?)?;
    let Value::Array(fields) = pair.get(1)? else {
        return None;
    };
    let mut entry = Entry {
        id,
        body: None,
        headers: None,
    };
    for kv in fields.chunks(2) {
        if let [k, v] = kv {
            match as_string(k).as_deref() {
                Some("body") => entry.body = as_string(v),
                Some("headers") => entry.headers = as_string(v),
                _ => {}
            }
        }
    }
    Some(entry)
}

/// The items of every stream's entry list in an XREADGROUP reply: nil, or
/// `[[stream, entries], …]` (RESP2) / a map (RESP3).
fn read_reply_items(value: &Value) -> impl Iterator<Item = &Value> {
    let (resp2, resp3) = match value {
        Value::Array(streams) => (Some(streams), None),
        Value::Map(streams) => (None, Some(streams)),
        _ => (None, None),
    };
    let resp2_lists = resp2.into_iter().flatten().filter_map(|s| match s {
        Value::Array(pair) => pair.get(1),
        _ => None,
    });
    let resp3_lists = resp3.into_iter().flatten().map(|(_, entries)| entries);
    resp2_lists.chain(resp3_lists).flat_map(|list| match list {
        Value::Array(items) => items.as_slice(),
        _ => &[],
    })
}

/// XREADGROUP's entries; deleted and malformed ones are skipped.
pub fn parse_read_reply(value: Value) -> Vec<Entry> {
    read_reply_items(&value).filter_map(parse_entry).collect()
}

/// How many entries a read reply holds, those deleted from the stream (`[id, nil]`, still
/// pending) included, and the last one's id: where a re-read of a pending list goes on.
pub fn read_reply_page(value: &Value) -> (usize, Option<String>) {
    let mut count = 0;
    let mut last = None;
    for item in read_reply_items(value) {
        if let Value::Array(pair) = item {
            count += 1;
            last = pair.first();
        }
    }
    (count, last.and_then(as_string))
}

/// XAUTOCLAIM: `[next cursor, entries, deleted ids]`.
pub fn parse_autoclaim_reply(value: Value) -> (String, Vec<Entry>) {
    let Value::Array(parts) = value else {
        return ("0-0".to_owned(), Vec::new());
    };
    let cursor = parts
        .first()
        .and_then(as_string)
        .unwrap_or_else(|| "0-0".to_owned());
    let entries = parts.get(1).map(parse_entries).unwrap_or_default();
    (cursor, entries)
}

/// A stream entry id, ordered as Redis orders them (`<ms>-<seq>`, both numbers).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct StreamId(pub u64, pub u64);

impl StreamId {
    pub fn parse(id: &str) -> Option<Self> {
        let (ms, seq) = id.split_once('-')?;
        Some(Self(ms.parse().ok()?, seq.parse().ok()?))
    }
}

impl std::fmt::Display for StreamId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}-{}", self.0, self.1)
    }
}

/// The id of the last entry of an XREVRANGE … COUNT 1 reply: `0-0` for an empty (or missing)
/// stream; None for an error or anything else.
pub fn last_id(value: &Value) -> Option<StreamId> {
    let Value::Array(items) = value else {
        return None;
    };
    match items.first() {
        None => Some(StreamId(0, 0)),
        Some(Value::Array(pair)) => pair
            .first()
            .and_then(as_string)
            .and_then(|id| StreamId::parse(&id)),
        Some(_) => None,
    }
}

/// Each stream of an XREAD reply (RESP2 or RESP3) with the id of its last entry returned.
pub fn read_reply_tops(value: &Value) -> Vec<(String, StreamId)> {
    let streams: Vec<(&Value, &Value)> = match value {
        Value::Array(streams) => streams
            .iter()
            .filter_map(|s| match s {
                Value::Array(pair) => Some((pair.first()?, pair.get(1)?)),
                _ => None,
            })
            .collect(),
        Value::Map(streams) => streams.iter().map(|(k, v)| (k, v)).collect(),
        _ => Vec::new(),
    };
    streams
        .into_iter()
        .filter_map(|(name, entries)| {
            let Value::Array(entries) = entries else {
                return None;
            };
            let top = entries.iter().rev().find_map(|e| match e {
                Value::Array(pair) => pair
                    .first()
                    .and_then(as_string)
                    .and_then(|id| StreamId::parse(&id)),
                _ => None,
            })?;
            Some((as_string(name)?, top))
        })
        .collect()
}

/// A bulk string reply, for tests that build replies.
#[cfg(test)]
pub(crate) fn bulk(s: &str) -> Value {
    Value::BulkString(s.as_bytes().to_vec())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stream_ids() {
        assert!(is_stream_id("1526919030474-55"));
        assert!(!is_stream_id("0"));
        assert!(!is_stream_id("96a96d70-1111-2222"));
        assert!(!is_stream_id("-1"));
        assert!(!is_stream_id("1-"));
    }

    #[test]
    fn parses_read_replies_and_skips_malformed_entries() {
        let reply = Value::Array(vec![Value::Array(vec![
            bulk("s"),
            Value::Array(vec![
                Value::Array(vec![
                    bulk("1-0"),
                    Value::Array(vec![
                        bulk("body"),
                        bulk("{}"),
                        bulk("headers"),
                        bulk("{\"a\":\"b\"}"),
                    ]),
                ]),
                Value::Array(vec![
                    bulk("2-0"),
                    Value::Array(vec![bulk("other"), bulk("x"), bulk("dangling")]),
                ]),
                Value::Nil,
                Value::Array(vec![bulk("3-0"), Value::Nil]),
            ]),
        ])]);
        let entries = parse_read_reply(reply);
        assert_eq!(entries.len(), 2);
        assert_eq!(
            entries[0],
            Entry {
                id: "1-0".into(),
                body: Some("{}".into()),
                headers: Some("{\"a\":\"b\"}".into())
            }
        );
        assert_eq!(
            entries[1],
            Entry {
                id: "2-0".into(),
                body: None,
                headers: None
            }
        );
        assert!(parse_read_reply(Value::Nil).is_empty());
    }

    #[test]
    fn counts_a_read_page_with_its_deleted_entries() {
        let entry = |id: &str, fields: Value| Value::Array(vec![bulk(id), fields]);
        let reply = Value::Array(vec![Value::Array(vec![
            bulk("s"),
            Value::Array(vec![
                entry("1-0", Value::Array(vec![bulk("body"), bulk("b")])),
                entry("2-0", Value::Nil),
            ]),
        ])]);
        assert_eq!(read_reply_page(&reply), (2, Some("2-0".to_owned())));
        assert_eq!(read_reply_page(&Value::Nil), (0, None));
    }

    #[test]
    fn reads_resp3_map_replies_like_resp2_ones() {
        let entry = |id: &str, fields: Value| Value::Array(vec![bulk(id), fields]);
        let list = |ids: &[&str]| {
            Value::Array(
                ids.iter()
                    .map(|id| {
                        entry(
                            id,
                            Value::Array(vec![bulk("body"), bulk("b"), bulk("headers"), bulk("h")]),
                        )
                    })
                    .chain([entry("9-0", Value::Nil)])
                    .collect(),
            )
        };
        let reply = Value::Map(vec![
            (bulk("a"), list(&["1-0"])),
            (bulk("b"), list(&["2-0", "3-0"])),
        ]);
        let ids: Vec<String> = parse_read_reply(reply.clone())
            .into_iter()
            .map(|e| e.id)
            .collect();
        assert_eq!(ids, ["1-0", "2-0", "3-0"]);
        assert_eq!(read_reply_page(&reply), (5, Some("9-0".to_owned())));
    }

    #[test]
    fn parses_autoclaim_replies() {
        let reply = Value::Array(vec![
            bulk("5-0"),
            Value::Array(vec![Value::Array(vec![
                bulk("4-0"),
                Value::Array(vec![bulk("body"), bulk("b"), bulk("headers"), bulk("h")]),
            ])]),
            Value::Array(vec![]),
        ]);
        let (cursor, entries) = parse_autoclaim_reply(reply);
        assert_eq!(cursor, "5-0");
        assert_eq!(entries.len(), 1);
        assert_eq!(parse_autoclaim_reply(Value::Nil).0, "0-0");
    }

    #[test]
    fn stream_ids_order_as_numbers() {
        assert!(StreamId::parse("10-0").unwrap() > StreamId::parse("9-5").unwrap());
        assert!(StreamId::parse("9-10").unwrap() > StreamId::parse("9-9").unwrap());
        assert_eq!(StreamId::parse("12-3").unwrap().to_string(), "12-3");
        assert_eq!(StreamId::parse("nonce"), None);
    }

    #[test]
    fn last_ids_and_read_tops() {
        let entry =
            |id: &str| Value::Array(vec![bulk(id), Value::Array(vec![bulk("body"), bulk("x")])]);
        assert_eq!(last_id(&Value::Array(vec![])), Some(StreamId(0, 0)));
        assert_eq!(
            last_id(&Value::Array(vec![entry("5-1")])),
            Some(StreamId(5, 1))
        );
        assert_eq!(last_id(&Value::Nil), None);
        let resp2 = Value::Array(vec![Value::Array(vec![
            bulk("s"),
            Value::Array(vec![entry("1-0"), entry("2-0")]),
        ])]);
        assert_eq!(
            read_reply_tops(&resp2),
            vec![("s".to_owned(), StreamId(2, 0))]
        );
        let resp3 = Value::Map(vec![(bulk("t"), Value::Array(vec![entry("3-4")]))]);
        assert_eq!(
            read_reply_tops(&resp3),
            vec![("t".to_owned(), StreamId(3, 4))]
        );
        assert!(read_reply_tops(&Value::Nil).is_empty());
    }
}
