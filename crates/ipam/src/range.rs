//! Range math over `u128` offsets from a subnet's network address: which addresses of a range
//! may be handed out, and in which order an allocator tries them.
//!
//! Works the same for IPv4 and any IPv6 prefix (a /64 or even a /0 has no cap), because an
//! offset always fits in a `u128` and nothing is materialised per address.

use std::collections::HashSet;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use ipnet::IpNet;

/// Why a range cannot be built; `field` names the offending config key.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {message}")]
pub struct RangeError {
    /// Which field of the range is wrong (`range_start`, `exclude[2]`, ...).
    pub field: String,
    /// What is wrong with it.
    pub message: String,
}

impl RangeError {
    fn new(field: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            field: field.into(),
            message: message.into(),
        }
    }
}

/// One pool of addresses: a subnet, narrowed by start/end, minus exclusions and the gateway.
///
/// Invariant: `first <= last`, `holes` are sorted, disjoint, non-adjacent and inside `[first, last]`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AddressRange {
    subnet: IpNet,
    gateway: Option<IpAddr>,
    first: u128,
    last: u128,
    holes: Vec<(u128, u128)>,
}

fn to_u128(ip: IpAddr) -> u128 {
    match ip {
        IpAddr::V4(v4) => u32::from(v4) as u128,
        IpAddr::V6(v6) => u128::from(v6),
    }
}

fn family_name(ip: &IpAddr) -> &'static str {
    if ip.is_ipv4() { "IPv4" } else { "IPv6" }
}

impl AddressRange {
    /// Build a range from `subnet` (host bits are ignored), optional bounds, exclusions
    /// (CIDRs; bare addresses are /32 or /128 nets) and the gateway.
    ///
    /// The network address, the IPv4 broadcast address (for prefixes up to /30) and the gateway
    /// are never part of the range. Bounds must lie inside the subnet.
    pub fn new(
        subnet: IpNet,
        start: Option<IpAddr>,
        end: Option<IpAddr>,
        exclude: &[IpNet],
        gateway: Option<IpAddr>,
    ) -> Result<Self, RangeError> {
        let subnet = subnet.trunc();
        let host_bits = u32::from(subnet.max_prefix_len() - subnet.prefix_len());
        let max_offset = if host_bits >= 128 {
            u128::MAX
        } else {
            (1u128 << host_bits) - 1
        };
        // /31 and /32 (RFC 3021) and IPv6 /127, /128 have no network/broadcast to skip.
        let tiny = max_offset < 2;
        let mut first = if tiny { 0 } else { 1 };
        let mut last = if subnet.addr().is_ipv4() && !tiny {
            max_offset - 1
        } else {
            max_offset
        };
        let base = to_u128(subnet.network());
        let offset_in = |field: &str, ip: IpAddr| -> Result<u128, RangeError> {
            if ip.is_ipv4() != subnet.addr().is_ipv4() {
                return Err(RangeError::new(
                    field,
                    format!(
                        "{ip} is {} but the range {subnet} is {}",
                        family_name(&ip),
                        family_name(&subnet.addr())
                    ),
                ));
            }
            if !subnet.contains(&ip) {
                return Err(RangeError::new(
                    field,
                    format!("{ip} is outside the range {subnet}"),
                ));
            }
            Ok(to_u128(ip) - base)
        };
        if let Some(start) = start {
            first = first.max(offset_in("range_start", start)?);
        }
        if let Some(end) = end {
            last = last.min(offset_in("range_end", end)?);
        }
        if first > last {
            return Err(RangeError::new(
                "range_end",
                format!("the range {subnet} has no usable address between range_start and range_end"),
            ));
        }
        let mut holes = Vec::new();
        for (i, net) in exclude.iter().enumerate() {
            let net = net.trunc();
            if net.addr().is_ipv4() != subnet.addr().is_ipv4() {
                return Err(RangeError::new(
                    format!("exclude[{i}]"),
                    format!(
                        "{net} is {} but the range {subnet} is {}",
                        family_name(&net.addr()),
                        family_name(&subnet.addr())
                    ),
                ));
            }
            let (lo, hi) = (to_u128(net.network()), to_u128(net.broadcast()));
            let (sub_lo, sub_hi) = (base, base + max_offset);
            if hi < sub_lo || lo > sub_hi {
                continue;
            }
            holes.push((lo.max(sub_lo) - base, hi.min(sub_hi) - base));
        }
        if let Some(gw) = gateway
            && gw.is_ipv4() == subnet.addr().is_ipv4()
            && subnet.contains(&gw)
        {
            let off = to_u128(gw) - base;
            holes.push((off, off));
        }
        let holes = normalise_holes(holes, first, last);
        let range = Self {
            subnet,
            gateway,
            first,
            last,
            holes,
        };
        if range.usable_count() == 0 {
            return Err(RangeError::new(
                "exclude",
                format!("every address of the range {subnet} is excluded"),
            ));
        }
        Ok(range)
    }

