//! A single node's sends on the JavaScript thread (see `crate::direct::sends`): a plain TCP
//! connection of their own, readied here (AUTH, SELECT), and a batch's first attempt as one
//! transaction that marks the batch stored (`send_batch::transaction_request`), so a batch
//! whose reply was lost is stored once when the runtime sends it again.

use super::resp::{self, Reply};
use super::send_batch::{self, SendBatch, TransactionError};
use super::stream_queue::RedisQueue;
use crate::queue::engine::NewMessage;
use crate::queue::engine::{BatchReply, ConnectionHold, DirectWire, Encoded, Resend};
use crate::support::error::{Cause, Error, Outcome, Result};
use futures_util::future::BoxFuture;
use redis::ConnectionAddr;
use std::sync::Arc;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// The name the send connection gives itself (`CLIENT LIST` shows it).
const SEND_CONNECTION_NAME: &str = "nestjs-messenger-native:send";

/// The wire of one stream queue on a plain single node.
pub struct RedisWire {
    queue: Arc<RedisQueue>,
    host: String,
    port: u16,
    username: Option<String>,
    password: Option<String>,
    db: i64,
}

impl RedisWire {
    /// A transaction's refusal, or one command's, as the user's error: read back as the
    /// client library reads an error reply, for the same kinds.
    fn send_error(&self, error: TransactionError) -> Error {
        let TransactionError::Server(text) = error else {
            return Error::transport(
                "Redis transport failed during \"send\": the server answered the transaction with a reply of another shape",
            )
            .with_outcome(Outcome::Unknown);
        };
        match redis::parse_redis_value(format!("-{text}\r\n").as_bytes()).map(|v| v.extract_error())
        {
            Ok(Err(e)) => self.queue.stream.err("send", &e),
            _ => Error::transport(
                "Redis transport failed during \"send\": an unreadable error reply",
            )
            .with_outcome(Outcome::Unknown),
        }
    }

    /// `None` on a cluster, over TLS, or with `waitForReplicas` (its `WAIT` goes on the
    /// command connection, after the write it waits for): those keep to the runtime's
    /// connections.
    pub fn new(queue: Arc<RedisQueue>) -> Option<Self> {
        if queue.stream.config.wait_for_replicas > 0 {
            return None;
        }
        let super::connection::Target::Node(client) = &queue.stream.shared.target else {
            return None;
        };
        let info = client.get_connection_info();
        let ConnectionAddr::Tcp(host, port) = info.addr() else {
            return None;
        };
        // Without a marker key beside the stream, a batch could not be sent again safely.
        if !queue.writer.marker_names.available() {
            return None;
        }
        let settings = info.redis_settings();
        if settings.protocol() != redis::ProtocolVersion::RESP2 {
            return None;
        }
        Some(Self {
            host: host.clone(),
            port: *port,
            username: settings.username().map(str::to_owned),
            password: settings.password().map(str::to_owned),
            db: settings.db(),
            queue,
        })
    }

    /// Connects and runs `greeting`; a failed command fails the connection unless it is
    /// marked optional (the name: an ACL may refuse CLIENT SETNAME).
    async fn handshake(
        host: String,
        port: u16,
        greeting: Vec<(Vec<Vec<u8>>, bool)>,
    ) -> std::io::Result<std::net::TcpStream> {
        let mut stream =
            tokio::net::TcpStream::connect((host.trim_matches(&['[', ']'][..]), port)).await?;
        stream.set_nodelay(true)?;
        let socket = socket2::SockRef::from(&stream);
        socket.set_tcp_keepalive(&crate::support::tcp_keepalive::keepalive())?;
        #[cfg(target_os = "linux")]
        socket.set_tcp_user_timeout(Some(crate::support::tcp_keepalive::USER_TIMEOUT))?;
        let mut request = Vec::new();
        for (command, _) in &greeting {
            let args: Vec<&[u8]> = command.iter().map(Vec::as_slice).collect();
            resp::push_command(&mut request, &args);
        }
        stream.write_all(&request).await?;
        let mut buf = Vec::new();
        let mut answered = 0;
        while answered < greeting.len() {
            let mut chunk = [0u8; 4096];
            let read = stream.read(&mut chunk).await?;
            if read == 0 {
                return Err(std::io::ErrorKind::UnexpectedEof.into());
            }
            buf.extend_from_slice(&chunk[..read]);
            while let Some((reply, used)) = resp::parse(&buf).map_err(std::io::Error::other)? {
                buf.drain(..used);
                let optional = greeting
                    .get(answered)
                    .is_some_and(|(_, optional)| *optional);
                answered += 1;
                if let (Reply::Error(text), false) = (reply, optional) {
                    // The server's own words (no secret in them: AUTH answers WRONGPASS alone).
                    return Err(std::io::Error::other(text));
                }
            }
        }
        stream.into_std()
    }
}

