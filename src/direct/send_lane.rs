//! One queue's side of a shared send connection (see `send_state::Link`): its sends waiting
//! behind a batch of its own in flight, where its settles go, and how its sends reach the
//! runtime's path when the connection cannot serve them.

use super::settle_report::{LoopReport, Ready, Report, ToRuntime};
use crate::queue::completions::Settled;
use crate::queue::engine::{DirectWire, NewMessage, Resend};
use crate::queue::send_order::Hold;
use crate::queue::Queue;
use crate::support::error::{Error, Outcome, Result};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Instant;

pub(super) type LaneId = u64;

/// A batch written on a link's connection, not answered yet, and whose it is.
pub(super) struct Flight {
    pub(super) lane: LaneId,
    pub(super) seqs: Vec<u32>,
    pub(super) resend: Resend,
    /// What follows the batch's answer as stored (see `Encoded::stored`).
    pub(super) stored: Box<dyn FnOnce() + Send>,
    pub(super) started: Instant,
}

pub(super) struct Lane {
    pub(super) wire: Arc<dyn DirectWire>,
    pub(super) queue: Arc<Queue>,
    pub(super) report: Report,
    pub(super) report_here: Option<LoopReport>,
    /// Settles made since the last report: reported once the state is no longer borrowed.
    pub(super) ready: Vec<Settled<String>>,
    pub(super) to_runtime: ToRuntime,
    /// Sends of this queue on the runtime's path not settled yet.
    pub(super) on_runtime_path: Arc<AtomicUsize>,
    pub(super) waiting: Vec<(NewMessage, u32)>,
    /// The bytes of `waiting`, kept as it changes: the backlog check runs on every send.
    pub(super) waiting_bytes: usize,
    /// Batches of this lane written on the connection and not answered yet.
    pub(super) in_flight: usize,
    /// Shut: no more sends; the batches in flight still settle here.
    pub(super) closed: bool,
    /// Its `DirectSends` is gone: the lane leaves once nothing of it is in flight.
    pub(super) detached: bool,
    /// Held from `shut` while batches of the lane are in flight: the queue's sends on the
    /// runtime's path wait for them.
    hold: Option<Hold>,
}

impl Lane {
    pub(super) fn new(
        wire: Arc<dyn DirectWire>,
        queue: Arc<Queue>,
        reports: (Report, Option<LoopReport>),
        to_runtime: ToRuntime,
        on_runtime_path: Arc<AtomicUsize>,
    ) -> Self {
        Self {
            wire,
            queue,
            report: reports.0,
            report_here: reports.1,
            ready: Vec::new(),
            to_runtime,
            on_runtime_path,
            waiting: Vec::new(),
            waiting_bytes: 0,
            in_flight: 0,
            closed: false,
            detached: false,
            hold: None,
        }
    }

    /// No more sends on the connection from this queue: the sends waiting here (never
    /// written) join the runtime's path now, while the queue still takes sends, and wait there,
    /// as every later send does, for the batches in flight, which still settle here.
    pub(super) fn shut(&mut self) {
        if self.closed {
            return;
        }
        self.closed = true;
        if self.in_flight > 0 {
            self.hold = Some(self.queue.hold_sends());
        }
        let waiting = self.take_waiting();
        self.queue_on_runtime(waiting);
    }

    /// Lets the runtime's sends go once nothing of this lane is in flight.
    fn release_if_done(&mut self) {
        if self.in_flight == 0 && self.waiting.is_empty() {
            self.hold = None;
        }
    }

    /// Whether the lane can leave its link: nothing of it left to answer or report.
    pub(super) fn finished(&self) -> bool {
        self.detached && self.in_flight == 0 && self.waiting.is_empty() && self.ready.is_empty()
    }

    /// The settles made since the last report, and where they go.
    pub(super) fn take_ready(&mut self) -> Option<Ready> {
        self.release_if_done();
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
        self.release_if_done();
        if !self.ready.is_empty() {
            (self.report)(std::mem::take(&mut self.ready));
        }
    }

