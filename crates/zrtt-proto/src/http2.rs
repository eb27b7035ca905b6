//! HTTP/2 frame headers in early data (RFC 9113 §3.4, §4.1, §6), read
//! without an HPACK decoder: 9-byte frame headers only, plus one byte of
//! the first header block on the client side.
//!
//! - The gateway ([`walk_early`]) counts the HEADERS frames that *started*
//!   in a first flight's early data (the replayable bytes). HTTP/2 stream ids
//!   increase, h2 queues complete header blocks for acceptance in arrival
//!   order (header blocks cannot interleave, RFC 9113 §4.3), and hyper calls
//!   the service once per accepted stream in that order, so the first `E`
//!   requests the service sees are the early ones, or later ones when an
//!   early stream was refused or reset before hyper saw it (an over-count
//!   marks more requests early, never fewer; docs/GATEWAY.md). Only a
//!   HEADERS frame on a new stream (odd id above every one before) counts:
//!   trailers and frames on a reused id open no request.
//! - The client ([`first_request`]) decides when the bytes hyper wrote for
//!   a new connection (preface, SETTINGS, its first request) are complete
//!   enough to become the first flight, and how much may travel as early
//!   data: the bytes up to the end of the leading run of bodiless safe
//!   requests (END_STREAM on their HEADERS, each block starting with the
//!   static-table `:method: GET`, 0x82, or a literal `:method` of HEAD or
//!   OPTIONS, raw or Huffman-coded), if the first request is one and
//!   nothing before it opens or feeds a stream; what follows the run (a
//!   request with a body, a DATA frame) goes inside the channel.

/// The client connection preface (RFC 9113 §3.4).
pub const PREFACE: &[u8; 24] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
/// Size of a frame header.
pub const FRAME_HEADER_LEN: usize = 9;

/// Frame types (RFC 9113 §6) this module looks at.
pub mod kind {
    /// DATA.
    pub const DATA: u8 = 0x0;
    /// HEADERS.
    pub const HEADERS: u8 = 0x1;
    /// PRIORITY.
    pub const PRIORITY: u8 = 0x2;
    /// RST_STREAM.
    pub const RST_STREAM: u8 = 0x3;
    /// SETTINGS.
    pub const SETTINGS: u8 = 0x4;
    /// PUSH_PROMISE (never from a client).
    pub const PUSH_PROMISE: u8 = 0x5;
    /// PING.
    pub const PING: u8 = 0x6;
    /// GOAWAY.
    pub const GOAWAY: u8 = 0x7;
    /// WINDOW_UPDATE.
    pub const WINDOW_UPDATE: u8 = 0x8;
    /// CONTINUATION.
    pub const CONTINUATION: u8 = 0x9;
}

/// Frame flags this module looks at.
pub mod flag {
    /// END_STREAM (DATA, HEADERS).
    pub const END_STREAM: u8 = 0x1;
    /// END_HEADERS (HEADERS, CONTINUATION).
    pub const END_HEADERS: u8 = 0x4;
    /// PADDED (DATA, HEADERS).
    pub const PADDED: u8 = 0x8;
    /// PRIORITY (HEADERS).
    pub const PRIORITY: u8 = 0x20;
}

/// A frame header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FrameHeader {
    /// Payload length (24 bits).
    pub len: usize,
    /// Frame type.
    pub kind: u8,
    /// Flags.
    pub flags: u8,
    /// Stream id (31 bits; the reserved bit is dropped).
    pub stream: u32,
}

impl FrameHeader {
    /// Parse the 9-byte header at the start of `b` (`None`: fewer bytes).
    pub fn parse(b: &[u8]) -> Option<Self> {
        let h: &[u8; FRAME_HEADER_LEN] = b.get(..FRAME_HEADER_LEN)?.try_into().ok()?;
        Some(Self {
            len: usize::from(h[0]) << 16 | usize::from(h[1]) << 8 | usize::from(h[2]),
            kind: h[3],
            flags: h[4],
            stream: u32::from_be_bytes([h[5] & 0x7f, h[6], h[7], h[8]]),
        })
    }

    /// The 9 bytes of this header.
    pub fn encode(&self) -> [u8; FRAME_HEADER_LEN] {
        let l = (self.len as u32).to_be_bytes();
        let s = (self.stream & 0x7fff_ffff).to_be_bytes();
        [
            l[1], l[2], l[3], self.kind, self.flags, s[0], s[1], s[2], s[3],
        ]
    }
}

