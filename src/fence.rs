//! Fenced settles: the token of every claim this process holds, attached to the acks,
//! rejects, releases and renewals that name the message, and the count of settles that came
//! too late (the message's claim had lapsed and another consumer took it over).
//!
//! A renewal changes the tokens it renews. Settles and renewals are therefore ordered by one
//! gate: settles share it, a renewal holds it alone, so a settle always carries the token the
//! database holds, never one a renewal in flight is replacing. A renewal whose answer was lost
//! leaves its tokens unknown: those messages are settled by id (the unfenced behaviour)
//! rather than by a token that may be stale, which would turn their ack into a redelivery.

use crate::engine::{Engine, Held, NewMessage, StoredMessage};
use crate::error::Result;
use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

#[derive(Default)]
pub struct Fence {
    /// Claimed messages not settled or released yet; `None`: token unknown, settle by id.
    tokens: Mutex<HashMap<String, Option<i64>>>,
    gate: tokio::sync::RwLock<()>,
    stale: AtomicU64,
}

impl Fence {
    fn tokens(&self) -> std::sync::MutexGuard<'_, HashMap<String, Option<i64>>> {
        self.tokens.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Notes the claims of freshly claimed messages.
    pub fn record(&self, rows: &[StoredMessage]) {
        let mut tokens = self.tokens();
        for row in rows {
            if row.token.is_some() {
                tokens.insert(row.id.clone(), row.token);
            }
        }
    }

    /// Settles that found the message no longer held by this process's claim, so far.
    pub fn stale_settles(&self) -> u64 {
        self.stale.load(Ordering::Relaxed)
    }

    /// `ids` with the tokens of the claims this process holds on them.
    fn held(&self, ids: &[String]) -> Vec<Held> {
        let tokens = self.tokens();
        ids.iter()
            .map(|id| Held {
                id: id.clone(),
                token: tokens.get(id).copied().flatten(),
            })
            .collect()
    }

    /// Forgets the claims on `ids` (settled without a write: they lapse at their lease).
    pub fn forget(&self, ids: &[String]) {
        let mut tokens = self.tokens();
        for id in ids {
            tokens.remove(id);
        }
    }

    /// Deletes (acks) `ids`, fenced by this process's claims.
    pub async fn delete(&self, engine: &dyn Engine, ids: Vec<String>) -> Result<()> {
        let _settling = self.gate.read().await;
        let stale = engine.delete(self.held(&ids)).await?;
        self.stale.fetch_add(stale, Ordering::Relaxed);
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
        let Some(held) = self.held(&ids).pop() else {
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
        let result = engine.release(self.held(&ids)).await;
        // Released or not, they are no longer this process's to settle or renew.
        self.forget(&ids);
        result
    }

    /// Renews the claims on `ids`; returns those that were not renewed because another
    /// consumer holds them now (or they were settled meanwhile).
    pub async fn renew(&self, engine: &dyn Engine, ids: Vec<String>) -> Result<Vec<String>> {
        let _renewing = self.gate.write().await;
        let held = self.held(&ids);
        match engine.keep_claimed(held).await {
            Ok(renewed) => {
                let mut tokens = self.tokens();
                let mut kept = HashSet::with_capacity(renewed.len());
                for Held { id, token } in renewed {
                    if let Some(entry) = tokens.get_mut(&id) {
                        *entry = token;
                    }
                    kept.insert(id);
                }
                Ok(ids.into_iter().filter(|id| !kept.contains(id)).collect())
            }
            Err(err) => {
                // It may have been applied: the tokens it would have set are unknown.
                let mut tokens = self.tokens();
                for id in &ids {
                    if let Some(entry) = tokens.get_mut(id) {
                        *entry = None;
                    }
                }
                Err(err)
            }
        }
    }
}
