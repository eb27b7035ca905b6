//! The amplification budget of one connection: how many bytes may go to a
//! peer before its TCP handshake completes (docs/PROTOCOL.md §8), counted
//! over the Reply frame and every channel record after it, however the
//! response happens to be split into writes. Pure arithmetic, like
//! quinn-proto's anti-amplification accounting in `connection/paths.rs`.

use crate::handshake::{MAX_RECORD_BODY, RECORD_OVERHEAD};

/// Bytes a Reply frame adds to the response data it carries: frame type and
/// length (3), the server ephemeral (32), the AEAD tag (16) and the
/// extension block's length (2), plus the encoded extensions themselves.
pub const REPLY_OVERHEAD: usize = 3 + 32 + 16 + 2;

/// RFC 9000 §8's factor: before the address is validated, at most three
/// times the bytes received.
pub const AMPLIFICATION_FACTOR: usize = 3;

/// An initial congestion window of ten 1460-byte segments (RFC 6928): what
/// a TCP Fast Open server sends a cookie holder before the handshake.
pub const INITIAL_WINDOW: usize = 14_600;

/// Bytes that may still reach a peer before its handshake completes.
///
/// The limit is `max(3 x received, window)`, the window capped at one
/// channel record. Every byte put on the wire while the handshake is not
/// known to be complete is charged: the Reply frame with its overhead and
/// every record with its [`RECORD_OVERHEAD`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AmplificationBudget {
    limit: usize,
    spent: usize,
    /// Bytes of the grant kept back by [`Self::within_window`]: not sent
    /// before the handshake, but still the grant's ([`Self::unused`]).
    held: usize,
}

/// How the buffered start of a response goes out under the budget (see
/// [`AmplificationBudget::plan_reply`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReplyPlan {
    /// Response bytes carried inside the Reply frame.
    pub in_reply: usize,
    /// Response bytes sealed into one channel record right after it.
    pub in_record: usize,
}

impl ReplyPlan {
    /// Response bytes that go out now; the rest waits for the handshake.
    pub fn sent(&self) -> usize {
        self.in_reply + self.in_record
    }
}

impl AmplificationBudget {
    /// A budget of exactly `limit` bytes.
    pub fn new(limit: usize) -> Self {
        Self {
            limit,
            spent: 0,
            held: 0,
        }
    }

    /// Keep what goes out before the handshake within `window` bytes, the
    /// sender's first flight (the kernel's free congestion window in full
    /// segments: `zrtt_net::sys::TcpInfo::send_window_bytes`). Bytes
    /// written beyond it leave only when the client's ACK arrives, one
    /// round trip later, and a Reply frame whose end waits there cannot be
    /// opened until then: its response bytes arrive a round trip late even
    /// though most of them came in the first. The window of ten 1460-byte
    /// segments ([`INITIAL_WINDOW`]) is 120 bytes more than ten segments
    /// carry with TCP timestamps (1448 bytes each), so an answer that fills
    /// it would lose that round trip. Only lowers the limit; the part held
    /// back stays in [`Self::unused`], so a grant taken from the
    /// per-destination budgets is returned whole.
    pub fn within_window(mut self, window: usize) -> Self {
        let cut = self.limit.saturating_sub(window.max(self.spent));
        self.limit -= cut;
        self.held += cut;
        self
    }

    /// Bytes of the grant not sent before the handshake: what is still
    /// allowed plus what [`Self::within_window`] kept back (returned to the
    /// per-destination budgets once the handshake completes).
    pub fn unused(&self) -> usize {
        self.remaining() + self.held
    }

    /// The budget of a connection whose first flight was `received` bytes:
    /// three times that, or `window` (capped at one record) when larger.
    pub fn for_flight(received: usize, window: usize) -> Self {
        Self::new(
            received
                .saturating_mul(AMPLIFICATION_FACTOR)
                .max(window.min(MAX_RECORD_BODY)),
        )
    }

    /// The limit in bytes.
    pub fn limit(&self) -> usize {
        self.limit
    }

    /// Bytes charged so far.
    pub fn spent(&self) -> usize {
        self.spent
    }

    /// Bytes still allowed.
    pub fn remaining(&self) -> usize {
        self.limit.saturating_sub(self.spent)
    }

    /// Plan the Reply for `available` buffered response bytes, when at
    /// most `max_reply_data` fit in the Reply and its extensions encode to
    /// `extensions_len` bytes; charges what the plan sends. `None` (nothing
    /// charged) when not even the Reply's own overhead fits: then the
    /// Reply waits for the handshake.
    pub fn plan_reply(
        &mut self,
        available: usize,
        max_reply_data: usize,
        extensions_len: usize,
    ) -> Option<ReplyPlan> {
        let overhead = REPLY_OVERHEAD + extensions_len;
        if self.remaining() < overhead {
            return None;
        }
        let in_reply = available
            .min(max_reply_data)
            .min(self.remaining() - overhead);
        self.spent += overhead + in_reply;
        let in_record = self.take_record(available - in_reply);
        Some(ReplyPlan {
            in_reply,
            in_record,
        })
    }