impl DirectWire for RedisWire {
    fn hold_connection(&self) -> Option<ConnectionHold> {
        let slot = self.queue.stream.shared.reads.reserve_send()?;
        Some(Box::new(slot))
    }

    fn link_key(&self) -> u64 {
        use std::hash::{Hash, Hasher};
        let mut hasher = std::collections::hash_map::DefaultHasher::new();
        (
            &self.host,
            self.port,
            &self.username,
            &self.password,
            self.db,
        )
            .hash(&mut hasher);
        hasher.finish()
    }

    fn connect(&self) -> BoxFuture<'static, Result<std::net::TcpStream>> {
        let mut greeting: Vec<(Vec<Vec<u8>>, bool)> = Vec::new();
        if let Some(password) = &self.password {
            let mut auth = vec![b"AUTH".to_vec()];
            auth.extend(self.username.iter().map(|u| u.as_bytes().to_vec()));
            auth.push(password.as_bytes().to_vec());
            greeting.push((auth, false));
        }
        if self.db != 0 {
            greeting.push((
                vec![b"SELECT".to_vec(), self.db.to_string().into_bytes()],
                false,
            ));
        }
        // Named, so an operator (and a test) can tell it from the command connection.
        greeting.push((
            vec![
                b"CLIENT".to_vec(),
                b"SETNAME".to_vec(),
                SEND_CONNECTION_NAME.as_bytes().to_vec(),
            ],
            true,
        ));
        let (host, port) = (self.host.clone(), self.port);
        let timeout = self.queue.stream.shared.connect_timeout;
        let secrets = self.queue.stream.shared.secrets.clone();
        Box::pin(async move {
            match tokio::time::timeout(timeout, Self::handshake(host, port, greeting)).await {
                Ok(Ok(stream)) => Ok(stream),
                Ok(Err(e)) => Err(Error::connection(format!(
                    "Redis transport could not open its send connection: {e}"
                ))
                .caused_by(Cause::io(&e))
                .with_outcome(Outcome::NotApplied)
                .redacted(&secrets)),
                Err(_) => Err(Error::connection(
                    "Redis transport could not open its send connection in time",
                )
                .caused_by(Cause::timed_out(format!(
                    "no answer within {} ms",
                    timeout.as_millis()
                )))
                .with_outcome(Outcome::NotApplied)),
            }
        })
    }

    fn encode(&self, messages: Vec<NewMessage>) -> Encoded {
        let stream = &self.queue.stream.config.stream;
        let batch = SendBatch::new(&self.queue.writer.marker_names, &messages);
        let request = send_batch::transaction_request(stream, &batch, &messages);
        let marker = batch.marker.clone();
        let batch = batch.tried();
        let queue = self.queue.clone();
        let resend: Resend = Box::new(move || {
            Box::pin(async move { queue.writer.insert_batch(&messages, batch).await })
        });
        let queue = self.queue.clone();
        Encoded {
            request,
            resend,
            stored: Box::new(move || {
                if let Some(marker) = marker {
                    queue.writer.forget_marker(marker);
                }
            }),
        }
    }

    fn read_reply(&self, buf: &[u8], count: usize) -> Result<Option<(BatchReply, usize)>> {
        let parsed =
            resp::parse_replies(buf, send_batch::transaction_replies(count)).map_err(|e| {
                Error::connection(format!(
                    "Redis transport failed during \"send\": the server's reply was not RESP ({e})"
                ))
                .with_outcome(Outcome::Unknown)
            })?;
        let Some((replies, used)) = parsed else {
            return Ok(None);
        };
        let reply = match send_batch::transaction_outcome(replies, count) {
            Ok(answers) => BatchReply::Answered(
                answers
                    .into_iter()
                    .map(|answer| answer.map_err(|e| self.send_error(e)))
                    .collect(),
            ),
            Err(refused) => BatchReply::Failed(self.send_error(refused)),
        };
        Ok(Some((reply, used)))
    }
}
