//! The direct path's state on the JavaScript thread: its connection (a socket the event
//! loop's poll handle watches), the batches in flight and the sends waiting behind them, the
//! send-bound timer, and the libuv callbacks that drive it. Every doubt hands the sends to
//! the runtime's path (see `sends`).

use super::settle_report::{deliver, LoopReport, Ready, Report, ToRuntime};
use crate::direct::uv;
use crate::queue::completions::Settled;
use crate::queue::engine::{DirectWire, NewMessage, Outcome, Resend};
use crate::queue::Queue;
use crate::support::error::{Error, Result};
use std::collections::VecDeque;
use std::ffi::c_void;
use std::io::{ErrorKind, Read, Write};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How long after a failed connection or attempt the direct path is tried again.
pub(super) const RETRY_AFTER: Duration = Duration::from_secs(1);
const READ_CHUNK: usize = 16 * 1024;
/// Batches written and not answered yet, at most. Two keep the server and JavaScript busy at
/// once (one batch stored while the next is made); the JavaScript thread is the bound after
/// that, so more would only make the batches smaller.
const MAX_FLIGHTS: usize = 2;
/// Sends piled up behind a batch in flight that are worth a batch of their own before its
/// reply; fewer wait for the reply and go with the sends made meanwhile.
const PIPELINE_AT: usize = 16;
/// Larger sends go to the runtime's path: writing them is work the I/O thread can do while
/// JavaScript goes on (a lone one of this size, or the batch gathered behind a reply).
const DIRECT_BYTES: usize = 64 * 1024;

type Connecting = Arc<Mutex<Option<Result<std::net::TcpStream>>>>;

pub(super) struct Flight {
    pub(super) seqs: Vec<u32>,
    pub(super) resend: Resend,
    pub(super) started: Instant,
}

pub(super) struct Conn {
    pub(super) socket: std::net::TcpStream,
    pub(super) poll: uv::Poll,
    /// The events `poll` watches.
    pub(super) watching: std::ffi::c_int,
    pub(super) unsent: Vec<u8>,
    /// How much of `unsent` is written.
    pub(super) written: usize,
    pub(super) received: Vec<u8>,
    pub(super) flights: VecDeque<Flight>,
}

pub(super) struct Inner {
    /// This state's own address, as `Box::into_raw` gave it: the data of its libuv handles,
    /// whose callbacks make their borrow from it (never from a borrow that ends).
    pub(super) handle_data: *mut c_void,
    pub(super) wire: Arc<dyn DirectWire>,
    pub(super) queue: Arc<Queue>,
    pub(super) report: Report,
    pub(super) report_here: Option<LoopReport>,
    /// Settles made since the last report: reported once the state is no longer borrowed.
    pub(super) ready: Vec<Settled<String>>,
    pub(super) to_runtime: ToRuntime,
    /// Sends of this queue on the runtime's path not settled yet.
    pub(super) elsewhere: Arc<AtomicUsize>,
    pub(super) event_loop: uv::LoopPtr,
    /// The environment whose cleanup hook `on_env_teardown` is, with this state as its data.
    pub(super) env: napi::sys::napi_env,
    pub(super) timer: Option<uv::Timer>,
    pub(super) conn: Option<Conn>,
    pub(super) connecting: Option<Connecting>,
    pub(super) retry_at: Option<Instant>,
    pub(super) waiting: Vec<(NewMessage, u32)>,
    /// The bytes of `waiting`, kept as it changes: the backlog check runs on every send.
    pub(super) waiting_bytes: usize,
    pub(super) closed: bool,
}

pub(super) unsafe extern "C" fn on_poll(
    handle: *mut c_void,
    status: std::ffi::c_int,
    events: std::ffi::c_int,
) {
    let ready = {
        // SAFETY: the handle's data is the Inner that owns it, alive while the handle is
        // open; on its JavaScript thread, outside any napi call (see DirectSends). The
        // borrow ends before JavaScript is called.
        let inner = unsafe { &mut *(uv::data_of(handle) as *mut Inner) };
        if status < 0 {
            inner.fail();
        } else {
            if events & uv::WRITABLE != 0 {
                inner.flush_unsent();
            }
            if events & uv::READABLE != 0 {
                inner.read_replies();
            }
        }
        inner.take_ready()
    };
    deliver(ready);
}

pub(super) unsafe extern "C" fn on_timer(handle: *mut c_void) {
    let ready = {
        // SAFETY: as in on_poll.
        let inner = unsafe { &mut *(uv::data_of(handle) as *mut Inner) };
        inner.time_out();
        inner.take_ready()
    };
    deliver(ready);
}

