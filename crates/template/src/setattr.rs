//! Keeps a template from building reference cycles, which would leak memory on every render.
//!
//! minijinja's values are reference counted. Only two kinds of value change after they are
//! made, so only they can close a cycle:
//! - a namespace, through `{% set ns.attr = value %}` (`{% set ns.x = ns %}`,
//!   `{% set ns.l = [ns] %}`, `{% set ns.i = ns|items %}`, ...);
//! - a loop object, which keeps the arguments of `loop.changed(...)` and the items it
//!   iterates (`{{ loop.changed(loop) }}`, or a loop stored in a namespace it iterates).
//!
//! Two rules close both doors. `{% set a.b = expr %}` is rewritten (from minijinja's own
//! tokens, so strings and comments are never touched) to `{% set a.b = ((expr))|F %}`, and
//! `{% set a.b | f %}...{% endset %}` to `{% set a.b | f|F %}`, where `F` is [`plain::FILTER`]:
//! it lets only plain data through (see [`crate::plain`]), never a namespace or a loop.
//! Templates cannot define or shadow filters, so the check cannot be bypassed; `set` is the
//! only statement that assigns to an attribute. And `loop` may appear only as `loop.name`,
//! `loop[...]`, `loop(...)` (a recursive loop) or `loop is ...`: used as a value
//! (`loop.changed(loop)`, `[loop]`, `f(loop)`) it is refused when the template is built.
//! Macros do not count: their captured variables live in the render state, not in the value.
//!
//! The rewrite adds no line breaks, so error lines stay right.

use minijinja::machinery::{Span, Token, tokenize};
use minijinja::syntax::SyntaxConfig;

use crate::plain;

/// Rewrites every `{% set %}` to an attribute so that its value passes [`plain::FILTER`],
/// and refuses a bare `loop`. A source that does not even lex is returned as it is: the
/// compiler reports that error.
pub fn guard(source: &str, syntax: SyntaxConfig) -> Result<String, String> {
    let mut tokens = Vec::new();
    for token in tokenize(source, false, syntax) {
        match token {
            Ok(t) => tokens.push(t),
            Err(_) => return Ok(source.to_string()),
        }
    }
    check_loop_uses(&tokens)?;
    let inserts = set_attr_inserts(&tokens);
    let extra: usize = inserts.iter().map(|(_, s)| s.len()).sum();
    let mut out = String::with_capacity(source.len() + extra);
    let mut at = 0;
    for (offset, text) in inserts {
        out.push_str(&source[at..offset]);
        out.push_str(&text);
        at = offset;
    }
    out.push_str(&source[at..]);
    Ok(out)
}

/// What to insert where (byte offsets in ascending order) so that every value assigned
/// to an attribute goes through the filter.
fn set_attr_inserts(tokens: &[(Token<'_>, Span)]) -> Vec<(usize, String)> {
    let mut inserts = Vec::new();
    for (i, window) in tokens.windows(2).enumerate() {
        if !matches!(window, [(Token::BlockStart, _), (Token::Ident("set"), _)]) {
            continue;
        }
        // the target: identifiers, dots, commas and parentheses up to `=`, `|` or `%}`
        let start = i + 2;
        let Some(end) = tokens[start..]
            .iter()
            .position(|(t, _)| matches!(t, Token::Assign | Token::Pipe | Token::BlockEnd))
            .map(|p| start + p)
        else {
            continue;
        };
        if !tokens[start..end]
            .iter()
            .any(|(t, _)| matches!(t, Token::Dot))
        {
            continue;
        }
        let Some(block_end) = tokens[end..]
            .iter()
            .position(|(t, _)| matches!(t, Token::BlockEnd))
            .map(|p| end + p)
        else {
            continue;
        };
        let last = tokens[block_end - 1].1.end_offset as usize;
        if matches!(tokens[end].0, Token::Assign) {
            if block_end == end + 1 {
                continue; // `{% set a.b = %}`: a syntax error the compiler reports
            }
            inserts.push((tokens[end + 1].1.start_offset as usize, "((".to_string()));
            inserts.push((last, format!("))|{}", plain::FILTER)));
        } else {
            inserts.push((last, format!("|{}", plain::FILTER)));
        }
    }
    inserts
}

/// Refuses `loop` used as a value (see the module docs).
fn check_loop_uses(tokens: &[(Token<'_>, Span)]) -> Result<(), String> {
    for (i, (token, span)) in tokens.iter().enumerate() {
        if !matches!(token, Token::Ident("loop")) {
            continue;
        }
        let after_dot = i > 0 && matches!(tokens[i - 1].0, Token::Dot);
        let allowed_next = matches!(
            tokens.get(i + 1).map(|(t, _)| t),
            Some(Token::Dot | Token::BracketOpen | Token::ParenOpen | Token::Ident("is"))
        );
        if !after_dot && !allowed_next {
            return Err(format!(
                "`loop` can only be used as loop.name, loop[...], loop(...) or `loop is ...`, \
                 not as a value (line {})",
                span.start_line
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::guard;
    use crate::env::syntax;

    fn rewrite(source: &str) -> String {
        guard(source, syntax().unwrap()).unwrap()
    }

    #[test]
    fn attribute_sets_go_through_the_filter() {
        assert_eq!(
            rewrite("{% set ns.x = ns %}{%- set ns.y = '%}' ~ a, b -%}"),
            "{% set ns.x = ((ns))|molla_plain_value %}\
             {%- set ns.y = (('%}' ~ a, b))|molla_plain_value -%}"
        );
        assert_eq!(
            rewrite("{% set ns.a %}x{% endset %}{% set (ns.b, c) | upper %}y{% endset %}"),
            "{% set ns.a|molla_plain_value %}x{% endset %}\
             {% set (ns.b, c) | upper|molla_plain_value %}y{% endset %}"
        );
        let untouched = "{% set x = ns %}{{ ns.x }}{% raw %}{% set ns.x = ns %}{% endraw %}\
                         {# {% set ns.x = ns %} #}{{ '{% set ns.x = ns %}' }}";
        assert_eq!(rewrite(untouched), untouched);
        // no lexer: left to the compiler's error
        assert_eq!(rewrite("{{ 'open"), "{{ 'open");
    }

    #[test]
    fn loop_only_as_loop_dot_something() {
        for ok in [
            "{% for m in x recursive %}{{ loop.index }}{{ loop['first'] }}{{ loop(m.c) }}\
             {{ loop.changed(m) }}{{ loop is defined }}{{ ns.loop }}{{ 'loop' }}{% endfor %}",
            "{% set ns.loop = 1 %} loop text {# loop #}",
        ] {
            guard(ok, syntax().unwrap()).unwrap();
        }
        for bad in [
            "{% for x in [1] %}{{ loop.changed(loop) }}{% endfor %}",
            "{% for x in [1] %}\n{% set ns.l = loop %}{% endfor %}",
            "{% for x in [1] %}{{ [loop] }}{% endfor %}",
            "{% for x in [1] %}{{ loop|length }}{% endfor %}",
            "{{ f(loop=1) }}",
        ] {
            let e = guard(bad, syntax().unwrap()).unwrap_err();
            assert!(e.contains("`loop` can only be used"), "{bad}: {e}");
        }
        let e = guard(
            "\n{% for x in [1] %}\n{{ [loop] }}{% endfor %}",
            syntax().unwrap(),
        );
        assert!(e.unwrap_err().ends_with("(line 3)"));
    }
}
