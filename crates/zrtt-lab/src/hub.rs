//! The delay hub: reads IPv4 packets from every host's TUN device and writes
//! each to the destination host's TUN device once its link delay has passed.
//!
//! Two threads:
//! * the *reader* polls all (non-blocking) TUN descriptors, timestamps each
//!   packet as soon as it is read, applies loss / rate / queue limits and
//!   schedules it for `now + delay` in a deadline-ordered heap;
//! * the *sender* sleeps on a condition variable until `spin_margin` before
//!   the earliest deadline, then busy-spins until the deadline and writes the
//!   packet, recording how late it was.
//!
//! Both threads ask for `SCHED_FIFO` so that wake-ups are not delayed by
//! ordinary processes. Per (src, dst) pair, deadlines are forced to be
//! non-decreasing and ties are broken by arrival order, so each pair is FIFO.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::fs::File;
use std::io::{self, Read, Write};
use std::net::Ipv4Addr;
use std::os::fd::{AsRawFd, RawFd};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, RwLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::{anyhow, Context, Result};

use crate::ecmp::Anycast;
use crate::impair::{self, DropCause, Fate, Flows, SplitMix64};
use crate::lateness::{Histogram, LatenessStats};
use crate::packet::{self, ipv4_dst};
use crate::sys;
use crate::topology::Link;

/// How long the reader blocks in `poll` before re-checking the stop flag.
const POLL_TIMEOUT_MS: i32 = 20;
/// Longest idle wait of the sender before re-checking the stop flag.
const IDLE_WAIT: Duration = Duration::from_millis(50);
/// Max packets read from one device per poll round (fairness).
const READ_BURST: usize = 64;

/// Counters and timing statistics of the hub.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HubStats {
    /// Packets written to their destination device.
    pub forwarded: u64,
    /// Packets dropped by the configured loss probability.
    pub dropped_loss: u64,
    /// SYNs with data dropped by a middlebox ([`SynData::Drop`](crate::SynData::Drop)).
    pub dropped_syn_data: u64,
    /// SYNs whose data a middlebox stripped ([`SynData::Strip`](crate::SynData::Strip)).
    pub stripped_syn_data: u64,
    /// Data segments of non-TLS flows dropped by a TLS-only middlebox
    /// ([`Link::tls_only`]).
    pub dropped_tls_only: u64,
    /// Extra copies delivered by duplication.
    pub duplicated: u64,
    /// Packets held back so that later ones overtook them.
    pub reordered: u64,
    /// Packets dropped because their pair's queue was full (drop-tail).
    pub dropped_queue: u64,
    /// Packets that were not IPv4 or had no lab host as destination.
    pub dropped_unroutable: u64,
    /// Failed reads from TUN devices (other than "would block").
    pub read_errors: u64,
    /// Failed writes to TUN devices.
    pub write_errors: u64,
    /// Packets currently waiting for their deadline.
    pub queued: usize,
    /// Sender lateness (write time minus deadline).
    pub lateness: LatenessStats,
    /// SCHED_FIFO priority the hub threads run with, if obtained.
    pub realtime_priority: Option<i32>,
    /// Why real-time priority could not be obtained (the hub still runs).
    pub realtime_error: Option<String>,
}

/// Parameters of the hub, fixed at start.
pub(crate) struct HubConfig {
    pub addrs: Vec<Ipv4Addr>,
    pub links: Vec<Link>, // n * n, index from * n + to
    pub seed: u64,
    pub queue_limit: usize,
    pub spin_margin: Duration,
    pub rt_priority: Option<i32>,
    /// Anycast addresses and their members in service (ECMP).
    pub anycast: Vec<Anycast>,
}

struct Scheduled {
    deadline: Instant,
    seq: u64,
    dst: usize,
    pair: usize,
    data: Vec<u8>,
}

impl PartialEq for Scheduled {
    fn eq(&self, other: &Self) -> bool {
        self.deadline == other.deadline && self.seq == other.seq
    }
}
impl Eq for Scheduled {}
impl PartialOrd for Scheduled {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Scheduled {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        (self.deadline, self.seq).cmp(&(other.deadline, other.seq))
    }
}

struct Queue {
    heap: BinaryHeap<Reverse<Scheduled>>,
    per_pair: Vec<usize>,
}

