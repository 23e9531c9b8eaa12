//! NIC hot-plug through QEMU's QMP socket: the commands are built purely, [`QmpClient`] only
//! sends them.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::Duration;

use serde_json::{Value, json};

use crate::qemu::{GuestNic, hotplug_port};

/// Errors talking to QMP.
#[derive(Debug, thiserror::Error)]
pub enum QmpError {
    /// The socket failed.
    #[error("QMP socket: {0}")]
    Io(#[from] std::io::Error),
    /// QEMU sent something that is not QMP.
    #[error("QMP protocol: {0}")]
    Protocol(String),
    /// QEMU refused a command.
    #[error("QMP {command}: {message}")]
    Command {
        /// The command.
        command: String,
        /// QEMU's error description.
        message: String,
    },
}

/// The netdev id of hot-plugged NIC `id`.
pub fn hotplug_netdev(id: &str) -> String {
    format!("{id}-netdev")
}

/// `netdev_add` of the NIC's TAP, then `device_add` of the NIC on root port `slot`.
pub fn hotplug_nic_commands(nic: &GuestNic, id: &str, slot: u8) -> [Value; 2] {
    let netdev = hotplug_netdev(id);
    [
        json!({"execute": "netdev_add", "arguments": {
            "type": "tap", "id": netdev, "ifname": nic.tap,
            "script": "no", "downscript": "no", "vhost": false,
        }}),
        json!({"execute": "device_add", "arguments": {
            "driver": nic.model, "id": id, "netdev": netdev, "mac": nic.mac,
            "bus": hotplug_port(slot), "romfile": "",
        }}),
    ]
}

/// `device_del` of NIC `id` (the guest must release it), then `netdev_del` of its TAP backend.
pub fn unplug_nic_commands(id: &str) -> [Value; 2] {
    [
        json!({"execute": "device_del", "arguments": {"id": id}}),
        json!({"execute": "netdev_del", "arguments": {"id": hotplug_netdev(id)}}),
    ]
}

/// A negotiated QMP connection.
#[derive(Debug)]
pub struct QmpClient {
    reader: BufReader<UnixStream>,
    writer: UnixStream,
    /// Events received while waiting for command replies.
    pub events: Vec<Value>,
}

impl QmpClient {
    /// Connects to `socket`, reads the greeting and leaves capabilities negotiation mode.
    pub fn connect(socket: &Path) -> Result<Self, QmpError> {
        let stream = UnixStream::connect(socket)?;
        stream.set_read_timeout(Some(Duration::from_secs(10)))?;
        let mut client = Self {
            reader: BufReader::new(stream.try_clone()?),
            writer: stream,
            events: Vec::new(),
        };
        let greeting = client.read_message()?;
        if greeting.get("QMP").is_none() {
            return Err(QmpError::Protocol(format!("unexpected greeting {greeting}")));
        }
        client.execute(&json!({"execute": "qmp_capabilities"}))?;
        Ok(client)
    }

    fn read_message(&mut self) -> Result<Value, QmpError> {
        let mut line = String::new();
        if self.reader.read_line(&mut line)? == 0 {
            return Err(QmpError::Protocol("QEMU closed the QMP socket".into()));
        }
        serde_json::from_str(&line).map_err(|e| QmpError::Protocol(format!("{e}: {line}")))
    }

    /// Sends one command and returns its `return` value; events that arrive meanwhile are kept
    /// in [`QmpClient::events`].
    pub fn execute(&mut self, command: &Value) -> Result<Value, QmpError> {
        let mut line = command.to_string();
        line.push('\n');
        self.writer.write_all(line.as_bytes())?;
        loop {
            let message = self.read_message()?;
            if let Some(value) = message.get("return") {
                return Ok(value.clone());
            }
            if let Some(error) = message.get("error") {
                return Err(QmpError::Command {
                    command: command["execute"].as_str().unwrap_or("?").to_string(),
                    message: error["desc"].as_str().unwrap_or("unknown error").to_string(),
                });
            }
            self.events.push(message);
        }
    }

    /// Waits for event `name` whose `data` has `device == id` (e.g. `DEVICE_DELETED`).
    pub fn wait_for_event(&mut self, name: &str, id: &str) -> Result<Value, QmpError> {
        let matches = |event: &Value| event["event"] == name && event["data"]["device"] == id;
        if let Some(index) = self.events.iter().position(matches) {
            return Ok(self.events.remove(index));
        }
        loop {
            let message = self.read_message()?;
            if matches(&message) {
                return Ok(message);
            }
            self.events.push(message);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hotplug_commands_plug_the_tap_into_a_root_port() {
        let nic = GuestNic::virtio("tap1", "52:54:00:00:00:09");
        let [netdev, device] = hotplug_nic_commands(&nic, "weft-nic1", 0);
        assert_eq!(netdev["execute"], "netdev_add");
        assert_eq!(
            netdev["arguments"],
            json!({"type": "tap", "id": "weft-nic1-netdev", "ifname": "tap1",
                   "script": "no", "downscript": "no", "vhost": false})
        );
        assert_eq!(device["execute"], "device_add");
        assert_eq!(device["arguments"]["bus"], "weft-hp0");
        assert_eq!(device["arguments"]["netdev"], "weft-nic1-netdev");
        assert_eq!(device["arguments"]["mac"], "52:54:00:00:00:09");
        let [del, netdev_del] = unplug_nic_commands("weft-nic1");
        assert_eq!(del["execute"], "device_del");
        assert_eq!(netdev_del["arguments"]["id"], "weft-nic1-netdev");
    }
}
