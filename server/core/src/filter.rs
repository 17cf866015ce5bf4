//! Subscription filters: the operator JSON of Hookdeck Outpost (and of `simple-json-match`,
//! which it ports), so a destination's filter moves to hookd by copy and paste.
//!
//! A filter is matched against the event as one JSON document, `{"topic": ..., "data":
//! <the payload, when it is JSON>, "metadata": <the event's headers>}` (see
//! [`event_document`]). The rules, as Outpost applies them:
//!
//! - **A primitive** (string, number, boolean, null) matches an equal value (numbers by
//!   value: `1` equals `1.0`; no coercion between types), or an array that holds one.
//! - **An object** matches an object whose fields match its fields, recursively (fields it
//!   does not name are ignored); against an array, some element must match it. An empty
//!   object matches any object.
//! - **An array** matches an array that holds, for each of its items, an element matching
//!   that item (order and extra elements do not matter).
//! - **Operators** are keys starting with `$`, next to fields or alone; all must hold:
//!   `$eq`/`$neq` (deep equality), `$gt $gte $lt $lte` (two numbers, or two strings in
//!   byte order), `$in`/`$nin` (membership in an array of values; or, given one value, a
//!   substring of a string or an element of an array), `$startsWith`/`$endsWith` (a string,
//!   or any of an array of strings), `$exist` (`true`: the field is present, `null`
//!   included; `false`: absent), and `$and`/`$or` (arrays of filters) and `$not` (one
//!   filter), applied to the value where they stand.
//! - A comparison between types that do not compare (`$gt` of an object, `$startsWith` of
//!   a number, an absent field) does not match, and neither does its `$nin`; only `$not`
//!   turns a no into a yes.
//!
//! [`Filter::parse`] refuses what can never mean what it says (an unknown operator such as
//! `$regex` or `$ref`, `$and` that is not an array, `$exist` that is not a boolean) naming
//! where it stands (`filter.data.amount.$gte`), and bounds the filter's size and depth so
//! one subscription cannot make every publish slow.

use serde_json::{Map, Value};

/// Nesting depth a filter may have (objects, arrays and operators together).
pub const MAX_DEPTH: usize = 32;
/// Nodes a filter may have: the bound on one evaluation's work.
pub const MAX_NODES: usize = 1_000;

/// A checked filter, ready to match events.
#[derive(Debug, Clone, PartialEq)]
pub struct Filter {
    root: Node,
}

#[derive(Debug, Clone, PartialEq)]
enum Node {
    /// A string, number, boolean or null.
    Literal(Value),
    /// Fields and operators, all of which must hold.
    Object {
        fields: Vec<(String, Node)>,
        ops: Vec<Op>,
    },
    /// Every item must match some element of an array.
    Array(Vec<Node>),
}

#[derive(Debug, Clone, PartialEq)]
enum Op {
    Eq(Value),
    Neq(Value),
    Order(Order, Value),
    In(Value),
    Nin(Value),
    StartsWith(Vec<String>),
    EndsWith(Vec<String>),
    Exist(bool),
    And(Vec<Node>),
    Or(Vec<Node>),
    Not(Box<Node>),
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Order {
    Gt,
    Gte,
    Lt,
    Lte,
}

/// Why a filter was refused, and where in it.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{path}: {reason}")]
pub struct FilterError {
    /// Where, from the field's name: `filter.data.amount.$gte`, `filter.$or[1]`.
    pub path: String,
    pub reason: String,
}

impl Filter {
    /// Checks `value` as the filter of the field `field` (the name errors start with).
    pub fn parse(value: &Value, field: &str) -> Result<Filter, FilterError> {
        Self::parse_with(value, field, true)
    }

    /// [`Filter::parse`] for a filter an older hookd stored: what it accepted then is
    /// accepted (`$in`/`$nin` given one value that is not a string, which never matches a
    /// field of its type), so a new check refuses new filters without stopping a start.
    pub fn parse_stored(value: &Value, field: &str) -> Result<Filter, FilterError> {
        Self::parse_with(value, field, false)
    }