#[derive(Default)]
struct Counters {
    forwarded: AtomicU64,
    dropped_loss: AtomicU64,
    dropped_syn_data: AtomicU64,
    stripped_syn_data: AtomicU64,
    dropped_tls_only: AtomicU64,
    duplicated: AtomicU64,
    reordered: AtomicU64,
    dropped_queue: AtomicU64,
    dropped_unroutable: AtomicU64,
    read_errors: AtomicU64,
    write_errors: AtomicU64,
}

struct Shared {
    n: usize,
    queue: Mutex<Queue>,
    cv: Condvar,
    links: RwLock<Vec<Link>>,
    anycast: RwLock<Vec<Anycast>>,
    stop: AtomicBool,
    counters: Counters,
    hist: Mutex<Histogram>,
    rt_errors: Mutex<Vec<String>>,
    rt_priority: Option<i32>,
    /// Per source host: arrival of its first packet since the tap was
    /// armed, as nanoseconds after `epoch` plus one (0 = armed, nothing yet;
    /// `u64::MAX` = not armed).
    first_rx: Vec<AtomicU64>,
    epoch: Instant,
}

const TAP_ARMED: u64 = 0;
const TAP_OFF: u64 = u64::MAX;

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// A running hub. Dropping it stops the threads and closes the TUN devices.
pub(crate) struct Hub {
    shared: Arc<Shared>,
    threads: Vec<JoinHandle<()>>,
}

impl Hub {
    /// Starts the reader and sender threads over `devices` (index = host).
    pub(crate) fn start(devices: Vec<File>, cfg: HubConfig) -> Result<Hub> {
        let n = devices.len();
        if cfg.addrs.len() != n || cfg.links.len() != n * n {
            return Err(anyhow!("hub configuration does not match device count"));
        }
        let shared = Arc::new(Shared {
            n,
            queue: Mutex::new(Queue {
                heap: BinaryHeap::new(),
                per_pair: vec![0; n * n],
            }),
            cv: Condvar::new(),
            links: RwLock::new(cfg.links.clone()),
            anycast: RwLock::new(cfg.anycast.clone()),
            stop: AtomicBool::new(false),
            counters: Counters::default(),
            hist: Mutex::new(Histogram::new()),
            rt_errors: Mutex::new(Vec::new()),
            rt_priority: cfg.rt_priority,
            first_rx: (0..n).map(|_| AtomicU64::new(TAP_OFF)).collect(),
            epoch: Instant::now(),
        });
        let devices = Arc::new(devices);
        let mut hub = Hub {
            shared: shared.clone(),
            threads: Vec::new(),
        };

        let (s, d) = (shared.clone(), devices.clone());
        let margin = cfg.spin_margin;
        let sender = std::thread::Builder::new()
            .name("zrtt-hub-send".into())
            .spawn(move || {
                enter_realtime(&s, "sender");
                sender_loop(&s, &d, margin);
            })
            .context("spawning hub sender thread")?;
        hub.threads.push(sender);

        let (s, d) = (shared, devices);
        let reader = std::thread::Builder::new()
            .name("zrtt-hub-recv".into())
            .spawn(move || {
                enter_realtime(&s, "reader");
                reader_loop(&s, &d, &cfg);
            });
        match reader {
            Ok(h) => hub.threads.push(h),
            Err(e) => {
                let _ = hub.stop();
                return Err(e).context("spawning hub reader thread");
            }
        }
        Ok(hub)
    }

    /// Replaces the link used for packets from host `from` to host `to`.
    /// Already queued packets keep their deadlines.
    pub(crate) fn set_link(&self, from: usize, to: usize, link: Link) {
        let mut links = self.shared.links.write().unwrap_or_else(|e| e.into_inner());
        if let Some(l) = links.get_mut(from * self.shared.n + to) {
            *l = link;
        }
    }

    /// Sets the members in service of anycast address number `i`.
    pub(crate) fn set_anycast(&self, i: usize, hosts: Vec<usize>, addrs: Vec<Ipv4Addr>) {
        let mut a = self
            .shared
            .anycast
            .write()
            .unwrap_or_else(|e| e.into_inner());
        if let Some(a) = a.get_mut(i) {
            (a.hosts, a.addrs) = (hosts, addrs);
        }
    }

    /// Anycast address number `i` as the hub routes it now.
    pub(crate) fn anycast(&self, i: usize) -> Option<Anycast> {
        let a = self
            .shared
            .anycast
            .read()
            .unwrap_or_else(|e| e.into_inner());
        a.get(i).cloned()
    }