impl Inner {
    /// The state of a path not connected yet; its handle data and timer are set by the owner
    /// once the state has its final address.
    pub(super) fn new(
        wire: Arc<dyn DirectWire>,
        queue: Arc<Queue>,
        reports: (Report, Option<LoopReport>),
        to_runtime: ToRuntime,
        elsewhere: Arc<AtomicUsize>,
        event_loop: uv::LoopPtr,
        env: napi::sys::napi_env,
    ) -> Self {
        Self {
            handle_data: std::ptr::null_mut(),
            wire,
            queue,
            report: reports.0,
            report_here: reports.1,
            ready: Vec::new(),
            to_runtime,
            elsewhere,
            event_loop,
            env,
            timer: None,
            conn: None,
            connecting: None,
            retry_at: None,
            waiting: Vec::new(),
            waiting_bytes: 0,
            closed: false,
        }
    }

    /// The settles made since the last report, and where they go.
    fn take_ready(&mut self) -> Ready {
        if self.ready.is_empty() {
            return None;
        }
        Some((
            std::mem::take(&mut self.ready),
            self.report.clone(),
            self.report_here.clone(),
        ))
    }

    /// Reports the settles made during a napi call through the threadsafe callback: the
    /// JavaScript that made the call may not be ready for them yet.
    pub(super) fn report_queued(&mut self) {
        if !self.ready.is_empty() {
            (self.report)(std::mem::take(&mut self.ready));
        }
    }

    pub(super) fn try_send(&mut self, seq: u32, message: NewMessage) -> Result<Option<NewMessage>> {
        if self.closed || message.delay_ms > 0.0 {
            return Ok(Some(message));
        }
        self.adopt_connection();
        let Some(conn) = &self.conn else {
            self.start_connecting();
            return Ok(Some(message));
        };
        let idle = conn.flights.is_empty();
        if idle && (self.elsewhere.load(Ordering::Acquire) > 0 || weight(&message) > DIRECT_BYTES) {
            return Ok(Some(message));
        }
        self.queue.check_send(&message)?;
        self.check_backlog(&message)?;
        self.waiting_bytes = self.waiting_bytes.saturating_add(weight(&message));
        self.waiting.push((message, seq));
        if idle || self.waiting.len() >= PIPELINE_AT {
            self.write_next();
        }
        Ok(None)
    }

    /// Refuses a send at once when the sends waiting here already fill the queue's backlog
    /// (a batch in flight got no reply yet, and sends keep coming).
    fn check_backlog(&self, message: &NewMessage) -> Result<()> {
        let backlog = self.queue.send_backlog();
        if self.waiting.is_empty() {
            return Ok(());
        }
        let bytes = self.waiting_bytes.saturating_add(weight(message));
        if self.waiting.len() >= backlog.items || bytes > backlog.bytes {
            return Err(Error::backlog_full(format!(
                "The transport's write backlog is full ({} sends waiting for a reply to the batch in flight; the bound is {} and {} bytes): refused, nothing was written.",
                self.waiting.len(),
                backlog.items,
                backlog.bytes
            )));
        }
        Ok(())
    }

    /// Picks up a connection the runtime finished opening.
    fn adopt_connection(&mut self) {
        let Some(connecting) = &self.connecting else {
            return;
        };
        let Some(result) = connecting.lock().unwrap_or_else(|p| p.into_inner()).take() else {
            return;
        };
        self.connecting = None;
        let socket = match result {
            Ok(socket) => socket,
            Err(_) => {
                // The runtime's path meets and reports whatever this was.
                self.retry_at = Some(Instant::now() + RETRY_AFTER);
                return;
            }
        };
        let data = self.handle_data;
        let Some(poll) = uv::socket_of(&socket).and_then(|fd| {
            // SAFETY: on the loop's thread; the state outlives the handle (closed in `fail`).
            unsafe { uv::Poll::new(self.event_loop, fd, data) }
        }) else {
            self.retry_at = Some(Instant::now() + RETRY_AFTER);
            return;
        };
        // Readable also while idle: a connection the server closes is noticed at once.
        if !poll.start(uv::READABLE, on_poll) {
            self.retry_at = Some(Instant::now() + RETRY_AFTER);
            return;
        }
        self.conn = Some(Conn {
            socket,
            poll,
            watching: uv::READABLE,
            unsent: Vec::new(),
            written: 0,
            received: Vec::new(),
            flights: VecDeque::new(),
        });
    }

    fn start_connecting(&mut self) {
        if self.connecting.is_some()
            || self.retry_at.is_some_and(|at| Instant::now() < at)
            || !self.queue.setup_done()
        {
            return;
        }
        self.retry_at = None;
        let slot: Connecting = Arc::default();
        self.connecting = Some(slot.clone());
        let connect = self.wire.connect();
        napi::bindgen_prelude::spawn(async move {
            let result = connect.await;
            *slot.lock().unwrap_or_else(|p| p.into_inner()) = Some(result);
        });
    }

