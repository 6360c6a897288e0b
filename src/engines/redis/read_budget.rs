//! A single-node deployment's connection budget (`maxConnections`, per process and DSN): the
//! command connection, the read its idle consumers share and one JavaScript thread's send
//! connection are always there; what is left goes to the consumers' own blocking reads, the
//! fastest wake-up (the read returns the entry itself), and to the send connections of other
//! threads (worker threads that send). Past those, idle consumers share the one read and
//! other threads' sends take the command connection, so that connections stay the same for
//! 200 queues as for 5, and for a worker pool as for one thread.

use crate::support::error::{Error, Result};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

/// The command connection, the shared read and the send connection.
pub const FIXED_CONNECTIONS: u32 = 3;
/// Connections a process opens to one node when no transport says (`maxConnections`): the
/// fixed ones and four consumers' own reads.
pub const DEFAULT_MAX_CONNECTIONS: u32 = FIXED_CONNECTIONS + 4;

/// The own reads a deployment allows, and how many of them its consumers hold.
#[derive(Debug)]
pub struct ReadBudget {
    pub max_connections: u32,
    own_reads: usize,
    held: Arc<AtomicUsize>,
    /// The fixed send connection's place is taken (by whichever thread connects first while
    /// it is free); other threads' send connections take own reads' places.
    fixed_send: Arc<AtomicBool>,
}

/// One thread's send connection's place, held while its link keeps a connection.
#[derive(Debug)]
pub enum SendSlot {
    Fixed(Arc<AtomicBool>),
    /// Held, not read: dropping it gives the place back.
    OwnRead {
        _slot: ReadSlot,
    },
}

impl Drop for SendSlot {
    fn drop(&mut self) {
        if let SendSlot::Fixed(taken) = self {
            taken.store(false, Ordering::Release);
        }
    }
}

/// One consumer's own read, counted while it is kept (whether or not its connection is open
/// at the moment: the count bounds the connections).
#[derive(Debug)]
pub struct ReadSlot(Arc<AtomicUsize>);

impl Drop for ReadSlot {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

impl ReadBudget {
    /// The budget `max_connections` asks for (the default if `None`); one too small to hold
    /// the fixed connections is refused.
    pub fn new(max_connections: Option<u32>) -> Result<Self> {
        let max_connections = max_connections.unwrap_or(DEFAULT_MAX_CONNECTIONS);
        let Some(own_reads) = max_connections.checked_sub(FIXED_CONNECTIONS) else {
            return Err(Error::invalid_argument(format!(
                "maxConnections must be at least {FIXED_CONNECTIONS} on a Redis node: the command \
                 connection, the read idle consumers share and the send connection; got \
                 {max_connections}."
            )));
        };
        Ok(Self {
            max_connections,
            own_reads: own_reads as usize,
            held: Arc::default(),
            fixed_send: Arc::default(),
        })
    }

    /// How many consumers may block on reads of their own.
    pub fn own_reads(&self) -> usize {
        self.own_reads
    }

    /// A slot for one more own read, if the budget has one left.
    pub fn reserve(&self) -> Option<ReadSlot> {
        self.held
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |held| {
                (held < self.own_reads).then_some(held + 1)
            })
            .ok()
            .map(|_| ReadSlot(self.held.clone()))
    }

    /// A place for one more thread's send connection: the fixed one if it is free, else an
    /// own read's, if the budget has one left.
    pub fn reserve_send(&self) -> Option<SendSlot> {
        let free = self
            .fixed_send
            .compare_exchange(false, true, Ordering::AcqRel, Ordering::Acquire)
            .is_ok();
        if free {
            return Some(SendSlot::Fixed(self.fixed_send.clone()));
        }
        self.reserve().map(|slot| SendSlot::OwnRead { _slot: slot })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_keeps_four_own_reads() {
        let budget = ReadBudget::new(None).expect("the default fits");
        assert_eq!(budget.max_connections, 7);
        let slots: Vec<_> = (0..4).filter_map(|_| budget.reserve()).collect();
        assert_eq!(slots.len(), 4);
        assert!(budget.reserve().is_none());
        drop(slots);
        assert!(budget.reserve().is_some());
    }

    #[test]
    fn a_second_thread_sends_on_an_own_read_place() {
        let budget = ReadBudget::new(Some(4)).expect("four fit");
        let first = budget.reserve_send().expect("the fixed send connection");
        let second = budget.reserve_send().expect("the one own read's place");
        assert!(budget.reserve().is_none());
        assert!(budget.reserve_send().is_none());
        drop(second);
        let read = budget.reserve().expect("the place is back");
        assert!(budget.reserve_send().is_none());
        drop(read);
        // The fixed place passes to the next thread once its holder lets go, whoever else
        // holds a place meanwhile.
        let third = budget.reserve_send().expect("the own read's place again");
        drop(first);
        let fourth = budget.reserve_send().expect("the fixed place, free again");
        assert!(matches!(fourth, SendSlot::Fixed(_)));
        drop((third, fourth));
    }

    #[test]
    fn the_smallest_budget_has_no_own_read_and_less_is_refused() {
        let budget = ReadBudget::new(Some(3)).expect("three fit");
        assert!(budget.reserve().is_none());
        let err = ReadBudget::new(Some(2)).expect_err("two cannot hold the fixed connections");
        assert!(err.to_string().contains("at least 3"), "{err}");
    }
}
