use proptest::prelude::*;
use serde_json::{Value, json};

use super::*;

fn check(input: Value, filter: Value, want: bool) {
    let f = Filter::parse(&filter, "filter").unwrap_or_else(|e| panic!("{filter}: {e}"));
    assert_eq!(f.matches(&input), want, "{filter} against {input}");
    // `$not` turns every answer around, the no of a type mismatch included.
    let not = json!({ "$not": filter });
    let f = Filter::parse(&not, "filter").unwrap_or_else(|e| panic!("{not}: {e}"));
    assert_eq!(f.matches(&input), !want, "{not} against {input}");
}

#[test]
fn primitives_fields_and_nesting() {
    check(json!({"kind": "created"}), json!({"kind": "created"}), true);
    check(
        json!({"kind": "updated"}),
        json!({"kind": "created"}),
        false,
    );
    check(json!({}), json!({"kind": "created"}), false);
    check(json!({"kind": 1}), json!({"kind": "1"}), false);
    check(json!({"n": 1}), json!({"n": 1.0}), true);
    check(json!({"n": 2, "kind": "a"}), json!({"n": 2}), true);
    check(json!({"n": 2}), json!({"n": 2, "kind": "a"}), false);
    check(
        json!({"a": {"b": {"c": true}}}),
        json!({"a": {"b": {"c": true}}}),
        true,
    );
    check(json!({"a": {"b": "x"}}), json!({"a": 1}), false);
    check(json!({"a": "text"}), json!({"a": {"b": "text"}}), false);
    check(json!({"a": null}), json!({"a": null}), true);
    check(json!({"a": null}), json!({"a": false}), false);
    check(json!("plain"), json!("plain"), true);
    check(json!(3), json!({}), false);
    check(json!({"x": 1}), json!({}), true);
    check(json!({"flag": true}), json!(true), false);
}

#[test]
fn arrays_match_partially() {
    check(json!({"tags": ["vip", "eu"]}), json!({"tags": "vip"}), true);
    check(json!({"tags": ["vip", "eu"]}), json!({"tags": "us"}), false);
    check(
        json!({"tags": ["vip", "eu", "new"]}),
        json!({"tags": ["eu", "vip"]}),
        true,
    );
    check(
        json!({"tags": ["vip", "eu"]}),
        json!({"tags": ["eu", "us"]}),
        false,
    );
    check(
        json!({"lines": [{"sku": "A1", "qty": 3}, {"sku": "B2", "qty": 12}]}),
        json!({"lines": {"qty": {"$gte": 10}}}),
        true,
    );
    check(
        json!({"lines": [{"qty": 3}, {"qty": 4}]}),
        json!({"lines": {"qty": {"$gte": 10}}}),
        false,
    );
    check(json!([4, 5, 6]), json!(6), true);
    check(json!([4, 5, 6]), json!([{"$lt": 5}]), true);
    check(json!([4, 5, 6]), json!([{"$lt": 4}]), false);
    // Operators alone apply to the array as a whole.
    check(json!([4, 5, 6]), json!({"$eq": 6}), false);
    check(
        json!({"t": ["a", "b"]}),
        json!({"t": {"$eq": ["a", "b"]}}),
        true,
    );
    check(
        json!({"t": ["a", "b", "c"]}),
        json!({"t": {"$eq": ["a", "b"]}}),
        false,
    );
}

#[test]
fn comparisons() {
    check(json!({"n": 0}), json!({"n": {"$lt": 1}}), true);
    check(json!({"n": 5}), json!({"n": {"$gt": 1, "$lt": 9}}), true);
    check(json!({"n": 10}), json!({"n": {"$gt": 1, "$lt": 9}}), false);
    check(json!({"n": 9}), json!({"n": {"$lte": 9}}), true);
    check(json!({"s": "b"}), json!({"s": {"$gt": "a"}}), true);
    check(json!({"s": "a"}), json!({"s": {"$gte": "b"}}), false);
    check(json!({"n": "5"}), json!({"n": {"$gt": 1}}), false);
    check(json!({}), json!({"n": {"$gt": 1}}), false);
    check(json!({"s": "x"}), json!({"s": {"$eq": "x"}}), true);
    check(json!({"s": "x"}), json!({"s": {"$neq": "x"}}), false);
    check(
        json!({"o": {"a": [1, {"b": 2}]}}),
        json!({"o": {"$eq": {"a": [1, {"b": 2.0}]}}}),
        true,
    );
    check(
        json!({"o": {"a": 1, "b": 2}}),
        json!({"o": {"$eq": {"a": 1}}}),
        false,
    );
    check(json!({"a": null}), json!({"a": {"$neq": null}}), false);
    check(json!({}), json!({"a": {"$neq": null}}), true);
    check(json!({}), json!({"a": {"$eq": null}}), false);
}

