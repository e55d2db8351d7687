//! The process's log: lines to stderr, in text or JSON, under one filter.
//!
//! The filter is `SLUICE_LOG`, else `RUST_LOG`, else [`DEFAULT_LOG_FILTER`] (INFO, with s3s's
//! own per-error lines off: `sluice_serve::request` logs each request once, at the level its
//! outcome deserves). A variable that is set must parse: a typo in a filter is refused, not
//! silently replaced by the default. Text carries colour escapes only when stderr is a
//! terminal and `NO_COLOR` is unset, so a log written to a file or a pipe is plain text; JSON
//! (one object a line, the event's fields at its top level) is for log collectors.

use std::io::IsTerminal as _;

use anyhow::Context as _;
use sluice_serve::DEFAULT_LOG_FILTER;
use tracing::Dispatch;
use tracing_subscriber::EnvFilter;
use tracing_subscriber::fmt::MakeWriter;

/// How log lines are written.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// Human-readable lines (coloured only on a terminal).
    #[default]
    Text,
    /// One JSON object a line, for log collectors.
    Json,
}

/// The variables that set the filter, the first set one winning.
const FILTER_VARS: [&str; 2] = ["SLUICE_LOG", "RUST_LOG"];

/// Installs the process's log on stderr.
pub fn init(format: Format) -> anyhow::Result<()> {
    let filter = filter(|var| std::env::var(var).ok())?;
    let ansi = std::io::stderr().is_terminal()
        && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty());
    tracing::dispatcher::set_global_default(dispatch(format, ansi, filter, std::io::stderr))
        .context("a log was already installed")
}

/// The filter the variables (read by `var`) name, or the default when none is set (or set
/// empty).
fn filter(var: impl Fn(&str) -> Option<String>) -> anyhow::Result<EnvFilter> {
    for name in FILTER_VARS {
        if let Some(value) = var(name).filter(|v| !v.trim().is_empty()) {
            return EnvFilter::try_new(&value)
                .with_context(|| format!("{name}={value:?} is not a log filter"));
        }
    }
    Ok(EnvFilter::new(DEFAULT_LOG_FILTER))
}

/// The log: `format`, colour escapes only if `ansi` (text only), `filter`, into `writer`.
fn dispatch<W>(format: Format, ansi: bool, filter: EnvFilter, writer: W) -> Dispatch
where
    W: for<'w> MakeWriter<'w> + Send + Sync + 'static,
{
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(writer);
    match format {
        Format::Text => Dispatch::new(builder.with_ansi(ansi).finish()),
        Format::Json => Dispatch::new(builder.json().flatten_event(true).finish()),
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use super::*;

    /// A log in memory.
    #[derive(Clone, Default)]
    struct Buffer(Arc<Mutex<Vec<u8>>>);

    impl std::io::Write for Buffer {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().expect("buffer").extend_from_slice(buf);
            Ok(buf.len())
        }

        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    impl<'w> MakeWriter<'w> for Buffer {
        type Writer = Buffer;

        fn make_writer(&'w self) -> Buffer {
            self.clone()
        }
    }

    /// What a request's lines look like under `format`, `ansi` and the default filter: an
    /// s3s error line (dropped by the default), then one of ours inside a request span.
    fn logged(format: Format, ansi: bool) -> String {
        let buffer = Buffer::default();
        let filter = filter(|_| None).expect("default filter");
        let dispatch = dispatch(format, ansi, filter, buffer.clone());
        tracing::dispatcher::with_default(&dispatch, || {
            let span = tracing::error_span!("request", id = %"0123456789ABCDEF", tenant = %"alice");
            let _entered = span.enter();
            tracing::error!(target: "s3s::ops", "op returns error");
            tracing::error!(status = 500u16, code = "InternalError", "request failed");
        });
        String::from_utf8(buffer.0.lock().expect("buffer").clone()).expect("utf-8")
    }

    #[test]
    fn a_log_not_on_a_terminal_holds_no_escape_codes() {
        let plain = logged(Format::Text, false);
        assert!(plain.contains("request failed"), "{plain}");
        assert!(!plain.contains('\x1b'), "{plain:?}");
        // The same line for a terminal is coloured: the check above can see escapes.
        assert!(logged(Format::Text, true).contains("\x1b["));
    }

    #[test]
    fn the_default_filter_drops_s3s_lines_and_keeps_ours_with_the_request() {
        let text = logged(Format::Text, false);
        assert_eq!(text.lines().count(), 1, "{text}");
        assert!(!text.contains("op returns error"), "{text}");
        assert!(
            text.contains("request{id=0123456789ABCDEF tenant=alice}"),
            "{text}"
        );
    }

    #[test]
    fn json_lines_are_objects_with_the_event_fields_and_the_request_span() {
        let json = logged(Format::Json, true);
        assert!(!json.contains('\x1b'), "{json:?}");
        let lines: Vec<serde_json::Value> = json
            .lines()
            .map(|l| serde_json::from_str(l).expect("a JSON object"))
            .collect();
        assert_eq!(lines.len(), 1, "{json}");
        let line = &lines[0];
        assert_eq!(line["level"], "ERROR", "{line}");
        assert_eq!(line["message"], "request failed", "{line}");
        assert_eq!(line["code"], "InternalError", "{line}");
        assert_eq!(line["span"]["tenant"], "alice", "{line}");
        assert_eq!(line["span"]["id"], "0123456789ABCDEF", "{line}");
    }

    #[test]
    fn sluice_log_wins_over_rust_log_and_a_bad_filter_is_refused() {
        let vars = |sluice: Option<&str>, rust: Option<&str>| {
            let (sluice, rust) = (sluice.map(str::to_owned), rust.map(str::to_owned));
            move |name: &str| match name {
                "SLUICE_LOG" => sluice.clone(),
                "RUST_LOG" => rust.clone(),
                _ => None,
            }
        };
        let shown = |f: EnvFilter| f.to_string();
        assert_eq!(
            shown(filter(vars(Some("debug"), Some("warn"))).expect("filter")),
            "debug"
        );
        assert_eq!(
            shown(filter(vars(None, Some("warn"))).expect("filter")),
            "warn"
        );
        assert_eq!(
            shown(filter(vars(Some(""), None)).expect("filter")),
            shown(EnvFilter::new(DEFAULT_LOG_FILTER))
        );
        let err = filter(vars(Some("info,s3s=loud"), None)).expect_err("bad filter");
        assert!(err.to_string().contains("SLUICE_LOG"), "{err}");
    }
}
