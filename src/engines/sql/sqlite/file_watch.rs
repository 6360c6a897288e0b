//! Another process's commits to a database file, seen as they happen: a commit in WAL mode
//! writes the file's `-wal` (a checkpoint, the file itself), and the operating system tells
//! watchers of the directory (inotify, kqueue, ReadDirectoryChangesW). Each change moves the
//! target's `changed_elsewhere`, so the idle consumers' polls run at once instead of at their
//! next interval; this process's own commits move it too (a poll for nothing, while consumers
//! idle). Where no watch can be set up (a watch limit reached, an unsupported file system),
//! the polls keep their interval.

use crate::queue::wake::WakeSignal;
use notify::{EventKind, RecommendedWatcher, RecursiveMode, Watcher};
use std::ffi::OsString;
use std::path::Path;
use std::sync::Arc;

/// A watch of one database file; dropping it ends the watch.
pub struct FileWatch {
    _watcher: RecommendedWatcher,
}

/// Watches `path` (absolute) and its `-wal` for changes, moving `changed` at each; `None`
/// where the platform cannot watch it.
pub fn watch(path: &Path, changed: Arc<WakeSignal>) -> Option<FileWatch> {
    let directory = path.parent()?;
    let name = path.file_name()?.to_owned();
    let mut wal = name.clone();
    wal.push("-wal");
    let names: [OsString; 2] = [name, wal];
    let mut watcher = notify::recommended_watcher(move |event: notify::Result<notify::Event>| {
        let Ok(event) = event else {
            return;
        };
        let written = matches!(event.kind, EventKind::Modify(_) | EventKind::Create(_));
        let ours = event
            .paths
            .iter()
            .any(|p| p.file_name().is_some_and(|n| names.iter().any(|w| w == n)));
        if written && ours {
            changed.wake();
        }
    })
    .ok()?;
    watcher.watch(directory, RecursiveMode::NonRecursive).ok()?;
    Some(FileWatch { _watcher: watcher })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test]
    async fn a_write_to_the_file_or_its_wal_moves_the_signal_and_others_do_not() {
        let dir = std::env::temp_dir().join(format!("nmn-watch-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let db = dir.join("queue.db");
        std::fs::write(&db, b"").expect("db file");
        let changed = Arc::new(WakeSignal::default());
        let _watch = watch(&db, changed.clone()).expect("a watch on a local directory");

        let seen = changed.seq();
        std::fs::write(dir.join("other.db"), b"x").expect("another file");
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert_eq!(changed.seq(), seen, "another file's write is not ours");

        std::fs::write(dir.join("queue.db-wal"), b"commit").expect("wal");
        tokio::time::timeout(Duration::from_secs(2), changed.changed(seen))
            .await
            .expect("the WAL's write is seen");
        std::fs::remove_dir_all(&dir).ok();
    }
}
