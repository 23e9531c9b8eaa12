//! Running a guest with QEMU: the command line is decided purely from a [`GuestSpec`]; the
//! runner only spawns it inside a network namespace, polls the serial log and kills it.
//!
//! The TAPs must exist beforehand in that namespace (the launcher wiring creates them, as
//! KubeVirt's virt-handler does); QEMU opens them by name.

use std::fs::File;
use std::os::fd::AsRawFd;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::qmp::{self, QmpClient};
use crate::report::{GuestReport, LogFollower};

/// The QEMU binary weft runs.
pub const QEMU_BINARY: &str = "qemu-system-x86_64";

/// The NIC model the guest's initramfs has drivers for.
pub const DEFAULT_NIC_MODEL: &str = "virtio-net-pci";

/// Errors validating, starting or watching a guest; each names the guest.
#[derive(Debug, thiserror::Error)]
pub enum QemuError {
    /// A field of the spec is invalid.
    #[error("guest {guest}: {field}: {message}")]
    InvalidSpec {
        /// Guest name.
        guest: String,
        /// The offending field.
        field: String,
        /// What is wrong.
        message: String,
    },
    /// The network namespace could not be opened.
    #[error("guest {guest}: network namespace {netns}: {source}")]
    Netns {
        /// Guest name.
        guest: String,
        /// The namespace name.
        netns: String,
        /// The underlying error.
        source: std::io::Error,
    },
    /// QEMU could not be started.
    #[error("guest {guest}: starting {QEMU_BINARY}: {source}")]
    Spawn {
        /// Guest name.
        guest: String,
        /// The underlying error.
        source: std::io::Error,
    },
    /// QEMU exited before the guest reported what was awaited.
    #[error("guest {guest}: QEMU exited ({status}) before the guest was ready; QEMU said: {stderr}")]
    Exited {
        /// Guest name.
        guest: String,
        /// Exit status.
        status: String,
        /// QEMU's stderr.
        stderr: String,
    },
    /// The deadline passed.
    #[error("guest {guest}: not ready after {waited:?}; last report: {report:?}")]
    Timeout {
        /// Guest name.
        guest: String,
        /// How long it waited.
        waited: Duration,
        /// What the guest had reported by then.
        report: Box<GuestReport>,
    },
    /// A hot-plug request failed.
    #[error("guest {guest}: hot-plug {device}: {source}")]
    Hotplug {
        /// Guest name.
        guest: String,
        /// The device id.
        device: String,
        /// What QMP said.
        source: crate::qmp::QmpError,
    },
    /// No free hot-plug slot is left.
    #[error("guest {guest}: all {slots} hot-plug slots are used (GuestSpec.hotplug_slots)")]
    NoHotplugSlot {
        /// Guest name.
        guest: String,
        /// How many there are.
        slots: u8,
    },
    /// Reading the serial log failed.
    #[error("guest {guest}: reading {path}: {source}")]
    Io {
        /// Guest name.
        guest: String,
        /// The file.
        path: PathBuf,
        /// The underlying error.
        source: std::io::Error,
    },
}

/// One guest NIC: a TAP in the namespace (or a passt socket), the guest MAC and the device model.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GuestNic {
    /// Name of the TAP device, created beforehand (unused when `stream` is set).
    pub tap: String,
    /// Guest MAC address (`aa:bb:cc:dd:ee:ff`).
    pub mac: String,
    /// QEMU device model, [`DEFAULT_NIC_MODEL`] normally.
    pub model: String,
    /// A Unix stream socket to connect the NIC to instead of a TAP (passt's `--socket`):
    /// `-netdev stream,server=off,addr.type=unix,addr.path=…`.
    pub stream: Option<PathBuf>,
}

impl GuestNic {
    /// A virtio NIC on `tap` with `mac`.
    pub fn virtio(tap: &str, mac: &str) -> Self {
        Self {
            tap: tap.into(),
            mac: mac.into(),
            model: DEFAULT_NIC_MODEL.into(),
            stream: None,
        }
    }