/// What a first flight's early data holds, seen as the start of an HTTP/2
/// client connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EarlyFrames {
    /// HEADERS frames that started in the bytes on a new client stream
    /// (odd id above every one before), plus one for a frame header cut
    /// short (its type unseen): an upper bound on the requests whose
    /// header block began in early data.
    pub headers_started: usize,
    /// The bytes end exactly at a frame boundary.
    pub whole_frames: bool,
}

/// Walk `early` as the start of an HTTP/2 client connection: `None` when it
/// does not begin with the connection preface (or a prefix of it, for
/// fewer than 24 bytes), else the count of HEADERS frames that started a
/// new stream in it (an odd id above every earlier one's). Frame contents
/// are not checked: hyper does that, and a connection error there ends the
/// connection, counted or not.
pub fn walk_early(early: &[u8]) -> Option<EarlyFrames> {
    if early.len() < PREFACE.len() {
        return PREFACE.starts_with(early).then_some(EarlyFrames {
            headers_started: 0,
            whole_frames: early.is_empty(),
        });
    }
    if !early.starts_with(PREFACE) {
        return None;
    }
    let mut pos = PREFACE.len();
    let mut started = 0usize;
    // The highest stream id a counted HEADERS frame opened.
    let mut highest = 0u32;
    while pos < early.len() {
        let Some(h) = FrameHeader::parse(&early[pos..]) else {
            // A header cut short may be a HEADERS frame's.
            return Some(EarlyFrames {
                headers_started: started + 1,
                whole_frames: false,
            });
        };
        // Only a HEADERS frame that opens a client stream (odd id, above
        // every one before, RFC 9113 §5.1.1) starts a request: trailers and
        // reused or even ids do not.
        if h.kind == kind::HEADERS && h.stream % 2 == 1 && h.stream > highest {
            started += 1;
            highest = h.stream;
        }
        pos = pos.saturating_add(FRAME_HEADER_LEN).saturating_add(h.len);
    }
    Some(EarlyFrames {
        headers_started: started,
        whole_frames: pos == early.len(),
    })
}

/// The client's view of the bytes written on a new HTTP/2 connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FirstRequest {
    /// No complete request header block yet: wait for more bytes.
    Incomplete,
    /// The first request's header block is complete (or the bytes are
    /// something this module cannot read): connect now.
    Ready {
        /// `Some(n)`: the first `n` bytes (preface, connection-level
        /// frames, and the leading run of bodiless safe requests that fits) may
        /// travel as early data; the rest goes inside the channel.
        early: Option<usize>,
    },
}

/// Static-table index 2, `:method: GET`, as an indexed field (RFC 7541
/// §6.1, Appendix A); what h2's encoder writes for GET.
const INDEXED_GET: u8 = 0x82;

/// The values of a literal `:method` field (RFC 7541 §5.2 string literal:
/// length prefix with the Huffman bit, then the octets) that name a safe
/// method other than GET (RFC 9110 §9.2.1): HEAD and OPTIONS, each raw and
/// Huffman-coded (h2's encoder always writes Huffman: `c7 82 1b ff` is
/// "HEAD", `d5 af 7e 4d 5a 77 7f` is "OPTIONS", from RFC 7541 Appendix B).
const SAFE_METHOD_VALUES: [&[u8]; 4] = [
    &[0x84, 0xc7, 0x82, 0x1b, 0xff],
    &[0x87, 0xd5, 0xaf, 0x7e, 0x4d, 0x5a, 0x77, 0x7f],
    b"\x04HEAD",
    b"\x07OPTIONS",
];

/// Whether a request's header block starts with `:method` naming a safe
/// method (GET, HEAD, OPTIONS), read without an HPACK decoder: the indexed
/// static GET (0x82), or a literal field whose name is static index 2
/// (`:method`), with incremental indexing (0x42), without indexing (0x02)
/// or never indexed (0x12), and one of [`SAFE_METHOD_VALUES`] as its value.
/// A method taken from the dynamic table (a second HEAD on a connection,
/// which h2 writes as an index above 61) or in any other form is not
/// recognised: the request is then treated as unsafe (conservative).
fn starts_with_safe_method(block: &[u8]) -> bool {
    match block.split_first() {
        Some((&INDEXED_GET, _)) => true,
        Some((0x42 | 0x02 | 0x12, value)) => {
            SAFE_METHOD_VALUES.iter().any(|v| value.starts_with(v))
        }
        _ => false,
    }
}

