//! RESP2 for the direct sends' connection: commands written as the server reads them, and
//! replies read off a byte buffer that may hold part of one (the connection reads whatever
//! the socket has). Only what those replies can be: simple strings, errors, integers, bulk
//! strings and arrays of them.

/// One reply.
#[derive(Debug, Clone, PartialEq)]
pub enum Reply {
    Simple(String),
    Error(String),
    Integer(i64),
    Bulk(Option<Vec<u8>>),
    Array(Option<Vec<Reply>>),
}

/// Appends one command (an array of bulk strings) to `out`.
pub fn push_command(out: &mut Vec<u8>, args: &[&[u8]]) {
    push_header(out, b'*', args.len());
    for arg in args {
        push_header(out, b'$', arg.len());
        out.extend_from_slice(arg);
        out.extend_from_slice(b"\r\n");
    }
}

fn push_header(out: &mut Vec<u8>, kind: u8, len: usize) {
    out.push(kind);
    out.extend_from_slice(itoa::Buffer::new().format(len).as_bytes());
    out.extend_from_slice(b"\r\n");
}

/// The `count` replies at the start of `buf` and how many bytes they took, `None` until
/// `buf` holds all of them.
pub fn parse_replies(buf: &[u8], count: usize) -> Result<Option<(Vec<Reply>, usize)>, String> {
    let mut replies = Vec::with_capacity(count);
    let mut at = 0;
    while replies.len() < count {
        let Some((reply, used)) = parse(&buf[at..])? else {
            return Ok(None);
        };
        replies.push(reply);
        at += used;
    }
    Ok(Some((replies, at)))
}

/// The reply at the start of `buf` and how many bytes it took, `None` if `buf` holds only
/// part of it, or an error if `buf` is not RESP2.
pub fn parse(buf: &[u8]) -> Result<Option<(Reply, usize)>, String> {
    let Some(line_end) = find_crlf(buf) else {
        return Ok(None);
    };
    let Some((&kind, line)) = buf[..line_end].split_first() else {
        return Err("an empty reply line".into());
    };
    let text = || String::from_utf8_lossy(line).into_owned();
    let number = || -> Result<i64, String> {
        std::str::from_utf8(line)
            .ok()
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| format!("a malformed length or integer: {:?}", text()))
    };
    let after = line_end + 2;
    match kind {
        b'+' => Ok(Some((Reply::Simple(text()), after))),
        b'-' => Ok(Some((Reply::Error(text()), after))),
        b':' => Ok(Some((Reply::Integer(number()?), after))),
        b'$' => {
            let Ok(len) = usize::try_from(number()?) else {
                return Ok(Some((Reply::Bulk(None), after)));
            };
            let end = after + len;
            if buf.len() < end + 2 {
                return Ok(None);
            }
            if &buf[end..end + 2] != b"\r\n" {
                return Err("a bulk string not ended by CRLF".into());
            }
            Ok(Some((Reply::Bulk(Some(buf[after..end].to_vec())), end + 2)))
        }
        b'*' => {
            let Ok(count) = usize::try_from(number()?) else {
                return Ok(Some((Reply::Array(None), after)));
            };
            let mut items = Vec::with_capacity(count.min(1024));
            let mut at = after;
            for _ in 0..count {
                match parse(&buf[at..])? {
                    Some((item, used)) => {
                        items.push(item);
                        at += used;
                    }
                    None => return Ok(None),
                }
            }
            Ok(Some((Reply::Array(Some(items)), at)))
        }
        other => Err(format!("an unknown reply type {:?}", other as char)),
    }
}

fn find_crlf(buf: &[u8]) -> Option<usize> {
    buf.windows(2).position(|w| w == b"\r\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn whole_replies_are_read_with_their_length() {
        let buf = b"*2\r\n$3\r\n1-0\r\n$3\r\n2-0\r\n+OK\r\n";
        let (reply, used) = parse(buf).unwrap().unwrap();
        assert_eq!(
            reply,
            Reply::Array(Some(vec![
                Reply::Bulk(Some(b"1-0".to_vec())),
                Reply::Bulk(Some(b"2-0".to_vec()))
            ]))
        );
        assert_eq!(
            parse(&buf[used..]).unwrap().unwrap().0,
            Reply::Simple("OK".into())
        );
        assert_eq!(
            parse(b"-NOSCRIPT No matching script\r\n")
                .unwrap()
                .unwrap()
                .0,
            Reply::Error("NOSCRIPT No matching script".into())
        );
        assert_eq!(parse(b"$-1\r\n").unwrap().unwrap().0, Reply::Bulk(None));
        assert_eq!(parse(b":42\r\n").unwrap().unwrap().0, Reply::Integer(42));
    }

    #[test]
    fn a_command_is_written_as_an_array_of_bulk_strings() {
        let mut out = Vec::new();
        push_command(&mut out, &[b"SET", b"k", b""]);
        assert_eq!(out, b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$0\r\n\r\n");
    }

    #[test]
    fn replies_in_a_row_are_read_only_once_all_are_there() {
        let buf = b"+OK\r\n+QUEUED\r\n*1\r\n$3\r\n1-0\r\n";
        for cut in 0..buf.len() {
            assert_eq!(parse_replies(&buf[..cut], 3).unwrap(), None, "cut at {cut}");
        }
        let (replies, used) = parse_replies(buf, 3).unwrap().unwrap();
        assert_eq!(used, buf.len());
        assert_eq!(replies[1], Reply::Simple("QUEUED".into()));
    }

    #[test]
    fn a_partial_reply_is_none_at_every_cut() {
        let buf = b"*2\r\n$3\r\n1-0\r\n$3\r\n2-0\r\n";
        for cut in 0..buf.len() {
            assert_eq!(parse(&buf[..cut]).unwrap(), None, "cut at {cut}");
        }
    }

    #[test]
    fn bytes_that_are_not_resp_are_an_error() {
        assert!(parse(b"?what\r\n").is_err());
        assert!(parse(b"$3\r\nabcd\r\n").is_err());
        assert!(parse(b":x\r\n").is_err());
    }
}
