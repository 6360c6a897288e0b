//! What the catalog said of each table of one server, kept so that it is asked once per table
//! (a poll or a send that needs a table's column facts reads them here after the first time).

use crate::support::locks::Locked;
use std::collections::HashMap;
use std::sync::Mutex;

/// One fact per table name, remembered until forgotten.
pub struct PerTable<T> {
    known: Mutex<HashMap<String, T>>,
}

impl<T> Default for PerTable<T> {
    fn default() -> Self {
        Self {
            known: Mutex::new(HashMap::new()),
        }
    }
}

impl<T: Clone> PerTable<T> {
    /// What is remembered of `table`, if anything.
    pub fn known(&self, table: &str) -> Option<T> {
        self.lock().get(table).cloned()
    }

    pub fn remember(&self, table: &str, fact: T) {
        self.lock().insert(table.to_owned(), fact);
    }

    /// Forgets `table` (it may have been recreated since): the catalog is asked again.
    pub fn forget(&self, table: &str) {
        self.lock().remove(table);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, T>> {
        self.known.locked()
    }
}
