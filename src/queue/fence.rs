//! Fenced settles: the token of every claim this process holds, attached to the acks,
//! rejects, releases and renewals that name the message, and the count of settles that came
//! too late (the message's claim had lapsed and another consumer took it over).
//!
//! A renewal changes the tokens it renews. Settles and renewals are therefore ordered by one
//! gate: settles share it, a renewal holds it alone, so a settle always carries the token the
//! database holds, never one a renewal in flight is replacing. A renewal whose answer was lost
//! leaves its tokens unknown: those messages are settled by id (the unfenced behaviour)
//! rather than by a token that may be stale, which would turn their ack into a redelivery.
//!
//! A renewal that finds a claim taken over by another consumer marks it lost: its token is
//! dropped, and a settle that comes for it later is counted stale without a write. Lost claims
//! whose settle never comes (the message was still buffered) are forgotten oldest first, so
//! neither map grows with what was lost or given up.

use crate::queue::engine::{ClaimToken, Engine, Held, NewMessage, StoredMessage};
use crate::support::error::Result;
use crate::support::locks::Locked;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

/// Most claims taken over by other consumers that are remembered. The queue drops such a
/// message; if its handler was running, the handler's settle comes later and must be found
/// stale. One that was still buffered is never settled: the oldest are forgotten past this,
/// many renewal rounds later than any handler's settle normally comes.
const LOST_MEMORY: usize = 4 * crate::queue::limits::MAX_CLAIM_BATCH as usize;

/// What the fence knows of one id.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Claim {
    /// Held by this process (`None`: token unknown, settled by id), or never claimed here.
    Held(Option<ClaimToken>),
    /// Taken over by another consumer: a settle now is stale, and writes nothing.
    Lost,
}

/// The claims of this process and those it lost, without I/O.
#[derive(Default)]
struct Book {
    /// Claimed messages not settled, released or lost yet.
    tokens: HashMap<String, Option<ClaimToken>>,
    /// Lost claims by the order they were lost in (oldest first), and each one's place in it.
    lost_order: BTreeMap<u64, String>,
    lost: HashMap<String, u64>,
    next_lost: u64,
}

impl Book {
    fn record(&mut self, id: &str, token: Option<ClaimToken>) {
        self.unlose(id);
        self.tokens.insert(id.to_owned(), token);
    }

    fn claim(&self, id: &str) -> Claim {
        if self.lost.contains_key(id) {
            Claim::Lost
        } else {
            Claim::Held(self.tokens.get(id).copied().flatten())
        }
    }

    /// Another consumer holds `id` now (only a claim still held here becomes lost).
    fn lose(&mut self, id: &str) {
        if self.tokens.remove(id).is_none() {
            return;
        }
        let place = self.next_lost;
        self.next_lost += 1;
        self.lost_order.insert(place, id.to_owned());
        self.lost.insert(id.to_owned(), place);
        while self.lost.len() > LOST_MEMORY {
            let Some((_, oldest)) = self.lost_order.pop_first() else {
                break;
            };
            self.lost.remove(&oldest);
        }
    }

    fn unlose(&mut self, id: &str) {
        if let Some(place) = self.lost.remove(id) {
            self.lost_order.remove(&place);
        }
    }

    fn forget(&mut self, id: &str) {
        self.tokens.remove(id);
        self.unlose(id);
    }

    fn set_token(&mut self, id: &str, token: Option<ClaimToken>) {
        if let Some(entry) = self.tokens.get_mut(id) {
            *entry = token;
        }
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.tokens.len() + self.lost.len()
    }
}

#[derive(Default)]
pub struct Fence {
    book: Mutex<Book>,
    gate: tokio::sync::RwLock<()>,
    stale: AtomicU64,
}