    fn parse_with(value: &Value, field: &str, strict: bool) -> Result<Filter, FilterError> {
        let mut budget = Budget { nodes: 0, strict };
        let root = compile(value, field, 0, &mut budget)?;
        Ok(Filter { root })
    }

    /// Parses and checks filter JSON text; a syntax error names its line and column.
    pub fn parse_text(text: &str, field: &str) -> Result<Filter, FilterError> {
        let value: Value = serde_json::from_str(text).map_err(|e| FilterError {
            path: field.to_owned(),
            reason: format!("not JSON: {e}"),
        })?;
        Filter::parse(&value, field)
    }

    /// Whether the event document matches (with no bound on the work).
    pub fn matches(&self, document: &Value) -> bool {
        matches(Some(document), &self.root, &mut Steps::new(u64::MAX)).unwrap_or(false)
    }

    /// Whether the event document matches, spending `steps`; `Err` once they run out.
    pub fn matches_within(&self, document: &Value, steps: &mut Steps) -> Result<bool, Exhausted> {
        matches(Some(document), &self.root, steps)
    }
}

/// The fields of the event document a subscription's filter may name at its top (what
/// Outpost's event has): any other is refused, since it could never match.
pub const EVENT_FIELDS: [&str; 5] = ["id", "time", "topic", "data", "metadata"];

impl Filter {
    /// [`Filter::parse`] for a subscription's filter, matched against an
    /// [`event_document`]: an object whose fields are the document's (`id`, `time`,
    /// `topic`, `data`, `metadata`) or operators. A misspelt field (`dta`) is refused,
    /// naming it, rather than stored as a filter that never matches.
    pub fn parse_event(value: &Value, field: &str) -> Result<Filter, FilterError> {
        let Value::Object(map) = value else {
            return Err(refuse(
                field,
                format!(
                    "a filter is an object of the event's fields ({})",
                    EVENT_FIELDS.join(", ")
                ),
            ));
        };
        for key in map.keys() {
            if !key.starts_with('$') && !EVENT_FIELDS.contains(&key.as_str()) {
                return Err(refuse(
                    &format!("{field}.{key}"),
                    format!(
                        "the event has no field `{key}` (its fields: {}); a payload's fields are under `data`",
                        EVENT_FIELDS.join(", ")
                    ),
                ));
            }
        }
        Filter::parse(value, field)
    }
}

/// An event's identity in its filter document: its id and its time (RFC 3339, UTC, ms).
#[derive(Debug, Clone, Copy)]
pub struct EventIdentity<'a> {
    pub id: &'a str,
    pub time_ms: u64,
}

/// The document a filter sees for one event: its topic, its payload as `data` (when the
/// payload is JSON; absent otherwise, so `{"data": {"$exist": false}}` selects the rest),
/// its headers as `metadata`, and (as Outpost's event has them) its `id` and `time`.
pub fn event_document<'h>(
    identity: Option<EventIdentity<'_>>,
    topic: &str,
    payload: &[u8],
    headers: impl IntoIterator<Item = (&'h str, &'h str)>,
) -> Value {
    let mut doc = Map::new();
    if let Some(identity) = identity {
        doc.insert("id".into(), Value::String(identity.id.to_owned()));
        doc.insert("time".into(), Value::String(rfc3339_ms(identity.time_ms)));
    }
    doc.insert("topic".into(), Value::String(topic.to_owned()));
    if let Ok(data) = serde_json::from_slice::<Value>(payload) {
        doc.insert("data".into(), data);
    }
    let metadata: Map<String, Value> = headers
        .into_iter()
        .map(|(k, v)| (k.to_owned(), Value::String(v.to_owned())))
        .collect();
    doc.insert("metadata".into(), Value::Object(metadata));
    Value::Object(doc)
}

/// `2026-12-06T15:04:05.123Z` for a Unix time in milliseconds (what `$gte` compares, as
/// strings, in time order).
fn rfc3339_ms(ms: u64) -> String {
    let secs = ms / 1_000;
    let (days, rest) = (secs / 86_400, secs % 86_400);
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{:03}Z",
        rest / 3_600,
        rest % 3_600 / 60,
        rest % 60,
        ms % 1_000
    )
}

