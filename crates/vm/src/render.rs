//! `weft vm render`: everything weft decides about one VMI, for inspection.

use serde_json::{Map, Value, json};
use weft_object::ObjectMeta;

use crate::admission::{Cause, CauseType, validate_create};
use crate::annotations::{launcher_pod_annotations, running_pod_annotations};
use crate::api::{KubeVirt, VirtualMachine, VirtualMachineInstance};
use crate::config::ClusterConfig;
use crate::defaults::apply_network_defaults;
use crate::names::{hashed_scheme, pod_interface_names};
use crate::netstatus::network_statuses;
use crate::status::controller_status_interfaces;

/// Field paths of the rendered validation causes are rooted here.
pub const VALIDATION_ROOT: &str = "spec";

/// Why a render input was rejected.
#[derive(Debug, thiserror::Error)]
pub enum RenderError {
    /// The text is neither JSON nor YAML.
    #[error("input is neither JSON nor YAML: {0}")]
    Parse(String),
    /// A document is not an object with a `kind`.
    #[error("document {index}: expected an object with a kind")]
    NotAnObject {
        /// Position of the document (0-based).
        index: usize,
    },
    /// A document of a kind render does not take.
    #[error(
        "document {index}: unsupported kind {kind:?} (expected VirtualMachineInstance, VirtualMachine, Pod or KubeVirt)"
    )]
    UnsupportedKind {
        /// Position of the document (0-based).
        index: usize,
        /// Its kind.
        kind: String,
    },
    /// A document of a supported kind did not deserialize.
    #[error("document {index} ({kind}): {message}")]
    Invalid {
        /// Position of the document (0-based).
        index: usize,
        /// Its kind.
        kind: String,
        /// The deserializer's message (names the field).
        message: String,
    },
    /// No VirtualMachineInstance (or VirtualMachine) was given.
    #[error("no VirtualMachineInstance in the input")]
    NoVmi,
    /// More than one object of a kind that must be unique.
    #[error("more than one {0} in the input")]
    Duplicate(&'static str),
}

/// The objects of a render input.
#[derive(Debug, Default)]
pub struct RenderInput {
    /// The VMI (a VirtualMachine's template is turned into one).
    pub vmi: VirtualMachineInstance,
    /// The launcher pod's metadata, if given.
    pub pod: Option<ObjectMeta>,
    /// The cluster configuration (KubeVirt's defaults when no KubeVirt object is given).
    pub config: ClusterConfig,
}

/// YAML 1.2 booleans only: with YAML 1.1 spellings, a namespace named `n` or `no` would turn
/// into `false` (documents are read untyped before their kind is known).
fn yaml_options() -> serde_saphyr::Options {
    serde_saphyr::options! { strict_booleans: true }
}

fn documents(doc: &str) -> Result<Vec<Value>, RenderError> {
    let values = match serde_json::from_str::<Value>(doc) {
        Ok(Value::Array(items)) => items,
        Ok(value) => vec![value],
        Err(json_err) => serde_saphyr::from_multiple_with_options::<Value>(doc, yaml_options())
            .map_err(|yaml_err| RenderError::Parse(format!("{yaml_err} (as JSON: {json_err})")))?,
    };
    let mut flat = Vec::new();
    for value in values {
        match value {
            Value::Null => {}
            Value::Object(ref map) if map.get("kind").and_then(Value::as_str) == Some("List") => {
                if let Some(Value::Array(items)) = map.get("items") {
                    flat.extend(items.iter().cloned());
                }
            }
            other => flat.push(other),
        }
    }
    Ok(flat)
}

fn typed<T: serde::de::DeserializeOwned>(index: usize, kind: &str, value: Value) -> Result<T, RenderError> {
    serde_path_to_error::deserialize(value).map_err(|e| RenderError::Invalid {
        index,
        kind: kind.into(),
        message: format!("{}: {}", e.path(), e.inner()),
    })
}

