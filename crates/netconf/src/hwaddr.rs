//! Hardware-address validation with the exact grammar of Go's `net.ParseMAC`, which Multus uses for
//! both `mac` and `infiniband-guid`.

/// Parse a MAC (6 octets), EUI-64 (8) or InfiniBand (20) hardware address in one of the forms
/// `01:23:45:67:89:ab`, `01-23-45-67-89-ab` or `0123.4567.89ab`. Returns the octets.
pub fn parse_hardware_addr(s: &str) -> Option<Vec<u8>> {
    let b = s.as_bytes();
    if b.len() < 14 {
        return None;
    }
    let mut out = Vec::new();
    if b[2] == b':' || b[2] == b'-' {
        if !(b.len() + 1).is_multiple_of(3) {
            return None;
        }
        let n = (b.len() + 1) / 3;
        if !matches!(n, 6 | 8 | 20) {
            return None;
        }
        let sep = b[2];
        for i in 0..n {
            let x = i * 3;
            if i + 1 < n && b[x + 2] != sep {
                return None;
            }
            out.push(hex_pair(b[x], b[x + 1])?);
        }
    } else if b[4] == b'.' {
        if !(b.len() + 1).is_multiple_of(5) {
            return None;
        }
        let n = 2 * (b.len() + 1) / 5;
        if !matches!(n, 6 | 8 | 20) {
            return None;
        }
        for group in 0..n / 2 {
            let x = group * 5;
            if group + 1 < n / 2 && b[x + 4] != b'.' {
                return None;
            }
            out.push(hex_pair(b[x], b[x + 1])?);
            out.push(hex_pair(b[x + 2], b[x + 3])?);
        }
    } else {
        return None;
    }
    Some(out)
}

fn hex_pair(hi: u8, lo: u8) -> Option<u8> {
    let digit = |c: u8| (c as char).to_digit(16).map(|d| d as u8);
    Some(digit(hi)? << 4 | digit(lo)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_go_forms() {
        for ok in [
            "00:00:5e:00:53:01",
            "02:00:5e:10:00:00:00:01",
            "00:00:00:00:fe:80:00:00:00:00:00:00:02:00:5e:10:00:00:00:01",
            "00-00-5E-00-53-01",
            "0000.5e00.5301",
            "0200.5e10.0000.0001",
        ] {
            assert!(parse_hardware_addr(ok).is_some(), "{ok}");
        }
        assert_eq!(
            parse_hardware_addr("c2:11:22:33:44:66"),
            Some(vec![0xc2, 0x11, 0x22, 0x33, 0x44, 0x66])
        );
    }

    #[test]
    fn rejects_malformed() {
        for bad in [
            "",
            "00:00:5e:00:53",
            "00:00:5e:00:53:0g",
            "00:00:5e-00:53:01",
            "00:00:5e:00:53:01:",
            "0000.5e00.5301.",
            "00005e005301zz",
            "00:00:5e:00:53:01:02",
            "zz:00:5e:00:53:01",
        ] {
            assert!(parse_hardware_addr(bad).is_none(), "{bad}");
        }
    }
}
