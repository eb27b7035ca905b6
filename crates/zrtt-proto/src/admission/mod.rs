//! Admission: may a peer be answered before its TCP handshake completes,
//! and with how many bytes (docs/PROTOCOL.md §8).
//!
//! Sans-IO policy, in the way quinn-proto keeps anti-amplification and
//! retry tokens in its core: the shell passes the peer address, what the
//! authenticated first flight carried, its load and the time, and gets back
//! a [`Decision`]: the proof of address used (a trusted network, a token the
//! gateway issued, a quorum of provenance certificates) and the
//! [`AmplificationBudget`] that bounds the bytes sent before the handshake,
//! or "wait for the handshake". Nothing here reads a clock or a socket.
//!
//! The order of a gateway's calls:
//! 1. [`Admission::intake`] before any cryptography: a hard limit answers
//!    busy ([`Intake::is_busy`]); a soft limit makes the flight unprovable
//!    ([`Intake::may_answer_early`] false) so it is served after the
//!    handshake;
//! 2. the core's [`ServerConfig::accept`](crate::handshake::ServerConfig::accept)
//!    decrypts and checks replay;
//! 3. [`Admission::decide`] on the accepted flight.

mod budget;
mod destinations;
mod rate;
mod sources;
mod token;

use std::net::IpAddr;
use std::sync::Mutex;
use std::time::Instant;

pub use budget::{
    AmplificationBudget, ReplyPlan, AMPLIFICATION_FACTOR, INITIAL_WINDOW, REPLY_OVERHEAD,
};
pub use destinations::{DestinationBudgets, DestinationLimits, Withheld};
pub use ipnet::IpNet;
pub use rate::TokenBucket;
pub use sources::{source_prefix, SourceCounts, IPV4_PREFIX, IPV6_PREFIX};
pub use token::{token_key_id, TokenError, TokenKey, TokenKeyRing, TokenKeys};

use crate::handshake::{ext, Accepted};
use crate::provenance::{decode_certificates, ProvenanceError, TrustPolicy, VerifiedCache};
use crate::time::UnixTime;

/// The address as one family: an IPv4-mapped IPv6 address (what a
/// dual-stack listener reports for IPv4 clients) becomes the IPv4 address.
pub fn canonical_ip(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    }
}

/// Load limits. A rate of 0 means unlimited.
#[derive(Clone, Copy, Debug, PartialEq)]
#[non_exhaustive]
pub struct AdmissionLimits {
    /// Concurrent connections beyond which first flights are always served
    /// after the handshake.
    pub max_connections: usize,
    /// Concurrent connections beyond which first flights get Reject Busy.
    pub hard_max_connections: usize,
    /// Concurrent connections from one source address (0: no cap); beyond
    /// it new connections are closed at once.
    pub max_connections_per_address: usize,
    /// Concurrent connections from one source prefix ([`IPV4_PREFIX`],
    /// [`IPV6_PREFIX`]; 0: no cap).
    pub max_connections_per_prefix: usize,
    /// First-flight decryptions per second that may be answered early.
    pub decrypts_per_sec: f64,
    /// First-flight decryptions per second beyond which flights get Reject Busy.
    pub hard_decrypts_per_sec: f64,
    /// Provenance signature checks per second; beyond it flights are
    /// served as unproven (ASAP §2.5), never refused.
    pub provenance_checks_per_sec: f64,
    /// Verified provenance certificates remembered (a returning client
    /// costs no signature check).
    pub provenance_cache_capacity: usize,
}

impl Default for AdmissionLimits {
    fn default() -> Self {
        Self {
            max_connections: 10_000,
            hard_max_connections: 20_000,
            max_connections_per_address: 512,
            max_connections_per_prefix: 2_048,
            decrypts_per_sec: 5_000.0,
            hard_decrypts_per_sec: 20_000.0,
            provenance_checks_per_sec: 20_000.0,
            provenance_cache_capacity: 100_000,
        }
    }
}

