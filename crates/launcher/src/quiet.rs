//! The *quiet* rule set of a live-migration target's pod network namespace.
//!
//! A migration target pod is wired before its guest runs: CNI ADD gives its interfaces the
//! guest's MAC (the bridge plugin's `mac` runtime config) and IP, and the pod's kernel then owns
//! that address while the guest still runs on the source. Left alone it sends IPv6 router
//! solicitations, MLD reports and DAD probes from the guest's MAC (the node bridge and the
//! overlay learn the guest's MAC at the target's port), answers ARP for the guest's IP, and
//! answers the peers' TCP segments that then reach it with resets (it has no socket): the
//! guest's connections die before the switch-over. The quiet tables drop everything the pod's
//! kernel receives or sends itself (IPv4, IPv6 and ARP; loopback stays), until the target agent
//! removes them once the guest resumes there. They hook `input` and `output` only: frames the
//! pod bridges between the guest's tap and the pod interface, and the masquerade binding's
//! forwarded traffic, are not the kernel's own and pass.

/// The name of the quiet tables (one `inet`, one `arp`).
pub const QUIET_TABLE: &str = "weft-migration-quiet";

/// The families the quiet tables live in.
const FAMILIES: [&str; 2] = ["inet", "arp"];

/// The `nft -f -` script that installs the quiet tables (idempotent: re-applying replaces them).
///
/// The chains run before every other filter (`priority -400`, before conntrack's defrag and
/// raw priorities) and drop with their policy, so no rule of another table can let a packet of
/// the pod's own kernel through.
pub fn install_script() -> String {
    let mut script = remove_script();
    script.push_str(&format!(
        "table inet {QUIET_TABLE} {{\n\
         \tchain input {{\n\t\ttype filter hook input priority -400; policy drop;\n\t\tiifname \"lo\" accept\n\t}}\n\
         \tchain output {{\n\t\ttype filter hook output priority -400; policy drop;\n\t\toifname \"lo\" accept\n\t}}\n\
         }}\n"
    ));
    script.push_str(&format!(
        "table arp {QUIET_TABLE} {{\n\
         \tchain input {{\n\t\ttype filter hook input priority 0; policy drop;\n\t}}\n\
         \tchain output {{\n\t\ttype filter hook output priority 0; policy drop;\n\t}}\n\
         }}\n"
    ));
    script
}

/// The `nft -f -` script that removes the quiet tables (idempotent: declaring a table before
/// deleting it makes the deletion succeed when it is not there).
pub fn remove_script() -> String {
    FAMILIES
        .iter()
        .map(|family| format!("table {family} {QUIET_TABLE} {{}}\ndelete table {family} {QUIET_TABLE}\n"))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn install_starts_by_removing_so_it_replaces() {
        let install = install_script();
        assert!(install.starts_with(&remove_script()));
        assert_eq!(install.matches("policy drop;").count(), 4);
        // Only the kernel's own traffic: no forward hook (the guest's bridged and NATed frames).
        assert!(!install.contains("forward"));
    }

    #[test]
    fn remove_declares_before_deleting_each_family() {
        let remove = remove_script();
        for family in FAMILIES {
            let declare = remove
                .find(&format!("table {family} {QUIET_TABLE} {{}}"))
                .unwrap();
            let delete = remove
                .find(&format!("delete table {family} {QUIET_TABLE}"))
                .unwrap();
            assert!(declare < delete);
        }
    }
}
