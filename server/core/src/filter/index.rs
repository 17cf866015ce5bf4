//! Many filters against one document at a cost that grows with the document and with the
//! filters that can match it, not with (filters x document): what an event router does.
//!
//! Most filters only test fields for values (`{"data": {"customer_id": "cus_42"}}`): a
//! conjunction of paths, each equal to a primitive (or an array holding it). Those are
//! indexed by the value their first path must have. A document is walked once along the
//! paths the index knows (a trie of field names, so a field no filter names is never
//! looked at), collecting the primitives at each path; each one is looked up in the index,
//! which names the filters that may match; the rest of such a filter's paths are checked
//! against what the walk collected, by hash lookups. Only when a path went through an array
//! on its way down (where two fields may come from different elements) is the filter
//! evaluated in full. Every other filter (operators, arrays) is evaluated in full.
//!
//! The walk and every evaluation spend one [`Steps`] budget, so however large the document
//! and however many filters there are, one routing does a bounded amount of work, or stops
//! with [`Exhausted`].

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;

use serde_json::Value;

use super::{Exhausted, Filter, Node, Steps};

/// A primitive as filters compare it: numbers by value (as `f64`, `-0` as `0`).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum Key {
    Str(String),
    Num(u64),
    Bool(bool),
    Null,
}

fn key_of(v: &Value) -> Option<Key> {
    match v {
        Value::String(s) => Some(Key::Str(s.clone())),
        Value::Number(n) => n.as_f64().map(|f| {
            let f = if f == 0.0 { 0.0 } else { f };
            Key::Num(f.to_bits())
        }),
        Value::Bool(b) => Some(Key::Bool(*b)),
        Value::Null => Some(Key::Null),
        Value::Array(_) | Value::Object(_) => None,
    }
}

/// How one filter is matched.
#[derive(Debug)]
enum Plan {
    /// No filter: every document.
    All,
    /// Each (path, value) must hold; indexed by the first.
    Equal(Vec<(usize, Key)>, Arc<Filter>),
    /// Evaluated in full.
    Evaluate(Arc<Filter>),
}

/// Field names down from the document's root; a node that ends a path has its id.
#[derive(Debug, Default)]
struct Trie {
    children: BTreeMap<String, Trie>,
    path: Option<usize>,
}

/// What a walk found at one path: its primitives, and whether an array was crossed on the
/// way (then two paths' values may come from different elements).
#[derive(Debug, Default)]
struct Found {
    keys: HashSet<Key>,
    through_array: bool,
}

/// Filters by position, ready to route documents.
#[derive(Debug, Default)]
pub struct FilterIndex {
    plans: Vec<Plan>,
    trie: Trie,
    paths: usize,
    /// Per path: the filters whose first condition is that path equal to this value.
    by_value: Vec<HashMap<Key, Vec<usize>>>,
}

impl FilterIndex {
    /// The index of `filters`: position `i` is the `i`-th (`None`: no filter).
    pub fn build(filters: impl IntoIterator<Item = Option<Arc<Filter>>>) -> Self {
        let mut index = Self::default();
        for (i, filter) in filters.into_iter().enumerate() {
            let plan = match filter {
                None => Plan::All,
                Some(f) => match equalities(&f) {
                    Some(conditions) if !conditions.is_empty() => {
                        let conditions: Vec<(usize, Key)> = conditions
                            .into_iter()
                            .map(|(path, key)| (index.intern(&path), key))
                            .collect();
                        let (path, key) = &conditions[0];
                        index.by_value[*path]
                            .entry(key.clone())
                            .or_default()
                            .push(i);
                        Plan::Equal(conditions, f)
                    }
                    _ => Plan::Evaluate(f),
                },
            };
            index.plans.push(plan);
        }
        index
    }

    fn intern(&mut self, path: &[String]) -> usize {
        let mut node = &mut self.trie;
        for name in path {
            node = node.children.entry(name.clone()).or_default();
        }
        match node.path {
            Some(id) => id,
            None => {
                let id = self.paths;
                node.path = Some(id);
                self.paths += 1;
                self.by_value.push(HashMap::new());
                id
            }
        }
    }

    /// Whether the filter at `i` has to look at the document at all.
    pub fn filtered(&self, i: usize) -> bool {
        !matches!(self.plans.get(i), Some(Plan::All) | None)
    }