    /// How many of `want` bytes fit in one more channel record now (its
    /// overhead included), charging them; 0 when nothing fits, and the
    /// rest must wait for the handshake.
    pub fn take_record(&mut self, want: usize) -> usize {
        if want == 0 {
            return 0;
        }
        let room = self
            .remaining()
            .saturating_sub(RECORD_OVERHEAD)
            .min(MAX_RECORD_BODY);
        let n = want.min(room);
        if n > 0 {
            self.spent += n + RECORD_OVERHEAD;
        }
        n
    }

    /// Charge up to `want` bytes of another protocol's records (TLS) as
    /// they go on the wire; returns how many fit (0: wait for the handshake).
    pub fn take_bytes(&mut self, want: usize) -> usize {
        let n = want.min(self.remaining());
        self.spent += n;
        n
    }

    /// Whether a record with an empty body (a Close) still fits.
    pub fn take_empty_record(&mut self) -> bool {
        if self.remaining() >= RECORD_OVERHEAD {
            self.spent += RECORD_OVERHEAD;
            true
        } else {
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_kernels_window_lowers_the_limit_and_the_grant_stays_whole() {
        // Ten 1448-byte segments, 120 bytes under the 14,600-byte window.
        let mut b = AmplificationBudget::for_flight(112, INITIAL_WINDOW).within_window(14_480);
        assert_eq!(b.limit(), 14_480);
        assert_eq!(b.unused(), INITIAL_WINDOW);
        let plan = b.plan_reply(100_000, 65_000, 0).unwrap();
        assert_eq!(plan.sent() + REPLY_OVERHEAD, 14_480);
        assert_eq!(b.remaining(), 0);
        assert_eq!(b.take_record(10), 0, "nothing past the kernel's window");
        assert_eq!(b.unused(), 120, "the part held back is returned");
        // A larger window, or one already spent, changes nothing.
        let wide = AmplificationBudget::for_flight(112, INITIAL_WINDOW).within_window(1 << 20);
        assert_eq!(
            (wide.limit(), wide.unused()),
            (INITIAL_WINDOW, INITIAL_WINDOW)
        );
        let mut spent = AmplificationBudget::new(1000);
        assert_eq!(spent.take_bytes(600), 600);
        let spent = spent.within_window(100);
        assert_eq!(
            (spent.limit(), spent.remaining(), spent.unused()),
            (600, 0, 400)
        );
        // A window of nothing: the Reply waits for the handshake.
        let mut none = AmplificationBudget::for_flight(112, INITIAL_WINDOW).within_window(0);
        assert_eq!(none.plan_reply(10, 65_000, 0), None);
        assert_eq!(none.unused(), INITIAL_WINDOW);
    }

    #[test]
    fn three_times_the_flight_or_the_window() {
        assert_eq!(AmplificationBudget::for_flight(112, 0).limit(), 336);
        assert_eq!(
            AmplificationBudget::for_flight(112, INITIAL_WINDOW).limit(),
            INITIAL_WINDOW
        );
        // A window never exceeds one record; a large flight keeps its 3x.
        assert_eq!(
            AmplificationBudget::for_flight(100, 1 << 20).limit(),
            MAX_RECORD_BODY
        );
        assert_eq!(
            AmplificationBudget::for_flight(30_000, INITIAL_WINDOW).limit(),
            90_000
        );
        assert_eq!(
            AmplificationBudget::for_flight(usize::MAX, 0).limit(),
            usize::MAX
        );
    }

    #[test]
    fn reply_and_one_record_fill_the_budget_exactly() {
        // 336 bytes: the Reply's 53 bytes of overhead leave 283 for data.
        let mut b = AmplificationBudget::for_flight(112, 0);
        let plan = b.plan_reply(1000, 65_000, 0).unwrap();
        assert_eq!(plan.in_reply, 336 - REPLY_OVERHEAD);
        assert_eq!(plan.in_record, 0, "no room left for a record's overhead");
        assert_eq!(b.spent(), 336);
        assert_eq!(b.take_record(10), 0);
        assert!(!b.take_empty_record());
    }

    #[test]
    fn reply_capped_by_max_reply_data_spills_into_a_record() {
        let mut b = AmplificationBudget::new(2000);
        let plan = b.plan_reply(1500, 1000, 0).unwrap();
        assert_eq!(plan.in_reply, 1000);
        // 2000 - 53 - 1000 = 947 left; a record costs 19: 928 of the 500 wanted.
        assert_eq!(plan.in_record, 500);
        assert_eq!(plan.sent(), 1500);
        assert_eq!(b.spent(), REPLY_OVERHEAD + 1000 + RECORD_OVERHEAD + 500);
    }

    #[test]
    fn extensions_count_against_the_budget() {
        let mut b = AmplificationBudget::new(200);
        let plan = b.plan_reply(1000, 65_000, 40).unwrap();
        assert_eq!(plan.in_reply, 200 - REPLY_OVERHEAD - 40);
        assert_eq!(b.spent(), 200);
    }

    #[test]
    fn a_reply_that_does_not_fit_waits_for_the_handshake() {
        let mut b = AmplificationBudget::new(REPLY_OVERHEAD - 1);
        assert_eq!(b.plan_reply(100, 65_000, 0), None);
        assert_eq!(b.spent(), 0);
        let mut b = AmplificationBudget::new(REPLY_OVERHEAD + 10);
        assert_eq!(b.plan_reply(100, 65_000, 11), None, "extensions count");
        let mut b = AmplificationBudget::new(REPLY_OVERHEAD);
        assert_eq!(
            b.plan_reply(100, 65_000, 0),
            Some(ReplyPlan {
                in_reply: 0,
                in_record: 0
            })
        );
    }

    #[test]
    fn later_writes_are_charged_record_by_record() {
        let mut b = AmplificationBudget::new(REPLY_OVERHEAD + 100);
        let plan = b.plan_reply(40, 65_000, 0).unwrap();
        assert_eq!(
            plan,
            ReplyPlan {
                in_reply: 40,
                in_record: 0
            }
        );
        assert_eq!(b.remaining(), 60);
        // 60 left: one record of 41 bytes of data.
        assert_eq!(b.take_record(100), 60 - RECORD_OVERHEAD);
        assert_eq!(b.remaining(), 0);
        assert_eq!(b.take_record(1), 0);
        assert_eq!(b.take_record(0), 0);
    }

    #[test]
    fn close_record_needs_its_overhead() {
        let mut b = AmplificationBudget::new(RECORD_OVERHEAD);
        assert!(b.take_empty_record());
        assert!(!b.take_empty_record());
    }

    #[test]
    fn raw_bytes_are_charged_exactly() {
        let mut b = AmplificationBudget::new(100);
        assert_eq!(b.take_bytes(60), 60);
        assert_eq!(b.take_bytes(60), 40);
        assert_eq!(b.take_bytes(1), 0);
        assert_eq!(b.spent(), 100);
    }

    #[test]
    fn close_needs_exactly_its_overhead() {
        let mut b = AmplificationBudget::new(RECORD_OVERHEAD - 1);
        assert!(!b.take_empty_record(), "18 bytes are not enough");
        assert_eq!(b.spent(), 0);
    }

    #[test]
    fn one_record_at_most_per_take_whatever_the_limit() {
        let mut b = AmplificationBudget::new(200_000);
        assert_eq!(b.take_record(200_000), MAX_RECORD_BODY);
        assert_eq!(b.spent(), MAX_RECORD_BODY + RECORD_OVERHEAD);
        let mut b = AmplificationBudget::new(200_000);
        let plan = b.plan_reply(200_000, 60_000, 0).unwrap();
        assert_eq!(plan.in_reply, 60_000);
        assert_eq!(
            plan.in_record, MAX_RECORD_BODY,
            "one record after the Reply"
        );
    }

    #[test]
    fn nothing_is_ever_charged_beyond_the_limit() {
        // Every split of writes, extension size and limit (from one Reply
        // overhead up to beyond one record): what goes out, the Close
        // included, never exceeds the limit, and is exactly what is charged.
        for ext in [0, 7, 300] {
            for limit in [
                REPLY_OVERHEAD + ext,
                REPLY_OVERHEAD + ext + 1,
                REPLY_OVERHEAD + ext + RECORD_OVERHEAD - 1,
                REPLY_OVERHEAD + ext + RECORD_OVERHEAD,
                336,
                399,
                14_600,
                70_000,
                200_000,
            ] {
                for available in [0, 1, 50, 1000, 20_000, 100_000] {
                    for chunk in [1, 7, 100, 5000, 70_000] {
                        let mut b = AmplificationBudget::new(limit);
                        let Some(plan) = b.plan_reply(available, 65_000 - ext, ext) else {
                            assert!(limit < REPLY_OVERHEAD + ext);
                            assert_eq!(b.spent(), 0);
                            continue;
                        };
                        let mut wire = REPLY_OVERHEAD + ext + plan.in_reply;
                        if plan.in_record > 0 {
                            wire += RECORD_OVERHEAD + plan.in_record;
                        }
                        let mut sent = plan.sent();
                        assert!(sent <= available);
                        while sent < available {
                            let n = b.take_record(chunk.min(available - sent));
                            if n == 0 {
                                break;
                            }
                            sent += n;
                            wire += RECORD_OVERHEAD + n;
                        }
                        if b.take_empty_record() {
                            wire += RECORD_OVERHEAD;
                        }
                        assert_eq!(wire, b.spent(), "charged is what goes out");
                        assert!(
                            wire <= limit,
                            "limit {limit} ext {ext} available {available} chunk {chunk}: {wire} on the wire"
                        );
                    }
                }
            }
        }
    }
}
