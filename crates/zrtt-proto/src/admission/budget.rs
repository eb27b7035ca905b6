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
        Self { limit, spent: 0 }
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
    /// `extensions_len` bytes; charges what the plan sends. Without
    /// room for the Reply's own overhead nothing of the response is sent,
    /// but the Reply frame still is (it carries the key the channel needs).
    pub fn plan_reply(
        &mut self,
        available: usize,
        max_reply_data: usize,
        extensions_len: usize,
    ) -> ReplyPlan {
        let overhead = REPLY_OVERHEAD + extensions_len;
        let in_reply = available
            .min(max_reply_data)
            .min(self.remaining().saturating_sub(overhead));
        self.spent = self.spent.saturating_add(overhead + in_reply);
        let in_record = self.take_record(available - in_reply);
        ReplyPlan {
            in_reply,
            in_record,
        }
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
        let plan = b.plan_reply(1000, 65_000, 0);
        assert_eq!(plan.in_reply, 336 - REPLY_OVERHEAD);
        assert_eq!(plan.in_record, 0, "no room left for a record's overhead");
        assert_eq!(b.spent(), 336);
        assert_eq!(b.take_record(10), 0);
        assert!(!b.take_empty_record());
    }

    #[test]
    fn reply_capped_by_max_reply_data_spills_into_a_record() {
        let mut b = AmplificationBudget::new(2000);
        let plan = b.plan_reply(1500, 1000, 0);
        assert_eq!(plan.in_reply, 1000);
        // 2000 - 53 - 1000 = 947 left; a record costs 19: 928 of the 500 wanted.
        assert_eq!(plan.in_record, 500);
        assert_eq!(plan.sent(), 1500);
        assert_eq!(b.spent(), REPLY_OVERHEAD + 1000 + RECORD_OVERHEAD + 500);
    }

    #[test]
    fn extensions_count_against_the_budget() {
        let mut b = AmplificationBudget::new(200);
        let plan = b.plan_reply(1000, 65_000, 40);
        assert_eq!(plan.in_reply, 200 - REPLY_OVERHEAD - 40);
        assert_eq!(b.spent(), 200);
    }

    #[test]
    fn budget_smaller_than_the_reply_overhead_sends_no_data() {
        let mut b = AmplificationBudget::new(20);
        let plan = b.plan_reply(100, 65_000, 0);
        assert_eq!(
            plan,
            ReplyPlan {
                in_reply: 0,
                in_record: 0
            }
        );
        assert_eq!(b.remaining(), 0);
    }

    #[test]
    fn later_writes_are_charged_record_by_record() {
        let mut b = AmplificationBudget::new(REPLY_OVERHEAD + 100);
        let plan = b.plan_reply(40, 65_000, 0);
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
    fn nothing_is_ever_charged_beyond_the_limit() {
        // Every split of writes, every limit: spent <= limit, and data sent
        // is what the budget allows.
        for limit in [0, 18, 19, 20, 52, 53, 54, 72, 73, 100, 336, 14_600] {
            for available in [0, 1, 50, 1000, 20_000] {
                for chunk in [1, 7, 100, 5000] {
                    let mut b = AmplificationBudget::new(limit);
                    let plan = b.plan_reply(available, 65_000, 0);
                    let mut sent = plan.sent();
                    assert!(sent <= available);
                    while sent < available {
                        let n = b.take_record(chunk.min(available - sent));
                        if n == 0 {
                            break;
                        }
                        sent += n;
                    }
                    assert!(
                        b.spent() <= limit.max(REPLY_OVERHEAD),
                        "limit {limit} available {available} chunk {chunk}: spent {}",
                        b.spent()
                    );
                }
            }
        }
    }
}