    /// Refuses a send at once when the sends waiting here already fill the queue's backlog
    /// (a batch in flight got no reply yet, and sends keep coming).
    pub(super) fn check_backlog(&self, message: &NewMessage) -> Result<()> {
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

    pub(super) fn push_waiting(&mut self, message: NewMessage, seq: u32) {
        self.waiting_bytes = self.waiting_bytes.saturating_add(weight(&message));
        self.waiting.push((message, seq));
    }

    /// Up to a batch's worth of the waiting sends, oldest first.
    pub(super) fn take_batch(&mut self) -> (Vec<NewMessage>, Vec<u32>) {
        let take = crate::queue::limits::SEND_BOUND.take(&self.waiting);
        let (messages, seqs): (Vec<NewMessage>, Vec<u32>) = self.waiting.drain(..take).unzip();
        let taken_bytes = messages.iter().map(weight).fold(0, usize::saturating_add);
        self.waiting_bytes = self.waiting_bytes.saturating_sub(taken_bytes);
        (messages, seqs)
    }

    /// Every waiting send, leaving none.
    pub(super) fn take_waiting(&mut self) -> Vec<(NewMessage, u32)> {
        self.waiting_bytes = 0;
        std::mem::take(&mut self.waiting)
    }

    /// Reports each send of a batch with its own answer (`answers` in the order of `seqs`).
    pub(super) fn settle(&mut self, seqs: Vec<u32>, answers: Vec<Result<String>>) {
        self.ready.extend(settled(&self.queue, seqs, answers));
    }

    /// Sends `flights` again on the runtime, as the same batches; the waiting sends (never
    /// written) join the runtime's path, in order.
    pub(super) fn hand_over(&mut self, flights: Vec<Flight>) {
        let waiting = self.take_waiting();
        // The resends first: the runtime's sends queued from now on wait for them (a hold).
        if !flights.is_empty() {
            self.resend(flights);
        }
        self.queue_on_runtime(waiting);
    }

    fn queue_on_runtime(&mut self, sends: Vec<(NewMessage, u32)>) {
        for (message, seq) in sends {
            if let Err(err) = (self.to_runtime)(seq, message) {
                self.ready.push((seq, Err(err)));
            }
        }
    }

    fn resend(&mut self, flights: Vec<Flight>) {
        let runs: Vec<(Vec<u32>, Resend)> =
            flights.into_iter().map(|f| (f.seqs, f.resend)).collect();
        self.on_runtime_path.fetch_add(1, Ordering::AcqRel);
        // The lane's own hold (from `shut`) already holds every send queued since: it is
        // handed to the resends, which let go of it once done.
        let hold = self.hold.take().unwrap_or_else(|| self.queue.hold_sends());
        let (queue, report, on_runtime_path) = (
            self.queue.clone(),
            self.report.clone(),
            self.on_runtime_path.clone(),
        );
        napi::bindgen_prelude::spawn(async move {
            let bound = queue.send_bound();
            for (seqs, resend) in runs {
                let count = seqs.len();
                let answers = tokio::time::timeout(bound, resend())
                    .await
                    .unwrap_or_else(|_| vec![Err(queue.unanswered_send()); count]);
                report(settled(&queue, seqs, answers));
            }
            drop(hold);
            on_runtime_path.fetch_sub(1, Ordering::AcqRel);
        });
    }

    /// Fails every send of this lane here, with no runtime to turn to (the environment's
    /// teardown): seen in the queue's last error only. `in_flight_sends` are its sends on
    /// the connection.
    pub(super) fn end_here(&mut self, in_flight_sends: usize) {
        self.closed = true;
        self.in_flight = 0;
        let lost = self.take_waiting().len() + in_flight_sends;
        self.ready.clear();
        if lost > 0 {
            self.queue.note_send_failed(&Error::transport(format!(
                "{lost} send(s) were in flight when their JavaScript environment was torn down (they may have been stored)."
            )).with_outcome(Outcome::Unknown));
        }
    }
}

pub(super) fn weight(message: &NewMessage) -> usize {
    message.body.len() + message.headers.len()
}

/// Each send of a batch with its own answer, counted in the queue's figures; a batch answered
/// with another number of answers than it had sends is answered as unknown.
fn settled(
    queue: &Queue,
    seqs: Vec<u32>,
    mut answers: Vec<Result<String>>,
) -> Vec<(u32, Result<String>)> {
    if answers.len() != seqs.len() {
        let err = Error::transport(format!(
            "internal error: a batch of {} got {} answers",
            seqs.len(),
            answers.len()
        ))
        .with_outcome(Outcome::Unknown);
        answers = vec![Err(err); seqs.len()];
    }
    let stored = answers.iter().filter(|a| a.is_ok()).count();
    if stored > 0 {
        queue.note_sent(stored);
    }
    if let Some(Err(err)) = answers.iter().find(|a| a.is_err()) {
        queue.note_send_failed(err);
    }
    seqs.into_iter().zip(answers).collect()
}
