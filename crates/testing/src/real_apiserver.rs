//! A real kube-apiserver + etcd for weft's `real_apiserver` tests and its benchmarks: etcd-server (Debian's) on
//! its own data dir and free loopback ports, kube-apiserver (the binary `$WEFT_KUBE_APISERVER`
//! names) with `--authorization-mode=Node,RBAC`, OwnerReferencesPermissionEnforcement, a CA,
//! serving and admin client certificates and service-account signing keys generated in the
//! test's temp dir, and an audit log of every request (user, verb, URI, code). deploy/'s CRDs and
//! RBAC are applied as a new user would; weft's components get TokenRequest tokens for their
//! ServiceAccounts and a kubeconfig each.
//!
//! Agents run in node namespaces: [`NetnsProxy`] forwards `127.0.0.1:<port>` inside a node to
//! the API server's `127.0.0.1:<port>` on the host, so one kubeconfig serves everywhere.
use std::collections::BTreeMap;
use std::io::Write;
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use base64::Engine;
use serde_json::{Value, json};

use crate::Netns;

/// The variable naming the kube-apiserver binary; without it the suite skips.
pub const APISERVER_ENV: &str = "WEFT_KUBE_APISERVER";
/// The audience of the ServiceAccount tokens (the issuer's).
const AUDIENCE: &str = "https://kubernetes.default.svc";
/// The user the API server sees for weft's node agent.
pub const NODE_USER: &str = "system:serviceaccount:weft-system:weft-node";
/// The user the API server sees for weft's controller.
pub const CONTROLLER_USER: &str = "system:serviceaccount:weft-system:weft-controller";

/// The kube-apiserver binary, or `None` after saying the test skipped (the test is also marked
/// `#[ignore = "needs WEFT_KUBE_APISERVER"]`, so it never counts as a pass without one). Root is
/// required too: agents run in network namespaces.
pub fn apiserver_or_skip(test: &str) -> Option<PathBuf> {
    let Some(path) = std::env::var_os(APISERVER_ENV) else {
        eprintln!("skipping {test}: {APISERVER_ENV} is not set (path to a kube-apiserver binary)");
        return None;
    };
    if !crate::root_or_skip(test) {
        return None;
    }
    let path = PathBuf::from(path);
    assert!(path.is_file(), "{APISERVER_ENV}={} is not a file", path.display());
    Some(path)
}

/// A free TCP port on 127.0.0.1 (bound and released: the servers bind it right after).
fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn run(cmd: &mut Command) {
    let out = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?}: {}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

fn openssl(dir: &Path, args: &[&str]) {
    run(Command::new("openssl").current_dir(dir).args(args));
}

/// A CA, the API server's serving certificate (127.0.0.1), an admin client certificate
/// (system:masters) and the service-account signing key pair, in `dir`.
fn make_certs(dir: &Path) {
    openssl(
        dir,
        &[
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-keyout",
            "ca.key",
            "-out",
            "ca.crt",
            "-days",
            "2",
            "-subj",
            "/CN=weft-test-ca",
        ],
    );
    let sign = |name: &str, subject: &str, ext: &str| {
        std::fs::write(dir.join(format!("{name}.ext")), ext).unwrap();
        openssl(
            dir,
            &[
                "req",
                "-newkey",
                "rsa:2048",
                "-nodes",
                "-keyout",
                &format!("{name}.key"),
                "-out",
                &format!("{name}.csr"),
                "-subj",
                subject,
            ],
        );
        openssl(
            dir,
            &[
                "x509",
                "-req",
                "-in",
                &format!("{name}.csr"),
                "-CA",
                "ca.crt",
                "-CAkey",
                "ca.key",
                "-CAcreateserial",
                "-out",
                &format!("{name}.crt"),
                "-days",
                "2",
                "-extfile",
                &format!("{name}.ext"),
            ],
        );
    };
    sign(
        "server",
        "/CN=kube-apiserver",
        "subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n",
    );
    sign(
        "admin",
        "/O=system:masters/CN=weft-test-admin",
        "extendedKeyUsage=clientAuth\n",
    );
    openssl(dir, &["genrsa", "-out", "sa.key", "2048"]);
    openssl(dir, &["rsa", "-in", "sa.key", "-pubout", "-out", "sa.pub"]);
}

