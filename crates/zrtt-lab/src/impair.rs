//! What a link does to one packet, decided apart from any I/O so that it
//! can be tested: the middlebox's treatment of SYNs carrying data, random
//! loss, duplication and reordering, all drawn from one seeded PRNG (runs
//! with the same seed and the same traffic make the same decisions).
//!
//! Draws happen only for impairments that are on, in a fixed order (loss,
//! duplicate, reorder), so a link with only loss draws exactly as the hub
//! always did.

use std::collections::HashMap;
use std::net::Ipv4Addr;
use std::time::Duration;

use crate::packet;
use crate::topology::{Link, SynData};

/// Small, fast, seedable PRNG (SplitMix64) for the hub's random decisions.
pub(crate) struct SplitMix64(u64);

impl SplitMix64 {
    pub(crate) fn new(seed: u64) -> Self {
        SplitMix64(seed)
    }

    pub(crate) fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in `[0, 1)`.
    pub(crate) fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }

    /// True with probability `p` (no draw when `p` is 0).
    fn chance(&mut self, p: f64) -> bool {
        p > 0.0 && self.next_f64() < p
    }
}

/// Why a packet was not delivered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum DropCause {
    /// The link's random loss.
    Loss,
    /// A middlebox dropping SYNs that carry data.
    SynData,
}

/// How a packet is delivered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Delivery {
    /// Strip the data from this SYN first.
    pub(crate) strip_syn_data: bool,
    /// Deliver a second copy right after it.
    pub(crate) duplicate: bool,
    /// Hold it back this long beyond its deadline (later packets overtake it).
    pub(crate) hold: Option<Duration>,
}

/// The fate of one packet on `link`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Fate {
    /// Not delivered.
    Drop(DropCause),
    /// Delivered as described.
    Deliver(Delivery),
}

/// Decides what `link` does to `pkt`.
pub(crate) fn decide(link: &Link, pkt: &[u8], rng: &mut SplitMix64) -> Fate {
    let syn_data = link.syn_data != SynData::Pass && packet::is_syn_with_data(pkt);
    if syn_data && link.syn_data == SynData::Drop {
        return Fate::Drop(DropCause::SynData);
    }
    if rng.chance(link.loss) {
        return Fate::Drop(DropCause::Loss);
    }
    let duplicate = rng.chance(link.duplicate);
    let hold = rng.chance(link.reorder).then_some(link.reorder_delay);
    Fate::Deliver(Delivery {
        strip_syn_data: syn_data,
        duplicate,
        hold,
    })
}

/// Most flows the filter remembers; beyond it the table starts over
/// (lab runs open far fewer connections in its lifetime of a flow).
const MAX_FLOWS: usize = 1 << 16;

type Endpoint = (Ipv4Addr, u16);

/// A middlebox that lets only TLS through once a connection is set up
/// ([`Link::tls_only`]): it classifies each TCP flow by the first payload
/// it sees (the client's, in its SYN or after the handshake): a TLS
/// handshake record (`16 03`) passes, anything else (zrtt's frames) has
/// every later data segment without SYN dropped, both ways. Segments with
/// SYN (the SYN's data, the SYN-ACK's early answer) are part of the
/// handshake and pass; a client's SYN starts the flow over.
#[derive(Default)]
pub(crate) struct Flows {
    /// Per flow (endpoints in order): whether its first payload was TLS.
    tls: HashMap<(Endpoint, Endpoint), bool>,
}