    pub(crate) fn link(&self, from: usize, to: usize) -> Option<Link> {
        let links = self.shared.links.read().unwrap_or_else(|e| e.into_inner());
        links.get(from * self.shared.n + to).copied()
    }

    pub(crate) fn stats(&self) -> HubStats {
        let c = &self.shared.counters;
        let rt_errors = lock(&self.shared.rt_errors);
        let (realtime_priority, realtime_error) = match self.shared.rt_priority {
            None => (None, Some("real-time priority not requested".to_string())),
            Some(p) if rt_errors.is_empty() => (Some(p), None),
            Some(_) => (None, Some(rt_errors.join("; "))),
        };
        HubStats {
            forwarded: c.forwarded.load(Ordering::Relaxed),
            dropped_loss: c.dropped_loss.load(Ordering::Relaxed),
            dropped_syn_data: c.dropped_syn_data.load(Ordering::Relaxed),
            stripped_syn_data: c.stripped_syn_data.load(Ordering::Relaxed),
            dropped_tls_only: c.dropped_tls_only.load(Ordering::Relaxed),
            duplicated: c.duplicated.load(Ordering::Relaxed),
            reordered: c.reordered.load(Ordering::Relaxed),
            dropped_queue: c.dropped_queue.load(Ordering::Relaxed),
            dropped_unroutable: c.dropped_unroutable.load(Ordering::Relaxed),
            read_errors: c.read_errors.load(Ordering::Relaxed),
            write_errors: c.write_errors.load(Ordering::Relaxed),
            queued: lock(&self.shared.queue).heap.len(),
            lateness: lock(&self.shared.hist).stats(),
            realtime_priority,
            realtime_error,
        }
    }

    /// Arms the first-packet tap of host `src`: the next packet read from
    /// its device is timestamped (see [`Hub::first_packet`]).
    pub(crate) fn arm_first_packet(&self, src: usize) {
        if let Some(a) = self.shared.first_rx.get(src) {
            a.store(TAP_ARMED, Ordering::SeqCst);
        }
    }

    /// When the hub read the first packet from host `src` after the tap was
    /// armed (`None` if nothing came yet or the tap is not armed).
    pub(crate) fn first_packet(&self, src: usize) -> Option<Instant> {
        let v = self.shared.first_rx.get(src)?.load(Ordering::SeqCst);
        if v == TAP_ARMED || v == TAP_OFF {
            return None;
        }
        Some(self.shared.epoch + Duration::from_nanos(v - 1))
    }

    pub(crate) fn reset_stats(&self) {
        let c = &self.shared.counters;
        for a in [
            &c.forwarded,
            &c.dropped_loss,
            &c.dropped_syn_data,
            &c.stripped_syn_data,
            &c.dropped_tls_only,
            &c.duplicated,
            &c.reordered,
            &c.dropped_queue,
            &c.dropped_unroutable,
            &c.read_errors,
            &c.write_errors,
        ] {
            a.store(0, Ordering::Relaxed);
        }
        *lock(&self.shared.hist) = Histogram::new();
    }

    /// Stops both threads (bounded: they re-check the stop flag at least every
    /// 50 ms) and closes the devices.
    pub(crate) fn stop(&mut self) -> Result<()> {
        self.shared.stop.store(true, Ordering::SeqCst);
        {
            let _q = lock(&self.shared.queue);
            self.shared.cv.notify_all();
        }
        let mut panicked = false;
        for t in self.threads.drain(..) {
            panicked |= t.join().is_err();
        }
        lock(&self.shared.queue).heap.clear();
        if panicked {
            Err(anyhow!("a hub thread panicked"))
        } else {
            Ok(())
        }
    }
}

impl Drop for Hub {
    fn drop(&mut self) {
        let _ = self.stop();
    }
}

fn enter_realtime(s: &Shared, who: &str) {
    if let Some(p) = s.rt_priority {
        if let Err(e) = sys::set_realtime(p) {
            lock(&s.rt_errors).push(format!("{who}: SCHED_FIFO {p}: {e}"));
        }
    }
}

