//! `tojson` as transformers defines it (Python's `json.dumps` with `ensure_ascii=False`),
//! and Python's `repr` of floats, which both `json.dumps` and `{{ x }}` use.
//!
//! minijinja's own `tojson` writes compact JSON with HTML-escaped `<>&'`; HF templates
//! were written against `json.dumps`, whose `", "`/`": "` separators the models saw.

use minijinja::value::{Kwargs, Value, ValueKind};
use minijinja::{Error, ErrorKind};

/// Deeper values are refused (Python would hit its recursion limit).
const MAX_DEPTH: usize = 512;

/// The `tojson` filter: `x | tojson(ensure_ascii=False, indent=None, separators=None,
/// sort_keys=False)`, byte-compatible with `json.dumps`.
pub fn tojson(value: &Value, kwargs: Kwargs) -> Result<String, Error> {
    let ensure_ascii = kwargs.get::<Option<bool>>("ensure_ascii")?.unwrap_or(false);
    let sort_keys = kwargs.get::<Option<bool>>("sort_keys")?.unwrap_or(false);
    let indent = match kwargs.get::<Option<Value>>("indent")? {
        None => None,
        Some(v) if v.is_none() => None,
        Some(v) if v.as_str().is_some() => v.as_str().map(str::to_string),
        Some(v) => match v.as_i64() {
            Some(n) => Some(" ".repeat(n.clamp(0, 64) as usize)),
            None => {
                return Err(Error::new(
                    ErrorKind::InvalidOperation,
                    "tojson: indent must be an int or str",
                ));
            }
        },
    };
    let (item_sep, key_sep) = match kwargs.get::<Option<Value>>("separators")? {
        Some(v) if !v.is_none() => {
            let parts: Vec<String> = v
                .try_iter()?
                .map(|p| p.as_str().map(str::to_string))
                .collect::<Option<_>>()
                .filter(|p: &Vec<String>| p.len() == 2)
                .ok_or_else(|| {
                    Error::new(
                        ErrorKind::InvalidOperation,
                        "tojson: separators must be two strings",
                    )
                })?;
            (parts[0].clone(), parts[1].clone())
        }
        _ if indent.is_some() => (",".to_string(), ": ".to_string()),
        _ => (", ".to_string(), ": ".to_string()),
    };
    kwargs.assert_all_used()?;
    let mut w = Writer {
        out: String::new(),
        ensure_ascii,
        sort_keys,
        indent,
        item_sep,
        key_sep,
    };
    w.value(value, 0)?;
    Ok(w.out)
}

struct Writer {
    out: String,
    ensure_ascii: bool,
    sort_keys: bool,
    indent: Option<String>,
    item_sep: String,
    key_sep: String,
}

impl Writer {
    fn value(&mut self, v: &Value, depth: usize) -> Result<(), Error> {
        if depth > MAX_DEPTH {
            return Err(Error::new(
                ErrorKind::InvalidOperation,
                "tojson: value nested too deeply",
            ));
        }
        match v.kind() {
            ValueKind::None => self.out.push_str("null"),
            ValueKind::Bool => self
                .out
                .push_str(if v.is_true() { "true" } else { "false" }),
            ValueKind::Number => self.number(v),
            ValueKind::String => self.string(v.as_str().unwrap_or_default()),
            ValueKind::Seq | ValueKind::Iterable => {
                let items: Vec<Value> = v.try_iter()?.collect();
                self.container('[', ']', items.len(), depth, |w, i| {
                    w.value(&items[i], depth + 1)
                })?;
            }
            ValueKind::Map => {
                let mut entries: Vec<(String, Value)> = Vec::new();
                for key in v.try_iter()? {
                    let item = v.get_item(&key)?;
                    entries.push((key_string(&key)?, item));
                }
                if self.sort_keys {
                    entries.sort_by(|a, b| a.0.cmp(&b.0));
                }
                self.container('{', '}', entries.len(), depth, |w, i| {
                    w.string(&entries[i].0);
                    w.out.push_str(&w.key_sep.clone());
                    w.value(&entries[i].1, depth + 1)
                })?;
            }
            kind => {
                return Err(Error::new(
                    ErrorKind::InvalidOperation,
                    format!("tojson: a value of type {kind} is not JSON serializable"),
                ));
            }
        }
        Ok(())
    }

    /// Writes `open items close` the way `json.dumps` lays them out.
    fn container(
        &mut self,
        open: char,
        close: char,
        len: usize,
        depth: usize,
        mut item: impl FnMut(&mut Self, usize) -> Result<(), Error>,
    ) -> Result<(), Error> {
        self.out.push(open);
        if len == 0 {
            self.out.push(close);
            return Ok(());
        }
        let newline = |w: &Self, level: usize| {
            w.indent
                .as_ref()
                .map(|ind| format!("\n{}", ind.repeat(level)))
        };
        let inner = newline(self, depth + 1);
        if let Some(nl) = &inner {
            self.out.push_str(nl);
        }
        for i in 0..len {
            if i > 0 {
                self.out.push_str(&self.item_sep.clone());
                if let Some(nl) = &inner {
                    self.out.push_str(nl);
                }
            }
            item(self, i)?;
        }
        if let Some(nl) = newline(self, depth) {
            self.out.push_str(&nl);
        }
        self.out.push(close);
        Ok(())
    }