impl Flows {
    /// Whether the filter drops `pkt`.
    pub(crate) fn drops(&mut self, pkt: &[u8]) -> bool {
        let Some(seg) = packet::tcp_segment(pkt) else {
            return false;
        };
        let key = if seg.src <= seg.dst {
            (seg.src, seg.dst)
        } else {
            (seg.dst, seg.src)
        };
        if seg.opening {
            self.tls.remove(&key);
        }
        if seg.payload.is_empty() {
            return false;
        }
        if self.tls.len() >= MAX_FLOWS && !self.tls.contains_key(&key) {
            self.tls.clear();
        }
        let tls = *self
            .tls
            .entry(key)
            .or_insert_with(|| seg.payload.starts_with(&[0x16, 0x03]));
        !tls && !seg.syn
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv4Addr;

    const A: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 1);
    const B: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 2);

    #[test]
    fn prng_is_uniform_enough_and_seeded() {
        let mut a = SplitMix64::new(1);
        let mut b = SplitMix64::new(1);
        let mut below = 0;
        for _ in 0..10_000 {
            let x = a.next_f64();
            assert_eq!(x, b.next_f64());
            assert!((0.0..1.0).contains(&x));
            if x < 0.3 {
                below += 1;
            }
        }
        assert!((2_700..3_300).contains(&below), "{below}");
    }

    fn plain() -> Fate {
        Fate::Deliver(Delivery {
            strip_syn_data: false,
            duplicate: false,
            hold: None,
        })
    }

    #[test]
    fn clean_link_delivers_without_drawing() {
        let mut rng = SplitMix64::new(3);
        let link = Link::delay(Duration::from_millis(5));
        assert_eq!(decide(&link, &[0x45; 40], &mut rng), plain());
        assert_eq!(rng.next_u64(), SplitMix64::new(3).next_u64(), "no draw");
    }

    #[test]
    fn loss_only_draws_like_before() {
        // The old hub drew once per packet for loss only: same sequence.
        let link = Link::default().with_loss(0.3);
        let (mut rng, mut old) = (SplitMix64::new(9), SplitMix64::new(9));
        for _ in 0..1000 {
            let lost = old.next_f64() < 0.3;
            let fate = decide(&link, &[0x45; 40], &mut rng);
            assert_eq!(fate == Fate::Drop(DropCause::Loss), lost);
        }
    }

    #[test]
    fn rates_and_seeds() {
        let link = Link::default()
            .with_duplicate(0.1)
            .with_reorder(0.2, Duration::from_millis(7));
        let run = |seed| {
            let mut rng = SplitMix64::new(seed);
            (0..20_000)
                .map(|_| decide(&link, &[0x45; 40], &mut rng))
                .collect::<Vec<_>>()
        };
        let a = run(1);
        assert_eq!(a, run(1), "same seed, same decisions");
        assert_ne!(a, run(2));
        let dup = a
            .iter()
            .filter(|f| matches!(f, Fate::Deliver(d) if d.duplicate))
            .count();
        let held = a
            .iter()
            .filter(|f| matches!(f, Fate::Deliver(d) if d.hold == Some(Duration::from_millis(7))))
            .count();
        assert!((1_800..2_200).contains(&dup), "{dup}");
        assert!((3_700..4_300).contains(&held), "{held}");
    }

    #[test]
    fn the_tls_only_filter_drops_a_zrtt_flow_after_its_syn() {
        let data = |from: (Ipv4Addr, u16), to: (Ipv4Addr, u16), payload: &[u8]| {
            let mut p = packet::syn_with_data(from, to, 1, payload);
            p[20 + 13] = 0x18; // PSH|ACK, no SYN
            p
        };
        let mut f = Flows::default();
        let (c, s) = ((A, 40000), (B, 443));
        // zrtt: the SYN's flight passes, later data either way does not,
        // empty ACKs do.
        assert!(!f.drops(&packet::syn_with_data(c, s, 1, b"\xd7flight")));
        assert!(f.drops(&data(s, c, b"reply")));
        assert!(f.drops(&data(c, s, b"more")));
        assert!(!f.drops(&data(c, s, b"")));
        // TLS on another port passes, continuation segments included.
        let t = (A, 40001);
        assert!(!f.drops(&packet::syn_with_data(t, s, 1, b"")));
        assert!(!f.drops(&data(t, s, b"\x16\x03\x01hello")));
        assert!(!f.drops(&data(s, t, b"\x16\x03\x03server")));
        assert!(!f.drops(&data(s, t, b"\x42continuation")));
        // A new connection on the first 4-tuple starts over: TLS now.
        assert!(!f.drops(&packet::syn_with_data(c, s, 9, b"")));
        assert!(!f.drops(&data(c, s, b"\x16\x03\x01hello")));
        assert!(!f.drops(&data(s, c, b"\x17\x03\x03app")));
        // Not TCP: passes.
        assert!(!f.drops(&[0x45; 40]));
    }

    #[test]
    fn middleboxes_act_on_syns_with_data_only() {
        let syn = packet::syn_with_data((A, 1), (B, 2), 1, b"\xd7flight");
        let bare = packet::syn_with_data((A, 1), (B, 2), 1, b"");
        let mut rng = SplitMix64::new(1);
        let drop = Link::default().with_syn_data(SynData::Drop);
        assert_eq!(
            decide(&drop, &syn, &mut rng),
            Fate::Drop(DropCause::SynData)
        );
        assert_eq!(decide(&drop, &bare, &mut rng), plain());
        let strip = Link::default().with_syn_data(SynData::Strip);
        assert_eq!(
            decide(&strip, &syn, &mut rng),
            Fate::Deliver(Delivery {
                strip_syn_data: true,
                duplicate: false,
                hold: None
            })
        );
        assert_eq!(decide(&strip, &bare, &mut rng), plain());
        assert_eq!(decide(&Link::default(), &syn, &mut rng), plain());
    }
}