/// One request as the audit log recorded it.
#[derive(Debug, Clone)]
pub struct Audited {
    /// Who asked (`user.username`).
    pub user: String,
    /// The verb (`get`, `list`, `watch`, `update`, ...).
    pub verb: String,
    /// The request URI, query included.
    pub uri: String,
    /// The response code.
    pub code: u16,
    /// The client's User-Agent.
    pub user_agent: String,
    /// The audit event's `requestReceivedTimestamp` line order (file order).
    pub seq: usize,
}

impl Audited {
    /// `VERB URI` without the query, for assertion messages.
    pub fn line(&self) -> String {
        format!(
            "{} {}",
            self.verb,
            self.uri.split('?').next().unwrap_or(&self.uri)
        )
    }
}

/// etcd + kube-apiserver, killed on drop.
pub struct RealCluster {
    /// Certificates, etcd's data, logs and the audit log.
    pub dir: tempfile::TempDir,
    /// The API server's port on 127.0.0.1.
    pub port: u16,
    etcd: Child,
    apiserver: Option<Child>,
    binary: PathBuf,
    /// plural and scope of each kind the API serves that the tests create, by `group/Kind`.
    kinds: BTreeMap<String, (String, bool)>,
}

impl RealCluster {
    /// Start etcd and kube-apiserver, apply deploy/'s namespace, CRDs and RBAC plus KubeVirt's
    /// CRDs, and create Nodes `n1`, `n2` and the `default` ServiceAccount pods need.
    pub fn start(binary: &Path) -> Self {
        let dir = tempfile::tempdir().unwrap();
        make_certs(dir.path());
        let (client, peer) = (free_port(), free_port());
        let etcd = Command::new("etcd")
            .arg("--name=weft-test")
            .arg(format!("--data-dir={}", dir.path().join("etcd").display()))
            .arg(format!("--listen-client-urls=http://127.0.0.1:{client}"))
            .arg(format!("--advertise-client-urls=http://127.0.0.1:{client}"))
            .arg(format!("--listen-peer-urls=http://127.0.0.1:{peer}"))
            .arg(format!("--initial-advertise-peer-urls=http://127.0.0.1:{peer}"))
            .arg(format!("--initial-cluster=weft-test=http://127.0.0.1:{peer}"))
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(dir.path().join("etcd.log")).unwrap())
            .spawn()
            .expect("etcd (Debian's etcd-server)");
        std::fs::write(
            dir.path().join("audit-policy.yaml"),
            "apiVersion: audit.k8s.io/v1\nkind: Policy\nomitStages: [RequestReceived]\nrules:\n  - level: Metadata\n",
        )
        .unwrap();
        let mut cluster = Self {
            dir,
            port: free_port(),
            etcd,
            apiserver: None,
            binary: binary.to_path_buf(),
            kinds: BTreeMap::new(),
        };
        std::fs::write(
            cluster.dir.path().join("etcd-url"),
            format!("http://127.0.0.1:{client}"),
        )
        .unwrap();
        cluster.start_apiserver();
        cluster.bootstrap();
        cluster
    }

    /// Start kube-apiserver (again, after [`Self::stop_apiserver`]) and wait until it is ready.
    pub fn start_apiserver(&mut self) {
        let d = self.dir.path();
        let p = |name: &str| d.join(name).display().to_string();
        let etcd = std::fs::read_to_string(d.join("etcd-url")).unwrap();
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(d.join("apiserver.log"))
            .unwrap();
        let child = Command::new(&self.binary)
            .arg(format!("--etcd-servers={etcd}"))
            .arg("--bind-address=127.0.0.1")
            .arg("--advertise-address=127.0.0.1")
            .arg(format!("--secure-port={}", self.port))
            .arg(format!("--cert-dir={}", p("certs")))
            .arg(format!("--tls-cert-file={}", p("server.crt")))
            .arg(format!("--tls-private-key-file={}", p("server.key")))
            .arg(format!("--client-ca-file={}", p("ca.crt")))
            .arg(format!("--service-account-issuer={AUDIENCE}"))
            .arg(format!("--api-audiences={AUDIENCE}"))
            .arg(format!("--service-account-key-file={}", p("sa.pub")))
            .arg(format!("--service-account-signing-key-file={}", p("sa.key")))
            .arg("--service-cluster-ip-range=10.96.0.0/16")
            .arg("--authorization-mode=Node,RBAC")
            .arg("--enable-admission-plugins=OwnerReferencesPermissionEnforcement,NodeRestriction,ServiceAccount")
            .arg(format!("--audit-policy-file={}", p("audit-policy.yaml")))
            .arg(format!("--audit-log-path={}", p("audit.log")))
            .arg("--audit-log-mode=blocking")
            .arg("--profiling=false")
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("kube-apiserver");
        self.apiserver = Some(child);
        let deadline = Instant::now() + Duration::from_secs(120);
        loop {
            let (code, _) = self.request("GET", "/readyz", None);
            if code == 200 {
                break;
            }
            if let Some(status) = self.apiserver.as_mut().unwrap().try_wait().unwrap() {
                panic!("kube-apiserver exited ({status}):\n{}", self.apiserver_log());
            }
            assert!(
                Instant::now() < deadline,
                "kube-apiserver not ready (readyz {code}):\n{}",
                self.apiserver_log()
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// Kill kube-apiserver (an outage; etcd keeps the state).
    pub fn stop_apiserver(&mut self) {
        if let Some(mut child) = self.apiserver.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// What kube-apiserver has written to stderr so far.
    pub fn apiserver_log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("apiserver.log")).unwrap_or_default()
    }

    /// The audit log (JSON lines, one event per request stage).
    pub fn audit_log(&self) -> PathBuf {
        self.dir.path().join("audit.log")
    }

    /// The pids of kube-apiserver (while it runs) and etcd, for CPU accounting.
    pub fn server_pids(&self) -> Vec<u32> {
        self.apiserver
            .iter()
            .map(Child::id)
            .chain([self.etcd.id()])
            .collect()
    }

    /// A kubeconfig at `path` for a ServiceAccount `weft-system/<sa>` bound to `cluster-admin`
    /// (created here), for tools that act as the cluster's administrator (a benchmark creating
    /// its NADs and pods).
    pub fn admin_kubeconfig(&mut self, sa: &str, path: &Path) {
        self.create(&json!({"apiVersion": "v1", "kind": "ServiceAccount",
                            "metadata": {"name": sa, "namespace": "weft-system"}}));
        self.create(&json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
                            "metadata": {"name": sa},
                            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                                        "name": "cluster-admin"},
                            "subjects": [{"kind": "ServiceAccount", "name": sa, "namespace": "weft-system"}]}));
        self.kubeconfig_for(sa, path);
    }

    /// A request as the admin (system:masters): (HTTP code, body as JSON or a string).
    pub fn request(&self, method: &str, path: &str, body: Option<&Value>) -> (u16, Value) {
        let d = self.dir.path();
        let mut cmd = Command::new("curl");
        cmd.args(["-sS", "-m", "10", "-o", "-", "-w", "\n%{http_code}", "-X", method])
            .arg("--cacert")
            .arg(d.join("ca.crt"))
            .arg("--cert")
            .arg(d.join("admin.crt"))
            .arg("--key")
            .arg(d.join("admin.key"))
            .args(["-H", "Content-Type: application/json"])
            .arg(format!("https://127.0.0.1:{}{path}", self.port))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null());
        if body.is_some() {
            cmd.args(["--data-binary", "@-"]);
        }
        let mut child = cmd.spawn().expect("curl");
        if let Some(body) = body {
            child
                .stdin
                .take()
                .unwrap()
                .write_all(body.to_string().as_bytes())
                .unwrap();
        }
        drop(child.stdin.take());
        let out = child.wait_with_output().unwrap();
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        let (body, code) = text.rsplit_once('\n').unwrap_or(("", "0"));
        let code = code.trim().parse().unwrap_or(0);
        let body = serde_json::from_str(body).unwrap_or_else(|_| Value::String(body.into()));
        (code, body)
    }

    /// The collection URL of `object`'s kind in its namespace.
    fn collection(&self, api_version: &str, kind: &str, namespace: Option<&str>) -> String {
        let group = api_version.rsplit_once('/').map_or("", |(g, _)| g);
        let (plural, namespaced) = match (group, kind) {
            ("", "Namespace") => ("namespaces".to_string(), false),
            ("", "Node") => ("nodes".into(), false),
            ("", "ServiceAccount") => ("serviceaccounts".into(), true),
            ("", "Pod") => ("pods".into(), true),
            ("rbac.authorization.k8s.io", "ClusterRole") => ("clusterroles".into(), false),
            ("rbac.authorization.k8s.io", "ClusterRoleBinding") => ("clusterrolebindings".into(), false),
            ("apiextensions.k8s.io", "CustomResourceDefinition") => {
                ("customresourcedefinitions".into(), false)
            }
            _ => self
                .kinds
                .get(&format!("{group}/{kind}"))
                .cloned()
                .unwrap_or_else(|| panic!("unknown kind {api_version} {kind}")),
        };
        let prefix = if group.is_empty() {
            format!("/api/{api_version}")
        } else {
            format!("/apis/{api_version}")
        };
        match (namespaced, namespace) {
            (true, ns) => format!("{prefix}/namespaces/{}/{plural}", ns.unwrap_or("default")),
            (false, _) => format!("{prefix}/{plural}"),
        }
    }

    /// The URL of `kind` `namespace/name`.
    pub fn url(&self, api_version: &str, kind: &str, namespace: Option<&str>, name: &str) -> String {
        format!("{}/{name}", self.collection(api_version, kind, namespace))
    }

    /// Create `object` as the admin; panics unless 201 (or 409 when `exists_ok`).
    pub fn create(&mut self, object: &Value) -> Value {
        let api_version = object["apiVersion"].as_str().unwrap();
        let kind = object["kind"].as_str().unwrap();
        let url = self.collection(api_version, kind, object["metadata"]["namespace"].as_str());
        let (code, body) = self.request("POST", &url, Some(object));
        assert!(code == 201 || code == 200, "POST {url}: {code} {body}");
        if kind == "CustomResourceDefinition" {
            let spec = &object["spec"];
            let group = spec["group"].as_str().unwrap();
            let version = spec["versions"][0]["name"].as_str().unwrap();
            let plural = spec["names"]["plural"].as_str().unwrap().to_string();
            let namespaced = spec["scope"] == "Namespaced";
            self.kinds.insert(
                format!("{group}/{}", spec["names"]["kind"].as_str().unwrap()),
                (plural.clone(), namespaced),
            );
            // Served once established: list until 200.
            let list = format!("/apis/{group}/{version}/{plural}");
            let deadline = Instant::now() + Duration::from_secs(30);
            while self.request("GET", &list, None).0 != 200 {
                assert!(Instant::now() < deadline, "CRD {plural} not served");
                std::thread::sleep(Duration::from_millis(100));
            }
        }
        body
    }

    /// GET an object as the admin (`None` on 404).
    pub fn get(&self, api_version: &str, kind: &str, namespace: Option<&str>, name: &str) -> Option<Value> {
        let url = self.url(api_version, kind, namespace, name);
        let (code, body) = self.request("GET", &url, None);
        match code {
            200 => Some(body),
            404 => None,
            _ => panic!("GET {url}: {code} {body}"),
        }
    }

    /// LIST a kind (all namespaces for namespaced kinds) as the admin.
    pub fn list(&self, api_version: &str, kind: &str) -> Vec<Value> {
        let url = self.collection(api_version, kind, None);
        let url = url
            .split_once("/namespaces/default")
            .map_or(url.clone(), |(a, b)| format!("{a}{b}"));
        let (code, body) = self.request("GET", &url, None);
        assert_eq!(code, 200, "LIST {url}: {body}");
        body["items"].as_array().cloned().unwrap_or_default()
    }

    /// DELETE an object as the admin (foreground propagation is the garbage collector's, which
    /// this cluster does not run: owned objects stay unless weft deletes them).
    pub fn delete(&self, api_version: &str, kind: &str, namespace: Option<&str>, name: &str) {
        let url = self.url(api_version, kind, namespace, name);
        let (code, body) = self.request("DELETE", &url, None);
        assert!(
            code == 200 || code == 202 || code == 404,
            "DELETE {url}: {code} {body}"
        );
    }

    /// Apply every document of the YAML files under deploy/`sub` (namespace, CRDs, RBAC).
    pub fn apply_deploy(&mut self, sub: &str) {
        // This crate is crates/testing: deploy/ is the workspace's.
        let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../deploy")
            .join(sub);
        let mut paths: Vec<PathBuf> = if dir.is_dir() {
            std::fs::read_dir(&dir)
                .unwrap()
                .map(|e| e.unwrap().path())
                .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
                .collect()
        } else {
            vec![dir]
        };
        paths.sort();
        for path in paths {
            let text = std::fs::read_to_string(&path).unwrap();
            for doc in serde_saphyr::from_multiple::<Value>(&text).unwrap() {
                if doc.is_object() {
                    self.create(&doc);
                }
            }
        }
    }

    fn bootstrap(&mut self) {
        self.apply_deploy("00-namespace.yaml");
        self.apply_deploy("crds");
        for crd in kubevirt_crds() {
            self.create(&crd);
        }
        self.apply_deploy("rbac");
        // Pods need their ServiceAccount (no kube-controller-manager makes `default` here).
        self.create(&json!({"apiVersion": "v1", "kind": "ServiceAccount",
                            "metadata": {"name": "default", "namespace": "default"}}));
        for node in ["n1", "n2"] {
            self.create(&json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": node}}));
        }
    }

    /// A kubeconfig for ServiceAccount `weft-system/<sa>` (a TokenRequest token) at `path`.
    pub fn kubeconfig_for(&self, sa: &str, path: &Path) {
        let url = format!("/api/v1/namespaces/weft-system/serviceaccounts/{sa}/token");
        let request = json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
                             "spec": {"audiences": [AUDIENCE], "expirationSeconds": 7200}});
        let (code, body) = self.request("POST", &url, Some(&request));
        assert_eq!(code, 201, "TokenRequest {sa}: {body}");
        let token = body["status"]["token"].as_str().unwrap();
        let ca = std::fs::read(self.dir.path().join("ca.crt")).unwrap();
        let config = json!({
            "apiVersion": "v1", "kind": "Config",
            "clusters": [{"name": "real", "cluster": {
                "server": format!("https://127.0.0.1:{}", self.port),
                "certificate-authority-data": base64::engine::general_purpose::STANDARD.encode(ca)}}],
            "users": [{"name": sa, "user": {"token": token}}],
            "contexts": [{"name": "real", "context": {"cluster": "real", "user": sa}}],
            "current-context": "real",
        });
        std::fs::write(path, config.to_string()).unwrap();
    }

    /// Every request the audit log holds so far (one per audit ID, the last stage's view).
    pub fn audit(&self) -> Vec<Audited> {
        let text = std::fs::read_to_string(self.dir.path().join("audit.log")).unwrap_or_default();
        let mut by_id: BTreeMap<String, Audited> = BTreeMap::new();
        for (seq, line) in text.lines().enumerate() {
            let Ok(event) = serde_json::from_str::<Value>(line) else {
                continue;
            };
            let id = event["auditID"].as_str().unwrap_or_default().to_string();
            let first = by_id.get(&id).map(|a| a.seq);
            by_id.insert(
                id,
                Audited {
                    user: event["user"]["username"].as_str().unwrap_or_default().into(),
                    verb: event["verb"].as_str().unwrap_or_default().into(),
                    uri: event["requestURI"].as_str().unwrap_or_default().into(),
                    code: event["responseStatus"]["code"].as_u64().unwrap_or(0) as u16,
                    user_agent: event["userAgent"].as_str().unwrap_or_default().into(),
                    seq: first.unwrap_or(seq),
                },
            );
        }
        let mut all: Vec<Audited> = by_id.into_values().collect();
        all.sort_by_key(|a| a.seq);
        all
    }

    /// The audit log's length now: [`Self::audit_since`] counts what came after.
    pub fn audit_mark(&self) -> usize {
        std::fs::read_to_string(self.dir.path().join("audit.log"))
            .unwrap_or_default()
            .lines()
            .count()
    }

    /// The requests of `user` that started after `mark`.
    pub fn audit_since(&self, mark: usize, user: &str) -> Vec<Audited> {
        self.audit()
            .into_iter()
            .filter(|a| a.seq >= mark && a.user == user)
            .collect()
    }

    /// The requests of weft's components answered 403 or 422 (must be none).
    pub fn rejected(&self) -> Vec<Audited> {
        self.audit()
            .into_iter()
            .filter(|a| {
                (a.user == NODE_USER || a.user == CONTROLLER_USER) && (a.code == 403 || a.code == 422)
            })
            .collect()
    }

    /// Requests per (user, verb) for weft's components, for the report (--no-capture).
    pub fn print_request_counts(&self) {
        let mut counts: BTreeMap<(String, String), usize> = BTreeMap::new();
        for a in self.audit() {
            if a.user == NODE_USER || a.user == CONTROLLER_USER {
                *counts.entry((a.user.clone(), a.verb.clone())).or_default() += 1;
            }
        }
        for ((user, verb), n) in counts {
            eprintln!("requests: {user} {verb} {n}");
        }
    }
}

