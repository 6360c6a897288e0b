//! The autoSetup memo of a queue: its DDL (table, stream, group) runs before the first
//! operation that needs it, once, and again after an operation finds it gone.

use crate::queue::engine::Engine;
use crate::support::error::{Error, ErrorKind, Result};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// The autoSetup memo: the DDL runs once, only a success is remembered, and a table that
/// vanished under a live instance (a NotFound error) is re-created by the next operation.
pub(super) struct SetupGate {
    engine: Arc<dyn Engine>,
    auto: bool,
    done: AtomicBool,
    lock: tokio::sync::Mutex<()>,
}

impl SetupGate {
    pub(super) fn new(engine: Arc<dyn Engine>, auto: bool) -> Self {
        Self {
            engine,
            auto,
            done: AtomicBool::new(false),
            lock: tokio::sync::Mutex::new(()),
        }
    }

    /// Whether the DDL runs on first use (`autoSetup`), and so again after a vanished table.
    pub(super) fn is_auto(&self) -> bool {
        self.auto
    }

    /// Whether the DDL has run (and nothing since found its table gone).
    pub(super) fn is_done(&self) -> bool {
        self.done.load(Ordering::Acquire)
    }

    /// Runs the DDL now, whatever was memoized.
    pub(super) async fn run(&self) -> Result<()> {
        let _guard = self.lock.lock().await;
        self.engine.setup().await?;
        self.done.store(true, Ordering::Release);
        Ok(())
    }

    pub(super) async fn ensure(&self) -> Result<()> {
        if !self.auto || self.done.load(Ordering::Acquire) {
            return Ok(());
        }
        let _guard = self.lock.lock().await;
        if !self.done.load(Ordering::Acquire) {
            self.observe(self.engine.setup().await)?;
            self.done.store(true, Ordering::Release);
        }
        Ok(())
    }

    pub(super) fn observe<T>(&self, result: Result<T>) -> Result<T> {
        if let Err(err) = &result {
            self.note(err);
        }
        result
    }

    /// A failure that says the table (stream, group) is gone: the next operation sets up again.
    pub(super) fn note(&self, err: &Error) {
        if err.kind == ErrorKind::NotFound {
            self.done.store(false, Ordering::Release);
        }
    }

    /// `op` after the memoized setup, watching its result for a vanished table.
    pub(super) async fn around<T>(
        &self,
        op: impl std::future::Future<Output = Result<T>>,
    ) -> Result<T> {
        self.ensure().await?;
        self.observe(op.await)
    }
}