/// Whether the client's buffered connection start `bytes` holds its first
/// request's complete header block, and how much of it may be early data
/// (at most `max_early` bytes; see the module docs). Bytes that are not an
/// HTTP/2 connection start are `Ready` with no early part.
pub fn first_request(bytes: &[u8], max_early: usize) -> FirstRequest {
    const NOT_EARLY: FirstRequest = FirstRequest::Ready { early: None };
    if bytes.len() < PREFACE.len() {
        return if PREFACE.starts_with(bytes) {
            FirstRequest::Incomplete
        } else {
            NOT_EARLY
        };
    }
    if !bytes.starts_with(PREFACE) {
        return NOT_EARLY;
    }
    let mut pos = PREFACE.len();
    // (stream, END_STREAM, block starts with a safe method) of the open header block.
    let mut block: Option<(u32, bool, bool)> = None;
    // The highest stream a request opened: a request's HEADERS opens an odd
    // stream above it (RFC 9113 §5.1.1), the rule `walk_early` counts by.
    let mut highest = 0u32;
    // `None` until the first request's block is complete; then the end of
    // the early part so far (`Some(None)`: nothing may be early).
    let mut early: Option<Option<usize>> = None;
    let ready = |early: Option<Option<usize>>| match early {
        Some(e) => FirstRequest::Ready { early: e },
        None => FirstRequest::Incomplete,
    };
    while pos < bytes.len() {
        let Some(h) = FrameHeader::parse(&bytes[pos..]) else {
            return ready(early);
        };
        let start = pos + FRAME_HEADER_LEN;
        let end = start.saturating_add(h.len);
        let Some(payload) = bytes.get(start..end) else {
            return ready(early);
        };
        let opened = match (h.kind, block) {
            // Connection-level frames and PRIORITY open no stream.
            (kind::SETTINGS | kind::WINDOW_UPDATE | kind::PING | kind::PRIORITY, None) => None,
            (kind::HEADERS, None) => {
                let opens = h.stream % 2 == 1 && h.stream > highest;
                let Some(fragment) = header_fragment(h, payload).filter(|_| opens) else {
                    return ready(early.or(Some(None)));
                };
                highest = h.stream;
                let get = starts_with_safe_method(fragment);
                let end_stream = h.flags & flag::END_STREAM != 0;
                Some((h.stream, end_stream, get))
            }
            (kind::CONTINUATION, Some(open)) if h.stream == open.0 => Some(open),
            // Anything else (a body, a reset, a frame inside a header
            // block): the early part, if any, ends before it.
            _ => return ready(early.or(Some(None))),
        };
        if let Some((_, end_stream, get)) = opened {
            if h.flags & flag::END_HEADERS == 0 {
                block = opened;
            } else {
                // A request's header block is complete at `end`.
                block = None;
                let safe = end_stream && get && end <= max_early;
                match early {
                    None if safe => early = Some(Some(end)),
                    None => return NOT_EARLY,
                    Some(Some(_)) if safe => early = Some(Some(end)),
                    Some(_) => return ready(early),
                }
            }
        }
        pos = end;
    }
    ready(early)
}

