//! Compiles `hookd/v1/*.proto` with protox (a pure-Rust protobuf compiler), so a fresh
//! machine needs no system `protoc`. The descriptor set is also written to `OUT_DIR`, where
//! the server's reflection service picks it up.

use std::path::PathBuf;

use prost::Message;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let files = ["hookd/v1/hookd.proto"];
    for file in files {
        println!("cargo:rerun-if-changed={file}");
    }
    let fds = protox::compile(files, ["."])?;
    let out_dir = PathBuf::from(std::env::var("OUT_DIR")?);
    std::fs::write(out_dir.join("hookd_descriptor.bin"), fds.encode_to_vec())?;
    tonic_prost_build::configure()
        // Messages serialize to JSON (the CLI's --json); field names as in the .proto.
        .type_attribute(".hookd.v1", "#[derive(serde::Serialize)]")
        // A google.protobuf.Struct serializes as the JSON object it stands for.
        .field_attribute(
            ".hookd.v1.Subscription.filter",
            "#[serde(serialize_with = \"crate::json::serialize_struct\")]",
        )
        .codec_path("crate::codec::HookdCodec")
        .build_client(true)
        .build_server(true)
        // Each message names itself (`prost::Name`): the CLI's --json writes it in the
        // JSON API's form (proto3's JSON mapping) through its descriptor.
        .compile_fds_with_config(fds, {
            let mut config = tonic_prost_build::Config::new();
            config.enable_type_names();
            config
        })?;
    Ok(())
}
