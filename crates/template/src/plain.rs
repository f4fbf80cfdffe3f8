//! The filter every value assigned to a namespace attribute goes through (the template is
//! rewritten to call it: see [`crate::setattr`]). It lets only plain data into a namespace,
//! so that no namespace can come to hold itself, however indirectly, and no value
//! carried from one loop iteration to the next can grow without bound:
//!
//! - strings, numbers, booleans, `none` and undefined pass as they are;
//! - lists, tuples and dicts pass when everything in them does;
//! - lazy sequences (`a + b` on lists, `x|reverse`, `d|items`, `range(n)`, ...) are copied
//!   into a list first: they may hold the namespace they were made from;
//! - anything else is refused with an error: namespaces, loop objects, macros.
//!
//! A value may be nested at most [`MAX_DEPTH`] deep (dropping or printing a deeper one
//! would recurse that deep: `{% set ns.l = [ns.l] %}` in a loop overflowed the stack) and
//! hold at most [`MAX_ITEMS`] items; all the values checked in one render hold at most
//! [`MAX_ITEMS_PER_RENDER`] items between them, which bounds the time spent here and the
//! memory a list grown through a namespace can take (doubling `ns.l + ns.l` stops there).

use std::cell::Cell;
use std::collections::BTreeMap;
use std::sync::{Arc, OnceLock};

use minijinja::Error;
use minijinja::value::{DynObject, Enumerator, Kwargs, Object, ObjectRepr, Tuple, Value};

/// The filter's name. Templates cannot define filters, so they cannot replace it.
pub const FILTER: &str = "molla_plain_value";

/// Deepest nesting of lists and dicts a namespace attribute may hold. Deeper than any JSON
/// serde_json parses (128), so tool schemas from a request fit.
pub const MAX_DEPTH: usize = 256;

/// Most items (every list element, dict key and value, counted through all levels) one
/// namespace attribute may hold.
pub const MAX_ITEMS: usize = 1 << 20;

/// Most items checked in one render, over all the values stored in namespaces.
pub const MAX_ITEMS_PER_RENDER: usize = 1 << 25;

thread_local! {
    /// Items checked in the render running on this thread (renders are synchronous).
    static CHECKED: Cell<usize> = const { Cell::new(0) };
}

/// Resets the per-render count; called before each render.
pub fn start_render() {
    CHECKED.with(|c| c.set(0));
}

/// The filter: `value`, or a copy with its lazy sequences made into lists, or an error.
pub fn filter(value: Value) -> Result<Value, Error> {
    let mut walk = Walk { items: 0 };
    let out = walk.value(&value, 0)?;
    let total = CHECKED.with(|c| {
        let total = c.get().saturating_add(walk.items);
        c.set(total);
        total
    });
    if total > MAX_ITEMS_PER_RENDER {
        return Err(invalid(format!(
            "values stored in namespaces hold more than {MAX_ITEMS_PER_RENDER} items \
             in one render"
        )));
    }
    Ok(out.unwrap_or(value))
}

struct Walk {
    items: usize,
}

impl Walk {
    /// `None` when `v` can be stored as it is, `Some(copy)` when a copy must be stored.
    fn value(&mut self, v: &Value, depth: usize) -> Result<Option<Value>, Error> {
        self.items += 1;
        if self.items > MAX_ITEMS {
            return Err(invalid(format!(
                "a namespace attribute can hold at most {MAX_ITEMS} items"
            )));
        }
        let Some(obj) = v.as_object() else {
            return Ok(None);
        };
        if depth >= MAX_DEPTH {
            return Err(invalid(format!(
                "a value stored in a namespace may be nested at most {MAX_DEPTH} deep"
            )));
        }
        if let Some(items) = obj.downcast_ref::<Vec<Value>>() {
            return Ok(self.seq(items.iter(), depth)?.map(Value::from));
        }
        if let Some(items) = obj.downcast_ref::<Tuple>() {
            let copy = self.seq(items.iter(), depth)?;
            return Ok(copy.map(|v| Value::from_object(Tuple::new(v))));
        }
        let name = obj.type_name();
        if name == types().map {
            return self.map(obj, depth);
        }
        if name == types().namespace {
            return Err(invalid(
                "a namespace cannot be stored in a namespace attribute".to_string(),
            ));
        }
        match (obj.repr(), obj.try_iter()) {
            (ObjectRepr::Seq | ObjectRepr::Iterable, Some(iter)) => {
                let mut copy = Vec::new();
                for item in iter {
                    copy.push(self.value(&item, depth + 1)?.unwrap_or(item));
                }
                Ok(Some(Value::from(copy)))
            }
            _ => Err(invalid(format!(
                "only plain data (strings, numbers, lists, dicts) can be stored in a \
                 namespace attribute, not a {}",
                short_type_name(name)
            ))),
        }
    }