/// The header block fragment of a HEADERS frame's payload (padding and
/// priority fields removed); `None` when they do not fit.
fn header_fragment(h: FrameHeader, payload: &[u8]) -> Option<&[u8]> {
    let mut p = payload;
    let mut pad = 0usize;
    if h.flags & flag::PADDED != 0 {
        pad = usize::from(*p.first()?);
        p = p.get(1..)?;
    }
    if h.flags & flag::PRIORITY != 0 {
        p = p.get(5..)?;
    }
    p.get(..p.len().checked_sub(pad)?)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn fr(b: &[u8]) -> FirstRequest {
        first_request(b, usize::MAX)
    }

    fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
        let mut v = FrameHeader {
            len: payload.len(),
            kind,
            flags,
            stream,
        }
        .encode()
        .to_vec();
        v.extend_from_slice(payload);
        v
    }

    fn start() -> Vec<u8> {
        let mut v = PREFACE.to_vec();
        v.extend(frame(kind::SETTINGS, 0, 0, &[0, 2, 0, 0, 0, 0]));
        v.extend(frame(kind::WINDOW_UPDATE, 0, 0, &[0, 0x4f, 0, 1]));
        v
    }

    const GET_BLOCK: &[u8] = &[0x82, 0x87, 0x84, 0x41, 0x01, b'a'];
    const POST_BLOCK: &[u8] = &[0x83, 0x87, 0x84, 0x41, 0x01, b'a'];
    const ES_EH: u8 = flag::END_STREAM | flag::END_HEADERS;

    #[test]
    fn frame_headers_round_trip() {
        let h = FrameHeader {
            len: 0x01_02_03,
            kind: kind::HEADERS,
            flags: ES_EH,
            stream: 0x7fff_fff1,
        };
        assert_eq!(FrameHeader::parse(&h.encode()), Some(h));
        assert_eq!(FrameHeader::parse(&h.encode()[..8]), None);
        // The reserved bit is ignored.
        let mut b = h.encode();
        b[5] |= 0x80;
        assert_eq!(FrameHeader::parse(&b), Some(h));
    }

    #[test]
    fn early_headers_are_counted_where_they_start() {
        assert_eq!(walk_early(b"GET / HTTP/1.1\r\n\r\n"), None);
        assert_eq!(walk_early(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\r"), None);
        let e = |headers_started, whole_frames| {
            Some(EarlyFrames {
                headers_started,
                whole_frames,
            })
        };
        assert_eq!(walk_early(b""), e(0, true));
        assert_eq!(walk_early(&PREFACE[..10]), e(0, false));
        let mut b = start();
        assert_eq!(walk_early(&b), e(0, true));
        b.extend(frame(kind::HEADERS, ES_EH, 1, GET_BLOCK));
        assert_eq!(walk_early(&b), e(1, true));
        // A second request split over CONTINUATION counts once.
        b.extend(frame(kind::HEADERS, 0, 3, &GET_BLOCK[..2]));
        b.extend(frame(
            kind::CONTINUATION,
            flag::END_HEADERS,
            3,
            &GET_BLOCK[2..],
        ));
        assert_eq!(walk_early(&b), e(2, true));
        // A HEADERS frame cut in its payload started in early data.
        let mut cut = b.clone();
        cut.extend(&frame(kind::HEADERS, ES_EH, 5, GET_BLOCK)[..12]);
        assert_eq!(walk_early(&cut), e(3, false));
        // So may one cut in its header (its type unseen): counted.
        let mut cut = b.clone();
        cut.extend(&frame(kind::DATA, 0, 5, b"x")[..3]);
        assert_eq!(walk_early(&cut), e(3, false));
        // A request with a body and trailers counts once: the trailers'
        // HEADERS frame opens no stream.
        b.extend(frame(kind::HEADERS, flag::END_HEADERS, 7, POST_BLOCK));
        b.extend(frame(kind::DATA, 0, 7, b"body"));
        b.extend(frame(kind::HEADERS, ES_EH, 7, &[0x40]));
        assert_eq!(walk_early(&b), e(3, true));
        // Neither does a HEADERS frame on an id at or below the highest
        // seen, or on an even (server) id.
        for stream in [1, 5, 7, 10] {
            let mut again = b.clone();
            again.extend(frame(kind::HEADERS, ES_EH, stream, GET_BLOCK));
            assert_eq!(walk_early(&again), e(3, true), "stream {stream}");
        }
        // The next odd id does.
        b.extend(frame(kind::HEADERS, ES_EH, 9, GET_BLOCK));
        assert_eq!(walk_early(&b), e(4, true));
    }

    #[test]
    fn the_client_corks_until_a_complete_first_request() {
        let mut b = PREFACE[..5].to_vec();
        assert_eq!(fr(&b), FirstRequest::Incomplete);
        b = start();
        assert_eq!(fr(&b), FirstRequest::Incomplete);
        let get = frame(kind::HEADERS, ES_EH, 1, GET_BLOCK);
        let mut partial = b.clone();
        partial.extend(&get[..11]);
        assert_eq!(fr(&partial), FirstRequest::Incomplete);
        let mut ok = b.clone();
        ok.extend(&get);
        let all = Some(ok.len());
        assert_eq!(fr(&ok), FirstRequest::Ready { early: all });
        // Split over CONTINUATION.
        let mut split = b.clone();
        split.extend(frame(kind::HEADERS, flag::END_STREAM, 1, &GET_BLOCK[..3]));
        assert_eq!(fr(&split), FirstRequest::Incomplete);
        split.extend(frame(
            kind::CONTINUATION,
            flag::END_HEADERS,
            1,
            &GET_BLOCK[3..],
        ));
        assert_eq!(
            fr(&split),
            FirstRequest::Ready {
                early: Some(split.len())
            }
        );
        // Padding and priority fields are skipped.
        let mut padded = vec![2u8, 0, 0, 0, 0, 16];
        padded.extend(GET_BLOCK);
        padded.extend([0, 0]);
        let mut p = b.clone();
        p.extend(frame(
            kind::HEADERS,
            ES_EH | flag::PADDED | flag::PRIORITY,
            1,
            &padded,
        ));
        assert_eq!(
            fr(&p),
            FirstRequest::Ready {
                early: Some(p.len())
            }
        );
    }

    #[test]
    fn head_and_options_are_safe_in_every_literal_form() {
        let early_alone = |block: &[u8]| {
            let mut b = start();
            b.extend(frame(kind::HEADERS, ES_EH, 1, block));
            fr(&b)
                == FirstRequest::Ready {
                    early: Some(b.len()),
                }
        };
        let rest = [0x87, 0x84, 0x41, 0x01, b'a'];
        let block = |first: u8, value: &[u8]| {
            let mut v = vec![first];
            v.extend(value);
            v.extend(rest);
            v
        };
        for value in SAFE_METHOD_VALUES {
            for first in [0x42, 0x02, 0x12] {
                assert!(early_alone(&block(first, value)), "{first:#x} {value:x?}");
            }
            // Any other name index, or an indexed field, is not `:method`.
            assert!(!early_alone(&block(0x43, value)));
            assert!(!early_alone(&block(0x03, value)));
        }
        // Values that only look alike: longer, shorter, another method.
        for value in [
            &b"\x05HEADX"[..],
            b"\x03HEA",
            b"\x04POST",
            b"\x06DELETE",
            b"\x07OPTIONZ",
            &[0x83, 0xc7, 0x82, 0x1b],
            &[0x85, 0xc7, 0x82, 0x1b, 0xff, 0xff],
        ] {
            assert!(!early_alone(&block(0x42, value)), "{value:x?}");
        }
        // A method from the dynamic table (index 62 and up) is not read.
        assert!(!early_alone(&[0xbe, 0x87, 0x84]));
        // A run of HEAD, OPTIONS and GET requests is early as a whole.
        let mut b = start();
        b.extend(frame(
            kind::HEADERS,
            ES_EH,
            1,
            &block(0x42, SAFE_METHOD_VALUES[0]),
        ));
        b.extend(frame(
            kind::HEADERS,
            ES_EH,
            3,
            &block(0x42, SAFE_METHOD_VALUES[1]),
        ));
        b.extend(frame(kind::HEADERS, ES_EH, 5, GET_BLOCK));
        assert_eq!(
            fr(&b),
            FirstRequest::Ready {
                early: Some(b.len())
            }
        );
    }

    #[test]
    fn only_a_leading_run_of_bodiless_gets_is_early() {
        let not_early = FirstRequest::Ready { early: None };
        let with = |frames: &[Vec<u8>]| {
            let mut b = start();
            for f in frames {
                b.extend(f);
            }
            fr(&b)
        };
        // POST, or GET with a body (no END_STREAM).
        assert_eq!(
            with(&[frame(kind::HEADERS, ES_EH, 1, POST_BLOCK)]),
            not_early
        );
        assert_eq!(
            with(&[frame(kind::HEADERS, flag::END_HEADERS, 1, GET_BLOCK)]),
            not_early
        );
        // A run of bodiless GETs is early; what follows it stays out.
        let get = frame(kind::HEADERS, ES_EH, 1, GET_BLOCK);
        let get3 = frame(kind::HEADERS, ES_EH, 3, GET_BLOCK);
        let (one_len, two_len) = (
            start().len() + get.len(),
            start().len() + get.len() + get3.len(),
        );
        let (one, two) = (Some(one_len), Some(two_len));
        assert_eq!(
            with(&[get.clone(), get3.clone()]),
            FirstRequest::Ready { early: two }
        );
        for next in [
            frame(kind::HEADERS, flag::END_HEADERS, 3, POST_BLOCK),
            frame(kind::HEADERS, flag::END_HEADERS, 3, GET_BLOCK),
            frame(kind::DATA, 0, 1, b"x"),
            get[..4].to_vec(),
            get3[..12].to_vec(),
        ] {
            assert_eq!(
                with(&[get.clone(), next.clone()]),
                FirstRequest::Ready { early: one }
            );
            assert_eq!(
                with(&[get.clone(), get3.clone(), next]),
                FirstRequest::Ready { early: two }
            );
        }
        // A GET after the run ended does not extend it.
        let post = frame(kind::HEADERS, ES_EH, 3, POST_BLOCK);
        let get5 = frame(kind::HEADERS, ES_EH, 5, GET_BLOCK);
        assert_eq!(
            with(&[get.clone(), post, get5]),
            FirstRequest::Ready { early: one }
        );
        // Only what fits in the server's early-data limit.
        let mut b = start();
        b.extend(&get);
        b.extend(&get3);
        let limit = two_len - 1;
        assert_eq!(first_request(&b, limit), FirstRequest::Ready { early: one });
        assert_eq!(
            first_request(&b, one_len - 1),
            FirstRequest::Ready { early: None }
        );
        // Frames that are not the client's to send first.
        assert_eq!(with(&[frame(kind::DATA, 0, 1, b"x")]), not_early);
        assert_eq!(
            with(&[frame(kind::RST_STREAM, 0, 1, &[0, 0, 0, 8])]),
            not_early
        );
        // A frame inside a header block, or a CONTINUATION of another stream.
        assert_eq!(
            with(&[
                frame(kind::HEADERS, flag::END_STREAM, 1, GET_BLOCK),
                frame(kind::PING, 0, 0, &[0; 8]),
            ]),
            not_early
        );
        assert_eq!(
            with(&[
                frame(kind::HEADERS, flag::END_STREAM, 1, GET_BLOCK),
                frame(kind::CONTINUATION, flag::END_HEADERS, 3, b""),
            ]),
            not_early
        );
        // Padding longer than the frame.
        assert_eq!(
            with(&[frame(kind::HEADERS, ES_EH | flag::PADDED, 1, &[9, 0x82])]),
            not_early
        );
        // Not HTTP/2 at all.
        assert_eq!(fr(b"GET / HTTP/1.1\r\n\r\n"), not_early);
        // A request on an even stream, or on one not above the last, opens
        // no request (RFC 9113 §5.1.1), as `walk_early` counts.
        assert_eq!(
            with(&[frame(kind::HEADERS, ES_EH, 2, GET_BLOCK)]),
            not_early
        );
        let first = frame(kind::HEADERS, ES_EH, 3, GET_BLOCK);
        let n = start().len() + first.len();
        assert_eq!(
            with(&[first, frame(kind::HEADERS, ES_EH, 1, GET_BLOCK)]),
            FirstRequest::Ready { early: Some(n) }
        );
    }

    /// Found by the `http2_early` fuzz target (2026-12-06): a GET's header
    /// block on stream 0x8282 (even) was early for `first_request` while
    /// `walk_early` saw no request begun.
    #[test]
    fn a_headers_frame_on_an_even_stream_is_no_early_request() {
        let b: &[u8] = &[
            80, 82, 73, 32, 42, 32, 72, 84, 84, 80, 47, 50, 46, 48, 13, 10, 13, 10, 83, 77, 13, 10,
            13, 10, 0, 0, 10, 1, 183, 0, 0, 130, 130, 130, 130, 130, 130, 130, 130, 32, 42, 32, 72,
            84, 255, 84, 88, 0, 63, 0, 0, 0, 0, 0, 0, 58, 92, 13, 84, 88, 0, 63, 0, 0, 0, 0, 0, 0,
            58, 92, 13, 10, 10,
        ];
        crate::testing::http2_walkers(b);
        assert_eq!(
            first_request(b, usize::MAX),
            FirstRequest::Ready { early: None }
        );
    }

    proptest::proptest! {
        /// On any bytes after the preface: no panic; an early-safe first
        /// request implies a whole-frame walk with exactly one HEADERS.
        #[test]
        fn walkers_agree(tail in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..300)) {
            let mut b = PREFACE.to_vec();
            b.extend(&tail);
            crate::testing::http2_walkers(&b);
            crate::testing::http2_walkers(&tail);
        }
    }

    #[test]
    fn walkers_agree_on_built_requests() {
        let mut b = start();
        b.extend(frame(kind::HEADERS, ES_EH, 1, GET_BLOCK));
        for n in 0..=b.len() {
            crate::testing::http2_walkers(&b[..n]);
        }
    }
}
