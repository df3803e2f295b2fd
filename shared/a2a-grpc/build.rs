//! Compiles `proto/a2a.proto` (with the well-known types it imports) into a descriptor set the
//! crate embeds; protox is a protobuf compiler in Rust, so no `protoc` binary is needed.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed=proto/a2a.proto");
    let descriptors =
        protox::Compiler::new(["proto"])?.include_imports(true).open_file("a2a.proto")?.encode_file_descriptor_set();
    let out = std::path::PathBuf::from(std::env::var("OUT_DIR")?).join("a2a_descriptor_set.bin");
    std::fs::write(out, descriptors)?;
    Ok(())
}
