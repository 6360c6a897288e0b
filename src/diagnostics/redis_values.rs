//! Reading the Redis replies the diagnostics use (INFO, TIME, TYPE, XINFO), RESP2 or RESP3,
//! without I/O.

use redis::Value;

/// A reply's text, if it is text or a number.
pub fn as_text(value: &Value) -> Option<String> {
    match value {
        Value::BulkString(bytes) => Some(String::from_utf8_lossy(bytes).into_owned()),
        Value::SimpleString(s) => Some(s.clone()),
        Value::VerbatimString { text, .. } => Some(text.clone()),
        Value::Okay => Some("OK".to_owned()),
        Value::Int(n) => Some(n.to_string()),
        Value::Double(n) => Some(n.to_string()),
        _ => None,
    }
}

/// A reply's integer, if it is one (or text holding one).
pub fn as_int(value: &Value) -> Option<i64> {
    match value {
        Value::Int(n) => Some(*n),
        other => as_text(other).and_then(|s| s.parse().ok()),
    }
}

/// Every text in a reply, depth first (a cluster's per-node INFO comes as a map).
pub fn texts(value: &Value) -> Vec<String> {
    match value {
        Value::Array(items) | Value::Set(items) => items.iter().flat_map(texts).collect(),
        Value::Map(pairs) => pairs.iter().flat_map(|(_, v)| texts(v)).collect(),
        other => as_text(other).into_iter().collect(),
    }
}

/// A flat `[name, value, …]` array or a map as `(name, value)` pairs.
pub fn pairs(value: &Value) -> Vec<(String, Value)> {
    match value {
        Value::Map(items) => items
            .iter()
            .filter_map(|(k, v)| Some((as_text(k)?, v.clone())))
            .collect(),
        Value::Array(items) => items
            .chunks(2)
            .filter_map(|pair| match pair {
                [k, v] => Some((as_text(k)?, v.clone())),
                _ => None,
            })
            .collect(),
        _ => Vec::new(),
    }
}

/// `XINFO GROUPS`: one field list per group.
pub fn groups(value: &Value) -> Vec<Vec<(String, Value)>> {
    match value {
        Value::Array(items) => items.iter().map(pairs).collect(),
        _ => Vec::new(),
    }
}

/// A field of an `XINFO` reply as text (`None` when absent or nil).
pub fn field(fields: &[(String, Value)], name: &str) -> Option<String> {
    fields
        .iter()
        .find(|(k, _)| k == name)
        .and_then(|(_, v)| as_text(v))
}

/// The milliseconds part of a stream id (`<ms>-<seq>`).
pub fn id_ms(id: &str) -> Option<f64> {
    id.split_once('-').and_then(|(ms, _)| ms.parse().ok())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engines::redis::bulk;

    #[test]
    fn xinfo_groups_in_resp2_and_resp3() {
        let resp2 = Value::Array(vec![Value::Array(vec![
            bulk("name"),
            bulk("g"),
            bulk("pending"),
            Value::Int(3),
            bulk("lag"),
            Value::Nil,
        ])]);
        let resp3 = Value::Array(vec![Value::Map(vec![
            (bulk("name"), bulk("g")),
            (bulk("pending"), Value::Int(3)),
        ])]);
        for reply in [resp2, resp3] {
            let all = groups(&reply);
            assert_eq!(field(&all[0], "name").as_deref(), Some("g"));
            assert_eq!(field(&all[0], "pending").as_deref(), Some("3"));
            assert_eq!(field(&all[0], "lag"), None);
        }
    }

    #[test]
    fn texts_reach_into_maps_and_ids_give_their_time() {
        let info = Value::Map(vec![(bulk("n1"), bulk("redis_version:7.0.15"))]);
        assert_eq!(texts(&info), vec!["redis_version:7.0.15".to_owned()]);
        assert_eq!(id_ms("1700000000123-4"), Some(1_700_000_000_123.0));
        assert_eq!(id_ms("0-0"), Some(0.0));
        assert_eq!(id_ms("bad"), None);
    }
}