/// What counts as proof of address, and the limits on early answers.
///
/// [`AdmissionConfig::default`]: tokens off, nothing trusted, a proven
/// address gets up to one initial window before its handshake completes
/// (within the per-destination budgets); change fields after it. Settings
/// that let an attacker be answered without a real proof sit behind
/// [`AdmissionConfig::dangerous`].
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct AdmissionConfig {
    /// Token keys (shared by a fleet, rotated while serving); `None`
    /// disables tokens.
    pub tokens: Option<TokenKeyRing>,
    /// Load limits.
    pub limits: AdmissionLimits,
    /// Pre-handshake bytes per destination, prefix and in all, with the
    /// cool-down after failed handshakes.
    pub destinations: DestinationLimits,
    /// Bytes a proven address may receive before its handshake completes
    /// when more than three times its flight (at most one record): one
    /// initial congestion window ([`INITIAL_WINDOW`], what a TCP Fast Open
    /// server sends a cookie holder) by default; 0 for the strict 3x
    /// bound of RFC 9000 §8 ([`AdmissionConfig::strict_amplification`]).
    /// What a stale or stolen proof can reflect is bounded by
    /// [`Self::destinations`] either way (docs/PROTOCOL.md §8).
    pub proven_window: usize,
    trusted_networks: Vec<IpNet>,
}

impl Default for AdmissionConfig {
    fn default() -> Self {
        Self {
            tokens: None,
            limits: AdmissionLimits::default(),
            destinations: DestinationLimits::default(),
            proven_window: INITIAL_WINDOW,
            trusted_networks: Vec::new(),
        }
    }
}

/// Settings that weaken the defence against spoofed sources; see
/// [`AdmissionConfig::dangerous`].
#[derive(Debug)]
pub struct DangerousAdmissionConfig<'a> {
    cfg: &'a mut AdmissionConfig,
}

impl AdmissionConfig {
    /// Settings that let spoofed or stale sources be answered with more
    /// than the strict bound: read docs/PROTOCOL.md §8 before using them.
    pub fn dangerous(&mut self) -> DangerousAdmissionConfig<'_> {
        DangerousAdmissionConfig { cfg: self }
    }

    /// Networks whose addresses count as proven without any cryptography.
    pub fn trusted_networks(&self) -> &[IpNet] {
        &self.trusted_networks
    }

    /// Answer proven addresses before their handshake with at most three
    /// times their flight (RFC 9000 §8), not one initial window.
    pub fn strict_amplification(&mut self) -> &mut Self {
        self.proven_window = 0;
        self
    }

    /// Refuse settings that cannot mean what they say: rates that are not
    /// finite or negative (0 means unlimited), a hard limit below the soft one.
    pub fn check(&self) -> Result<(), String> {
        let l = &self.limits;
        let d = &self.destinations;
        for (name, v) in [
            ("decrypts per second", l.decrypts_per_sec),
            ("hard decrypts per second", l.hard_decrypts_per_sec),
            ("provenance checks per second", l.provenance_checks_per_sec),
            ("pre-handshake bytes per second per address", d.address_rate),
            ("pre-handshake burst per address", d.address_burst),
            ("pre-handshake bytes per second per prefix", d.prefix_rate),
            ("pre-handshake burst per prefix", d.prefix_burst),
            ("pre-handshake bytes per second", d.global_rate),
            ("pre-handshake burst", d.global_burst),
        ] {
            if !v.is_finite() || v < 0.0 {
                return Err(format!("{name}: {v} is not a rate (use 0 for unlimited)"));
            }
        }
        if l.hard_max_connections < l.max_connections {
            return Err(format!(
                "hard connection limit {} is below the soft one {}",
                l.hard_max_connections, l.max_connections
            ));
        }
        Ok(())
    }
}

impl DangerousAdmissionConfig<'_> {
    /// Treat every address in `networks` as proven: answered before its
    /// handshake completes, its early request sent to the backend. Anyone
    /// who can spoof a source inside these networks gets both, so trust
    /// only ranges that no path into the listener can spoof.
    pub fn set_trusted_networks(&mut self, networks: Vec<IpNet>) -> &mut Self {
        self.cfg.trusted_networks = networks;
        self
    }
}