#[test]
fn membership_and_strings() {
    check(
        json!({"s": "order-created"}),
        json!({"s": {"$in": "created"}}),
        true,
    );
    check(
        json!({"s": "order-created"}),
        json!({"s": {"$in": ["order", "x"]}}),
        false,
    );
    check(json!({"s": "b"}), json!({"s": {"$in": ["a", "b"]}}), true);
    check(json!({"n": 2}), json!({"n": {"$in": [1, 2]}}), true);
    check(json!({"n": 2}), json!({"n": {"$nin": [1, 2]}}), false);
    check(json!({"n": 3}), json!({"n": {"$nin": [1, 2]}}), true);
    check(json!({"t": ["a", "b"]}), json!({"t": {"$in": "a"}}), true);
    check(json!({"t": ["a", "b"]}), json!({"t": {"$nin": "a"}}), false);
    check(json!({"s": "some"}), json!({"s": {"$nin": "om"}}), false);
    // Types that do not compare: neither $in nor $nin.
    check(json!({"t": ["a"]}), json!({"t": {"$in": ["a"]}}), false);
    check(json!({"t": ["a"]}), json!({"t": {"$nin": ["a"]}}), false);
    check(json!({}), json!({"t": {"$nin": ["a"]}}), false);
    check(
        json!({"s": "ticket.closed"}),
        json!({"s": {"$startsWith": "ticket."}}),
        true,
    );
    check(
        json!({"s": "ticket.closed"}),
        json!({"s": {"$endsWith": "ticket"}}),
        false,
    );
    check(
        json!({"s": "ticket.closed"}),
        json!({"s": {"$endsWith": [".opened", ".closed"]}}),
        true,
    );
    check(
        json!({"s": "ticket.closed"}),
        json!({"s": {"$startsWith": ["a", "b"]}}),
        false,
    );
    check(
        json!({"s": {"x": 1}}),
        json!({"s": {"$startsWith": "x"}}),
        false,
    );
    check(json!({"s": 12}), json!({"s": {"$endsWith": "2"}}), false);
}

#[test]
fn existence_and_logic() {
    check(json!({"a": 1}), json!({"a": {"$exist": true}}), true);
    check(json!({"a": null}), json!({"a": {"$exist": true}}), true);
    check(json!({"a": 1}), json!({"a": {"$exist": false}}), false);
    check(json!({"b": 1}), json!({"a": {"$exist": false}}), true);
    check(
        json!({"a": {"b": {"d": 1}}}),
        json!({"a": {"b": {"c": {"$exist": false}}}}),
        true,
    );
    check(
        json!({"a": {"b": {"c": 1}}}),
        json!({"a": {"b": {"c": {"$exist": false}}}}),
        false,
    );
    check(
        json!({"a": "v"}),
        json!({"a": {"$exist": true, "$or": ["v", "w"]}}),
        true,
    );
    check(
        json!({"a": "x"}),
        json!({"a": {"$exist": true, "$or": ["v", "w"]}}),
        false,
    );
    check(json!(1), json!({"$or": [1, 2]}), true);
    check(json!(1), json!({"$and": [1, 2]}), false);
    check(json!({"a": true}), json!({"$and": [{"a": true}]}), true);
    check(
        json!({"a": {"b": "else"}}),
        json!({"a": {"$or": [{"b": true}, {"b": {"$in": "ls"}}]}}),
        true,
    );
    check(
        json!({"a": {"x": 1, "y": 2}}),
        json!({"a": {"x": {"$exist": true}, "$and": [{"x": 1}, {"y": 2}]}}),
        true,
    );
    check(
        json!({"a": {"x": 1, "y": 2}}),
        json!({"$not": {"a": {"x": 3}}, "$or": [{"a": {"z": {"$exist": true}}}, {"a": {"y": 2}}]}),
        true,
    );
    check(
        json!({"a": {"x": 1, "y": 2}}),
        json!({"$not": {"a": {"x": 1}}, "$or": [{"a": {"y": 2}}]}),
        false,
    );
}

