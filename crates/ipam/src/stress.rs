//! Many allocators at once on one pool, for the tests of every store backend (feature
//! `testing`): the never-two-holders property is checked the same way everywhere.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Arc;

use weft_store::Store;

use crate::{Holder, IpamConfig, IpamError, allocate};

/// `tasks` tasks at once (task `t` on `stores[t % stores.len()]`, like separate processes each
/// opening the store), each allocating `per_task` addresses for holders `t<t>-<i>` (interface
/// `net1`, pod `ns/t<t>-<i>`). Returns who got each address and how many allocations found the
/// pool exhausted; panics on any other error and on an address handed out twice.
pub async fn race(
    stores: &[Arc<dyn Store>],
    config: &IpamConfig,
    tasks: usize,
    per_task: usize,
) -> (HashMap<IpAddr, String>, usize) {
    let handles: Vec<_> = (0..tasks)
        .map(|t| {
            let (store, config) = (stores[t % stores.len()].clone(), config.clone());
            tokio::spawn(async move {
                let mut got = Vec::new();
                let mut exhausted = 0;
                for i in 0..per_task {
                    let id = format!("t{t}-{i}");
                    let holder = Holder {
                        container_id: id.clone(),
                        ifname: "net1".into(),
                        pod_ref: format!("ns/{id}"),
                        ..Default::default()
                    };
                    match allocate(&store, &config, &holder, &[], None).await {
                        Ok(leases) => got.extend(leases.into_iter().map(|l| (l.ip, id.clone()))),
                        Err(IpamError::Exhausted { .. }) => exhausted += 1,
                        Err(e) => panic!("{id}: {e}"),
                    }
                }
                (got, exhausted)
            })
        })
        .collect();
    let mut owners = HashMap::new();
    let mut exhausted = 0;
    for handle in handles {
        let (got, ex) = handle.await.expect("allocator task");
        exhausted += ex;
        for (ip, id) in got {
            if let Some(previous) = owners.insert(ip, id.clone()) {
                panic!("{ip} handed to {previous} and {id}");
            }
        }
    }
    (owners, exhausted)
}