impl Fence {
    fn book(&self) -> std::sync::MutexGuard<'_, Book> {
        self.book.locked()
    }

    /// Notes the claims of freshly claimed messages.
    pub fn record(&self, rows: &[StoredMessage]) {
        let mut book = self.book();
        for row in rows {
            if row.token.is_some() {
                book.record(&row.id, row.token);
            }
        }
    }

    /// Claims held and not settled, released or lost yet.
    pub fn held_claims(&self) -> usize {
        self.book().tokens.len()
    }

    /// Settles that found the message no longer held by this process's claim, so far.
    pub fn stale_settles(&self) -> u64 {
        self.stale.load(Ordering::Relaxed)
    }

    /// `ids` with the tokens of the claims this process holds on them, and how many of them
    /// were lost to another consumer (left out: their settle is stale without a write).
    fn held(&self, ids: &[String]) -> (Vec<Held>, u64) {
        let book = self.book();
        let mut lost = 0;
        let held = ids
            .iter()
            .filter_map(|id| match book.claim(id) {
                Claim::Held(token) => Some(Held {
                    id: id.clone(),
                    token,
                }),
                Claim::Lost => {
                    lost += 1;
                    None
                }
            })
            .collect();
        (held, lost)
    }

    /// Forgets the claims on `ids` (settled without a write: they lapse at their lease).
    pub fn forget(&self, ids: &[String]) {
        let mut book = self.book();
        for id in ids {
            book.forget(id);
        }
    }

    /// Deletes (acks) `ids`, fenced by this process's claims.
    pub async fn delete(&self, engine: &dyn Engine, ids: Vec<String>) -> Result<()> {
        let _settling = self.gate.read().await;
        let (held, lost) = self.held(&ids);
        let stale = if held.is_empty() {
            0
        } else {
            engine.delete(held).await?
        };
        self.stale.fetch_add(stale + lost, Ordering::Relaxed);
        self.forget(&ids);
        Ok(())
    }

    /// Replaces `id` by `copy`, fenced by this process's claim on it.
    pub async fn redeliver(
        &self,
        engine: &dyn Engine,
        id: &str,
        copy: NewMessage,
    ) -> Result<Option<String>> {
        let _settling = self.gate.read().await;
        let ids = [id.to_owned()];
        let (mut held, lost) = self.held(&ids);
        let Some(held) = held.pop() else {
            self.stale.fetch_add(lost, Ordering::Relaxed);
            self.forget(&ids);
            return Ok(None);
        };
        let fenced = held.token.is_some();
        let copied = engine.redeliver(held, copy).await?;
        if copied.is_none() && fenced {
            self.stale.fetch_add(1, Ordering::Relaxed);
        }
        self.forget(&ids);
        Ok(copied)
    }

    /// Hands `ids` back for any consumer, fenced by this process's claims.
    pub async fn release(&self, engine: &dyn Engine, ids: Vec<String>) -> Result<()> {
        let _settling = self.gate.read().await;
        let (held, _) = self.held(&ids);
        let result = if held.is_empty() {
            Ok(())
        } else {
            engine.release(held).await
        };
        // Released or not, they are no longer this process's to settle or renew.
        self.forget(&ids);
        result
    }

    /// Renews the claims on `ids`; returns those that were not renewed because another
    /// consumer holds them now (or they were settled meanwhile). Those are lost: the queue
    /// drops them, and a settle that comes for one later is stale.
    pub async fn renew(&self, engine: &dyn Engine, ids: Vec<String>) -> Result<Vec<String>> {
        let _renewing = self.gate.write().await;
        let (held, _) = self.held(&ids);
        match engine.keep_claimed(held).await {
            Ok(renewed) => {
                let mut book = self.book();
                let mut kept = HashSet::with_capacity(renewed.len());
                for Held { id, token } in renewed {
                    book.set_token(&id, token);
                    kept.insert(id);
                }
                let lost: Vec<String> = ids.into_iter().filter(|id| !kept.contains(id)).collect();
                for id in &lost {
                    book.lose(id);
                }
                Ok(lost)
            }
            Err(err) => {
                // It may have been applied: the tokens it would have set are unknown.
                let mut book = self.book();
                for id in &ids {
                    book.set_token(id, None);
                }
                Err(err)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lost_claim_leaves_the_tokens_and_its_settle_is_stale() {
        let mut book = Book::default();
        book.record("1", Some(ClaimToken::DeliveredAt(10)));
        book.record("2", Some(ClaimToken::DeliveredAt(20)));
        book.lose("1");
        assert_eq!(book.claim("1"), Claim::Lost);
        assert_eq!(
            book.claim("2"),
            Claim::Held(Some(ClaimToken::DeliveredAt(20)))
        );
        assert!(!book.tokens.contains_key("1"));
        // Its handler's settle comes: forgotten for good.
        book.forget("1");
        assert_eq!(book.claim("1"), Claim::Held(None));
        assert_eq!(book.len(), 1);
    }

    #[test]
    fn only_a_held_claim_becomes_lost_and_a_new_claim_is_held_again() {
        let mut book = Book::default();
        // Settled meanwhile, then named lost by a renewal that started before the settle.
        book.lose("1");
        assert_eq!(book.claim("1"), Claim::Held(None));
        book.record("2", Some(ClaimToken::DeliveredAt(1)));
        book.lose("2");
        book.record("2", Some(ClaimToken::DeliveredAt(2)));
        assert_eq!(
            book.claim("2"),
            Claim::Held(Some(ClaimToken::DeliveredAt(2)))
        );
        assert_eq!((book.lost.len(), book.lost_order.len()), (0, 0));
    }

    #[test]
    fn lost_claims_that_are_never_settled_do_not_pile_up() {
        let mut book = Book::default();
        let total = LOST_MEMORY * 3;
        for n in 0..total {
            let id = n.to_string();
            book.record(&id, Some(ClaimToken::DeliveredAt(1)));
            book.lose(&id);
        }
        assert_eq!(book.len(), LOST_MEMORY);
        assert_eq!(book.lost_order.len(), LOST_MEMORY);
        // The newest are the ones remembered.
        assert_eq!(book.claim(&(total - 1).to_string()), Claim::Lost);
        assert_eq!(book.claim("0"), Claim::Held(None));
    }

    #[test]
    fn settled_and_given_up_claims_are_forgotten() {
        let mut book = Book::default();
        for n in 0..100 {
            book.record(&n.to_string(), Some(ClaimToken::DeliveredAt(n)));
        }
        for n in 0..100 {
            book.forget(&n.to_string());
        }
        assert_eq!(book.len(), 0);
    }
}