#[test]
fn an_outpost_destination_filter_as_its_docs_write_it() {
    let filter = json!({"data": {"amount": {"$gte": 100}, "customer": {"tier": "premium"}}});
    let doc = event_document(
        None,
        "order.paid",
        br#"{"amount": 250, "customer": {"tier": "premium", "id": "c-9"}}"#,
        [("region", "eu")],
    );
    check(doc.clone(), filter, true);
    check(
        doc.clone(),
        json!({"topic": {"$startsWith": "order."}}),
        true,
    );
    check(doc.clone(), json!({"metadata": {"region": "eu"}}), true);
    check(doc, json!({"data": {"amount": {"$lt": 100}}}), false);
    // A payload that is not JSON has no `data`.
    let raw = event_document(None, "blob", b"\x00\x01 not json", []);
    check(raw, json!({"data": {"$exist": false}}), true);
}

fn refused(filter: Value) -> FilterError {
    match Filter::parse(&filter, "filter") {
        Ok(_) => panic!("{filter} was accepted"),
        Err(e) => e,
    }
}

#[test]
fn the_event_document_has_outposts_id_and_time() {
    let doc = event_document(
        Some(EventIdentity {
            id: "evt_1",
            time_ms: 1_765_033_445_123,
        }),
        "order.created",
        br#"{"n":1}"#,
        [("x-tenant", "acme")],
    );
    assert_eq!(
        doc,
        json!({
            "id": "evt_1",
            "time": "2025-12-06T15:04:05.123Z",
            "topic": "order.created",
            "data": {"n": 1},
            "metadata": {"x-tenant": "acme"},
        })
    );
    assert_eq!(rfc3339_ms(0), "1970-01-01T00:00:00.000Z");
    assert_eq!(rfc3339_ms(951_782_400_000), "2000-02-29T00:00:00.000Z");
    let f = Filter::parse_event(&json!({"time": {"$gte": "2025-12-06"}}), "filter").unwrap();
    assert!(f.matches(&doc));
}

#[test]
fn what_can_never_mean_what_it_says_is_refused_where_it_stands() {
    let e = refused(json!({"data": {"id": {"$regex": "^a"}}}));
    assert_eq!(e.path, "filter.data.id.$regex");
    assert!(e.reason.starts_with("unknown operator $regex"), "{e}");
    let e = refused(json!({"$or": [{"a": 1}, {"b": {"$gte": [1, 2]}}]}));
    assert_eq!(e.path, "filter.$or[1].b.$gte");
    assert_eq!(
        e.to_string(),
        "filter.$or[1].b.$gte: $gte compares with a number or a string"
    );
    assert_eq!(refused(json!({"$and": {"a": 1}})).path, "filter.$and");
    assert_eq!(refused(json!({"$or": []})).path, "filter.$or");
    assert_eq!(refused(json!({"a": {"$exist": 1}})).path, "filter.a.$exist");
    assert_eq!(
        refused(json!({"a": {"$startsWith": 3}})).path,
        "filter.a.$startsWith"
    );
    assert_eq!(
        refused(json!({"a": {"$endsWith": ["x", 3]}})).path,
        "filter.a.$endsWith[1]"
    );
    assert_eq!(
        refused(json!({"a": {"$in": [1, {"b": 2}]}})).path,
        "filter.a.$in[1]"
    );
    assert_eq!(
        refused(json!({"a": {"$nin": {"b": 2}}})).path,
        "filter.a.$nin"
    );
    // Issue #49, 7: one value that is not a string never matches a field of its type.
    let e = refused(json!({"amount": {"$in": 5}}));
    assert_eq!(e.path, "filter.amount.$in");
    assert!(e.reason.contains("`[5]`"), "{e}");
    // ...though one an older hookd stored is still read (it matches what it matched).
    let stored = Filter::parse_stored(&json!({"tags": {"$in": 5}}), "filter").unwrap();
    assert!(stored.matches(&json!({"tags": [5, 6]})));
    // A subscription's filter names the event's fields at its top.
    let e = Filter::parse_event(&json!({"dta": {"a": 1}}), "filter").unwrap_err();
    assert_eq!(e.path, "filter.dta");
    assert!(e.reason.contains("no field `dta`"), "{e}");
    assert!(Filter::parse_event(&json!([1]), "filter").is_err());
    for ok in [
        json!({"id": "x", "time": {"$gte": "2026-01-01T00:00:00Z"}, "topic": "t"}),
        json!({"data": {"a": 1}, "metadata": {}, "$or": [{"topic": "a"}]}),
    ] {
        Filter::parse_event(&ok, "filter").unwrap_or_else(|e| panic!("{ok}: {e}"));
    }
    assert_eq!(
        refused(json!({"$not": {"$ref": "x"}})).path,
        "filter.$not.$ref"
    );

    let mut deep = json!(1);
    for _ in 0..=MAX_DEPTH {
        deep = json!({ "a": deep });
    }
    assert!(refused(deep).reason.contains("nests deeper"));
    let wide: Vec<Value> = (0..MAX_NODES).map(|i| json!({ "k": i })).collect();
    assert!(refused(json!({ "$or": wide })).reason.contains("more than"));

    let e = Filter::parse_text("{\"a\": \n  {\"b\": }", "--filter").unwrap_err();
    assert_eq!(e.path, "--filter");
    assert!(e.reason.contains("line 2 column"), "{e}");
}