    /// The positions of `candidates` (ascending, each a filter of this index) whose filter
    /// matches `document`, in the same order; `Err` once `steps` run out.
    pub fn select(
        &self,
        document: &Value,
        candidates: &[usize],
        steps: &mut Steps,
    ) -> Result<Vec<usize>, Exhausted> {
        let indexed = candidates
            .iter()
            .any(|i| matches!(self.plans.get(*i), Some(Plan::Equal(..))));
        let mut found: Vec<Found> = Vec::new();
        let mut hit = Vec::new();
        if indexed {
            found.resize_with(self.paths, Found::default);
            walk(document, &self.trie, false, &mut found, steps)?;
            hit = vec![false; self.plans.len()];
            for (path, at) in found.iter().enumerate() {
                for key in &at.keys {
                    if let Some(filters) = self.by_value[path].get(key) {
                        steps.take(filters.len() as u64)?;
                        for &i in filters {
                            hit[i] = true;
                        }
                    }
                }
            }
        }
        let mut out = Vec::new();
        for &i in candidates {
            steps.take(1)?;
            let matched = match self.plans.get(i) {
                None => false,
                Some(Plan::All) => true,
                Some(Plan::Equal(conditions, filter)) => {
                    if !hit.get(i).copied().unwrap_or(false) {
                        false
                    } else if conditions.iter().all(|(p, _)| !found[*p].through_array) {
                        // One object along every path: the conditions are independent.
                        steps.take(conditions.len() as u64)?;
                        conditions[1..]
                            .iter()
                            .all(|(p, key)| found[*p].keys.contains(key))
                    } else {
                        filter.matches_within(document, steps)?
                    }
                }
                Some(Plan::Evaluate(filter)) => filter.matches_within(document, steps)?,
            };
            if matched {
                out.push(i);
            }
        }
        Ok(out)
    }
}

/// Collects the primitives at every path of `trie` under `value`.
fn walk(
    value: &Value,
    trie: &Trie,
    through_array: bool,
    found: &mut [Found],
    steps: &mut Steps,
) -> Result<(), Exhausted> {
    steps.take(1)?;
    if let Some(path) = trie.path {
        let at = &mut found[path];
        at.through_array |= through_array;
        // A literal matches an equal primitive, or an array holding one.
        match value {
            Value::Array(items) => {
                steps.take(items.len() as u64)?;
                at.keys.extend(items.iter().filter_map(key_of));
            }
            v => at.keys.extend(key_of(v)),
        }
    }
    if !trie.children.is_empty() {
        descend(value, trie, through_array, found, steps)?;
    }
    Ok(())
}

/// Goes down `value` into the fields `trie` names; an object's fields are looked for in
/// each element of an array (as a filter's object matches some element of one).
fn descend(
    value: &Value,
    trie: &Trie,
    through_array: bool,
    found: &mut [Found],
    steps: &mut Steps,
) -> Result<(), Exhausted> {
    match value {
        Value::Object(map) => {
            for (name, child) in &trie.children {
                steps.take(1)?;
                if let Some(v) = map.get(name) {
                    walk(v, child, through_array, found, steps)?;
                }
            }
        }
        Value::Array(items) => {
            for item in items {
                steps.take(1)?;
                descend(item, trie, true, found, steps)?;
            }
        }
        _ => {}
    }
    Ok(())
}

