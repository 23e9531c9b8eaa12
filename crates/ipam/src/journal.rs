//! The release journal: a node agent that cannot reach the store during a DEL records the
//! release and answers success, so pod teardown never waits for the API server; the journal is
//! replayed in order when the store answers again. Until then the reservation stays in the
//! store, so nobody else can take the address. This module is the journal's format and the
//! decisions around it; the agent owns the file.
//!
//! Format: one entry per line, the hex of the call as the installed `weft-ipam` sent it
//! (`weft_plugin_client::wire::encode_call`: the `CNI_*` variables and the config, binary-safe).
//! An append that was cut short (a crash mid-write) leaves a last line without its newline or
//! with odd hex: it is dropped on read, which can only leave an address reserved (reclaimed by
//! GC), never free one twice.

use weft_cni::CniCommand;
use weft_store::StoreError;

use crate::IpamError;

/// Why a journal read skipped something.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum JournalError {
    /// A line is not hex (a foreign or damaged file).
    #[error("journal line {line}: not a recorded call")]
    BadLine {
        /// 1-based line number.
        line: usize,
    },
    /// The last line has no newline: an append was cut short.
    #[error("journal ends in a torn entry ({bytes} bytes); dropped")]
    TornTail {
        /// Its length.
        bytes: usize,
    },
}

/// The line that records `call`.
pub fn encode_entry(call: &[u8]) -> Vec<u8> {
    let mut line = hex::encode(call).into_bytes();
    line.push(b'\n');
    line
}

/// The recorded calls, in order, and what was skipped.
pub fn decode_journal(bytes: &[u8]) -> (Vec<Vec<u8>>, Vec<JournalError>) {
    let mut calls = Vec::new();
    let mut skipped = Vec::new();
    let complete = match bytes.iter().rposition(|&b| b == b'\n') {
        Some(end) => {
            if end + 1 < bytes.len() {
                skipped.push(JournalError::TornTail {
                    bytes: bytes.len() - end - 1,
                });
            }
            &bytes[..end + 1]
        }
        None => {
            if !bytes.is_empty() {
                skipped.push(JournalError::TornTail { bytes: bytes.len() });
            }
            &[][..]
        }
    };
    for (i, line) in complete.split(|&b| b == b'\n').enumerate() {
        if line.is_empty() {
            continue;
        }
        match hex::decode(line) {
            Ok(call) => calls.push(call),
            Err(_) => skipped.push(JournalError::BadLine { line: i + 1 }),
        }
    }
    (calls, skipped)
}

/// The journal's content after the first `done` of `calls` were replayed.
pub fn remaining(calls: &[Vec<u8>], done: usize) -> Vec<u8> {
    calls.iter().skip(done).flat_map(|c| encode_entry(c)).collect()
}

/// True when a call that failed with `error` may be journaled and answered as a success: a DEL
/// (a release) that failed only because the store cannot be reached. Every other failure is
/// reported: a bad config, a conflict, an ADD (an address must never be promised without the
/// store).
pub fn is_deferrable(command: CniCommand, error: &IpamError) -> bool {
    command == CniCommand::Del && matches!(error, IpamError::Store(StoreError::Unavailable(_)))
}

/// What to do with one journaled call after replaying it gave `outcome`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReplayStep {
    /// Released (or nothing was held): drop it, go on with the next.
    Done,
    /// The store is still unreachable: keep it and everything after it, try again later.
    Wait,
    /// It can never succeed (its config is invalid, say): drop it, report it, go on.
    Drop,
}

/// The step after replaying a journaled release.
pub fn replay_step(outcome: &Result<(), IpamError>) -> ReplayStep {
    match outcome {
        Ok(()) => ReplayStep::Done,
        Err(e) if is_deferrable(CniCommand::Del, e) => ReplayStep::Wait,
        Err(IpamError::Store(_)) => ReplayStep::Wait,
        Err(_) => ReplayStep::Drop,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_round_trip_binary_calls_in_order() {
        let calls = vec![
            b"CNI_COMMAND=DEL\0\0{}".to_vec(),
            vec![0, 255, 10, 13],
            Vec::from(&b"\n\n"[..]),
        ];
        let journal: Vec<u8> = calls.iter().flat_map(|c| encode_entry(c)).collect();
        assert_eq!(decode_journal(&journal), (calls.clone(), vec![]));
        assert_eq!(decode_journal(&remaining(&calls, 1)).0, calls[1..].to_vec());
        assert!(remaining(&calls, 3).is_empty());
    }

    #[test]
    fn a_torn_or_foreign_line_is_skipped_and_reported() {
        let mut journal = encode_entry(b"one");
        journal.extend_from_slice(b"zz not hex\n");
        journal.extend(encode_entry(b"two"));
        journal.extend_from_slice(b"74686");
        let (calls, skipped) = decode_journal(&journal);
        assert_eq!(calls, vec![b"one".to_vec(), b"two".to_vec()]);
        assert_eq!(
            skipped,
            vec![
                JournalError::TornTail { bytes: 5 },
                JournalError::BadLine { line: 2 }
            ]
        );
        assert_eq!(
            decode_journal(b"abc").1,
            vec![JournalError::TornTail { bytes: 3 }]
        );
        assert_eq!(decode_journal(b""), (vec![], vec![]));
    }

    #[test]
    fn only_a_release_that_could_not_reach_the_store_is_deferred() {
        let down = IpamError::Store(StoreError::Unavailable("connect".into()));
        assert!(is_deferrable(CniCommand::Del, &down));
        assert!(!is_deferrable(CniCommand::Add, &down));
        let conflict = IpamError::Store(StoreError::Backend("x".into()));
        assert!(!is_deferrable(CniCommand::Del, &conflict));
        assert_eq!(replay_step(&Ok(())), ReplayStep::Done);
        assert_eq!(replay_step(&Err(down)), ReplayStep::Wait);
        assert_eq!(replay_step(&Err(conflict)), ReplayStep::Wait);
        assert_eq!(
            replay_step(&Err(IpamError::Request("bad".into()))),
            ReplayStep::Drop
        );
    }
}
