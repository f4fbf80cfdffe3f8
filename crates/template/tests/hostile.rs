//! Hostile and broken templates: each must fail with a clear one-line error, quickly,
//! without panicking or exhausting memory.

use std::time::{Duration, Instant};

use template::{ChatTemplate, Limits, Message, TemplateError};

fn msgs() -> Vec<Message> {
    vec![Message::new("user", "hi")]
}

/// Renders `source` on a thread with a 2 MiB stack (a tokio worker's default) and
/// checks the error is one line and arrives within two seconds.
fn render_err(source: &'static str) -> TemplateError {
    let handle = std::thread::Builder::new()
        .stack_size(2 << 20)
        .spawn(move || {
            let start = Instant::now();
            let result = ChatTemplate::new(source, "<s>", "</s>")
                .and_then(|t| t.render(&msgs(), None, true));
            (result, start.elapsed())
        })
        .unwrap();
    let (result, elapsed) = handle.join().expect("render panicked");
    let err = result.expect_err("hostile template rendered");
    let msg = err.to_string();
    assert!(!msg.contains('\n'), "multi-line error: {msg}");
    assert!(
        elapsed < Duration::from_secs(2),
        "{source}: took {elapsed:?} to fail with {msg}"
    );
    eprintln!("{elapsed:>10.2?}  {msg}");
    err
}

#[test]
fn infinite_loops_run_out() {
    // minijinja refuses ranges over 100k items outright
    let e = render_err("{% for i in range(10**9) %}x{% endfor %}");
    assert!(
        matches!(&e, TemplateError::Render(m) if m.contains("range")),
        "{e}"
    );
    let e = render_err(
        "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}",
    );
    assert_eq!(e, TemplateError::OutOfFuel(Limits::default().fuel));
    let e = render_err(
        "{% set ns = namespace(n=0) %}{% for i in range(100000) %}{% for j in range(100000) %}\
         {% set ns.n = ns.n + 1 %}{% endfor %}{% endfor %}{{ ns.n }}",
    );
    assert!(matches!(e, TemplateError::OutOfFuel(_)), "{e}");
}

#[test]
fn deep_recursion_is_cut() {
    let e = render_err("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}");
    assert!(
        matches!(&e, TemplateError::Render(m) if m.contains("recursion")),
        "{e}"
    );
    let e = render_err("{% for m in [1] recursive %}{{ loop([m]) }}{% endfor %}");
    assert!(
        matches!(&e, TemplateError::Render(m) if m.contains("recursion")),
        "{e}"
    );
    let e = render_err(
        "{% macro f(n) %}{% for i in range(10) %}{{ f(n + 1) }}{% endfor %}{% endmacro %}{{ f(0) }}",
    );
    assert!(
        matches!(e, TemplateError::Render(_) | TemplateError::OutOfFuel(_)),
        "{e}"
    );
}

#[test]
fn huge_output_is_capped() {
    // the allocation is charged to fuel before it is made
    let e = render_err("{{ 'x' * 10**9 }}");
    assert_eq!(e, TemplateError::OutOfFuel(Limits::default().fuel));
    let e = render_err("{{ 'x' * 10**7 }}");
    assert_eq!(e, TemplateError::OutputTooLarge(1 << 20));
    let e = render_err("{% for i in range(100000) %}{{ 'x' * 1000 }}{% endfor %}");
    assert_eq!(e, TemplateError::OutputTooLarge(1 << 20));
    // doubling a string: memory is charged to fuel before it is allocated
    let e = render_err(
        "{% set ns = namespace(s='x') %}{% for i in range(100) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}\
         {{ ns.s | length }}",
    );
    assert!(matches!(e, TemplateError::OutOfFuel(_)), "{e}");
    // doubling a list: minijinja 3.1.0 charges no fuel for it past 32 lazy concatenations,
    // but a list carried through a namespace is counted as it is stored
    let e = render_err(
        "{% set ns = namespace(l=[1]) %}{% for i in range(40) %}{% set ns.l = ns.l + ns.l %}\
         {% endfor %}{{ ns.l | length }}",
    );
    assert!(
        matches!(&e, TemplateError::Render(m) if m.contains("at most 1048576 items")),
        "{e}"
    );
    // storing a large nested list over and over (fuel counts only its outer length): the
    // items checked in one render are bounded
    let e = render_err(
        "{% set ns = namespace() %}{% set b = range(100000) | list %}\
         {% set l = [b, b, b, b, b, b, b, b, b] %}\
         {% for i in range(1000) %}{% set ns.x = l %}{% endfor %}",
    );
    assert!(
        matches!(&e, TemplateError::Render(m) if m.contains("in one render")),
        "{e}"
    );
}

