//! Logs of the long-running commands (`farmem serve`), through `tracing`:
//! a level (`--log-level`, else `FARMEM_LOG`), and one line per event on
//! stderr, as text or as JSON for collectors. Each line carries the fields
//! of the spans it happened in: the server's address, the peer and the
//! session.

use anyhow::Result;
use std::fmt;
use tracing::{Event, Subscriber};
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::time::{FormatTime, SystemTime};
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields, FormattedFields};
use tracing_subscriber::registry::LookupSpan;

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// `farmem serve: TIME LEVEL message server=… peer=… session=…`
    Text,
    /// One JSON object per line: timestamp, level, fields, spans.
    Json,
}

/// The text line: the command's name first, as its other messages have.
struct Line {
    prefix: &'static str,
}

impl<S, N> FormatEvent<S, N> for Line
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(
        &self,
        ctx: &FmtContext<'_, S, N>,
        mut w: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        write!(w, "{}: ", self.prefix)?;
        SystemTime.format_time(&mut w)?;
        write!(w, " {:>5} ", event.metadata().level())?;
        ctx.field_format().format_fields(w.by_ref(), event)?;
        if let Some(scope) = ctx.event_scope() {
            for span in scope.from_root() {
                let ext = span.extensions();
                if let Some(f) = ext.get::<FormattedFields<N>>() {
                    if !f.is_empty() {
                        write!(w, " {f}")?;
                    }
                }
            }
        }
        writeln!(w)
    }
}

/// Log at `level` (one of `farmem_runtime::config::LOG_LEVELS`) in
/// `format` on stderr, from now on.
pub fn init(prefix: &'static str, level: &str, format: LogFormat) -> Result<()> {
    let filter: tracing_subscriber::filter::LevelFilter = level.parse().map_err(|_| {
        anyhow::anyhow!(
            "log level {level:?}: expected one of {}",
            farmem_runtime::config::LOG_LEVELS.join(", ")
        )
    })?;
    let b = tracing_subscriber::fmt()
        .with_max_level(filter)
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Text => b.event_format(Line { prefix }).try_init(),
        LogFormat::Json => b
            .json()
            .with_current_span(false)
            .with_span_list(true)
            .try_init(),
    }
    .map_err(|e| anyhow::anyhow!("cannot start logging: {e}"))
}
