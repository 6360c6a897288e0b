//! Messages handed by a send straight to an idle consumer of the same queue in this process.
//! Where the engine can store a message already claimed (its `INSERT` stamps the claim), a
//! send that finds a consumer waiting stores its messages claimed for that consumer and gives
//! them to it: the wake-up then costs the send's own commit, not a second one for a claim.
//!
//! Invariant: whatever is given is either received by the consumer or comes back to the
//! sender (who releases it). A consumer closes its ticket before it lets go of it, so what was
//! given while its wait was ending is still read, never dropped with the ticket.
//!
//! Generic over what is handed (an engine's claimed messages), so that it depends on nothing.

use crate::support::locks::Locked;
use std::sync::Mutex;
use tokio::sync::oneshot;

/// The idle consumers of one queue in this process that take what is handed to them.
pub struct HandOffDesk<T> {
    waiting: Mutex<Vec<oneshot::Sender<T>>>,
}

/// A consumer's place at the desk while it waits.
pub struct Ticket<T>(oneshot::Receiver<T>);

/// A waiting consumer a sender took from the desk: it gives it something once, or nothing.
pub struct Taker<T>(oneshot::Sender<T>);

impl<T> Default for HandOffDesk<T> {
    fn default() -> Self {
        Self {
            waiting: Mutex::default(),
        }
    }
}

impl<T> HandOffDesk<T> {
    /// Puts a waiting consumer at the desk (and drops the places of those that left).
    pub fn wait_here(&self) -> Ticket<T> {
        let (give, receive) = oneshot::channel();
        let mut waiting = self.waiting.locked();
        waiting.retain(|place| !place.is_closed());
        waiting.push(give);
        Ticket(receive)
    }

    /// The consumer that has waited longest and is still waiting, taken off the desk.
    pub fn take(&self) -> Option<Taker<T>> {
        let mut waiting = self.waiting.locked();
        while !waiting.is_empty() {
            let place = waiting.remove(0);
            if !place.is_closed() {
                return Some(Taker(place));
            }
        }
        None
    }
}

impl<T> Taker<T> {
    /// Gives `handed` to the consumer; it comes back if the consumer stopped waiting meanwhile.
    pub fn give(self, handed: T) -> Result<(), T> {
        self.0.send(handed)
    }
}

impl<T> Ticket<T> {
    /// What was handed over; `None` once the sender gave up on this consumer (it stored
    /// nothing claimed for it) and the wait goes on without the desk.
    pub async fn handed(&mut self) -> Option<T> {
        (&mut self.0).await.ok()
    }

    /// Leaves the desk: no sender can give from here on, and what one gave before is returned.
    pub fn leave(mut self) -> Option<T> {
        self.0.close();
        self.0.try_recv().ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn message(id: &str) -> String {
        id.to_owned()
    }

    #[tokio::test]
    async fn a_waiting_consumer_receives_what_is_given() {
        let desk = HandOffDesk::default();
        let mut ticket = desk.wait_here();
        let taker = desk.take().expect("a consumer waits");
        assert!(taker.give(message("1")).is_ok());
        assert_eq!(ticket.handed().await, Some(message("1")));
        assert!(desk.take().is_none());
    }

    #[test]
    fn leaving_returns_what_was_given_and_refuses_the_rest() {
        let desk = HandOffDesk::default();
        let ticket = desk.wait_here();
        let early = desk.take().expect("a consumer waits");
        assert!(early.give(message("1")).is_ok());
        assert_eq!(ticket.leave(), Some(message("1")));

        let ticket = desk.wait_here();
        let late = desk.take().expect("a consumer waits");
        assert!(ticket.leave().is_none());
        assert_eq!(late.give(message("2")), Err(message("2")));
    }

    #[test]
    fn consumers_that_left_are_not_taken() {
        let desk = HandOffDesk::default();
        let first = desk.wait_here();
        let second = desk.wait_here();
        assert!(first.leave().is_none());
        let taker = desk.take().expect("the second still waits");
        assert!(taker.give(message("2")).is_ok());
        assert_eq!(second.leave(), Some(message("2")));
        assert!(desk.take().is_none());
    }
}
