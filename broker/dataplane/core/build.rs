//! Generates the `protocol` module (messages and the `protocol.Journal` service) from
//! the broker's one `protocol.proto`, the file the Python stubs are generated from too.
//! protox compiles it in Rust, so a build needs no `protoc`.

use std::path::PathBuf;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let manifest = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR")?);
    let src = manifest.join("../../src");
    let proto = src.join("gazette/broker/protocol/protocol.proto");
    println!("cargo:rerun-if-changed={}", proto.display());
    let fds = protox::compile([&proto], [&src])?;
    tonic_prost_build::configure()
        .build_client(true)
        .build_server(true)
        // Journal content stays in reference-counted buffers: no copies on the hot path.
        .bytes(".")
        .compile_fds(fds)?;
    Ok(())
}