#[test]
fn namespaces_cannot_refer_to_themselves() {
    // the fuzzer's LeakSanitizer report: a namespace stored in itself leaked on every render
    let artifact = include_bytes!(
        "../../../fuzz/artifacts/template/leak-95f62cb1d4ed1de09a4bff526700e467be9766fe"
    );
    let source = artifact.split(|&b| b == 0).next().unwrap();
    let source: &'static str = String::from_utf8(source.to_vec()).unwrap().leak();
    let e = render_err(source);
    assert!(
        matches!(&e, TemplateError::Render(m) if m.contains("a namespace cannot be stored")),
        "{e}"
    );
    // a lazy `ns|items` kept `ns`, and printing it recursed without end; now it is
    // copied into a list when stored
    let t = ChatTemplate::new(
        "{% set ns = namespace(a=1) %}{% set ns.i = ns | items %}{{ ns.i }}",
        "",
        "",
    )
    .unwrap();
    assert_eq!(t.render(&msgs(), None, false).unwrap(), "[('a', 1)]");
    let e = render_err("{% for m in messages %}{{ loop.changed(loop) }}{% endfor %}");
    assert!(
        matches!(&e, TemplateError::Syntax(m) if m.contains("`loop` can only be used")),
        "{e}"
    );
}

#[test]
fn deep_values_are_cut_before_they_overflow_the_stack() {
    // 100000 nested lists: dropping (or printing) them recursed 100000 deep
    let e = render_err(
        "{% set ns = namespace(l=none) %}{% for i in range(100000) %}{% set ns.l = [ns.l] %}\
         {% endfor %}{{ ns.l }}",
    );
    assert!(
        matches!(&e, TemplateError::Render(m) if m.contains("nested at most 256 deep")),
        "{e}"
    );
}

#[test]
fn syntax_errors_name_the_problem() {
    for source in [
        "{% for %}",
        "{{ unclosed",
        "{% endif %}",
        "{% if x %}no end",
        "{{ a | }}",
        "{% generation %}",
    ] {
        let e = render_err(source);
        assert!(
            matches!(&e, TemplateError::Syntax(m) if m.contains("line")),
            "{source}: {e}"
        );
    }
}

#[test]
fn undefined_values() {
    // as in jinja2, a bare undefined prints nothing...
    let t = ChatTemplate::new("[{{ nothere }}][{{ messages[0].nothere }}]", "", "").unwrap();
    assert_eq!(t.render(&msgs(), None, false).unwrap(), "[][]");
    // ...but using one is an error
    for source in [
        "{{ nothere.attr }}",
        "{{ nothere() }}",
        "{{ messages[5].role }}",
        "{{ 'a' + nothere }}",
    ] {
        let e = render_err(source);
        assert!(
            matches!(&e, TemplateError::Render(m) if m.contains("undefined") || m.contains("unknown")),
            "{e}"
        );
    }
}

#[test]
fn raise_exception_and_no_file_access() {
    let e = render_err("{{ raise_exception('Only user and assistant roles are supported!') }}");
    assert_eq!(
        e,
        TemplateError::Raised("Only user and assistant roles are supported!".into())
    );
    // built without multi-template support: these statements do not even parse
    for source in [
        "{% include '/etc/passwd' %}",
        "{% import 'x.j2' as x %}",
        "{% extends 'base' %}",
    ] {
        let e = render_err(source);
        assert!(
            matches!(&e, TemplateError::Syntax(m) if m.contains("unknown statement")),
            "{source}: {e}"
        );
    }
}

#[test]
fn bad_input() {
    let t = ChatTemplate::chatml("", "");
    let e = t
        .render(&msgs(), Some(&serde_json::json!({"not": "a list"})), false)
        .unwrap_err();
    assert!(matches!(e, TemplateError::Input(_)), "{e}");
}

#[test]
fn long_legitimate_chat_fits_the_limits() {
    let source = include_str!("data/qwen2.5-coder.jinja");
    let t = ChatTemplate::new(source, "<|endoftext|>", "<|im_end|>").unwrap();
    // 3000 turns of 300 bytes: about 0.95 MiB of prompt, just under the output cap
    let turn = "lorem ipsum dolor sit amet, ".repeat(11) + "consecte";
    assert_eq!(turn.len(), 316);
    let messages: Vec<Message> = (0..3000)
        .map(|i| Message::new(if i % 2 == 0 { "user" } else { "assistant" }, turn.clone()))
        .collect();
    let start = Instant::now();
    let out = t.render(&messages, None, true).unwrap();
    assert!(
        out.len() > 3000 * turn.len() && out.len() < 1 << 20,
        "{}",
        out.len()
    );
    assert!(
        start.elapsed() < Duration::from_secs(2),
        "{:?}",
        start.elapsed()
    );
}

#[test]
fn chat_template_is_shareable() {
    fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<ChatTemplate>();
}

/// `chat_template_kwargs` reach the template as variables, but never replace the standard ones.
#[test]
fn kwargs_add_variables_but_replace_none() {
    let t = ChatTemplate::new(
        "{{ messages | length }}|{{ enable_thinking }}|{{ add_generation_prompt }}",
        "",
        "",
    )
    .unwrap();
    let msgs = [Message::new("user", "hi")];
    let kw =
        serde_json::json!({"enable_thinking": false, "messages": [], "add_generation_prompt": "x"});
    let out = t.render_with(&msgs, None, true, kw.as_object()).unwrap();
    assert_eq!(out, "1|False|True"); // Python's spelling (pycompat), as HF renders it
    assert_eq!(t.render(&msgs, None, true).unwrap(), "1||True");
}
