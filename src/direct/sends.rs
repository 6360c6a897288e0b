//! Sends served on the JavaScript thread: a connection of their own whose socket the
//! JavaScript thread's event loop watches (libuv, see `uv`), so a sequential send is written
//! by the call that makes it and its reply read where its promise resolves, with no hand-off
//! to the I/O thread and back (two thread wake-ups per send, the cost that made a sequential
//! Redis send slower than upstream's).
//!
//! Only the path of the common case: due messages, the connection up, no send of the queue on
//! the runtime's path in flight (so neither path overtakes the other). Sends made while a
//! batch is in flight wait and go together as the next batch (group commit); a second batch
//! is written before the first one's reply once enough have piled up, so the server stores
//! one while JavaScript makes the next (the replies come back in order on the one
//! connection). Anything else goes to the runtime's path, and so does every doubt: a batch
//! whose connection failed is sent again there as the same batch (the wire makes repeats
//! store nothing twice), a batch that got no reply within the send bound fails with the
//! outcome unknown, never sent again.

use crate::direct::owned_by_thread::OwnedByThread;
use crate::direct::uv;
use crate::queue::completions::Settled;
use crate::queue::engine::{DirectWire, NewMessage, Outcome, Resend};
use crate::queue::Queue;
use crate::support::error::{Error, Result};
use std::collections::VecDeque;
use std::ffi::c_void;
use std::io::{ErrorKind, Read, Write};
use std::rc::Rc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Where settled sends are reported, from any thread: the queue's threadsafe callback, which
/// queues the call. Used for settles made during a napi call (JavaScript is waiting on that
/// call, and on `sendQueued` it has not registered the send's promise yet) and from the
/// runtime.
pub type Report = Arc<dyn Fn(Vec<Settled<String>>) + Send + Sync>;

/// Reports settles from the loop's own callbacks straight into JavaScript (see
/// `loop_callback`), with none of the state borrowed; hands the batch back if JavaScript
/// could not be called, for `Report` to take.
pub type LoopReport = Rc<dyn Fn(Vec<Settled<String>>) -> Option<Vec<Settled<String>>>>;

/// Queues a send on the runtime's path, in call order with every other send there.
pub type ToRuntime = Arc<dyn Fn(u32, NewMessage) -> Result<()> + Send + Sync>;

/// The variable that turns the direct path off (`0` or `false`): every send then takes the
/// runtime's path, as before it existed.
pub const DISABLE_VAR: &str = "NESTJS_MESSENGER_NATIVE_DIRECT_SENDS";

fn enabled(value: Option<String>) -> bool {
    !matches!(
        value.as_deref().map(str::trim),
        Some("0" | "false" | "off" | "no")
    )
}

/// How long after a failed connection or attempt the direct path is tried again.
const RETRY_AFTER: Duration = Duration::from_secs(1);
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

struct Flight {
    seqs: Vec<u32>,
    resend: Resend,
    started: Instant,
}

struct Conn {
    socket: std::net::TcpStream,
    poll: uv::Poll,
    /// The events `poll` watches.
    watching: std::ffi::c_int,
    unsent: Vec<u8>,
    /// How much of `unsent` is written.
    written: usize,
    received: Vec<u8>,
    flights: VecDeque<Flight>,
}

struct Inner {
    /// This state's own address, as `Box::into_raw` gave it: the data of its libuv handles,
    /// whose callbacks make their borrow from it (never from a borrow that ends).
    handle_data: *mut c_void,
    wire: Arc<dyn DirectWire>,
    queue: Arc<Queue>,
    report: Report,
    report_here: Option<LoopReport>,
    /// Settles made since the last report: reported once the state is no longer borrowed.
    ready: Vec<Settled<String>>,
    to_runtime: ToRuntime,
    /// Sends of this queue on the runtime's path not settled yet.
    elsewhere: Arc<AtomicUsize>,
    event_loop: uv::LoopPtr,
    /// The environment whose cleanup hook `on_env_teardown` is, with this state as its data.
    env: napi::sys::napi_env,
    timer: Option<uv::Timer>,
    conn: Option<Conn>,
    connecting: Option<Connecting>,
    retry_at: Option<Instant>,
    waiting: Vec<(NewMessage, u32)>,
    /// The bytes of `waiting`, kept as it changes: the backlog check runs on every send.
    waiting_bytes: usize,
    closed: bool,
}

/// One queue's direct path. Lives on the JavaScript thread that made it: its loop's
/// callbacks run there, and a call from any other thread touches nothing (a send takes the
/// runtime's path). Settles are gathered while the state is borrowed and reported after the
/// borrow ends (the loop's callbacks call JavaScript, which may send or close, re-entering
/// the state), so at most one borrow of it is ever alive.
pub struct DirectSends {
    inner: OwnedByThread<Inner>,
}