    /// A virtio NIC connected to the Unix stream socket `socket` (passt) with `mac`.
    pub fn virtio_stream(socket: &Path, mac: &str) -> Self {
        Self {
            stream: Some(socket.to_path_buf()),
            ..Self::virtio("", mac)
        }
    }

    /// QEMU's `-netdev` value for this NIC as netdev `id`.
    pub fn netdev(&self, id: &str) -> String {
        match &self.stream {
            Some(socket) => format!(
                "stream,id={id},server=off,addr.type=unix,addr.path={}",
                socket.display()
            ),
            None => format!(
                "tap,id={id},ifname={},script=no,downscript=no,vhost=off",
                self.tap
            ),
        }
    }
}

/// Everything needed to run one guest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GuestSpec {
    /// Guest name (used in file names and errors).
    pub name: String,
    /// Uncompressed PVH kernel (`vmlinux`).
    pub kernel: PathBuf,
    /// The initramfs.
    pub initrd: PathBuf,
    /// Memory in MiB.
    pub memory_mib: u32,
    /// Extra kernel command-line words (e.g. `weft.ping=10.0.2.1`).
    pub cmdline_extras: Vec<String>,
    /// NICs, in guest order (`eth0`, `eth1`, …).
    pub nics: Vec<GuestNic>,
    /// Directory for the serial log, pidfile and QEMU's stderr.
    pub run_dir: PathBuf,
    /// Empty PCIe root ports for NICs hot-plugged later ([`RunningGuest::hotplug_nic`]).
    pub hotplug_slots: u8,
    /// The image runs qemu-guest-agent: give it its virtio-serial channel
    /// ([`GuestSpec::qga_socket`]). Off for an image built without the agent.
    pub guest_agent: bool,
    /// A live-migration target: QEMU starts with `-incoming defer` and waits for QMP
    /// `migrate-incoming` ([`crate::migrate`]) instead of booting.
    pub incoming: bool,
    /// Append to the serial log instead of truncating it (a migration target continues the
    /// source's log).
    pub serial_append: bool,
}

impl GuestSpec {
    /// A guest with 256 MiB, no NICs and no extras.
    pub fn new(name: &str, kernel: &Path, initrd: &Path, run_dir: &Path) -> Self {
        Self {
            name: name.into(),
            kernel: kernel.into(),
            initrd: initrd.into(),
            memory_mib: 256,
            cmdline_extras: Vec::new(),
            nics: Vec::new(),
            run_dir: run_dir.into(),
            hotplug_slots: 0,
            guest_agent: true,
            incoming: false,
            serial_append: false,
        }
    }

    /// The serial console log.
    pub fn serial_log(&self) -> PathBuf {
        self.run_dir.join(format!("{}.serial.log", self.name))
    }

    /// The pidfile QEMU writes.
    pub fn pidfile(&self) -> PathBuf {
        self.run_dir.join(format!("{}.pid", self.name))
    }

    /// The QMP control socket (hot-plug).
    pub fn qmp_socket(&self) -> PathBuf {
        self.run_dir.join(format!("{}.qmp", self.name))
    }

    /// qemu-guest-agent's channel: a Unix socket QEMU listens on, bridged to the guest's
    /// virtio-serial port [`crate::agent::CHANNEL_NAME`] ([`crate::qga`] talks to it).
    pub fn qga_socket(&self) -> PathBuf {
        self.run_dir.join(format!("{}.qga.sock", self.name))
    }

    /// Where QEMU's own stdout/stderr go.
    pub fn qemu_log(&self) -> PathBuf {
        self.run_dir.join(format!("{}.qemu.log", self.name))
    }

    /// The kernel command line.
    pub fn cmdline(&self) -> String {
        // no_timer_check: under TCG on a loaded host the kernel's IO-APIC timer check can miss
        // its ticks and panic ("IO-APIC + timer doesn't work!"); a VM's timer is known good.
        let mut words = vec![
            "console=ttyS0",
            "quiet",
            "loglevel=3",
            "panic=-1",
            "no_timer_check",
        ];
        words.extend(self.cmdline_extras.iter().map(String::as_str));
        words.join(" ")
    }

