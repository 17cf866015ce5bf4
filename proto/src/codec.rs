//! The protobuf codec of the generated stubs: prost's, except that a message that does not
//! decode (malformed protobuf, a string field that is not UTF-8) is INVALID_ARGUMENT. gRPC's
//! status-code guide suggests INTERNAL for parse errors, but on a server that is the
//! client's bad input, and INTERNAL tells the client hookd broke (finding F11).

use std::marker::PhantomData;

use tonic::Status;
use tonic::codec::{BufferSettings, Codec, DecodeBuf, Decoder};
use tonic_prost::{ProstCodec, ProstDecoder, ProstEncoder};

#[derive(Debug, Clone)]
pub struct HookdCodec<T, U> {
    _pd: PhantomData<(T, U)>,
}

impl<T, U> Default for HookdCodec<T, U> {
    fn default() -> Self {
        Self { _pd: PhantomData }
    }
}

impl<T, U> Codec for HookdCodec<T, U>
where
    T: prost::Message + Send + 'static,
    U: prost::Message + Default + Send + 'static,
{
    type Encode = T;
    type Decode = U;
    type Encoder = ProstEncoder<T>;
    type Decoder = HookdDecoder<U>;

    fn encoder(&mut self) -> Self::Encoder {
        ProstCodec::<T, U>::raw_encoder(BufferSettings::default())
    }

    fn decoder(&mut self) -> Self::Decoder {
        HookdDecoder(ProstCodec::<T, U>::raw_decoder(BufferSettings::default()))
    }
}

#[derive(Debug, Clone)]
pub struct HookdDecoder<U>(ProstDecoder<U>);

impl<U: prost::Message + Default> Decoder for HookdDecoder<U> {
    type Item = U;
    type Error = Status;

    fn decode(&mut self, buf: &mut DecodeBuf<'_>) -> Result<Option<U>, Status> {
        self.0.decode(buf).map_err(|status| {
            Status::invalid_argument(format!("malformed protobuf message: {}", status.message()))
        })
    }

    fn buffer_settings(&self) -> BufferSettings {
        self.0.buffer_settings()
    }
}