// The reference: the rules read straight off the JSON, without compiling it, checking
// nothing (it is only asked about filters `Filter::parse` accepted).
fn reference(input: Option<&Value>, schema: &Value) -> bool {
    let Value::Object(map) = schema else {
        return match (schema, input) {
            (Value::Array(want), Some(Value::Array(have))) => want
                .iter()
                .all(|w| have.iter().any(|h| reference(Some(h), w))),
            (Value::Array(_), _) | (_, None) => false,
            (want, Some(Value::Array(have))) => have.iter().any(|h| same(h, want)),
            (want, Some(have)) => same(have, want),
        };
    };
    let only_ops = !map.is_empty() && map.keys().all(|k| k.starts_with('$'));
    if !only_ops {
        match input {
            Some(Value::Object(_)) => {}
            Some(Value::Array(items)) => return items.iter().any(|i| reference(Some(i), schema)),
            _ => return false,
        }
    }
    map.iter().all(|(k, v)| {
        if !k.starts_with('$') {
            let field = input.and_then(|i| i.get(k));
            return reference(field, v);
        }
        match k.as_str() {
            "$exist" => input.is_some() == (v == &Value::Bool(true)),
            "$and" => v
                .as_array()
                .into_iter()
                .flatten()
                .all(|s| reference(input, s)),
            "$or" => v
                .as_array()
                .into_iter()
                .flatten()
                .any(|s| reference(input, s)),
            "$not" => !reference(input, v),
            "$neq" => input.is_none_or(|i| !structurally(i, v)),
            op => input.is_some_and(|i| leaf(op, i, v)),
        }
    })
}

fn same(a: &Value, b: &Value) -> bool {
    if a.is_number() && b.is_number() {
        return a.as_f64() == b.as_f64();
    }
    !a.is_object() && !a.is_array() && a == b
}

fn structurally(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(p, q)| structurally(p, q))
        }
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len()
                && x.iter()
                    .all(|(k, p)| y.get(k).is_some_and(|q| structurally(p, q)))
        }
        _ => same(a, b),
    }
}

