//! Benchmark: DISCOVER→OFFER→REQUEST→ACK latency over a veth and a bridge, weft-dhcp versus
//! dnsmasq serving the same lease with the same options, measured in the same run.
//!
//! Run as root: `cargo run --release -p weft-dhcp --example bench_vs_dnsmasq [ROUNDS] [ITER]`
//! (defaults 3 rounds × 300 exchanges per server; the servers alternate per round).

use weft_testing as common;

use std::net::{Ipv4Addr, SocketAddrV4, UdpSocket};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use common::Netns;
use dhcproto::v4::{DhcpOption, Flags, Message, MessageType, Opcode, OptionCode};
use socket2::{Domain, Protocol, Socket, Type};
use weft_dhcp::{ServerConfig, bind_server_socket, spawn, v4};

const CLIENT_MAC: [u8; 6] = [0x02, 0, 0, 0x0b, 0xe0, 0x01];
const SERVER: Ipv4Addr = Ipv4Addr::new(10, 0, 2, 1);
const LEASED: Ipv4Addr = Ipv4Addr::new(10, 0, 2, 2);

fn client_socket(ifname: &str) -> std::io::Result<UdpSocket> {
    let socket = Socket::new(Domain::IPV4, Type::DGRAM, Some(Protocol::UDP))?;
    socket.set_reuse_address(true)?;
    socket.set_broadcast(true)?;
    socket.bind_device(Some(ifname.as_bytes()))?;
    socket.bind(&SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, 68).into())?;
    socket.set_read_timeout(Some(Duration::from_secs(2)))?;
    Ok(socket.into())
}

fn request(kind: MessageType, xid: u32, offered: Option<(Ipv4Addr, Ipv4Addr)>) -> Vec<u8> {
    let zero = Ipv4Addr::UNSPECIFIED;
    let mut message = Message::new_with_id(xid, zero, zero, zero, zero, &CLIENT_MAC);
    // Broadcast flag: the client has no address yet, so replies must be broadcast.
    message.set_flags(Flags::default().set_broadcast());
    let opts = message.opts_mut();
    opts.insert(DhcpOption::MessageType(kind));
    opts.insert(DhcpOption::ParameterRequestList(vec![
        OptionCode::SubnetMask,
        OptionCode::Router,
        OptionCode::DomainNameServer,
        OptionCode::InterfaceMtu,
        OptionCode::DomainSearch,
    ]));
    if let Some((yiaddr, server)) = offered {
        opts.insert(DhcpOption::RequestedIpAddress(yiaddr));
        opts.insert(DhcpOption::ServerIdentifier(server));
    }
    v4::encode(&message).expect("encodable request")
}

/// Waits for the reply of type `kind` to transaction `xid`.
fn await_reply(socket: &UdpSocket, xid: u32, kind: MessageType) -> Result<Message> {
    use dhcproto::Decodable;
    let mut buffer = [0u8; 1500];
    loop {
        let (len, _) = socket
            .recv_from(&mut buffer)
            .context("waiting for a DHCP reply")?;
        let Ok(message) = Message::from_bytes(&buffer[..len]) else {
            continue;
        };
        if message.opcode() == Opcode::BootReply
            && message.xid() == xid
            && message.opts().msg_type() == Some(kind)
        {
            return Ok(message);
        }
    }
}

/// One full exchange; returns its latency.
fn exchange(socket: &UdpSocket, xid: u32) -> Result<Duration> {
    let servers = SocketAddrV4::new(Ipv4Addr::BROADCAST, 67);
    let start = Instant::now();
    socket.send_to(&request(MessageType::Discover, xid, None), servers)?;
    let offer = await_reply(socket, xid, MessageType::Offer)?;
    let server = match offer.opts().get(OptionCode::ServerIdentifier) {
        Some(DhcpOption::ServerIdentifier(ip)) => *ip,
        _ => bail!("offer without server id"),
    };
    socket.send_to(
        &request(MessageType::Request, xid, Some((offer.yiaddr(), server))),
        servers,
    )?;
    let ack = await_reply(socket, xid, MessageType::Ack)?;
    if ack.yiaddr() != LEASED {
        bail!("leased {} instead of {LEASED}", ack.yiaddr());
    }
    Ok(start.elapsed())
}

fn measure(socket: &UdpSocket, iterations: usize, xid_base: u32) -> Result<Vec<Duration>> {
    for warmup in 0..20 {
        exchange(socket, xid_base + warmup)?;
    }
    (0..iterations as u32)
        .map(|i| exchange(socket, xid_base + 1000 + i))
        .collect()
}