struct Budget {
    nodes: usize,
    /// The checks added since filters were first stored apply (see
    /// [`Filter::parse_stored`]).
    strict: bool,
}

fn refuse(path: &str, reason: impl Into<String>) -> FilterError {
    FilterError {
        path: path.to_owned(),
        reason: reason.into(),
    }
}

fn compile(
    value: &Value,
    path: &str,
    depth: usize,
    budget: &mut Budget,
) -> Result<Node, FilterError> {
    budget.nodes += 1;
    if budget.nodes > MAX_NODES {
        return Err(refuse(
            path,
            format!("the filter has more than {MAX_NODES} parts"),
        ));
    }
    if depth > MAX_DEPTH {
        return Err(refuse(
            path,
            format!("the filter nests deeper than {MAX_DEPTH} levels"),
        ));
    }
    match value {
        Value::Array(items) => items
            .iter()
            .enumerate()
            .map(|(i, item)| compile(item, &format!("{path}[{i}]"), depth + 1, budget))
            .collect::<Result<_, _>>()
            .map(Node::Array),
        Value::Object(map) => {
            let (mut fields, mut ops) = (Vec::new(), Vec::new());
            for (key, value) in map {
                let at = format!("{path}.{key}");
                if key.starts_with('$') {
                    ops.push(operator(key, value, &at, depth, budget)?);
                } else {
                    fields.push((key.clone(), compile(value, &at, depth + 1, budget)?));
                }
            }
            Ok(Node::Object { fields, ops })
        }
        primitive => Ok(Node::Literal(primitive.clone())),
    }
}

fn operator(
    key: &str,
    value: &Value,
    path: &str,
    depth: usize,
    budget: &mut Budget,
) -> Result<Op, FilterError> {
    budget.nodes += 1;
    let strict = budget.strict;
    let order = |o: Order| match value {
        Value::Number(_) | Value::String(_) => Ok(Op::Order(o, value.clone())),
        _ => Err(refuse(
            path,
            format!("{key} compares with a number or a string"),
        )),
    };
    let strings = || -> Result<Vec<String>, FilterError> {
        match value {
            Value::String(s) => Ok(vec![s.clone()]),
            Value::Array(items) if !items.is_empty() => items
                .iter()
                .enumerate()
                .map(|(i, item)| match item {
                    Value::String(s) => Ok(s.clone()),
                    _ => Err(refuse(&format!("{path}[{i}]"), "needs a string")),
                })
                .collect(),
            _ => Err(refuse(
                path,
                format!("{key} takes a string or a non-empty array of strings"),
            )),
        }
    };
    let members = || -> Result<Value, FilterError> {
        match value {
            Value::Array(items) => {
                for (i, item) in items.iter().enumerate() {
                    if item.is_object() || item.is_array() {
                        return Err(refuse(
                            &format!("{path}[{i}]"),
                            format!("{key} lists strings, numbers, booleans or null"),
                        ));
                    }
                }
                Ok(value.clone())
            }
            Value::Object(_) => Err(refuse(
                path,
                format!("{key} takes an array of values, or one string"),
            )),
            // One string: a substring of a string field, or an element of an array field.
            v @ Value::String(_) => Ok(v.clone()),
            v if !strict => Ok(v.clone()),
            // One value of another type never matches a field of its own type (issue #49,
            // 7): say so rather than store a filter that silently matches nothing.
            v => Err(refuse(
                path,
                format!(
                    "{key} takes an array of values (`[{v}]`) or one string; to match a field equal to {v}, or an array field holding it, write the value itself"
                ),
            )),
        }
    };
    let mut filters = || -> Result<Vec<Node>, FilterError> {
        match value {
            Value::Array(items) if !items.is_empty() => items
                .iter()
                .enumerate()
                .map(|(i, item)| compile(item, &format!("{path}[{i}]"), depth + 1, budget))
                .collect(),
            _ => Err(refuse(
                path,
                format!("{key} takes a non-empty array of filters"),
            )),
        }
    };
    match key {
        "$eq" => Ok(Op::Eq(value.clone())),
        "$neq" => Ok(Op::Neq(value.clone())),
        "$gt" => order(Order::Gt),
        "$gte" => order(Order::Gte),
        "$lt" => order(Order::Lt),
        "$lte" => order(Order::Lte),
        "$in" => members().map(Op::In),
        "$nin" => members().map(Op::Nin),
        "$startsWith" => strings().map(Op::StartsWith),
        "$endsWith" => strings().map(Op::EndsWith),
        "$exist" => match value {
            Value::Bool(b) => Ok(Op::Exist(*b)),
            _ => Err(refuse(path, "$exist takes true or false")),
        },
        "$and" => filters().map(Op::And),
        "$or" => filters().map(Op::Or),
        "$not" => compile(value, path, depth + 1, budget).map(|n| Op::Not(Box::new(n))),
        other => Err(refuse(
            path,
            format!(
                "unknown operator {other} (known: $eq $neq $gt $gte $lt $lte $in $nin \
                 $startsWith $endsWith $exist $and $or $not)"
            ),
        )),
    }
}