/// What proved a peer's address.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Proof {
    /// A configured trusted network.
    TrustedNetwork,
    /// A token this gateway (or its fleet) issued.
    Token,
    /// A TLS session ticket issued to this address (resumption).
    TlsTicket,
    /// A zrtt resumption ticket issued to this address, presented in a
    /// flight only its `psk` holder could build (docs/PROTOCOL.md §12.5).
    ZrttTicket,
    /// Certificates from a quorum of provenance verifiers.
    Provenance {
        /// Verifier ids of the certificates that counted.
        verifiers: Vec<u32>,
        /// Signatures checked for this flight (0: all from the cache).
        signatures_checked: usize,
    },
}

/// The pre-decryption verdict of [`Admission::intake`]; only `intake`
/// makes one, so a caller cannot skip the load limits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Intake {
    busy: bool,
    may_answer_early: bool,
}

impl Intake {
    /// Over a hard limit: answer Reject Busy (after the handshake), do not
    /// decrypt.
    pub fn is_busy(self) -> bool {
        self.busy
    }

    /// Whether the flight may be answered before the handshake if proven
    /// (false over a soft limit: served after the handshake whatever it proves).
    pub fn may_answer_early(self) -> bool {
        !self.busy && self.may_answer_early
    }
}

/// The proofs an authenticated first flight carried, and its size.
#[derive(Clone, Copy, Debug)]
pub struct FlightEvidence<'a> {
    /// The connection's source address.
    pub peer: IpAddr,
    /// Bytes of the first flight received (the frame).
    pub received: usize,
    /// The IK client static key (`None` for NK: tokens and certificates
    /// need one).
    pub client_static: Option<&'a [u8; 32]>,
    /// The address token extension, if any.
    pub token: Option<&'a [u8]>,
    /// The provenance extension, if any.
    pub provenance: Option<&'a [u8]>,
}

impl<'a> FlightEvidence<'a> {
    /// The evidence of an accepted flight of `received` bytes from `peer`.
    pub fn of(accepted: &'a Accepted, peer: IpAddr, received: usize) -> Self {
        Self {
            peer,
            received,
            client_static: accepted.client_static.as_ref(),
            token: accepted.extensions.get(ext::ADDRESS_TOKEN),
            provenance: accepted.extensions.get(ext::PROVENANCE),
        }
    }
}

/// How a provenance check ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ProvenanceOutcome {
    /// The quorum was met.
    Accepted {
        /// Signatures checked (0: all from the cache).
        signatures_checked: usize,
    },
    /// The certificates do not prove the address (the reason).
    Refused(ProvenanceError),
    /// Not checked: the signature-check rate is used up (served as unproven).
    Overloaded,
    /// Not checked: a soft load limit serves the flight after the handshake
    /// whatever it proves.
    SkippedUnderLoad,
}

/// The verdict of [`Admission::decide`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Decision {
    /// The proof of address, when it counts now.
    pub proof: Option<Proof>,
    /// The bytes that may reach the peer before its handshake completes;
    /// `None`: nothing (not even a Reject) until the handshake completes,
    /// and the early request is not forwarded before it either.
    pub budget: Option<AmplificationBudget>,
    /// The token check, when a token was presented and tokens are on.
    pub token: Option<Result<(), TokenError>>,
    /// The provenance check, when certificates were presented, a policy is
    /// configured, and no earlier proof sufficed.
    pub provenance: Option<ProvenanceOutcome>,
    /// A proof was valid but a soft load limit forced the gated path.
    pub forced_gating: bool,
    /// A proof was valid but the destination's budget withheld the early
    /// answer (cool-down after failed handshakes, or bytes used up).
    pub withheld: Option<Withheld>,
}

impl Decision {
    /// Whether the peer may be answered before its handshake completes.
    pub fn answers_early(&self) -> bool {
        self.budget.is_some()
    }
}