    /// Checks names, MACs, models and sizes; the error names the field.
    pub fn validate(&self) -> Result<(), QemuError> {
        let invalid = |field: &str, message: String| QemuError::InvalidSpec {
            guest: self.name.clone(),
            field: field.into(),
            message,
        };
        let safe = |s: &str| {
            !s.is_empty()
                && s.chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        };
        if !safe(&self.name) {
            return Err(invalid(
                "name",
                format!("{:?} must be [A-Za-z0-9._-]+", self.name),
            ));
        }
        if self.memory_mib < 64 {
            return Err(invalid(
                "memory_mib",
                format!("{} MiB is too little (at least 64)", self.memory_mib),
            ));
        }
        if self.qga_socket().as_os_str().len() >= 108 {
            return Err(invalid(
                "run_dir",
                format!("{} is too long for a Unix socket path", self.run_dir.display()),
            ));
        }
        for (field, path) in [
            ("kernel", &self.kernel),
            ("initrd", &self.initrd),
            ("run_dir", &self.run_dir),
        ] {
            if path.to_str().is_none_or(|p| p.contains(',')) {
                return Err(invalid(
                    field,
                    format!("{} must be UTF-8 without ','", path.display()),
                ));
            }
        }
        for word in &self.cmdline_extras {
            if word.is_empty() || word.contains(char::is_whitespace) {
                return Err(invalid(
                    "cmdline_extras",
                    format!("{word:?} must be one non-empty word"),
                ));
            }
        }
        for (index, nic) in self.nics.iter().enumerate() {
            let field = |name: &str| format!("nics[{index}].{name}");
            if let Some(socket) = &nic.stream {
                if socket.to_str().is_none_or(|p| p.contains(',') || p.len() > 107) {
                    return Err(invalid(
                        &field("stream"),
                        format!(
                            "{} must be UTF-8 without ',' and fit a Unix socket path",
                            socket.display()
                        ),
                    ));
                }
            } else if !safe(&nic.tap) || nic.tap.len() > 15 {
                return Err(invalid(
                    &field("tap"),
                    format!("{:?} is not a valid interface name", nic.tap),
                ));
            }
            if !weft_cni::mac::is_colon_mac(&nic.mac) {
                return Err(invalid(
                    &field("mac"),
                    format!("{:?} is not aa:bb:cc:dd:ee:ff", nic.mac),
                ));
            }
            if !safe(&nic.model) {
                return Err(invalid(
                    &field("model"),
                    format!("{:?} is not a device model", nic.model),
                ));
            }
        }
        Ok(())
    }

    /// The full QEMU argv (program first): q35, TCG (KVM is unusable on the target machines),
    /// PVH kernel boot, serial to a file, no display/monitor/default devices, no reboot (a
    /// guest panic or poweroff ends QEMU), each NIC a TAP netdev (vhost off: no
    /// `/dev/vhost-net`) with an empty ROM file (no iPXE), and qemu-guest-agent's channel
    /// last when [`GuestSpec::guest_agent`] (a virtio-serial port on a Unix socket, as libvirt
    /// and KubeVirt attach it).
    pub fn argv(&self) -> Vec<String> {
        let mut argv: Vec<String> = [
            QEMU_BINARY,
            "-machine",
            "q35",
            "-accel",
            "tcg",
            "-cpu",
            "max",
            "-smp",
            "1",
            "-nodefaults",
            "-no-user-config",
            "-display",
            "none",
            "-monitor",
            "none",
            "-no-reboot",
        ]
        .into_iter()
        .map(String::from)
        .collect();
        argv.extend([
            "-name".into(),
            self.name.clone(),
            "-m".into(),
            self.memory_mib.to_string(),
            "-kernel".into(),
            self.kernel.display().to_string(),
            "-initrd".into(),
            self.initrd.display().to_string(),
            "-append".into(),
            self.cmdline(),
        ]);
        if self.serial_append {
            argv.extend([
                "-chardev".into(),
                format!("{},append=on", serial_chardev(&self.serial_log())),
                "-serial".into(),
                "chardev:weft-serial".into(),
            ]);
        } else {
            argv.extend(["-serial".into(), format!("file:{}", self.serial_log().display())]);
        }
        argv.extend([
            "-pidfile".into(),
            self.pidfile().display().to_string(),
            "-qmp".into(),
            format!("unix:{},server=on,wait=off", self.qmp_socket().display()),
        ]);
        for slot in 0..self.hotplug_slots {
            argv.extend([
                "-device".into(),
                format!(
                    "pcie-root-port,id={},chassis={},bus=pcie.0",
                    hotplug_port(slot),
                    u16::from(slot) + 1
                ),
            ]);
        }
        for (index, nic) in self.nics.iter().enumerate() {
            argv.extend([
                "-netdev".into(),
                nic.netdev(&format!("net{index}")),
                "-device".into(),
                format!("{},netdev=net{index},mac={},romfile=", nic.model, nic.mac),
            ]);
        }
        if self.incoming {
            argv.extend(["-incoming".into(), "defer".into()]);
        }
        if !self.guest_agent {
            return argv;
        }
        argv.extend([
            "-device".into(),
            "virtio-serial-pci,id=virtio-serial0".into(),
            "-chardev".into(),
            format!(
                "socket,path={},server=on,wait=off,id=qga0",
                self.qga_socket().display()
            ),
            "-device".into(),
            format!(
                "virtserialport,bus=virtio-serial0.0,chardev=qga0,name={}",
                crate::agent::CHANNEL_NAME
            ),
        ]);
        argv
    }
}

