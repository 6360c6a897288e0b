//! What a shared send connection gives back: a batch unanswered within the send bound fails
//! with its outcome unknown, with every batch behind it on the connection; on a failed
//! connection the batches in flight go to their queues' runtime paths as the same batches,
//! then each queue's waiting sends; at the environment's teardown everything ends here,
//! with no runtime to turn to.

use super::send_lane::{Flight, LaneId};
use super::send_state::{Link, RETRY_AFTER};
use std::collections::HashMap;
use std::time::Instant;

impl Link {
    /// The oldest batch got no reply within its queue's send bound: it and every batch
    /// behind it fail with the outcome unknown (the server may still run them), the
    /// connection is given up.
    pub(super) fn time_out(&mut self) {
        let Some(conn) = &mut self.conn else { return };
        let Some(front) = conn.flights.front() else {
            return;
        };
        let Some(bound) = self.lanes.get(&front.lane).map(|l| l.queue.send_bound()) else {
            return self.fail();
        };
        if front.started.elapsed() < bound {
            if let Some(timer) = &self.timer {
                let left = bound.saturating_sub(front.started.elapsed());
                timer.start(left.as_millis() as u64 + 1, self.on_timer);
            }
            return;
        }
        let flights: Vec<Flight> = conn.flights.drain(..).collect();
        for flight in flights {
            if let Some(lane) = self.lanes.get_mut(&flight.lane) {
                lane.in_flight = lane.in_flight.saturating_sub(1);
                let unanswered = vec![Err(lane.queue.unanswered_send()); flight.seqs.len()];
                lane.settle(flight.seqs, unanswered);
            }
        }
        self.fail();
    }

    /// Gives the connection up. Each queue's batches still in flight are sent again on its
    /// runtime path as the same batches, in order, then its waiting sends; the connection is
    /// opened again later.
    pub(super) fn fail(&mut self) {
        if let Some(timer) = &self.timer {
            timer.stop();
        }
        let mut by_lane: HashMap<LaneId, Vec<Flight>> = HashMap::new();
        if let Some(mut conn) = self.conn.take() {
            conn.poll.close();
            for flight in conn.flights.drain(..) {
                by_lane.entry(flight.lane).or_default().push(flight);
            }
        }
        // Another thread may take the place until this link connects again.
        self.hold = None;
        if !self.torn_down {
            self.retry_at = Some(Instant::now() + RETRY_AFTER);
        }
        self.touch_all();
        for (id, lane) in self.lanes.iter_mut() {
            lane.in_flight = 0;
            lane.hand_over(by_lane.remove(id).unwrap_or_default());
        }
    }

    /// Ends the link for good with no runtime to turn to (see `sends::on_env_teardown`):
    /// the handles closed, and every batch in flight and every waiting send failed here,
    /// seen in its queue's last error only (no JavaScript is left to settle them for).
    pub(super) fn end_here(&mut self) {
        self.torn_down = true;
        let mut in_flight: HashMap<LaneId, usize> = HashMap::new();
        for flight in self.conn.iter().flat_map(|conn| &conn.flights) {
            *in_flight.entry(flight.lane).or_default() += flight.seqs.len();
        }
        self.close_handles();
        for (id, lane) in self.lanes.iter_mut() {
            lane.end_here(in_flight.remove(id).unwrap_or_default());
        }
    }

    /// Closes the handles of a link no lane uses any more.
    pub(super) fn close_handles(&mut self) {
        if let Some(mut timer) = self.timer.take() {
            timer.close();
        }
        if let Some(mut conn) = self.conn.take() {
            conn.poll.close();
        }
        self.hold = None;
    }
}