impl DirectSends {
    /// The direct path of `queue`, if its engine has one and the host has libuv.
    pub fn new(
        env: &napi::Env,
        queue: Arc<Queue>,
        report: Report,
        report_here: Option<LoopReport>,
        to_runtime: ToRuntime,
        elsewhere: Arc<AtomicUsize>,
    ) -> Option<Self> {
        let env_loop = env.get_uv_event_loop().ok()?;
        if !uv::available() || env_loop.is_null() || !enabled(std::env::var(DISABLE_VAR).ok()) {
            return None;
        }
        let wire = queue.engine().clone().direct_wire()?;
        let inner = Box::into_raw(Box::new(Inner {
            handle_data: std::ptr::null_mut(),
            wire,
            queue,
            report,
            report_here,
            ready: Vec::new(),
            to_runtime,
            elsewhere,
            event_loop: env_loop,
            env: env.raw(),
            timer: None,
            conn: None,
            connecting: None,
            retry_at: None,
            waiting: Vec::new(),
            waiting_bytes: 0,
            closed: false,
        }));
        // SAFETY: `inner` is alive until Drop, which removes the hook and closes the timer
        // first; not shared yet. On the environment's thread, inside a napi call.
        unsafe {
            (*inner).handle_data = inner as *mut c_void;
            let hooked = napi::sys::napi_add_env_cleanup_hook(
                env.raw(),
                Some(on_env_teardown),
                inner as *mut c_void,
            );
            if hooked != napi::sys::Status::napi_ok {
                drop(Box::from_raw(inner));
                return None;
            }
            (*inner).timer = uv::Timer::new(env_loop, inner as *mut c_void);
        }
        Some(Self {
            inner: OwnedByThread::new(inner),
        })
    }

    /// The state, on the thread that owns it only.
    #[allow(clippy::mut_from_ref)] // one thread, one borrow at a time: see the struct
    fn inner(&self) -> Option<&mut Inner> {
        // SAFETY: as the struct says; alive until Drop, and reached on its owner thread only.
        self.inner.get().map(|inner| unsafe { &mut *inner })
    }

    /// Takes send `seq` if the direct path can serve it now (the message is handed back
    /// otherwise); an error for a send `Queue::send` would refuse at once.
    pub fn try_send(&self, seq: u32, message: NewMessage) -> Result<Option<NewMessage>> {
        let Some(inner) = self.inner() else {
            return Ok(Some(message));
        };
        let taken = inner.try_send(seq, message);
        inner.report_queued();
        taken
    }

    /// No more direct sends: batches in flight are handed to the runtime (as the same batch),
    /// the connection closed. Only while the environment lives: the runtime may be gone
    /// once it is torn down (see `on_env_teardown`).
    pub fn shut(&self) {
        let Some(inner) = self.inner() else { return };
        inner.closed = true;
        inner.fail();
        inner.report_queued();
    }
}

impl Drop for DirectSends {
    /// Reached without `shut` only when the JavaScript environment is torn down (the queue's
    /// settle callback keeps the queue alive until then), after `on_env_teardown`.
    fn drop(&mut self) {
        let Some(pointer) = self.inner.get() else {
            // Another thread's loop may still call back into the state: it is left alive
            // (leaked) rather than freed under it.
            return;
        };
        // SAFETY: from Box::into_raw in `new`, on its owner thread. The hook is removed (a
        // no-op once it has run) and `end_here` closes both handles, so nothing can reach
        // the state any more.
        unsafe {
            napi::sys::napi_remove_env_cleanup_hook(
                (*pointer).env,
                Some(on_env_teardown),
                pointer as *mut c_void,
            );
            Box::from_raw(pointer).end_here();
        }
    }
}

/// The environment is being torn down: napi-rs may shut the async runtime down in a cleanup
/// hook of its own (when no other thread holds the addon), and the loop turns that run
/// during teardown could still call back into the state, so everything ends here, with
/// nothing handed to the runtime.
unsafe extern "C" fn on_env_teardown(data: *mut c_void) {
    // SAFETY: the hook's data is the state, alive until Drop removes the hook; on the
    // environment's thread, outside any napi call.
    unsafe { (*(data as *mut Inner)).end_here() };
}

