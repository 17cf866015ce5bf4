//! `google.protobuf.Struct` and JSON: the two ways, as proto3's JSON mapping defines them
//! (a subscription's filter travels as a Struct, so it pastes as JSON into the HTTP API).

use prost_types::value::Kind;
use prost_types::{ListValue, Struct, Value};
use serde_json::Value as Json;

/// The JSON a `Value` stands for. A number is a double in a Struct: a whole one within
/// 2^53 comes back as the integer it was written as (`100`, not `100.0`); one that JSON
/// cannot hold (NaN, an infinity) becomes null.
pub fn value_to_json(v: &Value) -> Json {
    match &v.kind {
        None | Some(Kind::NullValue(_)) => Json::Null,
        Some(Kind::BoolValue(b)) => Json::Bool(*b),
        Some(Kind::NumberValue(n)) => number(*n),
        Some(Kind::StringValue(s)) => Json::String(s.clone()),
        Some(Kind::ListValue(l)) => Json::Array(l.values.iter().map(value_to_json).collect()),
        Some(Kind::StructValue(s)) => struct_to_json(s),
    }
}

fn number(n: f64) -> Json {
    const EXACT: f64 = 9_007_199_254_740_992.0; // 2^53
    if n.fract() == 0.0 && n.abs() <= EXACT {
        return Json::from(n as i64);
    }
    serde_json::Number::from_f64(n).map_or(Json::Null, Json::Number)
}

/// The JSON object a `Struct` stands for.
pub fn struct_to_json(s: &Struct) -> Json {
    Json::Object(
        s.fields
            .iter()
            .map(|(k, v)| (k.clone(), value_to_json(v)))
            .collect(),
    )
}

/// A JSON value as a `Value` (numbers become doubles).
pub fn json_to_value(j: &Json) -> Value {
    let kind = match j {
        Json::Null => Kind::NullValue(0),
        Json::Bool(b) => Kind::BoolValue(*b),
        Json::Number(n) => Kind::NumberValue(n.as_f64().unwrap_or(f64::NAN)),
        Json::String(s) => Kind::StringValue(s.clone()),
        Json::Array(a) => Kind::ListValue(ListValue {
            values: a.iter().map(json_to_value).collect(),
        }),
        Json::Object(_) => Kind::StructValue(json_to_struct(j).unwrap_or_default()),
    };
    Value { kind: Some(kind) }
}

/// A JSON object as a `Struct` (`None` for any other JSON value).
pub fn json_to_struct(j: &Json) -> Option<Struct> {
    let Json::Object(map) = j else {
        return None;
    };
    Some(Struct {
        fields: map
            .iter()
            .map(|(k, v)| (k.clone(), json_to_value(v)))
            .collect(),
    })
}

/// `#[serde(serialize_with)]` of an optional `Struct` field: the JSON object, or null.
pub fn serialize_struct<S: serde::Serializer>(
    s: &Option<Struct>,
    serializer: S,
) -> Result<S::Ok, S::Error> {
    use serde::Serialize;
    s.as_ref().map(struct_to_json).serialize(serializer)
}

/// A message as the HTTP/JSON API writes it: proto3's JSON mapping (lowerCamelCase names,
/// 64-bit integers as strings, enums by name, bytes as base64, defaults written out), from
/// the compiled descriptors. What the CLI's `--json` prints, so scripts read one shape.
pub fn message_json<M: prost::Message + prost::Name>(message: &M) -> Result<Json, String> {
    use std::sync::OnceLock;
    static POOL: OnceLock<Result<prost_reflect::DescriptorPool, String>> = OnceLock::new();
    let pool = POOL
        .get_or_init(|| {
            prost_reflect::DescriptorPool::decode(crate::FILE_DESCRIPTOR_SET)
                .map_err(|e| format!("hookd's descriptors: {e}"))
        })
        .as_ref()
        .map_err(Clone::clone)?;
    let name = M::full_name();
    let descriptor = pool
        .get_message_by_name(&name)
        .ok_or_else(|| format!("no descriptor for {name}"))?;
    let dynamic =
        prost_reflect::DynamicMessage::decode(descriptor, message.encode_to_vec().as_slice())
            .map_err(|e| format!("{name}: {e}"))?;
    dynamic
        .serialize_with_options(
            serde_json::value::Serializer,
            &prost_reflect::SerializeOptions::new().skip_default_fields(false),
        )
        .map_err(|e| format!("{name}: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_filter_round_trips_through_struct() {
        let filter = serde_json::json!({
            "data": {"priority": {"$in": ["high", "urgent"]}, "score": {"$gte": 0.5}, "n": 100},
            "$or": [{"topic": "ticket.classified"}, {"metadata": {"x-tenant": {"$exist": true}}}],
            "none": null
        });
        let s = json_to_struct(&filter).unwrap();
        assert_eq!(struct_to_json(&s), filter);
        assert!(json_to_struct(&serde_json::json!([1])).is_none());
    }
}