    /// The subnet (network address + prefix length) results are reported in.
    pub fn subnet(&self) -> IpNet {
        self.subnet
    }

    /// The gateway reported with addresses of this range (never handed out).
    pub fn gateway(&self) -> Option<IpAddr> {
        self.gateway
    }

    /// Whether this is an IPv4 range.
    pub fn is_ipv4(&self) -> bool {
        self.subnet.addr().is_ipv4()
    }

    /// Lowest and highest offset that may be handed out (before holes).
    pub fn bounds(&self) -> (u128, u128) {
        (self.first, self.last)
    }

    /// How many addresses the range can hand out.
    pub fn usable_count(&self) -> u128 {
        let span = self.last - self.first + 1;
        span - self.holes.iter().map(|(lo, hi)| hi - lo + 1).sum::<u128>()
    }

    /// The address at `offset` from the network address (offset must be inside the subnet).
    pub fn address_at(&self, offset: u128) -> IpAddr {
        let raw = to_u128(self.subnet.network()) + offset;
        if self.is_ipv4() {
            IpAddr::V4(Ipv4Addr::from(raw as u32))
        } else {
            IpAddr::V6(Ipv6Addr::from(raw))
        }
    }

    /// The offset of `ip` from the network address, when `ip` is in the subnet.
    pub fn offset_of(&self, ip: IpAddr) -> Option<u128> {
        (ip.is_ipv4() == self.is_ipv4() && self.subnet.contains(&ip))
            .then(|| to_u128(ip) - to_u128(self.subnet.network()))
    }

    /// Whether `ip` may be handed out from this range.
    pub fn contains(&self, ip: IpAddr) -> bool {
        self.offset_of(ip).is_some_and(|off| self.is_usable(off))
    }

    fn is_usable(&self, off: u128) -> bool {
        off >= self.first && off <= self.last && self.hole_at(off).is_none()
    }

    fn hole_at(&self, off: u128) -> Option<(u128, u128)> {
        let idx = self.holes.partition_point(|(lo, _)| *lo <= off);
        idx.checked_sub(1)
            .map(|i| self.holes[i])
            .filter(|(_, hi)| off <= *hi)
    }

    /// The smallest usable offset `>= off`, if any.
    fn next_usable_from(&self, off: u128) -> Option<u128> {
        let off = off.max(self.first);
        if off > self.last {
            return None;
        }
        match self.hole_at(off) {
            None => Some(off),
            // Holes are non-adjacent, so the address after a hole is usable (or past `last`).
            Some((_, hi)) if hi < self.last => Some(hi + 1),
            Some(_) => None,
        }
    }

