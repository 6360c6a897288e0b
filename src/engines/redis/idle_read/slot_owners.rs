//! Which node holds which slots, as a cluster's `CLUSTER SLOTS` reply says: where the key
//! tracking reads a stream's keys first, and again once the node it read them on is lost (a
//! failover moves the slots to a node the tracking never heard of, and only a live node
//! answers `MOVED`).

use redis::Value;

/// The masters' slot ranges, each with its node's `host:port`.
#[derive(Default)]
pub(super) struct SlotOwners {
    ranges: Vec<(u16, u16, String)>,
}

impl SlotOwners {
    /// Reads a `CLUSTER SLOTS` reply: `[[start, end, [host, port, …], replicas…], …]`. A node
    /// announced with an empty host (the "unknown endpoint" form) is reached on `seed_host`,
    /// as the cluster client does; `None` for a reply of another shape.
    pub(super) fn from_reply(reply: &Value, seed_host: &str) -> Option<Self> {
        let Value::Array(ranges) = reply else {
            return None;
        };
        let mut owners = Vec::with_capacity(ranges.len());
        for range in ranges {
            let Value::Array(fields) = range else {
                return None;
            };
            let start = as_u16(fields.first()?)?;
            let end = as_u16(fields.get(1)?)?;
            let Value::Array(master) = fields.get(2)? else {
                return None;
            };
            let host = match master.first()? {
                Value::BulkString(bytes) => String::from_utf8_lossy(bytes).into_owned(),
                Value::SimpleString(text) => text.clone(),
                _ => return None,
            };
            let host = if host.is_empty() || host == "?" {
                seed_host.to_owned()
            } else {
                host
            };
            let port = as_u16(master.get(1)?)?;
            owners.push((start, end, format!("{host}:{port}")));
        }
        Some(Self { ranges: owners })
    }

    /// The node that holds `slot`, if the reply named one.
    pub(super) fn owner(&self, slot: u16) -> Option<&str> {
        self.ranges
            .iter()
            .find(|(start, end, _)| (*start..=*end).contains(&slot))
            .map(|(_, _, node)| node.as_str())
    }
}

fn as_u16(value: &Value) -> Option<u16> {
    match value {
        Value::Int(n) => u16::try_from(*n).ok(),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bulk(text: &str) -> Value {
        Value::BulkString(text.as_bytes().to_vec())
    }

    fn range(start: i64, end: i64, host: &str, port: i64) -> Value {
        Value::Array(vec![
            Value::Int(start),
            Value::Int(end),
            Value::Array(vec![bulk(host), Value::Int(port), bulk("id")]),
            Value::Array(vec![bulk("10.0.0.9"), Value::Int(7009), bulk("replica")]),
        ])
    }

    #[test]
    fn each_slot_goes_to_its_master_and_an_unknown_endpoint_to_the_seed_host() {
        let reply = Value::Array(vec![
            range(0, 5460, "10.0.0.1", 7000),
            range(5461, 10922, "", 7001),
            range(10923, 16383, "10.0.0.3", 7002),
        ]);
        let owners = SlotOwners::from_reply(&reply, "seed.example").unwrap();
        assert_eq!(owners.owner(0), Some("10.0.0.1:7000"));
        assert_eq!(owners.owner(5461), Some("seed.example:7001"));
        assert_eq!(owners.owner(16383), Some("10.0.0.3:7002"));
    }

    #[test]
    fn a_slot_no_range_covers_has_no_owner_and_a_reply_of_another_shape_is_refused() {
        let owners =
            SlotOwners::from_reply(&Value::Array(vec![range(0, 10, "h", 1)]), "s").unwrap();
        assert_eq!(owners.owner(11), None);
        assert!(SlotOwners::from_reply(&bulk("ERR"), "s").is_none());
        assert!(SlotOwners::from_reply(&Value::Array(vec![bulk("x")]), "s").is_none());
    }
}
