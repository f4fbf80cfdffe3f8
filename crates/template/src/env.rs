//! The sandboxed minijinja environment, set up the way transformers sets up jinja2.

use std::borrow::Cow;
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};

use minijinja::syntax::SyntaxConfig;
use minijinja::value::Value;
use minijinja::{AutoEscape, Environment, Error, ErrorKind, Output, State, UndefinedBehavior};

use crate::{Limits, plain, pyjson, strftime};

/// The name the template is stored under (it shows in error messages).
pub const TEMPLATE_NAME: &str = "chat_template";

/// `i64::MIN` in the clock means "read the system clock".
pub const SYSTEM_CLOCK: i64 = i64::MIN;

/// Why a render stopped on purpose, found again in the error's source chain: the template
/// called `raise_exception(msg)`, or the namespace filter refused a value ([`plain`]; the
/// message then names the line rather than the filter call the rewrite added).
#[derive(Debug)]
pub enum Thrown {
    Raised(String),
    Refused(String),
}

impl Thrown {
    fn message(&self) -> &str {
        match self {
            Thrown::Raised(m) | Thrown::Refused(m) => m,
        }
    }

    /// The render error that carries it.
    pub fn into_error(self) -> Error {
        Error::new(ErrorKind::InvalidOperation, self.message().to_string()).with_source(self)
    }
}

impl std::fmt::Display for Thrown {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.message())
    }
}

impl std::error::Error for Thrown {}

/// jinja2's `trim_blocks`/`lstrip_blocks` on the default delimiters.
pub fn syntax() -> Result<SyntaxConfig, Error> {
    SyntaxConfig::builder()
        .trim_blocks(true)
        .lstrip_blocks(true)
        .keep_trailing_newline(false)
        .build()
}

/// Builds the environment: jinja2's `trim_blocks`/`lstrip_blocks`, lenient undefined
/// (like jinja2's default `Undefined`), no auto-escaping, Python string/dict methods,
/// transformers' `tojson`, `raise_exception` and `strftime_now`, fuel and recursion
/// limits, and the filter that keeps namespace attributes plain data ([`plain`]). There is
/// no loader (and no `include`/`import`/`extends`): nothing is read. `source` should
/// already have gone through [`rewrite_generation_tags`] and [`crate::setattr::guard`].
pub fn build(
    source: &str,
    limits: &Limits,
    clock: Arc<AtomicI64>,
) -> Result<Environment<'static>, Error> {
    let mut env = Environment::new();
    env.set_syntax(syntax()?);
    env.set_undefined_behavior(UndefinedBehavior::Lenient);
    env.set_auto_escape_callback(|_| AutoEscape::None);
    env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
    env.set_fuel(Some(limits.fuel));
    env.set_recursion_limit(limits.recursion_limit);
    env.set_formatter(python_formatter);
    env.set_debug(false);
    env.add_filter("tojson", pyjson::tojson);
    env.add_filter(plain::FILTER, plain::filter);
    env.add_function("raise_exception", |msg: Value| -> Result<Value, Error> {
        let msg = msg.as_str().map_or_else(|| msg.to_string(), str::to_string);
        Err(Thrown::Raised(msg).into_error())
    });
    env.add_function("strftime_now", move |fmt: &str| {
        let now = match clock.load(Ordering::Relaxed) {
            SYSTEM_CLOCK => strftime::now_unix(),
            fixed => fixed,
        };
        strftime::format(fmt, now)
    });
    env.add_template_owned(TEMPLATE_NAME, source.to_string())?;
    Ok(env)
}

/// Prints values the way jinja2 does (`str()` of the Python value). minijinja already
/// prints `True`, `None` and Python-style lists and dicts; floats differ (`1e+20`, not
/// `100000000000000000000.0`), so those are written with Python's repr.
fn python_formatter(out: &mut Output, state: &mut State, value: &Value) -> Result<(), Error> {
    if value.kind() == minijinja::value::ValueKind::Number
        && !value.is_integer()
        && let Ok(f) = f64::try_from(value.clone())
    {
        let s = match f {
            f if f.is_nan() => "nan".to_string(),
            f if f.is_infinite() => if f > 0.0 { "inf" } else { "-inf" }.to_string(),
            f => pyjson::float_repr(f),
        };
        return out
            .write_str(&s)
            .map_err(|_| Error::new(ErrorKind::WriteFailure, "write failed"));
    }
    minijinja::escape_formatter(out, state, value)
}

/// transformers' `{% generation %}...{% endgeneration %}` (AssistantTracker) only marks
/// assistant text for training masks; it renders its body unchanged. minijinja has no
/// such tag, so both are rewritten to `{% if true %}`/`{% endif %}`, which keep the
/// whitespace control (`-`, `+`) and `trim_blocks` behaviour of the original tags.
pub fn rewrite_generation_tags(source: &str) -> Cow<'_, str> {
    if !source.contains("generation") {
        return Cow::Borrowed(source);
    }
    let mut out = String::with_capacity(source.len());
    let mut rest = source;
    while let Some(start) = rest.find("{%") {
        out.push_str(&rest[..start]);
        let tag = &rest[start..];
        let after_open = tag[2..].strip_prefix(['-', '+']).unwrap_or(&tag[2..]);
        let body = after_open.trim_start();
        let keyword = ["endgeneration", "generation"].into_iter().find(|k| {
            body.strip_prefix(k).is_some_and(|r| {
                r.trim_start()
                    .trim_start_matches(['-', '+'])
                    .starts_with("%}")
            })
        });
        match keyword {
            Some(k) => {
                let head_len = tag.len() - body.len();
                out.push_str(&tag[..head_len]);
                out.push_str(if k == "generation" {
                    "if true"
                } else {
                    "endif"
                });
                rest = &body[k.len()..];
            }
            None => {
                out.push_str("{%");
                rest = &tag[2..];
            }
        }
    }
    out.push_str(rest);
    Cow::Owned(out)
}

#[cfg(test)]
mod tests {
    use super::rewrite_generation_tags;

    #[test]
    fn generation_tags_become_if_true() {
        let src =
            "{% for m in messages %}{%- generation -%}{{ m }}{% endgeneration +%}{% endfor %}";
        assert_eq!(
            rewrite_generation_tags(src),
            "{% for m in messages %}{%- if true -%}{{ m }}{% endif +%}{% endfor %}"
        );
        let untouched = "{% set generation = 1 %}{{ generation }}{% if x %}generation{% endif %}";
        assert_eq!(rewrite_generation_tags(untouched), untouched);
    }
}
