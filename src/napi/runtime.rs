//! The tokio runtime the addon runs its I/O on. One worker by default: the JavaScript side
//! is one thread, and every wake-up of a second, parked worker is a context switch that buys
//! no throughput for a process whose sends and claims come from one thread.

/// The variable that overrides the number of worker threads (a positive integer).
pub const WORKER_THREADS_VAR: &str = "NESTJS_MESSENGER_NATIVE_WORKER_THREADS";

const DEFAULT_WORKER_THREADS: usize = 1;

/// The worker count `value` (the variable's content, if set) asks for; anything but a
/// positive integer leaves the default.
pub fn worker_threads(value: Option<&str>) -> usize {
    value
        .and_then(|v| v.trim().parse::<usize>().ok())
        .filter(|&n| n > 0)
        .unwrap_or(DEFAULT_WORKER_THREADS)
}

/// Builds the runtime napi-rs will spawn the addon's futures on.
pub fn build() -> std::io::Result<tokio::runtime::Runtime> {
    let threads = worker_threads(std::env::var(WORKER_THREADS_VAR).ok().as_deref());
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(threads)
        .thread_name("messenger-io")
        .enable_all()
        .build()
}

#[cfg(test)]
mod tests {
    use super::worker_threads;

    #[test]
    fn only_a_positive_integer_overrides_the_default() {
        assert_eq!(worker_threads(None), 1);
        assert_eq!(worker_threads(Some("4")), 4);
        assert_eq!(worker_threads(Some(" 2 ")), 2);
        assert_eq!(worker_threads(Some("0")), 1);
        assert_eq!(worker_threads(Some("-3")), 1);
        assert_eq!(worker_threads(Some("many")), 1);
    }
}
