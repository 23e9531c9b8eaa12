//! `/ipam`: the installed `weft-ipam` (crates/plugin-client) that the agent's delegates run hands
//! its call to the agent, which answers it on the store it keeps open. A delegated IPAM call
//! then costs a small static executable's start and one round trip, instead of the full binary
//! opening the store (and reading its WAL) every time. The answer is byte for byte what the
//! full plugin would print (`weft_cni::plugin::{decode, finish}` around the same
//! `weft_ipam::plugin::handle`, on the same store); a call whose config names another store is
//! declined, and the client runs the full plugin. The agent remembers the reservations its
//! ADDs made (`Agent::ipam_held`), so the attachment's DEL is one conditional delete per
//! address (`weft_ipam::held`).

use weft_cni::plugin::{Decoded, Outcome, PluginRequest};
use weft_cni::{CniCommand, CniError, CniVersion, codes};
use weft_ipam::IpamRequest;
use weft_plugin_client::wire;

use super::Agent;

/// The variables the agent adds to every delegate's environment: the node name, the socket
/// through which a delegated `weft-ipam` reaches the agent, and the agent's store as the default
/// of calls that name none (neither when the agent's store cannot be named, so no call could be
/// recognised as its own).
pub fn delegate_env(agent: &Agent) -> Vec<(String, String)> {
    let mut env = vec![("WEFT_NODE_NAME".to_string(), agent.args.node.clone())];
    if let Some(identity) = &agent.store_identity {
        let socket = std::path::absolute(&agent.args.socket).unwrap_or_else(|_| agent.args.socket.clone());
        env.push((
            weft_plugin_client::IPAM_SOCKET_ENV.into(),
            socket.display().to_string(),
        ));
        env.push((crate::protocol::IPAM_DEFAULT_STORE_ENV.into(), identity.clone()));
    }
    env
}

/// The agent's answer to a `weft-ipam` call.
#[derive(Debug)]
pub enum IpamAnswer {
    /// What the plugin prints, and its exit code.
    Answered(Outcome),
    /// The call's config names a store this agent does not serve.
    NotServed,
}

/// Answer one call (a body made by `weft_plugin_client::wire::encode_call`); also returns the
/// verb, for metrics.
pub async fn handle(agent: &Agent, body: &[u8]) -> (String, IpamAnswer) {
    let call = match wire::decode_call(body) {
        Ok(call) => call,
        Err(e) => {
            let error = CniError::new(
                codes::DECODING_FAILURE,
                "weft agent cannot read the weft-ipam call",
            )
            .with_details(e.to_string());
            let outcome = Outcome::failure(error, CniVersion::LATEST);
            return (String::new(), IpamAnswer::Answered(outcome));
        }
    };
    let verb = call.var("CNI_COMMAND").unwrap_or_default().to_string();
    let lookup = |key: &str| call.var(key).map(str::to_string);
    let request = match weft_cni::plugin::decode(&CniVersion::SUPPORTED, lookup, call.stdin) {
        Decoded::Answered(outcome) => return (verb, IpamAnswer::Answered(outcome)),
        Decoded::Request(request) => request,
    };
    // A call that names no store means the node's default, which is the agent's store.
    let served = agent.store_identity.is_some()
        && crate::ipam_plugin::named_store(request.config.ipam())
            .is_none_or(|named| named.identity() == agent.store_identity);
    if !served {
        return (verb, IpamAnswer::NotServed);
    }
    // Reservations are recorded with this agent's node, whatever the caller's environment says.
    let ipam_request = IpamRequest::from_plugin_request(&request, agent.args.node.clone());
    if ipam_request.command() == CniCommand::Del {
        return (
            verb,
            IpamAnswer::Answered(del(agent, &request, &ipam_request, body).await),
        );
    }
    // Releases that waited for the store go first, so an ADD never races its own earlier DEL.
    if ipam_request.command() == CniCommand::Add && agent.journal.pending() {
        let _ = agent.journal.replay(agent).await;
    }
    let handled =
        weft_ipam::plugin::handle_held(ipam_request, agent.ipam_store.clone(), Some(&agent.ipam_held)).await;
    (
        verb,
        IpamAnswer::Answered(weft_cni::plugin::finish(&request, handled)),
    )
}

/// A DEL: release now, or — when the store cannot be reached — journal the call and answer
/// success; the reservation stays in the store until the journal is replayed, so nobody else
/// can take the address meanwhile.
async fn del(agent: &Agent, request: &PluginRequest, ipam_request: &IpamRequest, body: &[u8]) -> Outcome {
    let outcome = match weft_ipam::plugin::release_held(
        ipam_request,
        &agent.ipam_store,
        Some(&agent.ipam_held),
    )
    .await
    {
        Err(e) if weft_ipam::journal::is_deferrable(CniCommand::Del, &e) => {
            match agent.journal.append(body).await {
                Ok(()) => {
                    tracing::warn!(
                        container = %ipam_request.env.container_id,
                        ifname = %ipam_request.env.ifname,
                        "IPAM release journaled ({e}): replayed when the store answers"
                    );
                    Ok(None)
                }
                Err(io) => {
                    tracing::warn!("cannot journal an IPAM release: {io}");
                    Err(e)
                }
            }
        }
        other => other.map(|()| None),
    };
    let version = ipam_request.version.to_string();
    weft_cni::plugin::finish(
        request,
        outcome.map_err(|e| CniError::from(e).with_version(version)),
    )
}
