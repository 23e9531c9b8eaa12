//! `/ipam`: the `weft-ipam` processes that the agent's delegates run hand their request to the
//! agent, which answers it on the store it keeps open. A plugin process then costs its exec and
//! one round trip instead of opening the store (and reading its WAL) every time; the answer is
//! the same as the plugin computing it itself (`weft_ipam::plugin::handle`), since it is the same
//! code on the same store.

use serde_json::Value;
use weft_cni::CniError;
use weft_ipam::IpamRequest;
use weft_ipam::request::NODE_NAME_VARS;

use super::Agent;
use crate::protocol::{self, CniRequest};

/// The variables the agent adds to every delegate's environment so that a `weft-ipam` run
/// by a delegate finds it (none when the agent's store cannot be named).
pub fn delegate_env(agent: &Agent) -> Vec<(String, String)> {
    let mut env = vec![("WEFT_NODE_NAME".to_string(), agent.args.node.clone())];
    if let Some(identity) = &agent.store_identity {
        let socket = std::path::absolute(&agent.args.socket).unwrap_or_else(|_| agent.args.socket.clone());
        env.push((protocol::IPAM_SOCKET_ENV.into(), socket.display().to_string()));
        env.push((protocol::IPAM_STORE_ENV.into(), identity.clone()));
    }
    env
}

/// Answer one IPAM request: the result of ADD, `None` for the other verbs.
pub async fn handle(agent: &Agent, request: CniRequest) -> Result<Option<Value>, CniError> {
    let stdin = request.config_bytes()?;
    // Reservations are recorded with this agent's node, whatever the caller's environment says.
    let lookup = |key: &str| {
        if NODE_NAME_VARS.contains(&key) {
            Some(agent.args.node.clone())
        } else {
            request.env.get(key).cloned()
        }
    };
    let ipam_request = IpamRequest::from_lookup(lookup, &stdin).map_err(CniError::from)?;
    let version = ipam_request.version;
    let result = weft_ipam::plugin::handle(ipam_request, agent.ipam_store.clone()).await?;
    result
        .map(|r| weft_cni::result_to_value(&r, weft_cni::CniVersion::LATEST))
        .transpose()
        .map_err(|e| {
            CniError::new(
                weft_cni::codes::IO_FAILURE,
                "weft agent cannot encode the IPAM result",
            )
            .with_details(e.to_string())
            .with_version(version.to_string())
        })
}