/// A filter that only tests fields for primitives (objects of fields down to literals,
/// no operator, no array) as its (path, value) conditions; `None` for any other.
fn equalities(filter: &Filter) -> Option<Vec<(Vec<String>, Key)>> {
    fn collect(node: &Node, path: &mut Vec<String>, out: &mut Vec<(Vec<String>, Key)>) -> bool {
        match node {
            Node::Literal(v) => match key_of(v) {
                Some(key) if !path.is_empty() => {
                    out.push((path.clone(), key));
                    true
                }
                _ => false,
            },
            Node::Object { fields, ops } if ops.is_empty() && !fields.is_empty() => {
                for (name, child) in fields {
                    path.push(name.clone());
                    let ok = collect(child, path, out);
                    path.pop();
                    if !ok {
                        return false;
                    }
                }
                true
            }
            _ => false,
        }
    }
    let mut out = Vec::new();
    collect(&filter.root, &mut Vec::new(), &mut out).then_some(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::json;

    fn filters(values: &[Value]) -> Vec<Option<Arc<Filter>>> {
        values
            .iter()
            .map(|v| {
                (!v.is_null()).then(|| {
                    Arc::new(Filter::parse(v, "filter").unwrap_or_else(|e| panic!("{v}: {e}")))
                })
            })
            .collect()
    }

    /// Every filter evaluated in full: what the index must agree with.
    fn brute(filters: &[Option<Arc<Filter>>], doc: &Value) -> Vec<usize> {
        filters
            .iter()
            .enumerate()
            .filter(|(_, f)| f.as_ref().is_none_or(|f| f.matches(doc)))
            .map(|(i, _)| i)
            .collect()
    }

    fn select(filters: &[Option<Arc<Filter>>], doc: &Value) -> Vec<usize> {
        let index = FilterIndex::build(filters.iter().cloned());
        let all: Vec<usize> = (0..filters.len()).collect();
        index.select(doc, &all, &mut Steps::new(u64::MAX)).unwrap()
    }

    #[test]
    fn equalities_are_indexed_and_agree_with_evaluation() {
        let fs = filters(&[
            json!({"data": {"customer_id": "cus_1"}}),
            json!({"data": {"customer_id": "cus_2", "kind": "a"}}),
            json!({"data": {"n": 1}}),
            json!({"data": {"n": {"$gte": 5}}}),
            Value::Null,
            json!({"data": {"lines": {"sku": "A", "qty": 2}}}),
            json!({"topic": "t", "metadata": {"x-tenant": "acme"}}),
            json!({}),
        ]);
        for doc in [
            json!({"topic": "t", "data": {"customer_id": "cus_1", "n": 1.0}, "metadata": {}}),
            json!({"data": {"customer_id": ["cus_2", "cus_1"], "kind": "a", "n": 7}}),
            json!({"data": {"customer_id": "cus_2", "kind": "b"}}),
            // Fields from different elements of an array: the two-field filter fails.
            json!({"data": {"lines": [{"sku": "A", "qty": 1}, {"sku": "B", "qty": 2}]}}),
            json!({"data": {"lines": [{"sku": "A", "qty": 2}]}}),
            json!({"data": [{"customer_id": "cus_2"}, {"kind": "a"}]}),
            json!({"topic": "t", "metadata": {"x-tenant": "acme"}}),
            json!({"data": {"n": -0.0}}),
            json!("not an object"),
        ] {
            assert_eq!(select(&fs, &doc), brute(&fs, &doc), "{doc}");
        }
    }

    #[test]
    fn ten_thousand_filters_and_a_large_array_cost_the_array_not_their_product() {
        let fs: Vec<Option<Arc<Filter>>> = (0..10_000)
            .map(|n| {
                Some(Arc::new(
                    Filter::parse(
                        &json!({"data": {"customer_id": format!("cus_{n}")}}),
                        "filter",
                    )
                    .unwrap(),
                ))
            })
            .collect();
        let ids: Vec<Value> = (0..100_000)
            .map(|n| json!(format!("x_{n}")))
            .chain([json!("cus_7")])
            .collect();
        let doc = json!({"data": {"customer_id": ids}});
        let index = FilterIndex::build(fs);
        let all: Vec<usize> = (0..10_000).collect();
        let mut steps = Steps::new(1_000_000);
        assert_eq!(index.select(&doc, &all, &mut steps).unwrap(), vec![7]);
        let spent = 1_000_000 - steps.left();
        assert!(spent < 200_000, "spent {spent} steps");
    }

    #[test]
    fn the_budget_bounds_full_evaluations() {
        // Filters the index cannot take: each evaluated against a 100,000-element array.
        let fs: Vec<Option<Arc<Filter>>> = (0..100)
            .map(|n| {
                Some(Arc::new(
                    Filter::parse(
                        &json!({"data": {"ids": {"y": {"$exist": true}, "n": n}}}),
                        "filter",
                    )
                    .unwrap(),
                ))
            })
            .collect();
        let ids: Vec<Value> = (0..100_000).map(|n| json!(format!("x_{n}"))).collect();
        let doc = json!({"data": {"ids": ids}});
        let index = FilterIndex::build(fs);
        let all: Vec<usize> = (0..100).collect();
        assert_eq!(
            index.select(&doc, &all, &mut Steps::new(1_000_000)),
            Err(Exhausted)
        );
    }

    fn primitive() -> impl Strategy<Value = Value> {
        prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            (0..4_i64).prop_map(|n| json!(n)),
            prop_oneof![Just("a"), Just("b"), Just("c")].prop_map(|s| json!(s)),
        ]
    }

    fn field() -> impl Strategy<Value = String> {
        prop_oneof![Just("a"), Just("b"), Just("c")].prop_map(str::to_owned)
    }

    fn document() -> impl Strategy<Value = Value> {
        primitive().prop_recursive(4, 32, 4, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
                prop::collection::btree_map(field(), inner, 0..3)
                    .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    /// Filters of fields down to primitives (the indexed kind), with now and then an
    /// operator (the evaluated kind).
    fn filter() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            4 => primitive(),
            1 => primitive().prop_map(|v| json!({"$eq": v})),
        ];
        leaf.prop_recursive(3, 12, 3, |inner| {
            prop::collection::btree_map(field(), inner, 1..3)
                .prop_map(|m| Value::Object(m.into_iter().collect()))
        })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2_000))]

        #[test]
        fn the_index_agrees_with_evaluating_every_filter(
            fs in prop::collection::vec(prop::option::of(filter()), 1..12),
            doc in document(),
        ) {
            let fs: Vec<Value> = fs.into_iter().map(|f| f.unwrap_or(Value::Null)).collect();
            // A filter's root is matched against an object in practice; any is allowed.
            let parsed: Vec<Option<Arc<Filter>>> = fs
                .iter()
                .map(|v| (!v.is_null()).then(|| Filter::parse(v, "filter").ok().map(Arc::new)).flatten())
                .collect();
            prop_assert_eq!(select(&parsed, &doc), brute(&parsed, &doc));
        }
    }
}
