//! A CRI client for tests: the part of Kubernetes' CRI `runtime.v1` API that kubelet uses to
//! start and stop a pod sandbox, as gRPC over a Unix socket.
//!
//! The messages and the `RuntimeService` client are generated at build time (prost +
//! tonic-prost-build, compiled by protox, so no system `protoc`) from `proto/api.proto`, a
//! trimmed copy of upstream's `k8s.io/cri-api/pkg/apis/runtime/v1/api.proto` with upstream's
//! package, names and field numbers (the file's header names the commit).
//!
//! [`connect`] gives the async tonic client; [`CriClient`] wraps it for the blocking root tests
//! with a runtime of its own and a deadline on every call.

use std::path::{Path, PathBuf};
use std::time::Duration;

use hyper_util::rt::TokioIo;
use tonic::transport::{Channel, Endpoint, Uri};

/// The generated CRI types (`runtime.v1`).
pub mod runtime {
    /// `runtime.v1`: messages and the `RuntimeService` client, generated from `proto/api.proto`.
    #[allow(missing_docs, clippy::all, clippy::pedantic)]
    pub mod v1 {
        tonic::include_proto!("runtime.v1");
    }
}

pub use runtime::v1::runtime_service_client::RuntimeServiceClient;
use runtime::v1::{
    ListPodSandboxRequest, PodSandbox, PodSandboxConfig, PodSandboxStatusRequest, PodSandboxStatusResponse,
    RemovePodSandboxRequest, RunPodSandboxRequest, StopPodSandboxRequest, VersionRequest, VersionResponse,
};

/// Why a CRI call failed.
#[derive(Debug, thiserror::Error)]
pub enum CriError {
    /// The client's own runtime could not be built.
    #[error("tokio runtime for the CRI client")]
    Runtime(#[source] std::io::Error),
    /// The socket could not be reached.
    #[error("connect to the CRI socket {}", .0.display())]
    Connect(PathBuf, #[source] tonic::transport::Error),
    /// The runtime answered with a gRPC error status.
    #[error("CRI {method}")]
    Status {
        /// The RPC that failed.
        method: &'static str,
        /// The status the runtime sent.
        #[source]
        status: tonic::Status,
    },
}

/// The async client on `socket`: a tonic channel whose connector dials the Unix socket (the URI
/// is a placeholder gRPC needs for `:authority`; nothing resolves it). `timeout` bounds the
/// connection and every request.
pub async fn connect(socket: &Path, timeout: Duration) -> Result<RuntimeServiceClient<Channel>, CriError> {
    let path = socket.to_path_buf();
    let channel = Endpoint::from_static("http://localhost")
        .connect_timeout(timeout)
        .timeout(timeout)
        .connect_with_connector(tower::service_fn(move |_: Uri| {
            let path = path.clone();
            async move {
                let stream = tokio::net::UnixStream::connect(path).await?;
                Ok::<_, std::io::Error>(TokioIo::new(stream))
            }
        }))
        .await
        .map_err(|e| CriError::Connect(socket.to_path_buf(), e))?;
    Ok(RuntimeServiceClient::new(channel))
}

/// A blocking CRI client: the async one driven by a current-thread runtime it owns.
pub struct CriClient {
    runtime: tokio::runtime::Runtime,
    client: RuntimeServiceClient<Channel>,
}

/// A gRPC status as this module's error, naming the call.
fn status(method: &'static str) -> impl FnOnce(tonic::Status) -> CriError {
    move |status| CriError::Status { method, status }
}

impl CriClient {
    /// Connect to the runtime on `socket`; `timeout` bounds the connection and every call.
    pub fn connect(socket: &Path, timeout: Duration) -> Result<Self, CriError> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(CriError::Runtime)?;
        let client = runtime.block_on(connect(socket, timeout))?;
        Ok(Self { runtime, client })
    }

    /// `Version` for CRI API `v1`.
    pub fn version(&mut self) -> Result<VersionResponse, CriError> {
        let request = VersionRequest { version: "v1".into() };
        let response = self.runtime.block_on(self.client.version(request));
        Ok(response.map_err(status("Version"))?.into_inner())
    }

    /// `RunPodSandbox` with the default runtime handler: the new sandbox's id.
    pub fn run_pod_sandbox(&mut self, config: PodSandboxConfig) -> Result<String, CriError> {
        let request = RunPodSandboxRequest {
            config: Some(config),
            runtime_handler: String::new(),
        };
        let response = self.runtime.block_on(self.client.run_pod_sandbox(request));
        Ok(response
            .map_err(status("RunPodSandbox"))?
            .into_inner()
            .pod_sandbox_id)
    }

    /// `StopPodSandbox` (the CNI DEL happens here).
    pub fn stop_pod_sandbox(&mut self, id: &str) -> Result<(), CriError> {
        let request = StopPodSandboxRequest {
            pod_sandbox_id: id.into(),
        };
        let response = self.runtime.block_on(self.client.stop_pod_sandbox(request));
        response.map_err(status("StopPodSandbox")).map(drop)
    }

    /// `RemovePodSandbox`.
    pub fn remove_pod_sandbox(&mut self, id: &str) -> Result<(), CriError> {
        let request = RemovePodSandboxRequest {
            pod_sandbox_id: id.into(),
        };
        let response = self.runtime.block_on(self.client.remove_pod_sandbox(request));
        response.map_err(status("RemovePodSandbox")).map(drop)
    }

    /// `PodSandboxStatus`, verbose (so `info` carries the runtime's details).
    pub fn pod_sandbox_status(&mut self, id: &str) -> Result<PodSandboxStatusResponse, CriError> {
        let request = PodSandboxStatusRequest {
            pod_sandbox_id: id.into(),
            verbose: true,
        };
        let response = self.runtime.block_on(self.client.pod_sandbox_status(request));
        Ok(response.map_err(status("PodSandboxStatus"))?.into_inner())
    }

    /// `ListPodSandbox` without a filter: every sandbox.
    pub fn list_pod_sandbox(&mut self) -> Result<Vec<PodSandbox>, CriError> {
        let response = self
            .runtime
            .block_on(self.client.list_pod_sandbox(ListPodSandboxRequest {}));
        Ok(response.map_err(status("ListPodSandbox"))?.into_inner().items)
    }
}

#[cfg(test)]
mod tests {
    use super::runtime::v1::*;
    use prost::Message;

