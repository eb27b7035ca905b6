//! Memory given back after a burst of connections. glibc keeps the memory
//! a burst's connections freed (TLS state, buffers) in its heaps, between
//! chunks still in use, so the process's resident size stays at the
//! burst's peak: measured 19 MB at start, 59 MB after 1,000 concurrent TLS
//! connections had come and gone, 26 MB after `malloc_trim(0)`
//! (docs/RELIABILITY.md, Soak). Like Envoy's periodic release of tcmalloc's
//! free memory, the gateway trims once a burst has passed: when the open
//! connections fell to half of their peak since the last trim (a peak of
//! at least [`MIN_PEAK`]). The decision is [`BurstWatch`]; the trim itself
//! is glibc's (a no-op elsewhere).

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use super::Shared;

/// How often the open connections are looked at.
const EVERY: Duration = Duration::from_secs(5);
/// Bursts smaller than this are not worth a trim.
pub(super) const MIN_PEAK: usize = 256;

/// Tracks the peak of open connections since the last trim.
#[derive(Debug, Default)]
pub(super) struct BurstWatch {
    peak: usize,
}

impl BurstWatch {
    /// With `open` connections now and at most `peak` at once since the
    /// last look: whether to trim (a burst of at least [`MIN_PEAK`] fell to
    /// half); the peak restarts after a trim.
    pub(super) fn observe(&mut self, open: usize, peak: usize) -> bool {
        self.peak = self.peak.max(open).max(peak);
        if self.peak >= MIN_PEAK && open <= self.peak / 2 {
            self.peak = open;
            return true;
        }
        false
    }
}

/// Looks at the open connections and their peak since the last look
/// (kept by the accept path) every [`EVERY`] until the gateway stops.
pub(super) async fn run(shared: Arc<Shared>) {
    let mut watch = BurstWatch::default();
    let mut stop = shared.shutdown.subscribe();
    loop {
        tokio::select! {
            _ = stop.wait_for(|s| *s) => return,
            () = tokio::time::sleep(EVERY) => {}
        }
        let open = shared.active.load(Ordering::Relaxed);
        let peak = shared.peak_active.swap(open, Ordering::Relaxed);
        if watch.observe(open, peak) {
            let released = crate::sys::release_free_memory();
            tracing::debug!(
                "{open} connections open after a burst: free memory released ({released})"
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trims_once_a_burst_has_passed() {
        let mut w = BurstWatch::default();
        let mut look = |open: usize| w.observe(open, open);
        // Small loads never trim.
        assert!(![10, 100, 5, 0].into_iter().any(&mut look));
        // A burst of 1,000: no trim while it lasts, one when it halved.
        assert!(!look(1000));
        assert!(!look(700));
        assert!(look(400));
        // The burst's tail (400 still open at the trim) gives back more
        // once it halved too; then nothing until another burst.
        assert!(!look(300));
        assert!(look(0));
        assert!(![0, 100, 0].into_iter().any(&mut look));
        assert!(!look(600));
        assert!(look(200));
    }

    #[test]
    fn a_burst_between_two_looks_is_seen_by_its_peak() {
        let mut w = BurstWatch::default();
        assert!(!w.observe(0, 0));
        // 1,000 connections came and went between two looks.
        assert!(w.observe(0, 1000));
        assert!(!w.observe(0, 0));
    }
}