struct Daemon(Child);

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn start_dnsmasq(pod: &Netns, dir: &std::path::Path) -> Result<Daemon> {
    let mac = CLIENT_MAC.map(|b| format!("{b:02x}")).join(":");
    let child = Command::new("ip")
        .args([
            "netns",
            "exec",
            &pod.name,
            "dnsmasq",
            "--keep-in-foreground",
            "--conf-file=/dev/null",
        ])
        .args([
            "--port=0",
            "--bind-interfaces",
            "--interface=wt-br0",
            "--except-interface=lo",
        ])
        .args([
            "--dhcp-range=10.0.2.2,10.0.2.2,255.255.255.0,999d",
            "--dhcp-authoritative",
            "--user=root",
        ])
        .arg(format!("--dhcp-host={mac},{LEASED}"))
        .args([
            "--dhcp-option=option:router,10.0.2.1",
            "--dhcp-option=option:dns-server,10.96.0.10",
        ])
        .args([
            "--dhcp-option=option:mtu,1400",
            "--dhcp-option=option:domain-search,default.svc.cluster.local",
        ])
        .args([
            "--dhcp-option=option:domain-name,default.svc.cluster.local",
            "--pid-file=",
        ])
        .arg(format!("--dhcp-leasefile={}", dir.join("leases").display()))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .context("starting dnsmasq")?;
    // dnsmasq has no readiness signal: give it time to bind.
    std::thread::sleep(Duration::from_millis(300));
    Ok(Daemon(child))
}

fn stats(name: &str, samples: &mut [Duration]) -> f64 {
    samples.sort();
    let micros = |d: Duration| d.as_secs_f64() * 1e6;
    let median = micros(samples[samples.len() / 2]);
    let p99 = micros(samples[samples.len() * 99 / 100]);
    let mean = samples.iter().map(|d| micros(*d)).sum::<f64>() / samples.len() as f64;
    println!(
        "| {name} | {} | {median:.0} | {mean:.0} | {p99:.0} |",
        samples.len()
    );
    median
}

fn main() -> Result<()> {
    let args: Vec<usize> = std::env::args().skip(1).filter_map(|a| a.parse().ok()).collect();
    let rounds = args.first().copied().unwrap_or(3);
    let iterations = args.get(1).copied().unwrap_or(300);
    let pod = Netns::new("bp");
    let guest = Netns::new("bg");
    pod.ip(&["link", "add", "wt-br0", "type", "bridge"]);
    pod.ip(&["addr", "add", "10.0.2.1/24", "dev", "wt-br0"]);
    pod.ip(&["link", "set", "wt-br0", "up"]);
    let mac = CLIENT_MAC.map(|b| format!("{b:02x}")).join(":");
    pod.ip(&[
        "link",
        "add",
        "wt-v0",
        "type",
        "veth",
        "peer",
        "name",
        "eth0",
        "address",
        &mac,
        "netns",
        &guest.name,
    ]);
    pod.ip(&["link", "set", "wt-v0", "master", "wt-br0", "up"]);
    guest.ip(&["link", "set", "eth0", "up"]);
    // Let the bridge port reach forwarding before timing anything.
    std::thread::sleep(Duration::from_millis(500));

    let mut config = ServerConfig::new("10.0.2.2/24".parse()?, SERVER);
    config.router = Some(SERVER);
    config.dns_servers = vec![Ipv4Addr::new(10, 96, 0, 10)];
    config.search_domains = vec!["default.svc.cluster.local".into()];
    config.mtu = 1400;
    config.client_mac = Some(CLIENT_MAC);

    let client = guest.enter(|| client_socket("eth0"))?;
    let dir = tempfile::tempdir()?;
    let (mut weft, mut dnsmasq) = (Vec::new(), Vec::new());
    for round in 0..rounds as u32 {
        let socket = pod.enter(|| bind_server_socket("wt-br0"))?;
        let server = spawn(socket, config.clone())?;
        weft.extend(measure(&client, iterations, round * 100_000)?);
        server.stop()?;
        let daemon = start_dnsmasq(&pod, dir.path())?;
        dnsmasq.extend(measure(&client, iterations, round * 100_000 + 50_000)?);
        drop(daemon);
    }
    println!("| server | exchanges | median µs | mean µs | p99 µs |\n|---|---|---|---|---|");
    let weft_median = stats("weft-dhcp", &mut weft);
    let dnsmasq_median = stats("dnsmasq", &mut dnsmasq);
    println!(
        "\nratio weft/dnsmasq (median): {:.2}×",
        weft_median / dnsmasq_median
    );
    Ok(())
}
