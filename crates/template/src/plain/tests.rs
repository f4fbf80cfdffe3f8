//! Templates that tried to build reference cycles (each one leaked memory on every render
//! before namespace attributes were held to plain data), and the plain data that still
//! passes. A leak shows as a string that is still shared after the render.

use std::sync::Arc;

use minijinja::context;
use minijinja::value::Value;

use crate::{ChatTemplate, Limits, TemplateError};

/// Renders `source` with `probe`, a string shared with this test, and checks that the
/// render let go of every copy of it: nothing it made is still alive.
fn render_probed(source: &str) -> Result<String, TemplateError> {
    let probe: Arc<str> = Arc::from("probe text");
    let t = ChatTemplate::with_limits(source, "", "", Limits::default())?;
    let out = t.render_context(context! { probe => Value::from(probe.clone()), messages => () });
    assert_eq!(Arc::strong_count(&probe), 1, "{source}: leaked ({out:?})");
    out
}

fn refused(source: &str, what: &str) {
    match render_probed(source) {
        Err(TemplateError::Render(m)) => assert!(m.contains(what), "{source}: {m}"),
        other => panic!("{source}: {other:?}"),
    }
}

#[test]
fn the_fuzzers_leak_is_an_error_and_frees_everything() {
    // fuzz/artifacts/template/leak-95f62cb1d4ed1de09a4bff526700e467be9766fe, boiled down
    refused(
        "{% set ns = namespace(p=probe) %}{% set ns.x = ns %}",
        "a namespace cannot be stored in a namespace attribute",
    );
    refused(
        "{% set ns = namespace(x='a', p=probe) %}{% for i in range(2) %}{%set ns.x = ns%}\
         {% endfor %}{{ hs.x }}",
        "namespace cannot be stored",
    );
}

#[test]
fn no_namespace_anywhere_inside_a_stored_value() {
    for source in [
        "{% set ns.x = [ns] %}",
        "{% set ns.x = {'a': ns} %}",
        "{% set ns.x = {ns: 1} %}",
        "{% set ns.x = (1, ns) %}",
        "{% set ns.x = {'k': [1, {'d': [ns]}]} %}",
        "{% set ns.x = [ns] + [1] %}",
        "{% set ns.x = [[ns]]|reverse %}",
        "{% set ns.x = dict(a=ns) %}",
        "{% set ns.x, ns.y = 1, [ns] %}",
        "{% set other = namespace(o=ns) %}{% set ns.x = other %}",
        "{% set other = namespace() %}{% set other.x = ns %}{% set ns.x = 1 %}",
        "{% macro m(n) %}{% set n.x = [n] %}{% endmacro %}{{ m(ns) }}",
        "{% set ns.x | default(ns, true) %}{% endset %}",
    ] {
        refused(
            &format!("{{% set ns = namespace(p=probe) %}}{source}"),
            "namespace cannot be stored",
        );
    }
}

#[test]
fn lazy_values_are_copied_so_they_cannot_hold_their_namespace() {
    // `ns|items` and `ns.l + [...]` are lazy and keep `ns`; stored, they are lists
    let out = render_probed(
        "{% set ns = namespace(p=probe, l=[1]) %}{% set ns.i = ns|items %}\
         {% for i in range(2) %}{% set ns.l = ns.l + [i] %}{% endfor %}\
         {% set ns.r = range(3)|reverse %}{% set ns.d = {'b': 1, 'a': [2, 3]|reverse} %}\
         {{ ns.i }} {{ ns.l }} {{ ns.r }} {{ ns.d|tojson }}",
    )
    .unwrap();
    assert_eq!(
        out,
        "[('l', [1]), ('p', 'probe text')] [1, 0, 1] [2, 1, 0] {\"b\": 1, \"a\": [3, 2]}"
    );
}

#[test]
fn loops_macros_and_other_objects_are_refused() {
    refused(
        "{% macro m() %}{% endmacro %}{% set ns = namespace(p=probe) %}{% set ns.m = m %}",
        "not a macro",
    );
    // `loop` as a value is refused before any render: `loop.changed(loop)` made a loop
    // that keeps itself alive
    for source in [
        "{% for x in [probe] %}{{ loop.changed(loop) }}{% endfor %}",
        "{% set ns = namespace(a=1, b=2) %}{% for k, v in ns|items %}{% set ns.b = [loop] %}\
         {% endfor %}",
    ] {
        let e = ChatTemplate::new(source, "", "").unwrap_err();
        assert!(
            matches!(&e, TemplateError::Syntax(m) if m.contains("`loop` can only be used")),
            "{e}"
        );
    }
}

#[test]
fn plain_data_still_goes_into_namespaces() {
    let out = render_probed(
        "{% set ns = namespace(s='', n=0, t=none) %}{% set ns.t = (1, 'a') %}\
         {% for x in ['a', probe] %}{% set ns.s = ns.s ~ x %}{% set ns.n = ns.n + 1 %}{% endfor %}\
         {% set ns.m = {'role': 'user', 'parts': [{'text': probe}]} %}\
         {{ ns.s }}|{{ ns.n }}|{{ ns.t }}|{{ ns.m.parts[0].text }}",
    )
    .unwrap();
    assert_eq!(out, "aprobe text|2|(1, 'a')|probe text");
}

#[test]
fn serde_input_is_minijinjas_own_dict_and_list() {
    // messages and tools reach a template through serde: stored as they are, not copied
    let v = Value::from(minijinja::value::Serde(
        serde_json::json!({"a": [1, {"b": 2}]}),
    ));
    assert_eq!(super::Walk { items: 0 }.value(&v, 0).unwrap(), None);
    let t = ChatTemplate::new(
        "{% set ns = namespace() %}{% set ns.m = messages %}{% set ns.t = tools %}\
         {{ ns.m[0].content }} {{ ns.t[0].function.name }}",
        "",
        "",
    )
    .unwrap();
    let tools = serde_json::json!([{"type": "function", "function": {"name": "f"}}]);
    let out = t.render(&[crate::Message::new("user", "hi")], Some(&tools), false);
    assert_eq!(out.unwrap(), "hi f");
}