    fn seq<'a>(
        &mut self,
        items: impl Iterator<Item = &'a Value>,
        depth: usize,
    ) -> Result<Option<Vec<Value>>, Error> {
        let items: Vec<&Value> = items.collect();
        let mut copy: Option<Vec<Value>> = None;
        for (i, item) in items.iter().enumerate() {
            match (self.value(item, depth + 1)?, &mut copy) {
                (Some(new), Some(copy)) => copy.push(new),
                (Some(new), None) => {
                    let mut c: Vec<Value> = items[..i].iter().map(|v| (*v).clone()).collect();
                    c.push(new);
                    copy = Some(c);
                }
                (None, Some(copy)) => copy.push((*item).clone()),
                (None, None) => {}
            }
        }
        Ok(copy)
    }

    fn map(&mut self, obj: &DynObject, depth: usize) -> Result<Option<Value>, Error> {
        let Some(pairs) = obj.try_iter_pairs() else {
            return Ok(None);
        };
        let mut changed = false;
        let mut copy = Vec::new();
        for (k, v) in pairs {
            let new_k = self.value(&k, depth + 1)?;
            let new_v = self.value(&v, depth + 1)?;
            changed |= new_k.is_some() || new_v.is_some();
            copy.push((new_k.unwrap_or(k), new_v.unwrap_or(v)));
        }
        if !changed {
            return Ok(None);
        }
        // minijinja's own dict type (insertion order kept) is built by its `dict()`
        let empty: Kwargs = std::iter::empty::<(&str, Value)>().collect();
        minijinja::functions::dict(Some(Value::from_object(Pairs::new(copy))), empty).map(Some)
    }
}

fn invalid(msg: String) -> Error {
    crate::env::Thrown::Refused(msg).into_error()
}

/// `minijinja::vm::loop_object::Loop` -> `loop`.
fn short_type_name(name: &str) -> String {
    let base = name.split('<').next().unwrap_or(name);
    base.rsplit("::").next().unwrap_or(base).to_lowercase()
}

/// Type names of minijinja's dict and namespace, whose types are private to minijinja.
struct Types {
    map: &'static str,
    namespace: &'static str,
}

fn types() -> &'static Types {
    static TYPES: OnceLock<Types> = OnceLock::new();
    TYPES.get_or_init(|| {
        let name = |v: Result<Value, Error>| {
            v.ok()
                .and_then(|v| v.as_object().map(DynObject::type_name))
                .unwrap_or("?")
        };
        let empty = || std::iter::empty::<(&str, Value)>().collect::<Kwargs>();
        Types {
            map: name(minijinja::functions::dict(None, empty())),
            namespace: name(minijinja::functions::namespace(None)),
        }
    })
}

/// Key/value pairs in order, shown to `dict()` as a map.
#[derive(Debug)]
struct Pairs {
    keys: Vec<Value>,
    values: BTreeMap<Value, Value>,
}

impl Pairs {
    fn new(pairs: Vec<(Value, Value)>) -> Self {
        let keys = pairs.iter().map(|(k, _)| k.clone()).collect();
        Pairs {
            keys,
            values: pairs.into_iter().collect(),
        }
    }
}

impl Object for Pairs {
    fn get_value(self: &Arc<Self>, key: &Value) -> Option<Value> {
        self.values.get(key).cloned()
    }

    fn enumerate(self: &Arc<Self>) -> Enumerator {
        Enumerator::Values(self.keys.clone())
    }
}

#[cfg(test)]
mod tests;