unsafe extern "C" fn on_poll(
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

unsafe extern "C" fn on_timer(handle: *mut c_void) {
    let ready = {
        // SAFETY: as in on_poll.
        let inner = unsafe { &mut *(uv::data_of(handle) as *mut Inner) };
        inner.time_out();
        inner.take_ready()
    };
    deliver(ready);
}

/// Settles taken from the state, with where they go.
type Ready = Option<(Vec<Settled<String>>, Report, Option<LoopReport>)>;

/// Reports settles from a loop callback: into JavaScript at once, else through `Report`.
/// The state may be gone once JavaScript has run: nothing here touches it.
fn deliver(ready: Ready) {
    let Some((batch, report, here)) = ready else {
        return;
    };
    let batch = match here {
        Some(here) => here(batch),
        None => Some(batch),
    };
    if let Some(batch) = batch {
        report(batch);
    }
}

impl Inner {
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
    fn report_queued(&mut self) {
        if !self.ready.is_empty() {
            (self.report)(std::mem::take(&mut self.ready));
        }
    }

    fn try_send(&mut self, seq: u32, message: NewMessage) -> Result<Option<NewMessage>> {
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
    fn settle(&mut self, flight: Flight, result: Result<Vec<String>>) {
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

    /// The oldest batch got no reply within the send bound: it fails with the outcome
    /// unknown (the server may still run it), the connection is given up.
    fn time_out(&mut self) {
        let Some(conn) = &mut self.conn else { return };
        let bound = self.queue.send_bound();
        if conn
            .flights
            .front()
            .is_none_or(|f| f.started.elapsed() < bound)
        {
            if let (Some(flight), Some(timer)) = (conn.flights.front(), &self.timer) {
                let left = bound.saturating_sub(flight.started.elapsed());
                timer.start(left.as_millis() as u64 + 1, on_timer);
            }
            return;
        }
        let err = self.queue.unanswered_send();
        let flights: Vec<Flight> = conn.flights.drain(..).collect();
        for flight in flights {
            self.settle(flight, Err(err.clone()));
        }
        self.fail();
    }

    /// Gives the connection up. Batches still in flight are sent again on the runtime as the
    /// same batches, then the waiting sends; the direct path is tried again later.
    fn fail(&mut self) {
        if let Some(timer) = &self.timer {
            timer.stop();
        }
        let flights: Vec<Flight> = match self.conn.take() {
            Some(mut conn) => {
                conn.poll.close();
                conn.flights.drain(..).collect()
            }
            None => Vec::new(),
        };
        let waiting = self.take_waiting();
        if !self.closed {
            self.retry_at = Some(Instant::now() + RETRY_AFTER);
        }
        self.hand_over(flights, waiting);
    }

    /// Ends the direct path for good with no runtime to turn to (see `on_env_teardown`):
    /// the handles closed, and every batch in flight and every waiting send failed here,
    /// seen in the queue's last error only (no JavaScript is left to settle them for).
    fn end_here(&mut self) {
        self.closed = true;
        if let Some(mut timer) = self.timer.take() {
            timer.close();
        }
        let mut lost = self.take_waiting().len();
        if let Some(mut conn) = self.conn.take() {
            conn.poll.close();
            lost += conn.flights.drain(..).map(|f| f.seqs.len()).sum::<usize>();
        }
        self.ready.clear();
        if lost > 0 {
            self.queue.note_send_failed(&Error::transport(format!(
                "{lost} send(s) were in flight when their JavaScript environment was torn down (they may have been stored)."
            )));
        }
    }

    /// Every waiting send, leaving none.
    fn take_waiting(&mut self) -> Vec<(NewMessage, u32)> {
        self.waiting_bytes = 0;
        std::mem::take(&mut self.waiting)
    }

    /// Sends `flights` again on the runtime, as the same batches; `waiting` (never written)
    /// joins the runtime's path, in order.
    fn hand_over(&mut self, flights: Vec<Flight>, waiting: Vec<(NewMessage, u32)>) {
        // The resends first: the runtime's sends queued from now on wait for them (a hold).
        if !flights.is_empty() {
            self.resend(flights);
        }
        for (message, seq) in waiting {
            if let Err(err) = (self.to_runtime)(seq, message) {
                self.ready.push((seq, Err(err)));
            }
        }
    }

    fn resend(&mut self, flights: Vec<Flight>) {
        let runs: Vec<(Vec<u32>, Resend)> =
            flights.into_iter().map(|f| (f.seqs, f.resend)).collect();
        self.elsewhere.fetch_add(1, Ordering::AcqRel);
        let hold = self.queue.hold_sends();
        let (queue, report, elsewhere) = (
            self.queue.clone(),
            self.report.clone(),
            self.elsewhere.clone(),
        );
        napi::bindgen_prelude::spawn(async move {
            let bound = queue.send_bound();
            for (seqs, resend) in runs {
                let result = tokio::time::timeout(bound, resend())
                    .await
                    .unwrap_or_else(|_| Err(queue.unanswered_send()));
                match result {
                    Ok(ids) if ids.len() == seqs.len() => {
                        queue.note_sent(ids.len());
                        report(seqs.into_iter().zip(ids.into_iter().map(Ok)).collect());
                    }
                    Ok(ids) => {
                        let err = Error::transport(format!(
                            "internal error: a batch of {} got {} ids",
                            seqs.len(),
                            ids.len()
                        ));
                        report(seqs.into_iter().map(|s| (s, Err(err.clone()))).collect());
                    }
                    Err(err) => {
                        queue.note_send_failed(&err);
                        report(seqs.into_iter().map(|s| (s, Err(err.clone()))).collect());
                    }
                }
            }
            drop(hold);
            elsewhere.fetch_sub(1, Ordering::AcqRel);
        });
    }
}

fn weight(message: &NewMessage) -> usize {
    message.body.len() + message.headers.len()
}

#[cfg(test)]
mod tests {
    use super::enabled;

    #[test]
    fn only_an_explicit_no_turns_the_direct_path_off() {
        for on in [None, Some(""), Some("1"), Some("yes"), Some("maybe")] {
            assert!(enabled(on.map(str::to_owned)), "{on:?}");
        }
        for off in ["0", "false", "off", "no", " 0 "] {
            assert!(!enabled(Some(off.to_owned())), "{off}");
        }
    }
}
