#!/usr/bin/env python3
"""Writes the seed corpora under fuzz/seeds/<target>/ from the repo's vectors and examples.

Run from anywhere: `python3 fuzz/make_seeds.py`. The output is committed; re-run it when the
vectors change. Names are content hashes, so re-running is idempotent.
"""
import glob
import hashlib
import json
import os
import struct

FUZZ = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(FUZZ)
SEEDS = os.path.join(FUZZ, "seeds")


def write(target, data):
    if isinstance(data, str):
        data = data.encode()
    directory = os.path.join(SEEDS, target)
    os.makedirs(directory, exist_ok=True)
    name = hashlib.sha1(data).hexdigest()[:16]
    with open(os.path.join(directory, name), "wb") as f:
        f.write(data)


def walk(value, key=None):
    """Yields (key, value) for every node of a JSON document."""
    yield key, value
    if isinstance(value, dict):
        for k, v in value.items():
            yield from walk(v, k)
    elif isinstance(value, list):
        for v in value:
            yield from walk(v, key)


def vectors():
    for path in sorted(glob.glob(os.path.join(ROOT, "vectors", "*", "*.json"))):
        with open(path) as f:
            yield json.load(f)


NETWORKS = "k8s.v1.cni.cncf.io/networks"
STATUS = "k8s.v1.cni.cncf.io/network-status"

for doc in vectors():
    for key, value in walk(doc):
        if key in ("annotation", "annotationJSON", NETWORKS, "v1.multus-cni.io/default-network") and isinstance(value, str):
            write("networks_annotation", value)
        if key == "cases" and isinstance(value, list):
            for case in value:
                if isinstance(case, str):
                    write("networks_annotation", case)
        if key in (STATUS, "annotationValue") and isinstance(value, str):
            write("network_status", value)
        if key == "statuses" and isinstance(value, list):
            write("network_status", json.dumps(value, indent=4))
        if isinstance(value, dict) and "type" in value and ("name" in value or "cniVersion" in value):
            text = json.dumps(value)
            write("nad_config", text)
            if "ipam" in value:
                write("ipam_config", text)
        if isinstance(value, dict) and "cniVersion" in value and ("ips" in value or "ip4" in value or "interfaces" in value):
            write("cni_request", json.dumps(value))
        if key in ("CNI_ARGS_env",) and isinstance(value, str):
            write("cni_request", "CNI_ARGS=" + value)
        if isinstance(value, dict) and value.get("kind") in ("VirtualMachineInstance", "VirtualMachine", "Pod", "KubeVirt"):
            write("vm_render", json.dumps(value))
        if isinstance(value, dict) and isinstance(value.get("interfaces"), list) and isinstance(value.get("networks"), list):
            vmi = {"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstance",
                   "metadata": {"name": "vm1", "namespace": "ns1"},
                   "spec": {"domain": {"devices": {"interfaces": value["interfaces"]}},
                            "networks": value["networks"]}}
            write("vm_render", json.dumps(vmi))

for path in glob.glob(os.path.join(ROOT, "examples", "*.yaml")):
    with open(path) as f:
        text = f.read()
    write("vm_render", text)
    if "NetworkAttachmentDefinition" in text:
        config = text.split("config: |", 1)[1]
        config = "\n".join(line[4:] for line in config.splitlines())
        write("nad_config", config)
        parsed = json.loads(config)
        write("ipam_config", json.dumps(parsed))

# Hand-written: the vectors hold no raw text for these.
write("networks_annotation", "ns1/net1@eth1, net2")
write("networks_annotation", '[{"name":"n","namespace":"x","ips":["10.0.0.1/24","fd00::1"],"mac":"02:00:00:00:00:01","default-route":["10.0.0.254"],"cni-args":{"a":1.5,"b":[true,null]},"ipam-claim-reference":"c"}]')
write("network_status", '[{"name":"k8s-pod-network","interface":"eth0","ips":["10.0.0.5"],"default":true,"dns":{}},{"name":"other/red-nad","interface":"net1","mac":"de:ad:00:00:be:af","dns":{}}]')
write("nad_config", '{"cniVersion":"1.0.0","name":"list","plugins":[{"type":"bridge","capabilities":{"mac":true,"ips":true}},{"type":"tuning"}]}')
write("nad_config", '{"cniVersion":"0.3.1","name":"multus-cni-network","type":"multus","kubeconfig":"/k","delegates":[{"type":"bridge"}],"globalNamespaces":"a,b","namespaceIsolation":true,"logLevel":"debug"}')
write("ipam_config", '{"name":"red","ipam":{"type":"weft-ipam","network_name":"shared","ipRanges":[{"range":"10.0.0.0/24","range_start":"10.0.0.10","range_end":"10.0.0.20","gateway":"10.0.0.1"},{"range":"fd00::/64"}],"exclude":["10.0.0.16/30"],"stateDir":"/tmp/x"}}')
write("ipam_config", '{"name":"blue","allowPersistentIPs":true,"ipam":{"type":"weft-ipam","range":"fd00::/120","exclude":["fd00::/126"]},"args":{"cni":{"ips":["fd00::9"]}},"runtimeConfig":{"ips":["fd00::8/120"]}}')