fn reader_loop(s: &Shared, devices: &[File], cfg: &HubConfig) {
    let n = s.n;
    let raw: Vec<RawFd> = devices.iter().map(|f| f.as_raw_fd()).collect();
    let by_addr: HashMap<Ipv4Addr, usize> =
        cfg.addrs.iter().enumerate().map(|(i, &a)| (a, i)).collect();
    let mut rng = SplitMix64::new(cfg.seed);
    let mut flows = Flows::default();
    let mut last_deadline: Vec<Option<Instant>> = vec![None; n * n];
    let mut next_free: Vec<Option<Instant>> = vec![None; n * n];
    let mut seq: u64 = 0;
    let mut ready = Vec::with_capacity(n);
    let mut buf = vec![0u8; 65_536];

    while !s.stop.load(Ordering::Relaxed) {
        if sys::poll_readable(&raw, POLL_TIMEOUT_MS, &mut ready).is_err() {
            s.counters.read_errors.fetch_add(1, Ordering::Relaxed);
            std::thread::sleep(Duration::from_millis(5));
            continue;
        }
        for &src in &ready {
            let mut dev = &devices[src];
            for _ in 0..READ_BURST {
                let len = match dev.read(&mut buf) {
                    Ok(0) => break,
                    Ok(len) => len,
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                    Err(_) => {
                        s.counters.read_errors.fetch_add(1, Ordering::Relaxed);
                        break;
                    }
                };
                let now = Instant::now();
                let pkt = &buf[..len];
                let tap = &s.first_rx[src];
                if tap.load(Ordering::Relaxed) == TAP_ARMED {
                    let ns = now.saturating_duration_since(s.epoch).as_nanos();
                    let v = (ns as u64).saturating_add(1).min(TAP_OFF - 1);
                    let _ = tap.compare_exchange(TAP_ARMED, v, Ordering::SeqCst, Ordering::Relaxed);
                }
                let Some(dst) = ipv4_dst(pkt).and_then(|a| match by_addr.get(&a) {
                    Some(&i) => Some(i),
                    None => {
                        let any = s.anycast.read().unwrap_or_else(|e| e.into_inner());
                        any.iter().find(|x| x.addr == a)?.route(pkt)
                    }
                }) else {
                    s.counters
                        .dropped_unroutable
                        .fetch_add(1, Ordering::Relaxed);
                    continue;
                };
                let pair = src * n + dst;
                let link = {
                    let links = s.links.read().unwrap_or_else(|e| e.into_inner());
                    links[pair]
                };
                if link.tls_only && flows.drops(pkt) {
                    s.counters.dropped_tls_only.fetch_add(1, Ordering::Relaxed);
                    continue;
                }
                let delivery = match impair::decide(&link, pkt, &mut rng) {
                    Fate::Drop(cause) => {
                        let c = match cause {
                            DropCause::Loss => &s.counters.dropped_loss,
                            DropCause::SynData => &s.counters.dropped_syn_data,
                        };
                        c.fetch_add(1, Ordering::Relaxed);
                        continue;
                    }
                    Fate::Deliver(d) => d,
                };
                let mut data = pkt.to_vec();
                if delivery.strip_syn_data && packet::strip_syn_data(&mut data) {
                    s.counters.stripped_syn_data.fetch_add(1, Ordering::Relaxed);
                }
                let len = data.len();
                // Serialisation at the bottleneck rate, queued behind earlier
                // packets of the same direction.
                let (tx_done, new_free) = match link.rate {
                    Some(rate) if rate > 0 => {
                        let start = next_free[pair].map_or(now, |t| t.max(now));
                        let tx_ns = (len as u128 * 1_000_000_000u128) / u128::from(rate);
                        let done = start + Duration::from_nanos(tx_ns.min(u64::MAX as u128) as u64);
                        (done, Some(done))
                    }
                    _ => (now, next_free[pair]),
                };
                let mut deadline = tx_done + link.delay;
                if let Some(last) = last_deadline[pair] {
                    deadline = deadline.max(last); // keep the pair FIFO
                }
                let copies = 1 + usize::from(delivery.duplicate);
                let mut q = lock(&s.queue);
                if q.per_pair[pair] + copies > cfg.queue_limit {
                    drop(q);
                    s.counters.dropped_queue.fetch_add(1, Ordering::Relaxed);
                    continue;
                }
                next_free[pair] = new_free;
                match delivery.hold {
                    // Held back: later packets keep the order among
                    // themselves and overtake this one.
                    Some(hold) => {
                        deadline += hold;
                        s.counters.reordered.fetch_add(1, Ordering::Relaxed);
                    }
                    None => last_deadline[pair] = Some(deadline),
                }
                if delivery.duplicate {
                    s.counters.duplicated.fetch_add(1, Ordering::Relaxed);
                }
                let new_head = q.heap.peek().is_none_or(|h| deadline < h.0.deadline);
                for i in 0..copies {
                    q.per_pair[pair] += 1;
                    q.heap.push(Reverse(Scheduled {
                        deadline,
                        seq,
                        dst,
                        pair,
                        data: if i + 1 == copies {
                            std::mem::take(&mut data)
                        } else {
                            data.clone()
                        },
                    }));
                    seq += 1;
                }
                drop(q);
                if new_head {
                    s.cv.notify_one();
                }
            }
        }
    }
}