/// Split a render input into its objects.
pub fn parse_render_input(doc: &str) -> Result<RenderInput, RenderError> {
    let mut vmi = None;
    let mut pod = None;
    let mut kubevirt = None;
    for (index, value) in documents(doc)?.into_iter().enumerate() {
        let kind = value
            .as_object()
            .and_then(|m| m.get("kind"))
            .and_then(Value::as_str)
            .ok_or(RenderError::NotAnObject { index })?
            .to_string();
        match kind.as_str() {
            "VirtualMachineInstance" | "VirtualMachine" => {
                if vmi.is_some() {
                    return Err(RenderError::Duplicate("VirtualMachineInstance"));
                }
                vmi = Some(if kind == "VirtualMachine" {
                    let vm: VirtualMachine = typed(index, &kind, value)?;
                    VirtualMachineInstance {
                        metadata: vm.metadata,
                        spec: vm.spec.template.spec,
                        ..Default::default()
                    }
                } else {
                    typed(index, &kind, value)?
                });
            }
            "Pod" => {
                if pod.is_some() {
                    return Err(RenderError::Duplicate("Pod"));
                }
                let metadata = value.get("metadata").cloned().unwrap_or(Value::Null);
                let metadata: Option<ObjectMeta> = typed(index, &kind, metadata)?;
                pod = Some(metadata.unwrap_or_default());
            }
            "KubeVirt" => {
                if kubevirt.is_some() {
                    return Err(RenderError::Duplicate("KubeVirt"));
                }
                kubevirt = Some(typed::<KubeVirt>(index, &kind, value)?);
            }
            _ => return Err(RenderError::UnsupportedKind { index, kind }),
        }
    }
    Ok(RenderInput {
        vmi: vmi.ok_or(RenderError::NoVmi)?,
        pod,
        config: kubevirt
            .as_ref()
            .map(ClusterConfig::from_kubevirt)
            .unwrap_or_default(),
    })
}

/// Render parsed input (see [`render`]).
pub fn render_input(input: &RenderInput) -> Value {
    let config = &input.config;
    let mut vmi = input.vmi.clone();
    let mut validation: Vec<Cause> = Vec::new();
    if let Err(e) = apply_network_defaults(&mut vmi.spec, config) {
        validation.push(Cause {
            cause_type: CauseType::FieldValueInvalid,
            message: e.to_string(),
            field: format!("{VALIDATION_ROOT}.domain.devices.interfaces"),
        });
    }
    validation.extend(validate_create(VALIDATION_ROOT, &vmi.spec, config));

    let mut out = Map::new();
    out.insert(
        "defaulted".into(),
        json!({"networks": vmi.spec.networks, "interfaces": vmi.spec.interfaces()}),
    );
    out.insert("validation".into(), json!(validation));
    match launcher_pod_annotations(&vmi, config) {
        Ok(annotations) => out.insert("launcherPodAnnotations".into(), json!(annotations)),
        Err(e) => {
            out.insert("errors".into(), json!([e.to_string()]));
            out.insert("launcherPodAnnotations".into(), Value::Null)
        }
    };
    match &input.pod {
        Some(pod) => {
            let statuses = network_statuses(&pod.annotations);
            out.insert(
                "runningPodAnnotations".into(),
                json!(running_pod_annotations(&vmi, &pod.annotations, config)),
            );
            out.insert(
                "podInterfaceNames".into(),
                json!(pod_interface_names(&vmi.spec.networks, &statuses)),
            );
            let interfaces =
                controller_status_interfaces(&vmi.spec.networks, vmi.status_interfaces(), &statuses);
            out.insert("status".into(), json!({"interfaces": interfaces}));
        }
        None => {
            out.insert(
                "podInterfaceNames".into(),
                json!(hashed_scheme(&vmi.spec.networks)),
            );
        }
    }
    Value::Object(out)
}

/// `weft vm render`: read a YAML (multi-document) or JSON (object or list) input holding one
/// VirtualMachineInstance (or VirtualMachine), optionally the launcher Pod and a KubeVirt
/// object, and return what weft decides: `defaulted`, `validation`, `launcherPodAnnotations`,
/// `podInterfaceNames`, and with a Pod also `runningPodAnnotations` and `status`.
pub fn render(doc: &str) -> Result<Value, RenderError> {
    Ok(render_input(&parse_render_input(doc)?))
}