/// The admission state of one gateway: its configuration, its rate limits
/// and its cache of verified certificates. Methods take `&self` and lock
/// only briefly (never across a signature check).
#[derive(Debug)]
pub struct Admission {
    config: AdmissionConfig,
    hard_decrypts: Mutex<TokenBucket>,
    soft_decrypts: Mutex<TokenBucket>,
    provenance_checks: Mutex<TokenBucket>,
    verified: Mutex<VerifiedCache>,
    sources: Mutex<SourceCounts>,
    destinations: Mutex<DestinationBudgets>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Admission {
    /// Admission under `config`, with full rate buckets at `now`.
    pub fn new(config: AdmissionConfig, now: Instant) -> Self {
        let l = config.limits;
        Self {
            hard_decrypts: Mutex::new(TokenBucket::new(l.hard_decrypts_per_sec, now)),
            soft_decrypts: Mutex::new(TokenBucket::new(l.decrypts_per_sec, now)),
            provenance_checks: Mutex::new(TokenBucket::new(l.provenance_checks_per_sec, now)),
            verified: Mutex::new(VerifiedCache::new(l.provenance_cache_capacity)),
            sources: Mutex::new(SourceCounts::default()),
            destinations: Mutex::new(DestinationBudgets::new(config.destinations, now)),
            config,
        }
    }

    /// The configuration.
    pub fn config(&self) -> &AdmissionConfig {
        &self.config
    }

    /// A new connection from `peer`: false if its address or prefix already
    /// has as many open connections as allowed (close it at once). Every
    /// `true` must be matched by one [`Self::close_connection`].
    pub fn open_connection(&self, peer: IpAddr) -> bool {
        let l = &self.config.limits;
        lock(&self.sources).try_open(
            peer,
            l.max_connections_per_address,
            l.max_connections_per_prefix,
        )
    }

    /// A connection admitted by [`Self::open_connection`] ended.
    pub fn close_connection(&self, peer: IpAddr) {
        lock(&self.sources).close(peer);
    }

    /// Before decrypting a first flight, with `connections` open (this one
    /// included) at `now`.
    pub fn intake(&self, connections: usize, now: Instant) -> Intake {
        let l = &self.config.limits;
        if connections > l.hard_max_connections || !lock(&self.hard_decrypts).try_take(now) {
            return Intake {
                busy: true,
                may_answer_early: false,
            };
        }
        let may_answer_early =
            connections <= l.max_connections && lock(&self.soft_decrypts).try_take(now);
        Intake {
            busy: false,
            may_answer_early,
        }
    }

    /// [`Self::intake`] for a first flight whose sender can never be
    /// proven (the DNS shortcut's querier), which the caller decrypts only
    /// when it [`Intake::may_answer_early`]: the soft limit is checked
    /// first, so a flight over it takes no hard decryption token, and a
    /// flood of them makes other first flights busy no sooner than the
    /// soft rate allows.
    pub fn intake_unproven(&self, connections: usize, now: Instant) -> Intake {
        let l = &self.config.limits;
        if connections > l.max_connections || !lock(&self.soft_decrypts).try_take(now) {
            return Intake {
                busy: false,
                may_answer_early: false,
            };
        }
        let busy = connections > l.hard_max_connections || !lock(&self.hard_decrypts).try_take(now);
        Intake {
            busy,
            may_answer_early: !busy,
        }
    }

    /// Whether the peer of an accepted flight is proven, and how many bytes
    /// it may receive before its handshake completes. `intake` is what
    /// [`Self::intake`] said for this flight; `provenance` the trust policy
    /// in force (it may change while serving), `None` when provenance is
    /// off; `now` the wall clock for token and certificate validity, `mono`
    /// the monotonic clock for rate limits.
    pub fn decide(
        &self,
        intake: Intake,
        evidence: &FlightEvidence<'_>,
        provenance: Option<&TrustPolicy>,
        now: UnixTime,
        mono: Instant,
    ) -> Decision {
        let peer = canonical_ip(evidence.peer);
        let mut d = Decision {
            proof: None,
            budget: None,
            token: None,
            provenance: None,
            forced_gating: false,
            withheld: None,
        };
        if self
            .config
            .trusted_networks
            .iter()
            .any(|n| n.contains(&peer))
        {
            d.proof = Some(Proof::TrustedNetwork);
        }
        if let (Some(ring), Some(token)) = (&self.config.tokens, evidence.token) {
            let checked = ring.keys().verify(token, peer, evidence.client_static, now);
            if checked.is_ok() && d.proof.is_none() {
                d.proof = Some(Proof::Token);
            }
            d.token = Some(checked);
        }
        let provenance = match (&d.proof, provenance, evidence.provenance) {
            (None, Some(policy), Some(bytes)) if intake.may_answer_early() => Some((policy, bytes)),
            // Under load, certificates that could only prove an address
            // that will be gated anyway are not worth a signature check.
            (None, Some(_), Some(_)) => {
                d.provenance = Some(ProvenanceOutcome::SkippedUnderLoad);
                None
            }
            _ => None,
        };
        if let Some((policy, bytes)) = provenance {
            let checked = decode_certificates(bytes).and_then(|certs| {
                policy.verify_shared(
                    &certs,
                    peer,
                    evidence.client_static,
                    now,
                    &self.verified,
                    &mut || lock(&self.provenance_checks).try_take(mono),
                )
            });
            d.provenance = Some(match checked {
                Ok(q) => {
                    let signatures_checked = q.signatures_checked;
                    d.proof = Some(Proof::Provenance {
                        verifiers: q.verifiers,
                        signatures_checked,
                    });
                    ProvenanceOutcome::Accepted { signatures_checked }
                }
                Err(ProvenanceError::CheckRateExceeded) => ProvenanceOutcome::Overloaded,
                Err(e) => ProvenanceOutcome::Refused(e),
            });
        }
        if d.proof.is_some() {
            self.grant(&mut d, intake, peer, evidence.received, mono);
        }
        d
    }

    /// The budget for a proof established elsewhere (a TLS session ticket
    /// bound to the address it was issued to, [`Proof::TlsTicket`]): the
    /// same load limits and per-destination budgets as a first flight's
    /// proof. `received`: bytes the client sent before the handshake.
    pub fn decide_proven(
        &self,
        intake: Intake,
        peer: IpAddr,
        proof: Proof,
        received: usize,
        mono: Instant,
    ) -> Decision {
        let mut d = Decision {
            proof: Some(proof),
            budget: None,
            token: None,
            provenance: None,
            forced_gating: false,
            withheld: None,
        };
        self.grant(&mut d, intake, canonical_ip(peer), received, mono);
        d
    }

    /// Turn a valid proof into a budget, or gate it (load, destination).
    fn grant(
        &self,
        d: &mut Decision,
        intake: Intake,
        peer: IpAddr,
        received: usize,
        mono: Instant,
    ) {
        if !intake.may_answer_early() {
            d.forced_gating = true;
            d.proof = None;
            return;
        }
        let want = AmplificationBudget::for_flight(received, self.config.proven_window);
        // At least the strict bound, or nothing early.
        let floor = AmplificationBudget::for_flight(received, 0)
            .limit()
            .min(want.limit());
        match lock(&self.destinations).reserve(peer, want.limit(), floor, mono) {
            Ok(granted) => d.budget = Some(AmplificationBudget::new(granted)),
            Err(why) => {
                d.withheld = Some(why);
                d.proof = None;
            }
        }
    }

    /// A decision's budget of `granted` bytes for `peer` will not be used:
    /// the connection closed before its answer for the gateway's own
    /// reasons (source cap, setup error). Without this the grant would stay
    /// pending, and after `max_pending_per_address` such closes the address
    /// would get no early answer again.
    pub fn early_answer_released(&self, peer: IpAddr, granted: usize, mono: Instant) {
        lock(&self.destinations).released(peer, granted, mono);
    }

    /// An early answer to `peer` (a decision with a budget) was followed by
    /// a completed handshake; `unused` bytes of its budget were not sent.
    pub fn early_answer_completed(&self, peer: IpAddr, unused: usize, mono: Instant) {
        lock(&self.destinations).completed(peer, unused, mono);
    }

    /// An early answer to `peer` was not followed by a completed handshake
    /// (reset, timeout): the destination cools down.
    pub fn early_answer_failed(&self, peer: IpAddr, mono: Instant) {
        lock(&self.destinations).failed(peer, mono);
    }
}

#[cfg(test)]
mod tests;
