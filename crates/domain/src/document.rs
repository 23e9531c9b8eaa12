//! A minimal complete `<domain type='qemu'>` for a directly booted kernel (local mode guests):
//! name, uuid, memory, vcpu, os with kernel/initrd/cmdline, ACPI, a serial console, the NICs and
//! qemu-guest-agent's channel.

use serde::{Deserialize, Serialize};

use crate::xml::{HostDev, Interface, XmlError, to_xml};

/// `<domain>`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Domain {
    /// `qemu` (TCG) or `kvm`.
    #[serde(rename = "@type")]
    pub kind: String,
    /// Domain name.
    pub name: String,
    /// Domain UUID.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub uuid: Option<String>,
    /// Memory.
    pub memory: Memory,
    /// vCPU count.
    pub vcpu: u32,
    /// Boot configuration.
    pub os: Os,
    /// Machine features.
    pub features: Features,
    /// What to do when the guest powers off.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub on_poweroff: Option<String>,
    /// What to do when the guest reboots.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub on_reboot: Option<String>,
    /// What to do when the guest crashes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub on_crash: Option<String>,
    /// Devices.
    pub devices: Devices,
}

/// `<memory unit>`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Memory {
    /// Unit (`MiB`).
    #[serde(rename = "@unit")]
    pub unit: String,
    /// Amount.
    #[serde(rename = "$text")]
    pub value: u64,
}

/// `<os>`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Os {
    /// `<type arch machine>hvm</type>`.
    #[serde(rename = "type")]
    pub os_type: OsType,
    /// Kernel image for direct boot.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kernel: Option<String>,
    /// Initial ramdisk.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub initrd: Option<String>,
    /// Kernel command line.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cmdline: Option<String>,
}

/// `<type arch machine>hvm</type>`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OsType {
    /// `x86_64`.
    #[serde(rename = "@arch")]
    pub arch: String,
    /// `q35`.
    #[serde(rename = "@machine")]
    pub machine: String,
    /// `hvm`.
    #[serde(rename = "$text")]
    pub value: String,
}

/// `<features>`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Features {
    /// `<acpi/>`: required, libvirt 9.0 otherwise passes `-no-acpi`, which QEMU 10 rejects.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub acpi: Option<Empty>,
}

/// An element without attributes or content.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Empty {}

/// `<devices>`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Devices {
    /// The QEMU binary.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub emulator: Option<String>,
    /// NICs.
    #[serde(rename = "interface", default, skip_serializing_if = "Vec::is_empty")]
    pub interfaces: Vec<Interface>,
    /// SR-IOV VFs.
    #[serde(rename = "hostdev", default, skip_serializing_if = "Vec::is_empty")]
    pub hostdevs: Vec<HostDev>,
    /// Serial ports.
    #[serde(rename = "serial", default, skip_serializing_if = "Vec::is_empty")]
    pub serials: Vec<Serial>,
    /// Consoles.
    #[serde(rename = "console", default, skip_serializing_if = "Vec::is_empty")]
    pub consoles: Vec<Console>,
    /// Channels (qemu-guest-agent's, [`guest_agent_channel`]).
    #[serde(rename = "channel", default, skip_serializing_if = "Vec::is_empty")]
    pub channels: Vec<Channel>,
    /// `<memballoon model='none'/>`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub memballoon: Option<MemBalloon>,
}

/// `<channel type='unix'>`: a virtio-serial port backed by a host Unix socket.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Channel {
    /// `unix`.
    #[serde(rename = "@type")]
    pub kind: String,
    /// `<source mode='bind' path>`: where QEMU listens.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub source: Option<ChannelSource>,
    /// `<target type='virtio' name>`.
    pub target: ChannelTarget,
}

/// `<source mode path>` of a channel.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChannelSource {
    /// `bind`: QEMU creates and listens on the socket.
    #[serde(rename = "@mode")]
    pub mode: String,
    /// Socket path.
    #[serde(rename = "@path")]
    pub path: String,
}

/// `<target type name>` of a channel.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChannelTarget {
    /// `virtio`.
    #[serde(rename = "@type")]
    pub kind: String,
    /// The port name the guest sees (`org.qemu.guest_agent.0`).
    #[serde(rename = "@name")]
    pub name: String,
}

/// The port name of qemu-guest-agent's channel (libvirt's and KubeVirt's).
pub const GUEST_AGENT_CHANNEL: &str = "org.qemu.guest_agent.0";

