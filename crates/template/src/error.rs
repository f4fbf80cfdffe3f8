//! The one error type of this crate.

/// Why a chat template could not be built or rendered. Every message is one line.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TemplateError {
    /// The template does not parse.
    #[error("chat template syntax error: {0}")]
    Syntax(String),
    /// The template called `raise_exception(msg)`, e.g. for roles that do not alternate.
    #[error("chat template raised an exception: {0}")]
    Raised(String),
    /// The render used up its fuel: it loops too long or builds too much data.
    #[error("chat template ran out of fuel (limit {0}): too many steps or too much data")]
    OutOfFuel(u64),
    /// The output grew past the cap.
    #[error("chat template output exceeds {0} bytes")]
    OutputTooLarge(usize),
    /// Anything else that failed while rendering (undefined attribute, bad operand
    /// types, recursion limit, ...), with minijinja's description and line.
    #[error("chat template render error: {0}")]
    Render(String),
    /// The messages or tools given cannot be passed to a template.
    #[error("invalid chat input: {0}")]
    Input(String),
}

/// One line describing a minijinja error: what failed, the line, and the source text
/// it points at (trimmed to 80 bytes).
pub(crate) fn describe(e: &minijinja::Error, with_kind: bool, source: &str) -> String {
    let mut s = match (with_kind, e.detail()) {
        (true, Some(detail)) => format!("{}: {detail}", e.kind()),
        (false, Some(detail)) => detail.to_string(),
        (_, None) => e.kind().to_string(),
    };
    if let Some(line) = e.line() {
        s.push_str(&format!(" (line {line}"));
        let snippet = e.range().and_then(|r| source.get(r));
        if let Some(snippet) = snippet.map(one_line).filter(|t| !t.is_empty()) {
            let cut = (0..=snippet.len().min(80))
                .rev()
                .find(|&i| snippet.is_char_boundary(i))
                .unwrap_or(0);
            let more = if cut < snippet.len() { "..." } else { "" };
            s.push_str(&format!(": `{}{more}`", &snippet[..cut]));
        }
        s.push(')');
    }
    one_line(s)
}

/// Flattens a message onto one line.
pub(crate) fn one_line(s: impl std::fmt::Display) -> String {
    s.to_string()
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
}