/// The work one evaluation may do: one step for each node of the filter applied to each
/// value of the document, and for each element compared. Matching a publish against its
/// topic's filters spends one budget, so no payload can make a publish cost more.
#[derive(Debug, Clone, Copy)]
pub struct Steps {
    left: u64,
}

/// The budget ran out before the answer was known.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Exhausted;

impl Steps {
    pub fn new(limit: u64) -> Self {
        Self { left: limit }
    }

    /// Spends `n` steps.
    pub fn take(&mut self, n: u64) -> Result<(), Exhausted> {
        match self.left.checked_sub(n) {
            Some(left) => {
                self.left = left;
                Ok(())
            }
            None => {
                self.left = 0;
                Err(Exhausted)
            }
        }
    }

    pub fn left(&self) -> u64 {
        self.left
    }
}

/// `input` is `None` where the field is absent.
fn matches(input: Option<&Value>, node: &Node, steps: &mut Steps) -> Result<bool, Exhausted> {
    steps.take(1)?;
    Ok(match node {
        Node::Literal(want) => match input {
            Some(Value::Array(items)) => {
                steps.take(items.len() as u64)?;
                items.iter().any(|item| loose_eq(item, want))
            }
            Some(v) => loose_eq(v, want),
            None => false,
        },
        Node::Array(wanted) => match input {
            Some(Value::Array(items)) => {
                for w in wanted {
                    if !some_item(items, |item, steps| matches(Some(item), w, steps), steps)? {
                        return Ok(false);
                    }
                }
                true
            }
            _ => false,
        },
        Node::Object { fields, ops } => {
            if fields.is_empty() && !ops.is_empty() {
                // Operators alone apply to the value as it is (an array as a whole).
                return all_ops(input, ops, steps);
            }
            match input {
                Some(Value::Object(map)) => {
                    for (k, n) in fields {
                        if !matches(map.get(k), n, steps)? {
                            return Ok(false);
                        }
                    }
                    all_ops(input, ops, steps)?
                }
                Some(Value::Array(items)) => {
                    some_item(items, |item, steps| matches(Some(item), node, steps), steps)?
                }
                _ => false,
            }
        }
    })
}

/// Whether some item holds `f`.
fn some_item(
    items: &[Value],
    mut f: impl FnMut(&Value, &mut Steps) -> Result<bool, Exhausted>,
    steps: &mut Steps,
) -> Result<bool, Exhausted> {
    for item in items {
        if f(item, steps)? {
            return Ok(true);
        }
    }
    Ok(false)
}

fn all_ops(input: Option<&Value>, ops: &[Op], steps: &mut Steps) -> Result<bool, Exhausted> {
    for op in ops {
        if !applies(input, op, steps)? {
            return Ok(false);
        }
    }
    Ok(true)
}