/// The `-chardev` of an appended serial log (without `,append=on`).
fn serial_chardev(log: &Path) -> String {
    format!("file,id=weft-serial,path={}", log.display())
}

/// The id of the PCIe root port that hot-plug slot `slot` uses.
pub fn hotplug_port(slot: u8) -> String {
    format!("weft-hp{slot}")
}

/// A QEMU process; dropping it kills and reaps QEMU.
#[derive(Debug)]
pub struct RunningGuest {
    spec: GuestSpec,
    child: Option<Child>,
    /// QEMU started by another process and taken over ([`RunningGuest::adopt`]): not our
    /// child, so it is signalled by pid and watched through /proc.
    adopted: Option<u32>,
    follower: LogFollower,
    /// Hot-plugged device ids by slot.
    plugged: Vec<Option<String>>,
}

impl RunningGuest {
    /// Starts QEMU for `spec`, inside network namespace `netns` when given: a name under
    /// `/run/netns`, or an absolute path to a namespace file (e.g. `/proc/<pid>/ns/net`). The namespace is entered in the child between fork and exec, so the caller's
    /// thread never changes namespace.
    pub fn spawn(spec: &GuestSpec, netns: Option<&str>) -> Result<Self, QemuError> {
        spec.validate()?;
        let guest = spec.name.clone();
        let io = |path: &Path| {
            let guest = guest.clone();
            let path = path.to_path_buf();
            move |source| QemuError::Io { guest, path, source }
        };
        std::fs::create_dir_all(&spec.run_dir).map_err(io(&spec.run_dir))?;
        // A migration target continues the source's serial log (appended), a new guest starts one.
        create_private(&spec.serial_log(), spec.serial_append).map_err(io(&spec.serial_log()))?;
        let qemu_log = create_private(&spec.qemu_log(), false).map_err(io(&spec.qemu_log()))?;
        let qemu_err = qemu_log.try_clone().map_err(io(&spec.qemu_log()))?;
        let argv = spec.argv();
        let mut command = Command::new(&argv[0]);
        command
            .args(&argv[1..])
            .stdin(Stdio::null())
            .stdout(qemu_log)
            .stderr(qemu_err);
        let netns_file =
            match netns {
                Some(name) => Some(File::open(Path::new("/run/netns").join(name)).map_err(|source| {
                    QemuError::Netns {
                        guest: guest.clone(),
                        netns: name.into(),
                        source,
                    }
                })?),
                None => None,
            };
        if let Some(file) = &netns_file {
            let fd = file.as_raw_fd();
            // SAFETY: setns(2) is async-signal-safe and `fd` stays open in the child until exec.
            unsafe {
                command.pre_exec(move || {
                    if libc::setns(fd, libc::CLONE_NEWNET) != 0 {
                        return Err(std::io::Error::last_os_error());
                    }
                    Ok(())
                });
            }
        }
        let child = command
            .spawn()
            .map_err(|source| QemuError::Spawn { guest, source })?;
        Ok(Self {
            spec: spec.clone(),
            child: Some(child),
            adopted: None,
            follower: LogFollower::new(&spec.serial_log()),
            plugged: vec![None; usize::from(spec.hotplug_slots)],
        })
    }

