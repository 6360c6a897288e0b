//! Redis Cluster key slots: CRC16 (XMODEM) of the key, or of its hash tag, modulo 16384.
//! A stream and its delayed zset are used together in one script, so they must share a slot.

use crate::support::error::{Error, Result};

const SLOTS: u16 = 16384;

fn crc16(bytes: &[u8]) -> u16 {
    let mut crc: u16 = 0;
    for &byte in bytes {
        crc ^= u16::from(byte) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
        }
    }
    crc
}

/// The part of the key that is hashed: the text inside the first `{…}` if it is non-empty.
fn hashed_part(key: &[u8]) -> &[u8] {
    if let Some(open) = key.iter().position(|&b| b == b'{') {
        if let Some(len) = key[open + 1..].iter().position(|&b| b == b'}') {
            if len > 0 {
                return &key[open + 1..open + 1 + len];
            }
        }
    }
    key
}

/// Whether the key's slot comes from a tag (so text after the tag cannot change it).
pub fn is_tagged(key: &str) -> bool {
    hashed_part(key.as_bytes()).len() < key.len()
}

pub fn slot(key: &str) -> u16 {
    crc16(hashed_part(key.as_bytes())) % SLOTS
}

/// A key of the stream's own, `<stream>:<suffix>`, that hashes to the stream's slot (so one
/// script can use both on a cluster); `None` if no simple name does.
pub fn beside(stream: &str, suffix: &str) -> Option<String> {
    let key = if hashed_part(stream.as_bytes()).len() < stream.len() {
        format!("{stream}:{suffix}")
    } else {
        format!("{{{stream}}}:{suffix}")
    };
    (slot(&key) == slot(stream)).then_some(key)
}

/// Fails unless the stream and the delayed zset hash to one slot.
pub fn check_same_slot(stream: &str, delay_key: &str) -> Result<()> {
    if slot(stream) == slot(delay_key) {
        return Ok(());
    }
    Err(Error::invalid_argument(format!(
        "On Redis Cluster the stream \"{stream}\" and its delayKey \"{delay_key}\" must hash to the same slot (they are used together atomically). Put a hash tag in the stream name, e.g. \"messenger:{{async}}\" with the default delayKey \"messenger:{{async}}:delayed\", or give both keys the same {{tag}}."
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_beside_a_stream_share_its_slot() {
        for stream in ["messages", "messenger:{orders}", "a:{b}:c", "plain:name"] {
            let key = beside(stream, "sent:n1").expect("a key beside the stream");
            assert_eq!(slot(&key), slot(stream), "{key}");
            assert!(key.contains(stream));
        }
        // An empty tag does not count as one: the whole name is hashed, braces and all.
        assert!(beside("a{}b", "x").is_none_or(|key| slot(&key) == slot("a{}b")));
    }

    #[test]
    fn known_slots() {
        // Reference values from the Redis Cluster specification's CRC16 (XMODEM).
        assert_eq!(crc16(b"123456789"), 0x31C3);
        assert_eq!(slot("foo"), 12182);
        assert_eq!(slot("{user1000}.following"), slot("{user1000}.followers"));
        assert_eq!(slot("foo{}{bar}"), slot("foo{}{bar}"));
        assert_eq!(slot("{}x"), crc16(b"{}x") % SLOTS);
    }

    #[test]
    fn tagged_stream_with_default_delay_key_is_fine() {
        assert!(check_same_slot("messenger:{async}", "messenger:{async}:delayed").is_ok());
    }

    #[test]
    fn untagged_stream_is_refused_with_a_fix() {
        let err = check_same_slot("messenger:async", "messenger:async:delayed").unwrap_err();
        assert_eq!(err.kind, crate::support::error::ErrorKind::InvalidArgument);
        assert!(err.message.contains("messenger:{async}"), "{}", err.message);
    }
}
