//! The direct path's shared state on one JavaScript thread: one connection per node (a
//! socket the event loop's poll handle watches) that every queue of the thread sends on, each
//! queue a lane of it (`send_lane`); the batches in flight in the order they were written,
//! each naming its lane; the send-bound timer; and the libuv callbacks that drive it. Every
//! doubt hands the sends to their queue's runtime path (see `sends`).

use super::send_lane::{weight, Flight, Lane, LaneId};
use super::settle_report::Ready;
use crate::direct::uv;
use crate::queue::engine::{BatchReply, ConnectionHold, Encoded, NewMessage};
use crate::support::error::Result;
use crate::support::locks::Locked;
use std::collections::{HashMap, VecDeque};
use std::ffi::c_void;
use std::io::{ErrorKind, Read, Write};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How long after a failed connection or attempt the direct path is tried again.
pub(super) const RETRY_AFTER: Duration = Duration::from_secs(1);
const READ_CHUNK: usize = 16 * 1024;
/// Batches of one queue written and not answered yet, at most. Two keep the server and
/// JavaScript busy at once (one batch stored while the next is made); the JavaScript thread
/// is the bound after that, so more would only make the batches smaller.
const MAX_FLIGHTS: usize = 2;
/// Sends piled up behind a batch in flight that are worth a batch of their own before its
/// reply; fewer wait for the reply and go with the sends made meanwhile.
const PIPELINE_AT: usize = 16;
/// Larger sends go to the runtime's path: writing them is work the I/O thread can do while
/// JavaScript goes on (a lone one of this size, or the batch gathered behind a reply).
const DIRECT_BYTES: usize = 64 * 1024;

type Connecting = Arc<Mutex<Option<Result<std::net::TcpStream>>>>;

pub(super) struct Conn {
    /// Declared before `socket`, so dropped first: the poll handle lets go of the descriptor
    /// before it is closed (and its number can be reused by the app).
    pub(super) poll: uv::Poll,
    pub(super) socket: std::net::TcpStream,
    /// The events `poll` watches.
    pub(super) watching: std::ffi::c_int,
    pub(super) unsent: Vec<u8>,
    /// How much of `unsent` is written.
    pub(super) written: usize,
    pub(super) received: Vec<u8>,
    /// What each read fills: kept, so a read does not zero a fresh buffer every time.
    pub(super) read_chunk: Box<[u8]>,
    pub(super) flights: VecDeque<Flight>,
}

/// One connection's state, shared by the lanes of the queues that send to its node.
pub(super) struct Link {
    /// This state's own address, as `Box::into_raw` gave it: the data of its libuv handles,
    /// whose callbacks make their borrow from it (never from a borrow that ends).
    pub(super) handle_data: *mut c_void,
    /// The key this link is registered under on its thread (see `sends`).
    pub(super) key: (usize, u64),
    pub(super) event_loop: uv::LoopPtr,
    /// The environment whose cleanup hook `on_env_teardown` is, with this state as its data.
    pub(super) env: napi::sys::napi_env,
    pub(super) timer: Option<uv::Timer>,
    pub(super) conn: Option<Conn>,
    /// The link's place in its deployment's connection budget, taken before it connects
    /// and given back when its connection is given up (one per JavaScript thread and node).
    pub(super) hold: Option<ConnectionHold>,
    pub(super) connecting: Option<Connecting>,
    pub(super) retry_at: Option<Instant>,
    pub(super) lanes: HashMap<LaneId, Lane>,
    pub(super) next_lane: LaneId,
    /// The lanes that may have settles to report or have finished since the last report
    /// (every lane when `report_all`, after a failure): a send's report visits these, not
    /// every transport of the thread.
    to_report: Vec<LaneId>,
    report_all: bool,
    /// The environment is torn down: nothing is sent here any more.
    pub(super) torn_down: bool,
    /// What the loop calls back on the connection's readiness and the timer (see
    /// `send_links`).
    pub(super) on_poll: uv::PollCb,
    pub(super) on_timer: uv::TimerCb,
}