impl Drop for RealCluster {
    fn drop(&mut self) {
        self.stop_apiserver();
        let _ = self.etcd.kill();
        let _ = self.etcd.wait();
    }
}

/// KubeVirt's CRDs in the shape KubeVirt ships them where it matters here: kubevirt.io/v1,
/// namespaced, VirtualMachine with a status subresource, VirtualMachineInstance WITHOUT one
/// (a `PUT .../status` is a 404 on a real cluster), migrations, and the KubeVirt CR.
fn kubevirt_crds() -> Vec<Value> {
    let crd = |kind: &str, plural: &str, status: bool| {
        let mut version = json!({"name": "v1", "served": true, "storage": true,
            "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}});
        if status {
            version["subresources"] = json!({"status": {}});
        }
        json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
               "metadata": {"name": format!("{plural}.kubevirt.io")},
               "spec": {"group": "kubevirt.io", "scope": "Namespaced",
                        "names": {"kind": kind, "plural": plural, "singular": kind.to_lowercase(),
                                  "listKind": format!("{kind}List")},
                        "versions": [version]}})
    };
    vec![
        crd("VirtualMachine", "virtualmachines", true),
        crd("VirtualMachineInstance", "virtualmachineinstances", false),
        crd(
            "VirtualMachineInstanceMigration",
            "virtualmachineinstancemigrations",
            true,
        ),
        crd("KubeVirt", "kubevirts", true),
    ]
}