    /// The generated messages put fields at upstream's numbers: bytes worked out by hand from
    /// the protobuf encoding (tag = field number << 3 | wire type) and api.proto's numbering.
    #[test]
    fn messages_use_upstream_field_numbers() {
        let metadata = PodSandboxMetadata {
            name: "a".into(),
            uid: "u".into(),
            namespace: "n".into(),
            attempt: 1,
        };
        assert_eq!(
            metadata.encode_to_vec(),
            [0x0a, 1, b'a', 0x12, 1, b'u', 0x1a, 1, b'n', 0x20, 1]
        );
        // annotations = 7 (a map entry: key = 1, value = 2), linux = 8.
        let config = PodSandboxConfig {
            annotations: [("k".to_string(), "v".to_string())].into(),
            linux: Some(LinuxPodSandboxConfig::default()),
            ..Default::default()
        };
        assert_eq!(
            config.encode_to_vec(),
            [0x3a, 6, 0x0a, 1, b'k', 0x12, 1, b'v', 0x42, 0]
        );
        // PodSandboxStatusResponse.status = 1 → PodSandboxStatus.network = 5 →
        // additional_ips = 2 → PodIP.ip = 1; state = 3 (SANDBOX_NOTREADY = 1).
        let bytes = [0x0a, 11, 0x18, 1, 0x2a, 7, 0x12, 5, 0x0a, 3, b'f', b'd', b'1'];
        let response = PodSandboxStatusResponse::decode(&bytes[..]).unwrap();
        let status = response.status.unwrap();
        assert_eq!(status.state(), PodSandboxState::SandboxNotready);
        assert_eq!(status.network.unwrap().additional_ips[0].ip, "fd1");
    }
}