/// qemu-guest-agent's channel as KubeVirt defines it (`<channel type='unix'>` with target
/// `virtio` `org.qemu.guest_agent.0`), QEMU listening on `socket`.
pub fn guest_agent_channel(socket: &str) -> Channel {
    Channel {
        kind: "unix".to_string(),
        source: Some(ChannelSource {
            mode: "bind".to_string(),
            path: socket.to_string(),
        }),
        target: ChannelTarget {
            kind: "virtio".to_string(),
            name: GUEST_AGENT_CHANNEL.to_string(),
        },
    }
}

/// `<serial type>`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Serial {
    /// `pty` or `file`.
    #[serde(rename = "@type")]
    pub kind: String,
    /// `<source path>` for `file`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub source: Option<CharSource>,
    /// `<target port>`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub target: Option<SerialTarget>,
}

/// `<console type>`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Console {
    /// `pty` or `file`.
    #[serde(rename = "@type")]
    pub kind: String,
    /// `<source path>` for `file`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub source: Option<CharSource>,
    /// `<target type port>`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub target: Option<ConsoleTarget>,
}

/// `<source path>` of a character device.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CharSource {
    /// File path.
    #[serde(rename = "@path")]
    pub path: String,
}

/// `<target port>` of a serial port.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct SerialTarget {
    /// Port number.
    #[serde(rename = "@port")]
    pub port: u32,
}

/// `<target type port>` of a console.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConsoleTarget {
    /// `serial`.
    #[serde(rename = "@type")]
    pub kind: String,
    /// Port number.
    #[serde(rename = "@port")]
    pub port: u32,
}

/// `<memballoon model>`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemBalloon {
    /// `none`.
    #[serde(rename = "@model")]
    pub model: String,
}

/// What a directly booted local guest needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DirectKernelBoot {
    /// Domain name.
    pub name: String,
    /// Domain UUID (`xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx`).
    pub uuid: Option<String>,
    /// Memory in MiB.
    pub memory_mib: u64,
    /// vCPUs.
    pub vcpus: u32,
    /// Kernel image path.
    pub kernel: String,
    /// Initramfs path.
    pub initrd: Option<String>,
    /// Kernel command line.
    pub cmdline: String,
    /// Write the serial console to this file; `None` uses a pty.
    pub serial_log: Option<String>,
    /// The QEMU binary.
    pub emulator: Option<String>,
}

impl DirectKernelBoot {
    /// The domain: `type='qemu'` (TCG), q35, ACPI, serial console, no balloon, destroyed on
    /// poweroff/reboot/crash, with `interfaces` and `hostdevs` as devices.
    pub fn domain(&self, interfaces: Vec<Interface>, hostdevs: Vec<HostDev>) -> Domain {
        let (kind, source) = match &self.serial_log {
            Some(path) => ("file", Some(CharSource { path: path.clone() })),
            None => ("pty", None),
        };
        Domain {
            kind: "qemu".to_string(),
            name: self.name.clone(),
            uuid: self.uuid.clone(),
            memory: Memory {
                unit: "MiB".to_string(),
                value: self.memory_mib,
            },
            vcpu: self.vcpus,
            os: Os {
                os_type: OsType {
                    arch: "x86_64".to_string(),
                    machine: "q35".to_string(),
                    value: "hvm".to_string(),
                },
                kernel: Some(self.kernel.clone()),
                initrd: self.initrd.clone(),
                cmdline: Some(self.cmdline.clone()),
            },
            features: Features { acpi: Some(Empty {}) },
            on_poweroff: Some("destroy".to_string()),
            on_reboot: Some("destroy".to_string()),
            on_crash: Some("destroy".to_string()),
            devices: Devices {
                emulator: self.emulator.clone(),
                interfaces,
                hostdevs,
                serials: vec![Serial {
                    kind: kind.to_string(),
                    source: source.clone(),
                    target: Some(SerialTarget { port: 0 }),
                }],
                consoles: vec![Console {
                    kind: kind.to_string(),
                    source,
                    target: Some(ConsoleTarget {
                        kind: "serial".to_string(),
                        port: 0,
                    }),
                }],
                channels: Vec::new(),
                memballoon: Some(MemBalloon {
                    model: "none".to_string(),
                }),
            },
        }
    }
}

impl Domain {
    /// The document as XML.
    pub fn to_xml(&self) -> Result<String, XmlError> {
        to_xml("domain", self)
    }
}