fn leaf(op: &str, v: &Value, arg: &Value) -> bool {
    let strings = || -> Vec<&str> {
        match arg {
            Value::Array(items) => items.iter().filter_map(Value::as_str).collect(),
            other => other.as_str().into_iter().collect(),
        }
    };
    let ordering = match (v, arg) {
        (Value::Number(_), Value::Number(_)) => v.as_f64().partial_cmp(&arg.as_f64()),
        (Value::String(a), Value::String(b)) => Some(a.cmp(b)),
        _ => None,
    };
    let inside = match (v, arg) {
        (Value::Array(_) | Value::Object(_), Value::Array(_)) => None,
        (_, Value::Array(set)) => Some(set.iter().any(|s| same(v, s))),
        (Value::String(s), Value::String(p)) => Some(s.contains(p.as_str())),
        (Value::Array(items), one) => Some(items.iter().any(|i| same(i, one))),
        _ => None,
    };
    match op {
        "$eq" => structurally(v, arg),
        "$gt" => ordering == Some(std::cmp::Ordering::Greater),
        "$gte" => ordering.is_some_and(|o| o != std::cmp::Ordering::Less),
        "$lt" => ordering == Some(std::cmp::Ordering::Less),
        "$lte" => ordering.is_some_and(|o| o != std::cmp::Ordering::Greater),
        "$in" => inside == Some(true),
        "$nin" => inside == Some(false),
        "$startsWith" => v
            .as_str()
            .is_some_and(|s| strings().iter().any(|p| s.starts_with(p))),
        "$endsWith" => v
            .as_str()
            .is_some_and(|s| strings().iter().any(|p| s.ends_with(p))),
        _ => false,
    }
}

fn primitive() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        (0i64..4).prop_map(|n| json!(n)),
        Just(json!(1.5)),
        prop::sample::select(vec!["", "a", "ab", "b", "ba"]).prop_map(|s| json!(s)),
    ]
}

fn key() -> impl Strategy<Value = String> {
    prop::sample::select(vec!["a", "b", "c"]).prop_map(str::to_owned)
}

fn document() -> impl Strategy<Value = Value> {
    primitive().prop_recursive(3, 24, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::btree_map(key(), inner, 0..4)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

fn filter() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        primitive(),
        primitive().prop_map(|v| json!({"$eq": v})),
        primitive().prop_map(|v| json!({"$neq": v})),
        (
            prop::sample::select(vec!["$gt", "$gte", "$lt", "$lte"]),
            prop_oneof![
                (0i64..4).prop_map(|n| json!(n)),
                prop::sample::select(vec!["a", "b"]).prop_map(|s| json!(s)),
            ]
        )
            .prop_map(|(op, v)| json!({ op: v })),
        (
            prop::sample::select(vec!["$in", "$nin"]),
            prop_oneof![
                // One value is a string (a substring, or an element of an array field);
                // one value of another type is refused (issue #49, 7).
                prop::sample::select(vec!["", "a", "b", "ab"]).prop_map(|s| json!(s)),
                prop::collection::vec(primitive(), 0..3).prop_map(Value::Array),
            ]
        )
            .prop_map(|(op, v)| json!({ op: v })),
        (
            prop::sample::select(vec!["$startsWith", "$endsWith"]),
            prop::sample::select(vec!["", "a", "b", "ab"])
        )
            .prop_map(|(op, v)| json!({ op: v })),
        any::<bool>().prop_map(|b| json!({"$exist": b})),
    ];
    leaf.prop_recursive(4, 32, 4, |inner| {
        prop_oneof![
            prop::collection::btree_map(key(), inner.clone(), 0..3)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
            prop::collection::vec(inner.clone(), 1..3).prop_map(Value::Array),
            (
                prop::sample::select(vec!["$and", "$or"]),
                prop::collection::vec(inner.clone(), 1..3)
            )
                .prop_map(|(op, v)| json!({ op: v })),
            inner.clone().prop_map(|f| json!({"$not": f})),
            (key(), inner.clone(), inner).prop_map(|(k, field, f)| json!({ k: field, "$or": [f] })),
        ]
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(4_000))]

    #[test]
    fn the_compiled_filter_agrees_with_the_reference(doc in document(), f in filter()) {
        let compiled = Filter::parse(&f, "filter").map_err(|e| TestCaseError::fail(e.to_string()))?;
        prop_assert_eq!(compiled.matches(&doc), reference(Some(&doc), &f), "{} against {}", f, doc);
    }

    #[test]
    fn not_inverts_every_filter(doc in document(), f in filter()) {
        let plain = Filter::parse(&f, "filter").map_err(|e| TestCaseError::fail(e.to_string()))?;
        let not = Filter::parse(&json!({"$not": f}), "filter").map_err(|e| TestCaseError::fail(e.to_string()))?;
        prop_assert_ne!(plain.matches(&doc), not.matches(&doc));
    }
}