    /// Writes the waiting sends as the next batch (at most `MAX_FLIGHTS` in flight).
    fn write_next(&mut self) {
        let Some(conn) = &mut self.conn else { return };
        if conn.flights.len() >= MAX_FLIGHTS || self.waiting.is_empty() {
            return;
        }
        let take = crate::queue::limits::SEND_BOUND.take(&self.waiting);
        let (messages, seqs): (Vec<NewMessage>, Vec<u32>) = self.waiting.drain(..take).unzip();
        let taken_bytes = messages.iter().map(weight).fold(0, usize::saturating_add);
        self.waiting_bytes = self.waiting_bytes.saturating_sub(taken_bytes);
        let (request, resend) = self.wire.encode(messages);
        conn.unsent.extend_from_slice(&request);
        conn.flights.push_back(Flight {
            seqs,
            resend,
            started: Instant::now(),
        });
        // The timer watches the oldest batch; `time_out` moves it on to the next one.
        if conn.flights.len() == 1 {
            if let Some(timer) = &self.timer {
                timer.start(self.queue.send_bound().as_millis() as u64 + 1, on_timer);
            }
        }
        self.flush_unsent();
    }

    fn flush_unsent(&mut self) {
        let Some(conn) = &mut self.conn else { return };
        while conn.written < conn.unsent.len() {
            match conn.socket.write(&conn.unsent[conn.written..]) {
                Ok(0) => break,
                Ok(written) => conn.written += written,
                Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(_) => return self.fail(),
            }
        }
        if conn.written == conn.unsent.len() {
            conn.unsent.clear();
            conn.written = 0;
        }
        let events = if conn.unsent.is_empty() {
            uv::READABLE
        } else {
            uv::READABLE | uv::WRITABLE
        };
        // Each start re-registers the descriptor with epoll: only when the events change.
        if events != conn.watching {
            conn.watching = events;
            if !conn.poll.start(events, on_poll) {
                self.fail();
            }
        }
    }

    fn read_replies(&mut self) {
        let Some(conn) = &mut self.conn else { return };
        let mut ended = false;
        let mut chunk = [0u8; READ_CHUNK];
        loop {
            match conn.socket.read(&mut chunk) {
                Ok(0) => {
                    ended = true;
                    break;
                }
                Ok(read) => {
                    conn.received.extend_from_slice(&chunk[..read]);
                    // A short read drained the socket (the poll is level-triggered: anything
                    // that arrives meanwhile calls back again), so no read to see WouldBlock.
                    if read < chunk.len() {
                        break;
                    }
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(_) => {
                    ended = true;
                    break;
                }
            }
        }
        let mut settled = Vec::new();
        while let Some(flight) = conn.flights.front() {
            match self.wire.read_reply(&conn.received, flight.seqs.len()) {
                Ok(Some((outcome, used))) => {
                    conn.received.drain(..used);
                    if let Some(flight) = conn.flights.pop_front() {
                        settled.push((flight, outcome));
                    }
                }
                Ok(None) => break,
                Err(_) => {
                    ended = true;
                    break;
                }
            }
        }
        if conn.flights.is_empty() {
            if let Some(timer) = &self.timer {
                timer.stop();
            }
            // Bytes no batch asked for would be taken for the next batch's reply.
            ended |= !conn.received.is_empty();
        }
        // A batch the server refused unrun is sent again on the runtime, and so is every batch
        // written behind it, as the same batches and in order (one that was stored is stored
        // once), so none of them overtakes it.
        let mut again = Vec::new();
        for (flight, outcome) in settled {
            match outcome {
                _ if !again.is_empty() => again.push(flight),
                Outcome::NotRun => again.push(flight),
                Outcome::Stored(ids) => self.settle(flight, Ok(ids)),
                Outcome::Failed(err) => self.settle(flight, Err(err)),
            }
        }
        if !again.is_empty() {
            if let Some(conn) = self.conn.as_mut().filter(|c| !c.flights.is_empty()) {
                // Batches behind it still wait for replies on this connection: it is given
                // up, and `fail` hands them all over in order.
                for flight in again.into_iter().rev() {
                    conn.flights.push_front(flight);
                }
                return self.fail();
            }
            let waiting = self.take_waiting();
            self.hand_over(again, waiting);
        }
        if ended {
            // Bytes the server sent for no batch, or the connection's end.
            self.fail();
        } else {
            // The sends that piled up behind the reply go as the next batch.
            self.write_next();
        }
    }

    /// Reports a batch's result (one refused unrun is handed over instead, see `read_replies`).
    pub(super) fn settle(&mut self, flight: Flight, result: Result<Vec<String>>) {
        match result {
            Ok(ids) => {
                self.queue.note_sent(ids.len());
                self.ready
                    .extend(flight.seqs.into_iter().zip(ids.into_iter().map(Ok)));
            }
            Err(err) => {
                self.queue.note_send_failed(&err);
                self.ready
                    .extend(flight.seqs.into_iter().map(|s| (s, Err(err.clone()))));
            }
        }
    }
}

fn weight(message: &NewMessage) -> usize {
    message.body.len() + message.headers.len()
}