fn sender_loop(s: &Shared, devices: &[File], margin: Duration) {
    let mut q = lock(&s.queue);
    loop {
        if s.stop.load(Ordering::Relaxed) {
            return;
        }
        let Some(head) = q.heap.peek() else {
            q =
                s.cv.wait_timeout(q, IDLE_WAIT)
                    .map(|r| r.0)
                    .unwrap_or_else(|e| e.into_inner().0);
            continue;
        };
        let deadline = head.0.deadline;
        let now = Instant::now();
        if deadline > now {
            let wait = deadline - now;
            if wait > margin {
                let sleep = (wait - margin).min(IDLE_WAIT);
                q =
                    s.cv.wait_timeout(q, sleep)
                        .map(|r| r.0)
                        .unwrap_or_else(|e| e.into_inner().0);
                continue;
            }
            // Close to the deadline: release the lock and busy-spin.
            drop(q);
            while Instant::now() < deadline {
                if s.stop.load(Ordering::Relaxed) {
                    return;
                }
                std::hint::spin_loop();
            }
            q = lock(&s.queue);
            continue;
        }
        let Some(Reverse(pkt)) = q.heap.pop() else {
            continue;
        };
        q.per_pair[pkt.pair] = q.per_pair[pkt.pair].saturating_sub(1);
        drop(q);
        let sent_at = Instant::now();
        let mut dev = &devices[pkt.dst];
        match dev.write(&pkt.data) {
            Ok(_) => {
                s.counters.forwarded.fetch_add(1, Ordering::Relaxed);
            }
            Err(_) => {
                s.counters.write_errors.fetch_add(1, Ordering::Relaxed);
            }
        }
        let late = sent_at.saturating_duration_since(pkt.deadline);
        lock(&s.hist).record(late.as_nanos().min(u64::MAX as u128) as u64);
        q = lock(&s.queue);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use std::os::fd::OwnedFd;
    use std::os::unix::net::UnixDatagram;

    const A: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 1);
    const B: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 2);

    /// A hub over two fake devices (datagram socketpairs); returns the hub and
    /// the "host side" ends.
    fn fake_hub(link: Link, queue_limit: usize) -> (Hub, Vec<UnixDatagram>) {
        let mut devices = Vec::new();
        let mut hosts = Vec::new();
        for _ in 0..2 {
            let (hub_end, host_end) = UnixDatagram::pair().unwrap();
            hub_end.set_nonblocking(true).unwrap();
            host_end
                .set_read_timeout(Some(Duration::from_secs(2)))
                .unwrap();
            devices.push(File::from(OwnedFd::from(hub_end)));
            hosts.push(host_end);
        }
        let hub = Hub::start(
            devices,
            HubConfig {
                addrs: vec![A, B],
                links: vec![link; 4],
                seed: 1,
                queue_limit,
                spin_margin: Duration::from_millis(1),
                rt_priority: None,
                anycast: Vec::new(),
            },
        )
        .unwrap();
        (hub, hosts)
    }

    fn packet(dst: Ipv4Addr, tag: u8, len: usize) -> Vec<u8> {
        let mut p = vec![0u8; len.max(21)];
        p[0] = 0x45;
        p[16..20].copy_from_slice(&dst.octets());
        p[20] = tag;
        p
    }

    fn recv_tag(sock: &UnixDatagram) -> Option<u8> {
        let mut buf = [0u8; 2048];
        sock.recv(&mut buf).ok().map(|_| buf[20])
    }

    #[test]
    fn delays_and_keeps_pairs_fifo() {
        let (hub, hosts) = fake_hub(Link::delay(Duration::from_millis(60)), 100);
        let t0 = Instant::now();
        hosts[0].send(&packet(B, 1, 40)).unwrap();
        std::thread::sleep(Duration::from_millis(5));
        // A later packet on a now much shorter link must not overtake.
        hub.set_link(0, 1, Link::delay(Duration::ZERO));
        hosts[0].send(&packet(B, 2, 40)).unwrap();
        assert_eq!(recv_tag(&hosts[1]), Some(1));
        assert!(t0.elapsed() >= Duration::from_millis(60));
        assert_eq!(recv_tag(&hosts[1]), Some(2));
        // Unknown destinations and non-IPv4 are dropped and counted.
        hosts[0]
            .send(&packet(Ipv4Addr::new(198, 18, 9, 9), 3, 40))
            .unwrap();
        hosts[0].send(&[0x60; 40]).unwrap();
        std::thread::sleep(Duration::from_millis(50));
        let st = hub.stats();
        assert_eq!(st.forwarded, 2);
        assert_eq!(st.dropped_unroutable, 2);
        assert_eq!(st.lateness.count, 2);
    }

    #[test]
    fn queue_limit_drops_tail() {
        let (hub, hosts) = fake_hub(Link::delay(Duration::from_millis(100)), 5);
        for i in 0..20 {
            hosts[0].send(&packet(B, i, 40)).unwrap();
        }
        for i in 0..5 {
            assert_eq!(recv_tag(&hosts[1]), Some(i));
        }
        std::thread::sleep(Duration::from_millis(20));
        let st = hub.stats();
        assert_eq!(st.forwarded, 5);
        assert_eq!(st.dropped_queue, 15);
    }

    #[test]
    fn loss_and_rate() {
        let (hub, hosts) = fake_hub(Link::delay(Duration::ZERO).with_loss(1.0), 100);
        hosts[0].send(&packet(B, 1, 40)).unwrap();
        std::thread::sleep(Duration::from_millis(50));
        assert_eq!(hub.stats().dropped_loss, 1);
        // 10 × 1000 bytes at 100 kB/s: the last one leaves after ~100 ms.
        hub.set_link(0, 1, Link::delay(Duration::ZERO).with_rate(Some(100_000)));
        let t0 = Instant::now();
        for i in 0..10 {
            hosts[0].send(&packet(B, i, 1000)).unwrap();
        }
        for i in 0..10 {
            assert_eq!(recv_tag(&hosts[1]), Some(i));
        }
        assert!(
            t0.elapsed() >= Duration::from_millis(95),
            "{:?}",
            t0.elapsed()
        );
        hub.reset_stats();
        assert_eq!(hub.stats().forwarded, 0);
    }

    #[test]
    fn duplicates_reorders_and_strips() {
        use crate::SynData;
        // Every packet duplicated.
        let (hub, hosts) = fake_hub(Link::delay(Duration::ZERO).with_duplicate(1.0), 100);
        hosts[0].send(&packet(B, 1, 40)).unwrap();
        assert_eq!(recv_tag(&hosts[1]), Some(1));
        assert_eq!(recv_tag(&hosts[1]), Some(1));
        // Every packet held 80 ms: a later one on a link without hold
        // overtakes it.
        hub.set_link(
            0,
            1,
            Link::delay(Duration::ZERO).with_reorder(1.0, Duration::from_millis(80)),
        );
        hosts[0].send(&packet(B, 2, 40)).unwrap();
        std::thread::sleep(Duration::from_millis(5));
        hub.set_link(0, 1, Link::delay(Duration::ZERO));
        hosts[0].send(&packet(B, 3, 40)).unwrap();
        assert_eq!(recv_tag(&hosts[1]), Some(3));
        assert_eq!(recv_tag(&hosts[1]), Some(2));
        // A middlebox strips SYN data, another drops it.
        hub.set_link(
            0,
            1,
            Link::delay(Duration::ZERO).with_syn_data(SynData::Strip),
        );
        let syn = packet::syn_with_data((A, 1000), (B, 443), 5, &[0xd7; 100]);
        hosts[0].send(&syn).unwrap();
        let mut buf = [0u8; 2048];
        let n = hosts[1].recv(&mut buf).unwrap();
        assert_eq!(n, 44, "the SYN without its data");
        hub.set_link(
            0,
            1,
            Link::delay(Duration::ZERO).with_syn_data(SynData::Drop),
        );
        hosts[0].send(&syn).unwrap();
        hosts[0].send(&packet(B, 4, 40)).unwrap();
        assert_eq!(recv_tag(&hosts[1]), Some(4));
        let st = hub.stats();
        assert_eq!(
            (
                st.duplicated,
                st.reordered,
                st.stripped_syn_data,
                st.dropped_syn_data
            ),
            (1, 1, 1, 1)
        );
    }
}
