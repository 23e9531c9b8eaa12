//! `default-route` requests: the ECMP check, Multus's filter flags
//! (`vectors/multus/13-default-route-filter-flags.json`) and what to do to each delegate's routes
//! after its ADD (docs/upstream/multus.md §3.5).

use std::net::IpAddr;

use serde::{Deserialize, Serialize};

/// A delegate's default-route request and Multus's filter flags (kept for the cache).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DefaultRoutePlan {
    /// `default-route` as requested (`None` = key absent; `Some([])` = remove).
    pub gateways: Option<Vec<IpAddr>>,
    /// Multus `IsFilterV4Gateway`.
    pub filter_v4: bool,
    /// Multus `IsFilterV6Gateway`.
    pub filter_v6: bool,
    /// What to do after this delegate's ADD (`None`: leave its routes alone).
    pub action: Option<RouteAction>,
}

/// Route edits after a delegate's ADD, inside the pod netns, on the delegate's interface; the
/// cached result is edited the same way.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RouteAction {
    /// Delete IPv4 default routes.
    pub delete_v4_default: bool,
    /// Delete IPv6 default routes.
    pub delete_v6_default: bool,
    /// Then add `default via <gw>` for each.
    pub add_gateways: Vec<IpAddr>,
}

/// Why the requests cannot be honoured.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum GatewayError {
    /// More than one gateway of a family across all delegates.
    #[error("multus does not support ECMP for default-route ({family} gateways requested: {requested})")]
    Ecmp {
        /// `IPv4` or `IPv6`.
        family: &'static str,
        /// `<network>: <gw>` for each request.
        requested: String,
    },
}

/// Compute every delegate's plan from `(network label, request)` in delegate order. Nothing is
/// touched unless some delegate has the key. Per family F, when active: every delegate's F
/// default routes are deleted if some delegate asks for an F gateway or some delegate asks
/// for `[]`; a delegate's own gateways are then added. (Multus deletes both families on every
/// delegate as soon as any request exists — docs/compat.md.)
pub fn plan_default_routes(
    requests: &[(&str, Option<&Vec<IpAddr>>)],
) -> Result<Vec<DefaultRoutePlan>, GatewayError> {
    let active = requests.iter().any(|(_, r)| r.is_some());
    let gateways = |v4: bool| -> Vec<String> {
        requests
            .iter()
            .flat_map(|(name, r)| {
                r.iter()
                    .flat_map(|gws| gws.iter())
                    .filter(move |gw| gw.is_ipv4() == v4)
                    .map(move |gw| format!("{name}: {gw}"))
            })
            .collect()
    };
    for (v4, family) in [(true, "IPv4"), (false, "IPv6")] {
        let requested = gateways(v4);
        if requested.len() > 1 {
            return Err(GatewayError::Ecmp {
                family,
                requested: requested.join(", "),
            });
        }
    }
    let any_empty = requests.iter().any(|(_, r)| r.is_some_and(|gws| gws.is_empty()));
    let delete_v4 = any_empty || !gateways(true).is_empty();
    let delete_v6 = any_empty || !gateways(false).is_empty();
    Ok(requests
        .iter()
        .map(|(_, request)| {
            if !active {
                return DefaultRoutePlan::default();
            }
            let (filter_v4, filter_v6) = filter_flags(*request);
            DefaultRoutePlan {
                gateways: request.cloned(),
                filter_v4,
                filter_v6,
                action: Some(RouteAction {
                    delete_v4_default: delete_v4,
                    delete_v6_default: delete_v6,
                    add_gateways: request.cloned().unwrap_or_default(),
                }),
            }
        })
        .collect())
}

/// The delegate's result as it is after `action` (for the cached result and CHECK): default
/// routes of the flagged families removed, then `{dst: 0.0.0.0/0 | ::/0, gw}` per gateway.
pub fn apply_route_action(result: &weft_cni::CniResult, action: &RouteAction) -> weft_cni::CniResult {
    let mut out = result.clone();
    out.routes.retain(|r| {
        let is_default = r.dst.prefix_len() == 0 && r.dst.addr().is_unspecified();
        let v4 = r.dst.addr().is_ipv4();
        !(is_default && ((v4 && action.delete_v4_default) || (!v4 && action.delete_v6_default)))
    });
    for gw in &action.add_gateways {
        let dst = match gw {
            IpAddr::V4(_) => "0.0.0.0/0",
            IpAddr::V6(_) => "::/0",
        };
        out.routes.push(weft_cni::Route {
            dst: dst.parse().expect("valid"),
            gw: Some(*gw),
            mtu: None,
            advmss: None,
            priority: None,
            table: None,
            scope: None,
        });
    }
    out
}

/// Multus `CheckGatewayConfig` flags for one delegate: start true, cleared by a gateway of that
/// family.
pub fn filter_flags(request: Option<&Vec<IpAddr>>) -> (bool, bool) {
    let gws = request.map(Vec::as_slice).unwrap_or_default();
    (!gws.iter().any(IpAddr::is_ipv4), !gws.iter().any(IpAddr::is_ipv6))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ips(list: &[&str]) -> Vec<IpAddr> {
        list.iter().map(|s| s.parse().unwrap()).collect()
    }

    #[test]
    fn nothing_is_touched_without_requests() {
        let plans = plan_default_routes(&[("a", None), ("b", None)]).unwrap();
        assert!(plans.iter().all(|p| p == &DefaultRoutePlan::default()));
    }

    #[test]
    fn a_v4_request_moves_only_the_v4_default() {
        let req = ips(&["10.1.1.1"]);
        let plans = plan_default_routes(&[("eth0", None), ("net1", Some(&req))]).unwrap();
        let eth0 = plans[0].action.as_ref().unwrap();
        assert!(eth0.delete_v4_default && !eth0.delete_v6_default && eth0.add_gateways.is_empty());
        let net1 = plans[1].action.as_ref().unwrap();
        assert_eq!(net1.add_gateways, req);
    }

    #[test]
    fn empty_request_removes_every_default() {
        let empty = vec![];
        let plans = plan_default_routes(&[("eth0", None), ("net1", Some(&empty))]).unwrap();
        let a = plans[0].action.as_ref().unwrap();
        assert!(a.delete_v4_default && a.delete_v6_default);
    }

    #[test]
    fn route_action_edits_the_result() {
        let result: weft_cni::CniResult = serde_json::from_str(
            r#"{"cniVersion":"1.0.0","routes":[{"dst":"0.0.0.0/0","gw":"10.0.0.1"},{"dst":"::/0","gw":"fd00::1"},{"dst":"10.1.0.0/16"}]}"#,
        )
        .unwrap();
        let action = RouteAction {
            delete_v4_default: true,
            delete_v6_default: false,
            add_gateways: ips(&["10.9.9.9"]),
        };
        let out = apply_route_action(&result, &action);
        let dsts: Vec<String> = out.routes.iter().map(|r| format!("{}", r.dst)).collect();
        assert_eq!(dsts, vec!["::/0", "10.1.0.0/16", "0.0.0.0/0"]);
        assert_eq!(out.routes[2].gw, Some("10.9.9.9".parse().unwrap()));
    }

    #[test]
    fn ecmp_names_the_requests() {
        let a = ips(&["fc00::1"]);
        let b = ips(&["fc00::2"]);
        let err = plan_default_routes(&[("x/a", Some(&a)), ("x/b", Some(&b))]).unwrap_err();
        assert_eq!(
            err.to_string(),
            "multus does not support ECMP for default-route (IPv6 gateways requested: x/a: fc00::1, x/b: fc00::2)"
        );
    }
}
