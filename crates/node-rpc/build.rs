//! Generates the gRPC code of `proto/node.proto` (needs `protoc`: Debian's `protobuf-compiler`,
//! or `PROTOC` pointing at one).

fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed=proto/node.proto");
    tonic_build::configure().compile_protos(&["proto/node.proto"], &["proto"])?;
    Ok(())
}
