//! Memory given back after a burst of connections. glibc keeps the memory
//! a burst's connections freed (TLS state, buffers) in its heaps, between
//! chunks still in use, so the process's resident size stays at the
//! burst's peak: measured 19 MB at start, 59 MB after 1,000 concurrent TLS
//! connections had come and gone, 26 MB after `malloc_trim(0)`
//! (docs/RELIABILITY.md, Soak). Like Envoy's periodic release of tcmalloc's
//! free memory, the gateway trims once a burst has passed: when the open
//! connections fell to half of their peak since the last trim (a peak of
//! at least [`MIN_PEAK`]). Small bursts (a few dozen TLS fallbacks after a
//! certificate replacement) left a few hundred KB each, a slow rise through
//! a 10-minute soak (docs/RELIABILITY.md): so the gateway also trims once a
//! minute when its resident size grew [`RSS_SLACK`] since the last trim.
//! The decision is [`BurstWatch`]; the trim itself is glibc's (a no-op
//! elsewhere).

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use super::Shared;

/// How often the open connections are looked at.
const EVERY: Duration = Duration::from_secs(5);
/// Bursts smaller than this are not worth a trim.
pub(super) const MIN_PEAK: usize = 256;
/// Growth of the resident size since the last trim that earns a trim...
pub(super) const RSS_SLACK: u64 = 1 << 20;
/// ...looked at once every this many looks (a minute).
const LOOKS_PER_RSS_CHECK: u32 = 12;

/// Tracks the peak of open connections and the resident size since the
/// last trim.
#[derive(Debug, Default)]
pub(super) struct BurstWatch {
    peak: usize,
    looks: u32,
    /// Resident bytes after the last trim (or at the first look).
    rss_base: Option<u64>,
}

impl BurstWatch {
    /// With `open` connections now, at most `peak` at once since the last
    /// look, and `rss` resident bytes: whether to trim (a burst of at least
    /// [`MIN_PEAK`] fell to half, or at a minute's check the resident size
    /// grew [`RSS_SLACK`] since the last trim). The peak restarts after a
    /// trim; [`Self::trimmed`] gives the size it left.
    pub(super) fn observe(&mut self, open: usize, peak: usize, rss: Option<u64>) -> bool {
        self.peak = self.peak.max(open).max(peak);
        self.looks += 1;
        let base = *self.rss_base.get_or_insert(rss.unwrap_or(0));
        let burst = self.peak >= MIN_PEAK && open <= self.peak / 2;
        let grown = self.looks >= LOOKS_PER_RSS_CHECK
            && rss.is_some_and(|r| r >= base.saturating_add(RSS_SLACK));
        if self.looks >= LOOKS_PER_RSS_CHECK {
            self.looks = 0;
        }
        if burst || grown {
            self.peak = open;
            self.looks = 0;
            return true;
        }
        false
    }

    /// After a trim: the resident size it left is the new base.
    pub(super) fn trimmed(&mut self, rss: Option<u64>) {
        if let Some(r) = rss {
            self.rss_base = Some(r);
        }
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
        if watch.observe(open, peak, crate::sys::resident_bytes()) {
            let released = crate::sys::release_free_memory();
            watch.trimmed(crate::sys::resident_bytes());
            tracing::debug!(
                "{open} connections open after a burst or growth: free memory released ({released})"
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
        let mut look = |open: usize| w.observe(open, open, None);
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
        assert!(!w.observe(0, 0, None));
        // 1,000 connections came and went between two looks.
        assert!(w.observe(0, 1000, None));
        assert!(!w.observe(0, 0, None));
    }

    #[test]
    fn a_resident_size_that_crept_up_is_trimmed_once_a_minute() {
        const MB: u64 = 1 << 20;
        let mut w = BurstWatch::default();
        let mut rss = 20 * MB;
        // Flat: never.
        assert!(!(0..30).any(|_| w.observe(30, 40, Some(rss))));
        // Small steps (no burst of MIN_PEAK connections): a trim at the next
        // minute's check once they add up to RSS_SLACK, not before.
        let mut trims = Vec::new();
        for look in 0..60u32 {
            rss += MB / 8;
            if w.observe(30, 60, Some(rss)) {
                trims.push(look);
                rss -= MB; // what the trim gave back
                w.trimmed(Some(rss));
            }
        }
        assert!(!trims.is_empty() && trims.len() <= 5, "{trims:?}");
        assert!(
            trims.windows(2).all(|p| p[1] - p[0] >= LOOKS_PER_RSS_CHECK),
            "{trims:?}"
        );
        // Without a resident size (not Linux): bursts only.
        let mut w = BurstWatch::default();
        assert!(!(0..100).any(|_| w.observe(30, 40, None)));
    }
}