ENV = (
    "CNI_COMMAND={command}\nCNI_CONTAINERID=abc123\nCNI_NETNS=/var/run/netns/x\n"
    "CNI_IFNAME=net1\nCNI_PATH=/opt/cni/bin\n"
    "CNI_ARGS=IgnoreUnknown=1;K8S_POD_NAMESPACE=ns;K8S_POD_NAME=p;IP=10.1.2.3,fd00::3;MAC=02:00:00:00:00:01"
)
for command in ("ADD", "DEL", "CHECK", "VERSION", "STATUS", "GC"):
    for version in ("0.2.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0"):
        config = {"cniVersion": version, "name": "net", "type": "fuzz"}
        if command in ("CHECK", "DEL") and version != "0.2.0":
            config["prevResult"] = {"cniVersion": version, "ips": [{"address": "10.1.2.3/24"}]}
        if command == "GC":
            config["cni.dev/valid-attachments"] = [{"containerID": "abc123", "ifname": "net1"}]
        write("cni_request", ENV.format(command=command) + "\0" + json.dumps(config))

# DHCPv4: DISCOVER and REQUEST from a guest (BOOTP header, magic cookie, options).
def dhcp4(message_type, options=b""):
    header = struct.pack("!BBBBIHH4s4s4s4s16s64s128s", 1, 1, 6, 0, 0x1234abcd, 0, 0x8000,
                         bytes(4), bytes(4), bytes(4), bytes(4),
                         bytes([2, 0, 0, 0, 0, 1]) + bytes(10), bytes(64), bytes(128))
    return header + bytes([99, 130, 83, 99, 53, 1, message_type]) + options + bytes([55, 4, 1, 3, 6, 121, 255])

write("dhcp_v4", dhcp4(1))
write("dhcp_v4", dhcp4(3, bytes([50, 4, 10, 0, 2, 2, 54, 4, 10, 0, 2, 1])))
write("dhcp_v4", dhcp4(3, bytes([50, 4, 10, 0, 2, 9])))
write("dhcp_v4", dhcp4(8))
write("dhcp_v4", dhcp4(7, bytes([54, 4, 10, 0, 2, 1])))

# DHCPv6: message type, 3-byte transaction id, options (code, length, data).
def opt6(code, data):
    return struct.pack("!HH", code, len(data)) + data

client_id = opt6(1, bytes([0, 3, 0, 1, 2, 0, 0, 0, 0, 1]))
server_id = opt6(2, bytes([0, 3, 0, 1, 2, 0, 0, 0, 0, 0]))
ia_na = opt6(3, struct.pack("!III", 1, 0, 0))
oro = opt6(6, struct.pack("!HH", 23, 24))
write("dhcp_v6", bytes([1, 0, 0, 1]) + client_id + ia_na + oro)
write("dhcp_v6", bytes([1, 0, 0, 2]) + client_id + ia_na + opt6(14, b""))
write("dhcp_v6", bytes([3, 0, 0, 3]) + client_id + server_id + ia_na + oro)
write("dhcp_v6", bytes([5, 0, 0, 4]) + client_id + server_id + ia_na)
write("dhcp_v6", bytes([11, 0, 0, 5]) + client_id + oro)

# Guest frames as the guest NIC's server reads them from its tap: one metadata byte (bit 0:
# another interface, bit 1: sent by the host), then Ethernet + IPv4/IPv6 + UDP + DHCP.
GUEST = bytes([2, 0, 0, 0, 0, 1])

def udp(sport, dport, payload):
    return struct.pack("!HHHH", sport, dport, 8 + len(payload), 0) + payload

def frame4(payload, source=GUEST, meta=0):
    datagram = udp(68, 67, payload)
    ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(datagram), 0, 0x4000, 64, 17, 0,
                     bytes(4), bytes([255] * 4))
    return bytes([meta]) + bytes([255] * 6) + source + b"\x08\x00" + ip + datagram

def frame6(payload, source=GUEST, meta=0):
    datagram = udp(546, 547, payload)
    ip = struct.pack("!IHBB16s16s", 6 << 28, len(datagram), 17, 1,
                     bytes([0xfe, 0x80]) + bytes(14), bytes([0xff, 0x02]) + bytes(12) + bytes([0, 1, 0, 2]))
    return bytes([meta]) + bytes([0x33, 0x33, 0, 1, 0, 2]) + source + b"\x86\xdd" + ip + datagram

write("dhcp_frames", frame4(dhcp4(1)))
write("dhcp_frames", frame4(dhcp4(3, bytes([50, 4, 10, 0, 2, 2, 54, 4, 10, 0, 2, 1]))))
write("dhcp_frames", frame4(dhcp4(1), source=bytes([2, 0, 0, 0, 0, 9])))
write("dhcp_frames", frame4(dhcp4(1), meta=1))
write("dhcp_frames", frame6(bytes([1, 0, 0, 1]) + client_id + ia_na + oro))
write("dhcp_frames", frame6(bytes([1, 0, 0, 1]) + opt6(1, bytes([0, 3, 0, 1, 2, 0, 0, 0, 0, 9])) + ia_na))

# The IPAM release journal: hex lines of calls in the installed weft-ipam's wire format
# (NUL-terminated CNI_* variables, an empty entry, then the config).
def call(command, container):
    env = [("CNI_COMMAND", command), ("CNI_CONTAINERID", container), ("CNI_NETNS", "/var/run/netns/p"),
           ("CNI_IFNAME", "net1"), ("CNI_PATH", "/opt/cni/bin"),
           ("CNI_ARGS", "K8S_POD_NAMESPACE=ns;K8S_POD_NAME=p")]
    body = b"".join(f"{k}={v}".encode() + b"\0" for k, v in env) + b"\0"
    config = {"cniVersion": "1.0.0", "name": "net", "type": "bridge",
              "ipam": {"type": "weft-ipam", "range": "192.168.90.0/24"}}
    return body + json.dumps(config).encode()

journal = b"".join(call("DEL", f"c{i}").hex().encode() + b"\n" for i in range(3))
write("ipam_journal", journal)
write("ipam_journal", journal + call("DEL", "torn").hex().encode()[:40])
write("ipam_journal", call("DEL", "raw"))