impl Link {
    /// The state of a link not connected yet; its handle data and timer are set by the owner
    /// once the state has its final address.
    pub(super) fn new(
        key: (usize, u64),
        event_loop: uv::LoopPtr,
        env: napi::sys::napi_env,
        (on_poll, on_timer): (uv::PollCb, uv::TimerCb),
    ) -> Self {
        Self {
            handle_data: std::ptr::null_mut(),
            key,
            event_loop,
            env,
            timer: None,
            conn: None,
            hold: None,
            connecting: None,
            retry_at: None,
            lanes: HashMap::new(),
            next_lane: 0,
            to_report: Vec::new(),
            report_all: false,
            torn_down: false,
            on_poll,
            on_timer,
        }
    }

    /// Marks a lane as one the next report visits.
    pub(super) fn touch(&mut self, lane: LaneId) {
        if !self.to_report.contains(&lane) {
            self.to_report.push(lane);
        }
    }

    /// Marks every lane (a failure hands all of them over).
    pub(super) fn touch_all(&mut self) {
        self.report_all = true;
    }

    /// Runs `report` on each lane to report, then lets the finished ones leave.
    fn visit_to_report(&mut self, mut report: impl FnMut(&mut Lane)) {
        let ids = if std::mem::take(&mut self.report_all) {
            self.to_report.clear();
            self.lanes.keys().copied().collect()
        } else {
            std::mem::take(&mut self.to_report)
        };
        for id in ids {
            let Some(lane) = self.lanes.get_mut(&id) else {
                continue;
            };
            report(lane);
            if lane.finished() {
                self.lanes.remove(&id);
            }
        }
    }

    /// The settles of the lanes to report made since the last report, and where they go;
    /// lanes that are finished leave.
    pub(super) fn take_ready(&mut self) -> Vec<Ready> {
        let mut ready = Vec::new();
        self.visit_to_report(|lane| ready.extend(lane.take_ready()));
        ready
    }

    /// Reports the settles made during a napi call through each lane's threadsafe callback.
    pub(super) fn report_queued(&mut self) {
        self.visit_to_report(Lane::report_queued);
    }

    pub(super) fn try_send(
        &mut self,
        lane_id: LaneId,
        seq: u32,
        message: NewMessage,
    ) -> Result<Option<NewMessage>> {
        let Some(lane) = self.lanes.get(&lane_id) else {
            return Ok(Some(message));
        };
        if lane.closed || self.torn_down || message.delay_ms > 0.0 {
            return Ok(Some(message));
        }
        self.touch(lane_id);
        self.adopt_connection();
        if self.conn.is_none() {
            self.start_connecting(lane_id);
            return Ok(Some(message));
        }
        let Some(lane) = self.lanes.get_mut(&lane_id) else {
            return Ok(Some(message));
        };
        let idle = lane.in_flight == 0;
        if idle
            && (lane.on_runtime_path.load(Ordering::Acquire) > 0 || weight(&message) > DIRECT_BYTES)
        {
            return Ok(Some(message));
        }
        lane.queue.check_send(&message)?;
        lane.check_backlog(&message)?;
        lane.push_waiting(message, seq);
        if idle || lane.waiting.len() >= PIPELINE_AT {
            self.write_next(lane_id);
        }
        Ok(None)
    }