    /// Takes over the QEMU of `spec` running as `pid`, started by another process (a node agent
    /// that restarted): reports are read from the serial log from its beginning, hot-plug goes
    /// through its QMP socket, `plugged` says which hot-plug slots hold which device ids, and
    /// stopping (or dropping) the handle kills it. The caller vouches that `pid` is that QEMU.
    pub fn adopt(spec: &GuestSpec, pid: u32, plugged: Vec<Option<String>>) -> Self {
        let mut plugged = plugged;
        plugged.resize(usize::from(spec.hotplug_slots), None);
        Self {
            spec: spec.clone(),
            child: None,
            adopted: Some(pid),
            follower: LogFollower::new(&spec.serial_log()),
            plugged,
        }
    }

    /// How QEMU ended, once it has (`None` while it runs); an adopted QEMU is not our child,
    /// so only that it is gone is known.
    pub fn exited(&mut self) -> Option<String> {
        if let Some(child) = self.child.as_mut() {
            return child.try_wait().ok().flatten().map(|status| status.to_string());
        }
        let pid = self.adopted?;
        let gone = std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .map(|s| {
                s.rsplit_once(')')
                    .is_some_and(|(_, r)| r.trim_start().starts_with('Z'))
            })
            .unwrap_or(true);
        gone.then(|| "exited".to_string())
    }

    /// Which device id each hot-plug slot holds (to hand over with [`RunningGuest::adopt`]).
    pub fn plugged(&self) -> &[Option<String>] {
        &self.plugged
    }

