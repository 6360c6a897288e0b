//! What the direct path gives back: a batch unanswered within the send bound fails with its
//! outcome unknown; on a failed connection or at close the batches in flight go to the
//! runtime's path as the same batches, then the waiting sends; at the environment's teardown
//! everything ends here, with no runtime to turn to.

use super::send_state::{on_timer, Flight, Inner, RETRY_AFTER};
use crate::queue::engine::{NewMessage, Resend};
use crate::support::error::Error;
use std::sync::atomic::Ordering;
use std::time::Instant;

impl Inner {
    /// The oldest batch got no reply within the send bound: it fails with the outcome
    /// unknown (the server may still run it), the connection is given up.
    pub(super) fn time_out(&mut self) {
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
    pub(super) fn fail(&mut self) {
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
    pub(super) fn end_here(&mut self) {
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
    pub(super) fn take_waiting(&mut self) -> Vec<(NewMessage, u32)> {
        self.waiting_bytes = 0;
        std::mem::take(&mut self.waiting)
    }

    /// Sends `flights` again on the runtime, as the same batches; `waiting` (never written)
    /// joins the runtime's path, in order.
    pub(super) fn hand_over(&mut self, flights: Vec<Flight>, waiting: Vec<(NewMessage, u32)>) {
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

    pub(super) fn resend(&mut self, flights: Vec<Flight>) {
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