    /// Every usable offset, starting at `start` (clamped into the range) and wrapping around
    /// once, so that allocators starting at different offsets rarely try the same address.
    pub fn offsets_from(&self, start: u128) -> Candidates<'_> {
        let start = if start < self.first || start > self.last {
            self.first
        } else {
            start
        };
        Candidates {
            range: self,
            start,
            cursor: Some(start),
            wrapped: false,
        }
    }

    /// Map a random number onto a start offset inside `[first, last]`.
    pub fn start_offset(&self, random: u128) -> u128 {
        match (self.last - self.first).checked_add(1) {
            Some(span) => self.first + random % span,
            None => random.max(self.first),
        }
    }

    /// The first address from `start` (wrapping) that is not in `taken`, or `None` when the
    /// range is exhausted. Runs in O(|taken|) steps whatever the range size.
    pub fn pick_free(&self, taken: &HashSet<IpAddr>, start: u128) -> Option<IpAddr> {
        let taken_here = taken.iter().filter(|ip| self.contains(**ip)).count() as u128;
        if taken_here >= self.usable_count() {
            return None;
        }
        self.offsets_from(start)
            .map(|off| self.address_at(off))
            .find(|ip| !taken.contains(ip))
    }
}

/// Below this many free addresses, [`AddressRange::choose_free`] picks uniformly among them.
const ENUMERATE_FREE_BELOW: u128 = 4096;

impl AddressRange {
    /// A free address (not in `taken`) chosen from `random`, or `None` when exhausted.
    ///
    /// In a sparse range: the first free address from a random start (O(|taken|)). When few
    /// addresses are left: uniformly among the free ones, so that concurrent allocators chasing
    /// the last addresses spread out instead of all trying the same next free one. Enumerating
    /// is cheap then: the range has at most |taken| + 4096 usable addresses.
    pub fn choose_free(&self, taken: &HashSet<IpAddr>, random: u128) -> Option<IpAddr> {
        let taken_here = taken.iter().filter(|ip| self.contains(**ip)).count() as u128;
        let free = self.usable_count().saturating_sub(taken_here);
        if free == 0 {
            return None;
        }
        if free > ENUMERATE_FREE_BELOW {
            return self.pick_free(taken, self.start_offset(random));
        }
        let candidates: Vec<IpAddr> = self
            .offsets_from(self.first)
            .map(|off| self.address_at(off))
            .filter(|ip| !taken.contains(ip))
            .collect();
        candidates
            .get((random % candidates.len().max(1) as u128) as usize)
            .copied()
    }
}

fn normalise_holes(mut holes: Vec<(u128, u128)>, first: u128, last: u128) -> Vec<(u128, u128)> {
    holes.retain(|(lo, hi)| *hi >= first && *lo <= last);
    for h in &mut holes {
        h.0 = h.0.max(first);
        h.1 = h.1.min(last);
    }
    holes.sort_unstable();
    let mut merged: Vec<(u128, u128)> = Vec::with_capacity(holes.len());
    for (lo, hi) in holes {
        match merged.last_mut() {
            Some(prev) if lo <= prev.1.saturating_add(1) => prev.1 = prev.1.max(hi),
            _ => merged.push((lo, hi)),
        }
    }
    merged
}

/// Iterator over the usable offsets of a range from a start offset, wrapping once.
#[derive(Clone, Debug)]
pub struct Candidates<'a> {
    range: &'a AddressRange,
    start: u128,
    cursor: Option<u128>,
    wrapped: bool,
}

impl Iterator for Candidates<'_> {
    type Item = u128;

    fn next(&mut self) -> Option<u128> {
        loop {
            let cursor = self.cursor?;
            let found = self.range.next_usable_from(cursor);
            match found {
                Some(off) if self.wrapped && off >= self.start => {
                    self.cursor = None;
                    return None;
                }
                Some(off) => {
                    self.cursor = off.checked_add(1).filter(|n| *n <= self.range.last);
                    if self.cursor.is_none() && !self.wrapped {
                        self.wrapped = true;
                        self.cursor = Some(self.range.first);
                    }
                    return Some(off);
                }
                None if !self.wrapped => {
                    self.wrapped = true;
                    self.cursor = Some(self.range.first);
                }
                None => {
                    self.cursor = None;
                    return None;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests;