    /// QEMU's process id.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id).or(self.adopted)
    }

    /// The spec this guest runs.
    pub fn spec(&self) -> &GuestSpec {
        &self.spec
    }

    /// What the guest has reported so far (reading only the log's new lines).
    pub fn report(&mut self) -> Result<GuestReport, QemuError> {
        match self.follower.poll() {
            Ok(report) => Ok(report.clone()),
            Err(source) => Err(QemuError::Io {
                guest: self.spec.name.clone(),
                path: self.spec.serial_log(),
                source,
            }),
        }
    }

    /// Polls the serial log until `ready` holds for the report, QEMU exits, or `timeout` passes.
    pub fn wait_for(
        &mut self,
        timeout: Duration,
        ready: impl Fn(&GuestReport) -> bool,
    ) -> Result<GuestReport, QemuError> {
        let start = Instant::now();
        loop {
            let report = self.report()?;
            if ready(&report) {
                return Ok(report);
            }
            if let Some(child) = self.child.as_mut()
                && let Ok(Some(status)) = child.try_wait()
            {
                let stderr = std::fs::read_to_string(self.spec.qemu_log()).unwrap_or_default();
                return Err(QemuError::Exited {
                    guest: self.spec.name.clone(),
                    status: status.to_string(),
                    stderr: stderr.trim().to_string(),
                });
            }
            if start.elapsed() >= timeout {
                return Err(QemuError::Timeout {
                    guest: self.spec.name.clone(),
                    waited: start.elapsed(),
                    report: Box::new(report),
                });
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Hot-plugs `nic` (its TAP must exist) into a free slot as device `id`; the guest agent
    /// leases it over DHCP like the NICs present at boot.
    pub fn hotplug_nic(&mut self, nic: &GuestNic, id: &str) -> Result<(), QemuError> {
        let guest = self.spec.name.clone();
        let Some(slot) = self.plugged.iter().position(Option::is_none) else {
            return Err(QemuError::NoHotplugSlot {
                guest,
                slots: self.spec.hotplug_slots,
            });
        };
        let failed = |source| QemuError::Hotplug {
            guest: guest.clone(),
            device: id.into(),
            source,
        };
        let mut qmp = QmpClient::connect(&self.spec.qmp_socket()).map_err(failed)?;
        let [netdev, device] = qmp::hotplug_nic_commands(nic, id, slot as u8);
        qmp.execute(&netdev).map_err(failed)?;
        if let Err(error) = qmp.execute(&device) {
            // Roll back the backend so the TAP is free for a retry.
            let _ = qmp.execute(&qmp::unplug_nic_commands(id)[1]);
            return Err(failed(error));
        }
        self.plugged[slot] = Some(id.to_string());
        Ok(())
    }

    /// Unplugs hot-plugged device `id`: asks the guest to release it, waits for QEMU's
    /// `DEVICE_DELETED` (PCIe native hot-unplug takes ~5 s), then removes its TAP backend.
    pub fn unplug_nic(&mut self, id: &str) -> Result<(), QemuError> {
        let guest = self.spec.name.clone();
        let failed = |source| QemuError::Hotplug {
            guest: guest.clone(),
            device: id.into(),
            source,
        };
        let mut qmp = QmpClient::connect(&self.spec.qmp_socket()).map_err(failed)?;
        let [device_del, netdev_del] = qmp::unplug_nic_commands(id);
        qmp.execute(&device_del).map_err(failed)?;
        qmp.wait_for_event("DEVICE_DELETED", id).map_err(failed)?;
        qmp.execute(&netdev_del).map_err(failed)?;
        for slot in self.plugged.iter_mut().filter(|s| s.as_deref() == Some(id)) {
            *slot = None;
        }
        Ok(())
    }

    /// Leaves QEMU running after this handle is gone (e.g. the local cluster outliving the
    /// command that started it); returns its pid. Stop it later with [`stop_by_pidfile`].
    pub fn detach(mut self) -> Option<u32> {
        self.child.take().map(|child| child.id())
    }

    /// Kills QEMU (SIGKILL: the guest keeps no state worth a clean shutdown) and reaps it.
    pub fn stop(mut self) -> std::io::Result<()> {
        self.kill()
    }

    fn kill(&mut self) -> std::io::Result<()> {
        if let Some(pid) = self.adopted.take() {
            // Not our child: signal it and wait (bounded) until it is gone from /proc.
            // SAFETY: kill(2) on the pid the adopter vouched for.
            unsafe { libc::kill(pid as i32, libc::SIGKILL) };
            let deadline = Instant::now() + Duration::from_secs(5);
            while Instant::now() < deadline && Path::new(&format!("/proc/{pid}")).exists() {
                let zombie = std::fs::read_to_string(format!("/proc/{pid}/stat"))
                    .map(|s| {
                        s.rsplit_once(')')
                            .is_some_and(|(_, r)| r.trim_start().starts_with('Z'))
                    })
                    .unwrap_or(true);
                if zombie {
                    break;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            let _ = std::fs::remove_file(self.spec.pidfile());
            let _ = std::fs::remove_file(self.spec.qmp_socket());
            let _ = std::fs::remove_file(self.spec.qga_socket());
            return Ok(());
        }
        let Some(mut child) = self.child.take() else {
            return Ok(());
        };
        if child.try_wait()?.is_none() {
            child.kill()?;
        }
        child.wait()?;
        let _ = std::fs::remove_file(self.spec.pidfile());
        let _ = std::fs::remove_file(self.spec.qmp_socket());
        let _ = std::fs::remove_file(self.spec.qga_socket());
        Ok(())
    }
}

/// Kills the QEMU of `spec` found through its pidfile, if it is still running and really is
/// that guest's QEMU (its command line names the guest's serial log); returns whether it killed
/// one. Removes the pidfile either way.
pub fn stop_by_pidfile(spec: &GuestSpec) -> std::io::Result<bool> {
    let pidfile = spec.pidfile();
    let pid = match std::fs::read_to_string(&pidfile) {
        Ok(text) => text.trim().parse::<i32>().ok(),
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(false),
        Err(error) => return Err(error),
    };
    let marker = format!("file:{}", spec.serial_log().display());
    let appended = format!("{},append=on", serial_chardev(&spec.serial_log()));
    let ours = pid.filter(|pid| {
        std::fs::read(format!("/proc/{pid}/cmdline"))
            .map(|cmdline| {
                cmdline
                    .split(|b| *b == 0)
                    .any(|arg| arg == marker.as_bytes() || arg == appended.as_bytes())
            })
            .unwrap_or(false)
    });
    let killed = match ours {
        Some(pid) => {
            // SAFETY: kill(2) on a pid we just verified to be this guest's QEMU.
            if unsafe { libc::kill(pid, libc::SIGKILL) } != 0 {
                return Err(std::io::Error::last_os_error());
            }
            let deadline = Instant::now() + Duration::from_secs(5);
            while is_alive(pid) && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(20));
            }
            true
        }
        None => false,
    };
    let _ = std::fs::remove_file(&pidfile);
    if killed {
        let _ = std::fs::remove_file(spec.qmp_socket());
    }
    Ok(killed)
}

/// Whether `pid` still runs (a zombie waiting for its parent does not).
fn is_alive(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|stat| {
            let state = stat.rsplit_once(')')?.1.split_whitespace().next()?.to_string();
            Some(state != "Z" && state != "X")
        })
        .unwrap_or(false)
}

impl Drop for RunningGuest {
    fn drop(&mut self) {
        let _ = self.kill();
    }
}

/// Create (or truncate, or append to) a log file readable by root only: the guest's serial log and QEMU's
/// output name addresses and leases. QEMU opens the serial file itself later and keeps its mode.
fn create_private(path: &Path, append: bool) -> std::io::Result<File> {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .append(append)
        .truncate(!append)
        .mode(0o600)
        .open(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_adopted_guest_reports_its_pid_and_is_killed_on_stop() {
        let dir = tempfile::tempdir().unwrap();
        let mut spec = spec();
        spec.run_dir = dir.path().to_path_buf();
        spec.hotplug_slots = 2;
        let mut other = Command::new("sleep").arg("30").spawn().unwrap();
        let pid = other.id();
        let guest = RunningGuest::adopt(&spec, pid, vec![Some("ua-x".into())]);
        assert_eq!(guest.pid(), Some(pid));
        assert_eq!(guest.plugged(), [Some("ua-x".to_string()), None]);
        let mut guest = guest;
        assert_eq!(guest.exited(), None, "still running");
        guest.stop().unwrap();
        let status = other.wait().unwrap();
        assert!(!status.success(), "killed, not exited: {status}");
    }

    fn spec() -> GuestSpec {
        let mut spec = GuestSpec::new(
            "vm1",
            Path::new("/k/vmlinux-6.1"),
            Path::new("/r/initrd.gz"),
            Path::new("/run/weft/vm1"),
        );
        spec.cmdline_extras = vec!["weft.ping=10.0.2.1".into()];
        spec.nics = vec![
            GuestNic::virtio("tap0", "52:54:00:00:00:01"),
            GuestNic::virtio("tapabc", "52:54:00:00:00:02"),
        ];
        spec
    }

    #[test]
    fn argv_is_the_documented_command_line() {
        let argv = spec().argv().join(" ");
        assert_eq!(
            argv,
            "qemu-system-x86_64 -machine q35 -accel tcg -cpu max -smp 1 -nodefaults -no-user-config \
             -display none -monitor none -no-reboot -name vm1 -m 256 -kernel /k/vmlinux-6.1 \
             -initrd /r/initrd.gz -append console=ttyS0 quiet loglevel=3 panic=-1 no_timer_check weft.ping=10.0.2.1 \
             -serial file:/run/weft/vm1/vm1.serial.log -pidfile /run/weft/vm1/vm1.pid \
             -qmp unix:/run/weft/vm1/vm1.qmp,server=on,wait=off \
             -netdev tap,id=net0,ifname=tap0,script=no,downscript=no,vhost=off \
             -device virtio-net-pci,netdev=net0,mac=52:54:00:00:00:01,romfile= \
             -netdev tap,id=net1,ifname=tapabc,script=no,downscript=no,vhost=off \
             -device virtio-net-pci,netdev=net1,mac=52:54:00:00:00:02,romfile= \
             -device virtio-serial-pci,id=virtio-serial0 \
             -chardev socket,path=/run/weft/vm1/vm1.qga.sock,server=on,wait=off,id=qga0 \
             -device virtserialport,bus=virtio-serial0.0,chardev=qga0,name=org.qemu.guest_agent.0"
        );
        assert!(spec().validate().is_ok());
        let mut without_agent = spec();
        without_agent.guest_agent = false;
        assert!(!without_agent.argv().join(" ").contains("virtio-serial"));
    }

    #[test]
    fn stop_by_pidfile_kills_only_the_guests_own_process() {
        let dir = tempfile::tempdir().unwrap();
        let spec = GuestSpec::new("vm9", Path::new("/k"), Path::new("/i"), dir.path());
        assert!(!stop_by_pidfile(&spec).unwrap(), "no pidfile, nothing to stop");
        let marker = format!("file:{}", spec.serial_log().display());
        // `sleep` itself under other names (argv[0]): a shell around it would leave the sleep
        // running, holding the test's output, once the shell is killed.
        let sleeper = |name: &str| {
            use std::os::unix::process::CommandExt;
            Command::new("sleep").arg0(name).arg("30").spawn().unwrap()
        };
        let mut stranger = sleeper("other");
        std::fs::write(spec.pidfile(), stranger.id().to_string()).unwrap();
        assert!(
            !stop_by_pidfile(&spec).unwrap(),
            "a process that is not this guest survives"
        );
        assert!(is_alive(stranger.id() as i32));
        stranger.kill().unwrap();
        stranger.wait().unwrap();
        let mut guest = sleeper(&marker);
        // QEMU writes its pidfile after exec; here, wait for the exec to show in /proc.
        let cmdline = format!("/proc/{}/cmdline", guest.id());
        while !std::fs::read(&cmdline).unwrap().starts_with(marker.as_bytes()) {
            std::thread::sleep(Duration::from_millis(5));
        }
        std::fs::write(spec.pidfile(), guest.id().to_string()).unwrap();
        assert!(stop_by_pidfile(&spec).unwrap());
        assert!(!guest.wait().unwrap().success());
        assert!(!spec.pidfile().exists());
    }

    #[test]
    fn validation_names_the_field() {
        let mut bad = spec();
        bad.nics[1].mac = "52:54:00:00:00".into();
        assert!(bad.validate().unwrap_err().to_string().contains("nics[1].mac"));
        let mut bad = spec();
        bad.nics[0].tap = "tap,script=/evil".into();
        assert!(bad.validate().unwrap_err().to_string().contains("nics[0].tap"));
        let mut bad = spec();
        bad.cmdline_extras.push("two words".into());
        assert!(bad.validate().unwrap_err().to_string().contains("cmdline_extras"));
        let mut bad = spec();
        bad.kernel = "/a,b".into();
        assert!(bad.validate().unwrap_err().to_string().contains("kernel"));
    }

    #[test]
    fn a_stream_nic_connects_to_the_passt_socket() {
        let mut spec = spec();
        spec.nics = vec![GuestNic::virtio_stream(
            Path::new("/run/weft/vm1/passt-default/passt.sock"),
            "52:54:00:00:00:01",
        )];
        spec.validate().unwrap();
        let argv = spec.argv().join(" ");
        assert!(
            argv.contains(
                "-netdev stream,id=net0,server=off,addr.type=unix,addr.path=/run/weft/vm1/passt-default/passt.sock \
                 -device virtio-net-pci,netdev=net0,mac=52:54:00:00:00:01,romfile= "
            ),
            "{argv}"
        );
        spec.nics[0].stream = Some("/run/a,server=on".into());
        assert!(
            spec.validate()
                .unwrap_err()
                .to_string()
                .contains("nics[0].stream")
        );
    }
}
