//! `/cni-call`: a call of the installed static shim (crates/plugin-client), as the runtime made
//! it — the `CNI_*` variables and the config bytes — decoded and answered here the way the
//! weft binary as `weft-cni` would answer it (VERSION, version checks, the result written in
//! the config's version), so the shim only prints what it gets back.

use std::collections::BTreeMap;

use weft_cni::plugin::{Decoded, Outcome};
use weft_cni::{CniCommand, CniError, CniVersion, codes};
use weft_plugin_client::wire;

use super::Agent;
use crate::protocol::{self, CniRequest};

/// Answer one call: its verb (for metrics) and what the shim prints.
pub async fn handle(agent: &Agent, body: &[u8]) -> (String, Outcome) {
    let call = match wire::decode_call(body) {
        Ok(call) => call,
        Err(e) => return (String::new(), Outcome::failure(unreadable(e), CniVersion::LATEST)),
    };
    let verb = call.var("CNI_COMMAND").unwrap_or_default().to_string();
    if call.stdin.len() > protocol::MAX_CONFIG_BYTES {
        let error = protocol::config_size_error(call.stdin.len());
        return (verb, Outcome::failure(error, CniVersion::LATEST));
    }
    let env: BTreeMap<String, String> = call.env.into_iter().collect();
    let request =
        match weft_cni::plugin::decode(&CniVersion::SUPPORTED, |key| env.get(key).cloned(), call.stdin) {
            Decoded::Answered(outcome) => return (verb, outcome),
            Decoded::Request(request) => request,
        };
    let command = request.env.command;
    let forwarded = CniRequest::new(env, &request.config.to_bytes());
    let handled = agent
        .handle_cni(forwarded)
        .await
        .and_then(|result| read_result(command, result));
    (verb, weft_cni::plugin::finish(&request, handled))
}

/// Why a body is not a call, as the CNI error the shim prints.
fn unreadable(error: wire::WireError) -> CniError {
    match error {
        not_utf8 @ wire::WireError::NotUtf8(_) => {
            CniError::new(codes::INVALID_ENVIRONMENT, not_utf8.to_string())
        }
        other => CniError::new(
            codes::DECODING_FAILURE,
            "the call to the weft agent cannot be read",
        )
        .with_details(other.to_string()),
    }
}

/// The agent's answer to `command` as a plugin result: ADD's result, nothing for the others.
fn read_result(
    command: CniCommand,
    result: Option<serde_json::Value>,
) -> Result<Option<weft_cni::CniResult>, CniError> {
    match (command, result) {
        (CniCommand::Add, result) => protocol::add_result(result).map(Some),
        _ => Ok(None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_add_has_a_result_and_it_must_be_one() {
        let result = serde_json::json!({"cniVersion": "1.0.0", "ips": [{"address": "10.0.0.2/24"}]});
        assert!(
            read_result(CniCommand::Add, Some(result.clone()))
                .unwrap()
                .is_some()
        );
        assert_eq!(
            read_result(CniCommand::Add, None).unwrap_err().code,
            codes::DECODING_FAILURE
        );
        let invalid = serde_json::json!({"ips": "nope"});
        assert_eq!(
            read_result(CniCommand::Add, Some(invalid)).unwrap_err().code,
            codes::DECODING_FAILURE
        );
        assert_eq!(read_result(CniCommand::Del, Some(result)).unwrap(), None);
        assert_eq!(read_result(CniCommand::Check, None).unwrap(), None);
    }

    #[test]
    fn an_unreadable_call_is_a_cni_error() {
        let error = unreadable(wire::WireError::NotUtf8("CNI_ARGS".into()));
        assert_eq!(error.code, codes::INVALID_ENVIRONMENT);
        assert!(error.msg.contains("CNI_ARGS"), "{}", error.msg);
        assert_eq!(
            unreadable(wire::WireError::Unterminated).code,
            codes::DECODING_FAILURE
        );
    }
}
