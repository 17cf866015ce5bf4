//! hookd's gRPC contract, package `hookd.v1`.
//!
//! The `.proto` files under `proto/hookd/v1/` are the source of truth for every client, in
//! any language; this crate only compiles them (at build time, with protox, so no system
//! `protoc` is needed) and exposes the generated Rust types and the encoded file descriptor
//! set that the server serves through gRPC reflection.

#![forbid(unsafe_code)]

pub mod codec;
pub mod json;

/// Generated types and service stubs of `hookd.v1`.
#[allow(clippy::all, missing_debug_implementations, missing_docs)]
pub mod v1 {
    tonic::include_proto!("hookd.v1");
}

/// The encoded `FileDescriptorSet` of every hookd proto file, for gRPC server reflection.
pub const FILE_DESCRIPTOR_SET: &[u8] =
    include_bytes!(concat!(env!("OUT_DIR"), "/hookd_descriptor.bin"));