fn applies(input: Option<&Value>, op: &Op, steps: &mut Steps) -> Result<bool, Exhausted> {
    steps.take(1)?;
    Ok(match op {
        Op::Exist(want) => input.is_some() == *want,
        Op::And(all) => {
            for n in all {
                if !matches(input, n, steps)? {
                    return Ok(false);
                }
            }
            true
        }
        Op::Or(any) => {
            for n in any {
                if matches(input, n, steps)? {
                    return Ok(true);
                }
            }
            false
        }
        Op::Not(n) => !matches(input, n, steps)?,
        _ => {
            let Some(v) = input else {
                // Only $neq holds of an absent field: absent is not equal to anything.
                return Ok(matches!(op, Op::Neq(_)));
            };
            match op {
                Op::Eq(want) => deep_eq(v, want, steps)?,
                Op::Neq(want) => !deep_eq(v, want, steps)?,
                Op::Order(order, bound) => compare(v, bound).is_some_and(|o| match order {
                    Order::Gt => o.is_gt(),
                    Order::Gte => o.is_ge(),
                    Order::Lt => o.is_lt(),
                    Order::Lte => o.is_le(),
                }),
                Op::In(set) => member(v, set, steps)? == Some(true),
                Op::Nin(set) => member(v, set, steps)? == Some(false),
                Op::StartsWith(prefixes) => {
                    steps.take(prefixes.len() as u64)?;
                    v.as_str()
                        .is_some_and(|s| prefixes.iter().any(|p| s.starts_with(p.as_str())))
                }
                Op::EndsWith(suffixes) => {
                    steps.take(suffixes.len() as u64)?;
                    v.as_str()
                        .is_some_and(|s| suffixes.iter().any(|p| s.ends_with(p.as_str())))
                }
                Op::Exist(_) | Op::And(_) | Op::Or(_) | Op::Not(_) => false,
            }
        }
    })
}

/// Equality of two primitives: numbers by value, other types only with their own type.
fn loose_eq(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => x.as_f64() == y.as_f64(),
        (Value::String(x), Value::String(y)) => x == y,
        (Value::Bool(x), Value::Bool(y)) => x == y,
        (Value::Null, Value::Null) => true,
        _ => false,
    }
}

/// Structural equality, numbers by value.
fn deep_eq(a: &Value, b: &Value, steps: &mut Steps) -> Result<bool, Exhausted> {
    steps.take(1)?;
    Ok(match (a, b) {
        (Value::Array(x), Value::Array(y)) => {
            if x.len() != y.len() {
                return Ok(false);
            }
            for (p, q) in x.iter().zip(y) {
                if !deep_eq(p, q, steps)? {
                    return Ok(false);
                }
            }
            true
        }
        (Value::Object(x), Value::Object(y)) => {
            if x.len() != y.len() {
                return Ok(false);
            }
            for (k, p) in x {
                match y.get(k) {
                    Some(q) if deep_eq(p, q, steps)? => {}
                    _ => return Ok(false),
                }
            }
            true
        }
        _ => loose_eq(a, b),
    })
}

fn compare(v: &Value, bound: &Value) -> Option<std::cmp::Ordering> {
    match (v, bound) {
        (Value::Number(x), Value::Number(y)) => x.as_f64()?.partial_cmp(&y.as_f64()?),
        (Value::String(x), Value::String(y)) => Some(x.as_bytes().cmp(y.as_bytes())),
        _ => None,
    }
}

/// `$in`: `Some(is a member)`, or `None` where the types do not compare.
fn member(v: &Value, set: &Value, steps: &mut Steps) -> Result<Option<bool>, Exhausted> {
    Ok(match (v, set) {
        (Value::Object(_) | Value::Array(_), Value::Array(_)) => None,
        (v, Value::Array(items)) => {
            steps.take(items.len() as u64)?;
            Some(items.iter().any(|item| loose_eq(v, item)))
        }
        (Value::String(s), Value::String(part)) => {
            steps.take(1 + (s.len() / 64) as u64)?;
            Some(s.contains(part.as_str()))
        }
        (Value::String(_), _) => None,
        (Value::Array(items), one) => {
            steps.take(items.len() as u64)?;
            Some(items.iter().any(|item| loose_eq(item, one)))
        }
        _ => None,
    })
}

pub mod index;
#[cfg(test)]
mod tests;