    /// Picks up a connection the runtime finished opening.
    fn adopt_connection(&mut self) {
        let Some(connecting) = &self.connecting else {
            return;
        };
        let Some(result) = connecting.locked().take() else {
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
            // SAFETY: on the loop's thread; the state outlives the handle (closed in `fail`
            // and before the state is freed).
            unsafe { uv::Poll::new(self.event_loop, fd, data) }
        }) else {
            self.retry_at = Some(Instant::now() + RETRY_AFTER);
            return;
        };
        // Readable also while idle: a connection the server closes is noticed at once.
        if !poll.start(uv::READABLE, self.on_poll) {
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
            read_chunk: vec![0; READ_CHUNK].into_boxed_slice(),
            flights: VecDeque::new(),
        });
    }

    /// Opens the connection with the wire of the lane that needs it (every lane of a link
    /// connects to the same node with the same credentials).
    fn start_connecting(&mut self, lane_id: LaneId) {
        let Some(lane) = self.lanes.get(&lane_id) else {
            return;
        };
        if self.connecting.is_some()
            || self.retry_at.is_some_and(|at| Instant::now() < at)
            || !lane.queue.setup_done()
        {
            return;
        }
        if self.hold.is_none() {
            // A budget with no room for this thread's connection: its sends take the runtime's
            // path meanwhile.
            self.hold = lane.wire.hold_connection();
            if self.hold.is_none() {
                self.retry_at = Some(Instant::now() + RETRY_AFTER);
                return;
            }
        }
        self.retry_at = None;
        let slot: Connecting = Arc::default();
        self.connecting = Some(slot.clone());
        let connect = lane.wire.connect();
        napi::bindgen_prelude::spawn(async move {
            let result = connect.await;
            *slot.locked() = Some(result);
        });
    }

    /// Writes a lane's waiting sends as its next batch (at most `MAX_FLIGHTS` of it in
    /// flight).
    fn write_next(&mut self, lane_id: LaneId) {
        let (Some(conn), Some(lane)) = (&mut self.conn, self.lanes.get_mut(&lane_id)) else {
            return;
        };
        if lane.in_flight >= MAX_FLIGHTS || lane.waiting.is_empty() {
            return;
        }
        let (messages, seqs) = lane.take_batch();
        let Encoded {
            request,
            resend,
            stored,
        } = lane.wire.encode(messages);
        lane.in_flight += 1;
        conn.unsent.extend_from_slice(&request);
        conn.flights.push_back(Flight {
            lane: lane_id,
            seqs,
            resend,
            stored,
            started: Instant::now(),
        });
        // The timer watches the oldest batch; `time_out` moves it on to the next one.
        if conn.flights.len() == 1 {
            if let Some(timer) = &self.timer {
                timer.start(
                    lane.queue.send_bound().as_millis() as u64 + 1,
                    self.on_timer,
                );
            }
        }
        self.flush_unsent();
    }

    pub(super) fn flush_unsent(&mut self) {
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
            if !conn.poll.start(events, self.on_poll) {
                self.fail();
            }
        }
    }

    /// Reads what arrived; false when the connection ended or failed.
    fn receive(conn: &mut Conn) -> bool {
        let chunk = &mut conn.read_chunk;
        loop {
            match conn.socket.read(chunk) {
                Ok(0) => return false,
                Ok(read) => {
                    conn.received.extend_from_slice(&chunk[..read]);
                    // A short read drained the socket (the poll is level-triggered: anything
                    // that arrives meanwhile calls back again), so no read to see WouldBlock.
                    if read < chunk.len() {
                        return true;
                    }
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => return true,
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(_) => return false,
            }
        }
    }

    pub(super) fn read_replies(&mut self) {
        let Some(conn) = &mut self.conn else { return };
        let mut ended = !Self::receive(conn);
        let mut answered = Vec::new();
        while let Some(flight) = conn.flights.front() {
            let Some(lane) = self.lanes.get(&flight.lane) else {
                // A lane leaves only with nothing in flight: this cannot be, and the bytes
                // that follow could not be told apart.
                ended = true;
                break;
            };
            match lane.wire.read_reply(&conn.received, flight.seqs.len()) {
                Ok(Some((outcome, used))) => {
                    conn.received.drain(..used);
                    if let Some(flight) = conn.flights.pop_front() {
                        answered.push((flight, outcome));
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
        let mut answered_lanes = Vec::with_capacity(answered.len());
        for (flight, outcome) in answered {
            let Some(lane) = self.lanes.get_mut(&flight.lane) else {
                continue;
            };
            lane.in_flight = lane.in_flight.saturating_sub(1);
            match outcome {
                BatchReply::Answered(answers) => {
                    // The transaction ran: it is never sent again.
                    (flight.stored)();
                    lane.settle(flight.seqs, answers);
                }
                BatchReply::Failed(err) => {
                    let count = flight.seqs.len();
                    lane.settle(flight.seqs, vec![Err(err); count]);
                }
            }
            if !answered_lanes.contains(&flight.lane) {
                answered_lanes.push(flight.lane);
            }
            self.touch(flight.lane);
        }
        if ended {
            // Bytes the server sent for no batch, or the connection's end.
            self.fail();
        } else {
            // The sends that piled up behind each reply go as their lane's next batch.
            for lane in answered_lanes {
                self.write_next(lane);
            }
        }
    }
}