    fn number(&mut self, v: &Value) {
        if v.is_integer() {
            match i128::try_from(v.clone()) {
                Ok(i) => self.out.push_str(&i.to_string()),
                Err(_) => self.out.push_str(&v.to_string()),
            }
        } else {
            let f = f64::try_from(v.clone()).unwrap_or(f64::NAN);
            self.out.push_str(&match f {
                f if f.is_nan() => "NaN".to_string(),
                f if f.is_infinite() => if f > 0.0 { "Infinity" } else { "-Infinity" }.to_string(),
                f => float_repr(f),
            });
        }
    }

    fn string(&mut self, s: &str) {
        self.out.push('"');
        for c in s.chars() {
            match c {
                '"' => self.out.push_str("\\\""),
                '\\' => self.out.push_str("\\\\"),
                '\n' => self.out.push_str("\\n"),
                '\r' => self.out.push_str("\\r"),
                '\t' => self.out.push_str("\\t"),
                '\u{8}' => self.out.push_str("\\b"),
                '\u{c}' => self.out.push_str("\\f"),
                c if (c as u32) < 0x20
                    || (self.ensure_ascii && !c.is_ascii())
                    || (self.ensure_ascii && c == '\u{7f}') =>
                {
                    let mut buf = [0u16; 2];
                    for unit in c.encode_utf16(&mut buf) {
                        self.out.push_str(&format!("\\u{unit:04x}"));
                    }
                }
                c => self.out.push(c),
            }
        }
        self.out.push('"');
    }
}

/// A map key as `json.dumps` writes it: strings as they are, numbers, booleans and
/// `None` converted, anything else refused.
fn key_string(key: &Value) -> Result<String, Error> {
    match key.kind() {
        ValueKind::String => Ok(key.as_str().unwrap_or_default().to_string()),
        ValueKind::None => Ok("null".to_string()),
        ValueKind::Bool => Ok(if key.is_true() { "true" } else { "false" }.to_string()),
        ValueKind::Number => {
            let mut w = Writer {
                out: String::new(),
                ensure_ascii: false,
                sort_keys: false,
                indent: None,
                item_sep: String::new(),
                key_sep: String::new(),
            };
            w.number(key);
            Ok(w.out)
        }
        kind => Err(Error::new(
            ErrorKind::InvalidOperation,
            format!("tojson: keys must be str, not {kind}"),
        )),
    }
}

/// Python's `repr(float)` for a finite `f`: the shortest round-trip digits, in fixed
/// notation when the decimal exponent is in `-4..16`, else as `1.5e+16` / `1e-05`.
pub fn float_repr(f: f64) -> String {
    let sci = format!("{:e}", f.abs()); // shortest round-trip digits, e.g. "1.5e-7"
    let (mantissa, exp) = sci.split_once('e').unwrap_or((&sci, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    let digits: String = mantissa.chars().filter(|c| c.is_ascii_digit()).collect();
    let sign = if f.is_sign_negative() { "-" } else { "" };
    if (-4..16).contains(&exp) {
        if exp >= 0 {
            let point = exp as usize + 1;
            let (int, frac) = if digits.len() > point {
                (digits[..point].to_string(), digits[point..].to_string())
            } else {
                (format!("{digits:0<point$}"), "0".to_string())
            };
            format!("{sign}{int}.{frac}")
        } else {
            format!("{sign}0.{}{digits}", "0".repeat((-exp - 1) as usize))
        }
    } else {
        let rest = &digits[1..];
        let dot = if rest.is_empty() {
            String::new()
        } else {
            format!(".{rest}")
        };
        let esign = if exp < 0 { '-' } else { '+' };
        format!("{sign}{}{dot}e{esign}{:02}", &digits[..1], exp.abs())
    }
}

#[cfg(test)]
mod tests {
    use super::float_repr;

    #[test]
    fn floats_like_python() {
        let cases = [
            (0.0, "0.0"),
            (-0.0, "-0.0"),
            (1.0, "1.0"),
            (2.5, "2.5"),
            (0.1, "0.1"),
            (1e-4, "0.0001"),
            (1e-5, "1e-05"),
            (1.5e-7, "1.5e-07"),
            (123456789.125, "123456789.125"),
            (1e15, "1000000000000000.0"),
            (1234567890123456.0, "1234567890123456.0"),
            (1e16, "1e+16"),
            (1e20, "1e+20"),
            (-2.5e100, "-2.5e+100"),
            (f64::MAX, "1.7976931348623157e+308"),
            (5e-324, "5e-324"),
        ];
        for (f, want) in cases {
            assert_eq!(float_repr(f), want, "{f:e}");
        }
    }
}
