//! Compiles hookd's own proto a second time, server side only and with default stubs, so the
//! baseline "echo" server can implement just Enqueue/EnqueueBatch while speaking exactly
//! hookd's wire format (same service path, same messages, same codec).

fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed=../proto/hookd/v1/hookd.proto");
    let fds = protox::compile(["hookd/v1/hookd.proto"], ["../proto"])?;
    tonic_prost_build::configure()
        .build_client(false)
        .build_server(true)
        .generate_default_stubs(true)
        .compile_fds(fds)?;
    Ok(())
}
