//! Generates the CRI `runtime.v1` client from `proto/api.proto` with protox (a protobuf compiler
//! in Rust, so a build needs no system `protoc`) and tonic-prost-build, into `OUT_DIR`.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed=proto/api.proto");
    let descriptors = protox::compile(["api.proto"], ["proto"])?;
    tonic_prost_build::configure()
        .build_server(false)
        .compile_fds(descriptors)?;
    Ok(())
}