/// Forwards `127.0.0.1:<port>` inside a node namespace to `127.0.0.1:<port>` on the host (the
/// API server), until dropped. A refused upstream closes the client's connection, as an API
/// server that is down would refuse it.
pub struct NetnsProxy {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl NetnsProxy {
    /// Listen on `127.0.0.1:<port>` in `netns` and relay each connection to the host's.
    pub fn start(netns: &Netns, port: u16) -> Self {
        let listener = netns.enter(move || TcpListener::bind(("127.0.0.1", port)).unwrap());
        listener.set_nonblocking(true).unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::spawn(move || {
            while !flag.load(Ordering::Relaxed) {
                match listener.accept() {
                    Ok((client, _)) => {
                        let _ = client.set_nonblocking(false);
                        let Ok(upstream) = TcpStream::connect(("127.0.0.1", port)) else {
                            continue;
                        };
                        pipe(client, upstream);
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(10)),
                }
            }
        });
        Self {
            stop,
            thread: Some(thread),
        }
    }
}

fn pipe(a: TcpStream, b: TcpStream) {
    let (a2, b2) = (a.try_clone().unwrap(), b.try_clone().unwrap());
    let copy = |mut from: TcpStream, mut to: TcpStream| {
        std::thread::spawn(move || {
            let _ = std::io::copy(&mut from, &mut to);
            let _ = to.shutdown(std::net::Shutdown::Both);
            let _ = from.shutdown(std::net::Shutdown::Both);
        });
    };
    copy(a, b2);
    copy(b, a2);
}

impl Drop for NetnsProxy {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}
