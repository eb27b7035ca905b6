//! zrtt emulated-WAN lab.
//!
//! Builds a set of hosts as Linux network namespaces, each with one TUN
//! device, and forwards IPv4 packets between them through a *delay hub*
//! running in this process. The hub adds a per-pair one-way delay, optional
//! random loss, reordering and duplication (seeded), an optional rate limit,
//! and optional middleboxes that drop or strip the data of SYNs ([`SynData`]);
//! it is the lab's replacement for `netem` (which this kernel does not have).
//!
//! * [`Topology`] describes hosts (addresses from 198.18.0.0/15, the RFC 2544
//!   benchmarking range) and links.
//! * [`Lab::up`] builds it (needs root); namespaces are called
//!   `zrtt-<pid>-<seq>-<host>`, and leftovers of dead PIDs are deleted first
//!   ([`cleanup_stale_namespaces`]).
//! * Run programs in a host with [`Lab::command`] + [`Lab::spawn`], or Rust
//!   code (e.g. std sockets) with [`Lab::in_host`] / [`Lab::spawn_in_host`].
//! * Every host namespace has `net.ipv4.tcp_fastopen=3`, so TCP Fast Open
//!   works for clients and servers inside the lab.
//! * Teardown happens in [`Lab::down`], on drop, and on SIGINT/SIGTERM.
//! * [`Topology::anycast`] gives several hosts one address; the hub spreads
//!   flows over them by 5-tuple hash (ECMP), [`Lab::set_anycast_members`]
//!   takes members out of service and back.
//! * [`run_check`] measures how accurately configured RTTs are reproduced.
//!
//! ```no_run
//! use std::time::Duration;
//! use zrtt_lab::{Lab, Topology};
//! # fn main() -> anyhow::Result<()> {
//! let lab = Lab::up(
//!     Topology::new()
//!         .host("client")
//!         .host("server")
//!         .rtt("client", "server", Duration::from_millis(100)),
//! )?;
//! let server = lab.addr("server")?;
//! let sock = lab.in_host("client", || std::net::UdpSocket::bind("0.0.0.0:0"))??;
//! sock.send_to(b"hi", (server, 9))?;
//! lab.down()?;
//! # Ok(())
//! # }
//! ```

mod anycast;
mod check;
mod ecmp;
mod hub;
mod impair;
mod lab;
mod lateness;
mod netns;
mod packet;
mod sys;
mod topology;

pub use check::{run_check, tolerance, CheckOptions, CheckReport, CheckRow, ProbeKind};
pub use ecmp::{flow_hash, member_for};
pub use hub::HubStats;
pub use lab::{
    is_root, teardown_all_labs, HostThread, Lab, LabChild, LabHost, HOST_DEV, KILL_GRACE,
};
pub use lateness::LatenessStats;
pub use netns::{cleanup_stale_namespaces, list_namespaces, parse_ns_pid, ETC_NETNS, NS_PREFIX};
pub use packet::syn_with_data;
pub use topology::{
    in_lab_net, AnycastSpec, HostSpec, Link, SynData, Topology, LAB_NET, LAB_PREFIX,
};
